"""ModernBERT behind the model seam: windowed layers read as bands, full layers kept as queries and keys
(Warner et al. 2024).

ModernBERT alternates attention kinds by layer (``config.layer_types``): ``sliding_attention`` layers let
token ``i`` attend to keys ``|i − j| ≤ local_attention / 2`` (±64 by default), and every third layer
(``full_attention``, from layer 0) attends to every key. Both rotate queries and keys (RoPE, with a
different base per kind); there are no position embeddings and no global tokens.

Whatever ``attn_implementation`` the checkpoint runs with (sdpa, flash where installed; eager becomes sdpa in
:meth:`ModernBert.prepare`), attnlens reads the attention from the layer's own inputs: a forward hook takes
the hidden state and the rotary angles entering each attention module, projects them with the layer's
``Wqkv`` and rotates them with Hugging Face's own function. A windowed layer becomes a
:class:`~attnlens.attention.band.Band` of half-width ``local_attention / 2`` (its softmax over the window
computed by query blocks); a full layer becomes a :class:`~attnlens.attention.full.FullLayer` of queries
and keys, which every summary reduces by query blocks. No ``heads × n × n`` tensor exists, and the eager
path's dense attention weights are never asked for.

Head importance splits ``Wqkv``'s rows into ``query``, ``key`` and ``value`` (rows ``[0, D)``, ``[D, 2D)``,
``[2D, 3D)``) and ``Wo``'s columns by head. Per-embedding IG has only the word embeddings to attribute to.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import transformers
from torch import nn

from attnlens.attention.band import Band
from attnlens.attention.full import FullLayer
from attnlens.attention.weighted import band_products
from attnlens.models.seam import ARCHITECTURES, Architecture, ProjectionRows, RelevanceWiring, forward_capturing_inputs


def window_band(query: torch.Tensor, key: torch.Tensor, length: int, half: int) -> Band:
    """A sliding-window layer of one example as a :class:`Band`: softmax of ``query · key`` over the keys
    ``|i − j| ≤ half`` that are real tokens; ``query`` (scaled, rotated) and ``key`` are ``(H, n, d)``."""
    n = query.shape[1]
    scores = band_products(query, key, half)  # (H, n, 2·half + 1), by query blocks
    j = torch.arange(n)[:, None] + torch.arange(2 * half + 1)[None, :] - half
    ok = ((j >= 0) & (j < length)).to(scores.device)
    probs = torch.softmax(scores.masked_fill(~ok, torch.finfo(scores.dtype).min), -1) * ok
    probs[:, length:] = 0
    return Band(probs, None, length, torch.zeros(0, dtype=torch.long))


class ModernBert(Architecture, family="modernbert"):
    classifier_class = "ModernBertForSequenceClassification"
    qa_class = "ModernBertForQuestionAnswering"
    local_groups = ("query", "key", "value", "output")

    def prepare(self, model: nn.Module, fast: bool = True) -> nn.Module:
        """Eager attention becomes sdpa: Hugging Face's eager ModernBERT returns NaN for every token of a padded
        batch item once its padding is longer than the window's half (a padding query whose window holds no
        real key gets an all-masked softmax, and the NaN reaches the real tokens through the next layers'
        values). sdpa gives the eager numbers on unpadded inputs and finite ones on padded batches; the
        attention is read from the layers' queries and keys either way."""
        if getattr(model.config, "_attn_implementation", None) == "eager":
            model.set_attn_implementation("sdpa")
        return model

    def encoder(self, model: nn.Module) -> nn.Module:
        return model.model if hasattr(model, "model") else model

    def embedding_layers(self, model: nn.Module) -> dict[str, nn.Module]:
        return {"word": self.embeddings(model).tok_embeddings}  # rotary positions: no position embedding

    def layers(self, model: nn.Module) -> Sequence[nn.Module]:
        return list(self.encoder(model).layers)

    def self_attention(self, layer: nn.Module) -> nn.Module:
        return layer.attn

    def projection(self, layer: nn.Module, group: str) -> tuple[nn.Linear, slice]:
        hidden = layer.attn.Wo.in_features
        part = ("query", "key", "value").index(group)
        return layer.attn.Wqkv, slice(part * hidden, (part + 1) * hidden)

    def value_projections(self, layer: nn.Module) -> dict[str, nn.Module]:
        return {"local": ProjectionRows(*self.projection(layer, "value"))}

    def output_projection(self, layer: nn.Module) -> nn.Linear:
        return layer.attn.Wo

    def relevance_wiring(self, model: nn.Module) -> RelevanceWiring:
        """GELU modules in every MLP and in the classifier head; the MLP's ``act(input) * gate`` is a product of two
        functions of the hidden state, so its output projection ``Wo`` gets the uniform rule."""
        layers = self.layers(model)
        activations = [layer.mlp.act for layer in layers]
        if hasattr(model, "head"):
            activations.append(model.head.act)
        return RelevanceWiring(activations=activations, products=[layer.mlp.Wo for layer in layers])

    def describe(self, config) -> str:
        full = [i + 1 for i, t in enumerate(config.layer_types) if t == "full_attention"]
        return (
            f"ModernBERT, window ±{config.local_attention // 2} in {len(config.layer_types) - len(full)} layers, "
            f"full attention in layers {full}"
        )

    def run(self, model: nn.Module, args: dict[str, torch.Tensor], attentions: bool = False) -> tuple:
        """The forward; with ``attentions``, every layer read from its own queries and keys (module docstring)."""
        if not attentions:
            return model(**args), None
        outputs, captured, lengths = forward_capturing_inputs(model, [layer.attn for layer in self.layers(model)], args)
        batch, n = args["input_ids"].shape
        config = model.config
        bands: list[list] = [[] for _ in range(batch)]
        with torch.no_grad():
            for layer, (hidden, (cos, sin)) in zip(self.layers(model), captured, strict=True):
                attn = layer.attn
                qkv = attn.Wqkv(hidden.detach()).view(batch, n, 3, -1, attn.head_dim)
                q, k, _ = (t.transpose(1, 2) for t in qkv.unbind(dim=2))
                q, k = apply_rotary(q, k, cos, sin)
                q = q * attn.head_dim**-0.5
                for b in range(batch):
                    length = int(lengths[b])
                    if layer.attention_type == "sliding_attention":
                        bands[b].append(window_band(q[b], k[b], length, config.sliding_window))
                    else:
                        bands[b].append(FullLayer(q[b].contiguous(), k[b].contiguous(), length))
        return outputs, bands


def apply_rotary(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """Hugging Face's rotation of ModernBERT's queries and keys (the model's own function)."""
    return transformers.models.modernbert.modeling_modernbert.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)


MODERNBERT = ARCHITECTURES.register(ModernBert())
