"""A ModernBERT classifier drawn from its configuration (``model.source: from_config``), to be trained from scratch.

No packaged checkpoint provides ModernBERT, so the embedded corpus runs it from random weights: the sizes
(layers, hidden size, heads, feed-forward width) and the tokenizer are those of the named BERT checkpoint (the
packaged MiniLM by default), the window is ``model.attention_window`` (ModernBERT's ``local_attention``, the
two-sided width), every third layer from the first attends fully. Such a model learns only what a small corpus
teaches it in a few epochs: real use brings a real checkpoint (``model.source: classifier``).
"""

from __future__ import annotations

import torch
import transformers


def modernbert_from_config(
    bert_config, tokenizer, max_length: int, window: int, num_labels: int, seed: int
) -> transformers.ModernBertForSequenceClassification:
    """A randomly initialised ModernBERT classifier of ``bert_config``'s sizes, in eval mode, float32."""
    config = transformers.ModernBertConfig(
        vocab_size=bert_config.vocab_size,
        hidden_size=bert_config.hidden_size,
        intermediate_size=bert_config.intermediate_size,
        num_hidden_layers=bert_config.num_hidden_layers,
        num_attention_heads=bert_config.num_attention_heads,
        max_position_embeddings=max_length,
        local_attention=window,
        global_attn_every_n_layers=3,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        cls_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        sep_token_id=tokenizer.sep_token_id,
        num_labels=num_labels,
        attn_implementation="sdpa",
    )
    torch.manual_seed(seed)
    return transformers.ModernBertForSequenceClassification(config).eval()
