"""Building a long-document classifier from a BERT checkpoint (the embedded default): what every target shares.

Beltagy et al. (2020, https://arxiv.org/abs/2004.05150, §5) built ``longformer-base-4096`` from RoBERTa by
copying every encoder weight and tiling the learned position embeddings up to the new maximum length; the
same recipe gives a BigBird (whose encoder layers have BERT's names). The targets' own rules live in
:mod:`attnlens.models.longformer.bert_to_longformer` and :mod:`attnlens.models.bigbird.bert_to_bigbird`.
"""

from __future__ import annotations

import torch


def tile_positions(bert_positions: torch.Tensor, max_length: int, offset: int) -> torch.Tensor:
    """Position table of a converted model: row ``offset + k`` holds BERT position ``k mod 512``; rows below are 0."""
    n_bert, hidden = bert_positions.shape
    table = bert_positions.new_zeros(max_length + offset, hidden)
    reps = -(-max_length // n_bert)
    table[offset:] = bert_positions.repeat(reps, 1)[:max_length]
    return table


def encoder_weights(src: dict[str, torch.Tensor], prefix: str, max_length: int, offset: int) -> dict[str, torch.Tensor]:
    """A BERT state dict's embedding and encoder weights under ``prefix``, positions tiled (:func:`tile_positions`)."""
    mapped = {}
    for key, value in src.items():
        if key == "embeddings.position_ids" or key.startswith("pooler."):
            continue
        if key == "embeddings.position_embeddings.weight":
            value = tile_positions(value, max_length, offset)
        mapped[prefix + key] = value
    return mapped


def load_converted(model, mapped: dict[str, torch.Tensor], fresh: set[str]):
    """Load ``mapped`` into ``model``; every other weight must be in ``fresh`` (newly drawn). Returns ``model``."""
    new = model.state_dict()
    extra = sorted(set(mapped) - set(new))
    if extra:
        raise RuntimeError(f"BERT weights {extra[:3]} have no counterpart in {type(model).__name__}")
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    if set(missing) - fresh or unexpected:
        raise RuntimeError(f"conversion left missing={sorted(set(missing) - fresh)} unexpected={unexpected}")
    return model


def classifier_from_pooler(src: dict[str, torch.Tensor], prefix: str = "classifier.dense.") -> dict[str, torch.Tensor]:
    """The classification head's dense layer from BERT's pooler (the same dense + tanh on [CLS]), where it has one."""
    if "pooler.dense.weight" not in src:
        return {}
    return {prefix + "weight": src["pooler.dense.weight"], prefix + "bias": src["pooler.dense.bias"]}


def bert_shape(bert_config, tokenizer) -> dict:
    """The configuration a converted model keeps from its BERT: sizes, activation, dropout, special token ids."""
    bc = bert_config
    return {
        "vocab_size": bc.vocab_size,
        "hidden_size": bc.hidden_size,
        "num_hidden_layers": bc.num_hidden_layers,
        "num_attention_heads": bc.num_attention_heads,
        "intermediate_size": bc.intermediate_size,
        "hidden_act": bc.hidden_act,
        "hidden_dropout_prob": bc.hidden_dropout_prob,
        "attention_probs_dropout_prob": bc.attention_probs_dropout_prob,
        "type_vocab_size": bc.type_vocab_size,
        "initializer_range": bc.initializer_range,
        "layer_norm_eps": bc.layer_norm_eps,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": tokenizer.cls_token_id,
        "eos_token_id": tokenizer.sep_token_id,
        "sep_token_id": tokenizer.sep_token_id,
    }
