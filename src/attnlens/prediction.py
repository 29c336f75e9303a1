"""Tokenising, batched inference, classification metrics, and the choice of showcased examples."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from attnlens.errors import InputError
from attnlens.io import load_json
from attnlens.models import Architecture, architecture

PREDICTIONS_SCHEMA = "predictions/v1"
SELECTION_SCHEMA = "selection/v1"


@dataclass(frozen=True)
class Encoded:
    """Tokenised texts, unpadded: one id list per example (special tokens included, truncated)."""

    input_ids: list[list[int]]
    pad_token_id: int

    def batch(
        self, index: Sequence[int], device: torch.device | str = "cpu", arch: Architecture | None = None
    ) -> dict[str, torch.Tensor]:
        """Right-padded batch with attention mask and the forward arguments ``arch`` adds (a global-attention
        mask, say; :meth:`~attnlens.models.base.Architecture.forward_args`)."""
        rows = [self.input_ids[i] for i in index]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for j, r in enumerate(rows):
            ids[j, : len(r)] = torch.tensor(r)
            mask[j, : len(r)] = 1
        out = {"input_ids": ids, "attention_mask": mask, **(arch.forward_args(mask) if arch is not None else {})}
        return {k: v.to(device) for k, v in out.items()}


def encode_texts(tokenizer, texts: Sequence[str], max_length: int | None = None) -> Encoded:
    """Tokenise with truncation to ``max_length`` (default: the tokenizer's ``model_max_length``)."""
    max_length = max_length or tokenizer.model_max_length
    enc = tokenizer(list(texts), truncation=True, max_length=max_length, padding=False)
    return Encoded(enc["input_ids"], tokenizer.pad_token_id)


def _length_sorted_batches(encoded: Encoded, batch_size: int) -> list[list[int]]:
    order = np.argsort([len(r) for r in encoded.input_ids], kind="stable")
    return [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]


@torch.no_grad()
def predict_logits(model, encoded: Encoded, batch_size: int) -> np.ndarray:
    """Logits ``(n_examples, n_labels)`` in input order; batches of similar length to limit padding."""
    model.eval()
    device = next(model.parameters()).device
    n = len(encoded.input_ids)
    out = np.zeros((n, model.config.num_labels), dtype=np.float32)
    for index in _length_sorted_batches(encoded, batch_size):
        logits = model(**encoded.batch(index, device, architecture(model))).logits
        out[index] = logits.float().cpu().numpy()
    return out


def softmax(logits: np.ndarray) -> np.ndarray:
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


def _roles(predictions: pd.DataFrame, seed: int) -> list[tuple[str, int | None, str]]:
    """``(role, row or None, rule or why no example meets it)`` for every showcase role, in order."""
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
            out.append((f"random_correct_{c}", int(rng.choice(idx)), f"seeded draw (seed {seed}) of correct class {c}"))
        else:
            out.append((f"random_correct_{c}", None, f"no test example of class {c} is predicted {c}"))
    return out


def select_examples(predictions: pd.DataFrame, seed: int, extra_ids: Sequence[str] = ()) -> list[dict]:
    """The showcased examples of the test split.

    * ``false_positive`` / ``false_negative`` (binary tasks, positive = class 1): the most confident
      error of that kind;
    * ``most_confident_<c>``: of the examples predicted ``c``, the one with the highest probability of ``c``;
    * ``random_correct_<c>``: a correct example of true class ``c``, drawn with ``seed``;
    * ``fixed``: every id of ``extra_ids`` (e.g. the paper's legacy ids), in the given order.

    A role no example meets is left out (never filled with an example of another class);
    :func:`roles_left_out` says which and why.

    Args:
        predictions: ``example_id, label, pred, probs`` (``probs`` a list per row).
        seed: seed of the random draws.
        extra_ids: ids to include as they are.
    """
    chosen = [(role, i, rule) for role, i, rule in _roles(predictions, seed) if i is not None]
    position = {eid: i for i, eid in enumerate(predictions["example_id"])}
    for eid in extra_ids:
        if eid not in position:
            raise InputError("config", "predict.extra_ids", f"expected ids of the test split, {eid!r} is not one")
        chosen.append(("fixed", position[eid], "listed in predict.extra_ids"))
    labels = predictions["label"].to_numpy()
    preds = predictions["pred"].to_numpy()
    probs = predictions["probs"].to_numpy()
    return [
        {
            "role": role,
            "example_id": str(predictions["example_id"].iloc[i]),
            "label": int(labels[i]),
            "pred": int(preds[i]),
            "probs": [round(float(p), 6) for p in probs[i]],
            "rule": rule,
        }
        for role, i, rule in chosen
    ]


def roles_left_out(predictions: pd.DataFrame, seed: int) -> list[dict]:
    """The showcase roles :func:`select_examples` leaves out: ``{"role", "why"}`` each."""
    return [{"role": role, "why": why} for role, i, why in _roles(predictions, seed) if i is None]


#: Names of showcase roles (:func:`select_examples`), whatever the number of classes.
ROLE_NAME = re.compile(r"(?:most_confident|random_correct)_(\d+)|false_positive|false_negative")


def role_left_out(selection: dict, role: str) -> str | None:
    """Why ``role`` names no example of this run (``selection.json`` as loaded), or ``None`` if it is no role name.

    A role is left out when no example meets it (its reason is in the selection's ``left_out``), when it names a
    class the classifier does not have, or when it is a binary-task role and the task has more classes.
    """
    for r in selection.get("left_out", []):
        if r["role"] == role:
            return r["why"]
    match = ROLE_NAME.fullmatch(role)
    if match is None:
        return None
    k = len(selection["examples"][0]["probs"]) if selection["examples"] else None
    if match.group(1) is not None:
        return f"the classifier has {k} classes, none numbered {match.group(1)}" if int(match.group(1)) >= k else None
    return f"{role} is a role of two-class tasks, this classifier has {k} classes" if k != 2 else None


def showcased_once(selection: Sequence[dict]) -> list[tuple[dict, str]]:
    """Each showcased example once, in selection order: its first entry and all its roles, joined."""
    roles: dict[str, list[str]] = {}
    first: dict[str, dict] = {}
    for e in selection:
        first.setdefault(e["example_id"], e)
        roles.setdefault(e["example_id"], []).append(e["role"])
    return [(first[eid], ", ".join(r)) for eid, r in roles.items()]


def predictions_frame(examples: pd.DataFrame, logits: np.ndarray) -> pd.DataFrame:
    probs = softmax(logits.astype(np.float64))
    return pd.DataFrame(
        {
            "example_id": examples["example_id"].to_numpy(),
            "label": examples["label"].to_numpy().astype("int64"),
            "pred": probs.argmax(axis=1).astype("int64"),
            "logits": list(logits.astype(np.float32)),
            "probs": list(probs.astype(np.float32)),
        }
    )


def load_selection(path) -> list[dict]:
    """The showcased examples of ``selection.json`` (``role``, ``example_id``, …), in file order."""
    return load_json(path, SELECTION_SCHEMA)["examples"]
