"""The BERT → BigBird conversion: the embedded default as a block-sparse classifier.

The recipe of :mod:`attnlens.models.from_bert`: every encoder weight copied (BigBird's layers have BERT's
names), the position table tiled to the maximum length (BigBird numbers positions from 0), the head's dense
layer from BERT's pooler. Block-sparse attention is BigBird's own: global first and last blocks, a window of
three blocks, ``num_random_blocks`` random blocks in training (none in eval: :mod:`attnlens.models.bigbird`).
"""

from __future__ import annotations

import torch
import transformers

from attnlens.errors import InputError
from attnlens.models.from_bert import bert_shape, classifier_from_pooler, encoder_weights, load_converted


def validate_blocks(max_length: int, block_size: int, num_random_blocks: int) -> None:
    """A block size must be positive and leave room for block-sparse attention at ``max_length``.

    Raises:
        InputError: a non-positive block size or random-block count, or a length at which every input
            would fall back to full attention (at most ``(5 + 2r)·b`` tokens).
    """
    if block_size <= 0:
        raise InputError("config", "model.block_size", f"expected a positive integer, got {block_size}")
    if num_random_blocks < 0:
        raise InputError(
            "config", "model.num_random_blocks", f"expected a non-negative integer, got {num_random_blocks}"
        )
    threshold = (5 + 2 * num_random_blocks) * block_size
    if max_length <= threshold:
        raise InputError(
            "config",
            "model.block_size",
            f"expected (5 + 2 × num_random_blocks) × block_size below model.max_length {max_length} (else every "
            f"input runs full attention), got ({5} + 2 × {num_random_blocks}) × {block_size} = {threshold}",
        )


def convert_bert_to_bigbird(
    bert: transformers.BertModel,
    tokenizer: transformers.PreTrainedTokenizerBase,
    max_length: int,
    block_size: int,
    num_random_blocks: int,
    num_labels: int,
    seed: int,
) -> transformers.BigBirdForSequenceClassification:
    """Build a BigBird classifier (block-sparse attention) whose encoder weights are ``bert``'s.

    Returns:
        The converted model, in eval mode, float32; the head's output projection drawn from ``seed``.
    """
    validate_blocks(max_length, block_size, num_random_blocks)
    config = transformers.BigBirdConfig(
        **bert_shape(bert.config, tokenizer),
        max_position_embeddings=max_length,
        attention_type="block_sparse",
        block_size=block_size,
        num_random_blocks=num_random_blocks,
        num_labels=num_labels,
    )
    torch.manual_seed(seed)
    model = transformers.BigBirdForSequenceClassification(config)
    src = bert.state_dict()
    mapped = encoder_weights(src, "bert.", max_length, 0)
    mapped |= classifier_from_pooler(src) | classifier_from_pooler(src, "bert.pooler.")
    fresh = {"classifier.out_proj.weight", "classifier.out_proj.bias"}
    if "pooler.dense.weight" not in src:
        fresh |= {"classifier.dense.weight", "classifier.dense.bias", "bert.pooler.weight", "bert.pooler.bias"}
    load_converted(model, mapped, fresh)
    return model.eval()
