"""Qwen 2 and Qwen 3 behind the model seam: Llama's reading, each layer with its own window.

A Qwen classifier (``Qwen2ForSequenceClassification``, ``Qwen3ForSequenceClassification``) is a Llama as attnlens
reads it (:mod:`attnlens.models.llama`): causal attention, rotary positions, grouped-query heads, RMSNorm, a gated
SiLU MLP, the last real token read out. Two things differ, and both are read from the checkpoint:

* **Per-layer windows.** ``config.layer_types`` names each layer ``full_attention`` or ``sliding_attention`` (with
  ``use_sliding_window``, the layers from ``max_window_layers`` on slide over ``config.sliding_window`` keys); the
  released Qwen 2.5 and Qwen 3 checkpoints use no window, so every layer is full and causal.
* **Query and key norms (Qwen 3).** Each head's queries and keys are RMS-normalised over the head dimension before
  the rotation (``q_norm``, ``k_norm``); attnlens applies the layer's own norms as its forward does, and AttnLRP
  holds their scale (the identity rule) as it does every RMSNorm's.
"""

from __future__ import annotations

from attnlens.models.llama import Llama
from attnlens.models.seam import ARCHITECTURES


class Qwen2(Llama, family="qwen2"):
    """Qwen 2 (and 2.5): Llama's layers with biased query/key/value projections and per-layer windows."""

    classifier_class = "Qwen2ForSequenceClassification"
    qa_class = "Qwen2ForQuestionAnswering"
    lm_class = "Qwen2ForCausalLM"


class Qwen3(Llama, family="qwen3"):
    """Qwen 3: Qwen 2's layers with each head's queries and keys RMS-normalised before the rotation."""

    classifier_class = "Qwen3ForSequenceClassification"
    qa_class = "Qwen3ForQuestionAnswering"
    lm_class = "Qwen3ForCausalLM"


QWEN2 = ARCHITECTURES.register(Qwen2())
QWEN3 = ARCHITECTURES.register(Qwen3())
