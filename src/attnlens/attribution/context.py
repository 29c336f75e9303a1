"""What a generated answer rests on, per source of its context: the attention methods read from the answer's rows
of attention, and any token-level score summed or pooled over each source's tokens.

The answer's rows are those of the positions that predict its tokens (the prompt's last token and every answer
token but the last): the rows the explained score ``F = Σ log p(answer token | what precedes it)`` is computed at.
Only those rows are formed, block by block of the layer's queries (:meth:`FullLayer.probabilities`), never a
``heads × n × n`` matrix. A token's weight is the attention it receives from those rows, averaged over the rows,
the heads and the layers (or the last layer alone); a source's score is the sum of its tokens' weights, or
AttnTrace's pooling: the mean of the source's ``k`` largest token weights (Wang et al., 2025), which does not grow
with a source's length.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from attnlens.attention.full import FullLayer


def answer_rows(answer_start: int, answer_stop: int) -> tuple[int, int]:
    """The query positions ``[start, stop)`` that predict the answer's tokens ``answer_start … answer_stop − 1``."""
    if not 0 < answer_start < answer_stop:
        raise ValueError(f"expected an answer after a prompt, got tokens {answer_start} to {answer_stop}")
    return answer_start - 1, answer_stop - 1


def answer_attention(layers: Sequence[FullLayer], answer_start: int, answer_stop: int) -> np.ndarray:
    """``(layers, n)`` float64: per layer, the attention each token receives from the rows that predict the answer
    (:func:`answer_rows`), averaged over those rows and the heads."""
    start, stop = answer_rows(answer_start, answer_stop)
    out = np.zeros((len(layers), layers[0].n)) if layers else np.zeros((0, 0))
    for i, layer in enumerate(layers):
        if stop > layer.length:
            raise ValueError(f"answer rows up to {stop} past the {layer.length} real tokens")
        with torch.no_grad():
            probs = layer.probabilities(start, stop)  # (heads, rows, n)
        out[i] = probs.double().mean(dim=(0, 1)).cpu().numpy()
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
