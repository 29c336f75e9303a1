"""What a generated answer rests on, per source of its context: the attention methods read from the answer's rows
of attention, and any token-level score summed or pooled over each source's tokens.

The answer's rows are those of the positions that predict its tokens (the prompt's last token and every answer
token but the last): the rows the explained score ``F = Σ log p(answer token | what precedes it)`` is computed at.
Only those rows are formed, each layer's as the forward reaches it (:meth:`Architecture.query_rows`: the rows'
queries against the layer's keys, after its rotation, query/key norms, grouped keys and window), so memory grows as
answer × context, never ``n × n``. A token's weight is the attention it receives from those rows, averaged over the
rows (per layer and head: :func:`answer_head_attention`), then over the heads and the layers (or the last layer
alone); a source's score is the sum of its tokens' weights, or
AttnTrace's pooling: the mean of the source's ``k`` largest token weights (Wang et al., 2025), which does not grow
with a source's length. The gradient methods differentiate ``F`` itself (:class:`AnswerForward`): gradient × input,
IG and AttnLRP at the embedding output, as for the classifiers.
"""

from __future__ import annotations

import numpy as np
import torch

from attnlens.attribution.ig import Attribution, freeze, integrate
from attnlens.attribution.lrp import Relevance, attnlrp_rules
from attnlens.models import architecture


def answer_rows(answer_start: int, answer_stop: int) -> tuple[int, int]:
    """The query positions ``[start, stop)`` that predict the answer's tokens ``answer_start … answer_stop − 1``."""
    if not 0 < answer_start < answer_stop:
        raise ValueError(f"expected an answer after a prompt, got tokens {answer_start} to {answer_stop}")
    return answer_start - 1, answer_stop - 1


def answer_head_attention(model, input_ids: torch.Tensor, answer_length: int) -> np.ndarray:
    """``(layers, heads, n)`` float64: per layer and query head, the attention each token of ``input_ids`` ``(1, n)``
    receives from the rows that predict its last ``answer_length`` tokens (:func:`answer_rows`), averaged over
    those rows; one forward without gradient, the rows formed layer by layer as it reaches them."""
    n = int(input_ids.shape[1])
    start, stop = answer_rows(n - answer_length, n)
    arch = architecture(model)
    out = np.zeros((len(arch.layers(model)), int(model.config.num_attention_heads), n))

    def each(index: int, rows) -> None:
        total = torch.zeros(rows.heads, rows.n, dtype=torch.float64, device=rows.key.device)
        for _, _, probs in rows.blocks():
            total += probs.double().sum(1)
        out[index] = (total / rows.rows).cpu().numpy()

    arch.query_rows(model, input_ids, start, stop, each)
    return out


def source_sums(token_scores: np.ndarray, owner: np.ndarray, n_sources: int) -> np.ndarray:
    """``(n_sources,)``: the sum of each source's tokens' scores (``owner``: each token's source, −1 for none)."""
    token_scores, owner = np.asarray(token_scores, dtype=np.float64), np.asarray(owner)
    if token_scores.shape != owner.shape:
        raise ValueError(f"expected a score per token, got {token_scores.shape} scores for {owner.shape} tokens")
    inside = owner >= 0
    return np.bincount(owner[inside], weights=token_scores[inside], minlength=n_sources)


def top_k_pooled(token_scores: np.ndarray, owner: np.ndarray, n_sources: int, k: int) -> np.ndarray:
    """``(n_sources,)``: AttnTrace's pooling, the mean of each source's ``k`` largest token scores (all of them where
    it has fewer; NaN for a source with no token)."""
    if k < 1:
        raise ValueError(f"k: expected at least 1 token a source, got {k}")
    token_scores, owner = np.asarray(token_scores, dtype=np.float64), np.asarray(owner)
    out = np.full(n_sources, np.nan)
    for source in range(n_sources):
        mine = np.sort(token_scores[owner == source])[::-1]
        if len(mine):
            out[source] = mine[:k].mean()
    return out


def subsampled_pooled_attention(
    model,
    input_ids: torch.Tensor,
    answer_length: int,
    owner: np.ndarray,
    n_sources: int,
    k: int,
    samples: int,
    keep: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """``(n_sources,)``: AttnTrace (Wang et al., 2025) with its context sub-sampling. ``samples`` times, a uniformly
    drawn ``⌊keep · n_sources⌋`` of the sources (at least one) are kept and every other source's tokens cut out of
    the prompt, the kept ones closed up (as AttnTrace joins the kept sources' token ids); each kept source scores its
    :func:`top_k_pooled` attention from the answer's rows, averaged over the layers and heads, in that shorter
    prompt. A source scores the mean over the samples that kept it (0 where none did): with fewer sources to share
    it, the attention is less dispersed. ``samples`` forwards of about ``keep`` of the prompt."""
    owner = np.asarray(owner)
    ids = input_ids[0]
    kept_count = max(1, int(n_sources * keep))
    total, seen = np.zeros(n_sources), np.zeros(n_sources)
    for _ in range(samples):
        kept = np.sort(rng.permutation(n_sources)[:kept_count])
        stays = (owner < 0) | np.isin(owner, kept)
        rows = answer_head_attention(model, ids[torch.as_tensor(stays, device=ids.device)][None], answer_length)
        pooled = top_k_pooled(rows.mean(axis=(0, 1)), owner[stays], n_sources, k)
        total[kept] += np.nan_to_num(pooled[kept])
        seen[kept] += 1
    return np.divide(total, seen, out=np.zeros(n_sources), where=seen > 0)


class AnswerForward(torch.nn.Module):
    """``F(input_ids, attention_mask, position_ids)``, ``(batch, 1)``: the answer's log-probability given what
    precedes it, ``Σ_t log p(answer_t | …)`` over ``answer_ids``, which end every sequence of the batch.

    The answer's ids are held here, not read from ``input_ids``: IG's baseline replaces the tokens it is fed, while
    the explained answer stays the same. Only the answer's rows reach the vocabulary (``logits_to_keep``). The
    log-softmax runs in float32 at least (under autocast too)."""

    def __init__(self, model, answer_ids: torch.Tensor):
        super().__init__()
        self.model, self.answer_ids = model, answer_ids.reshape(1, -1)

    def forward(self, input_ids, attention_mask, position_ids):
        a = self.answer_ids.shape[1]
        with architecture(self.model).long_context(self.model):
            # only the rows that predict the answer reach the vocabulary: Gemma 3's 262 144 words at every position
            # of a 2 048-token prompt are 2 GB a sequence, and IG's batch of 16 ran out of 24 GiB
            logits = self.model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, logits_to_keep=a + 1
            ).logits
        rows = logits[:, :a]  # positions n − a − 1 … n − 2 predict the answer's tokens
        log_p = torch.log_softmax(rows.float() if rows.dtype in (torch.float16, torch.bfloat16) else rows, dim=-1)
        targets = self.answer_ids.to(log_p.device).expand(log_p.shape[0], a)
        return log_p.gather(-1, targets[..., None])[..., 0].sum(-1, keepdim=True)


def answer_gradient_x_input(model, input_ids: torch.Tensor, answer_length: int) -> np.ndarray:
    """``(n,)`` float64: gradient × input of the answer's log-probability at the embedding output, summed over the
    hidden size (Captum's ``LayerGradientXActivation``), for one sequence ``(1, n)`` ending in its answer."""
    from captum.attr import LayerGradientXActivation  # noqa: PLC0415 (Captum: the gradient methods only)

    forward, args = _answer_forward(model, input_ids, answer_length)
    attr = LayerGradientXActivation(forward, architecture(model).embeddings(model)).attribute(
        input_ids, target=0, additional_forward_args=args
    )
    return attr[0].detach().double().sum(-1).cpu().numpy()


def answer_integrated_gradients(
    model, input_ids: torch.Tensor, baseline: torch.Tensor, answer_length: int, steps: int, batch: int
) -> Attribution:
    """IG of the answer's log-probability at the embedding output, from ``baseline`` (the ids with the context's
    tokens replaced, as the classifiers' IG replaces them) to ``input_ids``: one run of ``steps`` Gauss–Legendre
    points in batches of ``batch`` (:func:`attnlens.attribution.ig.integrate`), its δ = Σ scores − (F(x) − F(x′))."""
    forward, args = _answer_forward(model, input_ids, answer_length)
    layer = architecture(model).embeddings(model)
    return integrate(
        forward,
        layer,
        input_ids,
        baseline,
        args,
        0,
        min_steps=steps,
        max_steps=steps,
        tolerance=None,
        internal_batch_size=batch,
    )


def _answer_forward(model, input_ids: torch.Tensor, answer_length: int) -> tuple[AnswerForward, tuple]:
    n = input_ids.shape[1]
    if not 0 < answer_length < n:
        raise ValueError(f"expected an answer of 1 to {n - 1} tokens after a prompt, got {answer_length}")
    mask = torch.ones_like(input_ids)
    positions = torch.arange(n, device=input_ids.device)[None]
    return AnswerForward(freeze(model), input_ids[:, n - answer_length :]), (mask, positions)


def answer_attnlrp(model, input_ids: torch.Tensor, answer_length: int) -> Relevance:
    """AttnLRP of the answer's log-probability for one sequence ``(1, n)`` ending in its answer: one forward and one
    backward of ``F`` under AttnLRP's rules (:func:`attnlens.attribution.lrp.attnlrp_rules`), the log-softmax
    and the sum over the answer's tokens differentiated as they are, relevance ``e · ∂̃F/∂e`` at the embedding
    output. ``delta``: ``F − Σ`` relevance, what the biases, the softmaxes and the log-softmax absorbed."""
    forward, args = _answer_forward(model, input_ids, answer_length)
    with attnlrp_rules(model):
        scores = answer_gradient_x_input(model, input_ids, answer_length)
    with torch.no_grad():
        explained = float(forward(input_ids, *args).double())
    return Relevance(scores=scores, explained=explained, delta=explained - float(scores.sum()), target=0)
