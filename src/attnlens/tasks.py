"""The tasks a model is trained and explained for, as a registry: what a document's explained scalar is.

A :class:`Task` says, for one kind of model output, everything a stage needs to know about it and nothing a
stage may decide for itself:

* **its labels**: how a label column is checked (:meth:`Task.check_labels`) and stratified for the train/test
  split (:meth:`Task.strata`);
* **its head**: Hugging Face's ``problem_type`` and how many outputs the head has, so that the model's own loss is
  the task's (cross-entropy, mean squared error);
* **its readout** ``F``: what the methods explain and the removal curves measure, from the logits —
  :meth:`Task.readout` on a torch tensor, :meth:`Task.outputs` on a NumPy array (the class probabilities; the
  predicted value);
* **its targets**: which of ``F``'s columns a document's explanation is for (:meth:`Task.target`: the predicted
  or the true class; the one output);
* **its metrics and predictions table** (:meth:`Task.metrics`, :meth:`Task.predictions`) and **the showcased
  documents** (:meth:`Task.roles`: the most confident errors, the largest errors).

Stages never branch on the task: they ask the task of their run (:func:`get_task`, :func:`task_of` for a
model that carries its own). Plain NumPy and pandas, so the light rules read it without torch; a readout is
computed with the tensor's own methods.

Adding a task: a :class:`Task` subclass registered with :func:`register`, and its tests (``tests/test_tasks.py``
checks every registered task's readout, metrics and roles against independent references).
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from attnlens.errors import InputError

#: The task of a configuration that names none: the paper's.
DEFAULT = "classification"


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax of ``(n, k)`` logits, in their dtype (subtracting the row maximum first)."""
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def classification_metrics(labels: np.ndarray, preds: np.ndarray, n_labels: int) -> dict:
    """Accuracy, macro F1 and per-class counts (F1 of a class with no true and no predicted example counts as 0).

    ``per_class[c]`` holds ``n_true``, ``n_predicted``, ``f1`` and a ``note`` when a count of 0 makes
    recall or precision undefined (a class absent from a small test split).
    """
    labels = np.asarray(labels)
    preds = np.asarray(preds)
    f1s, per_class = [], {}
    for c in range(n_labels):
        tp = np.sum((preds == c) & (labels == c))
        fp = np.sum((preds == c) & (labels != c))
        fn = np.sum((preds != c) & (labels == c))
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
        n_true, n_pred = int(np.sum(labels == c)), int(np.sum(preds == c))
        note = ""
        if n_true == 0:
            note = "no test example of this class: recall is undefined, F1 counted as 0 in the macro mean"
        elif n_pred == 0:
            note = "no test example predicted as this class: precision is undefined, F1 is 0"
        per_class[str(c)] = {"n_true": n_true, "n_predicted": n_pred, "f1": float(f1s[-1]), "note": note}
    return {"accuracy": float(np.mean(labels == preds)), "macro_f1": float(np.mean(f1s)), "per_class": per_class}


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


@dataclass(frozen=True)
class Outcome:
    """One example's outcome as a page shows it (:meth:`Task.outcome`)."""

    label: str | None  # the true label or value, when known
    prediction: str  # the predicted class, or the predicted value
    confidence: float | None  # the predicted class's probability; none for a value
    outputs: dict[str, float]  # every output of F by name (the class probabilities; the value)
    explained: str  # what the explanation is for: the explained class, or the value


class Task(ABC):
    """One task's card and behaviour. A subclass sets the class attributes and implements every abstract method
    (an incomplete one cannot be registered: it cannot be instantiated)."""

    name: ClassVar[str]  # as the config (``task``) and the artifacts name it
    label: ClassVar[str]  # as a page names it
    problem_type: ClassVar[str]  # Hugging Face's ``config.problem_type``: the head's loss
    explains: ClassVar[str]  # what the readout F is, as the docs and the report say it
    readout_label: ClassVar[str]  # F on a figure's axis
    #: the predictions table's columns beyond ``example_id``, ``label``, ``pred`` and ``logits``: the readout's
    outputs_column: ClassVar[str]
    #: IG's ``attribution.target`` kinds the task knows
    target_kinds: ClassVar[tuple[str, ...]]
    #: the names of its showcase roles (:meth:`roles`)
    role_pattern: ClassVar[re.Pattern]
    #: the test metrics the findings compare across runs: ``(name, key in metrics.json, higher is better)``
    headline_metrics: ClassVar[tuple[tuple[str, str, bool], ...]]
    #: whether a dataset may give one 0/1 column per label (``data.label_columns``)
    label_per_column: ClassVar[bool] = False
    #: why a folder per class cannot hold the task's labels (``data.source: folders``); ``None``: it can
    folders_refused: ClassVar[str | None] = None
    #: why the topology study cannot run for the task; ``None``: it can
    topology_refused: ClassVar[str | None] = None

    def check_config(self, config: dict, where: str) -> None:
        """The config's keys that must agree with the task (a validated config, defaults filled in). A subclass
        that checks more calls this first."""
        data = config.get("data", {})
        if data.get("label_columns") and not self.label_per_column:
            raise InputError(where, "data.label_columns", f"expected none for data.task {self.name!r} (one column "
                             "per label is a multi-label dataset: data.task 'multilabel')")  # fmt: skip
        if data.get("source") == "folders" and self.folders_refused:
            raise InputError(where, "data.source", f"expected a file, hub or synthetic source for data.task "
                             f"{self.name!r} ({self.folders_refused})")  # fmt: skip
        if "topology" in config.get("studies", ()) and self.topology_refused:
            raise InputError(where, "studies", f"expected no topology study for data.task {self.name!r} "
                             f"({self.topology_refused})")  # fmt: skip
        kind = config.get("attribution", {}).get("target")
        if kind is not None and kind not in self.target_kinds:
            raise InputError(where, "attribution.target", f"expected one of {list(self.target_kinds)} for data.task "
                             f"{self.name!r}, got {kind!r}")  # fmt: skip

    # --- labels ------------------------------------------------------------------------------------------
    @abstractmethod
    def resolve_labels(
        self, labels: pd.Series, ids: pd.Series, classes: Sequence[str] | None, where: str, field: str
    ) -> tuple[pd.Series, tuple[str, ...]]:
        """A file's or a hub dataset's label column as the task's labels, and the names of the outputs they
        imply (``classes``: ``data.classes``); an empty cell, or a value the task cannot read, names its row."""

    #: a document's label when it is not known (the one-document API without ``label``), as a shard row keeps it
    NO_LABEL: ClassVar = None

    @abstractmethod
    def parse_label(self, value, names: Sequence[str]):
        """One document's true label as a user gives it (a class name or index; a number; a list of labels), in
        the form :meth:`check_labels` returns; :class:`InputError` naming ``label`` otherwise."""

    @abstractmethod
    def check_labels(self, labels: pd.Series, classes: Sequence[str], where: str, field: str) -> np.ndarray:
        """Every source's labels, checked, as the split files keep them (:meth:`label_type`)."""

    @abstractmethod
    def strata(self, labels: np.ndarray, where: str, field: str) -> np.ndarray:
        """Integer strata of a stratified train/test split (each is split as a class would be); an
        :class:`InputError` when the labels cannot be split."""

    @abstractmethod
    def check_splits(self, labels: np.ndarray, is_train: np.ndarray, classes: Sequence[str], where: str,
                     field: str) -> None:  # fmt: skip
        """What a training split needs (every class; targets that vary); :class:`InputError` otherwise."""

    @abstractmethod
    def summary(self, labels: np.ndarray, classes: Sequence[str]) -> dict:
        """A split's labels in the manifest (counts per class; the target's range and spread)."""

    @abstractmethod
    def label_type(self) -> pa.DataType:
        """The ``label`` column's Arrow type in the split files and the attribution shards."""

    def label_value(self, cell):
        """A ``label`` cell as JSON keeps it (the manifest, ``selection.json``): a class index, a value."""
        return np.asarray(cell).item()

    @abstractmethod
    def output_names(self, classes: Sequence[str]) -> tuple[str, ...]:
        """The names of the head's outputs (a classifier's class names), as the model's ``id2label`` keeps them."""

    # --- the head ----------------------------------------------------------------------------------------
    @abstractmethod
    def n_outputs(self, n_classes: int) -> int:
        """How many logits the head has."""

    @abstractmethod
    def training_labels(self, labels: np.ndarray) -> np.ndarray:
        """The labels as the head's loss takes them (class indices; float32 values)."""

    @abstractmethod
    def eval_loss(self, logits: np.ndarray, labels: np.ndarray) -> float:
        """The head's loss on held-out ``(n, n_outputs)`` float32 logits, as torch computes it in training."""

    # --- the readout -------------------------------------------------------------------------------------
    @abstractmethod
    def readout(self, logits):
        """``F`` of a torch tensor of logits ``(batch, n_outputs)``: what the methods explain."""

    @abstractmethod
    def outputs(self, logits: np.ndarray) -> np.ndarray:
        """``F`` in float64 NumPy, from ``(n, n_outputs)`` logits."""

    @abstractmethod
    def targets(self, kind: str, label, outputs: np.ndarray) -> tuple[int, ...]:
        """The columns of ``F`` a document is explained for (``kind``: ``attribution.target``), the headline
        target first: one for a classification or a regression, each explained label of a multi-label document.
        Every stage keys a document's explanations by ``(example_id, target)``."""

    # --- predictions, metrics, showcase ------------------------------------------------------------------
    @abstractmethod
    def predictions(self, examples: pd.DataFrame, logits: np.ndarray) -> pd.DataFrame:
        """The predictions table: ``example_id, label, pred, logits`` and :attr:`outputs_column`."""

    @abstractmethod
    def metrics(self, labels: np.ndarray, logits: np.ndarray) -> dict:
        """The test metrics of ``(n, n_outputs)`` logits against the labels."""

    @abstractmethod
    def roles(self, predictions: pd.DataFrame, seed: int) -> list[tuple[str, int | None, str]]:
        """``(role, row or None, rule or why no example meets it)`` for every showcase role, in order."""

    def showcase_entry(self, predictions: pd.DataFrame, row: int) -> dict:
        """What ``selection.json`` keeps of a showcased example: its id, label, prediction and outputs."""
        outputs = predictions[self.outputs_column].iloc[row]
        return {
            "example_id": str(predictions["example_id"].iloc[row]),
            "label": self.label_value(predictions["label"].iloc[row]),
            "pred": self.label_value(predictions["pred"].iloc[row]),
            self.outputs_column: [round(float(p), 6) for p in outputs],
        }

    @abstractmethod
    def outcome(self, label, outputs: Sequence[float], target: int, names: Sequence[str]) -> Outcome:
        """An example's outcome for a page: ``label`` (``None`` when unknown), ``outputs`` (``F(x)``), the
        explained output ``target`` and the output names (:meth:`output_names`)."""

    def evidence(self, rationales: pd.DataFrame, target: int) -> pd.DataFrame:
        """The planted phrases (``rationales.parquet`` rows) that are evidence for the explained output ``target``:
        those of the document's own class or counted field (``evidence``), whatever output is explained."""
        return rationales[rationales["evidence"]] if len(rationales) else rationales

    def role_missing(self, selection: dict, role: str) -> str | None:
        """Why a role of this task (:attr:`role_pattern`) names no example beyond those the selection lists as
        left out; ``None``: it names one, or could."""
        return None


#: Every registered task by name, in registration order.
REGISTRY: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add a task to :data:`REGISTRY` (a name registered twice is an error)."""
    if task.name in REGISTRY:
        raise ValueError(f"a task named {task.name!r} is already registered")
    REGISTRY[task.name] = task
    return task


def task_names() -> list[str]:
    """The registered tasks' names, in registration order (the config schema's ``task`` enum)."""
    return list(REGISTRY)


def get_task(name: str | None) -> Task:
    """The task named ``name`` (:data:`DEFAULT` for ``None``)."""
    name = DEFAULT if name is None else name
    if name not in REGISTRY:
        raise InputError("config", "task", f"expected one of {task_names()}, got {name!r}")
    return REGISTRY[name]


def task_of(config) -> Task:
    """The task a model's configuration (a ``transformers`` config, or its dict) was trained for, from its
    ``problem_type``: a classifier saved without one is a single-label classifier, as Hugging Face reads it."""
    problem = config.get("problem_type") if isinstance(config, dict) else getattr(config, "problem_type", None)
    for task in REGISTRY.values():
        if task.problem_type == problem:
            return task
    if problem in (None, "single_label_classification"):
        return REGISTRY[DEFAULT]
    raise InputError("model", "problem_type", f"expected one of {[t.problem_type for t in REGISTRY.values()]}, "
                     f"got {problem!r}")  # fmt: skip


def output_index(value, names: Sequence[str], field: str, what: str) -> int:
    """The output ``value`` names among ``names``: its index, or its name (``what``: how the error names an
    index, e.g. ``"a class index"``); :class:`InputError` under ``field`` otherwise."""
    names = list(names)
    if isinstance(value, str) and value in names:
        return names.index(value)
    if isinstance(value, int | np.integer) and not isinstance(value, bool) and 0 <= int(value) < len(names):
        return int(value)
    raise InputError(field, str(value), f"expected {what} below {len(names)} or one of {names}")


def _first_bad_row(bad: np.ndarray) -> int:
    return int(np.flatnonzero(bad)[0])


def _at_least_float32(logits):
    """Half-precision logits (autocast) in float32, so that F and its gradient are computed in float32 at least."""
    return logits.float() if logits.dtype.is_floating_point and logits.dtype.itemsize < 4 else logits


def _no_empty_cell(labels: pd.Series, ids: pd.Series, where: str, field: str, what: str) -> None:
    empty = labels.isna() | labels.map(lambda v: isinstance(v, str) and not v.strip())
    if empty.any():
        i = _first_bad_row(empty.to_numpy())
        raise InputError(where, field, f"expected {what} in every row, row {i + 1} (example {ids.iloc[i]!r}) has an "
                         "empty cell")  # fmt: skip


def _integer_labels(labels: pd.Series, where: str, field: str) -> np.ndarray:
    """Labels as int64; booleans count as 0/1; anything not integral is an error."""
    if labels.dtype == bool:
        return labels.astype("int64").to_numpy()
    if pd.api.types.is_integer_dtype(labels):
        return labels.astype("int64").to_numpy()
    if pd.api.types.is_float_dtype(labels) and labels.notna().all() and (labels == labels.round()).all():
        return labels.astype("int64").to_numpy()
    bad = next((v for v in labels if not (isinstance(v, int | np.integer) and not isinstance(v, bool))), None)
    raise InputError(where, field, f"expected integer class labels, got {bad!r} ({labels.dtype})")


class Classification(Task):
    """Single-label classification: ``F`` is the softmax probability of a class (recipes §9.1)."""

    name = "classification"
    label = "classification"
    problem_type = "single_label_classification"
    explains = "the probability of the explained class (softmax of the logits)"
    readout_label = "probability of the explained class"
    outputs_column = "probs"
    target_kinds = ("class_1", "predicted", "true", "all")
    role_pattern = re.compile(r"(?:most_confident|random_correct)_(\d+)|false_positive|false_negative")
    headline_metrics = (("accuracy", "accuracy", True), ("macro F1", "macro_f1", True))

    def resolve_labels(self, labels, ids, classes, where, field):
        """Labels are integers ``0..K-1`` (named by ``data.classes``, or ``"0"``, ``"1"`` … without it) or class
        names (``"spam"``): names are looked up in ``data.classes`` when it is given, else the classes are the
        names found, sorted."""
        _no_empty_cell(labels, ids, where, field, "a class label")
        if not len(labels):  # no example: check_examples says so
            return labels, tuple(classes or ())
        names = labels.map(lambda v: isinstance(v, str) and not v.strip().lstrip("-").isdigit())
        if names.any() and not names.all():
            i = _first_bad_row(names.to_numpy())
            raise InputError(
                where, field, f"expected every label a class index or every label a class name, row {i + 1} "
                f"(example {ids.iloc[i]!r}) has {labels.iloc[i]!r} among integer labels"
            )  # fmt: skip
        if names.any():
            found = labels.astype(str).str.strip()
            classes = tuple(classes) if classes else tuple(sorted(set(found)))
            unknown = ~found.isin(classes)
            if unknown.any():
                i = _first_bad_row(unknown.to_numpy())
                raise InputError(
                    where, field, f"expected a class of data.classes {list(classes)} or its index, row {i + 1} "
                    f"(example {ids.iloc[i]!r}) has {found.iloc[i]!r}"
                )  # fmt: skip
            return found.map({c: k for k, c in enumerate(classes)}).astype("int64"), classes
        if labels.dtype == object:  # digit strings of a JSON file
            labels = pd.to_numeric(labels.astype(str).str.strip())
        if classes:
            return labels, tuple(classes)
        values = _integer_labels(labels, where, field)
        return labels, tuple(str(i) for i in range(int(values.max()) + 1)) if len(values) else ()

    NO_LABEL = -1

    def parse_label(self, value, names):
        return output_index(value, names, "label", "a class index")

    def check_labels(self, labels, classes, where, field):
        values = _integer_labels(labels, where, field)
        k = len(classes)
        if k < 2:
            raise InputError(where, field, f"expected at least two classes, found {k}")
        outside = (values < 0) | (values >= k)
        if outside.any():
            raise InputError(where, field, f"expected labels 0..{k - 1}, got {int(values[outside][0])}")
        if len(set(values.tolist())) < 2:
            raise InputError(where, field, f"expected at least two classes, all examples have label {values[0]}")
        return values

    def strata(self, labels, where, field):
        values, counts = np.unique(np.asarray(labels), return_counts=True)
        if (counts < 2).any():
            c = int(values[counts < 2][0])
            raise InputError(where, field, f"expected at least two examples of class {c} to split, found 1")
        return np.asarray(labels)

    def check_splits(self, labels, is_train, classes, where, field):
        missing = sorted(set(range(len(classes))) - set(np.asarray(labels)[is_train].tolist()))
        if missing:
            raise InputError(where, field, f"expected every class in the training split, class {missing[0]} is absent")

    def summary(self, labels, classes):
        return {str(c): int((np.asarray(labels) == c).sum()) for c in range(len(classes))}

    def label_type(self):
        return pa.int64()

    def output_names(self, classes):
        return tuple(classes)

    def n_outputs(self, n_classes):
        return n_classes

    def training_labels(self, labels):
        return np.asarray(labels, dtype=np.int64)

    def eval_loss(self, logits, labels):
        import torch  # noqa: PLC0415 (the loss of the training rule, which has loaded torch; light rules never call it)

        labels = torch.from_numpy(self.training_labels(labels))
        return float(torch.nn.functional.cross_entropy(torch.from_numpy(logits), labels).item())

    def readout(self, logits):
        return _at_least_float32(logits).softmax(-1)

    def outputs(self, logits):
        return softmax(np.asarray(logits, dtype=np.float64))

    def targets(self, kind, label, outputs):
        if kind == "class_1":
            return (1,)
        if kind == "predicted":
            return (int(np.argmax(outputs)),)
        if kind == "true":
            return (int(label),)
        if kind == "all":  # every class, the likeliest first
            return tuple(int(k) for k in np.argsort(-np.asarray(outputs, dtype=np.float64), kind="stable"))
        raise ValueError(f"unknown IG target {kind!r}; expected one of {self.target_kinds}")

    def predictions(self, examples, logits):
        probs = self.outputs(logits)
        return pd.DataFrame(
            {
                "example_id": examples["example_id"].to_numpy(),
                "label": examples["label"].to_numpy().astype("int64"),
                "pred": probs.argmax(axis=1).astype("int64"),
                "logits": list(logits.astype(np.float32)),
                "probs": list(probs.astype(np.float32)),
            }
        )

    def metrics(self, labels, logits):
        return classification_metrics(labels, self.outputs(logits).argmax(axis=1), np.asarray(logits).shape[1])

    def roles(self, predictions, seed):
        probs = np.stack(predictions["probs"].to_numpy())
        labels = predictions["label"].to_numpy()
        preds = predictions["pred"].to_numpy()
        n_labels = probs.shape[1]
        out: list[tuple[str, int | None, str]] = []
        if n_labels == 2:
            for role, true, pred in (("false_positive", 0, 1), ("false_negative", 1, 0)):
                idx = np.flatnonzero((labels == true) & (preds == pred))
                if len(idx):
                    best = idx[np.argmax(probs[idx, pred])]
                    out.append((role, int(best), f"label {true} predicted {pred}, highest p{pred} among them"))
                else:
                    out.append((role, None, f"no test example has label {true} and is predicted {pred}"))
        for c in range(n_labels):
            idx = np.flatnonzero(preds == c)
            if len(idx):
                best = idx[np.argmax(probs[idx, c])]
                out.append((f"most_confident_{c}", int(best), f"predicted {c}, highest softmax probability p{c}"))
            else:
                out.append((f"most_confident_{c}", None, f"no test example is predicted {c}"))
        rng = np.random.default_rng(seed)
        for c in range(n_labels):
            idx = np.flatnonzero((labels == c) & (preds == c))
            if len(idx):
                out.append((f"random_correct_{c}", int(rng.choice(idx)),
                            f"seeded draw (seed {seed}) of correct class {c}"))  # fmt: skip
            else:
                out.append((f"random_correct_{c}", None, f"no test example of class {c} is predicted {c}"))
        return out

    def outcome(self, label, outputs, target, names):
        probs = [float(p) for p in outputs]
        best = int(np.argmax(probs))
        return Outcome(label=None if label is None else names[int(label)], prediction=names[best],
                       confidence=probs[best], outputs=dict(zip(names, probs, strict=True)),
                       explained=names[int(target)])  # fmt: skip

    def role_missing(self, selection, role):
        k = len(selection["examples"][0]["probs"]) if selection["examples"] else None
        number = self.role_pattern.fullmatch(role).group(1)
        if number is not None:
            return f"the classifier has {k} classes, none numbered {number}" if int(number) >= k else None
        return f"{role} is a role of two-class tasks, this classifier has {k} classes" if k != 2 else None


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
    topology_refused = "it compares the attention of the classes"

    def check_config(self, config, where):
        super().check_config(config, where)
        if config.get("data", {}).get("classes"):
            raise InputError(where, "data.classes", "expected none for data.task 'regression' (its one output is "
                             "the value)")  # fmt: skip

    def resolve_labels(self, labels, ids, classes, where, field):
        _no_empty_cell(labels, ids, where, field, "a target value")
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
            i = _first_bad_row(bad)
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
            raise InputError(where, field, "expected targets that vary in the training split, all are "
                             f"{train[0] if len(train) else 'absent'}")  # fmt: skip

    def summary(self, labels, classes):
        values = np.asarray(labels, dtype=np.float64)
        if not len(values):
            return {"n": 0}
        return {"n": len(values), "mean": float(values.mean()), "std": float(values.std()),
                "min": float(values.min()), "max": float(values.max())}  # fmt: skip

    def label_type(self):
        return pa.float64()

    def output_names(self, classes):
        return ("value",)

    def n_outputs(self, n_classes):
        return 1

    def training_labels(self, labels):
        return np.asarray(labels, dtype=np.float32)

    def eval_loss(self, logits, labels):
        import torch  # noqa: PLC0415 (as Classification.eval_loss)

        labels = torch.from_numpy(self.training_labels(labels))
        return float(torch.nn.functional.mse_loss(torch.from_numpy(logits[:, 0]), labels).item())

    def readout(self, logits):
        return _at_least_float32(logits)

    def outputs(self, logits):
        return np.asarray(logits, dtype=np.float64).reshape(len(logits), -1)[:, :1]

    def targets(self, kind, label, outputs):
        if kind not in self.target_kinds:
            raise InputError("config", "attribution.target", f"a regression has one output, explained for "
                             f"{list(self.target_kinds)}; {kind!r} names a class")  # fmt: skip
        return (0,)

    def predictions(self, examples, logits):
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

    def metrics(self, labels, logits):
        return regression_metrics(labels, self.outputs(logits)[:, 0])

    def outcome(self, label, outputs, target, names):
        value = float(outputs[0])
        return Outcome(label=None if label is None else f"{float(label):.4g}", prediction=f"{value:.4g}",
                       confidence=None, outputs={names[0]: value}, explained=names[0])  # fmt: skip

    def roles(self, predictions, seed):
        labels = predictions["label"].to_numpy(dtype=np.float64)
        preds = predictions["pred"].to_numpy(dtype=np.float64)
        err = preds - labels
        over, under = int(np.argmax(err)), int(np.argmin(err))
        out: list[tuple[str, int | None, str]] = [
            ("largest_overestimate", over, "predicted above its true value by the most") if err[over] > 0
            else ("largest_overestimate", None, "no test example is predicted above its true value"),
            ("largest_underestimate", under, "predicted below its true value by the most") if err[under] < 0
            else ("largest_underestimate", None, "no test example is predicted below its true value"),
            ("closest", int(np.argmin(np.abs(err))), "the smallest absolute error"),
            ("highest_predicted", int(np.argmax(preds)), "the highest predicted value"),
        ]  # fmt: skip
        rng = np.random.default_rng(seed)
        out.append(("random", int(rng.integers(len(err))), f"seeded draw (seed {seed}) of a test example"))
        return out


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


def multilabel_metrics(labels: np.ndarray, probs: np.ndarray, threshold: float = 0.5) -> dict:
    """Micro and macro F1, subset accuracy (every label right), Hamming loss and per-label AUROC of ``(n, K)``
    label probabilities against ``(n, K)`` 0/1 labels; a label is predicted at ``probs ≥ threshold``.

    ``per_label[k]`` holds ``n_true``, ``n_predicted``, ``f1``, ``auroc`` (``None`` when the test split has no
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
        note = "" if area is not None else ("the test split has no example with this label" if not y[:, k].any()
                                            else "every test example has this label")  # fmt: skip
        if area is not None:
            aurocs.append(area)
        per_label[str(k)] = {"n_true": int(y[:, k].sum()), "n_predicted": int(pred[:, k].sum()), "f1": float(f1[k]),
                             "auroc": area, "note": note}  # fmt: skip
    micro = 0.0 if tp.sum() == 0 else float(2 * tp.sum() / (2 * tp.sum() + fp.sum() + fn.sum()))
    return {
        "subset_accuracy": float(np.mean((pred == y).all(axis=1))),
        "hamming_loss": float(np.mean(pred != y)),
        "micro_f1": micro,
        "macro_f1": float(f1.mean()),
        "macro_auroc": float(np.mean(aurocs)) if aurocs else None,
        "per_label": per_label,
    }


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
    headline_metrics = (("micro F1", "micro_f1", True), ("macro F1", "macro_f1", True),
                        ("macro AUROC", "macro_auroc", True))  # fmt: skip
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
            raise InputError(where, "data.classes", f"expected one name per label column ({len(columns)}), got "
                             f"{len(classes)}")  # fmt: skip

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
            raise InputError(where, field, f"expected a list of labels in every row ([] for none; in a CSV file names "
                             f"joined by '{self.SEPARATOR}'), row {row + 1}{example} has an empty cell")  # fmt: skip
        raise InputError(where, field, f"expected a list of labels (or names joined by '{self.SEPARATOR}'), row "
                         f"{row + 1}{example} has {cell!r}")  # fmt: skip

    def resolve_labels(self, labels, ids, classes, where, field):
        """A cell lists a document's labels: class names (``data.classes`` when given, else every name found,
        sorted) or indices ``0..K-1``, as a JSON/parquet list or ``a|b`` in a CSV cell; ``[]`` is no label."""
        items = [self._items(cell, i, ids, where, field) for i, cell in enumerate(labels)]
        flat = [v for row in items for v in row]
        is_name = [isinstance(v, str) and not v.lstrip("-").isdigit() for v in flat]
        if any(is_name) and not all(is_name):
            raise InputError(where, field, "expected every label a name or every label an index, found both "
                             f"({flat[is_name.index(True)]!r} and {flat[is_name.index(False)]!r})")  # fmt: skip
        if any(is_name):
            classes = tuple(classes) if classes else tuple(sorted(set(flat)))
            index = {c: k for k, c in enumerate(classes)}
            for i, row in enumerate(items):
                for v in row:
                    if v not in index:
                        raise InputError(where, field, f"expected labels of data.classes {list(classes)}, row {i + 1} "
                                         f"(example {ids.iloc[i]!r}) has the unknown label {v!r}")  # fmt: skip
            rows = [[index[v] for v in row] for row in items]
        else:
            rows = [[int(v) for v in row] for row in items]
            k = len(classes) if classes else (max((max(r) for r in rows if r), default=-1) + 1)
            classes = tuple(classes) if classes else tuple(str(i) for i in range(k))
            for i, row in enumerate(rows):
                bad = [v for v in row if not 0 <= v < len(classes)]
                if bad:
                    raise InputError(where, field, f"expected label indices 0..{len(classes) - 1}, row {i + 1} "
                                     f"(example {ids.iloc[i]!r}) has {bad[0]}")  # fmt: skip
        hot = np.zeros((len(rows), len(classes)), dtype=np.int64)
        for i, row in enumerate(rows):
            hot[i, row] = 1
        return pd.Series(list(hot), index=labels.index, dtype=object), classes

    def parse_label(self, value, names):
        if isinstance(value, str | int | np.integer):
            value = value if isinstance(value, str) else [value]
        hot, _ = self.resolve_labels(pd.Series([value], dtype=object), pd.Series(["document"]), tuple(names), "label",
                                     str(value))  # fmt: skip
        return hot.iloc[0]

    def check_labels(self, labels, classes, where, field):
        k = len(classes)
        if k < 2:
            raise InputError(where, field, f"expected at least two labels, found {k}")
        rows = [np.asarray(v) for v in labels]
        for i, row in enumerate(rows):
            if row.shape != (k,) or not np.isin(row, (0, 1)).all():
                raise InputError(where, field, f"expected a 0/1 vector of the {k} labels in every row, row {i + 1} "
                                 f"has {row.tolist()}")  # fmt: skip
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
                raise InputError(where, field, f"expected every label in the training split, label {k} ({name!r}) "
                                 "is on no training example")  # fmt: skip
            if hot[:, k].all():
                raise InputError(where, field, f"expected every label absent from some training example, label {k} "
                                 f"({name!r}) is on all of them")  # fmt: skip

    def summary(self, labels, classes):
        hot = self.hot(labels)
        if not len(hot):
            return {"n": 0}
        return {"n": len(hot), "mean_labels": float(hot.sum(1).mean()),
                **{str(c): int(hot[:, c].sum()) for c in range(hot.shape[1])}}  # fmt: skip

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

    def eval_loss(self, logits, labels):
        import torch  # noqa: PLC0415 (as Classification.eval_loss)

        target = torch.from_numpy(self.training_labels(labels))
        return float(torch.nn.functional.binary_cross_entropy_with_logits(torch.from_numpy(logits), target).item())

    def readout(self, logits):
        return _at_least_float32(logits).sigmoid()

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
            raise InputError("config", "attribution.target", f"expected one of {list(self.target_kinds)} for a "
                             f"multi-label classifier, got {kind!r}")  # fmt: skip
        return tuple(chosen) or (order[0],)

    # --- predictions, metrics, showcase
    def predictions(self, examples, logits):
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

    def metrics(self, labels, logits):
        return multilabel_metrics(self.hot(labels), self.outputs(logits), self.THRESHOLD)

    def roles(self, predictions, seed):
        probs = np.stack(predictions["probs"].to_numpy()).astype(np.float64)
        y = self.hot(predictions["label"]).astype(bool)
        pred = probs >= self.THRESHOLD
        out: list[tuple[str, int | None, str]] = []
        missed = np.where(y & ~pred, probs, np.inf)
        if np.isfinite(missed).any():
            i, k = np.unravel_index(np.argmin(missed), missed.shape)
            out.append(("missed_label", int(i), f"a true label predicted absent, the lowest probability (label {k})"))
        else:
            out.append(("missed_label", None, "no true label of a test example is predicted absent"))
        false = np.where(~y & pred, probs, -np.inf)
        if np.isfinite(false).any():
            i, k = np.unravel_index(np.argmax(false), false.shape)
            out.append(("false_label", int(i), f"an absent label predicted present, the highest probability "
                        f"(label {k})"))  # fmt: skip
        else:
            out.append(("false_label", None, "no absent label of a test example is predicted present"))
        for c in range(probs.shape[1]):
            idx = np.flatnonzero(pred[:, c])
            if len(idx):
                out.append((f"most_confident_{c}", int(idx[np.argmax(probs[idx, c])]),
                            f"label {c} predicted, its highest probability"))  # fmt: skip
            else:
                out.append((f"most_confident_{c}", None, f"no test example is predicted to have label {c}"))
        exact = np.flatnonzero((pred == y).all(axis=1))
        rng = np.random.default_rng(seed)
        if len(exact):
            out.append(("random_exact", int(rng.choice(exact)), f"seeded draw (seed {seed}) of the test examples "
                        "whose every label is right"))  # fmt: skip
        else:
            out.append(("random_exact", None, "no test example has every label right"))
        return out

    def outcome(self, label, outputs, target, names):
        probs = [float(p) for p in outputs]
        predicted = [n for n, p in zip(names, probs, strict=True) if p >= self.THRESHOLD]
        truth = None if label is None else [n for n, v in zip(names, np.asarray(label).tolist(), strict=True) if v]
        return Outcome(label=None if truth is None else (", ".join(truth) or "none"),
                       prediction=", ".join(predicted) or "none", confidence=probs[int(target)],
                       outputs=dict(zip(names, probs, strict=True)), explained=names[int(target)])  # fmt: skip

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


CLASSIFICATION = register(Classification())
REGRESSION = register(Regression())
MULTILABEL = register(MultiLabel())
