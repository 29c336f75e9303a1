"""AT2's learned attention (Cohen-Wang et al., 2025): one weight per layer and query head, fitted so that the
weighted attention an answer pays each source predicts what removing it does to the answer.

**Features.** For an answer and a source ``s``, feature ``(l, h)`` is the attention of head ``h`` of layer ``l``
from the rows that predict the answer to the source's tokens, averaged over those rows and summed over the tokens
(AT2's ``AttentionFeatureExtractor`` with its trainer's aggregation). attnlens reads those rows with each layer's
own window and query scale (:func:`~attnlens.attribution.source_scores.answer_head_attention`); AT2's released code
applies a full causal mask and ``1/√d`` on every layer, which differs from the model beyond a sliding window and
wherever a family scales its queries otherwise (Gemma 3).

**Fit.** On ablations of *training* examples, never the explained ones: for mask ``m`` of an example (1: the
source kept), the prediction is ``Σ_s (2 m_s − 1) · ⟨w, features_s⟩`` and the weights maximise the Pearson
correlation between the predictions and the answer's ablated scores ``F`` over each example's masks, averaged over
the examples (AT2's ``PearsonCorrelationLoss``, the same ``1e-8`` in its denominator): Adam from ``w = 1/F`` with a
cosine-annealed rate and the gradient's norm clipped to 1, every example in every step (AT2 samples 512 a step; a
run's few hundred fit in one), then ``w`` divided by its L1 norm (a correlation does not see the scale). A source's
score is ``⟨w, features_s⟩``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from attnlens.attribution.source_scores import source_sums

#: AT2's trainer: the most the gradient's norm may be, and the correlation's guard against a constant score.
MAX_GRAD_NORM = 1.0
EPSILON = 1e-8


def source_features(head_rows: np.ndarray, owner: np.ndarray, n_sources: int) -> np.ndarray:
    """``(n_sources, layers · heads)``: each source's summed attention per layer and head, from the answer's
    ``(layers, heads, n)`` row-averaged attention (layer-major, as AT2 flattens it)."""
    layers, heads, n = head_rows.shape
    flat = np.asarray(head_rows, dtype=np.float64).reshape(layers * heads, n)
    return np.stack([source_sums(f, owner, n_sources) for f in flat], axis=1)


@dataclass(frozen=True)
class FitExample:
    """One training example's ablations: ``features`` ``(sources, F)``, ``masks`` ``(masks, sources)`` bool and the
    answer's score ``F`` on each mask."""

    features: np.ndarray
    masks: np.ndarray
    scores: np.ndarray

    def design(self) -> np.ndarray:
        """``(masks, F)``: ``(2 m − 1) · features``, what the weights multiply to predict each mask's score."""
        return (2.0 * np.asarray(self.masks, dtype=np.float64) - 1.0) @ np.asarray(self.features, dtype=np.float64)


def pearson(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per row of ``(examples, masks)``: AT2's Pearson correlation, population moments and ``EPSILON`` added to the
    product of the deviations (0 where either row is constant)."""
    p = predictions - predictions.mean(dim=1, keepdim=True)
    t = targets - targets.mean(dim=1, keepdim=True)
    covariance = (p * t).mean(dim=1)
    return covariance / (p.pow(2).mean(dim=1).sqrt() * t.pow(2).mean(dim=1).sqrt() + EPSILON)


@dataclass(frozen=True)
class HeadWeights:
    """The fitted weights ``(layers, heads)`` and how well they fit: the mean correlation on the examples they were
    fitted to, on the held-out ones, and of the unweighted sum (every head alike, where the fit starts)."""

    weights: np.ndarray
    n_fit: int  # the examples fitted to, the first; the rest held out
    fit_correlation: float
    heldout_correlation: float
    uniform_fit_correlation: float
    uniform_heldout_correlation: float
    losses: list[float]


def _mean_correlation(design: torch.Tensor, targets: torch.Tensor, w: torch.Tensor) -> float:
    return float(pearson(design @ w, targets).mean()) if len(design) else float("nan")


def fit_head_weights(
    examples: Sequence[FitExample],
    layers: int,
    heads: int,
    steps: int = 1000,
    learning_rate: float = 1e-3,
    heldout: float = 0.25,
) -> HeadWeights:
    """AT2's fit (module docstring) on the first ``1 − heldout`` of ``examples`` (one at least), its correlation
    reported on the rest too. Every example needs the same number of masks; float64 throughout, so the fit is the
    same on any machine."""
    if not examples:
        raise ValueError("expected training examples to fit the head weights to, got none")
    n_masks = {len(x.scores) for x in examples}
    if len(n_masks) != 1:
        raise ValueError(f"expected the same number of ablations for every example, got {sorted(n_masks)}")
    n_fit = max(1, len(examples) - round(heldout * len(examples)))  # at least one example to fit to
    design = torch.as_tensor(np.stack([x.design() for x in examples]))  # (examples, masks, F)
    targets = torch.as_tensor(np.stack([np.asarray(x.scores, dtype=np.float64) for x in examples]))
    if design.shape[2] != layers * heads:
        raise ValueError(f"expected {layers} × {heads} features a source, got {design.shape[2]}")
    fit_x, fit_y, held_x, held_y = design[:n_fit], targets[:n_fit], design[n_fit:], targets[n_fit:]
    uniform = torch.full((layers * heads,), 1.0 / (layers * heads), dtype=torch.float64)
    w = torch.nn.Parameter(uniform.clone())
    optimizer = torch.optim.Adam([w], lr=learning_rate)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = -pearson(fit_x @ w, fit_y).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_([w], max_norm=MAX_GRAD_NORM)
        optimizer.step()
        schedule.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        final = w.detach() / w.detach().abs().sum().clamp_min(torch.finfo(torch.float64).tiny)
        return HeadWeights(
            weights=final.reshape(layers, heads).numpy(),
            n_fit=n_fit,
            fit_correlation=_mean_correlation(fit_x, fit_y, final),
            heldout_correlation=_mean_correlation(held_x, held_y, final),
            uniform_fit_correlation=_mean_correlation(fit_x, fit_y, uniform),
            uniform_heldout_correlation=_mean_correlation(held_x, held_y, uniform),
            losses=losses,
        )


def learned_scores(features: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``(sources,)``: ``⟨w, features_s⟩``, the weights ``(layers, heads)`` flattened as the features are."""
    return np.asarray(features, dtype=np.float64) @ np.asarray(weights, dtype=np.float64).reshape(-1)
