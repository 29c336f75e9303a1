"""A causal language model's greedy answers to prompts, and what it learned: exact match of its answers with the
references and the references' mean log-probability.

Greedy decoding is Hugging Face's ``generate`` without sampling, on batches of prompts of one length: no padding,
so an answer is the same under every attention implementation (a left-padded row that attends to no key gives NaN
under eager attention) and whatever else its batch holds. An answer ends at the end token, which it does not keep,
or at the first of its stop strings (``generation.stop``: a base model, which has no end-of-turn token, ends its
answer at a newline), where it keeps the tokens before the one that holds the string; an answer that reaches
``max_new_tokens`` without either is unfinished and says so. The token that ended an answer is kept beside it
(:attr:`Answer.end`): ContextCite scores an answer with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from attnlens.tasks.squad import exact_match, normalize_answer


@dataclass(frozen=True)
class Answer:
    """A greedy answer: its ids (without the end token), whether the end token or a stop string closed it, and the
    token that did (the end token, or the token that holds the stop string; None for an unfinished answer)."""

    ids: list[int]
    finished: bool
    end: int | None = None


@torch.no_grad()
def greedy_answers(
    model,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    end: int,
    pad: int,
    batch_size: int = 8,
    stop: Sequence[str] = (),
    tokenizer=None,
) -> list[Answer]:
    """Each prompt's greedy continuation up to its end token, its first ``stop`` string (decoded by ``tokenizer``;
    generation halts there too) or ``max_new_tokens`` tokens."""
    if stop and tokenizer is None:
        raise ValueError("expected the tokenizer that decodes the answers to find their stop strings")
    device = next(model.parameters()).device
    out: list[Answer | None] = [None] * len(prompts)
    by_length: dict[int, list[int]] = {}
    for i, prompt in enumerate(prompts):
        by_length.setdefault(len(prompt), []).append(i)
    batches = [group[a : a + batch_size] for group in by_length.values() for a in range(0, len(group), batch_size)]
    for batch in batches:
        ids = torch.as_tensor([list(prompts[i]) for i in batch], dtype=torch.long)
        generated = model.generate(
            input_ids=ids.to(device),
            attention_mask=torch.ones_like(ids).to(device),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            eos_token_id=end,
            pad_token_id=pad,
            temperature=None,
            top_p=None,
            top_k=None,
            stopping_criteria=StoppingCriteriaList([StopStrings(tokenizer, stop, ids.shape[1])]) if stop else None,
        )[:, ids.shape[1] :].cpu()
        for i, row in zip(batch, generated.tolist(), strict=True):
            ended = row.index(end) if end in row else None
            row = row[:ended] if ended is not None else row
            stopped = stop_at(tokenizer, row, stop) if stop else None
            if stopped is not None:
                out[i] = Answer(row[:stopped], True, int(row[stopped]))
            else:
                out[i] = Answer(row, ended is not None, end if ended is not None else None)
    return out


class StopStrings(StoppingCriteria):
    """Ends each row's generation once its text after ``start`` holds one of ``stop`` (its tokens decoded: a stop
    string may span tokens, or sit inside one). Hugging Face's ``stop_strings`` works from the vocabulary's token
    strings, which not every tokenizer can give (a word-level one raises)."""

    def __init__(self, tokenizer, stop: Sequence[str], start: int) -> None:
        self.tokenizer, self.stop, self.start = tokenizer, list(stop), start

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        done = [any(s in self.tokenizer.decode(row[self.start :].tolist()) for s in self.stop) for row in input_ids]
        return torch.as_tensor(done, dtype=torch.bool, device=input_ids.device)


def stop_at(tokenizer, ids: Sequence[int], stop: Sequence[str]) -> int | None:
    """The index of the first token of ``ids`` by which their decoded text holds one of ``stop``; None where it
    holds none."""
    for k in range(len(ids)):
        text = tokenizer.decode(list(ids[: k + 1]), skip_special_tokens=False)
        if any(s in text for s in stop):
            return k
    return None


def normalized(tokenizer, ids: Sequence[int]) -> str:
    """An answer's text as exact match compares it (SQuAD's normalisation, :mod:`attnlens.tasks.squad`)."""
    return normalize_answer(tokenizer.decode(list(ids), skip_special_tokens=True))


def generation_metrics(
    tokenizer, answers: Sequence[Answer], references: Sequence[str], reference_log_probs: Sequence[float]
) -> dict:
    """Exact match of the greedy answers with the references, the share of answers left unfinished, and the
    references' mean log-probability (summed over their tokens, the end token included)."""
    texts = [tokenizer.decode(a.ids, skip_special_tokens=True) for a in answers]
    em = [exact_match(t, [r]) for t, r in zip(texts, references, strict=True)]
    return {
        "n": len(answers),
        "exact_match": float(np.mean(em)) if em else float("nan"),
        "unfinished": float(np.mean([not a.finished for a in answers])) if answers else float("nan"),
        "mean_answer_log_prob": float(np.mean(reference_log_probs)) if len(reference_log_probs) else float("nan"),
    }
