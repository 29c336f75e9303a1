"""Gemma 3 (text) behind the model seam: local sliding-window layers beside global ones, read as Llama's are.

A ``Gemma3TextForSequenceClassification`` (``model_type`` ``gemma3_text``) is read as a Llama
(:mod:`attnlens.models.llama`), with what Gemma 3 does differently taken from the checkpoint:

* **Local and global layers.** ``config.layer_types``: by default five ``sliding_attention`` layers (a causal
  window of ``config.sliding_window`` keys, 1 024 in the Gemma 3 report's models) to every ``full_attention`` one.
  The two kinds rotate with different bases (``rope_local_base_freq`` and ``rope_theta``); attnlens takes each
  layer's rotary angles from the layer's own inputs, so each kind is rotated as the model rotates it.
* **Scaled queries and normalised heads.** Scores are scaled by ``query_pre_attn_scalar ** -0.5`` (the module's
  ``scaling``), after each head's queries and keys are RMS-normalised (``q_norm``, ``k_norm``).
* **Gemma's RMSNorm** multiplies by ``1 + w``, and every layer has four (before and after its attention and its
  MLP): AttnLRP holds the scale of each, whatever its form. The MLP's activation is GELU (tanh), given the identity
  rule as SiLU is. The word embeddings are multiplied by ``sqrt(hidden_size)``; IG's baseline is the scaled
  embedding of the pad token.

Two settings Gemma 3 allows change what attention is, and attnlens refuses them in one line before anything runs:
attention-logit soft-capping (``attn_logit_softcapping``; ``None`` in Gemma 3, Gemma 2 had it) and bidirectional
attention (``use_bidirectional_attention``, an encoder use of the architecture). Hugging Face has no Gemma 3
question-answering head, so Gemma 3 runs the classification tasks only.
"""

from __future__ import annotations

from attnlens.errors import InputError
from attnlens.models.llama import Llama
from attnlens.models.seam import ARCHITECTURES


class Gemma3(Llama, family="gemma3"):
    """Gemma 3's text decoder: five local layers to each global one, normalised query/key heads."""

    classifier_class = "Gemma3TextForSequenceClassification"
    lm_class = "Gemma3ForCausalLM"  # the text-only model, on Gemma3TextConfig
    qa_class = None

    def check(self, config, where: str) -> None:
        """Soft-capped attention logits and bidirectional attention are not causal softmax attention."""
        if getattr(config, "attn_logit_softcapping", None) is not None:
            raise InputError(
                where,
                "config.json attn_logit_softcapping",
                "expected null (attnlens reads softmax attention without soft-capping), "
                f"got {config.attn_logit_softcapping}",
            )
        if getattr(config, "use_bidirectional_attention", False):
            raise InputError(
                where,
                "config.json use_bidirectional_attention",
                "expected false (attnlens reads Gemma 3 as a causal decoder), got true",
            )


GEMMA3 = ARCHITECTURES.register(Gemma3())
