"""The blocked self-attention path against Hugging Face's Longformer, the reference it replaces.

Both run on the same float64 model and inputs — batches with padding, one or several global tokens per
row, no global token at all, windows that differ by layer — and must agree to rounding: logits and
every hidden state, the gradient at the embedding output (what IG and the gradient methods read), the
parameter gradients (what head importance reads) and Integrated Gradients itself. In training it must
drop the attention weights Hugging Face drops under the same seed. Where the blocked path does not apply
(attention outputs asked for) the model must be Hugging Face's, number for number.

Bounds: the two paths compute the same function with their sums in another order, so in float64 they
agree to float64 rounding — once the softmax runs in float64 too (:func:`float64_softmax`). Longformer
casts its scores to float32 for the softmax (``softmax(..., dtype=torch.float32)``, in Hugging Face's code
and, to stay the same function, in ours), and two float64 scores an ulp apart round to neighbouring float32
values when they straddle a float32 rounding boundary. Which scores straddle one depends on the order of
the sums, i.e. on the CPU's vector kernels: under AVX-512 none of these cases did, under AVX2 and the
default kernels some did, and the hidden states then differ by up to 1.6e-9 (measured with
``ATEN_CPU_CAPABILITY=avx2`` and ``=default``). So the tight comparisons run with the softmax in float64
on both paths, and :func:`test_blocked_forward_with_the_float32_softmax` checks the models as they are
against the float32 rounding bound.
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.longformer.modeling_longformer import LongformerModel, LongformerSelfAttention

from attnlens.attribution.ig import Inputs, attribute_example, baseline_ids
from attnlens.models.checkpoints import load_classifier, load_tokenizer, packaged_model_dir
from attnlens.models.longformer import LONGFORMER, global_attention_mask
from attnlens.models.longformer.sliding_window import (
    band_mask,
    blocked_self_attention,
    huggingface_attention,
    use_blocked_attention,
    use_huggingface_attention,
)
from tests.support.helpers import EPS32
from tests.support.tiny_models import tiny_longformer

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


#: Float64 end to end, the same function with its sums in another order: each value differs by a few float64
#: ulps (2.2e-16) of the magnitudes summed (|values| ≲ 10 here, 3 layers). Measured: ≤ 1.1e-15 under the
#: avx512, avx2 and default kernel sets; a wrong band or mask gives differences above 1e-3.
F64_REORDERED = {"rtol": 0, "atol": 1e-12}
#: Parameter gradients sum over every token and row of the batch: the same reordering bound, relative to
#: gradients up to ~1e3 (rtol), plus the absolute floor for the near-zero ones.
F64_REORDERED_GRADIENTS = {"rtol": 1e-9, "atol": 1e-12}


@pytest.fixture()
def float64_softmax(monkeypatch):
    """Longformer's softmax in the scores' own dtype (both paths ask for float32): float64 end to end."""
    softmax = torch.nn.functional.softmax

    def keep_dtype(scores, dim=None, _stacklevel=3, dtype=None):
        return softmax(scores, dim=dim, dtype=None if scores.dtype == torch.float64 else dtype)

    monkeypatch.setattr(torch.nn.functional, "softmax", keep_dtype)


def batch(lengths, globals_=None, vocab=40, seed=0):
    """Right-padded ids (pad 1) with CLS-like 0 first; ``globals_[row]`` the global positions (default CLS)."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.ones(len(lengths), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    glob = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = torch.randint(3, vocab, (n,), generator=g)
        ids[row, 0] = 0
        mask[row, :n] = 1
        for pos in (globals_ or {}).get(row, [0]):
            glob[row, pos] = 1
    return {"input_ids": ids, "attention_mask": mask, "global_attention_mask": glob}


def classifier(window=4, layers=3, **kwargs):
    return tiny_longformer(
        vocab_size=40,
        hidden=16,
        layers=layers,
        heads=4,
        intermediate=32,
        max_positions=80,
        window=window,
        num_labels=3,
        seed=5,
        double=True,
        **kwargs,
    )


def both(model, inputs, **kwargs):
    """Hugging Face's outputs, then the blocked path's, on the same model."""
    use_huggingface_attention(model)
    ref = model(**inputs, output_hidden_states=True, **kwargs)
    use_blocked_attention(model)
    return ref, model(**inputs, output_hidden_states=True, **kwargs)


CASES = {
    "cls only, padded rows": ([23, 9, 16], None),
    "several globals per row": ([23, 9, 16], {0: [0, 5, 22], 1: [0], 2: [0, 15]}),
    "no global token": ([17, 12], {0: [], 1: []}),
    "one long row": ([37], None),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("window", [4, [4, 8, 4], 8])
def test_blocked_forward_matches_huggingface(case, window, float64_softmax):
    model = classifier(window=window)
    lengths, globals_ = CASES[case]
    with torch.no_grad():
        ref, new = both(model, batch(lengths, globals_))
    torch.testing.assert_close(new.logits, ref.logits, **F64_REORDERED)
    for row, n in enumerate(lengths):  # the real tokens' states (padding rows are never read)
        for h_ref, h_new in zip(ref.hidden_states, new.hidden_states, strict=True):
            torch.testing.assert_close(h_new[row, :n], h_ref[row, :n], **F64_REORDERED)


@pytest.mark.parametrize("case", list(CASES))
def test_blocked_forward_with_the_float32_softmax(case):
    """The models as they run: each softmax rounds its scores to float32 on both paths (see the module's doc).

    Bound: a score rounded to the neighbouring float32 value moves its probability by a float32 ulp
    (≤ 2⁻²³ relative), and that reaches the hidden states (|h| ≲ 10, 3 layers) scaled by at most the
    value magnitudes — far below ``EPS32`` relative and absolute (1.2e-7). Measured: ≤ 1.6e-9.
    """
    model = classifier(window=[4, 8, 4])
    lengths, globals_ = CASES[case]
    with torch.no_grad():
        ref, new = both(model, batch(lengths, globals_))
    torch.testing.assert_close(new.logits, ref.logits, rtol=EPS32, atol=EPS32)
    for row, n in enumerate(lengths):
        for h_ref, h_new in zip(ref.hidden_states, new.hidden_states, strict=True):
            torch.testing.assert_close(h_new[row, :n], h_ref[row, :n], rtol=EPS32, atol=EPS32)


def test_blocked_gradients_match_huggingface(float64_softmax):
    model = classifier(window=[4, 8, 4])
    inputs = batch([23, 9, 16], {0: [0, 5], 1: [0, 3], 2: [0, 7]})  # uneven counts: NaN gradients in HF too
    grads = []
    for patch in (use_huggingface_attention, use_blocked_attention):
        patch(model)
        model.zero_grad(set_to_none=True)
        emb = {}
        handle = model.longformer.embeddings.register_forward_hook(lambda m, a, out, emb=emb: emb.setdefault("x", out))
        out = model(**inputs, labels=torch.tensor([0, 2, 1]))
        emb["x"].retain_grad()
        out.loss.backward()
        handle.remove()
        grads.append((emb["x"].grad, {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}))
    (x_ref, p_ref), (x_new, p_new) = grads
    torch.testing.assert_close(x_new, x_ref[:, : x_new.shape[1]], **F64_REORDERED)  # HF's is padded
    assert p_new.keys() == p_ref.keys() and any("query_global" in k for k in p_ref)
    for name in p_ref:
        torch.testing.assert_close(p_new[name], p_ref[name], **F64_REORDERED_GRADIENTS, msg=name)


def test_integrated_gradients_are_the_same_on_either_path(float64_softmax):
    model = classifier()
    ids = batch([29])["input_ids"]
    mask = torch.ones_like(ids)
    positions = LONGFORMER.position_ids(model.config, 29)
    glob = {"global_attention_mask": global_attention_mask(mask)}
    inputs = Inputs(ids, baseline_ids(ids, {0, 2}, 1), mask, positions, glob)
    runs = []
    for patch in (use_huggingface_attention, use_blocked_attention):
        patch(model)
        runs.append(
            attribute_example(model, inputs, 2, min_steps=8, max_steps=8, tolerance=None, internal_batch_size=3)
        )
    ref, new = runs
    assert new.n_steps == ref.n_steps == 8
    torch.testing.assert_close(torch.from_numpy(new.scores), torch.from_numpy(ref.scores), **F64_REORDERED)
    assert new.delta == pytest.approx(ref.delta, abs=F64_REORDERED["atol"])


def test_attention_outputs_take_huggingface_path():
    model = classifier()
    inputs = batch([23, 9])
    with torch.no_grad():
        ref, new = both(model, inputs, output_attentions=True)
    for a_ref, a_new in zip(
        ref.attentions + ref.global_attentions, new.attentions + new.global_attentions, strict=True
    ):
        assert torch.equal(a_new, a_ref)  # the same operations (Hugging Face's forward both times): equal
    assert torch.equal(new.logits, ref.logits)


@pytest.mark.parametrize("case", [c for c in CASES if c != "no global token"])  # there HF's own gradients are NaN
@pytest.mark.parametrize("window", [4, [4, 8, 4]])
def test_training_drops_the_weights_huggingface_drops(case, window, monkeypatch, float64_softmax):
    """Same seed, same dropped attention weights: the loss, every gradient and the generator's state after."""
    calls = []
    monkeypatch.setattr(
        "attnlens.models.longformer.sliding_window.blocked_self_attention",
        lambda *a, **k: calls.append(1) or blocked_self_attention(*a, **k),
    )
    model = classifier(window=window)
    for module in model.modules():
        if isinstance(module, LongformerSelfAttention):
            module.dropout = 0.3  # attention dropout (the band and the global rows)
    model.train()
    lengths, globals_ = CASES[case]
    inputs = batch(lengths, globals_)
    labels = torch.arange(len(lengths)) % 3
    runs = []
    for patch in (use_huggingface_attention, use_blocked_attention):
        patch(model)
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)
        out = model(**inputs, labels=labels)
        out.loss.backward()
        runs.append(
            (
                out.loss.detach(),
                {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None},
                torch.get_rng_state(),
            )
        )
    (loss_ref, g_ref, rng_ref), (loss_new, g_new, rng_new) = runs
    assert len(calls) == model.config.num_hidden_layers  # the blocked path ran, in training mode
    assert torch.equal(rng_new, rng_ref)  # the same draws from the generator: the same state, bit for bit
    torch.testing.assert_close(loss_new, loss_ref, **F64_REORDERED)
    torch.manual_seed(1)  # another draw changes the loss: the dropout is live on both paths
    assert not torch.allclose(model(**inputs, labels=labels).loss, loss_new)
    assert g_new.keys() == g_ref.keys()
    for name in g_ref:
        torch.testing.assert_close(g_new[name], g_ref[name], **F64_REORDERED_GRADIENTS, equal_nan=True, msg=name)


def test_eval_passes_run_unpadded_and_the_others_padded():
    """Hugging Face pads to a multiple of the window; the blocked path's eval passes run the real tokens only."""
    model = classifier(window=8)
    inputs = batch([23, 9])  # 23 tokens: 24 after Hugging Face's padding
    widths = []
    model.longformer.embeddings.register_forward_hook(lambda m, a, out: widths.append(out.shape[1]))
    use_blocked_attention(model)
    with torch.no_grad():
        model(**inputs)
        model(**inputs, output_attentions=True)
    model.train()
    model(**inputs)
    model.eval()
    use_huggingface_attention(model)
    with torch.no_grad():
        model(**inputs)
    assert widths == [23, 24, 24, 24]
    assert "_pad_to_window_size" not in model.longformer.__dict__


def test_patching_is_idempotent_and_reversible():
    model = classifier()
    layers = [m for m in model.modules() if isinstance(m, (LongformerSelfAttention, LongformerModel))]
    use_blocked_attention(use_blocked_attention(model))
    patched = [m.forward for m in layers]
    assert all("forward" in m.__dict__ for m in layers)
    assert [m.forward for m in layers] == patched
    with huggingface_attention(model):
        assert not any("forward" in m.__dict__ for m in layers)
    assert all("forward" in m.__dict__ for m in layers)
    use_huggingface_attention(model)
    assert not any("forward" in m.__dict__ for m in layers)
    with huggingface_attention(model):  # a model that was not patched stays so
        pass
    assert not any("forward" in m.__dict__ for m in layers)


def test_band_mask_keeps_the_window():
    w = 3
    mask = band_mask(w)
    for r in range(w):  # query r of a block sits at key column r + w
        assert mask[r].nonzero().flatten().tolist() == list(range(r, r + 2 * w + 1))


def test_saved_classifiers_load_blocked(tmp_path):
    folder = tmp_path / "clf"
    classifier().float().save_pretrained(folder)
    load_tokenizer(packaged_model_dir()).save_pretrained(folder)
    model, _ = load_classifier(folder)
    assert all("forward" in m.__dict__ for m in model.modules() if isinstance(m, LongformerSelfAttention))
    plain, _ = load_classifier(folder, blocked=False)
    assert not any("forward" in m.__dict__ for m in plain.modules() if isinstance(m, LongformerSelfAttention))


@pytest.mark.parametrize("training", [False, True], ids=["eval", "training"])
@pytest.mark.parametrize("case", ["cls only, padded rows", "several globals per row"])
def test_blocked_path_under_mixed_precision(case, training):
    """Under autocast (fp16 on a card, bf16 here) the blocked path runs and is Hugging Face's function.

    The global queries' rows come back in float32 (their value bias is added in float32) while the band's
    come out of the autocast matmuls in half precision; writing the one into the other must keep the
    band's dtype, as Hugging Face's path does (the GPU proof found this: benchmarks/gpu.py). Training
    mode is checked too (gradient checkpointing fine-tunes with it), with dropout off so both paths
    compute the same function. Bound: bf16 keeps 8 bits (2⁻⁸ ≈ 3.9e-3 relative); each path rounds its
    own products, so logits (|z| ≲ 1) may differ by a few of those over 3 layers — 3e-2 is ~8 roundings.
    """
    model = tiny_longformer(
        vocab_size=40,
        hidden=16,
        layers=3,
        heads=4,
        intermediate=32,
        max_positions=80,
        window=[4, 8, 4],
        num_labels=3,
        seed=5,
    )
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    for module in model.modules():
        if isinstance(module, LongformerSelfAttention):
            module.dropout = 0.0
    model.train(training)
    lengths, globals_ = CASES[case]
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        ref, new = both(model, batch(lengths, globals_))
    assert new.logits.dtype == ref.logits.dtype
    torch.testing.assert_close(new.logits.float(), ref.logits.float(), rtol=0, atol=3e-2)
