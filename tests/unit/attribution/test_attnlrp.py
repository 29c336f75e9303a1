"""AttnLRP (:mod:`attnlens.attribution.lrp`) against a reference written apart from it.

The released ``lxt`` 2.1 does not import beside the pinned transformers 5 (it imports
``transformers.pytorch_utils.find_pruneable_heads_and_indices``, removed in transformers 5; lxt issue #47), so the
reference here is written from the paper's rules directly on Hugging Face's own BERT: the attention as an
attention function registered with transformers, with the gradient of ``q · kᵀ`` and of ``softmax · v`` halved
where the products are formed (tensor hooks); the identity rule as an autograd function; the layer norms
re-computed with their standard deviation detached. The embedded model is a BERT converted to Longformer, and
the conversion is exact when the window covers the input, so AttnLRP through attnlens's Longformer path (blocked
band, global rows, gradient factors at the projections) must equal AttnLRP of the BERT it came from.
"""

import numpy as np
import pytest
import torch
import transformers
from scipy.stats import spearmanr
from torch import nn

from attnlens.attribution import engine
from attnlens.attribution.engine import document_groups, documents_batch, explain_document, explain_together
from attnlens.attribution.explanations import Example
from attnlens.attribution.ig import Inputs, freeze, prepare_inputs, stack_inputs
from attnlens.attribution.lrp import (
    attnlrp,
    attnlrp_rules,
    identity_rule,
    layer_norm_rule,
    scale_gradient,
)
from attnlens.attribution.methods import DOCUMENT, REGISTRY
from attnlens.models import architecture
from attnlens.models.bigbird import BIGBIRD
from attnlens.models.bigbird.bert_to_bigbird import convert_bert_to_bigbird
from attnlens.models.longformer.bert_to_longformer import convert_bert_to_longformer
from attnlens.models.longformer.sliding_window import huggingface_attention
from tests.support.tiny_models import tiny_bigbird, tiny_decoder, tiny_longformer, tiny_modernbert

pytestmark = pytest.mark.numerics

TEXT = (
    "Sparse attention lets a transformer read a long document. The classifier attends to a window around "
    "each token, and one global token reads everything. Does the attention explain the prediction?"
)


# --- the reference: the paper's rules on Hugging Face's BERT, written apart from the production code ------------


class _IdentityRule(torch.autograd.Function):
    """``f(x)`` forward; ``grad · f(x) / x`` backward (the paper's identity rule for element-wise functions)."""

    @staticmethod
    def forward(ctx, x, fn):
        y = fn(x)
        safe = torch.where(x == 0, torch.ones_like(x), x)
        ctx.save_for_backward(torch.where(x == 0, torch.zeros_like(y), y / safe))
        return y

    @staticmethod
    def backward(ctx, grad):
        (ratio,) = ctx.saved_tensors
        return grad * ratio, None


def _halved(t: torch.Tensor) -> torch.Tensor:
    """The uniform rule for a product of two inputs: its gradient halved (a tensor hook)."""
    if t.requires_grad:
        t.register_hook(lambda g: g / 2)
    return t


#: While a list, every softmax of the reference attention appends its input and output (gradients retained).
SOFTMAXES: list | None = None


def _reference_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    scores = _halved(torch.matmul(query, key.transpose(2, 3))) * scaling
    if attention_mask is not None and attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    elif attention_mask is not None:
        scores = scores + attention_mask
    probs = nn.functional.softmax(scores, dim=-1)  # softmax: plain gradient × input is AttnLRP's softmax rule
    if SOFTMAXES is not None:
        scores.retain_grad()
        probs.retain_grad()
        SOFTMAXES.append((scores, probs))
    out = _halved(torch.matmul(probs, value))
    return out.transpose(1, 2).contiguous(), probs


transformers.AttentionInterface.register("attnlrp_reference", _reference_attention)
transformers.AttentionMaskInterface.register("attnlrp_reference", transformers.masking_utils.eager_mask)


class _ReferenceLayerNorm(nn.Module):
    def __init__(self, norm: nn.LayerNorm):
        super().__init__()
        self.norm = norm

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        y = (x - mean) / torch.sqrt(var + self.norm.eps).detach() * self.norm.weight
        return y if self.norm.bias is None else y + self.norm.bias


class _ReferenceActivation(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return _IdentityRule.apply(x, self.fn)


def _reference_norms(model: nn.Module) -> None:
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.LayerNorm):
                setattr(parent, name, _ReferenceLayerNorm(child))


def reference_bert(bert: transformers.BertModel, out_proj: nn.Linear) -> transformers.BertForSequenceClassification:
    """A BERT classifier (pooler + ``out_proj``) with the paper's rules built into its modules, float64."""
    clf = transformers.BertForSequenceClassification(
        bert.config.__class__(**{**bert.config.to_dict(), "num_labels": 2})
    )
    clf.bert.load_state_dict(bert.state_dict())
    clf.classifier.load_state_dict(out_proj.state_dict())
    clf = clf.double().eval()
    clf.set_attn_implementation("attnlrp_reference")
    _reference_norms(clf)
    for layer in clf.bert.encoder.layer:
        layer.intermediate.intermediate_act_fn = _ReferenceActivation(layer.intermediate.intermediate_act_fn)
    clf.bert.pooler.activation = _ReferenceActivation(torch.tanh)
    for p in clf.parameters():
        p.requires_grad_(False)
    return clf


def reference_relevance(clf, input_ids: torch.Tensor, target: int, **kwargs) -> tuple[np.ndarray, float]:
    """Gradient × input at the embedding output of a reference classifier (BERT's or ModernBERT's)."""
    kept = []

    def keep(module, args, output):
        output.requires_grad_(True)
        output.retain_grad()
        kept.append(output)

    handle = clf.base_model.embeddings.register_forward_hook(keep)
    logit = clf(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **kwargs).logits[0, target]
    logit.backward()
    handle.remove()
    (e,) = kept
    return (e.detach() * e.grad).sum(-1)[0].numpy(), float(logit.detach())


# --- the rules one by one ---------------------------------------------------------------------------------------


def test_scale_gradient_scales_the_gradient_only():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    y = scale_gradient(x, 0.25)
    assert torch.equal(y, x)
    y.sum().backward()
    assert torch.equal(x.grad, torch.full_like(x, 0.25))
    x.grad = None
    factor = torch.tensor([1.0, 0.5, 0.25, 0.25], dtype=torch.float64)
    (scale_gradient(x, factor) * 2).sum().backward()
    assert torch.equal(x.grad, 2 * factor.expand(3, 4))


@pytest.mark.parametrize("fn", [torch.tanh, nn.functional.gelu])
def test_identity_rule_passes_relevance_through_unchanged(fn):
    """Gradient × input of ``f(x)`` under the rule equals the relevance ``f(x) · g`` arriving at its output, and the
    forward value is ``f(x)`` bit for bit (0 included)."""
    x = torch.tensor([-3.0, -0.75, 0.0, 0.3, 2.0], dtype=torch.float64, requires_grad=True)
    y = fn(x)
    out = identity_rule(x, y)
    assert torch.equal(out, y)
    g = torch.tensor([0.5, -1.0, 2.0, 3.0, 1.5], dtype=torch.float64)
    (out * g).sum().backward()
    torch.testing.assert_close(x.detach() * x.grad, y.detach() * g, rtol=1e-15, atol=0)


def test_layer_norm_rule_conserves_relevance_without_a_bias():
    """With the standard deviation held constant and no bias, a layer norm is linear and homogeneous in ``x``:
    gradient × input at its input sums to the relevance at its output."""
    torch.manual_seed(0)
    norm = nn.LayerNorm(8, dtype=torch.float64)
    nn.init.normal_(norm.weight)
    nn.init.zeros_(norm.bias)
    x = torch.randn(2, 8, dtype=torch.float64, requires_grad=True)
    y = norm(x)
    out = layer_norm_rule(norm, x, y)
    assert torch.equal(out, y)
    g = torch.randn(2, 8, dtype=torch.float64)
    (out * g).sum().backward()
    torch.testing.assert_close((x.detach() * x.grad).sum(-1), (y.detach() * g).sum(-1), rtol=1e-12, atol=1e-12)


# --- the whole model -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def converted(minilm):
    bert, tokenizer = minilm
    ids = tokenizer(TEXT)["input_ids"]
    window = 2 * len(ids)  # one-sided half-window = n: every token sees every token
    model = convert_bert_to_longformer(
        bert, tokenizer, max_length=window, attention_window=window, num_labels=2, seed=3
    )
    architecture(model).prepare(model)
    return bert, tokenizer, ids, freeze(model.double().eval())


@pytest.mark.parametrize("target", [0, 1])
def test_longformer_path_equals_the_bert_reference(converted, target):
    """The converted Longformer (blocked band, CLS global through the global rows) and the BERT it came from, both
    float64: AttnLRP of each logit is the same per token. Longformer rounds its attention scores to float32 for the
    softmax (as Hugging Face does), so the two agree to float32's precision, not float64's: measured, at most
    5e-8 relative to the largest relevance; a rule left out anywhere (one layer norm's variance, the tanh, the
    attention's ½) moves relevances by more than 1e-2 of it."""
    bert, tokenizer, ids, model = converted
    ref, ref_logit = reference_relevance(reference_bert(bert, model.classifier.out_proj), torch.tensor([ids]), target)
    res = attnlrp(model, prepare_inputs(model, tokenizer, ids), target)
    assert res.scores.shape == (len(ids),)
    scale = np.abs(ref).max()
    assert np.abs(res.scores - ref).max() <= 1e-6 * scale, np.abs(res.scores - ref).max() / scale
    assert res.explained == pytest.approx(ref_logit, rel=1e-6)
    assert res.delta == pytest.approx(res.explained - res.scores.sum(), abs=1e-12)


def test_what_is_not_conserved_is_what_the_biases_and_the_softmax_absorb(converted):
    """Conservation, term by term, on the reference: every rule but the softmax's conserves relevance (the layer norm
    with its deviation held, the identity rule, the halved products, sums), so the explained logit is the relevance
    at the embedding output plus what each bias absorbs (``b · ∂̃f/∂y`` at its layer's output) plus what each
    softmax absorbs (``Σ s·∂̃f/∂s − Σ x·∂̃f/∂x``, AttnLRP's non-conserving softmax rule). The production δ is the
    reference's by the parity test above."""
    global SOFTMAXES
    bert, tokenizer, ids, model = converted
    clf = reference_bert(bert, model.classifier.out_proj)
    biased = []

    def keep(module, args, output):
        if output.requires_grad:  # the embeddings' own layer norm lies below the embedding output
            output.retain_grad()
            biased.append((module, output))

    handles = [
        m.register_forward_hook(keep)
        for m in clf.modules()
        if isinstance(m, (nn.Linear, _ReferenceLayerNorm)) and getattr(m, "bias", m) is not None
    ]
    SOFTMAXES = []
    try:
        relevance, logit = reference_relevance(clf, torch.tensor([ids]), 1)
        absorbed_bias = sum(
            float((out.grad * (m.norm.bias if isinstance(m, _ReferenceLayerNorm) else m.bias)).sum())
            for m, out in biased
        )
        absorbed_softmax = sum(float((p.detach() * p.grad).sum() - (x.detach() * x.grad).sum()) for x, p in SOFTMAXES)
    finally:
        SOFTMAXES = None
        for h in handles:
            h.remove()
    assert len(biased) == 6 * (6 + 2) + 2  # six linear layers and two layer norms per layer; pooler, classifier
    total = relevance.sum() + absorbed_bias + absorbed_softmax
    assert total == pytest.approx(logit, rel=1e-9, abs=1e-12)
    assert abs(relevance.sum() - logit) > 1e-4  # not conserved without the two terms
    res = attnlrp(model, prepare_inputs(model, tokenizer, ids), 1)
    assert res.delta == pytest.approx(absorbed_bias + absorbed_softmax, rel=1e-5)


def test_rules_leave_the_forward_and_go_away(converted):
    _, tokenizer, ids, model = converted
    inputs = prepare_inputs(model, tokenizer, ids)
    with torch.no_grad():
        before = model(input_ids=inputs.input_ids, **inputs.forward_kwargs()).logits
        with attnlrp_rules(model):
            during = model(input_ids=inputs.input_ids, **inputs.forward_kwargs()).logits
        after = model(input_ids=inputs.input_ids, **inputs.forward_kwargs()).logits
    # the hooked global projections are applied as modules (the folded form skips them): the same numbers to rounding
    torch.testing.assert_close(during, before, rtol=1e-10, atol=0)
    assert torch.equal(before, after)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_blocked_band_equals_hugging_face_attention(minilm):
    """With a window narrower than the input (a real band, global rows computed from the projections), AttnLRP
    through attnlens's blocked attention equals AttnLRP through Hugging Face's own Longformer attention."""
    bert, tokenizer = minilm
    ids = tokenizer(TEXT * 2)["input_ids"]
    model = convert_bert_to_longformer(bert, tokenizer, max_length=128, attention_window=16, num_labels=3, seed=1)
    model = freeze(architecture(model).prepare(model).double().eval())
    inputs = prepare_inputs(model, tokenizer, ids)
    ours = attnlrp(model, inputs, 2)
    with huggingface_attention(model):
        theirs = attnlrp(model, inputs, 2)
    scale = np.abs(theirs.scores).max()
    assert np.abs(ours.scores - theirs.scores).max() <= 1e-6 * scale
    assert abs(ours.explained - theirs.explained) <= 1e-6 * abs(theirs.explained)


def test_block_sparse_blocks_equal_hugging_face_attention(minilm):
    """BigBird above its full-attention threshold: attnlens's block-sparse path and Hugging Face's give the same
    relevance (eval mode: no random blocks)."""
    bert, tokenizer = minilm
    ids = tokenizer(TEXT * 3)["input_ids"][:120]
    model = convert_bert_to_bigbird(bert, tokenizer, 128, 8, 1, 3, seed=2)
    model = freeze(BIGBIRD.prepare(model).double().eval())
    inputs = prepare_inputs(model, tokenizer, ids)
    ours = attnlrp(model, inputs, 1)
    model2 = convert_bert_to_bigbird(bert, tokenizer, 128, 8, 1, 3, seed=2)
    model2 = freeze(model2.double().eval())
    theirs = attnlrp(model2, inputs, 1)
    scale = np.abs(theirs.scores).max()
    assert np.abs(ours.scores - theirs.scores).max() <= 1e-6 * scale


def test_modernbert_local_and_global_layers_equal_the_reference():
    """ModernBERT (windowed and full layers, rotary positions, a gated MLP) under sdpa with attnlens's gradient
    factors equals the paper's rules written out on its eager form: the products of the attention and of the MLP's
    ``act(input) · gate`` halved where they are formed, the GELUs and layer norms as in the BERT reference."""
    model = freeze(architecture(tiny_modernbert("sdpa")).prepare(tiny_modernbert("sdpa")))
    reference = tiny_modernbert("eager")
    reference.set_attn_implementation("attnlrp_reference")
    _reference_norms(reference)
    for layer in reference.model.layers:
        layer.mlp.act = _ReferenceActivation(layer.mlp.act)
        layer.mlp.Wo.register_forward_pre_hook(lambda m, args: (_halved(args[0]),))
    reference.head.act = _ReferenceActivation(reference.head.act)
    freeze(reference)
    ids = torch.randint(5, 60, (1, 29), generator=torch.Generator().manual_seed(4))
    positions = torch.arange(29)[None]
    inputs = Inputs(
        input_ids=ids, baseline=torch.zeros_like(ids), attention_mask=torch.ones_like(ids), position_ids=positions
    )
    res = attnlrp(model, inputs, 2)
    ref, logit = reference_relevance(reference, ids, 2, position_ids=positions)
    assert np.abs(res.scores - ref).max() <= 1e-9 * np.abs(ref).max()
    assert res.explained == pytest.approx(logit, rel=1e-12)


def test_under_mixed_precision_on_the_cpu(minilm):
    """Under bf16 autocast (the CPU's stand-in for CUDA's fp16; the GPU benchmark runs fp16) every rule keeps its
    tensors' precision — the global rows' hooked projections, the layer norms autocast runs in another precision —
    and the relevance is a bf16 rounding of float32's: finite, the same order of tokens."""
    bert, tokenizer = minilm
    ids = tokenizer(TEXT * 2)["input_ids"]
    model = convert_bert_to_longformer(bert, tokenizer, max_length=128, attention_window=16, num_labels=2, seed=1)
    model = freeze(architecture(model).prepare(model).eval())
    inputs = prepare_inputs(model, tokenizer, ids)
    full = attnlrp(model, inputs, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        half = attnlrp(model, inputs, 1)
    assert np.isfinite(half.scores).all() and np.isfinite(half.delta)
    assert spearmanr(full.scores, half.scores).statistic > 0.9


# --- several documents per pass ----------------------------------------------------------------------------------

#: Per architecture, a float64 tiny classifier and the lengths of the documents explained together: bands with a
#: global token (Longformer), windowed and global layers (ModernBERT), causal layers with and without a window
#: (Llama, Gemma 3), blocks (BigBird: two documents of one length share a pass, the shorter one goes alone).
BATCHED = {
    "longformer": (lambda: tiny_longformer(hidden=16, heads=2, window=4, num_labels=3, double=True), [23, 9, 17]),
    "modernbert": (lambda: tiny_modernbert("sdpa"), [23, 9, 17]),
    "llama": (lambda: tiny_decoder("llama", "sdpa"), [17, 6, 11]),
    "gemma3": (lambda: tiny_decoder("gemma3", "sdpa"), [17, 6, 11]),
    "bigbird": (lambda: tiny_bigbird(), [150, 100, 150]),
}


def explorer_document(model, n: int, seed: int, target: int) -> Example:
    """A document of ``n`` random tokens prepared as :func:`~attnlens.attribution.ig.prepare_inputs` prepares one."""
    arch = architecture(model)
    ids = torch.randint(5, 50, (1, n), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    inputs = Inputs(
        input_ids=ids,
        baseline=torch.full_like(ids, model.config.pad_token_id),
        attention_mask=mask,
        position_ids=arch.position_ids(model.config, n),
        model_args=arch.forward_args(mask),
    )
    return Example(model, inputs, target)


@pytest.mark.parametrize("name", list(BATCHED))
def test_a_pass_over_several_documents_gives_each_what_it_gets_alone(name):
    """AttnLRP of documents of different lengths explained together (right-padded, one forward and one backward of
    the sum of their explained logits) equals each document explained alone: the same relevance, logit and δ. The
    models are float64 and a padded batch differs from a document alone only in its kernels' shapes, so the bound is
    float64 rounding over a few layers (1e-10 of the largest relevance; measured ≤ 5e-14), except Longformer's, which
    rounds its attention scores to float32 for the softmax (measured 2e-10; a last-bit flip there moves a relevance by
    about 1e-7 of the largest). The encoders' pad keys left unmasked move them by 5e-4 to 6e-4 of it (measured)."""
    build, lengths = BATCHED[name]
    model = build()
    model = freeze(architecture(model).prepare(model))
    examples = [explorer_document(model, n, seed, target=seed % 3) for seed, n in enumerate(lengths)]
    groups = document_groups(examples, documents=3)
    if architecture(model).pads_freely:
        assert groups == [[0, 2, 1]]  # longest first: the padding of a group stays small
    else:
        assert groups == [[0, 2], [1]]  # only documents of one length share a pass
        # why: padded to the longer one, the shorter document's last block is no longer global (measured 1.6e-6)
        mixed = REGISTRY["attnlrp"].batch_scorers[DOCUMENT](examples[:2])[1].scores
        alone = attnlrp(model, examples[1].inputs, examples[1].target).scores
        assert np.abs(mixed - alone).max() > 1e-7 * np.abs(alone).max()
    together = explain_together(examples, ["attnlrp", "saliency"], documents=3)
    bound = 1e-6 if name == "longformer" else 1e-10
    for x, got in zip(examples, together, strict=True):
        alone = attnlrp(model, x.inputs, x.target)
        scale = np.abs(alone.scores).max()
        assert got.scores["attnlrp"].shape == (x.n,)
        assert np.abs(got.scores["attnlrp"] - alone.scores).max() <= bound * scale
        assert got.explained["attnlrp"] == pytest.approx(alone.explained, rel=bound, abs=bound)
        assert got.delta["attnlrp"] == pytest.approx(got.explained["attnlrp"] - got.scores["attnlrp"].sum(), abs=1e-9)
        # the methods without a batched pass are run alone, as explain_document runs them
        np.testing.assert_array_equal(
            got.scores["saliency"], explain_document(model, x.inputs, x.target, ["saliency"]).scores["saliency"]
        )


def test_stacked_inputs_pad_every_per_token_argument():
    """A batch of a 5-token and a 3-token Longformer document: ids and baselines padded with the pad id, the mask and
    the global-attention mask with 0, the longest document's position ids for both; a forward argument that is not
    one value per token refuses to be padded."""
    model = tiny_longformer(num_labels=2)
    a, b = (explorer_document(model, n, seed=n, target=0).inputs for n in (5, 3))
    stacked = stack_inputs([a, b], pad_id=1)
    assert stacked.input_ids.shape == (2, 5) and stacked.input_ids[1, 3:].tolist() == [1, 1]
    assert stacked.attention_mask.tolist() == [[1] * 5, [1, 1, 1, 0, 0]]
    assert stacked.model_args["global_attention_mask"].tolist() == [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0]]
    assert torch.equal(stacked.position_ids[1], a.position_ids[0])
    odd = Inputs(a.input_ids, a.baseline, a.attention_mask, a.position_ids, {"bias": torch.zeros(1, 2, 5, 5)})
    with pytest.raises(ValueError, match="not one value per token"):
        stack_inputs([odd, odd], pad_id=1)


def test_documents_per_pass_are_as_configured_or_probed_with_copies_of_the_longest_document(monkeypatch):
    """``explanations.documents_per_pass`` as configured; ``auto`` off a card: one (a CPU is slower per document in a
    pass over several); on a card the probe runs each batched method on copies of the job's longest document; a job
    without a batched method explains its documents one by one."""
    model = freeze(architecture(m := tiny_longformer(num_labels=2)).prepare(m))
    examples = [explorer_document(model, n, seed=n, target=0) for n in (5, 9, 7)]
    assert documents_batch(4, ["attnlrp"], examples)[0] == 4
    assert documents_batch("auto", ["attnlrp", "saliency"], examples)[0] == 1
    assert documents_batch("auto", ["saliency"], examples)[0] == 1
    probed = []
    monkeypatch.setitem(REGISTRY["attnlrp"].batch_scorers, DOCUMENT, lambda xs: probed.append([x.n for x in xs]))

    def on_a_card(requested, device, probe, most, what, cpu):
        probe(1), probe(2)
        return 2, {"most": most, "cpu": cpu}

    monkeypatch.setattr(engine, "batch_size", on_a_card)
    assert documents_batch("auto", ["attnlrp"], examples) == (2, {"most": 3, "cpu": 1})
    assert probed == [[9], [9, 9]]
