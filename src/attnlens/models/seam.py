"""What attnlens needs to know about one architecture: the model seam.

The stages and the numerics never name an architecture. Everything that differs between model
families goes through one :class:`Architecture` object, chosen by ``config.json``'s ``model_type``
(:func:`attnlens.models.architecture`). Longformer (:mod:`attnlens.models.longformer`) is the first.

**Adding an architecture.** Declare its family (name, ``model_type``, display name) in
:data:`attnlens.families.FAMILIES`, write ``attnlens/models/<name>/__init__.py`` with a subclass
``class X(Architecture, family="<name>")``, register its instance there (``ARCHITECTURES.register(X())``), import
the package in :mod:`attnlens.models`, and provide:

* ``classifier_class``, ``qa_class`` and ``lm_class`` (the Hugging Face sequence classifier, question-answering
  model and causal language model, :meth:`~Architecture.head_class`; ``None`` where Hugging Face has no such head;
  ``model_type`` and ``name`` come from the family); :meth:`~Architecture.prepare` patches whatever fast paths
  the architecture has into a loaded model, and :meth:`~Architecture.check` refuses, in one line, a checkpoint
  setting attnlens cannot read.
* **Forward arguments** (defaults: none, and positions ``0, 1, …``). :meth:`~Architecture.forward_args`: what the
  forward needs beside ``input_ids``
  and ``attention_mask`` (Longformer: the global-attention mask, CLS global, or a question's tokens);
  :meth:`~Architecture.position_ids`:
  the explicit position ids of ``n`` real tokens, passed for input and IG baseline alike (``None`` where the
  model has no position ids, e.g. rotary embeddings).
* **Layers by name.** :meth:`~Architecture.embeddings` (the module whose output IG, saliency and
  gradient × input attribute to), :meth:`~Architecture.embedding_layers` (``{"word", "position",
  "token_type"}`` for per-embedding IG: only those that exist), :meth:`~Architecture.layers`,
  :meth:`~Architecture.self_attention` (its first input is the hidden state the attention projects),
  :meth:`~Architecture.value_projections` and :meth:`~Architecture.output_projection` (value norms,
  gradient-weighted attention; the output projection's input ``o``, the heads concatenated, is what the
  ``∂F/∂o`` hooks read).
* **Head groups.** :meth:`~Architecture.head_groups`: per layer, the ``(weight, bias)`` of every projection
  whose rows (or, for the output projection, columns) split by head — what head importance differentiates.
* **Attention in its native sparse form.** :meth:`~Architecture.run` runs a forward and, when asked, returns
  one :class:`~attnlens.attention.band.Band` per layer and example: a band of local window slots
  plus global slots and global rows. Every summary — received attention, top-k partners, binned maps, value
  norms, rollout, gradient-weighted attention, pooled chunks for topology — is computed on that form, so no
  layer's ``heads × n × n`` tensor ever exists. A block-sparse layer (BigBird) reads as a band whose
  window covers its sliding blocks, with its global blocks as global slots (in eval mode Hugging Face's
  random blocks are block 0 again: :mod:`attnlens.models.bigbird.block_sparse`); a layer of full
  attention (ModernBERT's global layers) must be computed from its own queries and keys in query blocks and
  reduced on the fly, never returned whole.
* **Where AttnLRP's rules apply.** :meth:`~Architecture.relevance_wiring`: the element-wise non-linearities
  (as modules, or applied inline between two modules) and the element-wise products of the feed-forward
  blocks. The attention's products are found through :meth:`~Architecture.projection` (queries, keys and
  values) and the normalisations are the model's ``nn.LayerNorm`` modules; the rules themselves are
  :mod:`attnlens.attribution.lrp`'s.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import ClassVar

import torch
from torch import nn

from attnlens.errors import InputError
from attnlens.families import FAMILIES, Family
from attnlens.registry import Registry


@dataclass(frozen=True)
class RelevanceWiring:
    """Where an architecture's non-linear element-wise operations sit, for AttnLRP's rules
    (:mod:`attnlens.attribution.lrp`)."""

    #: Modules computing an element-wise non-linearity ``y = f(x)`` of their one input (GELU modules …).
    activations: list[nn.Module] = field(default_factory=list)
    #: ``(producer, consumer)``: an element-wise non-linearity applied inline, in the forward's own code, to the
    #: producer's output, whose result (through dropout only) is the consumer's input (a classifier head's tanh).
    inline: list[tuple[nn.Module, nn.Module]] = field(default_factory=list)
    #: Modules whose input is the element-wise product of two functions of the hidden state (a gated MLP's output
    #: projection): the uniform rule halves the gradient of that input.
    products: list[nn.Module] = field(default_factory=list)


class Architecture(ABC):
    """One model family behind the seam, an encoder or a decoder (the module docstring: what a new one provides)."""

    #: Its family (:data:`attnlens.families.FAMILIES`), given as ``class X(Architecture, family="<name>")``.
    family: ClassVar[Family]
    #: ``config.json``'s ``model_type`` (the family's).
    model_type: ClassVar[str]
    #: Its name as ``model.architecture`` spells it (the family's).
    name: ClassVar[str]
    #: Name of the Hugging Face sequence-classification class (``transformers.<name>``).
    classifier_class: ClassVar[str]
    #: Name of its extractive question-answering class (a start and an end logit per token); None: it has none.
    qa_class: ClassVar[str | None]
    #: Name of its causal language model (next-token logits over the vocabulary); None: it has none (an encoder).
    lm_class: ClassVar[str | None] = None
    #: Head groups of the attention every token takes part in (``output`` = the output projection's columns).
    local_groups: ClassVar[tuple[str, ...]]
    #: Head groups of the global rows, where they have projections of their own (empty where they do not).
    global_groups: ClassVar[tuple[str, ...]] = ()
    #: Whether a right-padded batch computes each example as that example alone (to rounding): its pad keys are
    #: masked and nothing in the layout runs to the padded end. Where not (BigBird: its last global block and its
    #: switch to full attention follow the padded length: a float64 tiny BigBird's AttnLRP moves by 1e-6 to 8e-6 of the
    #: largest relevance, against 1e-16 for the others), documents go through one pass only with their own length.
    pads_freely: ClassVar[bool] = True

    def __init_subclass__(cls, family: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if family is not None:
            cls.family = FAMILIES[family]
            cls.model_type, cls.name = cls.family.model_type, cls.family.name

    @property
    def head_group_names(self) -> tuple[str, ...]:
        """Every group of :meth:`head_groups`: the local ones, then the global ones."""
        return self.local_groups + self.global_groups

    @abstractmethod
    def prepare(self, model: nn.Module, fast: bool = True) -> nn.Module:
        """``model`` ready for attnlens (fast attention paths patched in where ``fast``); returns it."""

    def head_class(self, head: str) -> str:
        """The Hugging Face class of a kind of head: a sequence classifier
        (``sequence_classification``: classes, labels, a value), a question-answering head
        (``question_answering``: a span of the input) or a causal language model (``causal_lm``: the next token)."""
        heads = {
            "sequence_classification": self.classifier_class,
            "question_answering": self.qa_class,
            "causal_lm": self.lm_class,
        }
        if head not in heads:
            raise ValueError(f"unknown head {head!r}; expected one of {sorted(heads)}")
        if heads[head] is None:
            raise InputError(
                "config",
                "data.task",
                f"expected a task {self.family.label} has a head for: Hugging "
                f"Face has no {self.family.label} {head.replace('_', '-')} model",
            )
        return heads[head]

    def check(self, config, where: str) -> None:
        """Refuse, in one line naming ``where`` and the setting, a checkpoint whose attention attnlens cannot read
        as this architecture's (nothing by default)."""
        return None

    def forward_args(
        self, attention_mask: torch.Tensor, global_tokens: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """Arguments of the forward beside ``input_ids``, ``attention_mask`` and ``position_ids``. ``global_tokens``
        (``(batch, n)``, nonzero where a token should attend to and be attended by every token: a question's
        tokens) is read where the architecture lets a token be chosen global (Longformer); ``None``: CLS alone, the
        classifier's convention. An architecture whose global attention is fixed by its layout (BigBird's first and
        last blocks, ModernBERT's global layers, a decoder's causal ones) ignores it: none, the default."""
        return {}

    def position_ids(self, config, n: int, batch: int = 1) -> torch.Tensor | None:
        """``(batch, n)`` explicit position ids of ``n`` real tokens (``None``: the model has none); ``0, 1, …``, the
        default (BigBird's learned positions, the rotary models' angles)."""
        return torch.arange(n).expand(batch, n)

    @abstractmethod
    def encoder(self, model: nn.Module) -> nn.Module:
        """The base model inside a classifier (or the model itself)."""

    def embeddings(self, model: nn.Module) -> nn.Module:
        """The embedding module whose output IG, saliency and gradient × input attribute to."""
        return self.encoder(model).embeddings

    def embedding_layers(self, model: nn.Module) -> dict[str, nn.Module]:
        """``{"word": …, "position": …, "token_type": …}``: the embedding lookups that exist, by name (here: those
        of a BERT-style embedding module, ``word_embeddings``, ``position_embeddings``, ``token_type_embeddings``)."""
        emb = self.embeddings(model)
        names = {"word": "word_embeddings", "position": "position_embeddings", "token_type": "token_type_embeddings"}
        return {name: getattr(emb, attr) for name, attr in names.items() if hasattr(emb, attr)}

    def layers(self, model: nn.Module) -> Sequence[nn.Module]:
        """The transformer layers, bottom first."""
        return list(self.encoder(model).encoder.layer)

    @abstractmethod
    def self_attention(self, layer: nn.Module) -> nn.Module:
        """The attention module whose first input is the hidden state its projections read."""

    def projection(self, layer: nn.Module, group: str) -> tuple[nn.Linear, slice]:
        """The projection of head group ``group`` (``query``, ``key_global``, …) of a layer, and the rows of it
        that the group is (all of them, except in a fused projection such as ModernBERT's ``Wqkv``)."""
        return getattr(self.self_attention(layer), group), slice(None)

    @abstractmethod
    def value_projections(self, layer: nn.Module) -> dict[str, nn.Linear]:
        """``{"local": …}`` and, where global rows have their own, ``{"global": …}``."""

    @abstractmethod
    def output_projection(self, layer: nn.Module) -> nn.Linear:
        """``W_O``: the projection of the concatenated heads."""

    def readout(self, length: int) -> tuple[str, int]:
        """The token a sequence classifier's head reads in an example of ``length`` real tokens, as the reports name
        it, and its position: ``[CLS]``, the first (a decoder's classifier reads its last real token)."""
        return "[CLS]", 0

    def group_heads(self, config, group: str) -> int:
        """How many heads the rows (``output``: the columns) of a head group's projection split into: the query heads
        (``num_attention_heads``), except where several query heads share a key/value head (grouped-query attention:
        the decoders' ``key`` and ``value``)."""
        return int(config.num_attention_heads)

    def head_groups(self, model: nn.Module) -> list[dict[str, tuple[nn.Parameter, nn.Parameter | None, slice]]]:
        """Per layer, ``{group: (weight, bias, rows)}`` for :attr:`head_group_names`: the group is ``rows`` of the
        parameters (bias ``None`` for ``output``, whose columns split by head)."""
        out = []
        for layer in self.layers(model):
            groups = {}
            for g in self.head_group_names:
                if g == "output":
                    groups[g] = (self.output_projection(layer).weight, None, slice(None))
                else:
                    linear, rows = self.projection(layer, g)
                    groups[g] = (linear.weight, linear.bias, rows)
            out.append(groups)
        return out

    def relevance_wiring(self, model: nn.Module) -> RelevanceWiring:
        """Where AttnLRP's rules for non-linearities and products apply (here: a BERT-style layer, whose activation
        sits inline between ``intermediate.dense`` and ``output.dense``, and a classification head with a ``dense``
        layer, an inline activation and an ``out_proj``)."""
        pairs = [(layer.intermediate.dense, layer.output.dense) for layer in self.layers(model)]
        head = getattr(model, "classifier", None)
        if head is not None and hasattr(head, "dense") and hasattr(head, "out_proj"):
            pairs.append((head.dense, head.out_proj))
        return RelevanceWiring(inline=pairs)

    @abstractmethod
    def describe(self, config) -> str:
        """The attention pattern of a checkpoint in one phrase (logs, run notes, report labels)."""

    def reading_notes(self, config, lengths: Sequence[int]) -> list[str]:
        """Run notes on how the attention of inputs of these ``lengths`` is read (none by default)."""
        return []

    @abstractmethod
    def run(self, model: nn.Module, args: dict[str, torch.Tensor], attentions: bool = False) -> tuple:
        """``(outputs, bands)``: the model's forward on ``args`` and, with ``attentions``, ``bands[b][layer]``
        (its attention in native form, out of the autograd graph; ``None`` without ``attentions``).

        The gradient is not switched off here: a caller that needs none runs it under ``torch.no_grad()``.
        """

    def long_context(self, model: nn.Module) -> AbstractContextManager:
        """``with arch.long_context(model):`` its forwards' attention without an ``n × n`` mask where the family
        has such a path (the decoders: :mod:`attnlens.models.llama.causal_attention`), the same numbers to float
        rounding; a no-op elsewhere."""
        return nullcontext()

    def query_rows(self, model: nn.Module, input_ids: torch.Tensor, start: int, stop: int, each) -> None:
        """One forward of ``input_ids`` ``(1, n)`` (a causal language model's), without gradient, handing each layer's
        queries ``start … stop − 1`` and all its keys to ``each(layer_index, QueryRows)`` as the forward reaches
        the layer (:class:`~attnlens.attention.full.QueryRows`): what a generated answer's rows attend to, one
        layer's keys alive at a time. Only the decoders have it."""
        raise ValueError(f"{self.name} is not a causal language model: it has no answer rows to read")


#: Every architecture attnlens reads, by ``config.json``'s ``model_type`` (each package registers its own).
ARCHITECTURES: Registry[Architecture] = Registry(
    "architectures attnlens reads", "config.json model_type", name_of=lambda arch: arch.model_type
)


class ProjectionRows(nn.Module):
    """``rows`` of a fused linear projection as a projection of its own (ModernBERT's values are rows of ``Wqkv``)."""

    def __init__(self, linear: nn.Linear, rows: slice):
        super().__init__()
        self.linear, self.rows = linear, rows

    @property
    def weight(self) -> torch.Tensor:
        return self.linear.weight[self.rows]

    @property
    def bias(self) -> torch.Tensor | None:
        return None if self.linear.bias is None else self.linear.bias[self.rows]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight, self.bias)


def hidden_state(args: tuple, kwargs: dict) -> torch.Tensor:
    """The hidden state an attention module is called with, positionally or as ``hidden_states`` (a decoder's)."""
    return args[0] if args else kwargs["hidden_states"]


def forward_capturing_inputs(model: nn.Module, modules: Sequence[nn.Module], args: dict[str, torch.Tensor]) -> tuple:
    """``(outputs, captured, lengths)``: the forward on ``args``, each of ``modules``' (the layers' attention, in
    order) hidden state and rotary ``(cos, sin)`` as it was called with them, and each example's real tokens — what
    a rotary architecture reads its queries and keys from (ModernBERT, the decoders)."""
    captured: list[tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] = []

    def hook(module, hook_args, kwargs):
        captured.append((hidden_state(hook_args, kwargs), kwargs["position_embeddings"]))

    handles = [module.register_forward_pre_hook(hook, with_kwargs=True) for module in modules]
    try:
        outputs = model(**args)
    finally:
        for handle in handles:
            handle.remove()
    mask = args.get("attention_mask")
    batch, n = args["input_ids"].shape
    return outputs, captured, [n] * batch if mask is None else mask.long().sum(1).tolist()
