"""Base-size models with seeded random weights, and peak-memory readings, shared by the benchmarks."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    BigBirdConfig,
    BigBirdForSequenceClassification,
    LongformerConfig,
    LongformerForSequenceClassification,
    ModernBertConfig,
    ModernBertForSequenceClassification,
)


def rss_kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS (Linux ≥ 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def base_longformer(seed: int = 0):
    """longformer-base's shape: 12 layers × 12 heads, hidden 768, window 512, 4 096 positions."""
    torch.manual_seed(seed)
    config = LongformerConfig(
        num_hidden_layers=12,
        num_attention_heads=12,
        hidden_size=768,
        intermediate_size=3072,
        attention_window=512,
        max_position_embeddings=4098,
        num_labels=2,
    )
    return LongformerForSequenceClassification(config).eval()


def base_bigbird(seed: int = 0):
    """BigBird-base's shape: block-sparse, blocks of 64, 3 random blocks, 8 192 positions."""
    torch.manual_seed(seed)
    config = BigBirdConfig(
        num_hidden_layers=12,
        num_attention_heads=12,
        hidden_size=768,
        intermediate_size=3072,
        max_position_embeddings=8192,
        block_size=64,
        num_random_blocks=3,
        attention_type="block_sparse",
        num_labels=2,
    )
    return BigBirdForSequenceClassification(config).eval()


def base_modernbert(seed: int = 0, implementation: str = "sdpa"):
    """ModernBERT-base (22 layers, hidden 768, window ±64), 8 192 positions."""
    torch.manual_seed(seed)
    config = ModernBertConfig(max_position_embeddings=8192, num_labels=2, attn_implementation=implementation)
    return ModernBertForSequenceClassification(config).eval()  # ModernBERT-base: 22 layers, 768, window ±64


def base_longformer_long(max_length: int, seed: int = 0):
    """:func:`base_longformer` with ``max_length`` positions."""
    torch.manual_seed(seed)
    config = LongformerConfig(
        num_hidden_layers=12,
        num_attention_heads=12,
        hidden_size=768,
        intermediate_size=3072,
        attention_window=512,
        max_position_embeddings=max_length + 2,
        num_labels=2,
    )
    return LongformerForSequenceClassification(config).eval()
