"""A document's shared passes over the model — the forward with attention outputs, the embedding output and the
gradient of ``F`` at it, the forward + backward with ``∂F/∂o``, each run once per example for every method that
reads it (:data:`attnlens.attribution.methods.PASSES`) — and the band numerics the attention methods compute from
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from captum.attr import LayerActivation, Saliency

from attnlens.attention.band import Band, layer_configuration, received_attention
from attnlens.attention.weighted import grad_attention_received, rollout, value_norm_received, value_norms
from attnlens.attribution.explanations.document_example import Example
from attnlens.attribution.methods.cards import DOCUMENT, PASSES
from attnlens.models import architecture
from attnlens.models.seam import hidden_state
from attnlens.tasks import task_of


class _Capture:
    """Hooks on the embedding module, on every attention module (its input) and on every output projection (its
    input ``o``), through the model seam."""

    def __init__(self, model, grad: bool):
        self.grad = grad
        self.hidden: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        arch = architecture(model)
        self.handles = [arch.embeddings(model).register_forward_hook(self._embed)]
        for layer in arch.layers(model):
            self.handles.append(arch.self_attention(layer).register_forward_pre_hook(self._hidden, with_kwargs=True))
            self.handles.append(arch.output_projection(layer).register_forward_pre_hook(self._attn))

    def _embed(self, module, args, output):
        if self.grad and not output.requires_grad:  # frozen parameters: the gradient starts at the embedding output
            output.requires_grad_(True)

    def _hidden(self, module, args, kwargs):  # a decoder's attention takes its hidden state by keyword
        self.hidden.append(hidden_state(args, kwargs).detach())

    def _attn(self, module, args):  # the output projection's input: o, the heads concatenated
        if self.grad:
            args[0].retain_grad()
        self.outputs.append(args[0])

    def __enter__(self) -> _Capture:
        return self

    def __exit__(self, *exc) -> None:
        for h in self.handles:
            h.remove()


def _heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """``(n, d)`` → ``(heads, n, d / heads)``."""
    return t.reshape(t.shape[0], heads, -1).transpose(0, 1)


class EmbeddingForward(torch.nn.Module):
    """``F(e)``, the task's readout (``softmax(logits)`` for a classifier): the model with the output of its
    embedding ``layer`` replaced by ``e``.

    What Captum's ``Saliency`` and ``InputXGradient`` differentiate: ``e`` is the output IG attributes to
    (``(b, n_pad, d)``: a model may pad inside before the embeddings), every other
    argument (``args``: masks, position ids) is the example's, repeated over the batch.
    """

    def __init__(self, model, layer: torch.nn.Module, args: dict[str, torch.Tensor]):
        super().__init__()
        self.model, self.layer, self.args = model, layer, args
        self.task = task_of(model.config)

    def from_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``F`` of the token ids themselves (no replacement)."""
        return self.task.readout(self.task.logits(self.model(**{**self.args, "input_ids": input_ids})))

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        b = embeddings.shape[0]
        handle = self.layer.register_forward_hook(lambda module, hook_args, output: embeddings)
        try:
            out = self.model(**{k: v.expand(b, *v.shape[1:]) for k, v in self.args.items()})
        finally:
            handle.remove()
        return self.task.readout(self.task.logits(out))


class Attention(NamedTuple):
    """What the ``attention`` pass leaves: every layer's :class:`Band` and the hidden state entering it."""

    bands: list[Band]
    hidden: list[torch.Tensor]


def attention_pass(model, args: dict[str, torch.Tensor]) -> Attention:
    """One forward without gradient: every layer's :class:`Band` and the hidden states entering it."""
    with torch.no_grad(), _Capture(model, grad=False) as cap:
        bands = architecture(model).run(model, args, attentions=True)[1][0]
    return Attention(bands, [h[0] for h in cap.hidden])


@torch.no_grad()
def received_scores(bands: list[Band], layers: str) -> torch.Tensor:
    """``(n,)`` the attention each token receives, summed over the heads of the layer configuration ``layers``."""
    return layer_configuration(torch.stack([received_attention(b) for b in bands]), layers)


@torch.no_grad()
def value_norm_scores(model, bands: list[Band], hidden: list[torch.Tensor], layers: str) -> torch.Tensor:
    """``(n,)`` value-norm weighted received attention (Kobayashi et al. 2020), global rows with a value projection
    of their own weighted with its norm, summed over the heads of ``layers``."""
    heads = model.config.num_attention_heads
    arch = architecture(model)
    per_layer = []
    for layer, band, h in zip(arch.layers(model), bands, hidden, strict=True):
        values, proj = arch.value_projections(layer), arch.output_projection(layer)
        norm_global = value_norms(h, values.get("global", values["local"]), proj, heads) if band.n_global else None
        per_layer.append(value_norm_received(band, value_norms(h, values["local"], proj, heads), norm_global))
    return layer_configuration(torch.stack(per_layer), layers)


@torch.no_grad()
def rollout_scores(model, bands: list[Band], n: int) -> torch.Tensor:
    """``(n,)`` attention rollout from the token the head reads ([CLS], a decoder's last token)."""
    return rollout(bands, start=architecture(model).readout(n)[1])


@dataclass
class Gradients:
    """What one forward + backward of ``F`` leaves for the gradient methods."""

    bands: list[Band] | None  # attention of every layer (when asked for)
    hidden: list[torch.Tensor]  # (n_pad, d) input of every self-attention module
    output_grads: list[torch.Tensor]  # (n_pad, d) ∂F/∂o of every self-attention module (heads concatenated)


def gradient_pass(model, args: dict[str, torch.Tensor], target: int, attentions: bool) -> Gradients:
    """One forward + backward of ``F[target]`` (the task's readout: ``softmax(logits)`` for a classifier) with hooks
    on every attention module's output.

    The model's parameters should be frozen (:func:`attnlens.attribution.ig.freeze`): the gradient starts at
    the embedding output.
    """
    with _Capture(model, grad=True) as cap:
        res, bands = architecture(model).run(model, args, attentions=attentions)
        task = task_of(model.config)
        task.readout(task.logits(res))[0, target].backward()
    return Gradients(
        bands=None if bands is None else bands[0],
        hidden=[h[0] for h in cap.hidden],
        output_grads=[o.grad[0] for o in cap.outputs],
    )


@torch.no_grad()
def grad_attention_score(model, grads: Gradients, layers: str) -> torch.Tensor:
    """``(n,)`` gradient-weighted attention from :func:`gradient_pass`'s outputs (with ``attentions``)."""
    heads = model.config.num_attention_heads
    arch = architecture(model)
    per_layer = []
    for layer, band, h, g in zip(arch.layers(model), grads.bands, grads.hidden, grads.output_grads, strict=True):
        values = arch.value_projections(layer)
        value = _heads(values["local"](h), heads)
        value_global = _heads(values.get("global", values["local"])(h), heads)
        per_layer.append(grad_attention_received(band, _heads(g, heads), value, value_global))
    return layer_configuration(torch.stack(per_layer), layers)


# --- the shared passes, each run once per example for every method that reads it -------------------------


@PASSES["attention"].runs_for(DOCUMENT)
def _attention(x: Example) -> Attention:
    return attention_pass(x.model, x.args)


@dataclass
class EmbeddingGradient:
    """What the ``embedding_gradient`` pass leaves: ``F`` of the embedding output, that output ``e``
    ``(1, n_pad, d)`` and ``∂F_target/∂e`` (Captum's ``Saliency`` without its absolute value: one backward, read by
    every method of the pass)."""

    forward: EmbeddingForward
    embeddings: torch.Tensor
    gradient: torch.Tensor


@PASSES["embedding_gradient"].runs_for(DOCUMENT)
def _embedding_gradient(x: Example) -> EmbeddingGradient:
    forward = EmbeddingForward(x.model, architecture(x.model).embeddings(x.model), x.args)
    embeddings = LayerActivation(forward.from_ids, forward.layer).attribute(x.inputs.input_ids).requires_grad_()
    gradient = Saliency(forward).attribute(embeddings, target=x.target, abs=False).detach()
    return EmbeddingGradient(forward, embeddings.detach(), gradient)


@PASSES["gradient"].runs_for(DOCUMENT)
def _gradient(x: Example) -> Gradients:
    return gradient_pass(x.model, x.args, x.target, attentions=True)


@PASSES["own"].runs_for(DOCUMENT)
def _own(x: Example) -> None:
    return None
