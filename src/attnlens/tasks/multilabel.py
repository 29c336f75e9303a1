"""Multi-label classification: one sigmoid output per label, each label explained on its own."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from attnlens.errors import InputError
from attnlens.tasks.task import REGISTRY, Outcome, Task, at_least_float32


def sigmoid(logits: np.ndarray) -> np.ndarray:
    """Element-wise logistic function, stable for large ``|x|`` (no overflow of ``exp``)."""
    x = np.asarray(logits, dtype=np.float64)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def auroc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Area under the ROC curve of ``scores`` for the ``positive`` examples: the Mann–Whitney U statistic over
    ``n₊·n₋`` (ties count one half, through mid-ranks); ``None`` without a positive or a negative example."""
    from scipy.stats import rankdata  # noqa: PLC0415 (as regression_metrics)

    positive = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if not n_pos or not n_neg:
        return None
    ranks = rankdata(np.asarray(scores, dtype=np.float64))
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def multilabel_metrics(
    labels: np.ndarray, probs: np.ndarray, threshold: float = 0.5, names: Sequence[str] = ()
) -> dict:
    """Micro and macro F1, subset accuracy (every label right), Hamming loss and per-label AUROC of ``(n, K)``
    label probabilities against ``(n, K)`` 0/1 labels; a label is predicted at ``probs ≥ threshold``.

    ``per_label[name]`` (a label's name in ``names``; its index without) holds ``n_true``, ``n_predicted``,
    ``f1``, ``auroc`` (``None`` when the test split has no
    positive or no negative example of the label) and a ``note`` then; ``macro_auroc`` is the mean over the labels
    whose AUROC is defined."""
    y = np.asarray(labels, dtype=bool)
    p = np.asarray(probs, dtype=np.float64)
    pred = p >= threshold
    tp, fp, fn = (pred & y).sum(0), (pred & ~y).sum(0), (~pred & y).sum(0)
    f1 = np.where(tp == 0, 0.0, 2 * tp / np.maximum(2 * tp + fp + fn, 1))
    per_label, aurocs = {}, []
    for k in range(y.shape[1]):
        area = auroc(p[:, k], y[:, k])
        note = (
            ""
            if area is not None
            else (
                "the test split has no example with this label"
                if not y[:, k].any()
                else "every test example has this label"
            )
        )
        if area is not None:
            aurocs.append(area)
        per_label[_label_name(k, names)] = {
            "n_true": int(y[:, k].sum()),
            "n_predicted": int(pred[:, k].sum()),
            "f1": float(f1[k]),
            "auroc": area,
            "note": note,
        }
    micro = 0.0 if tp.sum() == 0 else float(2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()))
    return {
        "subset_accuracy": float(np.mean((pred == y).all(axis=1))),
        "hamming_loss": float(np.mean(pred != y)),
        "micro_f1": micro,
        "macro_f1": float(f1.mean()),
        "macro_auroc": float(np.mean(aurocs)) if aurocs else None,
        "per_label": per_label,
    }


def _label_name(k: int, names: Sequence[str]) -> str:
    """Label ``k`` as metrics and notes name it: its name, or its index where the labels have none."""
    return str(names[k]) if len(names) > k else str(k)


class MultiLabel(Task):
    """Multi-label classification: a document has any subset of ``K`` labels, each with its own logit and its own
    explanation. ``F`` is every label's sigmoid probability; a document is explained once per explained label
    (:meth:`targets`), so one attention map meets ``K`` attributions (docs/tasks.md)."""

    name = "multilabel"
    label = "multi-label classification"
    problem_type = "multi_label_classification"
    explains = "the probability of the explained label (sigmoid of its logit)"
    readout_label = "probability of the explained label"
    outputs_column = "probs"
    #: ``predicted``: the labels predicted present (p ≥ 0.5), else the likeliest one; ``true``: the document's
    #: labels, else the likeliest one; ``all``: every label. Each in order of decreasing probability.
    target_kinds = ("predicted", "true", "all")
    role_pattern = re.compile(r"most_confident_(\d+)|missed_label|false_label|random_exact")
    headline_metrics = (
        ("micro F1", "micro_f1", True),
        ("macro F1", "macro_f1", True),
        ("macro AUROC", "macro_auroc", True),
    )
    label_per_column = True
    folders_refused = "a folder per class gives each document one class"
    topology_refused = "it compares the attention of two classes; a document here has several labels"
    THRESHOLD = 0.5
    #: a label cell's separator in a CSV file (``"contract|tort"``)
    SEPARATOR = "|"

    def check_config(self, config, where):
        super().check_config(config, where)
        data = config.get("data", {})
        columns, classes = data.get("label_columns"), data.get("classes")
        if columns and classes and len(columns) != len(classes):
            raise InputError(
                where, "data.classes", f"expected one name per label column ({len(columns)}), got {len(classes)}"
            )

    # --- labels
    def _items(self, cell, row: int, ids, where: str, field: str) -> list:
        """A cell's label items: a list or array (JSON, parquet), or names joined by ``|`` (CSV)."""
        example = f" (example {ids.iloc[row]!r})" if ids is not None else ""
        if isinstance(cell, str):
            text = cell.strip()
            if text in ("[]", ""):
                return []
            return [part.strip() for part in text.split(self.SEPARATOR) if part.strip()]
        if isinstance(cell, list | tuple | np.ndarray):
            return list(cell)
        if cell is None or (isinstance(cell, float) and math.isnan(cell)):
            raise InputError(
                where,
                field,
                f"expected a list of labels in every row ([] for none; in a CSV file names "
                f"joined by '{self.SEPARATOR}'), row {row + 1}{example} has an empty cell",
            )
        raise InputError(
            where,
            field,
            f"expected a list of labels (or names joined by '{self.SEPARATOR}'), row {row + 1}{example} has {cell!r}",
        )

    def resolve_labels(self, labels, ids, classes, where, field):
        """A cell lists a document's labels: class names (``data.classes`` when given, else every name found,
        sorted) or indices ``0..K-1``, as a JSON/parquet list or ``a|b`` in a CSV cell; ``[]`` is no label."""
        items = [self._items(cell, i, ids, where, field) for i, cell in enumerate(labels)]
        flat = [v for row in items for v in row]
        is_name = [isinstance(v, str) and not v.lstrip("-").isdigit() for v in flat]
        if any(is_name) and not all(is_name):
            raise InputError(
                where,
                field,
                "expected every label a name or every label an index, found both "
                f"({flat[is_name.index(True)]!r} and {flat[is_name.index(False)]!r})",
            )
        if any(is_name):
            classes = tuple(classes) if classes else tuple(sorted(set(flat)))
            index = {c: k for k, c in enumerate(classes)}
            for i, row in enumerate(items):
                for v in row:
                    if v not in index:
                        raise InputError(
                            where,
                            field,
                            f"expected labels of data.classes {list(classes)}, row {i + 1} "
                            f"(example {ids.iloc[i]!r}) has the unknown label {v!r}",
                        )
            rows = [[index[v] for v in row] for row in items]
        else:
            rows = [[int(v) for v in row] for row in items]
            k = len(classes) if classes else (max((max(r) for r in rows if r), default=-1) + 1)
            classes = tuple(classes) if classes else tuple(str(i) for i in range(k))
            for i, row in enumerate(rows):
                bad = [v for v in row if not 0 <= v < len(classes)]
                if bad:
                    raise InputError(
                        where,
                        field,
                        f"expected label indices 0..{len(classes) - 1}, row {i + 1} "
                        f"(example {ids.iloc[i]!r}) has {bad[0]}",
                    )
        hot = np.zeros((len(rows), len(classes)), dtype=np.int64)
        for i, row in enumerate(rows):
            hot[i, row] = 1
        return pd.Series(list(hot), index=labels.index, dtype=object), classes

    def parse_label(self, value, names):
        if isinstance(value, str | int | np.integer):
            value = value if isinstance(value, str) else [value]
        hot, _ = self.resolve_labels(
            pd.Series([value], dtype=object), pd.Series(["document"]), tuple(names), "label", str(value)
        )
        return hot.iloc[0]

    def check_labels(self, labels, classes, where, field):
        k = len(classes)
        if k < 2:
            raise InputError(where, field, f"expected at least two labels, found {k}")
        rows = [np.asarray(v) for v in labels]
        for i, row in enumerate(rows):
            if row.shape != (k,) or not np.isin(row, (0, 1)).all():
                raise InputError(
                    where,
                    field,
                    f"expected a 0/1 vector of the {k} labels in every row, row {i + 1} has {row.tolist()}",
                )
        out = np.empty(len(rows), dtype=object)
        out[:] = [row.astype(np.int64) for row in rows]
        return out

    @staticmethod
    def hot(labels) -> np.ndarray:
        """``(n, K)`` 0/1 int64 of a label column (one 0/1 vector per row)."""
        rows = [np.asarray(v, dtype=np.int64) for v in labels]
        return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.int64)

    def strata(self, labels, where, field):
        """A document's stratum is its rarest label (the label fewest documents have; ties by index), or ``K`` for a
        document without a label: every label then reaches the test split about in proportion, and with ``K + 1``
        strata at most, ``data.test_fraction`` holds (one stratum per label set would round many small sets up to
        one test document each)."""
        hot = self.hot(labels)
        if not len(hot):
            return np.zeros(0, dtype=np.int64)
        frequency = hot.sum(axis=0)
        rank = np.argsort(np.argsort(frequency, kind="stable"), kind="stable")  # 0: the rarest label
        masked = np.where(hot == 1, rank[None, :], len(rank))
        rarest = np.argsort(rank)[np.minimum(masked.min(axis=1), len(rank) - 1)]
        return np.where(hot.any(axis=1), rarest, hot.shape[1]).astype(np.int64)

    def check_splits(self, labels, is_train, classes, where, field):
        hot = self.hot(labels)[np.asarray(is_train)]
        for k, name in enumerate(classes):
            if not hot[:, k].any():
                raise InputError(
                    where,
                    field,
                    f"expected every label in the training split, label {k} ({name!r}) is on no training example",
                )
            if hot[:, k].all():
                raise InputError(
                    where,
                    field,
                    f"expected every label absent from some training example, label {k} ({name!r}) is on all of them",
                )

    def summary(self, labels, classes):
        hot = self.hot(labels)
        if not len(hot):
            return {"n": 0}
        return {
            "n": len(hot),
            "mean_labels": float(hot.sum(1).mean()),
            **{str(c): int(hot[:, c].sum()) for c in range(hot.shape[1])},
        }

    def label_type(self):
        return pa.list_(pa.int64())

    def label_value(self, cell):
        return [int(v) for v in np.asarray(cell)]

    def output_names(self, classes):
        return tuple(classes)

    # --- the head
    def n_outputs(self, n_classes):
        return n_classes

    def training_labels(self, labels):
        return self.hot(labels).astype(np.float32)

    def eval_loss(self, logits, labels, encoded=None):
        import torch  # noqa: PLC0415 (as Classification.eval_loss)

        target = torch.from_numpy(self.training_labels(labels))
        return float(torch.nn.functional.binary_cross_entropy_with_logits(torch.from_numpy(logits), target).item())

    def readout(self, logits):
        return at_least_float32(logits).sigmoid()

    def outputs(self, logits):
        return sigmoid(logits)

    def targets(self, kind, label, outputs):
        p = np.asarray(outputs, dtype=np.float64)
        order = [int(k) for k in np.argsort(-p, kind="stable")]
        if kind == "all":
            return tuple(order)
        if kind == "predicted":
            chosen = [k for k in order if p[k] >= self.THRESHOLD]
        elif kind == "true":
            truth = np.asarray(label).reshape(-1)
            chosen = [k for k in order if len(truth) == len(p) and truth[k]]
        else:
            raise InputError(
                "config",
                "attribution.target",
                f"expected one of {list(self.target_kinds)} for a multi-label classifier, got {kind!r}",
            )
        return tuple(chosen) or (order[0],)

    # --- predictions, metrics, showcase
    def predictions(self, examples, logits, encoded=None):
        probs = self.outputs(logits)
        return pd.DataFrame(
            {
                "example_id": examples["example_id"].to_numpy(),
                "label": list(self.hot(examples["label"])),
                "pred": list((probs >= self.THRESHOLD).astype(np.int64)),
                "logits": list(np.asarray(logits, dtype=np.float32)),
                "probs": list(probs.astype(np.float32)),
            }
        )

    def metrics(self, labels, logits, encoded=None, names=()):
        return multilabel_metrics(self.hot(labels), self.outputs(logits), self.THRESHOLD, names)

    def roles(self, predictions, seed, names=()):
        probs = np.stack(predictions["probs"].to_numpy()).astype(np.float64)
        y = self.hot(predictions["label"]).astype(bool)
        pred = probs >= self.THRESHOLD
        out: list[tuple[str, int | None, str]] = []
        missed = np.where(y & ~pred, probs, np.inf)
        if np.isfinite(missed).any():
            i, k = np.unravel_index(np.argmin(missed), missed.shape)
            out.append(
                (
                    "missed_label",
                    int(i),
                    f"a true label predicted absent, the lowest probability (label {_label_name(k, names)})",
                )
            )
        else:
            out.append(("missed_label", None, "no true label of a test example is predicted absent"))
        false = np.where(~y & pred, probs, -np.inf)
        if np.isfinite(false).any():
            i, k = np.unravel_index(np.argmax(false), false.shape)
            out.append(
                (
                    "false_label",
                    int(i),
                    f"an absent label predicted present, the highest probability (label {_label_name(k, names)})",
                )
            )
        else:
            out.append(("false_label", None, "no absent label of a test example is predicted present"))
        for c in range(probs.shape[1]):
            idx = np.flatnonzero(pred[:, c])
            if len(idx):
                out.append(
                    (
                        f"most_confident_{c}",
                        int(idx[np.argmax(probs[idx, c])]),
                        f"label {_label_name(c, names)} predicted, its highest probability",
                    )
                )
            else:
                out.append(
                    (f"most_confident_{c}", None, f"no test example is predicted to have label {_label_name(c, names)}")
                )
        exact = np.flatnonzero((pred == y).all(axis=1))
        rng = np.random.default_rng(seed)
        if len(exact):
            out.append(
                (
                    "random_exact",
                    int(rng.choice(exact)),
                    f"seeded draw (seed {seed}) of the test examples whose every label is right",
                )
            )
        else:
            out.append(("random_exact", None, "no test example has every label right"))
        return out

    def outcome(self, label, outputs, target, names):
        probs = [float(p) for p in outputs]
        predicted = [n for n, p in zip(names, probs, strict=True) if p >= self.THRESHOLD]
        truth = None if label is None else [n for n, v in zip(names, np.asarray(label).tolist(), strict=True) if v]
        return Outcome(
            label=None if truth is None else (", ".join(truth) or "none"),
            prediction=", ".join(predicted) or "none",
            confidence=probs[int(target)],
            outputs=dict(zip(names, probs, strict=True)),
            explained=names[int(target)],
        )

    def evidence(self, rationales, target):
        """The phrases planted for the explained label's own topic, on documents that have that label (a topic
        mentioned once as a distractor is not evidence of it)."""
        if not len(rationales):
            return rationales
        return rationales[rationales["evidence"] & (rationales["phrase_label"] == int(target))]

    def role_missing(self, selection, role):
        k = len(selection["examples"][0]["probs"]) if selection["examples"] else None
        number = self.role_pattern.fullmatch(role).group(1)
        if number is not None and k is not None and int(number) >= k:
            return f"the classifier has {k} labels, none numbered {number}"
        return None


MULTILABEL = REGISTRY.register(MultiLabel())
