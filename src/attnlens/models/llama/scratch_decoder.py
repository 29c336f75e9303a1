"""A decoder classifier drawn from its configuration (``model.source: from_config`` with ``model.architecture``
``llama``, ``mistral``, ``qwen2``, ``qwen3`` or ``gemma3``), to be trained from scratch.

No packaged checkpoint provides a decoder, so the embedded corpus runs one from random weights: the sizes (layers,
hidden size, query heads, feed-forward width) and the tokenizer are those of the named BERT checkpoint (the packaged
MiniLM by default), with a third as many key/value heads as query heads where that divides (grouped-query attention,
as Llama 3, Mistral and Qwen 3 have it). A sliding window reaches as far back as Longformer's window of the same
``model.attention_window`` ``w`` reaches each way: ``w / 2 + 1`` keys, the token itself and the ``w / 2`` before it —
in every layer of a Mistral, and in five layers of every six of a Gemma 3 (its local layers; the sixth is global,
as the released models have them). Llama and Qwen attend to every earlier token in every layer, as the released
checkpoints do. A Gemma 3 scales its queries by ``head_dim ** -0.5`` (``query_pre_attn_scalar`` = the head size).
The tokenizer's ``[PAD]`` is the pad token the classifier finds the last real token by, and IG's baseline token:
its embedding row is drawn as every other row is (:func:`draw_pad_row`), as a trained checkpoint's is, not left at
the zero Hugging Face's initialisation gives a ``padding_idx`` row. From a zero row, the path from baseline to input
starts where every RMSNorm is singular (``x / sqrt(mean(x²) + ε)`` with ``x`` near 0): Qwen 3's and Gemma 3's
query/key norms then jump from 0 to unit length within the first ``10⁻⁵`` of the path, which no uniform step count
resolves (IG's completeness gap stays at 14 % (Qwen 3) and 33 % (Gemma 3) of the output difference on the tiny
models of tests/unit/models/test_llama.py at 256 steps). Such a model learns only what a small corpus teaches it
in a few epochs: real use brings a real checkpoint (``model.source: classifier`` or ``pretrained``).
"""

from __future__ import annotations

import torch
import transformers

from attnlens.models.seam import ARCHITECTURES

#: The Hugging Face configuration and classifier class of each decoder family built from a configuration.
CLASSES = {
    "llama": ("LlamaConfig", "LlamaForSequenceClassification"),
    "mistral": ("MistralConfig", "MistralForSequenceClassification"),
    "qwen2": ("Qwen2Config", "Qwen2ForSequenceClassification"),
    "qwen3": ("Qwen3Config", "Qwen3ForSequenceClassification"),
    "gemma3": ("Gemma3TextConfig", "Gemma3TextForSequenceClassification"),
}


def family_settings(kind: str, head_dim: int, window: int) -> dict:
    """The configuration entries a family needs beyond the shared sizes (``window``: the two-sided ``w``)."""
    if kind == "mistral":
        return {"sliding_window": window // 2 + 1}
    if kind == "gemma3":
        return {"sliding_window": window // 2 + 1, "query_pre_attn_scalar": head_dim}
    return {}


def key_value_heads(heads: int) -> int:
    """A third of the query heads where that divides them (grouped-query attention), else as many."""
    return heads // 3 if heads % 3 == 0 else heads


def decoder_from_config(
    kind: str, bert_config, tokenizer, max_length: int, window: int, num_labels: int, seed: int
) -> transformers.PreTrainedModel:
    """A randomly initialised decoder classifier of ``bert_config``'s sizes, in eval mode, float32 (``window``: the
    two-sided width ``w`` of :func:`~attnlens.models.loading.model_shape`)."""
    head_dim = bert_config.hidden_size // bert_config.num_attention_heads
    return draw_decoder(
        kind,
        seed,
        vocab_size=bert_config.vocab_size,
        hidden_size=bert_config.hidden_size,
        intermediate_size=bert_config.intermediate_size,
        num_hidden_layers=bert_config.num_hidden_layers,
        num_attention_heads=bert_config.num_attention_heads,
        num_key_value_heads=key_value_heads(bert_config.num_attention_heads),
        head_dim=head_dim,
        max_position_embeddings=max_length,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        num_labels=num_labels,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
        **family_settings(kind, head_dim, window),
    )


def draw_decoder(kind: str, seed: int, head: str = "sequence_classification", **config) -> transformers.PreTrainedModel:
    """A ``kind`` decoder (:data:`CLASSES`) with a ``head`` (a classifier; or ``causal_lm``, ``question_answering``:
    :meth:`~attnlens.models.seam.Architecture.head_class`) of the configuration entries ``config``, its weights drawn
    from ``seed`` and its pad row as :func:`draw_pad_row` draws it, in eval mode."""
    hf_config = getattr(transformers, CLASSES[kind][0])(**config)
    model_class = ARCHITECTURES.get(hf_config.model_type).head_class(head)
    torch.manual_seed(seed)
    model = getattr(transformers, model_class)(hf_config)
    draw_pad_row(model, hf_config.pad_token_id)
    return model.eval()


def draw_pad_row(model: transformers.PreTrainedModel, pad_id: int) -> None:
    """The pad token's embedding drawn from the model's initialisation (``N(0, initializer_range²)``) in place of
    the zero row of a ``padding_idx`` (see the module docstring); the row is still never trained."""
    with torch.no_grad():
        model.get_input_embeddings().weight[pad_id].normal_(0.0, model.config.initializer_range)
