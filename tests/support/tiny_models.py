"""Seeded random models small enough for exact checks, one builder per architecture behind the seam, shared by the
tests that compare a model's numbers with a dense reference."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import transformers
from transformers import LongformerConfig, LongformerForSequenceClassification, LongformerModel

from attnlens.models import draw_decoder


def tiny_longformer(
    *,
    vocab_size: int = 50,
    hidden: int = 12,
    layers: int = 2,
    heads: int = 3,
    intermediate: int = 24,
    max_positions: int = 80,
    window: int = 4,
    pad_token_id: int = 1,
    num_labels: int | None = None,
    seed: int = 0,
    double: bool = False,
):
    """A seeded random Longformer small enough for exact checks: the encoder alone, or a classifier with
    ``num_labels`` classes; eval mode, float64 when ``double``."""
    config = LongformerConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=intermediate,
        max_position_embeddings=max_positions,
        attention_window=window,
        pad_token_id=pad_token_id,
        **({"num_labels": num_labels} if num_labels else {}),
    )
    torch.manual_seed(seed)
    model = (LongformerForSequenceClassification if num_labels else LongformerModel)(config).eval()
    return model.double() if double else model


BIGBIRD_BLOCK, BIGBIRD_RANDOM = 8, 2  # block-sparse above (5 + 2·2)·8 = 72 tokens


def tiny_bigbird(seed: int = 0) -> transformers.BigBirdForSequenceClassification:
    torch.manual_seed(seed)
    config = transformers.BigBirdConfig(
        vocab_size=60,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=32,
        max_position_embeddings=256,
        block_size=BIGBIRD_BLOCK,
        num_random_blocks=BIGBIRD_RANDOM,
        attention_type="block_sparse",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        num_labels=3,
        pad_token_id=0,
    )
    return transformers.BigBirdForSequenceClassification(config).eval().double()


def bigbird_batch(n: int, pad_last: int = 0, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (2, n), generator=g)
    mask = torch.ones(2, n, dtype=torch.long)
    if pad_last:
        mask[1, -pad_last:] = 0
        ids[1, -pad_last:] = 0
    return {"input_ids": ids, "attention_mask": mask}


MODERNBERT_HEADS, MODERNBERT_HALF = 3, 4  # windowed layers: keys within ±4


def tiny_modernbert(implementation: str = "eager", seed: int = 0):
    torch.manual_seed(seed)
    config = transformers.ModernBertConfig(
        vocab_size=60,
        hidden_size=24,
        num_hidden_layers=4,
        num_attention_heads=MODERNBERT_HEADS,
        intermediate_size=32,
        max_position_embeddings=256,
        local_attention=2 * MODERNBERT_HALF,
        global_attn_every_n_layers=3,
        pad_token_id=0,
        num_labels=3,
        attention_dropout=0.0,
        embedding_dropout=0.0,
        mlp_dropout=0.0,
        classifier_dropout=0.0,
        attn_implementation=implementation,
        bos_token_id=1,
        eos_token_id=2,
        cls_token_id=1,
        sep_token_id=2,
    )
    return transformers.ModernBertForSequenceClassification(config).eval().double()


#: The decoders' heads: 4 query heads sharing 2 key/value heads, windows of 5 keys where the family has them.
DECODER_HEADS, DECODER_KV_HEADS, DECODER_WINDOW = 4, 2, 5
#: What each family's configuration sets beyond the shared sizes.
DECODER_SETTINGS = {
    "mistral": {"sliding_window": DECODER_WINDOW},
    "qwen2": {"use_sliding_window": True, "sliding_window": DECODER_WINDOW, "max_window_layers": 1},
    # a query scale other than the head size's (its scale is read), a local layer then a global one
    "gemma3": {
        "sliding_window": DECODER_WINDOW,
        "query_pre_attn_scalar": 5,
        "layer_types": ["sliding_attention", "full_attention"],
    },
}


def tiny_decoder(
    kind: str = "llama",
    implementation: str = "eager",
    seed: int = 0,
    num_labels: int = 3,
    head: str = "sequence_classification",
):
    """A float64 two-layer decoder classifier (or another ``head``: a causal language model) of ``kind``: 4 query
    heads sharing 2 key/value heads, windows of 5 keys where the family has them (:data:`DECODER_SETTINGS`), its pad
    row drawn as a model drawn from its configuration has it
    (:func:`~attnlens.models.llama.scratch_decoder.draw_decoder`)."""
    return draw_decoder(
        kind,
        seed,
        head,
        vocab_size=60,
        hidden_size=24,
        intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=DECODER_HEADS,
        num_key_value_heads=DECODER_KV_HEADS,
        head_dim=6,
        max_position_embeddings=64,
        pad_token_id=0,
        num_labels=num_labels,
        attention_dropout=0.0,
        attn_implementation=implementation,
        **DECODER_SETTINGS.get(kind, {}),
    ).double()


def context_cite_model():
    """The tiny float32 ``LlamaForCausalLM`` of ``tests/reference/context_cite/model`` (a word-level tokenizer with a
    chat template) and its record (``model.json``: the sources, query, answer and ContextCite's numbers)."""
    root = Path(__file__).resolve().parents[2] / "tests" / "reference" / "context_cite"
    record = json.loads((root / "model.json").read_text(encoding="utf-8"))
    folder = root / "model"
    return (
        record,
        transformers.AutoTokenizer.from_pretrained(folder),
        transformers.AutoModelForCausalLM.from_pretrained(folder).eval(),
    )


def minilm_generator(dtype: torch.dtype = torch.float64):
    """A one-layer Llama of width 32 drawn at random (seed 0) over the packaged MiniLM's vocabulary, as the generation
    study draws its control, and that tokenizer: ``(model, tokenizer)`` in eval mode, ``dtype``."""
    from attnlens.models.loading import build_generator  # noqa: PLC0415 (the generation tests only)
    from attnlens.pipeline.config import ModelConfig  # noqa: PLC0415

    cfg = ModelConfig.from_dict({"source": "from_config", "architecture": "llama", "max_length": 128})
    model, tokenizer = build_generator(cfg, hidden_size=32, num_layers=1, num_heads=2)
    torch.manual_seed(0)
    return model.to(dtype).eval(), tokenizer
