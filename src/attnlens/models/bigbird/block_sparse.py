"""BigBird's block-sparse attention in eval mode, computed by query blocks and read as a band.

Hugging Face's ``BigBirdBlockSparseAttention`` cuts the ``n`` tokens into blocks of ``b`` (``config.block_size``).
The first and last blocks are *global*: their queries attend to every key, and every query attends to their
keys. A query of block ``l`` (``1 ≤ l ≤ nb − 2``) attends to the keys of blocks ``l − 1, l, l + 1`` (the
window), of the two global blocks, and of ``r`` random blocks (``config.num_random_blocks``). **In eval mode
Hugging Face draws no random blocks**: its random plan is all zeros, so the ``r`` "random" blocks are block 0
again, and every query of blocks ``1 … nb − 2`` gives block 0's keys ``1 + r`` terms in its softmax (the
attention graph at inference is not the one of training, where the blocks are drawn anew every step).

Transformers 5 also assembles a dense ``(B, H, n, n)`` probability tensor in every block-sparse forward,
asked for or not (3.2 GB per layer at 8 192 tokens with 12 heads in float32). The path here
(:func:`block_sparse_attention`) is the same function of the inputs without it: per middle query block one
``(b × 3b)`` product against its window (an ``unfold`` view of the keys, the global blocks' columns masked,
since they are counted once as global keys) and one ``(b × 2b)`` product against the global blocks, with
``log(1 + r)`` added to block 0's scores (``1 + r`` equal terms of a softmax are one term of ``1 + r`` times
the weight); the global blocks' rows are one ``(2b × n)`` product. The probabilities of a query are exactly
what it gives each distinct key, the random copies summed, which is what a band needs
(:func:`read_band`): global slots for the tokens of blocks 0 and ``nb − 1``, and a window of half-width
``2b − 1``, which covers the three blocks of every query.

Inputs of ``(5 + 2r)·b`` tokens or fewer run Hugging Face's full attention (``original_full``); their band is
the dense attention computed by query blocks (:func:`full_band`). Training runs Hugging Face's forward
unchanged (random blocks and all).
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import math
from contextlib import contextmanager

import torch
import transformers
from torch import nn

from attnlens.attention.band import Band
from attnlens.attention.weighted import band_products

#: Attribute a patched module keeps Hugging Face's bound forward under.
_ORIGINAL = "_attnlens_original_forward"
#: The 2-D attention mask of the pass a patched ``BigBirdModel`` is running (its attention layers read it).
_MASK: contextvars.ContextVar[torch.Tensor | None] = contextvars.ContextVar("attnlens_bigbird_mask", default=None)
#: While set (:func:`recording`), every patched attention layer appends its bands (one per batch item).
_RECORD: contextvars.ContextVar[list | None] = contextvars.ContextVar("attnlens_bigbird_record", default=None)


def full_threshold(config) -> int:
    """Inputs of at most this many tokens run full attention (Hugging Face's ``original_full`` fallback)."""
    return (5 + 2 * config.num_random_blocks) * config.block_size


def uses_block_sparse(config, n: int) -> bool:
    """Whether a forward over ``n`` tokens runs block-sparse attention (else full attention)."""
    return config.attention_type == "block_sparse" and n > full_threshold(config)


def _heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """``(B, n, H·d)`` → ``(B, H, n, d)``."""
    batch, n, _ = t.shape
    return t.view(batch, n, heads, -1).transpose(1, 2)


def _window_blocks(t: torch.Tensor, block: int) -> torch.Tensor:
    """``(B, H, nb·b, d)`` → ``(B, H, nb, 3b, d)``: blocks ``l − 1, l, l + 1`` of every block ``l`` (a view)."""
    return nn.functional.pad(t, (0, 0, block, block)).unfold(2, 3 * block, block).transpose(-1, -2)


def block_sparse_probs(
    query: torch.Tensor, key: torch.Tensor, key_ok: torch.Tensor, block: int, n_random: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode block-sparse attention probabilities of ``n = nb·b`` tokens (``nb ≥ 4``).

    Args:
        query, key: ``(B, H, n, d)``; the query already scaled by ``1/√d``.
        key_ok: ``(B, n)`` bool, keys that may be attended (real tokens).

    Returns:
        ``(middle, rows)``: ``middle`` ``(B, H, nb − 2, b, 2b + 3b)`` the probabilities of the queries of blocks
        ``1 … nb − 2`` over the global blocks' keys (block 0, then block ``nb − 1``) and then their window's
        ``3b`` keys (0 where the key is global or masked); ``rows`` ``(B, H, 2b, n)`` the probabilities of the
        queries of blocks 0 and ``nb − 1`` over every key.
    """
    batch, heads, n, _ = query.shape
    nb = n // block
    floor = torch.finfo(query.dtype).min
    glob = torch.cat((key[:, :, :block], key[:, :, -block:]), 2)  # (B, H, 2b, d)
    glob_ok = torch.cat((key_ok[:, :block], key_ok[:, -block:]), 1)  # (B, 2b)
    q_mid = query[:, :, block:-block].reshape(batch, heads, nb - 2, block, -1)
    g_scores = q_mid @ glob[:, :, None].transpose(-1, -2)  # (B, H, nb − 2, b, 2b)
    if n_random:
        weight = torch.zeros(2 * block, dtype=query.dtype, device=query.device)
        weight[:block] = math.log(1 + n_random)
        g_scores = g_scores + weight
    g_scores = g_scores.masked_fill(~glob_ok[:, None, None, None, :], floor)
    window = _window_blocks(key, block)[:, :, 1:-1]  # (B, H, nb − 2, 3b, d)
    w_scores = q_mid @ window.transpose(-1, -2)  # (B, H, nb − 2, b, 3b)
    # a window key counts if it is real and not in a global block (those are the global columns)
    inner = key_ok.clone()
    inner[:, :block] = False
    inner[:, -block:] = False
    w_ok = nn.functional.pad(inner, (block, block), value=False).unfold(1, 3 * block, block)[:, 1:-1]  # (B, nb-2, 3b)
    w_scores = w_scores.masked_fill(~w_ok[:, None, :, None, :], floor)
    middle = torch.softmax(torch.cat((g_scores, w_scores), -1), -1)
    q_rows = torch.cat((query[:, :, :block], query[:, :, -block:]), 2)  # (B, H, 2b, d)
    r_scores = (q_rows @ key.transpose(-1, -2)).masked_fill(~key_ok[:, None, None, :], floor)
    return middle, torch.softmax(r_scores, -1)


def block_sparse_context(middle: torch.Tensor, rows: torch.Tensor, value: torch.Tensor, block: int) -> torch.Tensor:
    """``(B, H, n, d)``: the attention output of :func:`block_sparse_probs`'s probabilities."""
    batch, heads, n, dh = value.shape
    nb = n // block
    glob = torch.cat((value[:, :, :block], value[:, :, -block:]), 2)  # (B, H, 2b, d)
    window = _window_blocks(value, block)[:, :, 1:-1]  # (B, H, nb − 2, 3b, d)
    mid = middle[..., : 2 * block] @ glob[:, :, None] + middle[..., 2 * block :] @ window
    out_rows = rows @ value  # (B, H, 2b, d)
    return torch.cat(
        (out_rows[:, :, :block], mid.reshape(batch, heads, (nb - 2) * block, dh), out_rows[:, :, block:]), 2
    )


def read_band(middle: torch.Tensor, rows: torch.Tensor, length: int, n: int, block: int, keep: int) -> Band:
    """One batch item's probabilities (:func:`block_sparse_probs` over ``n`` padded tokens, batch axis dropped)
    as a :class:`Band` of the first ``keep`` positions (the input's length; the rest is the block padding).

    Global slots are the tokens of block 0, then the real tokens of the last block (``nb − 1``); window slot
    ``s`` of query ``i`` is key ``i + s − (2b − 1)``.
    """
    heads, n_mid, _, _ = middle.shape
    half = 2 * block - 1
    width = 2 * half + 1
    first_last = torch.cat((torch.arange(block), torch.arange(n - block, n)))
    gpos = first_last[first_last < length]
    x = 2 * block
    local = middle.new_zeros(heads, n, x + width)
    mid_rows = slice(block, n - block)
    local[:, mid_rows, :x] = middle[..., :x].reshape(heads, n_mid * block, x)
    # window column c of row r of a block is key (l − 1)·b + c, i.e. slot c + b − 1 − r
    r = torch.arange(block)[:, None]
    c = torch.arange(3 * block)[None, :]
    slot = (c + block - 1 - r).expand(n_mid, block, 3 * block).reshape(n_mid * block, 3 * block)
    win = local.new_zeros(heads, n_mid * block, width)
    win.scatter_(2, slot.expand(heads, -1, -1).to(win.device), middle[..., x:].reshape(heads, n_mid * block, 3 * block))
    local[:, mid_rows, x:] = win
    # the last block's rows are global only where they are real tokens; padding queries keep zero rows
    glob = rows.transpose(1, 2)  # (H, n, 2b): row g of the global token in slot g
    return Band(local[:, :keep], glob[:, :keep], length, gpos)


def full_band(query: torch.Tensor, key: torch.Tensor, length: int) -> Band:
    """Full attention of one batch item as a :class:`Band` whose window covers the sequence (no global tokens).

    ``query`` (scaled) and ``key`` are ``(H, n, d)``; keys at or beyond ``length`` are padding. The scores are
    formed by query blocks (:func:`~attnlens.attention.weighted.band_products`), so the working set stays
    bounded; the band itself is ``(H, n, 2n − 1)``: only for inputs short enough to run full attention.
    """
    n = query.shape[1]
    half = max(n - 1, 0)
    scores = band_products(query, key, half)  # (H, n, 2n − 1)
    i = torch.arange(n)[:, None]
    j = i + torch.arange(2 * half + 1)[None, :] - half
    ok = (j >= 0) & (j < length)
    scores = scores.masked_fill(~ok.to(scores.device), torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, -1) * ok.to(scores.device)
    probs[:, length:] = 0
    return Band(probs, None, length, torch.zeros(0, dtype=torch.long))


def _projections(module, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    sa = module.self
    heads = sa.num_attention_heads
    scale = 1 / math.sqrt(sa.attention_head_size)
    return _heads(sa.query(hidden), heads) * scale, _heads(sa.key(hidden), heads), _heads(sa.value(hidden), heads)


def _key_mask(hidden: torch.Tensor) -> torch.Tensor:
    """``(B, n)`` bool real tokens of the running pass (its 2-D mask, padded to ``n`` with padding)."""
    batch, n, _ = hidden.shape
    mask = _MASK.get()
    if mask is None:
        return torch.ones(batch, n, dtype=torch.bool, device=hidden.device)
    mask = mask.to(hidden.device).bool()
    return nn.functional.pad(mask, (0, n - mask.shape[1]), value=False) if mask.shape[1] < n else mask[:, :n]


def attention_forward(module, hidden_states: torch.Tensor, **kwargs) -> tuple[torch.Tensor, None]:
    """What ``BigBirdAttention.forward`` returns in eval mode, without the dense probability tensor.

    Block-sparse inputs of any length (the queries, keys and values are padded here to a multiple of the
    block, as masked tokens); full-attention inputs run Hugging Face's own self-attention. While
    :func:`recording`, the layer's bands are appended.
    """
    config = module.config
    batch, n, embed = hidden_states.shape
    key_ok = _key_mask(hidden_states)
    record = _RECORD.get()
    if not uses_block_sparse(config, n):
        out = getattr(module, _ORIGINAL)(hidden_states, **kwargs)
        if record is not None:
            with torch.no_grad():
                q, k, _ = _projections(module, hidden_states)
                lengths = key_ok.sum(1).tolist()
                record.append([full_band(q[b].detach(), k[b].detach(), int(lengths[b])) for b in range(batch)])
        return out
    block, n_random = config.block_size, config.num_random_blocks
    pad = -n % block
    q, k, v = _projections(module, hidden_states)
    if pad:
        q, k, v = (nn.functional.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
        key_ok = nn.functional.pad(key_ok, (0, pad), value=False)
    middle, rows = block_sparse_probs(q, k, key_ok, block, n_random)
    context = block_sparse_context(middle, rows, v, block) * key_ok[:, None, :, None]
    context = context.transpose(1, 2).reshape(batch, n + pad, embed)[:, :n]
    if record is not None:
        lengths = key_ok.sum(1).tolist()
        record.append(
            [read_band(middle[b].detach(), rows[b].detach(), int(lengths[b]), n + pad, block, n) for b in range(batch)]
        )
    return module.output(context, hidden_states), None


def _attention_forward(module):
    original = getattr(module, _ORIGINAL)

    def forward(hidden_states, *args, **kwargs):
        if module.training or args:
            return original(hidden_states, *args, **kwargs)
        return attention_forward(module, hidden_states, **kwargs)

    return forward


def _model_forward(model: transformers.BigBirdModel):
    """``BigBirdModel.forward`` that keeps the configured attention type and hands its mask to the layers.

    Hugging Face switches a block-sparse model to full attention *for good* the first time an input is
    short (``set_attention_type('original_full')``), so every later long input would run dense; here each
    pass starts from the configured type. In eval mode the input is not padded to a multiple of the block
    (:func:`attention_forward` pads its queries and keys instead).
    """
    original = getattr(model, _ORIGINAL)
    signature = inspect.signature(original)

    def forward(*args, **kwargs):
        model.set_attention_type(model.config.attention_type)
        bound = signature.bind_partial(*args, **kwargs).arguments
        mask = bound.get("attention_mask")
        if mask is None:
            ids = bound.get("input_ids")
            ids = ids if ids is not None else bound["inputs_embeds"][..., 0]
            mask = torch.ones(ids.shape[:2], dtype=torch.long, device=ids.device)
        token = _MASK.set(mask)
        try:
            return original(*args, **kwargs)
        finally:
            _MASK.reset(token)
            model.set_attention_type(model.config.attention_type)

    return forward


def _pad_to_block_size(model: transformers.BigBirdModel):
    original = model._pad_to_block_size

    def pad(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, pad_token_id):
        if not model.training:
            return 0, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds
        return original(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, pad_token_id)

    return pad


def _masks(model: transformers.BigBirdModel):
    original = model.create_masks_for_block_sparse_attn

    def masks(attention_mask: torch.Tensor, block_size: int):
        if not model.training:  # the eval path reads the 2-D mask itself
            return None, None, None, None
        return original(attention_mask, block_size)

    return masks


def use_block_sparse_attention(model: nn.Module) -> nn.Module:
    """Route every BigBird attention of ``model`` through :func:`attention_forward` in eval mode (no dense
    probability tensor, no padding of the input); returns ``model``. Idempotent.

    Hugging Face's warning on every short input (one per forward) is silenced: :func:`full_threshold` says
    which inputs run full attention, and the run notes count them."""
    logging.getLogger(transformers.models.big_bird.modeling_big_bird.__name__).setLevel(logging.ERROR)
    for module in model.modules():
        if isinstance(module, transformers.models.big_bird.modeling_big_bird.BigBirdAttention):
            if not hasattr(module, _ORIGINAL):
                setattr(module, _ORIGINAL, module.forward)
                module.forward = _attention_forward(module)
        elif isinstance(module, transformers.BigBirdModel) and not hasattr(module, _ORIGINAL):
            setattr(module, _ORIGINAL, module.forward)
            module.forward = _model_forward(module)
            module._pad_to_block_size = _pad_to_block_size(module)
            module.create_masks_for_block_sparse_attn = _masks(module)
    return model


@contextmanager
def recording():
    """Collect the bands every patched BigBird attention layer computes: ``record[layer][batch item]``."""
    record: list[list[Band]] = []
    token = _RECORD.set(record)
    try:
        yield record
    finally:
        _RECORD.reset(token)
