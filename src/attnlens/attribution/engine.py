"""One scheduler for every explanation method and either scope: a set of methods on one example (a document or a
generated answer), each shared pass once, one cost record; several documents per pass for the methods that batch.

:func:`explain` runs the passes the requested methods need in the order of
:data:`~attnlens.attribution.methods.PASSES`, by the runner of the example's scope, and scores each method from its
pass in registry order. A method's cost: the wall seconds of its pass, of its own computation and of the cached
ablations it read; the forwards and backwards of its pass and its own; the peak memory either added.
``forward_seconds`` is one plain forward of the example, the unit of the leaderboards' cost ratio.

An example is any object with a ``scope`` (:data:`~attnlens.attribution.methods.SCOPES`), a ``device``, a
``forward()`` and what its scope's scorers read: :class:`attnlens.attribution.explanations.Example` (a document) and
:class:`attnlens.attribution.answer_example.AnswerExample` (a generated answer).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from attnlens.attribution import answer_example, explanations  # noqa: F401 (importing them registers their passes)
from attnlens.attribution.methods import PASSES, REGISTRY, Scored, get_method
from attnlens.device import PeakMemory, batch_size, synchronize
from attnlens.models import architecture


@dataclass
class Explanation:
    """Every requested method's scores for one example, and what each cost."""

    scores: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    n_forwards: dict[str, int] = field(default_factory=dict)
    n_backwards: dict[str, int] = field(default_factory=dict)
    peak_bytes: dict[str, int] = field(default_factory=dict)
    explained: dict[str, float] = field(default_factory=dict)  # the quantity a conserving method explains
    delta: dict[str, float] = field(default_factory=dict)  # explained − Σ scores
    forward_seconds: float = float("nan")
    #: what all the methods cost together: each shared pass once, and each method's own forwards and backwards
    total_forwards: int = 0
    total_backwards: int = 0

    def record(self, method: str, res: Scored, seconds: float, peak: int, forwards: int, backwards: int) -> None:
        self.scores[method] = np.asarray(res.scores, dtype=np.float64)
        self.seconds[method] = seconds + res.ablation_seconds
        self.n_forwards[method] = forwards + res.n_forwards
        self.n_backwards[method] = backwards + res.n_backwards
        self.peak_bytes[method] = peak
        if res.explained is not None:
            self.explained[method], self.delta[method] = res.explained, res.delta


def _clock(device) -> float:
    """The clock, once the device has finished its queued work (what a method's seconds are measured with)."""
    synchronize(device)
    return time.perf_counter()


def checked(methods: Sequence[str], scope: str) -> list[str]:
    """``methods`` if every one is registered with a scorer for ``scope``; otherwise one line naming those without."""
    missing = [m for m in methods if scope not in get_method(m).scorers]
    if missing:
        raise ValueError(f"explanation methods {missing} have no {scope} scorer (@METHOD.explains({scope!r}))")
    return list(methods)


def explain(x, methods: Sequence[str]) -> Explanation:
    """Scores of every method in ``methods`` for the example ``x``: each shared pass they need once, by the runner of
    ``x.scope``, its methods scored from it in registry order (module docstring)."""
    methods = checked(methods, x.scope)
    device = x.device
    out = Explanation()
    x.forward()  # warm-up: the first call of a shape pays for allocations
    t0 = _clock(device)
    x.forward()
    out.forward_seconds = _clock(device) - t0
    for needs, shared_pass in PASSES.items():
        wanted = [name for name, card in REGISTRY.items() if card.needs == needs and name in methods]
        if not wanted:
            continue
        with PeakMemory(device) as pass_peak:
            t0 = _clock(device)
            shared = shared_pass.runners[x.scope](x)
            pass_seconds = _clock(device) - t0
        out.total_forwards += shared_pass.forwards
        out.total_backwards += shared_pass.backwards
        for method in wanted:
            with PeakMemory(device) as peak:
                t0 = _clock(device)
                res = REGISTRY[method].scorers[x.scope](x, shared)
                seconds = _clock(device) - t0
            out.total_forwards += res.n_forwards
            out.total_backwards += res.n_backwards
            out.record(
                method,
                res,
                pass_seconds + seconds,
                max(pass_peak.bytes, peak.bytes),
                shared_pass.forwards,
                shared_pass.backwards,
            )
        del shared
    return out


def document_groups(examples: Sequence, documents: int) -> list[list[int]]:
    """Indices of ``examples`` in groups of at most ``documents`` that one pass of a batched method explains together:
    longest first, so that a group's documents are of about one length and its padding is small; only documents of
    one length share a group where the architecture's padded batch is not each document alone
    (:attr:`attnlens.models.seam.Architecture.pads_freely`)."""
    order = sorted(range(len(examples)), key=lambda i: -examples[i].n)
    if not examples or architecture(examples[0].model).pads_freely:
        runs = [order]
    else:
        runs = [[i for i in order if examples[i].n == n] for n in dict.fromkeys(examples[i].n for i in order)]
    size = max(1, documents)
    return [run[a : a + size] for run in runs for a in range(0, len(run), size)]


def _batched(methods: Sequence[str], scope: str) -> list[str]:
    return [m for m in methods if scope in get_method(m).batch_scorers]


def explain_together(examples: Sequence, methods: Sequence[str], documents: int = 1) -> list[Explanation]:
    """:func:`explain` for each of ``examples`` (one model, one scope), with every method that scores several
    examples in one pass (:meth:`~attnlens.attribution.methods.Method.explains_together`) run on groups of up to
    ``documents`` (:func:`document_groups`). A batched method's cost on an example is its group's wall time shared
    equally among the group's examples."""
    if not examples:
        return []
    scope = examples[0].scope
    methods = checked(methods, scope)
    together = _batched(methods, scope) if documents > 1 else []
    outs = [explain(x, [m for m in methods if m not in together]) for x in examples]
    device = examples[0].device
    for group in document_groups(examples, documents) if together else []:
        for method in together:
            card = REGISTRY[method]
            with PeakMemory(device) as peak:
                t0 = _clock(device)
                results = card.batch_scorers[scope]([examples[i] for i in group])
                seconds = (_clock(device) - t0) / len(group)
            shared_pass = PASSES[card.needs]
            for i, res in zip(group, results, strict=True):
                outs[i].record(method, res, seconds, peak.bytes, shared_pass.forwards, shared_pass.backwards)
    return outs


def documents_batch(requested: int | str, methods: Sequence[str], examples: Sequence) -> tuple[int, dict]:
    """Examples per pass of the batched methods for a job (:func:`attnlens.device.batch_size`): ``requested``
    (``explanations.documents_per_pass``), or with ``auto`` one off a card (a CPU is slower per document in a pass
    over several, docs/benchmarks.md) and on a card the most copies of the job's longest example that one pass of
    each batched method in ``methods`` fits."""
    together = _batched(methods, examples[0].scope) if examples else []
    if not together or not examples:
        return (1 if requested == "auto" else int(requested)), {"how": "no method that batches documents in the job"}
    longest = max(examples, key=lambda x: x.n)

    def probe(copies: int) -> None:
        for method in together:
            REGISTRY[method].batch_scorers[longest.scope]([longest] * copies)

    return batch_size(requested, longest.device, probe, len(examples), "documents per pass", cpu=1)


def explanation_rows(
    example_id: str,
    input_ids: Sequence[int],
    target: int,
    res: Explanation,
    methods: Sequence[str],
    target_rank: int = 0,
) -> list[dict]:
    """The rows of an ``explain`` shard (:data:`attnlens.attribution.artifacts.EXPLANATION_TYPES`) for one explained
    document and target (its place ``target_rank`` among the document's explained targets), one per method."""
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


def explain_document(
    model,
    inputs,
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
    """:func:`explain` of one document: ``inputs`` as IG prepares them (:func:`attnlens.attribution.ig.prepare_inputs`),
    the output ``target`` of its task."""
    x = explanations.Example(model, inputs, target, layers, tokens, special, pad_id, occlusion_max_tokens, batch_size)
    return explain(x, methods)
