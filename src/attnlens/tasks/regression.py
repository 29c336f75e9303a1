"""Regression: one real-valued output, explained as the predicted value itself."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pyarrow as pa

from attnlens.errors import InputError
from attnlens.tasks.task import REGISTRY, Outcome, Task, at_least_float32, first_bad_row, no_empty_cell


def regression_metrics(labels: np.ndarray, values: np.ndarray) -> dict:
    """Mean squared and absolute error, and Pearson's and Spearman's correlation of the predicted with the true
    values (``None`` where a side is constant: a correlation is undefined there)."""
    from scipy import stats  # noqa: PLC0415 (scipy.stats: 1 s to import; only predict and train compute these)

    y, v = np.asarray(labels, dtype=np.float64), np.asarray(values, dtype=np.float64)
    err = v - y
    constant = len(y) < 2 or np.ptp(y) == 0 or np.ptp(v) == 0
    return {
        "mse": float(np.mean(err**2)),
        "rmse": float(math.sqrt(np.mean(err**2))),
        "mae": float(np.mean(np.abs(err))),
        "pearson": None if constant else float(stats.pearsonr(v, y).statistic),
        "spearman": None if constant else float(stats.spearmanr(v, y).statistic),
    }


class Regression(Task):
    """One real-valued output (a score, a grade, a count): ``F`` is the predicted value itself, the head's one
    logit, so IG's completeness is ``Σ scores = F(x) − F(x′)`` in the target's units."""

    name = "regression"
    label = "regression"
    problem_type = "regression"
    explains = "the predicted value (the head's one output)"
    readout_label = "predicted value"
    outputs_column = "value"
    target_kinds = ("predicted", "true")  # the one output, however it is asked for
    role_pattern = re.compile(r"largest_overestimate|largest_underestimate|closest|highest_predicted|random")
    headline_metrics = (("MSE", "mse", False), ("Pearson r", "pearson", True), ("Spearman rho", "spearman", True))
    #: quantile strata of the split: each quarter of the target's range is split as a class would be
    STRATA = 4
    folders_refused = "class folders hold classes, not values"
    classes_refused = "its one output is the value"
    topology_refused = "it compares the attention of the classes"

    def resolve_labels(self, labels, ids, classes, where, field):
        no_empty_cell(labels, ids, where, field, "a target value")
        return pd.Series(self._values(labels, ids, where, field), index=labels.index), ()

    NO_LABEL = float("nan")

    def parse_label(self, value, names):
        return float(self._values(pd.Series([value], dtype=object), None, "label", str(value))[0])

    def check_labels(self, labels, classes, where, field):
        return self._values(labels, None, where, field)

    @staticmethod
    def _values(labels: pd.Series, ids: pd.Series | None, where: str, field: str) -> np.ndarray:
        """Finite float64 targets; a cell that is no number, or NaN or infinite, names its row."""
        if labels.dtype == bool:
            raise InputError(where, field, "expected real-valued targets, got booleans (a classification's labels)")
        values = pd.to_numeric(labels.map(lambda v: v.strip() if isinstance(v, str) else v), errors="coerce")
        values = values.to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            i = first_bad_row(bad)
            example = f" (example {ids.iloc[i]!r})" if ids is not None else ""
            cell = labels.iloc[i]
            shown = repr(cell) if isinstance(cell, str) else str(cell)
            raise InputError(where, field, f"expected a finite number in every row, row {i + 1}{example} has {shown}")
        return values

    def strata(self, labels, where, field):
        values = np.asarray(labels, dtype=np.float64)
        ranks = np.argsort(np.argsort(values, kind="stable"), kind="stable")
        return (ranks * self.STRATA // max(1, len(values))).astype(np.int64)

    def check_splits(self, labels, is_train, classes, where, field):
        train = np.asarray(labels, dtype=np.float64)[is_train]
        if len(np.unique(train)) < 2:
            raise InputError(
                where,
                field,
                f"expected targets that vary in the training split, all are {train[0] if len(train) else 'absent'}",
            )

    def summary(self, labels, classes):
        values = np.asarray(labels, dtype=np.float64)
        if not len(values):
            return {"n": 0}
        return {
            "n": len(values),
            "mean": float(values.mean()),
            "std": float(values.std()),
            "min": float(values.min()),
            "max": float(values.max()),
        }

    def label_type(self):
        return pa.float64()

    def output_names(self, classes):
        return ("value",)

    def n_outputs(self, n_classes):
        return 1

    def training_labels(self, labels):
        return np.asarray(labels, dtype=np.float32)

    def eval_loss(self, logits, labels, encoded=None):
        import torch  # noqa: PLC0415 (as Classification.eval_loss)

        labels = torch.from_numpy(self.training_labels(labels))
        return float(torch.nn.functional.mse_loss(torch.from_numpy(logits[:, 0]), labels).item())

    def readout(self, logits):
        return at_least_float32(logits)

    def outputs(self, logits):
        return np.asarray(logits, dtype=np.float64).reshape(len(logits), -1)[:, :1]

    def targets(self, kind, label, outputs):
        if kind not in self.target_kinds:
            raise InputError(
                "config",
                "attribution.target",
                f"a regression has one output, explained for {list(self.target_kinds)}; {kind!r} names a class",
            )
        return (0,)

    def predictions(self, examples, logits, encoded=None):
        values = self.outputs(logits)
        return pd.DataFrame(
            {
                "example_id": examples["example_id"].to_numpy(),
                "label": examples["label"].to_numpy().astype("float64"),
                "pred": values[:, 0],
                "logits": list(np.asarray(logits, dtype=np.float32)),
                "value": list(values.astype(np.float32)),
            }
        )

    def metrics(self, labels, logits, encoded=None, names=()):
        return regression_metrics(labels, self.outputs(logits)[:, 0])

    def outcome(self, label, outputs, target, names):
        value = float(outputs[0])
        return Outcome(
            label=None if label is None else f"{float(label):.4g}",
            prediction=f"{value:.4g}",
            confidence=None,
            outputs={names[0]: value},
            explained=names[0],
        )

    def roles(self, predictions, seed, names=()):
        labels = predictions["label"].to_numpy(dtype=np.float64)
        preds = predictions["pred"].to_numpy(dtype=np.float64)
        err = preds - labels
        over, under = int(np.argmax(err)), int(np.argmin(err))
        out: list[tuple[str, int | None, str]] = [
            ("largest_overestimate", over, "predicted above its true value by the most")
            if err[over] > 0
            else ("largest_overestimate", None, "no test example is predicted above its true value"),
            ("largest_underestimate", under, "predicted below its true value by the most")
            if err[under] < 0
            else ("largest_underestimate", None, "no test example is predicted below its true value"),
            ("closest", int(np.argmin(np.abs(err))), "the smallest absolute error"),
            ("highest_predicted", int(np.argmax(preds)), "the highest predicted value"),
        ]
        rng = np.random.default_rng(seed)
        out.append(("random", int(rng.integers(len(err))), f"seeded draw (seed {seed}) of a test example"))
        return out


REGRESSION = REGISTRY.register(Regression())
