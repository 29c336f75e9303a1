"""BigBird behind the model seam: block-sparse attention read as a band (Zaheer et al. 2020).

Every layer reads as one :class:`~attnlens.attention.band.Band`: the tokens of the first and last blocks are
the global tokens (their rows attend to every key, every query attends to them), and a window of half-width
``2b − 1`` holds each query's three sliding blocks. In eval mode Hugging Face draws no random blocks (they
are block 0 again, counted ``1 + r`` times in the softmax): the band holds what each query gives each
distinct key, so it is the attention graph of inference, not of training. Inputs of at most ``(5 + 2r)·b``
tokens run full attention, as in Hugging Face, and read as a band whose window covers the sequence
(:mod:`attnlens.models.bigbird.block_sparse`). The global rows share the layer's projections, so head importance
differentiates ``query, key, value, output`` only. Positions are absolute: ``0, 1, …``.

The conversion of a BERT checkpoint (the embedded default) is :mod:`attnlens.models.bigbird.bert_to_bigbird`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from attnlens.models.bigbird.block_sparse import full_threshold, recording, use_block_sparse_attention
from attnlens.models.seam import ARCHITECTURES, Architecture


class BigBird(Architecture, family="bigbird"):
    classifier_class = "BigBirdForSequenceClassification"
    qa_class = "BigBirdForQuestionAnswering"
    local_groups = ("query", "key", "value", "output")
    pads_freely = False  # the last block attends globally and the full-attention switch reads the padded length

    def prepare(self, model: nn.Module, fast: bool = True) -> nn.Module:
        return use_block_sparse_attention(model) if fast else model

    def encoder(self, model: nn.Module) -> nn.Module:
        return model.bert if hasattr(model, "bert") else model

    def self_attention(self, layer: nn.Module) -> nn.Module:
        # BigBirdAttention: Hugging Face swaps its inner module between block-sparse and full attention, so
        # the hooks sit on the wrapper (its first input is the hidden state) and read the projections through it
        return layer.attention

    def projection(self, layer: nn.Module, group: str) -> tuple[nn.Linear, slice]:
        return getattr(layer.attention.self, group), slice(None)

    def value_projections(self, layer: nn.Module) -> dict[str, nn.Linear]:
        return {"local": layer.attention.self.value}

    def output_projection(self, layer: nn.Module) -> nn.Linear:
        return layer.attention.output.dense

    def describe(self, config) -> str:
        if config.attention_type != "block_sparse":
            return "BigBird, full attention (attention_type original_full)"
        return (
            f"BigBird, block_size {config.block_size}, num_random_blocks {config.num_random_blocks} "
            f"(block-sparse above {full_threshold(config)} tokens)"
        )

    def reading_notes(self, config, lengths: Sequence[int]) -> list[str]:
        if config.attention_type != "block_sparse":
            return []
        r, t = config.num_random_blocks, full_threshold(config)
        notes = [
            f"BigBird attention is read in eval mode, where Hugging Face draws no random blocks: each of the "
            f"{r} random blocks is block 0 again, so block 0's keys count {1 + r} times in every softmax outside "
            f"the global blocks; the attention graph of inference is not the one of training"
        ]
        short = sum(1 for n in lengths if n <= t)
        if short:
            notes.append(
                f"{short} of {len(lengths)} examples have at most (5 + 2·{r})·{config.block_size} = {t} tokens and "
                f"ran full attention (Hugging Face's original_full), read densely by query blocks"
            )
        return notes

    def run(self, model: nn.Module, args: dict[str, torch.Tensor], attentions: bool = False) -> tuple:
        """The forward; with ``attentions``, the bands the block-sparse path records (never Hugging Face's dense
        ``output_attentions``)."""
        if not attentions:
            return model(**args), None
        use_block_sparse_attention(model)
        with recording() as record:
            outputs = model(**args)
        return outputs, [list(item) for item in zip(*record, strict=True)]


BIGBIRD = ARCHITECTURES.register(BigBird())
