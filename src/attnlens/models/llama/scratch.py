"""A Llama or Mistral classifier drawn from its configuration (``model.source: from_config`` with
``model.architecture: llama`` or ``mistral``), to be trained from scratch.

No packaged checkpoint provides a decoder, so the embedded corpus runs one from random weights: the sizes (layers,
hidden size, query heads, feed-forward width) and the tokenizer are those of the named BERT checkpoint (the packaged
MiniLM by default), with a third as many key/value heads as query heads where that divides (grouped-query attention,
as Llama 3, Mistral and Qwen 3 have it), and for Mistral a causal sliding window that reaches as far back as
Longformer's window of the same ``model.attention_window`` ``w`` reaches each way: ``w / 2 + 1`` keys, the token
itself and the ``w / 2`` before it.
The tokenizer's ``[PAD]`` is the pad token the classifier finds the last real token by. Such a model learns only
what a small corpus teaches it in a few epochs: real use brings a real checkpoint (``model.source: classifier`` or
``pretrained``).
"""

from __future__ import annotations

import torch
import transformers

#: The Hugging Face configuration and classifier class of each decoder family built from a configuration.
CLASSES = {
    "llama": ("LlamaConfig", "LlamaForSequenceClassification"),
    "mistral": ("MistralConfig", "MistralForSequenceClassification"),
}


def key_value_heads(heads: int) -> int:
    """A third of the query heads where that divides them (grouped-query attention), else as many."""
    return heads // 3 if heads % 3 == 0 else heads


def decoder_from_config(kind: str, bert_config, tokenizer, max_length: int, window: int, num_labels: int,
                        seed: int) -> transformers.PreTrainedModel:  # fmt: skip
    """A randomly initialised decoder classifier of ``bert_config``'s sizes, in eval mode, float32 (``window``: the
    two-sided width ``w`` of :func:`~attnlens.models.loading.model_shape`)."""
    config_class, model_class = CLASSES[kind]
    extra = {"sliding_window": window // 2 + 1} if kind == "mistral" else {}
    config = getattr(transformers, config_class)(
        vocab_size=bert_config.vocab_size,
        hidden_size=bert_config.hidden_size,
        intermediate_size=bert_config.intermediate_size,
        num_hidden_layers=bert_config.num_hidden_layers,
        num_attention_heads=bert_config.num_attention_heads,
        num_key_value_heads=key_value_heads(bert_config.num_attention_heads),
        max_position_embeddings=max_length,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        num_labels=num_labels,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
        **extra,
    )
    torch.manual_seed(seed)
    return getattr(transformers, model_class)(config).eval()
