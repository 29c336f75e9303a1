"""Head importance by first-order Taylor expansion (Molchanov et al. 2019; T3-vis; recipes §4).

For layer ``l`` and head ``h`` with output features ``R_h = [h·d, (h+1)·d)`` the parameter groups are the
architecture's head groups (:meth:`attnlens.models.seam.Architecture.head_groups`):

* local: rows ``R_h`` of ``W_Q, W_K, W_V`` and entries ``R_h`` of their biases (``query``, ``key``,
  ``value``), and columns ``R_h`` of the attention output dense ``W_O`` (``output``; bias excluded);
* global: rows ``R_h`` of the global rows' own projections, where the architecture has them
  (``query_global, key_global, value_global`` + biases).

``legacy`` is the T3-vis recipe exactly: gradients are never zeroed, so after N examples each
parameter holds ``G = Σ_n ∂loss_n/∂θ``; ``I_raw[l,h] = Σ_{p ∈ local} (G_p θ_p)²``; global min–max.
It ignores the global projections although, in a CLS classifier, the CLS output of every layer is
computed only through them (so the last layer's local Q/K/V gradients are exactly 0), lets
per-example gradients cancel, and scales one head to exactly 0 (§15 B-3).

``fixed`` zeroes gradients per example and accumulates per-example scores — ``elementwise``
``Σ_n Σ_p (g_{n,p} θ_p)²`` or ``group`` ``Σ_n (Σ_p g_{n,p} θ_p)²`` — over local and global groups,
reports the global part as its own matrix too, and normalises by ``max`` (default), ``minmax`` or
``layer_sum``. Both are computed in the same pass (the legacy sum of gradients is accumulated on the
side), so one artifact holds the legacy and fixed matrices side by side.

``Σ_{p ∈ output} g_p θ_p`` is exactly ``∂loss/∂m_h`` for a mask ``m_h`` multiplying the head's output
(Michel et al. 2019), and so is ``Σ`` over the local and global value groups;
``tests/unit/classifier/test_importance.py`` checks both against central finite differences on a float64 model.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from attnlens.io import load_tensors
from attnlens.models import architecture

IMPORTANCE_SCHEMA = "head_importance/v1"
NORMALISATIONS = ("minmax", "max", "layer_sum")
#: Legacy bugs whose behaviour the fixed matrix changes (docs/deviations.md).
FIXED_DEVIATIONS = ("B-3", "B-4")


@torch.no_grad()
def taylor_terms(model, n_heads: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """From the parameters' current ``.grad``: per group, ``(Σ_p (g θ)², Σ_p g θ)`` as ``(L, H)`` float64.

    Without autograd: ``g · θ`` with ``θ`` a parameter would otherwise record a graph, and the running
    sums over examples would keep every example's graph (its gradients and float64 products, ~90 MB
    each at the default model size) alive until the end of the pass.

    A group whose rows split into fewer heads than the query heads (grouped-query attention's keys and values:
    :meth:`~attnlens.models.seam.Architecture.group_heads`) gives each query head an equal share of its key/value
    head's terms, so a layer's total is that of its parameters.
    """
    arch = architecture(model)
    params = arch.head_groups(model)
    result = {}
    device = next(iter(params[0].values()))[0].device  # the sums stay beside the gradients (CUDA or CPU)
    for name in arch.head_group_names:
        sq = torch.zeros(len(params), n_heads, dtype=torch.float64, device=device)
        lin = torch.zeros_like(sq)
        for layer, groups in enumerate(params):
            weight, bias, rows = groups[name]
            if weight.grad is None:
                continue
            prod = (weight.grad[rows] * weight[rows]).double()
            heads = arch.group_heads(model.config, name)
            if name == "output":  # columns R_h: (out, H, d)
                prod = prod.reshape(prod.shape[0], heads, -1).transpose(0, 1).reshape(heads, -1)
            else:  # rows R_h: (H, d, in)
                prod = prod.reshape(heads, -1)
            if bias is not None and bias.grad is not None:
                prod = torch.cat([prod, (bias.grad[rows] * bias[rows]).double().reshape(heads, -1)], 1)
            share = n_heads // heads  # query heads a key/value head serves (1 but for grouped-query attention)
            sq[layer] = (prod**2).sum(1).repeat_interleave(share) / share
            lin[layer] = prod.sum(1).repeat_interleave(share) / share
        result[name] = (sq, lin)
    return result


def normalise(raw: torch.Tensor, how: str) -> torch.Tensor:
    """Scale an ``(L, H)`` importance matrix: ``minmax`` (legacy: one head becomes exactly 0),
    ``max`` (divide by the largest; zero only for a head with zero raw score) or ``layer_sum``
    (each layer's heads sum to 1)."""
    raw = raw.double()
    if how == "minmax":
        span = raw.max() - raw.min()
        return (raw - raw.min()) / span if span > 0 else torch.ones_like(raw)
    if how == "max":
        top = raw.max()
        return raw / top if top > 0 else torch.ones_like(raw)
    if how == "layer_sum":
        sums = raw.sum(1, keepdim=True)
        return torch.where(sums > 0, raw / sums.clamp(min=torch.finfo(raw.dtype).tiny), 1.0 / raw.shape[1])
    raise ValueError(f"unknown normalisation {how!r}; expected one of {NORMALISATIONS}")


def zero_heads(importance: torch.Tensor) -> list[tuple[int, int]]:
    """0-based ``(layer, head)`` indices of the heads whose weight is exactly 0 (they vanish when scaling)."""
    return [(int(a), int(b)) for a, b in torch.nonzero(importance == 0).tolist()]


def head_labels(heads: Iterable[tuple[int, int]]) -> str:
    """``L1 H1, L12 H5``: 0-based ``(layer, head)`` pairs as the 1-based labels of figures and logs."""
    return ", ".join(f"L{layer + 1} H{head + 1}" for layer, head in heads) or "none"


def estimate_head_importance(
    model, batches: Iterable[dict[str, torch.Tensor]], estimator: str = "elementwise"
) -> dict[str, torch.Tensor]:
    """One pass over ``batches`` (one example each, with ``labels``) computing legacy and fixed matrices.

    Returns:
        float64 ``(L, H)`` tensors: ``legacy_raw``; ``fixed_local``, ``fixed_global`` and
        ``fixed_raw`` (their sum for ``elementwise``; for ``group``, the square of the summed
        local+global term) — un-normalised; plus ``n_examples`` (0-d).
    """
    if estimator not in ("elementwise", "group"):
        raise ValueError(f"unknown estimator {estimator!r}")
    model.eval()
    n_heads = model.config.num_attention_heads
    arch = architecture(model)
    # a fused projection (ModernBERT's Wqkv) holds several groups: each parameter once
    params = list(
        {
            id(p): p
            for groups in arch.head_groups(model)
            for w, b, _ in groups.values()
            for p in (w, b)
            if p is not None
        }.values()
    )
    legacy_sum = {id(p): torch.zeros_like(p, dtype=torch.float64) for p in params}
    n_layers = model.config.num_hidden_layers
    local = torch.zeros(n_layers, n_heads, dtype=torch.float64, device=params[0].device)
    glob = torch.zeros_like(local)
    combined = torch.zeros_like(local)
    n = 0
    # only the heads' parameters need a gradient: the feed-forward, embedding and classifier weights'
    # gradients (most of a backward pass's weight gradients) are skipped, the heads' are unchanged
    wanted = {id(p) for p in params}
    others = [p for p in model.parameters() if p.requires_grad and id(p) not in wanted]
    for p in others:
        p.requires_grad_(False)
    try:
        for batch in batches:
            if batch["input_ids"].shape[0] != 1:
                raise ValueError("head importance needs one example per batch (per-example gradients)")
            model.zero_grad(set_to_none=True)
            model(**batch).loss.backward()
            terms = taylor_terms(model, n_heads)
            if estimator == "elementwise":
                loc = sum(terms[g][0] for g in arch.local_groups)
                glo = sum(terms[g][0] for g in arch.global_groups)
                both = loc + glo
            else:
                lin_loc = sum(terms[g][1] for g in arch.local_groups)
                lin_glo = sum(terms[g][1] for g in arch.global_groups)
                loc, glo, both = lin_loc**2, lin_glo**2, (lin_loc + lin_glo) ** 2
            local += loc
            glob += glo
            combined += both
            for p in params:
                if p.grad is not None:
                    legacy_sum[id(p)] += p.grad.double()
            n += 1
    finally:
        for p in others:
            p.requires_grad_(True)
    model.zero_grad(set_to_none=True)
    # legacy: the squared Taylor terms of the gradient summed over examples, local groups only
    saved = {id(p): p.grad for p in params}
    for p in params:
        p.grad = legacy_sum[id(p)].to(p.dtype)
    legacy_terms = taylor_terms(model, n_heads)
    for p in params:
        p.grad = saved[id(p)]
    legacy_raw = sum(legacy_terms[g][0] for g in arch.local_groups)
    out = {"legacy_raw": legacy_raw, "fixed_local": local, "fixed_global": glob, "fixed_raw": combined}
    return {**{k: v.cpu() for k, v in out.items()}, "n_examples": torch.tensor(n)}


def importance_matrices(raw: dict[str, torch.Tensor], normalisation: str) -> dict[str, torch.Tensor]:
    """Add the normalised ``legacy`` (min–max) and ``fixed`` (``normalisation``) matrices."""
    out = dict(raw)
    out["legacy"] = normalise(raw["legacy_raw"], "minmax")
    out["fixed"] = normalise(raw["fixed_raw"], normalisation)
    return out


def load_importance(path, which: str) -> torch.Tensor:
    """The ``legacy`` or ``fixed`` (or any stored) matrix of a head-importance artifact, float32."""
    tensors, _ = load_tensors(path, IMPORTANCE_SCHEMA)
    return tensors[which].float()


def load_importance_modes(path, modes=("legacy", "fixed")) -> dict[str, np.ndarray]:
    """Every mode's matrix of a head-importance artifact, float64, read once."""
    tensors, _ = load_tensors(path, IMPORTANCE_SCHEMA)
    return {mode: tensors[mode].double().numpy() for mode in modes}
