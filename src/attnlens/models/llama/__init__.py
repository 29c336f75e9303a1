"""Llama and Mistral behind the model seam: decoders read as causal layers of queries and keys, never ``n × n``.

A decoder classifier (``LlamaForSequenceClassification``, ``MistralForSequenceClassification``) reads the last real
token: its attention is causal (query ``i`` attends to the keys ``j ≤ i``), full in every Llama layer and within a
sliding window of ``config.sliding_window`` keys in every Mistral layer (``i − window < j ≤ i``, Hugging Face's
``sliding_window_causal_mask_function``). Queries and keys are rotated (RoPE); there are no position embeddings,
no global tokens and no ``[CLS]``. Grouped-query attention shares each key/value head among
``num_attention_heads / num_key_value_heads`` consecutive query heads.

Whatever ``attn_implementation`` the checkpoint runs with (eager, sdpa, flex), attnlens reads the attention from the
layer's own inputs: a forward hook takes the hidden state and the rotary angles entering each attention module,
projects them with the layer's ``q_proj`` and ``k_proj`` (and its ``q_norm`` / ``k_norm`` where the family has
them), rotates them with the model's own function and scales the queries by the module's ``scaling``. Each layer
becomes a causal :class:`~attnlens.attention.full.FullLayer` (with its window, and its keys kept per key/value
head), which every summary reduces by query blocks, scoring only the keys a block can reach.

**What a head is here.** A *query head*: the attention summaries, head importance and value norms are per query
head (``num_attention_heads`` of them). Head importance splits ``q_proj``'s rows and ``o_proj``'s columns by query
head and ``k_proj``'s and ``v_proj``'s rows by key/value head; a key/value head's Taylor terms are shared equally
among the query heads that read it (:meth:`Llama.group_heads`), so a layer's total is unchanged. Value norms and
gradient-weighted attention read each query head's value vectors from its shared value head.

**AttnLRP.** RMSNorm gets the identity rule on its scale (``y = x · w / rms(x)`` with ``rms`` held, as the method
prescribes for normalisations); the gated MLP's ``act(gate) · up`` is a product (the uniform rule at ``down_proj``'s
input), SiLU gets the identity rule; the rotation is linear and needs no rule.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from torch import nn

from attnlens.attention.full import FullLayer, QueryRows
from attnlens.models.llama.causal_attention import long_context
from attnlens.models.seam import ARCHITECTURES, Architecture, RelevanceWiring, forward_capturing_inputs, hidden_state

#: The head groups' modules in a decoder layer's attention, by attnlens's group names.
PROJECTIONS = {"query": "q_proj", "key": "k_proj", "value": "v_proj"}


class SharedValues(nn.Module):
    """A layer's ``v_proj`` read per query head: each key/value head's values repeated for the ``group`` query heads
    that share it (Hugging Face's ``repeat_kv``), so value norms and gradient-weighted attention see one value vector
    per query head."""

    def __init__(self, linear: nn.Linear, key_heads: int, group: int):
        super().__init__()
        self.linear, self.key_heads, self.group = linear, key_heads, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        values = self.linear(x)
        if self.group == 1:
            return values
        shape = values.shape[:-1]
        per_head = values.reshape(*shape, self.key_heads, -1)
        return per_head.repeat_interleave(self.group, dim=-2).reshape(*shape, -1)


class Llama(Architecture, family="llama"):
    """Llama: causal full attention in every layer, grouped-query heads, RMSNorm, a gated SiLU MLP."""

    classifier_class = "LlamaForSequenceClassification"
    qa_class = "LlamaForQuestionAnswering"
    lm_class = "LlamaForCausalLM"
    local_groups = ("query", "key", "value", "output")

    def prepare(self, model: nn.Module, fast: bool = True) -> nn.Module:
        """Eager attention becomes sdpa where a layer has a sliding window: Hugging Face's eager path gives NaN logits
        on a right-padded batch once a padding query's window holds no real key (its all-masked softmax, then its
        value reaching the real tokens' next layers), where sdpa gives the eager numbers on unpadded inputs and
        finite ones on padded batches. The attention is read from the layers' queries and keys either way."""
        if any(self.windows(model.config)) and getattr(model.config, "_attn_implementation", None) == "eager":
            model.set_attn_implementation("sdpa")
        return model

    def encoder(self, model: nn.Module) -> nn.Module:
        """The decoder stack under any head (``model`` in a classifier, ``transformer`` in a question answerer)."""
        return model.base_model

    def embeddings(self, model: nn.Module) -> nn.Module:
        return self.encoder(model).embed_tokens

    def embedding_layers(self, model: nn.Module) -> dict[str, nn.Module]:
        return {"word": self.embeddings(model)}  # rotary positions: no position embedding

    def layers(self, model: nn.Module) -> Sequence[nn.Module]:
        return list(self.encoder(model).layers)

    def self_attention(self, layer: nn.Module) -> nn.Module:
        return layer.self_attn

    def projection(self, layer: nn.Module, group: str) -> tuple[nn.Linear, slice]:
        return getattr(layer.self_attn, PROJECTIONS[group]), slice(None)

    def group_heads(self, config, group: str) -> int:
        """Heads the rows of a group's projection split into: key/value heads for ``key`` and ``value``."""
        if group in ("key", "value"):
            return int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
        return int(config.num_attention_heads)

    def value_projections(self, layer: nn.Module) -> dict[str, nn.Module]:
        attn = layer.self_attn
        key_heads = attn.v_proj.out_features // attn.head_dim
        return {"local": SharedValues(attn.v_proj, key_heads, attn.num_key_value_groups)}

    def output_projection(self, layer: nn.Module) -> nn.Linear:
        return layer.self_attn.o_proj

    def relevance_wiring(self, model: nn.Module) -> RelevanceWiring:
        """The MLP's activation (SiLU; Gemma's tanh GELU) and every RMSNorm (the queries' and keys' too, where the
        family has them) take the identity rule; the MLP's ``act(gate) · up`` is a product, so ``down_proj`` gets the
        uniform rule."""
        layers = self.layers(model)
        # every family names its RMSNorm class so (LlamaRMSNorm, Qwen3RMSNorm, Gemma3RMSNorm): the layers' two to
        # four norms, the final one and the per-head query/key norms, whatever their attribute names
        norms = [m for m in self.encoder(model).modules() if type(m).__name__.endswith("RMSNorm")]
        return RelevanceWiring(
            activations=[layer.mlp.act_fn for layer in layers] + norms,
            products=[layer.mlp.down_proj for layer in layers],
        )

    def readout(self, length: int) -> tuple[str, int]:
        """The classifier reads the last real token (``…ForSequenceClassification``: the last before the padding)."""
        return "last token", length - 1

    def windows(self, config) -> list[int | None]:
        """Each layer's sliding window (keys ``i − window < j ≤ i``), ``None`` for full causal attention: from
        ``config.layer_types`` where the family has it (a ``sliding_attention`` layer has ``config.sliding_window``,
        as Hugging Face's attention modules set it), else full in every layer."""
        types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
        window = getattr(config, "sliding_window", None)
        return [window if kind == "sliding_attention" else None for kind in types]

    def describe(self, config) -> str:
        heads, kv = config.num_attention_heads, self.group_heads(config, "key")
        sharing = f", {heads} query heads sharing {kv} key/value heads" if kv != heads else ""
        windows = self.windows(config)
        windowed = [w for w in windows if w]
        if not windowed:
            kind = f"full causal attention in {len(windows)} layers"
        elif len(windowed) == len(windows):
            kind = f"a causal sliding window of {windowed[0]} keys in {len(windows)} layers"
        else:
            kind = (
                f"a causal sliding window of {windowed[0]} keys in {len(windowed)} of {len(windows)} layers, "
                "full causal attention in the others"
            )
        return f"{self.family.label}, {kind}{sharing}"

    def reading_notes(self, config, lengths: Sequence[int]) -> list[str]:
        """A note when no input is longer than the sliding window: those layers then attend as full ones do."""
        window = max((w for w in self.windows(config) if w), default=None)
        if window is None or not lengths or max(lengths) > window:
            return []
        return [
            f"{self.family.label}'s sliding window ({window} keys) reaches back past the first token of every "
            f"input (at most {max(lengths)} tokens): its windowed layers attend as its full causal ones do"
        ]

    def run(self, model: nn.Module, args: dict[str, torch.Tensor], attentions: bool = False) -> tuple:
        """The forward; with ``attentions``, every layer read from its own queries and keys (module docstring)."""
        if not attentions:
            return model(**args), None
        layers = self.layers(model)
        outputs, captured, lengths = forward_capturing_inputs(model, [self.self_attention(x) for x in layers], args)
        bands: list[list] = [[] for _ in lengths]
        with torch.no_grad():
            for layer, window, (hidden, (cos, sin)) in zip(layers, self.windows(model.config), captured, strict=True):
                q, k = queries_and_keys(self.self_attention(layer), hidden.detach(), cos, sin)
                for b, length in enumerate(lengths):
                    bands[b].append(FullLayer(q[b].contiguous(), k[b].contiguous(), int(length), True, window))
        return outputs, bands

    def long_context(self, model: nn.Module):
        """Causal attention over a cached prefix and within sliding windows without an ``n × n`` mask
        (:mod:`attnlens.models.llama.causal_attention`)."""
        return long_context(model)

    def query_rows(self, model: nn.Module, input_ids: torch.Tensor, start: int, stop: int, each) -> None:
        """:meth:`Architecture.query_rows`: a hook on each layer's attention projects the queries of rows ``start …
        stop − 1`` and every key from the layer's own input, as :func:`queries_and_keys` does, and hands them on
        before the layer runs; the forward computes no logits (``logits_to_keep``: one position)."""
        n = int(input_ids.shape[1])
        if input_ids.shape[0] != 1 or not 0 <= start < stop <= n:
            raise ValueError(f"expected one sequence and rows inside its {n} tokens, got {tuple(input_ids.shape)}")
        windows = self.windows(model.config)

        def hook_of(index: int, window: int | None):
            def hook(module, hook_args, kwargs):
                hidden = hidden_state(hook_args, kwargs)
                cos, sin = kwargs["position_embeddings"]
                query = projected(module, "q", hidden[:, start:stop], cos[:, start:stop], sin[:, start:stop])
                key = projected(module, "k", hidden, cos, sin)
                each(index, QueryRows((query * module.scaling)[0], key[0], start, window))

            return hook

        handles = [
            self.self_attention(layer).register_forward_pre_hook(hook_of(i, w), with_kwargs=True)
            for i, (layer, w) in enumerate(zip(self.layers(model), windows, strict=True))
        ]
        try:
            with torch.no_grad(), self.long_context(model):
                model(input_ids=input_ids, logits_to_keep=1)
        finally:
            for handle in handles:
                handle.remove()


def projected(attn: nn.Module, which: str, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """A decoder attention module's rotated queries (``which`` = ``q``: ``(B, H, n, d)``, unscaled) or keys (``k``:
    ``(B, KV, n, d)``), as its forward computes them: its projection, its ``q_norm`` / ``k_norm`` where it has them,
    its module's own rotation (applied to the one tensor)."""
    x = getattr(attn, f"{which}_proj")(hidden).view(*hidden.shape[:-1], -1, attn.head_dim)
    norm = getattr(attn, f"{which}_norm", None)
    if norm is not None:
        x = norm(x)
    x = x.transpose(1, 2)
    return sys.modules[type(attn).__module__].apply_rotary_pos_emb(x, x, cos, sin)[0]


def queries_and_keys(attn: nn.Module, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    """A decoder attention module's scaled, rotated queries ``(B, H, n, d)`` and rotated keys ``(B, KV, n, d)``, as
    its forward computes them (:func:`projected`) and scores them (the queries scaled by the module's ``scaling``)."""
    return projected(attn, "q", hidden, cos, sin) * attn.scaling, projected(attn, "k", hidden, cos, sin)


class Mistral(Llama, family="mistral"):
    """Mistral: Llama with a causal sliding window of ``config.sliding_window`` keys in every layer (none: full)."""

    classifier_class = "MistralForSequenceClassification"
    qa_class = "MistralForQuestionAnswering"
    lm_class = "MistralForCausalLM"

    def windows(self, config) -> list[int | None]:
        return [getattr(config, "sliding_window", None)] * config.num_hidden_layers


LLAMA = ARCHITECTURES.register(Llama())
MISTRAL = ARCHITECTURES.register(Mistral())
