"""One document as every method's scorer sees it (:class:`Example`, the ``document`` scope of
:mod:`attnlens.attribution.methods`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from attnlens.attribution.ig import Inputs, prepare_inputs
from attnlens.attribution.methods.cards import DOCUMENT
from attnlens.data.tokens import structural_mask


@dataclass
class Example:
    """One document as every scorer sees it: the model, IG's inputs and target, and the run's options."""

    scope: ClassVar[str] = DOCUMENT
    model: Any
    inputs: Inputs
    target: int
    layers: str = "all"  # the layer configuration value_norm and grad_attention sum over
    tokens: Sequence[str] = ()
    special: np.ndarray | None = None
    pad_id: int | None = None
    occlusion_max_tokens: int = 48
    batch_size: int = 8

    @classmethod
    def of_document(cls, model, tokenizer, ids: Sequence[int], target: int, cfg, copies: int, device=None) -> Example:
        """One document as the ``explain`` rule and the ``explain`` door explain it: IG's inputs of its token ids
        on ``device``, its target, and the ``explanations`` section's options (``cfg``: ``layers``,
        ``occlusion_max_tokens``); ``copies``: occluded copies per forward."""
        return cls(
            model,
            prepare_inputs(model, tokenizer, ids, device),
            target,
            cfg.layers,
            tokens=tokenizer.convert_ids_to_tokens(ids),
            special=structural_mask(tokenizer, ids),
            pad_id=tokenizer.pad_token_id,
            occlusion_max_tokens=cfg.occlusion_max_tokens,
            batch_size=copies,
        )

    @property
    def n(self) -> int:
        """The example's tokens (a model may pad inside; scores are cut back to them)."""
        return self.inputs.input_ids.shape[1]

    @property
    def args(self) -> dict[str, torch.Tensor]:
        """The forward's keyword arguments: the ids and the masks and positions IG prepared."""
        return {"input_ids": self.inputs.input_ids, **self.inputs.forward_kwargs()}

    @property
    def device(self) -> torch.device:
        return self.inputs.input_ids.device

    def forward(self) -> None:
        """One plain forward of the document (the unit of a method's cost)."""
        with torch.no_grad():
            self.model(**self.args)

    def token_scores(self, scores: torch.Tensor) -> np.ndarray:
        """Per-token scores as the artifacts keep them: float64 on the host, the document's ``n`` tokens (a model
        may pad inside)."""
        return scores.double().cpu().numpy()[: self.n]
