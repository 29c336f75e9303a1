"""The model seam: one :class:`~attnlens.models.seam.Architecture` per model family, found by ``model_type``.

:func:`architecture` is how every stage and numerics module reaches what differs between architectures
(forward arguments, embedding layers, head groups, attention in its native sparse form); the loaders in
:mod:`attnlens.models.loading` read checkpoints of every ``model.source``. What a new architecture must
provide is written in :mod:`attnlens.models.seam`.
"""

from __future__ import annotations

import torch

from attnlens.attention.band import Band
from attnlens.models.seam import ARCHITECTURES, Architecture

# isort: split
# each architecture's package registers it in ARCHITECTURES as it is imported, in this order
from attnlens.models.longformer import LONGFORMER

# isort: split
from attnlens.models.bigbird import BIGBIRD

# isort: split
from attnlens.models.modernbert import MODERNBERT

# isort: split
from attnlens.models.llama import LLAMA, MISTRAL

# isort: split
from attnlens.models.qwen import QWEN2, QWEN3

# isort: split
from attnlens.models.gemma3 import GEMMA3

# isort: split
from attnlens.models.llama.scratch_decoder import CLASSES as DECODERS
from attnlens.models.llama.scratch_decoder import draw_decoder


def architecture(model_or_config, where: str = "model") -> Architecture:
    """The :class:`Architecture` of a model (or of its Hugging Face config), by ``model_type``.

    Raises:
        InputError: one line naming the supported ``model_type`` values.
    """
    config = getattr(model_or_config, "config", model_or_config)
    return ARCHITECTURES.get(getattr(config, "model_type", None), where)


@torch.no_grad()
def forward_bands(model, batch: dict[str, torch.Tensor]) -> list[Band]:
    """One example's forward pass with attention outputs, as one :class:`Band` (or full layer) per layer, on the
    model's device: the summaries run where the attention is (the compiled kernels on a CPU, tensor operations on a
    card: :mod:`attnlens.attention.topk`).

    ``batch`` holds the architecture's forward arguments (:meth:`~attnlens.models.seam.Architecture.forward_args`).
    """
    return list(architecture(model).run(model, batch, attentions=True)[1][0])


__all__ = [
    "ARCHITECTURES",
    "BIGBIRD",
    "DECODERS",
    "GEMMA3",
    "LLAMA",
    "LONGFORMER",
    "MISTRAL",
    "MODERNBERT",
    "QWEN2",
    "QWEN3",
    "Architecture",
    "architecture",
    "draw_decoder",
    "forward_bands",
]
