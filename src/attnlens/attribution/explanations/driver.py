"""The driver: every requested method for one example (its shared passes once), several documents per pass for
the batched methods, and the rows of an ``explain`` shard.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from attnlens.attribution.explanations import occlusion, scorers  # noqa: F401 (importing them registers the scorers)
from attnlens.attribution.explanations.base import BATCH_SCORERS, PASS_RUNNERS, SCORERS, Example, Scored
from attnlens.attribution.ig import Inputs
from attnlens.attribution.methods import PASSES, REGISTRY, get_method
from attnlens.device import batch_size, synchronize
from attnlens.models import architecture


def _sync(device: torch.device) -> float:
    """The clock, once the device has finished its queued work (what a method's seconds are measured with)."""
    synchronize(device)
    return time.perf_counter()


def explanation_rows(
    example_id: str,
    input_ids: Sequence[int],
    target: int,
    res: Explanation,
    methods: Sequence[str],
    target_rank: int = 0,
) -> list[dict]:
    """The rows of an ``explain`` shard (:data:`EXPLANATION_TYPES`) for one explained example and target (its place
    ``target_rank`` among the document's explained targets), one per method."""
    ids = np.asarray(input_ids, dtype=np.int32)
    return [
        {
            "example_id": example_id,
            "method": m,
            "input_ids": ids,
            "scores": res.scores[m],
            "target": int(target),
            "target_rank": int(target_rank),
            "seconds": res.seconds[m],
            "forward_seconds": res.forward_seconds,
            "n_forwards": res.n_forwards[m],
            "explained": res.explained.get(m, np.nan),
            "delta": res.delta.get(m, np.nan),
        }
        for m in methods
    ]


@dataclass
class Explanation:
    """Every requested method's scores for one example, and what each cost."""

    scores: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    n_forwards: dict[str, int] = field(default_factory=dict)
    forward_seconds: float = float("nan")
    explained: dict[str, float] = field(default_factory=dict)  # the quantity a conserving method explains
    delta: dict[str, float] = field(default_factory=dict)  # explained − Σ scores


def explain_example(
    model,
    inputs: Inputs,
    target: int,
    methods: Sequence[str],
    *,
    layers: str = "all",
    tokens: Sequence[str] = (),
    special: np.ndarray | None = None,
    pad_id: int | None = None,
    occlusion_max_tokens: int = 48,
    batch_size: int = 8,
) -> Explanation:
    """Scores of every method in ``methods`` (names of :data:`attnlens.attribution.methods.REGISTRY`) for one
    example (``inputs`` as IG prepares them).

    Each shared pass a requested method needs runs once, in the order of
    :data:`~attnlens.attribution.methods.PASSES`, and its methods are scored from it in registry order. The
    cost of a method is the wall time of its pass plus its own computation (a shared pass is counted for every
    method that uses it). ``forward_seconds`` is one plain forward, the unit of the leaderboard's cost ratio.
    """
    x = Example(model, inputs, target, layers, tokens, special, pad_id, occlusion_max_tokens, batch_size)
    return _explain(x, _checked(methods))


def _checked(methods: Sequence[str]) -> list[str]:
    cards = [get_method(m) for m in methods]
    missing = [c.name for c in cards if c.name not in SCORERS]
    if missing:
        raise ValueError(f"explanation methods {missing} are registered without a scorer (@scorer in this module)")
    return list(methods)


def _record(out: Explanation, method: str, res: Scored, seconds: float) -> None:
    out.scores[method] = res.scores
    out.seconds[method] = seconds
    out.n_forwards[method] = res.n_forwards
    if res.explained is not None:
        out.explained[method], out.delta[method] = res.explained, res.delta


def _explain(x: Example, methods: Sequence[str]) -> Explanation:
    device = x.inputs.input_ids.device
    args = x.args
    out = Explanation()
    with torch.no_grad():
        x.model(**args)  # warm-up: the first call of a shape pays for allocations
        t0 = _sync(device)
        x.model(**args)
        out.forward_seconds = _sync(device) - t0

    for needs in PASSES:
        wanted = [name for name, card in REGISTRY.items() if card.needs == needs and name in methods]
        if not wanted:
            continue
        t0 = _sync(device)
        shared = PASS_RUNNERS[needs](x)
        shared_seconds = _sync(device) - t0
        for method in wanted:
            t0 = _sync(device)
            res = SCORERS[method](x, shared)
            _record(out, method, res, shared_seconds + _sync(device) - t0)
        del shared
    return out


def document_groups(examples: Sequence[Example], documents: int) -> list[list[int]]:
    """Indices of ``examples`` in groups of at most ``documents`` that one pass of a batched method explains together:
    longest first, so that a group's documents are of about one length and its padding is small; only documents of
    one length share a group where the architecture's padded batch is not each document alone
    (:attr:`attnlens.models.base.Architecture.pads_freely`)."""
    order = sorted(range(len(examples)), key=lambda i: -examples[i].n)
    if not examples or architecture(examples[0].model).pads_freely:
        runs = [order]
    else:
        runs = [[i for i in order if examples[i].n == n] for n in dict.fromkeys(examples[i].n for i in order)]
    size = max(1, documents)
    return [run[a : a + size] for run in runs for a in range(0, len(run), size)]


def explain_examples(examples: Sequence[Example], methods: Sequence[str], documents: int = 1) -> list[Explanation]:
    """:func:`explain_example` for each of ``examples`` (one model), with every method that has a
    :func:`batch_scorer` run on groups of up to ``documents`` documents per pass (:func:`document_groups`). A batched
    method's cost on a document is its group's wall time shared equally among the group's documents."""
    methods = _checked(methods)
    together = [m for m in methods if m in BATCH_SCORERS] if documents > 1 else []
    outs = [_explain(x, [m for m in methods if m not in together]) for x in examples]
    if not together:
        return outs
    device = examples[0].inputs.input_ids.device
    for group in document_groups(examples, documents):
        for method in together:
            t0 = _sync(device)
            results = BATCH_SCORERS[method]([examples[i] for i in group])
            seconds = (_sync(device) - t0) / len(group)
            for i, res in zip(group, results, strict=True):
                _record(outs[i], method, res, seconds)
    return outs


def documents_batch(requested: int | str, methods: Sequence[str], examples: Sequence[Example]) -> tuple[int, dict]:
    """Documents per pass of the batched methods (:data:`BATCH_SCORERS`) for a job (:func:`attnlens.device.batch_size`):
    ``requested`` (``explanations.documents_per_pass``), or with ``auto`` one off a card (a CPU is slower per document
    in a pass over several, docs/benchmarks.md) and on a card the most copies of the job's longest document that one
    pass of each batched method in ``methods`` fits."""
    together = [m for m in methods if m in BATCH_SCORERS]
    if not together or not examples:
        return (1 if requested == "auto" else int(requested)), {"how": "no method that batches documents in the job"}
    longest = max(examples, key=lambda x: x.n)

    def probe(copies: int) -> None:
        for method in together:
            BATCH_SCORERS[method]([longest] * copies)

    return batch_size(requested, longest.inputs.input_ids.device, probe, len(examples), "documents per pass", cpu=1)
