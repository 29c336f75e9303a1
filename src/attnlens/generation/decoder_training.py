"""Training a causal language model from scratch to answer from a context: the loss is the answer's tokens'
cross-entropy given the prompt (the prompt's own tokens are not predicted), the end token included so that the
model learns where an answer stops.

Each batch is right-padded and the output layer reads only the positions that predict an answer token (the
decoder's hidden states there, through the model's output embeddings and its final logit soft-capping where it has
one, as its own forward computes its logits): a prompt of a hundred tokens costs no more than its answer in the
output layer, which dominates a small model's step with a BERT vocabulary.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainingExample:
    """A prompt's ids and the answer's ids that follow it (the end token last)."""

    prompt: list[int]
    answer: list[int]


def answer_loss(model, batch: Sequence[TrainingExample], pad: int) -> torch.Tensor:
    """The mean cross-entropy of the answers' tokens given what precedes each, over the batch's answer tokens."""
    width = max(len(x.prompt) + len(x.answer) for x in batch)
    ids = torch.full((len(batch), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    rows, columns, targets = [], [], []
    for row, x in enumerate(batch):
        n = len(x.prompt) + len(x.answer)
        ids[row, :n] = torch.as_tensor(x.prompt + x.answer)
        mask[row, :n] = 1
        for t, token in enumerate(x.answer):  # position p predicts token p + 1
            rows.append(row)
            columns.append(len(x.prompt) - 1 + t)
            targets.append(token)
    device = next(model.parameters()).device
    positions = torch.arange(width).expand(len(batch), width)
    hidden = model.get_decoder()(
        input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device)
    ).last_hidden_state
    logits = model.get_output_embeddings()(hidden[torch.as_tensor(rows), torch.as_tensor(columns)])
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # the loss in float32 at least
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return torch.nn.functional.cross_entropy(logits, torch.as_tensor(targets, device=device))


def train_generator(
    model,
    examples: Sequence[TrainingExample],
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    warmup: float,
    seed: int,
    pad: int,
) -> list[float]:
    """``steps`` AdamW steps (weight decay 0.01, one-cycle learning rate peaking at ``learning_rate`` after
    ``warmup`` of the steps, gradients clipped at norm 1) on batches drawn with replacement from ``examples`` by
    ``seed``; the model is left in eval mode. Returns the loss of every step."""
    if not examples:
        raise ValueError("expected training examples, got none")
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=learning_rate, total_steps=steps, pct_start=warmup, anneal_strategy="cos"
    )
    losses = []
    every = max(1, steps // 10)
    for step in range(steps):
        batch = [examples[i] for i in rng.integers(0, len(examples), batch_size)]
        loss = answer_loss(model, batch, pad)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
        if (step + 1) % every == 0 or step + 1 == steps:
            log.info("step %d/%d: answer loss %.4f", step + 1, steps, float(np.mean(losses[-every:])))
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"the answer loss is {losses[-1]} at step {step + 1}: lower the learning rate")
    model.eval()
    return losses
