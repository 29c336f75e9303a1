"""Tokenising and batched inference (what the outputs mean and their metrics: :mod:`attnlens.tasks`; the showcased
examples: :mod:`attnlens.selection`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from attnlens.models import Architecture, architecture
from attnlens.tasks import Task


@dataclass(frozen=True)
class Encoded:
    """Tokenised texts, unpadded: one id list per example (special tokens included, truncated)."""

    input_ids: list[list[int]]
    pad_token_id: int
    #: per example, the positions that attend globally (:meth:`attnlens.tasks.Task.global_tokens`: a question's
    #: tokens); ``None``: the architecture's own choice for every example
    global_tokens: list[list[int]] | None = None

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
        chosen = None
        if self.global_tokens is not None:
            chosen = torch.zeros_like(mask)
            for j, i in enumerate(index):
                chosen[j, self.global_tokens[i]] = 1
        out = {"input_ids": ids, "attention_mask": mask}
        out |= arch.forward_args(mask, chosen) if arch is not None else {}
        return {k: v.to(device) for k, v in out.items()}


def encode_texts(tokenizer, texts: Sequence[str], max_length: int | None = None) -> Encoded:
    """Tokenise with truncation to ``max_length`` (default: the tokenizer's ``model_max_length``)."""
    max_length = max_length or tokenizer.model_max_length
    enc = tokenizer(list(texts), truncation=True, max_length=max_length, padding=False)
    return Encoded(enc["input_ids"], tokenizer.pad_token_id)


def encode_examples(tokenizer, examples: pd.DataFrame, task: Task, max_length: int | None = None) -> Encoded:
    """Tokenise a split frame's examples as their task reads them (:meth:`~attnlens.tasks.Task.texts`): one text
    each, cut to ``max_length`` (default: the tokenizer's ``model_max_length``), or pairs of which the second is
    cut; with the positions that attend globally (:meth:`~attnlens.tasks.Task.global_tokens`)."""
    first, second = task.texts(examples)
    if second is None:
        encoded = encode_texts(tokenizer, first, max_length)
    else:
        max_length = max_length or tokenizer.model_max_length
        enc = tokenizer(first, second, truncation="only_second", max_length=max_length, padding=False)
        encoded = Encoded(enc["input_ids"], tokenizer.pad_token_id)
    chosen = [task.global_tokens(ids, tokenizer) for ids in encoded.input_ids]
    if all(c is None for c in chosen):
        return encoded
    if any(c is None for c in chosen):
        raise ValueError(f"task {task.name!r} chose global tokens for some examples only")
    return Encoded(encoded.input_ids, encoded.pad_token_id, chosen)


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
