"""Compiled kernels (numba): single-pass top-k on an attention band and on blocks of full attention, and Kendall
concordance counts.

Both directions of recipes §7 read the band once, in memory order, and keep for every row a
small sorted buffer of its ``k`` best partners — ordered by ``(−score, position)``, the tie rule of
:mod:`attnlens.attention.band`. A candidate is compared with the buffer's last entry first, so almost
every one of the ``heads · n · (w + 1)`` scores costs one comparison. Nothing of the band's size is
allocated: the outputs are written in place.

A layer of full attention is reduced block of query rows by block (:func:`full_block_kernel`): received attention
(summed in float64), and both top-k directions with the same buffers, the rows screened so that a score is
offered only where it can rank (a vectorised pass decides which keys' buffers a row reaches; a row's chunk maxima
bound its own k-th score). :func:`_push` is compiled without numba's on-disk cache: only so is it inlined into the
kernels that call it (cached, it was called instead, about 1.6 × the cost of an insertion).

The band kernels receive the layout as plain arrays (see :func:`attnlens.attention.band._layout`) and trust
it; :class:`attnlens.attention.band.Band` validates shapes before calling them. Scores that are not
``> 0`` (zero, negative, NaN) are never reported, as in the original ``score ≠ 0`` filter.
"""

from __future__ import annotations

import sys

import numba
import numpy as np


def share_torch_threads() -> None:
    """Run the next kernel on the threads torch was given (``torch.set_num_threads``; a rule's ``threads``), and
    leave torch's count as it was.

    Starting numba's OpenMP threading layer (the first ``set_num_threads`` or launch in a process) sets the
    process's OpenMP thread count to numba's default, every core, and torch reads its own count from there: a
    one-thread job's torch would then run on every core — other threads, other float sums (a BigBird IG differed
    by 6e-10) — for the rest of the process. Call it before each launch.
    """
    torch = sys.modules.get("torch")  # a job that never loaded torch has no count to keep
    if torch is None:
        return
    threads = torch.get_num_threads()
    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


@numba.njit(inline="always")
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


# --- full attention: one pass over a block of query rows -----------------------------------------


#: Keys per chunk of a full-attention row: a row's chunk maxima bound its k-th score from below.
ROW_CHUNK = 16


@numba.njit(cache=True)
def _chunk_maxima(bits, length, out):
    """``out[c]`` = the largest of ``bits[c·ROW_CHUNK : (c + 1)·ROW_CHUNK]`` (``bits``: one row's scores viewed as
    integers of their width). For scores ≥ 0 the integer order is the float order, a (positive) NaN lies above
    infinity, and a negative score below every non-negative one: the chunks that can hold a reportable score
    (> 0) keep their exact maximum, and integer maxima vectorise."""
    full = length // ROW_CHUNK
    for c in range(full):
        lo = c * ROW_CHUNK
        m = bits[lo]
        for j in range(lo, lo + ROW_CHUNK):  # a constant trip count: one vector
            m = max(m, bits[j])
        out[c] = m
    if full < out.shape[0]:
        m = bits[full * ROW_CHUNK]
        for j in range(full * ROW_CHUNK, length):
            m = max(m, bits[j])
        out[full] = m


@numba.njit(cache=True, parallel=True)
def _full_block(probs, bits, inf_bits, start, lo, width, received, row_state, col_state, topk):
    """Columns ``0 … width − 1`` of ``probs`` are keys ``lo … lo + width − 1`` (see :func:`full_block_kernel`)."""
    heads, rows = probs.shape[0], probs.shape[1]
    k = row_state[0].shape[2]
    n_chunks = (width + ROW_CHUNK - 1) // ROW_CHUNK
    n_words = (width + 7) // 8
    for h in numba.prange(heads):
        rec = received[h, lo : lo + width]
        if not topk:
            for r in range(rows):
                p_row = probs[h, r]
                for j in range(width):
                    rec[j] += p_row[j]
            continue
        r_idx, r_val, r_count, r_thr_v, r_thr_p = (
            row_state[0][h],
            row_state[1][h],
            row_state[2][h],
            row_state[3][h],
            row_state[4][h],
        )
        hi = lo + width  # the keys' states from key lo on: index j is key lo + j
        c_idx, c_val, c_count, c_thr_v, c_thr_p = (
            col_state[0][h, lo:hi],
            col_state[1][h, lo:hi],
            col_state[2][h, lo:hi],
            col_state[3][h, lo:hi],
            col_state[4][h, lo:hi],
        )
        chunk_max = np.empty(n_chunks, dtype=bits.dtype)
        best = np.empty(k, dtype=bits.dtype)
        reaches = np.zeros(n_words * 8, dtype=np.uint8)
        words = reaches.view(np.uint64)
        for r in range(rows):
            i = start + r
            p_row = probs[h, r]
            # received attention, and which keys' attending buffers this query's score reaches (one vector pass)
            for j in range(width):
                rec[j] += p_row[j]
                reaches[j] = p_row[j] >= c_thr_v[j]
            # attended. The k largest chunk maxima are k scores of the row, so its k-th score is at least the
            # k-th largest chunk maximum (``bound``): only chunks that reach it are offered. A chunk holding a NaN
            # (its maximum above infinity's bits) is offered and bounds nothing: NaN is never reported.
            _chunk_maxima(bits[h, r], width, chunk_max)
            bound = chunk_max.min()
            best[:] = bound
            counted = 0
            for c in range(n_chunks):
                m = chunk_max[c]
                if m > inf_bits:
                    continue
                counted += 1
                if m > best[k - 1]:
                    t = k - 1
                    while t > 0 and best[t - 1] < m:
                        best[t] = best[t - 1]
                        t -= 1
                    best[t] = m
            if counted >= k:
                bound = best[k - 1]
            for c in range(n_chunks):
                if chunk_max[c] >= bound:
                    for j in range(c * ROW_CHUNK, min((c + 1) * ROW_CHUNK, width)):
                        s = p_row[j]
                        if s > r_thr_v[i] or (s == r_thr_v[i] and lo + j < r_thr_p[i]):
                            _push(r_idx, r_val, r_count, r_thr_v, r_thr_p, i, lo + j, s)
            # attending: only the keys (eight at a time) whose threshold the score reaches (the state's views start
            # at key ``lo``: index j is key lo + j)
            for w in range(n_words):
                if words[w]:
                    for j in range(w * 8, min(w * 8 + 8, width)):
                        s = p_row[j]
                        if s > c_thr_v[j] or (s == c_thr_v[j] and i < c_thr_p[j]):
                            _push(c_idx, c_val, c_count, c_thr_v, c_thr_p, j, i, s)


_BITS = {np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}


def full_block_kernel(probs, start, length, received, row_state=None, col_state=None, first_key: int = 0) -> None:
    """Reduce one block of full attention rows in one pass: received attention and, with the states, the top-k
    keys of every query and the top-k queries of every key (both ordered by ``(−score, position)``; only scores
    ``> 0`` are reported).

    Args:
        probs: ``(H, B, W)`` C-contiguous probabilities of queries ``start … start + B − 1`` over the keys
            ``first_key … first_key + W − 1`` (the keys a causal or windowed block can reach; every other key's
            probability is 0 and is not read); keys from ``length`` on are not read.
        start: position of the block's first query.
        length: real keys.
        received: ``(H, ≥ length)`` float64, accumulated in place.
        row_state, col_state: ``None`` (received only), or each ``(idx, val, count, thr_v, thr_p)``: the top-k
            buffers ``(H, n, k)`` (pre-filled −1 / 0) of the queries (attended) and of the keys (attending), and
            their counts and thresholds ``(H, n)`` (0, 0, −1 at the start), carried from block to block. The
            blocks must come in ascending query order, so that ties keep going to the smaller query.
        first_key: the key of ``probs``'s first column.
    """
    bits = _BITS[probs.dtype]  # the integers a score's bits are viewed as (:func:`_chunk_maxima`)
    inf_bits = np.array(np.inf, dtype=probs.dtype).view(bits)[()]
    width = min(probs.shape[2], length - first_key)
    if width <= 0:
        return
    if row_state is None:
        idx, val = np.full((1, 1, 1), -1, np.int32), np.zeros((1, 1, 1), probs.dtype)
        state = (idx, val, np.zeros((1, 1), np.int64), np.zeros((1, 1), probs.dtype), np.zeros((1, 1), np.int32))
        _full_block(
            probs, probs[:1, :1, :1].view(bits), inf_bits, start, first_key, width, received, state, state, False
        )
        return
    _full_block(probs, probs.view(bits), inf_bits, start, first_key, width, received, row_state, col_state, True)


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
