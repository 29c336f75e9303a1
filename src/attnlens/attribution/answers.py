"""The methods of a generated answer, per source of its context: one scorer per method card of scope ``answer``
(:mod:`attnlens.attribution.methods`), the passes they share, and the driver that runs them on one answer.

An :class:`AnswerExample` is a prompt and the answer after it, each token's source, and the answer's scores under
the cached ablations of its context (:mod:`attnlens.attribution.ablation`): leave-one-out and the surrogate read
those, so that the responses' and the ablations' forwards are run once for every method and metric. A scorer gives
one score per source (:class:`SourceScored`) and what it cost beyond the shared pass: forwards and backwards of the
answer, and the seconds of the cached ablations it read.

Adding a method: its card (scope ``answer``) in :mod:`attnlens.attribution.methods`, its scorer here under the same
name (``@source_scorer(name)``), a test against an independent reference, and its docs row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from attnlens.attribution.context import (
    answer_attnlrp,
    answer_gradient_x_input,
    answer_head_attention,
    answer_integrated_gradients,
    source_sums,
    top_k_pooled,
)
from attnlens.attribution.learned import learned_scores, source_features
from attnlens.attribution.methods import ANSWER, PASSES, REGISTRY, get_method
from attnlens.attribution.surrogate import fit_surrogate
from attnlens.device import PeakMemory, synchronize
from attnlens.registry import Registry


@dataclass(frozen=True)
class Ablated:
    """An answer's score on cached ablations of its context: the masks (a row per ablation, a flag per source), the
    score on each, and the wall seconds their forwards took."""

    masks: np.ndarray
    scores: np.ndarray
    seconds: float


@dataclass
class AnswerExample:
    """One generated answer as every scorer sees it."""

    model: Any
    input_ids: torch.Tensor  # (1, n): the prompt, then the answer
    answer_length: int
    owner: np.ndarray  # (n,): each token's source, −1 for none (the template's, the answer's)
    n_sources: int
    full_score: float  # the answer's score on the whole context (generation.score)
    n_answer_tokens: int  # the answer's tokens, what the surrogate's fit is scaled by
    leave_one_out: Ablated | None = None
    random: Ablated | None = None
    head_weights: np.ndarray | None = None  # (layers, heads): learned attention's, fitted on training examples
    pad_id: int = 0
    pool_k: int = 5
    ig_steps: int = 16
    batch_size: int = 8
    alpha: float = 0.01

    @classmethod
    def build(
        cls,
        model,
        sequence,
        answer_length: int,
        owner,
        n_sources: int,
        full_score: float,
        settings,
        pad_id: int,
        device=None,
        **cached,
    ) -> AnswerExample:
        """One answer on ``model``: ``sequence`` (the prompt, then the answer's ``answer_length`` tokens) on
        ``device``; ``settings``: what the scorers read of the generation section (``pool_k``, ``ig_steps``,
        ``batch_size``, ``alpha``; any object that has them); ``cached``: ``leave_one_out``, ``random``,
        ``head_weights``."""
        return cls(
            model=model,
            input_ids=torch.as_tensor(np.asarray(sequence, dtype=np.int64))[None].to(device),
            answer_length=int(answer_length),
            owner=np.asarray(owner, dtype=np.int64),
            n_sources=int(n_sources),
            full_score=float(full_score),
            n_answer_tokens=int(answer_length),
            pad_id=int(pad_id),
            pool_k=settings.pool_k,
            ig_steps=settings.ig_steps,
            batch_size=settings.batch_size,
            alpha=settings.alpha,
            **cached,
        )

    @property
    def n(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def answer_start(self) -> int:
        return self.n - self.answer_length

    def sums(self, token_scores: np.ndarray) -> np.ndarray:
        return source_sums(token_scores, self.owner, self.n_sources)


@dataclass
class SourceScored:
    """A scorer's result: ``(n_sources,)`` float64 scores, what it ran, and what a conserving method explains."""

    scores: np.ndarray
    n_forwards: int = 0
    n_backwards: int = 0
    ablation_seconds: float = 0.0  # the wall seconds of the cached ablations it read
    explained: float | None = None
    delta: float | None = None  # explained − Σ its token scores


#: ``{pass name: run(answer) -> shared}`` for the passes of :data:`~attnlens.attribution.methods.PASSES`.
ANSWER_PASSES: Registry[Callable[[AnswerExample], Any]] = Registry("answer passes", "methods.PASSES")
#: ``{method name: scores(answer, shared) -> SourceScored}``, one per method card of scope ``answer``.
SOURCE_SCORERS: Registry[Callable[[AnswerExample, Any], SourceScored]] = Registry(
    "answer methods' scorers", "generation.methods"
)
#: What a pass costs the methods that read it: (forwards, backwards).
PASS_COST = {"attention": (1, 0), "embedding_gradient": (1, 1), "own": (0, 0)}


def answer_pass(name: str):
    if name not in PASSES:
        raise ValueError(f"no pass {name!r} in attnlens.attribution.methods.PASSES")
    return ANSWER_PASSES.register(name)


def source_scorer(name: str):
    """Register the computation of the answer method ``name`` (a card of scope ``answer``)."""
    if ANSWER not in get_method(name).scopes:
        raise ValueError(f"method {name!r} does not explain a generated answer (its card's scopes)")
    return SOURCE_SCORERS.register(name)


# --- the shared passes ---------------------------------------------------------------------------------------


@answer_pass("attention")
def _attention(x: AnswerExample) -> np.ndarray:
    """``(layers, heads, n)``: the attention each token receives from the answer's rows, per layer and head."""
    return answer_head_attention(x.model, x.input_ids, x.answer_length)


@answer_pass("embedding_gradient")
def _embedding_gradient(x: AnswerExample) -> np.ndarray:
    """``(n,)``: gradient × input of the answer's log-probability at the embedding output."""
    return answer_gradient_x_input(x.model, x.input_ids, x.answer_length)


@answer_pass("own")
def _own(x: AnswerExample) -> None:
    return None


# --- the scorers -------------------------------------------------------------------------------------------------


@source_scorer("attention_last")
def _attention_last(x: AnswerExample, rows: np.ndarray) -> SourceScored:
    return SourceScored(x.sums(rows[-1].mean(axis=0)))


@source_scorer("attention_all")
def _attention_all(x: AnswerExample, rows: np.ndarray) -> SourceScored:
    return SourceScored(x.sums(rows.mean(axis=(0, 1))))


@source_scorer("attntrace")
def _attntrace(x: AnswerExample, rows: np.ndarray) -> SourceScored:
    return SourceScored(top_k_pooled(rows.mean(axis=(0, 1)), x.owner, x.n_sources, x.pool_k))


@source_scorer("learned_attention")
def _learned_attention(x: AnswerExample, rows: np.ndarray) -> SourceScored:
    if x.head_weights is None:
        raise ValueError("learned_attention: no fitted head weights (rule fit_learned_attention)")
    if x.head_weights.shape != rows.shape[:2]:
        raise ValueError(f"learned_attention: weights {x.head_weights.shape} for {rows.shape[:2]} layers × heads")
    return SourceScored(learned_scores(source_features(rows, x.owner, x.n_sources), x.head_weights))


@source_scorer("grad_input")
def _grad_input(x: AnswerExample, token_scores: np.ndarray) -> SourceScored:
    return SourceScored(x.sums(token_scores))


@source_scorer("attnlrp")
def _attnlrp(x: AnswerExample, _shared) -> SourceScored:
    r = answer_attnlrp(x.model, x.input_ids, x.answer_length)
    return SourceScored(x.sums(r.scores), 1, 1, explained=r.explained, delta=r.delta)


@source_scorer("integrated_gradients")
def _integrated_gradients(x: AnswerExample, _shared) -> SourceScored:
    baseline = x.input_ids.clone()
    baseline[0, torch.as_tensor(x.owner >= 0)] = x.pad_id  # the context's tokens replaced, the rest kept
    a = answer_integrated_gradients(x.model, x.input_ids, baseline, x.answer_length, x.ig_steps, x.batch_size)
    # delta as every method's: what it explains less Σ its token scores (IG's own δ has the other sign); the tokens
    # outside the context are the baseline's own, so their scores are 0 and the sources hold every token's score
    return SourceScored(x.sums(a.scores), a.n_steps + 2, a.n_steps, explained=a.gap, delta=-a.delta)


@source_scorer("leave_one_out")
def _leave_one_out(x: AnswerExample, _shared) -> SourceScored:
    if x.leave_one_out is None:
        raise ValueError("leave_one_out: the answer has no cached leave-one-out ablations")
    loo = x.leave_one_out
    dropped = np.argmin(loo.masks, axis=1)  # the one source each mask removes
    scores = np.zeros(x.n_sources)
    scores[dropped] = x.full_score - loo.scores
    return SourceScored(scores, len(loo.masks), 0, loo.seconds)


@source_scorer("surrogate")
def _surrogate(x: AnswerExample, _shared) -> SourceScored:
    if x.random is None:
        raise ValueError("surrogate: the answer has no cached random ablations")
    weights, _bias = fit_surrogate(x.random.masks, x.random.scores, x.n_answer_tokens, x.alpha)
    return SourceScored(weights, len(x.random.masks), 0, x.random.seconds)


# --- the driver ----------------------------------------------------------------------------------------------


@dataclass
class AnswerExplanation:
    """Every requested method's source scores for one answer, and what each cost."""

    scores: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    n_forwards: dict[str, int] = field(default_factory=dict)
    n_backwards: dict[str, int] = field(default_factory=dict)
    peak_bytes: dict[str, int] = field(default_factory=dict)
    explained: dict[str, float] = field(default_factory=dict)
    delta: dict[str, float] = field(default_factory=dict)
    forward_seconds: float = float("nan")


def _clock(device) -> float:
    synchronize(device)
    return time.perf_counter()


def explain_answer(x: AnswerExample, methods: Sequence[str]) -> AnswerExplanation:
    """Source scores of every method in ``methods`` (cards of scope ``answer``) for one answer: each shared pass
    once, its methods scored from it in registry order. A method's seconds are its pass's, its own and those of
    the cached ablations it read; ``forward_seconds`` is one plain forward of the answer, the unit of its cost."""
    missing = [m for m in methods if m not in SOURCE_SCORERS]
    if missing:
        raise ValueError(f"answer methods {missing} have no scorer (@source_scorer in attnlens.attribution.answers)")
    device = x.input_ids.device
    out = AnswerExplanation()
    with torch.no_grad():
        x.model(input_ids=x.input_ids)  # warm-up: the first call of a shape pays for allocations
        t0 = _clock(device)
        x.model(input_ids=x.input_ids)
        out.forward_seconds = _clock(device) - t0
    for needs in PASSES:
        wanted = [name for name, card in REGISTRY.items() if card.needs == needs and name in methods]
        if not wanted:
            continue
        with PeakMemory(device) as pass_peak:
            t0 = _clock(device)
            shared = ANSWER_PASSES[needs](x)
            pass_seconds = _clock(device) - t0
        forwards, backwards = PASS_COST[needs]
        for method in wanted:
            with PeakMemory(device) as peak:
                t0 = _clock(device)
                res = SOURCE_SCORERS[method](x, shared)
                seconds = _clock(device) - t0
            out.scores[method] = np.asarray(res.scores, dtype=np.float64)
            out.seconds[method] = pass_seconds + seconds + res.ablation_seconds
            out.n_forwards[method] = forwards + res.n_forwards
            out.n_backwards[method] = backwards + res.n_backwards
            out.peak_bytes[method] = max(pass_peak.bytes, peak.bytes)
            if res.explained is not None:
                out.explained[method], out.delta[method] = res.explained, res.delta
        del shared
    return out
