"""Compiled kernels (numba): single-pass top-k on an attention band, and Kendall concordance counts.

Both directions of recipes §7 read the band once, in memory order, and keep for every row a
small sorted buffer of its ``k`` best partners — ordered by ``(−score, position)``, the tie rule of
:mod:`attnlens.attention.band`. A candidate is compared with the buffer's last entry first, so almost
every one of the ``heads · n · (w + 1)`` scores costs one comparison. Nothing of the band's size is
allocated: the outputs are written in place.

The kernels receive the layout as plain arrays (see :func:`attnlens.attention.band._layout`) and trust
it; :class:`attnlens.attention.band.Band` validates shapes before calling them. Scores that are not
``> 0`` (zero, negative, NaN) are never reported, as in the original ``score ≠ 0`` filter.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, inline="always")
def _push(out_idx, out_val, count, thr_v, thr_p, row, pos, score):
    """Insert ``(pos, score)`` into row ``row``'s sorted buffer; the caller checked that it ranks.

    ``thr_v[row], thr_p[row]`` is the entry a candidate must beat: ``(0, −1)`` while the buffer has
    room (so only scores ``> 0`` enter), then its last entry.
    """
    k = out_idx.shape[1]
    c = count[row]
    if c < k:
        count[row] = c + 1
    else:
        c = k - 1  # the last entry drops out
    while c > 0:
        prev = out_val[row, c - 1]
        if prev > score or (prev == score and out_idx[row, c - 1] < pos):
            break
        out_val[row, c] = prev
        out_idx[row, c] = out_idx[row, c - 1]
        c -= 1
    out_val[row, c] = score
    out_idx[row, c] = pos
    if count[row] == k:
        thr_v[row] = out_val[row, k - 1]
        thr_p[row] = out_idx[row, k - 1]


@numba.njit(cache=True, inline="always")
def _offer(out_idx, out_val, count, thr_v, thr_p, row, pos, score):
    """Offer a candidate: one comparison with the row's threshold, insertion only if it ranks."""
    tv = thr_v[row]
    if score > tv or (score == tv and pos < thr_p[row]):
        _push(out_idx, out_val, count, thr_v, thr_p, row, pos, score)


@numba.njit(cache=True, parallel=True)
def _band_topk(local, global_, query_ok, is_global, gpos, length, out_idx, out_val, by_key):
    """Shared body of both directions (``by_key`` selects whose buffer a score is offered to)."""
    heads, n, slots = local.shape
    x = global_.shape[2]
    window = slots - x - 1
    half = window // 2
    nb = gpos.shape[0]
    for h in numba.prange(heads):
        count = np.zeros(n, dtype=np.int64)
        thr_v = np.zeros(n, dtype=local.dtype)
        thr_p = np.full(n, -1, dtype=np.int32)
        idx_h, val_h = out_idx[h], out_val[h]
        for i in range(length):
            if not query_ok[i]:
                continue
            for b in range(nb):  # the local row's global slots
                g = gpos[b]
                if by_key:
                    _offer(idx_h, val_h, count, thr_v, thr_p, g, i, local[h, i, b])
                else:
                    _offer(idx_h, val_h, count, thr_v, thr_p, i, g, local[h, i, b])
            lo = max(0, half - i)
            hi = min(window + 1, length - i + half)
            for d in range(lo, hi):  # window slot d is key i − w/2 + d
                j = i - half + d
                if not is_global[j]:
                    if by_key:
                        _offer(idx_h, val_h, count, thr_v, thr_p, j, i, local[h, i, x + d])
                    else:
                        _offer(idx_h, val_h, count, thr_v, thr_p, i, j, local[h, i, x + d])
        for b in range(nb):  # the global tokens' rows: every real key
            g = gpos[b]
            for j in range(length):
                if by_key:
                    _offer(idx_h, val_h, count, thr_v, thr_p, j, g, global_[h, j, b])
                else:
                    _offer(idx_h, val_h, count, thr_v, thr_p, g, j, global_[h, j, b])


def topk_attended_kernel(local, global_, query_ok, is_global, gpos, length, out_idx, out_val) -> None:
    """For every query, its ``k`` most attended keys, written into ``out_*`` ``(H, n, k)``.

    Args:
        local: ``(H, n, x + w + 1)`` local attention.
        global_: ``(H, n_pad, x)`` global attention (``x`` may be 0).
        query_ok: ``(n,)`` bool, the local row is used (real and not global).
        is_global: ``(n,)`` bool.
        gpos: ``(n_b,)`` int64 ascending global positions.
        length: real tokens (the first ``length`` positions).
        out_idx, out_val: int32 / float outputs, pre-filled with −1 / 0.
    """
    _band_topk(local, global_, query_ok, is_global, gpos, length, out_idx, out_val, False)


def topk_attending_kernel(local, global_, query_ok, is_global, gpos, length, out_idx, out_val) -> None:
    """For every key, the ``k`` queries attending to it most (arguments as :func:`topk_attended_kernel`)."""
    _band_topk(local, global_, query_ok, is_global, gpos, length, out_idx, out_val, True)


# --- Kendall's τ-b for many rankings against one (Knight's counting with a Fenwick tree) --------


@numba.njit(cache=True, parallel=True)
def _concordance(x_sorted, x_group_end, y, out_s, out_ties_y):
    n = x_sorted.shape[0]
    rows = y.shape[0]
    for r in numba.prange(rows):
        tree = np.zeros(n + 1, dtype=np.int64)
        seen = np.zeros(n, dtype=np.int64)
        s = 0
        inserted = 0
        g = 0
        while g < n:
            e = x_group_end[g]
            # the group is [g, e): query every member first, so pairs tied in x count neither way
            for j in range(g, e):
                v = y[r, x_sorted[j]]
                less = 0  # inserted with a smaller rank (Fenwick index = rank + 1)
                i = v
                while i > 0:
                    less += tree[i]
                    i -= i & -i
                not_greater = 0
                i = v + 1
                while i > 0:
                    not_greater += tree[i]
                    i -= i & -i
                s += less - (inserted - not_greater)
            for j in range(g, e):
                v = y[r, x_sorted[j]]
                seen[v] += 1
                i = v + 1
                while i <= n:
                    tree[i] += 1
                    i += i & -i
                inserted += 1
            g = e
        ties = 0
        for v in range(n):
            ties += seen[v] * (seen[v] - 1) // 2
        out_s[r] = s
        out_ties_y[r] = ties


def concordance_kernel(x_sorted, x_group_end, y, out_s, out_ties_y) -> None:
    """For every row of ``y``: concordant − discordant pairs against ``x``, and the pairs tied in that row.

    Args:
        x_sorted: ``(n,)`` int64 positions in ascending order of ``x`` (ties contiguous).
        x_group_end: ``(n,)`` int64; for sorted index ``j``, the end (exclusive) of the run of ``x``
            values equal to ``x[x_sorted[j]]`` (only read at run starts).
        y: ``(rows, n)`` int64 dense ranks ``0 … n−1`` by position.
        out_s: ``(rows,)`` int64, written: ``n_c − n_d`` (pairs tied in ``x`` or ``y`` count neither).
        out_ties_y: ``(rows,)`` int64, written: ``Σ t(t−1)/2`` over the runs of equal ``y``.
    """
    _concordance(x_sorted, x_group_end, y, out_s, out_ties_y)
