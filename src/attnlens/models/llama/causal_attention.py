"""The decoders' causal attention at long contexts, without an ``n × n`` mask: what :meth:`Llama.long_context`
runs a Hugging Face decoder's layers with.

Hugging Face's sdpa passes PyTorch's fused kernel ``is_causal`` only where the queries are the keys; otherwise it
builds a ``q × n`` mask, and PyTorch scores every pair under it (on a CPU converting it to floats, once per layer,
kept for the backward). Two cases reach that at the lengths the generation study reads:

* **a suffix over a cached prefix** (the ablations from a shared prefix): its queries are the last ``q`` of ``n``
  keys, a causal mask aligned to the bottom right, which the fused kernel (aligned to the top left) does not take.
  :func:`bottom_right_causal` runs it as two fused kernels, the prefix's keys unmasked and the suffix's own
  causally, merged by their log-sum-exps: ``(n² − p²) / 2`` pairs for a suffix from ``p``, not ``(n − p) · n``.
* **a sliding window** (Mistral; Gemma 3's and Qwen's sliding layers): every query attends to at most ``window``
  keys, yet the whole ``n × n`` mask is scored (a 32 768-token prompt's float mask is 4 GiB a layer).
  :func:`banded_causal` runs blocks of queries against the keys their windows reach, one block-sized mask shared
  by every block: ``n · (window + block)`` pairs and memory.

Both are exact (float rounding aside; the tests hold them, in float64, to the dense softmax and to Hugging Face's
sdpa with its own masks, whose eager path takes the softmax in float32). They apply where the layers' only mask is
causality, a window and right padding (no real query comes after padding); any other mask (a masked token, left
padding, a custom pattern) goes to Hugging Face's sdpa unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

import torch
from torch.nn.attention.bias import causal_lower_right
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

#: The attention implementation :func:`long_context` runs a model with, registered with Hugging Face.
LONG_CONTEXT = "attnlens_long_context"
#: Query rows per block of a sliding window's attention: a quarter of the window (at least this many), so a block
#: scores at most 1.25 × the pairs its windows hold.
MIN_BLOCK = 128


def causal_attention(query, key, value, scale=None, window: int | None = None, groups: int = 1) -> torch.Tensor:
    """``(B, H, q, d)``: the ``q`` queries, the last of ``n`` keys, each attending causally to every key up to its
    own, or within its ``window`` (keys ``i − window < j ≤ i``, Hugging Face's sliding window); each of the
    ``H / groups`` key/value heads shared by ``groups`` consecutive query heads."""
    q, n = query.shape[-2], key.shape[-2]
    if (window is None or window >= n) and q in (1, n):  # the fused kernel's own alignment; one query sees every key
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, is_causal=q > 1, scale=scale, enable_gqa=groups > 1
        )
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    if window is not None and window < n:
        return banded_causal(query, key, value, window, scale)
    return bottom_right_causal(query, key, value, scale)


def bottom_right_causal(query, key, value, scale=None) -> torch.Tensor:
    """``(B, H, q, d)``: the ``q`` queries, the last of ``n`` keys, each attending to every key up to its own
    (PyTorch's :func:`~torch.nn.attention.bias.causal_lower_right`). On a CPU without gradient, where PyTorch would
    materialise that mask, as two fused kernels merged by their log-sum-exps (module docstring); elsewhere
    PyTorch's bottom-right causal bias (a card's fused kernel)."""
    q, n = query.shape[-2], key.shape[-2]
    if query.device.type != "cpu" or (torch.is_grad_enabled() and query.requires_grad):
        bias = causal_lower_right(q, n)
        return torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=bias, scale=scale)
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # the kernel that returns its log-sum-exp
    before, lse_before = flash(query, key[..., : n - q, :], value[..., : n - q, :], 0.0, False, scale=scale)
    within, lse_within = flash(query, key[..., n - q :, :], value[..., n - q :, :], 0.0, True, scale=scale)
    lse = torch.logaddexp(lse_before, lse_within)
    return before * (lse_before - lse).exp()[..., None] + within * (lse_within - lse).exp()[..., None]


def banded_causal(query, key, value, window: int, scale=None) -> torch.Tensor:
    """``(B, H, q, d)``: the ``q`` queries, the last of ``n`` keys, each attending to the ``window`` keys ending at its
    own, by blocks of query rows: a block of ``r`` rows scores the ``r + window − 1`` keys its windows reach, under
    one additive mask that every block shares (a view of it where the keys begin at 0 or the block is short)."""
    q, n = query.shape[-2], key.shape[-2]
    offset = n - q  # query i is key offset + i
    block = max(window // 4, MIN_BLOCK)
    rows = torch.arange(block, device=query.device)[:, None]
    cols = torch.arange(block + window - 1, device=query.device)[None, :]
    shared = torch.zeros((block, block + window - 1), dtype=query.dtype, device=query.device)
    shared.masked_fill_((cols < rows) | (cols > rows + window - 1), float("-inf"))  # key j of row i: i ≤ j < i + w
    out = []
    for a in range(0, q, block):
        r = min(block, q - a)
        first = a + offset - window + 1  # the first key row a's window reaches, before clipping at key 0
        lo, hi = max(first, 0), a + r + offset
        mask = shared[:r, lo - first : hi - first]
        out.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[..., a : a + r, :], key[..., lo:hi, :], value[..., lo:hi, :], attn_mask=mask, scale=scale
            )
        )
    return torch.cat(out, dim=-2)


def long_context_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """Hugging Face's attention interface: :func:`causal_attention` (with the layer's ``sliding_window``) where
    :func:`long_context_mask` gave no mask, Hugging Face's sdpa where it gave one."""
    if attention_mask is not None or kwargs.get("softcap") is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    if dropout:
        raise ValueError("attnlens's long-context attention runs a model in eval mode (no attention dropout)")
    groups = getattr(module, "num_key_value_groups", 1)
    out = causal_attention(query, key, value, scaling, kwargs.get("sliding_window"), groups)
    return out.transpose(1, 2).contiguous(), None


def long_context_mask(*args, attention_mask=None, allow_is_causal_skip=True, **kwargs):
    """Hugging Face's mask interface: none where causality, the window and right padding are the whole mask (every
    row's padding, if any, at its end; no custom pattern), else sdpa's mask."""
    right_padded = attention_mask is None or bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())
    if allow_is_causal_skip and not kwargs.get("use_vmap") and right_padded:
        return None
    return sdpa_mask(*args, attention_mask=attention_mask, allow_is_causal_skip=allow_is_causal_skip, **kwargs)


@cache
def _register() -> None:
    """:data:`LONG_CONTEXT` in Hugging Face's interfaces, once: at the first use, as the attention interface's module
    loads accelerate, which importing :mod:`attnlens.models` should not."""
    from transformers import AttentionInterface  # noqa: PLC0415 (transformers.modeling_utils: a model exists by now)

    AttentionInterface.register(LONG_CONTEXT, long_context_attention)
    AttentionMaskInterface.register(LONG_CONTEXT, long_context_mask)


@contextmanager
def long_context(model) -> Iterator[None]:
    """``model`` running :func:`long_context_attention` where it runs sdpa (eager and flash keep their own)."""
    before = getattr(model.config, "_attn_implementation", None)
    if before != "sdpa":
        yield
        return
    _register()
    model.set_attn_implementation(LONG_CONTEXT)
    try:
        yield
    finally:
        model.set_attn_implementation(before)
