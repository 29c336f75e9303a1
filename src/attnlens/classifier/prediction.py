"""Tokenising and batched inference (what the outputs mean and their metrics: :mod:`attnlens.tasks`; the showcased
examples: :mod:`attnlens.classifier.selection`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from attnlens.models import Architecture, architecture
from attnlens.tasks import Task, task_of


@dataclass(frozen=True)
class Encoded:
    """Tokenised texts, unpadded: one id list per example (special tokens included, truncated)."""

    input_ids: list[list[int]]
    pad_token_id: int
    #: per example, the positions that attend globally (:meth:`attnlens.tasks.Task.global_tokens`: a question's
    #: tokens); ``None``: the architecture's own choice for every example
    global_tokens: list[list[int]] | None = None
    #: per example, each token's character span in the example's ``text`` (a document; a question's context) and
    #: which tokens are that text's (``(0, 0)`` and ``False`` for special tokens and a question's), and the texts;
    #: ``None`` where the ids were given without their text
    offsets: list[list[tuple[int, int]]] | None = None
    in_text: list[np.ndarray] | None = None
    texts: list[str] | None = None

    def batch(
        self, index: Sequence[int], device: torch.device | str = "cpu", arch: Architecture | None = None
    ) -> dict[str, torch.Tensor]:
        """Right-padded batch with attention mask and the forward arguments ``arch`` adds (a global-attention
        mask, say; :meth:`~attnlens.models.seam.Architecture.forward_args`)."""
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
    cut; with the positions that attend globally (:meth:`~attnlens.tasks.Task.global_tokens`) and each token's
    characters in the example's ``text`` (a fast tokenizer's offsets)."""
    first, second = task.texts(examples)
    if not len(first):  # no example (a run whose showcase roles no document meets): a tokenizer refuses none
        return Encoded([], tokenizer.pad_token_id, None, [], [], [])
    max_length = max_length or tokenizer.model_max_length
    if second is None:
        enc = tokenizer(first, truncation=True, max_length=max_length, padding=False, return_offsets_mapping=True)
    else:
        enc = tokenizer(
            first, second, truncation="only_second", max_length=max_length, padding=False, return_offsets_mapping=True
        )
    texts, segment = (first, 0) if second is None else (second, 1)
    in_text = [np.array([s == segment for s in enc.sequence_ids(i)], dtype=bool) for i in range(len(first))]
    offsets = [
        [(int(a), int(b)) if k else (0, 0) for (a, b), k in zip(row, mask, strict=True)]
        for row, mask in zip(enc["offset_mapping"], in_text, strict=True)
    ]
    encoded = Encoded(enc["input_ids"], tokenizer.pad_token_id, None, offsets, in_text, list(texts))
    chosen = [task.global_tokens(ids, tokenizer) for ids in encoded.input_ids]
    if all(c is None for c in chosen):
        return encoded
    if any(c is None for c in chosen):
        raise ValueError(f"task {task.name!r} chose global tokens for some examples only")
    return dataclasses.replace(encoded, global_tokens=chosen)


def _length_sorted_batches(encoded: Encoded, batch_size: int) -> list[list[int]]:
    order = np.argsort([len(r) for r in encoded.input_ids], kind="stable")
    return [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]


@torch.no_grad()
def predict_logits(model, encoded: Encoded, batch_size: int) -> np.ndarray:
    """The logits of the model's task (:meth:`attnlens.tasks.Task.logits`) in input order, float32: ``(n_examples,
    n_labels)``; with a token axis (:attr:`~attnlens.tasks.Task.token_logits`), ``(n_examples, k, n_max)``, each
    example's padding ``-inf``. Batches of similar length limit padding."""
    model.eval()
    device = next(model.parameters()).device
    task = task_of(model.config)
    n = len(encoded.input_ids)
    if task.token_logits:
        width = max((len(r) for r in encoded.input_ids), default=0)
        out = np.full((n, model.config.num_labels, width), -np.inf, dtype=np.float32)
    else:
        out = np.zeros((n, model.config.num_labels), dtype=np.float32)
    for index in _length_sorted_batches(encoded, batch_size):
        logits = task.logits(model(**encoded.batch(index, device, architecture(model)))).float().cpu().numpy()
        if task.token_logits:
            for j, i in enumerate(index):
                m = len(encoded.input_ids[i])
                out[i, :, :m] = logits[j, :, :m]
        else:
            out[index] = logits
    return out
