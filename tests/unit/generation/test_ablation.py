"""An answer's score under ablations (:mod:`attnlens.generation.ablation`) on tiny causal language models of each
decoder family, against one plain forward per sequence.

Bounds: float64 models, so the batched and padded forwards differ from the one-sequence ones only in the order
of their sums: 1e-12 absolute on log-probabilities of order 1–10 (a few float64 ulps through two layers). A
masked token is compared with the same sequence without it, its neighbours at their own positions: the same
arithmetic over the same keys, so the same bound.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlens.attribution.datamodels import ablation_masks, leave_one_out_masks
from attnlens.generation.ablation import answer_token_log_probs, shared_prefix, shared_prefix_log_probs
from attnlens.models import architecture
from attnlens.models.llama import causal_attention as long_context_attention
from tests.support.ablated import KINDS, SPANS
from tests.support.ablated import ablations as _ablations
from tests.support.tiny_models import tiny_decoder

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


def _sequences(n: int = 5, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    g = torch.Generator().manual_seed(seed)
    lengths = [9, 14, 11, 16, 7][:n]
    answers = [2, 3, 1, 4, 2][:n]
    return [torch.randint(5, 60, (k,), generator=g).tolist() for k in lengths], answers


def _plain(model, ids: list[int], answer: int, positions: list[int] | None = None) -> np.ndarray:
    """One sequence alone, no mask, no padding: log-softmax of the logits, read at the answer's tokens."""
    with torch.no_grad():
        args = {"input_ids": torch.tensor([ids])}
        if positions is not None:
            args["position_ids"] = torch.tensor([positions])
        logits = model(**args).logits[0].double()
    log_probs = torch.log_softmax(logits, dim=-1)
    n = len(ids)
    return np.array([log_probs[t - 1, ids[t]].item() for t in range(n - answer, n)])


@pytest.mark.parametrize("kind", KINDS)
def test_each_answer_tokens_log_probability_is_a_plain_forwards(kind):
    model = tiny_decoder(kind, head="causal_lm", implementation="sdpa")
    sequences, answers = _sequences()
    got = answer_token_log_probs(model, sequences, answers, batch_size=3)
    for ids, a, values in zip(sequences, answers, got, strict=True):
        assert values.shape == (a,) and (values < 0).all()
        np.testing.assert_allclose(values, _plain(model, ids, a), rtol=0, atol=1e-12)
    alone = answer_token_log_probs(model, sequences, answers, batch_size=1)
    for a, b in zip(got, alone, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_a_masked_token_is_as_if_deleted_with_the_others_kept_in_place(kind):
    """Masking a context token out of attention equals the sequence without it, every other token at its own
    position (positions are rotary: a deletion that closed the gap would move them). The families whose layers
    attend to every earlier token: in a sliding window a masked token keeps its place (the window spans positions
    of the context as it was), which no deletion reproduces, since Hugging Face's window counts the tokens present."""
    model = tiny_decoder(kind, head="causal_lm", implementation="sdpa")
    ids, answer = _sequences(1, seed=3)[0][0] + [7, 8, 9], 3
    context = len(ids) - answer - 1  # the prompt's last token and the answer stay
    keeps = ablation_masks(context, 4, seed=11)
    keep = [[*k.astype(int).tolist(), 1, 1, 1, 1] for k in keeps]
    got = answer_token_log_probs(model, [ids] * len(keep), [answer] * len(keep), keep=keep)
    for flags, values in zip(keep, got, strict=True):
        kept = [i for i, f in enumerate(flags) if f]
        expected = _plain(model, [ids[i] for i in kept], answer, positions=kept)
        np.testing.assert_allclose(values, expected, rtol=0, atol=1e-12)
    assert not np.allclose(got[0], _plain(model, ids, answer))  # a mask changes the answer's probability


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("removal", ["delete", "mask"])
def test_ablations_from_the_shared_prefix_equal_recomputing_every_prompt(kind, removal):
    """Every family (windows of 5 keys, binding on 34 tokens), sources deleted or masked: the keys and values of the
    shared prefix, run once, give each ablation's answer the numbers of its whole sequence run alone, whatever the
    batches."""
    model = tiny_decoder(kind, head="causal_lm", implementation="sdpa")
    masks = np.concatenate([leave_one_out_masks(6), ablation_masks(6, 6, seed=2), np.ones((1, 6), dtype=bool)])
    full, sequences, keep = _ablations(masks, removal)
    expected = np.stack(answer_token_log_probs(model, sequences, [3] * len(masks), keep, batch_size=1))
    for batch_size, overhead in ((1, 0), (4, 8), (16, 1000)):
        got = shared_prefix_log_probs(model, full, sequences, 3, keep, batch_size=batch_size, overhead=overhead)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_leave_one_out_from_the_shared_prefix_costs_less_than_a_forward_per_source():
    """The tokens the model runs (its embedding's inputs), counted, one ablation a forward (no overhead to save):
    the prefix once, then each ablation from its own shared prefix — the 22 + 8 + 12 + … + 28 = 130 tokens of
    recomputing none, under 75 % of recomputing six whole prompts of 30 tokens (180)."""
    model = tiny_decoder("llama", head="causal_lm", implementation="sdpa")
    full, sequences, _ = _ablations(leave_one_out_masks(6), "delete")
    counted: list[int] = []
    handle = model.model.embed_tokens.register_forward_hook(lambda m, args, out: counted.append(args[0].numel()))
    try:
        shared_prefix_log_probs(model, full, sequences, 3, batch_size=8, overhead=0)
    finally:
        handle.remove()
    assert counted == [22, 8, 12, 16, 20, 24, 28] and sum(len(s) for s in sequences) == 180
    assert [shared_prefix(full, s, None, 3) for s in sequences] == [a for a, _ in SPANS]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("removal", ["delete", "mask"])
def test_a_suffix_runs_without_an_n_by_n_mask(kind, removal, monkeypatch):
    """Deleted sources leave nothing but right padding: every batch's every layer runs attnlens's long-context
    attention (:mod:`attnlens.models.llama.causal_attention`), the full causal ones over the cached prefix by
    :func:`~attnlens.models.llama.causal_attention.bottom_right_causal`, the windowed ones by blocks; masked sources
    need their zeros, so every layer of their batches gets Hugging Face's mask. The model runs sdpa again afterwards."""
    model = tiny_decoder(kind, head="causal_lm", implementation="sdpa")
    full, sequences, keep = _ablations(leave_one_out_masks(6), removal)
    calls: dict[str, int] = {"bottom_right_causal": 0, "banded_causal": 0}
    for name in calls:
        original = getattr(long_context_attention, name)
        monkeypatch.setattr(
            long_context_attention,
            name,
            lambda *a, name=name, f=original, **k: calls.__setitem__(name, calls[name] + 1) or f(*a, **k),
        )
    forwards: list[int] = []
    handle = model.model.embed_tokens.register_forward_hook(lambda m, args, out: forwards.append(1))
    try:
        shared_prefix_log_probs(model, full, sequences, 3, keep, batch_size=8, overhead=0)
    finally:
        handle.remove()
    windows = architecture(model).windows(model.config)
    full_layers, windowed = windows.count(None), len(windows) - windows.count(None)
    batches = len(forwards) - 1  # after the shared prefix's own forward, whose queries are its keys
    if removal == "delete":
        assert calls == {"bottom_right_causal": batches * full_layers, "banded_causal": len(forwards) * windowed}
    else:  # only the shared prefix, unmasked, runs without Hugging Face's mask
        assert calls == {"bottom_right_causal": 0, "banded_causal": windowed}
    assert model.config._attn_implementation == "sdpa"


def test_bad_answers_are_refused():
    model = tiny_decoder("llama", head="causal_lm")
    with pytest.raises(ValueError, match="an answer of 1 to 3 tokens"):
        answer_token_log_probs(model, [[5, 6, 7, 8]], [4])
    with pytest.raises(ValueError, match="answer kept"):
        answer_token_log_probs(model, [[5, 6, 7, 8]], [2], keep=[[1, 0, 1, 0]])
    with pytest.raises(ValueError, match="end in the full sequence's answer"):
        shared_prefix_log_probs(model, [5, 6, 7, 8], [[5, 6, 9]], 2)
