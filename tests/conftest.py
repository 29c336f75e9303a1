"""Shared fixtures: repository paths, a tiny random Longformer, the real converted MiniLM."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def minilm():
    """The packaged all-MiniLM-L6-v2 BERT model (eval mode) and its tokenizer."""
    from transformers import AutoTokenizer, BertModel

    from attnlens.modeling import packaged_model_dir

    path = packaged_model_dir()
    return BertModel.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


@pytest.fixture()
def tiny_classifier():
    """A 2-layer, 2-head random Longformer classifier with the MiniLM tokenizer, seeded."""
    from transformers import AutoTokenizer, LongformerConfig, LongformerForSequenceClassification

    from attnlens.modeling import packaged_model_dir

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_dir()))
    tokenizer.model_max_length = 64
    config = LongformerConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=66,
        attention_window=16,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=2,
    )
    torch.manual_seed(0)
    return LongformerForSequenceClassification(config).eval(), tokenizer
