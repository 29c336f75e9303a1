"""Token-pair attributions for Siamese encoders with integrated Jacobians (Moeller et al., EMNLP 2023, EACL 2024).

A Siamese encoder embeds each text on its own, ``e(a) = f(x_a)``, where ``x_a ∈ R^{n×d}`` is the
representation entering layer ``l`` and ``f`` runs the remaining layers and the pooling (mean over
tokens; L2-normalised for cosine similarity). The similarity of two texts is ``s(a, b) = e(a)·e(b)``
(cosine when ``f`` normalises, dot product otherwise). With a reference input ``r`` (the same length,
every non-special token replaced by padding) and ``Δ_a = x_a − r_a``, the path integral of ``f`` gives
per token ``i`` a vector

    ``u_a[i] = ∫₀¹ J_f(r_a + α Δ_a)[:, i, :] Δ_a[i] dα ∈ R^D``   (``Σ_i u_a[i] = f(x_a) − f(r_a)``),

and the token-pair attribution ``A[i, j] = u_a[i] · u_b[j]`` sums to

    ``Σ A = s(a, b) − s(a, r_b) − s(r_a, b) + s(r_a, r_b)``

up to the quadrature error of the integral — the *attribution error* reported per pair. Each ``u_a[i]``
is a Jacobian–vector product of ``f`` with ``Δ_a`` restricted to token ``i``: the ``n`` products of one
interpolation step run as one forward-mode pass over a batch of ``n`` copies, so the ``D × n × d``
Jacobian is never formed. Memory grows with the token chunk (``chunk`` copies of the sequence at
once), not with ``D``.

This module holds the numerics; the pipeline stage (pair corpus, exact-mode training, rules and
figures) builds on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

logger = logging.getLogger(__name__)

#: ``f``: ``(batch, n, d)`` representations at the chosen layer → ``(batch, D)`` embeddings.
Head = Callable[[torch.Tensor], torch.Tensor]


def gauss_legendre(n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes in ``(0, 1)`` and weights summing to 1 of the ``n_steps``-point Gauss–Legendre rule."""
    x, w = np.polynomial.legendre.leggauss(n_steps)
    return (x + 1) / 2, w / 2


def integrated_jacobian(head: Head, x: torch.Tensor, r: torch.Tensor, n_steps: int, chunk: int = 64) -> torch.Tensor:
    """``(n, D)``: ``u[i] = ∫ J_f(r + αΔ)[:, i, :] Δ[i] dα`` by Gauss–Legendre quadrature.

    Args:
        head: ``f``, batched over its first axis.
        x, r: ``(n, d)`` input and reference representations.
        n_steps: quadrature points.
        chunk: sequences per forward-mode pass (tokens × steps are flattened into chunks of this size).
    """
    from torch.func import jvp

    n = x.shape[0]
    delta = x - r
    alphas, weights = gauss_legendre(n_steps)
    # every (step, token) pair is one sequence: the point on the path, and Δ kept on that token only
    step_of = np.repeat(np.arange(n_steps), n)
    token_of = np.tile(np.arange(n), n_steps)
    out = None
    for start in range(0, len(step_of), chunk):
        s = torch.from_numpy(step_of[start : start + chunk])
        t = torch.from_numpy(token_of[start : start + chunk])
        alpha = torch.as_tensor(alphas, dtype=x.dtype)[s]
        points = r[None] + alpha[:, None, None] * delta[None]
        tangents = torch.zeros_like(points)
        tangents[torch.arange(len(t)), t] = delta[t]
        _, directional = jvp(head, (points,), (tangents,))  # (c, D)
        if out is None:
            out = x.new_zeros(n, directional.shape[-1])
        out.index_add_(0, t, directional * torch.as_tensor(weights, dtype=x.dtype)[s][:, None])
    return out


@dataclass
class PairAttribution:
    """Token × token attribution of one pair and the similarity terms it should add up to."""

    matrix: np.ndarray  # (n_a, n_b)
    score: float  # s(a, b)
    score_a_rb: float  # s(a, r_b)
    score_ra_b: float  # s(r_a, b)
    score_ra_rb: float  # s(r_a, r_b)
    n_steps: int

    @property
    def target(self) -> float:
        """``s(a, b) − s(a, r_b) − s(r_a, b) + s(r_a, r_b)``: what ``Σ A`` approximates."""
        return self.score - self.score_a_rb - self.score_ra_b + self.score_ra_rb

    @property
    def error(self) -> float:
        """Attribution error ``Σ A − target`` (quadrature error of the path integrals)."""
        return float(self.matrix.sum() - self.target)


def attribute_pair(
    head: Head,
    x_a: torch.Tensor,
    r_a: torch.Tensor,
    x_b: torch.Tensor,
    r_b: torch.Tensor,
    n_steps: int,
    chunk: int = 64,
) -> PairAttribution:
    """``A = U_a U_bᵀ`` for representations at the chosen layer, with the four similarity terms."""
    u_a = integrated_jacobian(head, x_a, r_a, n_steps, chunk)
    u_b = integrated_jacobian(head, x_b, r_b, n_steps, chunk)
    with torch.no_grad():
        e = head(torch.stack([x_a, r_a])), head(torch.stack([x_b, r_b]))
    (ea, era), (eb, erb) = e
    return PairAttribution(
        matrix=(u_a @ u_b.T).double().numpy(),
        score=float(ea @ eb),
        score_a_rb=float(ea @ erb),
        score_ra_b=float(era @ eb),
        score_ra_rb=float(era @ erb),
        n_steps=n_steps,
    )


class LayerSplitEncoder:
    """A BERT-style sentence encoder split before layer ``layer``: representations in, pooled embedding out.

    ``representation(ids)`` is the hidden state entering layer ``layer`` (``0`` = the embedding
    output); :meth:`head` runs layers ``layer …`` and mean pooling, then L2-normalises for cosine
    similarity. Texts are encoded one at a time (no padding), as a Siamese model sees them.
    """

    def __init__(self, model, layer: int, similarity: str = "cosine") -> None:
        if similarity not in ("cosine", "dot"):
            raise ValueError(f"unknown similarity {similarity!r}; expected 'cosine' or 'dot'")
        n_layers = len(model.encoder.layer)
        if not 0 <= layer <= n_layers:
            raise ValueError(f"layer {layer} outside [0, {n_layers}]")
        if getattr(model.config, "_attn_implementation", "eager") != "eager":
            model.set_attn_implementation("eager")  # forward-mode AD through plain softmax attention
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.layer = layer
        self.similarity = similarity

    @torch.no_grad()
    def representation(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``(n, d)`` hidden state of one text entering layer ``layer``."""
        out = self.model(input_ids=input_ids[None], output_hidden_states=True)
        return out.hidden_states[self.layer][0]

    def head(self, h: torch.Tensor) -> torch.Tensor:
        """``(batch, n, d)`` → ``(batch, D)`` embeddings (mean over tokens, normalised for cosine)."""
        for block in self.model.encoder.layer[self.layer :]:
            h = block(h)
            h = h[0] if isinstance(h, tuple) else h
        e = h.mean(1)
        return torch.nn.functional.normalize(e, dim=-1) if self.similarity == "cosine" else e


def reference_ids(input_ids: torch.Tensor, pad_id: int, special: set[int]) -> torch.Tensor:
    """The reference input: every non-special token replaced by padding (same length, same specials)."""
    keep = torch.tensor([int(i) in special for i in input_ids.tolist()], dtype=torch.bool)
    return torch.where(keep, input_ids, torch.full_like(input_ids, pad_id))
