"""Tokenising and batched inference (what the outputs mean and their metrics: :mod:`attnlens.tasks`; the showcased
examples: :mod:`attnlens.selection`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
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
