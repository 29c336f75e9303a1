"""One generated answer as every method's scorer sees it (:class:`AnswerExample`, the ``answer`` scope of
:mod:`attnlens.attribution.methods`), and the passes its methods share.

An :class:`AnswerExample` is a prompt and the answer after it, each token's source, and the answer's scores under
the cached ablations of its context (:mod:`attnlens.generation.ablation`): leave-one-out and the surrogate read
those, so that the responses' and the ablations' forwards are run once for every method and metric. A scorer gives
one score per source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from attnlens.attribution.methods.cards import ANSWER, PASSES
from attnlens.attribution.source_scores import answer_gradient_x_input, answer_head_attention, source_sums, top_k_pooled


@dataclass(frozen=True)
class Ablated:
    """An answer's score on cached ablations of its context: the masks (a row per ablation, a flag per source), the
    score ``F`` on each, the wall seconds their forwards took, and the target a method fits to them where it is not
    ``F`` (the surrogate's: ``generation.fit_score`` over the answer and its end token) with that target's tokens."""

    masks: np.ndarray
    scores: np.ndarray
    seconds: float
    fit: np.ndarray | None = None  # None: the fit's target is F
    fit_tokens: int = 0  # the fit target's tokens (0: the answer's)
    #: per ablation, the Jensen–Shannon divergences of the answer's token distributions from the whole context's,
    #: summed over its tokens (leave-one-out's, ARC-JSD's; None where not computed)
    divergence: np.ndarray | None = None

    def target(self, n_answer_tokens: int) -> tuple[np.ndarray, int]:
        """What a method fits to these ablations: the fit target on each and its tokens (``F`` and the answer's
        ``n_answer_tokens`` where no other target is given)."""
        if self.fit is None:
            return self.scores, n_answer_tokens
        return self.fit, self.fit_tokens or n_answer_tokens


@dataclass
class AnswerExample:
    """One generated answer as every scorer sees it."""

    scope: ClassVar[str] = ANSWER
    model: Any
    input_ids: torch.Tensor  # (1, n): the prompt, then the answer
    answer_length: int
    owner: np.ndarray  # (n,): each token's source, −1 for none (the template's, the answer's)
    n_sources: int
    full_score: float  # the answer's score on the whole context (generation.score)
    n_answer_tokens: int  # the answer's tokens, what the surrogate's fit is scaled by
    leave_one_out: Ablated | None = None
    random: Ablated | None = None
    permutation: Ablated | None = None  # orders of the sources, each added one at a time (permutation Shapley's)
    hierarchical: Ablated | None = None  # groups of sources, then the sources of the groups that matter
    head_weights: np.ndarray | None = None  # (layers, heads): learned attention's, fitted on training examples
    pad_id: int = 0
    pool_k: int = 5
    ig_steps: int = 16
    batch_size: int = 8
    alpha: float = 0.01
    trace_samples: int = 30  # AttnTrace's sub-sampled contexts …
    trace_keep: float = 0.4  # … each keeping this share of the sources
    seed: int = 0  # of the sub-samples, with the answer's index
    index: int = 0  # the answer's place among the run's (k of its random masks' seeds; the cite door's is 0)

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
        ``batch_size``, ``alpha``, ``trace_samples``, ``trace_keep``, ``seed``; any object that has them);
        ``cached``: ``leave_one_out``, ``random``, ``permutation``, ``hierarchical``, ``head_weights``, ``index``."""
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
            trace_samples=settings.trace_samples,
            trace_keep=settings.trace_keep,
            seed=settings.seed,
            **cached,
        )

    @classmethod
    def of_response(cls, model, row, settings, pad_id: int, device=None, **cached) -> AnswerExample:
        """A response row (``generate_answers``'): its ids, answer, sources and its score ``settings.score``."""
        return cls.build(
            model,
            row.input_ids,
            row.answer_length,
            row.owner,
            len(row.source_start),
            getattr(row, settings.score),
            settings,
            pad_id,
            device,
            **cached,
        )

    @property
    def n(self) -> int:
        return int(self.input_ids.shape[1])

    @property
    def answer_start(self) -> int:
        return self.n - self.answer_length

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    def forward(self) -> None:
        """One plain forward of the prompt and answer (the unit of a method's cost), only the rows that predict the
        answer reaching the vocabulary, as every method's passes (Gemma 3's 262 144 words at every position doubled
        it)."""
        with torch.no_grad():
            self.model(input_ids=self.input_ids, logits_to_keep=self.answer_length + 1)

    def sums(self, token_scores: np.ndarray) -> np.ndarray:
        """``(n_sources,)``: each source's tokens' scores summed."""
        return source_sums(token_scores, self.owner, self.n_sources)

    def pooled(self, token_scores: np.ndarray) -> np.ndarray:
        """``(n_sources,)``: AttnTrace's pooling, the mean of each source's ``pool_k`` largest token scores."""
        return top_k_pooled(token_scores, self.owner, self.n_sources, self.pool_k)

    def baseline(self) -> torch.Tensor:
        """The ids with the context's tokens replaced by the pad token, the rest kept (IG's baseline)."""
        baseline = self.input_ids.clone()
        baseline[0, torch.as_tensor(self.owner >= 0)] = self.pad_id
        return baseline


# --- the shared passes ---------------------------------------------------------------------------------------


@PASSES["attention"].runs_for(ANSWER)
def _attention(x: AnswerExample) -> np.ndarray:
    """``(layers, heads, n)``: the attention each token receives from the answer's rows, per layer and head."""
    return answer_head_attention(x.model, x.input_ids, x.answer_length)


@PASSES["embedding_gradient"].runs_for(ANSWER)
def _embedding_gradient(x: AnswerExample) -> np.ndarray:
    """``(n,)``: gradient × input of the answer's log-probability at the embedding output."""
    return answer_gradient_x_input(x.model, x.input_ids, x.answer_length)


@PASSES["own"].runs_for(ANSWER)
def _own(x: AnswerExample) -> None:
    return None
