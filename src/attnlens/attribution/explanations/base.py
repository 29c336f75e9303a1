"""What every explanation method sees and gives (:class:`Example`, :class:`Scored`), and the registries its
computation joins: the shared passes, one scorer per method card (:mod:`attnlens.attribution.methods`) and the
batch scorers of the methods whose one pass explains several documents.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnlens.attribution.ig import Inputs
from attnlens.attribution.methods import PASSES, get_method
from attnlens.registry import Registry


@dataclass
class Example:
    """One example as every scorer sees it: the model, IG's inputs and target, and the run's options."""

    model: Any
    inputs: Inputs
    target: int
    layers: str = "all"  # the layer configuration value_norm and grad_attention sum over
    tokens: Sequence[str] = ()
    special: np.ndarray | None = None
    pad_id: int | None = None
    occlusion_max_tokens: int = 48
    batch_size: int = 8

    @property
    def n(self) -> int:
        """The example's tokens (a model may pad inside; scores are cut back to them)."""
        return self.inputs.input_ids.shape[1]

    @property
    def args(self) -> dict[str, torch.Tensor]:
        """The forward's keyword arguments: the ids and the masks and positions IG prepared."""
        return {"input_ids": self.inputs.input_ids, **self.inputs.forward_kwargs()}


@dataclass
class Scored:
    """What a scorer returns: ``(n,)`` float64 scores, the forwards it took, and what a conserving method explains."""

    scores: np.ndarray
    n_forwards: int = 1
    explained: float | None = None
    delta: float | None = None


#: ``{pass name: run(example) -> shared}`` for every pass of :data:`attnlens.attribution.methods.PASSES`.
PASS_RUNNERS: Registry[Callable[[Example], Any]] = Registry("shared passes", "methods.PASSES")
#: ``{method name: scores(example, shared) -> Scored}``, one per registered method.
SCORERS: Registry[Callable[[Example, Any], Scored]] = Registry("methods' scorers", "explanations.methods")
#: ``{method name: scores(examples) -> [Scored]}``: methods whose one pass explains several documents together (its
#: rules act per example); each also has its :data:`SCORERS` entry, the batch of one.
BATCH_SCORERS: Registry[Callable[[Sequence[Example]], list[Scored]]] = Registry(
    "methods' batch scorers", "explanations.methods"
)


def runs_pass(name: str):
    """Register the function that runs the shared pass ``name`` for one example."""
    if name not in PASSES:
        raise ValueError(f"no pass {name!r} in attnlens.attribution.methods.PASSES")
    return PASS_RUNNERS.register(name)


def scorer(name: str):
    """Register the computation of the method ``name`` (its card registered in :mod:`attnlens.attribution.methods`):
    ``scores(example, shared) -> Scored``, ``shared`` the output of the pass the card needs."""
    get_method(name)
    return SCORERS.register(name)


def batch_scorer(name: str):
    """Register the computation of the method ``name`` over several documents in one pass:
    ``scores(examples) -> [Scored]``, one per example, each what the method's :func:`scorer` gives it alone (to
    rounding). :func:`explain_examples` runs it on documents grouped by length."""
    get_method(name)
    return BATCH_SCORERS.register(name)


def token_scores(scores: torch.Tensor, n: int) -> np.ndarray:
    """A scorer's per-token scores as the artifacts keep them: float64 on the host, the example's ``n`` tokens."""
    return scores.double().cpu().numpy()[:n]
