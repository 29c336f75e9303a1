"""Weights drawn anew, cascading from the top: the model's side of the randomisation sanity check
(:mod:`attnlens.attribution.sanity_check`).

A randomised module gets each of its submodules' ``reset_parameters()`` (PyTorch's own initialisation of a linear
layer, a layer norm, an embedding) under a seed, so this needs nothing of an architecture but its transformer
layers (:meth:`attnlens.models.seam.Architecture.layers`) and its head (every child of the classifier that is not
the encoder).
"""

from __future__ import annotations

import torch
from torch import nn

from attnlens.models import architecture


def head_modules(model: nn.Module) -> list[nn.Module]:
    """The model's modules outside its encoder (a classification head and any pooling before it; a language-model
    head), but one whose weights are the encoder's (a head tied to the kept embeddings is not drawn anew)."""
    encoder = architecture(model).encoder(model)
    kept = {id(p) for p in encoder.parameters()}
    return [
        child
        for child in model.children()
        if child is not encoder and not any(id(p) in kept for p in child.parameters())
    ]


def _reset(module: nn.Module) -> int:
    """Draw every parameter of ``module`` anew with its submodules' own initialisation; the number reset."""
    count = 0
    for sub in module.modules():
        reset = getattr(sub, "reset_parameters", None)
        if callable(reset) and any(True for _ in sub.parameters(recurse=False)):
            reset()
            count += 1
    return count


def randomise_top(model: nn.Module, k: int, seed: int) -> nn.Module:
    """``model`` with its head and its top ``k`` transformer layers drawn anew (seeded), in place; eval mode.

    The caller gives a fresh copy of the classifier (loaded again, or ``copy.deepcopy`` of one nothing has
    patched): the model a stage has prepared for its attention paths is not copied here.

    Raises:
        ValueError: more layers than the model has.
    """
    stack = list(architecture(model).layers(model))
    if k > len(stack):
        raise ValueError(f"randomising the top {k} layers: the model has {len(stack)}")
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            reset = sum(_reset(m) for m in head_modules(model))
            for layer in stack[len(stack) - k :]:
                reset += _reset(layer)
    finally:
        torch.random.set_rng_state(generator_state)
    if reset == 0:
        raise ValueError(f"top {k} layers and head: no parameter of the model could be drawn anew")
    return model.eval()
