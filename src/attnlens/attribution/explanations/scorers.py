"""The scorers of the attention, gradient and AttnLRP methods, each registered under its card's name."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from attnlens.attention.band import Band, layer_configuration, received_attention
from attnlens.attention.weighted import rollout, value_norm_received, value_norms
from attnlens.attribution.attnlrp import attnlrp_batch
from attnlens.attribution.explanations.base import Example, Scored, batch_scorer, scorer, token_scores
from attnlens.attribution.explanations.passes import EmbeddingGradient, Gradients, grad_attention_score
from attnlens.attribution.ig import stack_inputs
from attnlens.models import architecture


def _received(bands: Sequence[Band], layers: str) -> torch.Tensor:
    return layer_configuration(torch.stack([received_attention(b) for b in bands]), layers)


@scorer("attention_last")
@torch.no_grad()
def _attention_last(x: Example, shared) -> Scored:
    return Scored(token_scores(_received(shared[0], "last"), x.n))


@scorer("attention_all")
@torch.no_grad()
def _attention_all(x: Example, shared) -> Scored:
    return Scored(token_scores(_received(shared[0], "all"), x.n))


@scorer("rollout")
@torch.no_grad()
def _rollout(x: Example, shared) -> Scored:
    start = architecture(x.model).readout(x.n)[1]  # the token the head reads: [CLS], a decoder's last token
    return Scored(token_scores(rollout(shared[0], start=start), x.n))


@scorer("value_norm")
@torch.no_grad()
def _value_norm(x: Example, shared) -> Scored:
    bands, hidden = shared
    model = x.model
    heads = model.config.num_attention_heads
    arch = architecture(model)
    per_layer = []
    for layer, band, h in zip(arch.layers(model), bands, hidden, strict=True):
        values, proj = arch.value_projections(layer), arch.output_projection(layer)
        norm_global = value_norms(h, values.get("global", values["local"]), proj, heads) if band.n_global else None
        per_layer.append(value_norm_received(band, value_norms(h, values["local"], proj, heads), norm_global))
    return Scored(token_scores(layer_configuration(torch.stack(per_layer), x.layers), x.n))


@scorer("saliency")
def _saliency(x: Example, shared: EmbeddingGradient) -> Scored:
    return Scored(token_scores(shared.gradient[0].abs().sum(-1), x.n))  # Captum's Saliency(abs=True)


@scorer("grad_input")
def _grad_input(x: Example, shared: EmbeddingGradient) -> Scored:
    return Scored(token_scores((shared.gradient[0] * shared.embeddings[0]).sum(-1), x.n))  # Captum's InputXGradient


@scorer("grad_attention")
def _grad_attention(x: Example, shared: Gradients) -> Scored:
    return Scored(token_scores(grad_attention_score(x.model, shared, x.layers), x.n))


@batch_scorer("attnlrp")
def _attnlrp_documents(xs: Sequence[Example]) -> list[Scored]:
    model = xs[0].model
    inputs = stack_inputs([x.inputs for x in xs], model.config.pad_token_id)
    relevance = attnlrp_batch(model, inputs, [x.target for x in xs], [x.n for x in xs])
    return [Scored(r.scores, n_forwards=1, explained=r.explained, delta=r.delta) for r in relevance]


@scorer("attnlrp")
def _attnlrp(x: Example, shared) -> Scored:
    return _attnlrp_documents([x])[0]
