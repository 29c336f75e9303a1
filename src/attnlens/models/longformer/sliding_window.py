"""Longformer's sliding-window + global self-attention computed in query blocks: the fast inference path.

Hugging Face's ``LongformerSelfAttention`` builds the band of scores from overlapping ``2w × 2w`` chunks
(``w`` the one-sided window), then moves them into diagonal form with pads, slice copies and
``as_strided`` views. On a CPU at the default model size that bookkeeping costs more than the
arithmetic: ``torch.profiler`` on an IG batch at 512 tokens gives the attention 62 % of the time, 37 % in
``copy_``, ``fill_`` and the ``index_add_`` of ``as_strided``'s backward and 25 % in its matmuls.

Here the ``n`` queries are cut into ``n / w`` blocks of ``w``; every key ``j`` a query ``i`` of block ``b`` may
see (``|i − j| ≤ w``) lies in the block's ``3w`` keys ``[bw − w, bw + 2w)``, one ``unfold`` view of the key
and value matrices padded by ``w`` on each side. Each block's scores are one ``(w × 3w)`` matmul, masked to the
band, to keys that are neither padding nor global, and to the sequence; the scores against the global
keys (regular key projection) are appended, as in Hugging Face, and one softmax covers both. That is
1.5 × the band's multiply-adds (Hugging Face's chunks: 2 ×) and no diagonal reshuffling. The global
query rows (:func:`global_rows`) fold the global key and value projections into the few global queries
instead of projecting every token with them.

The result is the same function of the inputs; only the order of floating-point sums differs
(``tests/unit/attention/test_blocked_attention.py`` compares logits, hidden states, input and parameter gradients and IG
with Hugging Face's path). Both paths round the scores to float32 for the softmax, as Hugging Face does, so
even a float64 model agrees with Hugging Face's to float32 rounding, not float64's: where two scores an ulp
apart straddle a float32 rounding boundary they round to neighbouring values (~1e-9 in the hidden states of
a float64 model; which scores do depends on the CPU's vector kernels). One difference, for a float64 model only:
a masked score is float32's least value (:func:`masked_score`), where Hugging Face's is −inf after the float32
rounding, which makes the all-masked row of an absent global token NaN and its backward NaN for every token of a
sequence batched with one that has more global tokens (question answering's questions of different lengths).

In training, the attention dropout is drawn exactly as Hugging Face draws it
(:func:`dropout_keep`), so a seeded training run drops the same weights on either path. It applies
wherever nothing needs the attention matrices: every forward and backward pass without
``output_attentions``. Attention extraction runs Hugging Face's forward unchanged.

A patched model also skips Hugging Face's padding of every input to a multiple of the window in
``eval()`` mode without attention outputs: the blocked path pads only its queries and keys, so the linear
layers see the real tokens alone (short faithfulness inputs no longer pay for up to ``2w − 1`` padding tokens).
"""

from __future__ import annotations

import contextvars
import inspect
import math
from contextlib import contextmanager
from functools import cache

import torch
import transformers
from torch import nn

#: Attribute a patched module keeps Hugging Face's bound forward under.
_ORIGINAL = "_attnlens_original_forward"
#: Set while a patched ``LongformerModel`` runs a pass that may skip the padding (see :func:`_unpadded_forward`).
_UNPADDED: contextvars.ContextVar[bool] = contextvars.ContextVar("attnlens_unpadded", default=False)


@cache
def band_mask(window: int, device_type: str = "cpu") -> torch.Tensor:
    """``(w, 3w)`` bool: query ``r`` of a block may see key column ``c`` of its ``3w`` keys (``r ≤ c ≤ r + 2w``)."""
    r = torch.arange(window)[:, None]
    c = torch.arange(3 * window)[None, :]
    return ((c >= r) & (c <= r + 2 * window)).to(device_type)


def _blocks(t: torch.Tensor, window: int) -> torch.Tensor:
    """``(B, H, n, d)`` → ``(B, H, n / w, 3w, d)``: each query block's keys, a view of ``t`` padded by ``w``."""
    padded = nn.functional.pad(t, (0, 0, window, window))
    return padded.unfold(2, 3 * window, window).transpose(-1, -2)


def blocked_self_attention(
    module: transformers.models.longformer.modeling_longformer.LongformerSelfAttention,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor,
    is_index_masked: torch.Tensor,
    is_index_global_attn: torch.Tensor,
    is_global_attn: bool,
) -> tuple[torch.Tensor]:
    """What ``LongformerSelfAttention.forward`` returns without attention outputs, by query blocks.

    ``hidden_states`` is ``(B, n, D)``; ``attention_mask`` is Hugging Face's additive ``(B, n)`` mask (0 local,
    > 0 global, < 0 padding). ``n`` need not be a multiple of the window: the queries, keys and values
    (not the hidden states) are padded here to the next multiple of ``w``, with masked positions.
    """
    batch, n, embed = hidden_states.shape
    heads, dh, w = module.num_heads, module.head_dim, module.one_sided_attn_window_size
    pad = -n % w
    nb = (n + pad) // w
    if pad:
        attention_mask = nn.functional.pad(attention_mask, (0, pad), value=-1.0)
        is_index_masked_padded = nn.functional.pad(is_index_masked, (0, pad), value=True)
    else:
        is_index_masked_padded = is_index_masked

    def split(t):  # (B, n, D) → (B, H, n + pad, dh)
        t = t.view(batch, n, heads, dh).transpose(1, 2)
        return nn.functional.pad(t, (0, 0, 0, pad)) if pad else t

    query = split(module.query(hidden_states) / math.sqrt(dh))
    key, value = split(module.key(hidden_states)), split(module.value(hidden_states))
    scores = query.reshape(batch, heads, nb, w, dh) @ _blocks(key, w).transpose(-1, -2)  # (B, H, nb, w, 3w)
    # keys a query may see in its window: real tokens without global attention, inside the sequence
    local_key = nn.functional.pad(attention_mask == 0, (w, w), value=False).unfold(1, 3 * w, w)  # (B, nb, 3w)
    allowed = band_mask(w, hidden_states.device.type)[None, None] & local_key[:, :, None, :]  # (B, nb, w, 3w)
    floor = masked_score(scores.dtype)
    scores = scores.masked_fill(~allowed[:, None], floor)
    if is_global_attn:
        n_global, global_index, local_global_index, local_no_global_index = module._get_global_attn_indices(
            is_index_global_attn
        )
        # every query's scores against the global keys (regular projection), as Hugging Face
        global_keys = key.new_zeros(batch, n_global, heads, dh)
        global_keys[local_global_index] = key.transpose(1, 2)[global_index]
        global_scores = query @ global_keys.permute(0, 2, 3, 1)  # (B, H, n, G)
        global_scores[local_no_global_index[0], :, :, local_no_global_index[1]] = floor
        scores = torch.cat((global_scores.view(batch, heads, nb, w, n_global), scores), dim=-1)
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).type_as(scores)
    probs = probs.masked_fill(is_index_masked_padded.view(batch, 1, nb, w, 1), 0.0)
    if module.training and module.dropout > 0:
        probs = probs * dropout_keep(probs, n_global if is_global_attn else 0, module.dropout)
    if is_global_attn:
        global_values = value.new_zeros(batch, n_global, heads, dh)
        global_values[local_global_index] = value.transpose(1, 2)[global_index]
        out = probs[..., :n_global] @ global_values.transpose(1, 2)[:, :, None]
        out = out + probs[..., n_global:] @ _blocks(value, w)
    else:
        out = probs @ _blocks(value, w)
    out = out.reshape(batch, heads, nb * w, dh).transpose(1, 2).reshape(batch, nb * w, embed)[:, :n]
    if is_global_attn:
        global_out = global_rows(
            module, hidden_states, n_global, global_index, local_global_index, local_no_global_index, is_index_masked
        )
        out = out.clone()
        out[global_index] = global_out[local_global_index[0], :, local_global_index[1]].reshape(-1, embed)
    return (out,)


def dropout_keep(probs: torch.Tensor, n_global: int, p: float) -> torch.Tensor:
    """Hugging Face's attention-dropout factors (0 or ``1/(1 − p)``), drawn as it draws them, laid out in blocks.

    Hugging Face drops out its ``(B, n, H, G + 2w + 1)`` probabilities: the global key columns, then the
    band ``c = 0 … 2w`` of query ``i``'s keys ``i − w + c``. Dropout of a tensor of ones of that shape takes
    the same numbers from the generator, so a training step on either path drops the same weights and
    leaves the generator in the same state. The band moves to block layout with one pad and view: in row
    ``r`` of a block, band column ``c`` is key column ``r + c`` of the block's ``3w`` (``probs``'s last axis
    after the ``G`` global columns); the columns outside the band get 0, where the probabilities are 0.
    """
    batch, heads, nb, w, _ = probs.shape
    keep = nn.functional.dropout(probs.new_ones(batch, nb * w, heads, n_global + 2 * w + 1), p=p, training=True)
    keep = keep.transpose(1, 2).reshape(batch, heads, nb, w, n_global + 2 * w + 1)
    band = nn.functional.pad(keep[..., n_global:], (0, w)).flatten(-2)[..., : 3 * w * w]  # rows of 3w + 1
    return torch.cat((keep[..., :n_global], band.view(batch, heads, nb, w, 3 * w)), dim=-1)


def global_rows(
    module: transformers.models.longformer.modeling_longformer.LongformerSelfAttention,
    hidden_states: torch.Tensor,
    n_global: int,
    global_index: tuple[torch.Tensor, ...],
    local_global_index: tuple[torch.Tensor, ...],
    local_no_global_index: tuple[torch.Tensor, ...],
    is_index_masked: torch.Tensor,
) -> torch.Tensor:
    """``(B, H, G, dh)``: the global queries' attention over every key, without projecting every key.

    Hugging Face projects all ``n`` hidden states with ``key_global`` and ``value_global`` for the few
    global queries (``_compute_global_attn_output_from_hidden``): ``2 n D²`` multiply-adds per layer, a
    seventh of a layer's. Both projections are linear, so they move to the global side instead: with
    ``W_k``, ``b_k`` the key projection of a head and ``q`` a global query of it,
    ``q · (W_k h_j + b_k) = (W_kᵀ q) · h_j + q · b_k``, and with ``p`` the query's attention weights,
    ``Σ_j p_j (W_v h_j + b_v) = W_v (Σ_j p_j h_j) + (Σ_j p_j) b_v``. The cost falls to ``G · n · D`` per
    head. Masking, the float32 softmax and the rows of absent global tokens follow Hugging Face, and so does
    the dropout in training (one draw of the same shape).

    The move is an identity of plain linear layers: where ``key_global`` or ``value_global`` carries a forward hook
    (AttnLRP's gradient rules, a user's probe), the keys and values are projected as Hugging Face projects them,
    so that the hook sees them.
    """
    batch, n, embed = hidden_states.shape
    heads, dh = module.num_heads, module.head_dim
    global_hidden = hidden_states.new_zeros(batch, n_global, embed)
    global_hidden[local_global_index] = hidden_states[global_index]
    query = (module.query_global(global_hidden) / math.sqrt(dh)).view(batch, n_global, heads, dh)
    folded = not (_hooked(module.key_global) or _hooked(module.value_global))
    if folded:
        key_side = torch.einsum("bghe,hed->bhgd", query, module.key_global.weight.view(heads, dh, embed))
        # one (H·G × D) @ (D × n) product per sequence; a broadcast over heads would copy the states H times
        scores = torch.bmm(key_side.reshape(batch, heads * n_global, embed), hidden_states.transpose(1, 2))
        scores = scores.view(batch, heads, n_global, -1)  # (B, H, G, n)
        if module.key_global.bias is not None:
            bias = torch.einsum("bghe,he->bhg", query, module.key_global.bias.view(heads, dh))
            scores = scores + bias[..., None]
    else:
        keys = module.key_global(hidden_states).view(batch, n, heads, dh)
        scores = torch.einsum("bghd,bnhd->bhgn", query, keys)
    floor = masked_score(scores.dtype)
    scores[local_no_global_index[0], :, local_no_global_index[1], :] = floor  # slots of rows with fewer globals
    scores = scores.masked_fill(is_index_masked[:, None, None, :], floor)
    probs = nn.functional.softmax(scores, dim=-1, dtype=torch.float32).type_as(scores)
    # Hugging Face's dropout of its (B·H, G, n) probabilities: the same shape in memory, the same draw
    probs = nn.functional.dropout(probs, p=module.dropout, training=module.training)
    if not folded:
        values = module.value_global(hidden_states).view(batch, n, heads, dh)
        return torch.einsum("bhgn,bnhd->bhgd", probs, values)
    pooled = torch.bmm(probs.view(batch, heads * n_global, -1), hidden_states)  # Σ_j p_j h_j
    pooled = pooled.view(batch, heads, n_global, embed)
    out = torch.einsum("bhgd,hed->bhge", pooled, module.value_global.weight.view(heads, dh, embed))
    if module.value_global.bias is not None:
        # in the projections' dtype: under autocast the float32 bias would lift the rows to float32 (Hugging
        # Face's value_global adds it inside the half-precision linear layer)
        out = out + (probs.sum(-1, keepdim=True) * module.value_global.bias.view(1, heads, 1, dh)).to(out.dtype)
    return out


def masked_score(dtype: torch.dtype) -> float:
    """The score of a masked key: Hugging Face's, its scores' dtype's least value, except for float64, whose least
    value is −inf in the float32 softmax: a row with every key masked (the row of an absent global token, in a batch
    whose sequences have different numbers of them) would be NaN, and its backward NaN in every token's gradient.
    float32's least value instead: the same probabilities, finite everywhere."""
    return max(torch.finfo(dtype).min, torch.finfo(torch.float32).min)


def _hooked(module: nn.Module) -> bool:
    """Whether ``module`` has forward hooks of its own (they would not run if its weights were used directly)."""
    return bool(module._forward_hooks or module._forward_pre_hooks)


def _self_attention() -> type:
    """Hugging Face's ``LongformerSelfAttention`` class, imported when a model is patched (not at import)."""
    return transformers.models.longformer.modeling_longformer.LongformerSelfAttention


def _forward(module: transformers.models.longformer.modeling_longformer.LongformerSelfAttention):
    original = getattr(module, _ORIGINAL)

    def forward(
        hidden_states,
        attention_mask=None,
        is_index_masked=None,
        is_index_global_attn=None,
        is_global_attn=None,
        output_attentions=False,
    ):
        if output_attentions:
            return original(
                hidden_states, attention_mask, is_index_masked, is_index_global_attn, is_global_attn, output_attentions
            )
        return blocked_self_attention(
            module, hidden_states, attention_mask, is_index_masked, is_index_global_attn, is_global_attn
        )

    return forward


def _unpadded_forward(model: transformers.LongformerModel):
    """``LongformerModel.forward`` that skips the padding to a multiple of the window when it is not needed.

    Hugging Face pads every input to a multiple of ``attention_window`` before the embeddings, and the
    padding goes through every layer. In ``eval()`` mode without attention outputs each self-attention
    takes the blocked path, which pads its queries and keys itself, so the model runs on the real tokens
    only (a 29-token deletion curve point no longer costs 64). Training keeps the padding: its dropout
    draws have the padded shape.
    """
    original = getattr(model, _ORIGINAL)
    signature = inspect.signature(original)

    def forward(*args, **kwargs):
        attentions = signature.bind_partial(*args, **kwargs).arguments.get("output_attentions")
        attentions = model.config.output_attentions if attentions is None else attentions
        token = _UNPADDED.set(not model.training and not attentions)
        try:
            return original(*args, **kwargs)
        finally:
            _UNPADDED.reset(token)

    return forward


def _pad_to_window_size(model: transformers.LongformerModel):
    original = model._pad_to_window_size

    def pad(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, pad_token_id):
        if _UNPADDED.get():
            return 0, input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds
        return original(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, pad_token_id)

    return pad


def use_blocked_attention(model: nn.Module) -> nn.Module:
    """Route every Longformer self-attention of ``model`` through :func:`blocked_self_attention` where it applies
    (no attention outputs asked for), and run unpadded inputs where it may (:func:`_unpadded_forward`);
    returns ``model``. Idempotent."""
    for module in model.modules():
        if isinstance(module, _self_attention()) and not hasattr(module, _ORIGINAL):
            setattr(module, _ORIGINAL, module.forward)
            module.forward = _forward(module)
        elif isinstance(module, transformers.LongformerModel) and not hasattr(module, _ORIGINAL):
            setattr(module, _ORIGINAL, module.forward)
            module.forward = _unpadded_forward(module)
            module._pad_to_window_size = _pad_to_window_size(module)
    return model


def use_huggingface_attention(model: nn.Module) -> nn.Module:
    """Undo :func:`use_blocked_attention`: Hugging Face's forward everywhere again."""
    for module in model.modules():
        if isinstance(module, (_self_attention(), transformers.LongformerModel)) and hasattr(module, _ORIGINAL):
            del module.forward
            module.__dict__.pop("_pad_to_window_size", None)
            delattr(module, _ORIGINAL)
    return model


@contextmanager
def huggingface_attention(model: nn.Module):
    """Run ``model`` with Hugging Face's self-attention inside the block, whatever it used before."""
    patched = [m for m in model.modules() if isinstance(m, _self_attention()) and hasattr(m, _ORIGINAL)]
    use_huggingface_attention(model)
    try:
        yield model
    finally:
        if patched:
            use_blocked_attention(model)
