"""A generated answer's score under ablations of its context: the forwards that leave-one-out, the ablation surrogate
and the top-k drop read (:mod:`attnlens.attribution.datamodels` turns them into scores and judgements).

A causal language model scores a sequence ``prompt + answer`` by each answer token's log-probability given every
token before it. A source is taken out of the context in one of two ways, and the caller names which:

* **deleted**: its text is cut out and the prompt rebuilt, so each ablation is a sequence of its own;
* **masked**: its tokens stay where they are, with their positions, and no token attends to them (zeros in the
  attention mask), so one tokenization serves every ablation and the other tokens keep their positions.

An ablated prompt is the full one up to its first removed source. :func:`shared_prefix_log_probs` runs the full
prompt's longest shared prefix once, keeps its keys and values, and runs each ablation from its own shared prefix
on: leave-one-out, whose ablations share on average half the prompt, costs about half a forward per source.

Every forward runs under the model's :meth:`~attnlens.models.seam.Architecture.long_context`: a decoder's
suffix attends to its cached prefix, and a sliding window to its keys, without an ``n × n`` mask.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from transformers import DynamicCache

from attnlens.generation.prefix_tree import tree_log_probs
from attnlens.models import architecture
from attnlens.tasks.contexts import DEFAULT_FORMAT, REMOVALS, PromptFormat, Source

#: Sequences per forward when the caller gives no batch.
BATCH = 8
#: A forward's costs per device type, what batching ablations saves: ``(fixed seconds a decoder layer, a token's
#: floor in seconds a layer, floating-point operations a second)``. A forward costs its layers' fixed cost, and a
#: token the larger of twice the layers' parameters in operations and its floor (a small model's tokens cost more
#: than their arithmetic), so a forward's fixed cost is worth few tokens of a large model and many of a small one
#: (:func:`forward_overhead`). The CPU's, measured on 2 cores (docs/benchmarks.md, "Ablations from the shared
#: prefix"): Gemma 3 270M, 18 layers, 27 ms for a one-token forward over a cached prefix and 0.93 ms a token at 16
#: rows of 32 (1.5 ms a layer, 2·10¹¹ operations a second); the default's 2-layer decoder of 131 k layer parameters,
#: 11.5 µs a token. A card's is not yet measured: 0.5 ms of launches a layer at 50 TFLOP/s.
FORWARD_COSTS = {"cpu": (1.5e-3, 5.75e-6, 2.0e11), "cuda": (5.0e-4, 1.0e-7, 5.0e13)}


@torch.no_grad()
def answer_token_log_probs(
    model,
    sequences: Sequence[Sequence[int]],
    answer_lengths: Sequence[int],
    keep: Sequence[Sequence[int]] | None = None,
    batch_size: int = BATCH,
) -> list[np.ndarray]:
    """Per sequence, float64 ``(answer_length,)``: the log-probability of each of its last ``answer_length`` tokens
    (the answer) given every token before it.

    ``keep`` (one 0/1 list per sequence, over its tokens): a 0 is a masked token, attended by no token, its
    position kept; None keeps every token. Sequences are right-padded into batches of ``batch_size`` in order of
    length (stably), with explicit positions ``0, 1, …``: a causal model's tokens never attend to the padding after
    them, so a sequence's numbers do not depend on its batch beyond the rounding of batched sums. Only the positions
    that predict an answer reach the vocabulary (``logits_to_keep``)."""
    if len(sequences) != len(answer_lengths) or (keep is not None and len(keep) != len(sequences)):
        raise ValueError("expected one answer length (and one keep list) per sequence")
    for ids, n, kept in zip(sequences, answer_lengths, keep or [None] * len(sequences), strict=True):
        if not 0 < n < len(ids):
            raise ValueError(f"expected an answer of 1 to {len(ids) - 1} tokens after a prompt, got {n}")
        if kept is not None and (len(kept) != len(ids) or not all(kept[len(ids) - n - 1 :])):
            raise ValueError("expected a keep flag per token, with the prompt's last token and the answer kept")
    device = next(model.parameters()).device
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    out: list[np.ndarray] = [np.empty(0)] * len(sequences)
    order = np.argsort([len(s) for s in sequences], kind="stable")
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size].tolist()
        width = max(len(sequences[i]) for i in index)
        ids = torch.full((len(index), width), pad, dtype=torch.long)
        mask = torch.zeros((len(index), width), dtype=torch.long)
        for row, i in enumerate(index):
            n = len(sequences[i])
            ids[row, :n] = torch.as_tensor(list(sequences[i]))
            mask[row, :n] = torch.as_tensor(list(keep[i])) if keep is not None else 1
        positions = torch.arange(width).expand(len(index), width)
        first = min(len(sequences[i]) - answer_lengths[i] - 1 for i in index)  # the earliest answer row
        with architecture(model).long_context(model):
            logits = model(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                position_ids=positions.to(device),
                logits_to_keep=width - first,
            ).logits
        log_probs = torch.log_softmax(logits.double(), dim=-1).cpu()
        for row, i in enumerate(index):
            n, a = len(sequences[i]), answer_lengths[i]
            targets = ids[row, n - a : n]
            at = n - a - 1 - first
            out[i] = log_probs[row, at : at + a].gather(-1, targets[:, None])[:, 0].numpy()
    return out


def shared_prefix(full: Sequence[int], ids: Sequence[int], keep: Sequence[int] | None, answer_length: int) -> int:
    """The tokens an ablated sequence ``ids`` shares with the ``full`` one from the start, before its first masked
    token (``keep``), leaving the positions that predict its answer (its last ``answer_length + 1``) to compute."""
    limit = min(len(ids) - answer_length - 1, len(full))
    if keep is not None and 0 in keep:
        limit = min(limit, list(keep).index(0))
    n = 0
    while n < limit and ids[n] == full[n]:
        n += 1
    return n


def forward_overhead(model) -> int:
    """What a forward's fixed cost is worth in tokens of ``model`` on its device (:data:`FORWARD_COSTS`):
    deterministic, so a run's batches, and its numbers, do not depend on the machine's speed."""
    device = next(model.parameters()).device.type
    fixed, floor, rate = FORWARD_COSTS.get(device, FORWARD_COSTS["cpu"])
    layers = architecture(model).layers(model)
    parameters = sum(p.numel() for layer in layers for p in layer.parameters())
    return int(fixed * len(layers) / max(2 * parameters / rate, floor * len(layers)))


def _batches(order: Sequence[int], prefix: Sequence[int], lengths: Sequence[int], size: int, overhead: int):
    """Consecutive runs of ``order`` (by shared prefix, longest first) of at most ``size``, a run running every
    sequence from its shortest prefix on, right-padded. A sequence joins the run before it where that costs less
    than a forward of its own: the tokens the run grows by are fewer than the tokens the sequence needs plus
    ``overhead``, what a forward's fixed cost is worth in tokens."""
    run: list[int] = []
    cost = 0
    for i in order:
        grown = [*run, i]
        start = min(prefix[j] for j in grown)
        grown_cost = len(grown) * max(lengths[j] - start for j in grown)
        if run and (len(grown) > size or grown_cost - cost > overhead + lengths[i] - prefix[i]):
            yield run
            grown, grown_cost = [i], lengths[i] - prefix[i]
        run, cost = grown, grown_cost
    if run:
        yield run


@torch.no_grad()
def shared_prefix_log_probs(
    model,
    full: Sequence[int],
    sequences: Sequence[Sequence[int]],
    answer_length: int,
    keep: Sequence[Sequence[int]] | None = None,
    batch_size: int = BATCH,
    overhead: int | None = None,
    divergence: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """``(sequences, answer_length)`` float64, equal to :func:`answer_token_log_probs` (float rounding aside) at a
    fraction of its cost: each answer token's log-probability in each of ``sequences`` (ablations of ``full``, each
    ending in the same answer; ``keep`` as there), computed from the keys and values of the longest prefix any of
    them shares with ``full``, run once.

    The sequences run in batches of consecutive shared prefixes (:func:`_batches`), each from the batch's shortest
    one, its keys and values repeated along the batch, right-padded, with explicit positions: a token's position
    is its index, so a sliding window's keys are the same as without the cache. ``overhead``: what a forward's fixed
    cost is worth in tokens (default :func:`forward_overhead`). Only the positions that predict the answer reach the
    vocabulary (``logits_to_keep``).

    With ``divergence``, also ``(sequences, answer_length)``: at each answer token, the Jensen–Shannon divergence
    (natural logarithm, at most ``ln 2``) of the model's next-token distribution on the sequence from its
    distribution on ``full`` there (ARC-JSD's, read from the same forwards; ``full``'s own answer rows run once
    more, from the shared prefix's keys and values)."""
    a = int(answer_length)
    if keep is not None and len(keep) != len(sequences):
        raise ValueError("expected one keep list per sequence")
    for ids in sequences:
        if not 0 < a < len(ids) or list(ids[len(ids) - a :]) != list(full[len(full) - a :]):
            raise ValueError(f"expected every sequence to end in the full sequence's answer of {a} tokens")
    device = next(model.parameters()).device
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    kept = list(keep) if keep is not None else [None] * len(sequences)
    prefix = [shared_prefix(full, ids, k, a) for ids, k in zip(sequences, kept, strict=True)]
    out = np.zeros((len(sequences), a))
    jsd = np.zeros((len(sequences), a))
    if not len(sequences):
        return (out, jsd) if divergence else out
    longest = max(prefix)
    long_context = architecture(model).long_context
    cached: list[tuple[torch.Tensor, torch.Tensor]] = []
    if longest:
        with long_context(model):
            head = model(
                input_ids=torch.as_tensor([list(full[:longest])], device=device),
                past_key_values=DynamicCache(),
                use_cache=True,
                logits_to_keep=1,
            ).past_key_values
        cached = [(layer.keys, layer.values) for layer in head.layers]
    reference = _full_answer_log_probs(model, full, a, cached, longest) if divergence else None
    lengths = [len(ids) for ids in sequences]
    order = sorted(range(len(sequences)), key=lambda i: (-prefix[i], i))
    overhead = forward_overhead(model) if overhead is None else overhead
    for run in _batches(order, prefix, lengths, batch_size, overhead):
        start = min(prefix[i] for i in run)
        width = max(lengths[i] - start for i in run)
        ids = torch.full((len(run), width), pad, dtype=torch.long)
        mask = torch.zeros((len(run), start + width), dtype=torch.long)
        mask[:, :start] = 1
        for row, i in enumerate(run):
            suffix = list(sequences[i][start:])
            ids[row, : len(suffix)] = torch.as_tensor(suffix)
            mask[row, start : start + len(suffix)] = torch.as_tensor(list(kept[i][start:])) if kept[i] else 1
        positions = torch.arange(start, start + width).expand(len(run), width)
        past = _repeated(cached, start, len(run))
        first = min(lengths[i] - start for i in run) - a - 1  # the earliest row that predicts an answer token
        with long_context(model):
            logits = model(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                position_ids=positions.to(device),
                past_key_values=past,
                use_cache=True,
                logits_to_keep=width - first,
            ).logits
        log_probs = torch.log_softmax(logits.double(), dim=-1).cpu()
        targets = torch.as_tensor(list(full[len(full) - a :]))
        for row, i in enumerate(run):
            at = lengths[i] - start - a - 1 - first  # its first answer row among the logits kept
            out[i] = log_probs[row, at : at + a].gather(-1, targets[:, None])[:, 0].numpy()
            if reference is not None:
                jsd[i] = jensen_shannon(reference, log_probs[row, at : at + a]).numpy()
    return (out, jsd) if divergence else out


def _full_answer_log_probs(model, full: Sequence[int], a: int, cached, longest: int) -> torch.Tensor:
    """``(a, vocabulary)`` float64: the next-token log-probabilities of ``full`` at the rows that predict its last
    ``a`` tokens, run from its first ``longest`` tokens' cached keys and values (all of it without)."""
    device = next(model.parameters()).device
    start = min(longest, len(full) - a - 1)
    suffix = torch.as_tensor([list(full[start:])], device=device)
    with architecture(model).long_context(model):
        logits = model(
            input_ids=suffix,
            position_ids=torch.arange(start, len(full), device=device)[None],
            past_key_values=_repeated(cached, start, 1),
            use_cache=True,
            logits_to_keep=a + 1,
        ).logits
    return torch.log_softmax(logits[0, :a].double(), dim=-1).cpu()


def jensen_shannon(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """The Jensen–Shannon divergence of the distributions ``exp(log_p)`` and ``exp(log_q)`` over the last axis
    (natural logarithm): ``½ KL(P‖M) + ½ KL(Q‖M)``, ``M = (P + Q) / 2``; a zero probability contributes nothing."""
    log_m = torch.logaddexp(log_p, log_q) - np.log(2.0)
    p, q = log_p.exp(), log_q.exp()
    kl_p = torch.where(p > 0, p * (log_p - log_m), 0.0).sum(-1)
    kl_q = torch.where(q > 0, q * (log_q - log_m), 0.0).sum(-1)
    return 0.5 * (kl_p + kl_q)


def _repeated(cached: list[tuple[torch.Tensor, torch.Tensor]], length: int, batch: int) -> DynamicCache:
    """The first ``length`` cached keys and values of every layer, repeated (as views) for a batch: a fresh cache,
    full in every layer, that the batch's forward extends without touching the shared tensors."""
    if not length:
        return DynamicCache()
    return DynamicCache(
        [(k[:, :, :length].expand(batch, -1, -1, -1), v[:, :, :length].expand(batch, -1, -1, -1)) for k, v in cached]
    )


def ablation_log_probs(
    model,
    tokenizer,
    context: str,
    sources: Sequence[Source],
    question: str,
    answer_ids: Sequence[int],
    masks: np.ndarray,
    removal: str = "delete",
    form: PromptFormat = DEFAULT_FORMAT,
    batch_size: int = BATCH,
    tree: bool = False,
    divergence: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """``(masks, answer tokens)`` float64: each answer token's log-probability on the context with the sources of
    each mask's zeros taken out by ``removal`` (:data:`~attnlens.tasks.contexts.REMOVALS`: ``delete``, ``mask``); the
    prompt is ``form``'s (:class:`~attnlens.tasks.contexts.PromptFormat`). From the full prompt's shared prefix
    (:func:`shared_prefix_log_probs`), or with ``tree`` from the tree of the ablated prompts' shared prefixes
    (:func:`~attnlens.generation.prefix_tree.tree_log_probs`: every ablation of a context, exact truth's); with
    ``divergence`` (from the shared prefix), each answer token's Jensen–Shannon divergence from the full context's
    too (:func:`shared_prefix_log_probs`)."""
    masks, answer = np.asarray(masks, dtype=bool), list(answer_ids)
    ablations = REMOVALS.get(removal)(tokenizer, context, sources, question, form, answer, masks)
    if tree:
        if divergence:
            raise ValueError("divergence: read from the shared prefix's forwards, not the tree's")
        overhead = forward_overhead(model)
        return tree_log_probs(model, ablations.sequences, len(answer), ablations.keep, batch_size, overhead)[0]
    full = REMOVALS.get(removal)(tokenizer, context, sources, question, form, answer, np.ones((1, len(sources)), bool))
    return shared_prefix_log_probs(
        model, full.sequences[0], ablations.sequences, len(answer), ablations.keep, batch_size, divergence=divergence
    )
