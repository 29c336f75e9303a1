"""Tokenising, batched inference and classification metrics (the showcased examples: :mod:`attnlens.selection`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from attnlens.models import Architecture, architecture


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
