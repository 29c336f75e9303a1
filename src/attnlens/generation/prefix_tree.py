"""Many ablations' answer scores from one tree of shared prefixes: each stretch of tokens that several ablated
prompts share is run once, whatever their first difference from the full prompt.

:func:`~attnlens.generation.ablation.shared_prefix_log_probs` shares one prefix, the full prompt's; an ablation
runs everything after its first removed source. Enumerating every one of the ``2ⁿ`` ablations of ``n`` sources that
way costs about half a prompt each. Here the sequences are put into a prefix tree (a radix tree over their tokens
and keep flags, the answer kept out of it): a node is a run of tokens that every sequence below it shares, run once
from its parent's keys and values. Deleting source ``i`` makes a branch; the tree of ``2ⁿ`` ablations has about
``2ⁿ`` branch nodes, each running one source, and ``2ⁿ`` leaves, each running what follows its last source (the
question and the answer), so an ablation costs about a source and the prompt's tail instead of half its prompt.

Nodes run in batches, deepest first (a stack, so the caches alive are those of one path of batches): a batch's
rows are nodes whose parents ran in any batch, each parent's keys and values gathered into the batch's cache
left-aligned and right-padded, the padding masked out. A row's tokens carry their own positions (a token's index
in its sequence), so rotary embeddings see each sequence as it is; the padding is only columns of the cache. Where
a layer's attention is a sliding window, Hugging Face counts it in columns, so a batch's padded cache and tokens
are kept within the window (a node that does not fit runs alone, where columns are positions). Inner nodes run the
decoder without its head; a leaf's last ``a`` rows (the prompt's last token and the answer's first ``a − 1``), the
only ones that reach the vocabulary, are aligned to the batch's end so that ``logits_to_keep = a`` keeps exactly
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import DynamicCache

from attnlens.models import architecture


@dataclass
class _Node:
    """A run ``sequences[seq][start:end]`` shared by every sequence below it; ``answers``: the sequences whose shared
    part ends here, grouped by their answer run (the last ``a`` input tokens)."""

    start: int
    end: int
    seq: int
    children: list[_Node] = field(default_factory=list)
    answers: dict[tuple[int, ...], list[int]] = field(default_factory=dict)


@dataclass
class _State:
    """A computed node: its batch's cache (per layer, keys and values), its row there, the columns that hold its
    tokens (in order) and their keep flags."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    row: int
    columns: torch.Tensor
    keep: torch.Tensor


@dataclass
class _Item:
    """A run to compute: ``tokens`` and their ``keep`` flags at ``positions`` after ``parent``'s; ``node`` to
    continue below it (inner), or the sequences whose answer its last rows predict (a leaf)."""

    parent: _State | None
    tokens: list[int]
    keep: list[int]
    start: int
    node: _Node | None = None
    sequences: list[int] = field(default_factory=list)


def prefix_tree(keys: Sequence[Sequence[int]], tails: Sequence[tuple[int, ...]]) -> tuple[_Node, int]:
    """The radix tree of ``keys`` (one per sequence: its shared part), each sequence hung at the node where its key
    ends under its ``tail``; and the tree's token count (what it costs to run)."""
    order = sorted(range(len(keys)), key=lambda i: tuple(keys[i]))
    root = _Node(0, 0, order[0] if order else 0)
    path = [root]
    previous: Sequence[int] = ()
    for i in order:
        key = keys[i]
        shared = 0
        limit = min(len(key), len(previous))
        while shared < limit and key[shared] == previous[shared]:
            shared += 1
        while len(path) > 1 and path[-1].start >= shared:
            path.pop()
        top = path[-1]
        if top.end > shared:  # the run splits where the new key leaves it
            lower = _Node(shared, top.end, top.seq, top.children, top.answers)
            top.end, top.children, top.answers = shared, [lower], {}
        if len(key) > shared:
            top.children.append(_Node(shared, len(key), i))
            top = top.children[-1]
            path.append(top)
        top.answers.setdefault(tuple(tails[i]), []).append(i)
        previous = key
    count, stack = 0, [root]
    while stack:
        node = stack.pop()
        count += node.end - node.start + sum(len(t) for t in node.answers)
        stack += node.children
    return root, count


def _window(model) -> int | None:
    """The narrowest sliding window of the model's layers (the seam's :meth:`windows`); None where no layer has one."""
    return min((w for w in architecture(model).windows(model.config) if w), default=None)


@torch.no_grad()
def tree_log_probs(
    model,
    sequences: Sequence[Sequence[int]],
    answer_length: int,
    keep: Sequence[Sequence[int]] | None = None,
    batch_size: int = 16,
    overhead: int = 0,
) -> tuple[np.ndarray, int]:
    """``(sequences, answer_length)`` float64, equal to
    :func:`~attnlens.generation.ablation.answer_token_log_probs` (float rounding aside): each answer token's
    log-probability in each sequence (every one ending in an answer of ``answer_length`` tokens; ``keep`` a 0/1
    flag per token, 0 for a masked token), from the prefix tree of the sequences (module docstring); and the tokens
    run (the tree's count). A forward holds at most the tokens of ``batch_size`` whole sequences, in at most
    :data:`ROWS` · ``batch_size`` rows (a tree's runs are short: a leaf is the prompt's tail); ``overhead``: what a
    forward's fixed cost is worth in tokens, which decides how much padding a batch may hold."""
    a = int(answer_length)
    kept = [list(k) for k in keep] if keep is not None else [[1] * len(s) for s in sequences]
    if len(kept) != len(sequences):
        raise ValueError("expected one keep list per sequence")
    for ids, flags in zip(sequences, kept, strict=True):
        if not 0 < a < len(ids) or len(flags) != len(ids) or not all(flags[len(ids) - a - 1 :]):
            raise ValueError(f"expected sequences of a prompt and an answer of {a} tokens, each with its keep flags")
    # a key element is a token and its keep flag: two masks of the same tokens are different prefixes
    keys = [
        [2 * t + f for t, f in zip(s[: len(s) - a - 1], k, strict=False)] for s, k in zip(sequences, kept, strict=True)
    ]
    tails = [tuple(s[len(s) - a - 1 : len(s) - 1]) for s in sequences]
    root, count = prefix_tree(keys, tails)
    out = np.zeros((len(sequences), a))
    if not sequences:
        return out, 0
    targets = torch.as_tensor([list(s[len(s) - a :]) for s in sequences])
    inner: list[_Item] = []
    leaves: list[_Item] = []
    _expand(root, None, sequences, kept, inner, leaves)
    window, device = _window(model), next(model.parameters()).device
    rows, budget = ROWS * batch_size, batch_size * max(len(s) for s in sequences)
    while inner or leaves:
        if leaves and (len(leaves) >= rows or not inner):
            batch = _take(leaves, rows, budget, overhead, window, end_aligned=True)
            wanted = targets[[item.sequences[0] for item in batch]]
            log_probs = _run(model, batch, device, window, logits=a, targets=wanted)
            for row, item in enumerate(batch):
                out[item.sequences] = log_probs[row]
            continue
        batch = _take(inner, rows, budget, overhead, window)
        states = _run(model, batch, device, window)
        for item, state in zip(batch, states, strict=True):
            _expand(item.node, state, sequences, kept, inner, leaves)
    return out, count


def _expand(node: _Node, state: _State | None, sequences, kept, inner: list, leaves: list) -> None:
    """The items below ``node`` (computed as ``state``): each child's run, and each answer run hung at it (a leaf
    with no children runs its own tokens and its answer's in one item)."""
    for tail, ids in node.answers.items():
        start = node.end
        leaves.append(_Item(state, list(tail), [1] * len(tail), start, sequences=ids))
    for child in node.children:
        s, k = sequences[child.seq], kept[child.seq]
        if not child.children and len(child.answers) == 1:
            ((tail, ids),) = child.answers.items()
            run = [*s[child.start : child.end], *tail]
            flags = [*k[child.start : child.end], *[1] * len(tail)]
            leaves.append(_Item(state, run, flags, child.start, sequences=ids))
        else:
            inner.append(
                _Item(state, list(s[child.start : child.end]), list(k[child.start : child.end]), child.start, child)
            )


#: How many items from the top of a stack a batch is chosen among (times its rows): near the top, so the caches
#: alive stay those of a few batches, and wide enough to find runs of one width (a tree's leaves come in two
#: widths, the prompt's tail alone and the last source with it).
LOOKAHEAD = 4
#: A batch's rows, at most, per sequence of ``batch_size``: a tree's runs are short, and Gemma 3 270M runs 16 rows
#: of a 16-token tail at half the rate of 64 (docs/benchmarks.md).
ROWS = 4


def _take(
    stack: list[_Item], size: int, budget: int, overhead: int, window: int | None, end_aligned: bool = False
) -> list[_Item]:
    """Items for one batch: the top of ``stack``, then, among the next ``LOOKAHEAD · size``, those closest to its
    width, each joining while the batch's padding stays within a forward's fixed cost (``overhead`` tokens: a run
    of another width waits for its own batch), its tokens within ``budget`` and its columns within ``window``; at
    most ``size``. Runs aligned to the batch's end are padded
    before their tokens, so one with no parent (no column to attend to) would leave its padding attending to
    nothing: it runs alone."""
    first = stack.pop()
    batch, width, past, real = [first], len(first.tokens), _length(first), len(first.tokens)
    if end_aligned and first.parent is None:
        return batch
    near = sorted(
        range(max(0, len(stack) - LOOKAHEAD * size), len(stack)),
        key=lambda i: (abs(len(stack[i].tokens) - width), -i),
    )
    taken = []
    for i in near:
        if len(batch) == size:
            break
        item = stack[i]
        w, p = max(width, len(item.tokens)), max(past, _length(item))
        padding = (len(batch) + 1) * w - real - len(item.tokens)
        over = (len(batch) + 1) * w > budget or (window is not None and p + w > window)
        if over or padding > overhead:
            continue
        if end_aligned and item.parent is None:
            continue
        batch.append(item)
        taken.append(i)
        width, past, real = w, p, real + len(item.tokens)
    for i in sorted(taken, reverse=True):
        del stack[i]
    return batch


def _length(item: _Item) -> int:
    return 0 if item.parent is None else len(item.parent.columns)


def _run(model, batch: list[_Item], device, window: int | None, logits: int = 0, targets: torch.Tensor | None = None):
    """One forward of ``batch``: its parents' caches gathered, each row's tokens at its own positions, aligned to the
    batch's end where ``logits`` rows of each are read (``(rows, logits)`` float64: the log-probability of each row's
    ``targets``), else to its start (each row's new :class:`_State`).

    A log-probability is the target's logit less the log-sum-exp of its row, in the model's precision and then
    float64: the full vocabulary never goes to float64 (Gemma 3's 262 144 words made that conversion and its
    log-softmax 14 % of a tree's time); on a float32 model the sum's rounding (about 2·10⁻⁶ at a log-sum-exp of 20)
    is below the model's own between batches of different shapes (1·10⁻⁵, docs/benchmarks.md)."""
    past = max(_length(item) for item in batch)
    width = max(len(item.tokens) for item in batch)
    rows = len(batch)
    ids = torch.zeros((rows, width), dtype=torch.long)
    positions = torch.zeros((rows, width), dtype=torch.long)
    mask = torch.zeros((rows, past + width), dtype=torch.long)
    columns = []
    for row, item in enumerate(batch):
        n, w = _length(item), len(item.tokens)
        at = width - w if logits else 0
        ids[row, at : at + w] = torch.as_tensor(item.tokens)
        positions[row] = (torch.arange(width) + item.start - at).clamp(min=0)  # padding's own: any, it is masked
        if item.parent is not None:
            mask[row, :n] = item.parent.keep
        mask[row, past + at : past + at + w] = torch.as_tensor(item.keep)
        columns.append(torch.cat([torch.arange(n), torch.arange(past + at, past + at + w)]))
    cache = _gathered(batch, past, rows, device)
    args = {
        "input_ids": ids.to(device),
        "attention_mask": mask.to(device),
        "position_ids": positions.to(device),
        "past_key_values": cache,
        "use_cache": True,
    }
    with architecture(model).long_context(model):
        if logits:
            scores = model(**args, logits_to_keep=logits).logits
            picked = scores.gather(-1, targets.to(scores.device)[..., None])[..., 0]
            return (picked - torch.logsumexp(scores, dim=-1)).double().cpu().numpy()
        cache = model.get_decoder()(**args).past_key_values
    layers = [(layer.keys, layer.values) for layer in cache.layers]
    return [_State(layers, row, columns[row].to(device), mask[row, columns[row]].to(device)) for row in range(rows)]


def _gathered(batch: list[_Item], past: int, rows: int, device) -> DynamicCache:
    """The batch's cache: each row's parent's columns, left-aligned, zeros after them (masked)."""
    if not past:
        return DynamicCache()
    parents = [item.parent for item in batch]
    template = next(p for p in parents if p is not None).layers
    out = []
    for layer, (k0, v0) in enumerate(template):
        keys = k0.new_zeros((rows, k0.shape[1], past, k0.shape[3]))
        values = v0.new_zeros((rows, v0.shape[1], past, v0.shape[3]))
        for row, parent in enumerate(parents):
            if parent is not None:
                k, v = parent.layers[layer]
                keys[row, :, : len(parent.columns)] = k[parent.row, :, parent.columns]
                values[row, :, : len(parent.columns)] = v[parent.row, :, parent.columns]
        out.append((keys, values))
    return DynamicCache(out)
