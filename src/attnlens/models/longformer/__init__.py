"""Longformer behind the model seam: a band of sliding-window slots plus global tokens (Beltagy et al. 2020).

Per layer Hugging Face returns the *local* attention of every query over ``x + w + 1`` slots (``x`` global
tokens first, then the window) and the global tokens' own rows over every key; :meth:`Longformer.run` reads
them as :class:`~attnlens.attention.band.Band` objects as they are. CLS is the only global token
(:func:`global_attention_mask`) for a classifier, a question's tokens for a question-answering reader; the global
rows have their own query, key and value projections, which head
importance differentiates as groups of their own. Position ids are RoBERTa's: ``pad + 1, pad + 2, …``.
The blocked self-attention (:mod:`attnlens.models.longformer.sliding_window`) replaces Hugging Face's on every pass
without attention outputs; the BERT conversion of the embedded default is
:mod:`attnlens.models.longformer.bert_to_longformer`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from attnlens.attention.band import Band
from attnlens.models.longformer.sliding_window import use_blocked_attention
from attnlens.models.seam import ARCHITECTURES, Architecture


def global_attention_mask(attention_mask: torch.Tensor, positions: tuple[int, ...] = (0,)) -> torch.Tensor:
    """Explicit global-attention mask: 1 on ``positions`` (default: CLS only) of real tokens, else 0.

    Args:
        attention_mask: ``(batch, seq)`` 1 for real tokens, 0 for padding.
        positions: token indices that get global attention.

    Returns:
        ``(batch, seq)`` long tensor.
    """
    mask = torch.zeros_like(attention_mask, dtype=torch.long)
    mask[:, list(positions)] = 1
    return mask * attention_mask.long()


def bands_from_outputs(
    attentions: Sequence[torch.Tensor],
    global_attentions: Sequence[torch.Tensor] | None,
    attention_mask: torch.Tensor,
    global_mask: torch.Tensor | None,
) -> list[list[Band]]:
    """Split a Longformer forward's ``attentions`` / ``global_attentions`` into :class:`Band` objects.

    Returns:
        ``bands[b][layer]`` for every batch item ``b``.
    """
    lengths = attention_mask.long().sum(1)
    prefix = torch.arange(attention_mask.shape[1], device=lengths.device) < lengths[:, None]
    if not torch.equal(attention_mask.long(), prefix.long()):
        raise ValueError("attention_mask must mark a prefix of real tokens (right padding)")
    out = []
    for b in range(attention_mask.shape[0]):
        gpos = (
            torch.nonzero(global_mask[b] * attention_mask[b]).flatten()
            if global_mask is not None
            else torch.zeros(0, dtype=torch.long, device=attention_mask.device)
        )
        layers = []
        for layer, local in enumerate(attentions):
            glob = None if global_attentions is None else global_attentions[layer][b]
            layers.append(Band(local[b], glob, int(lengths[b]), gpos))
        out.append(layers)
    return out


class Longformer(Architecture, family="longformer"):
    classifier_class = "LongformerForSequenceClassification"
    qa_class = "LongformerForQuestionAnswering"
    local_groups = ("query", "key", "value", "output")
    global_groups = ("query_global", "key_global", "value_global")

    def prepare(self, model: nn.Module, fast: bool = True) -> nn.Module:
        return use_blocked_attention(model) if fast else model

    def forward_args(
        self, attention_mask: torch.Tensor, global_tokens: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        return {
            "global_attention_mask": global_attention_mask(attention_mask)
            if global_tokens is None
            else (global_tokens != 0).long() * attention_mask.long()
        }

    def position_ids(self, config, n: int, batch: int = 1) -> torch.Tensor:
        """``pad + 1, pad + 2, …``: explicit, so that an IG baseline's pad tokens are not numbered as padding."""
        start = config.pad_token_id + 1
        return torch.arange(start, start + n).expand(batch, n)

    def encoder(self, model: nn.Module) -> nn.Module:
        return model.longformer if hasattr(model, "longformer") else model

    def self_attention(self, layer: nn.Module) -> nn.Module:
        return layer.attention.self

    def value_projections(self, layer: nn.Module) -> dict[str, nn.Linear]:
        sa = layer.attention.self
        return {"local": sa.value, "global": sa.value_global}

    def output_projection(self, layer: nn.Module) -> nn.Linear:
        return layer.attention.output.dense

    def describe(self, config) -> str:
        return f"Longformer, attention_window {list(config.attention_window)} and a global CLS"

    def run(self, model: nn.Module, args: dict[str, torch.Tensor], attentions: bool = False) -> tuple:
        """Hugging Face's forward (``output_attentions`` when ``attentions``): its local and global attention
        outputs are the band as it is."""
        outputs = model(**args, output_attentions=attentions)
        if not attentions:
            return outputs, None
        bands = bands_from_outputs(
            outputs.attentions, outputs.global_attentions, args["attention_mask"], args.get("global_attention_mask")
        )
        return outputs, [[band.detach() for band in item] for item in bands]


LONGFORMER = ARCHITECTURES.register(Longformer())
