"""AttnLRP relevance (Achtibat et al., ICML 2024) at the cost of one forward and one backward pass.

Layer-wise relevance propagation with the rules of AttnLRP, in its gradient × input form: the rules are
modified gradients, so one backward pass of the explained logit through a model whose gradients are
modified gives every token's relevance as ``R_j = Σ_d e_jd · ∂̃f/∂e_jd`` at the embedding output ``e`` (the
layer IG, saliency and gradient × input attribute to). The modifications, each a gradient rule applied
through hooks on the modules the model seam names (:meth:`attnlens.models.seam.Architecture.relevance_wiring`,
:meth:`~attnlens.models.seam.Architecture.projection`), so that they act inside whatever attention path the
forward takes — Longformer's blocked band and global rows, BigBird's block-sparse blocks, ModernBERT's
local and global layers — and no attention matrix is ever formed:

* **Normalisation** (every ``nn.LayerNorm``): the identity rule on the division, i.e. the gradient is
  stopped through the standard deviation, ``y = (x − mean x) / sd(x)_stopped · w + b``.
* **Element-wise non-linearities** (GELU, tanh): the identity rule, ``∂̃f/∂x = f(x) / x``: a token's relevance
  passes through unchanged (:func:`identity_rule`).
* **Products of two inputs** (the uniform rule): the relevance of ``a · b`` splits equally between the factors,
  so the gradient of the product is halved. The attention has two, ``q · k`` and ``softmax(·) · v``; halving
  both is the same as scaling the gradients of the queries and keys by ¼ and of the values by ½ where they
  leave their projections (:data:`PROJECTION_FACTORS`) — which reaches every attention implementation
  without touching it (Hugging Face's own, attnlens's blocked paths, sdpa). A gated MLP's
  ``act(input) · gate`` halves the gradient at its output projection's input.
* **Softmax**: nothing to change. AttnLRP's softmax rule ``R_i = x_i (R_i − s_i Σ_j R_j)`` is what the plain
  gradient × input of the softmax gives; its relevance is not conserved (the bias-like term is absorbed).

Relevance is therefore not exactly conserved: biases and the softmax absorb some. ``δ = f − Σ_j R_j`` (``f``
the explained logit) is reported per example, as IG's δ is.

The method's reference implementation, ``lxt`` (Clear BSD licence), states that no patent rights are granted
by its licence; attnlens implements the published rules from the paper and does not use its code.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnlens.attribution.ig import Inputs
from attnlens.models import architecture
from attnlens.tasks import task_of

#: Gradient factor at each attention projection's output: queries and keys meet in ``q · k`` (½) whose
#: softmax meets the values in ``softmax(q · k) · v`` (½ again).
PROJECTION_FACTORS = {"query": 0.25, "key": 0.25, "value": 0.5}


class _ScaleGradient(torch.autograd.Function):
    """Identity forward; the gradient multiplied by ``factor`` (a number or a tensor broadcast over the last axis)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, factor):
        ctx.factor = factor
        return x.clone()  # a new tensor: Hugging Face scales its queries in place

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        factor = ctx.factor
        if isinstance(factor, torch.Tensor):
            factor = factor.to(grad.dtype)
        return grad * factor, None


def scale_gradient(x: torch.Tensor, factor: float | torch.Tensor) -> torch.Tensor:
    """``x`` whose gradient is multiplied by ``factor`` on the way back (the uniform rule for ``factor = ½``)."""
    return _ScaleGradient.apply(x, factor)


def _swap_gradient(value: torch.Tensor, surrogate: torch.Tensor) -> torch.Tensor:
    """``value`` exactly in the forward, with ``surrogate``'s gradient (``surrogate − surrogate`` is exactly 0)."""
    return value.detach() + (surrogate - surrogate.detach())


def identity_rule(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``y = f(x)`` of an element-wise ``f`` with the gradient ``f(x) / x`` (0 where ``x = 0``): the identity rule."""
    with torch.no_grad():
        ratio = torch.where(x != 0, y / torch.where(x != 0, x, 1), 0).to(y.dtype)
    return _swap_gradient(y, x * ratio)


def layer_norm_rule(module: nn.LayerNorm, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``y = LayerNorm(x)`` with the gradient of ``(x − mean x) / sd(x) · w + b``, ``sd`` held constant (in the
    output's precision: under autocast a layer norm runs in float32 on half-precision inputs)."""
    dims = tuple(range(-len(module.normalized_shape), 0))
    x = x.to(y.dtype)
    centred = x - x.mean(dims, keepdim=True)
    sd = torch.sqrt(x.var(dims, unbiased=False, keepdim=True) + module.eps).detach()
    surrogate = centred / sd
    if module.weight is not None:
        surrogate = surrogate * module.weight
    if module.bias is not None:
        surrogate = surrogate + module.bias
    return _swap_gradient(y, surrogate.to(y.dtype))


def _projection_factors(model) -> dict[nn.Module, float | torch.Tensor]:
    """Per attention projection module, the gradient factor of its output (a tensor over its output features where
    one fused module projects queries, keys and values)."""
    arch = architecture(model)
    groups = [g for g in arch.head_group_names if g != "output"]
    out: dict[nn.Module, torch.Tensor] = {}
    for layer in arch.layers(model):
        for group in groups:
            role = group.removesuffix("_global")
            linear, rows = arch.projection(layer, group)
            factor = out.setdefault(linear, torch.ones(linear.out_features))
            factor[rows] = PROJECTION_FACTORS[role]
    return {m: float(f[0]) if bool((f == f[0]).all()) else f for m, f in out.items()}


@contextmanager
def attnlrp_rules(model) -> Iterator[None]:
    """Inside the block, ``model``'s backward passes follow AttnLRP's rules (module docstring); its forward
    values are unchanged. The hooks are removed on exit."""
    arch = architecture(model)
    wiring = arch.relevance_wiring(model)
    handles = []
    for module in model.modules():
        if isinstance(module, nn.LayerNorm):
            handles.append(module.register_forward_hook(lambda m, args, y: layer_norm_rule(m, args[0], y)))
    for module in wiring.activations:
        handles.append(module.register_forward_hook(lambda m, args, y: identity_rule(args[0], y)))
    for producer, consumer in wiring.inline:
        pending: list[torch.Tensor] = []
        handles.append(producer.register_forward_hook(lambda m, args, z, pending=pending: pending.append(z)))

        def inline(m, args, pending=pending):
            return (identity_rule(pending.pop(), args[0]), *args[1:])

        handles.append(consumer.register_forward_pre_hook(inline))
    for module in wiring.products:
        handles.append(module.register_forward_pre_hook(lambda m, args: (scale_gradient(args[0], 0.5), *args[1:])))
    for module, factor in _projection_factors(model).items():
        if isinstance(factor, torch.Tensor):
            factor = factor.to(next(module.parameters()).device)
        handles.append(module.register_forward_hook(lambda m, args, y, f=factor: scale_gradient(y, f)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@dataclass(frozen=True)
class Relevance:
    """AttnLRP for one example."""

    scores: np.ndarray  # (n,) relevance per token, float64
    explained: float  # the explained logit f
    delta: float  # f − Σ scores: what the biases and the softmax absorbed
    target: int


def logit_gradients(model, inputs: Inputs, targets: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """``(e, ∂f/∂e, f)`` for the logit ``f_b`` of class ``targets[b]`` of every example of a batch: one forward and one
    backward (of ``Σ_b f_b``: no example's logit depends on another's tokens) to the embedding output ``e``
    (``(b, n_pad, d)``; a model may pad inside), under whatever gradient rules are in force (:func:`attnlrp_rules`).
    The model's parameters should be frozen (:func:`attnlens.attribution.ig.freeze`): the gradient starts at ``e``."""
    kept: list[torch.Tensor] = []

    def keep(module, args, output):
        if not output.requires_grad:
            output.requires_grad_(True)
        output.retain_grad()
        kept.append(output)

    handle = architecture(model).embeddings(model).register_forward_hook(keep)
    try:
        with torch.enable_grad():
            out = model(input_ids=inputs.input_ids, **inputs.forward_kwargs())
            task = task_of(model.config)
            logits = task.explained_logits(task.logits(out))
            rows = torch.arange(len(targets), device=logits.device)
            explained = logits[rows, torch.as_tensor(list(targets), device=logits.device)]
            explained.sum().backward()
    finally:
        handle.remove()
    (embedding,) = kept
    return embedding.detach(), embedding.grad, explained.detach().double().cpu().numpy()


def attnlrp_batch(model, inputs: Inputs, targets: Sequence[int], lengths: Sequence[int]) -> list[Relevance]:
    """AttnLRP relevance of the logit of class ``targets[b]`` for every example of a right-padded batch (``inputs``:
    :func:`attnlens.attribution.ig.stack_inputs`; ``lengths[b]`` the real tokens of example ``b``), from one forward
    and one backward pass (:func:`logit_gradients` under :func:`attnlrp_rules`). The rules act per token and the
    attention never crosses examples, so each example's relevance is what it gets alone, to rounding
    (``tests/unit/attribution/test_attnlrp.py``)."""
    with attnlrp_rules(model):
        embedding, grad, values = logit_gradients(model, inputs, targets)
    out = []
    for b, (target, n) in enumerate(zip(targets, lengths, strict=True)):
        scores = (embedding[b, :n].double() * grad[b, :n].double()).sum(-1).cpu().numpy()
        value = float(values[b])
        out.append(Relevance(scores=scores, explained=value, delta=value - float(scores.sum()), target=int(target)))
    return out


def attnlrp(model, inputs: Inputs, target: int) -> Relevance:
    """AttnLRP relevance of the logit of class ``target`` for one example (``inputs`` as IG prepares them): a batch
    of one (:func:`attnlrp_batch`)."""
    return attnlrp_batch(model, inputs, [target], [inputs.input_ids.shape[1]])[0]
