"""A generated answer's score under ablations of its context: the forwards that leave-one-out, the ablation surrogate
and the top-k drop read (:mod:`attnlens.attribution.surrogate` turns them into scores and judgements).

A causal language model scores a sequence ``prompt + answer`` by each answer token's log-probability given every
token before it. A source is taken out of the context in one of two ways, and the caller names which:

* **deleted**: its text is cut out and the prompt rebuilt, so each ablation is a sequence of its own;
* **masked**: its tokens stay where they are, with their positions, and no token attends to them (zeros in the
  attention mask), so one tokenization serves every ablation and the other tokens keep their positions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from attnlens.data.context import PROMPT_TEMPLATE, REMOVALS, Source

#: Sequences per forward when the caller gives no batch.
BATCH = 8


@torch.no_grad()
def answer_token_log_probs(
    model,
    sequences: Sequence[Sequence[int]],
    answer_lengths: Sequence[int],
    keep: Sequence[Sequence[int]] | None = None,
    batch_size: int = BATCH,
) -> list[np.ndarray]:
    """Per sequence, float64 ``(answer_length,)``: the log-probability of each of its last ``answer_length`` tokens
    (the answer) given every token before it.

    ``keep`` (one 0/1 list per sequence, over its tokens): a 0 is a masked token, attended by no token, its
    position kept; None keeps every token. Sequences are right-padded into batches of ``batch_size`` in order of
    length (stably), with explicit positions ``0, 1, …``: a causal model's tokens never attend to the padding after
    them, so a sequence's numbers do not depend on its batch beyond the rounding of batched sums."""
    if len(sequences) != len(answer_lengths) or (keep is not None and len(keep) != len(sequences)):
        raise ValueError("expected one answer length (and one keep list) per sequence")
    for ids, n, kept in zip(sequences, answer_lengths, keep or [None] * len(sequences), strict=True):
        if not 0 < n < len(ids):
            raise ValueError(f"expected an answer of 1 to {len(ids) - 1} tokens after a prompt, got {n}")
        if kept is not None and (len(kept) != len(ids) or not all(kept[len(ids) - n - 1 :])):
            raise ValueError("expected a keep flag per token, with the prompt's last token and the answer kept")
    device = next(model.parameters()).device
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    out: list[np.ndarray] = [np.empty(0)] * len(sequences)
    order = np.argsort([len(s) for s in sequences], kind="stable")
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size].tolist()
        width = max(len(sequences[i]) for i in index)
        ids = torch.full((len(index), width), pad, dtype=torch.long)
        mask = torch.zeros((len(index), width), dtype=torch.long)
        for row, i in enumerate(index):
            n = len(sequences[i])
            ids[row, :n] = torch.as_tensor(list(sequences[i]))
            mask[row, :n] = torch.as_tensor(list(keep[i])) if keep is not None else 1
        positions = torch.arange(width).expand(len(index), width)
        logits = model(
            input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device)
        ).logits
        log_probs = torch.log_softmax(logits.double(), dim=-1).cpu()
        for row, i in enumerate(index):
            n, a = len(sequences[i]), answer_lengths[i]
            targets = ids[row, n - a : n]
            out[i] = log_probs[row, n - a - 1 : n - 1].gather(-1, targets[:, None])[:, 0].numpy()
    return out


def ablation_log_probs(
    model,
    tokenizer,
    context: str,
    sources: Sequence[Source],
    question: str,
    answer_ids: Sequence[int],
    masks: np.ndarray,
    removal: str = "delete",
    template: str = PROMPT_TEMPLATE,
    batch_size: int = BATCH,
) -> np.ndarray:
    """``(masks, answer tokens)`` float64: each answer token's log-probability on the context with the sources of
    each mask's zeros taken out by ``removal`` (:data:`~attnlens.data.context.REMOVALS`: ``delete``, ``mask``); the
    prompt is :func:`~attnlens.data.context.build_prompt`'s."""
    masks, answer = np.asarray(masks, dtype=bool), list(answer_ids)
    ablations = REMOVALS.get(removal)(tokenizer, context, sources, question, template, answer, masks)
    out = answer_token_log_probs(model, ablations.sequences, [len(answer)] * len(masks), ablations.keep, batch_size)
    return np.stack(out) if out else np.zeros((0, len(answer)))
