"""Single-label classification (recipes §9.1): the softmax probability of a class."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa

from attnlens.errors import InputError
from attnlens.tasks.task import (
    REGISTRY,
    Outcome,
    Task,
    at_least_float32,
    first_bad_row,
    integer_labels,
    no_empty_cell,
    output_index,
)


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
        no_empty_cell(labels, ids, where, field, "a class label")
        if not len(labels):  # no example: check_examples says so
            return labels, tuple(classes or ())
        names = labels.map(lambda v: isinstance(v, str) and not v.strip().lstrip("-").isdigit())
        if names.any() and not names.all():
            i = first_bad_row(names.to_numpy())
            raise InputError(
                where,
                field,
                f"expected every label a class index or every label a class name, row {i + 1} "
                f"(example {ids.iloc[i]!r}) has {labels.iloc[i]!r} among integer labels",
            )
        if names.any():
            found = labels.astype(str).str.strip()
            classes = tuple(classes) if classes else tuple(sorted(set(found)))
            unknown = ~found.isin(classes)
            if unknown.any():
                i = first_bad_row(unknown.to_numpy())
                raise InputError(
                    where,
                    field,
                    f"expected a class of data.classes {list(classes)} or its index, row {i + 1} "
                    f"(example {ids.iloc[i]!r}) has {found.iloc[i]!r}",
                )
            return found.map({c: k for k, c in enumerate(classes)}).astype("int64"), classes
        if labels.dtype == object:  # digit strings of a JSON file
            labels = pd.to_numeric(labels.astype(str).str.strip())
        if classes:
            return labels, tuple(classes)
        values = integer_labels(labels, where, field)
        return labels, tuple(str(i) for i in range(int(values.max()) + 1)) if len(values) else ()

    NO_LABEL = -1

    def parse_label(self, value, names):
        return output_index(value, names, "label", "a class index")

    def check_labels(self, labels, classes, where, field):
        values = integer_labels(labels, where, field)
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

    def eval_loss(self, logits, labels, encoded=None):
        import torch  # noqa: PLC0415 (the loss of the training rule, which has loaded torch; light rules never call it)

        labels = torch.from_numpy(self.training_labels(labels))
        return float(torch.nn.functional.cross_entropy(torch.from_numpy(logits), labels).item())

    def readout(self, logits):
        return at_least_float32(logits).softmax(-1)

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

    def predictions(self, examples, logits, encoded=None):
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

    def metrics(self, labels, logits, encoded=None, names=()):
        return classification_metrics(labels, self.outputs(logits).argmax(axis=1), np.asarray(logits).shape[1])

    def roles(self, predictions, seed, names=()):
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
                out.append(
                    (f"random_correct_{c}", int(rng.choice(idx)), f"seeded draw (seed {seed}) of correct class {c}")
                )
            else:
                out.append((f"random_correct_{c}", None, f"no test example of class {c} is predicted {c}"))
        return out

    def outcome(self, label, outputs, target, names):
        probs = [float(p) for p in outputs]
        best = int(np.argmax(probs))
        return Outcome(
            label=None if label is None else names[int(label)],
            prediction=names[best],
            confidence=probs[best],
            outputs=dict(zip(names, probs, strict=True)),
            explained=names[int(target)],
        )

    def role_missing(self, selection, role):
        k = len(selection["examples"][0]["probs"]) if selection["examples"] else None
        number = self.role_pattern.fullmatch(role).group(1)
        if number is not None:
            return f"the classifier has {k} classes, none numbered {number}" if int(number) >= k else None
        return f"{role} is a role of two-class tasks, this classifier has {k} classes" if k != 2 else None


CLASSIFICATION = REGISTRY.register(Classification())
