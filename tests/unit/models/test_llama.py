"""The decoders behind the model seam (Llama, Mistral, Qwen 2 and 3, Gemma 3): layers read as causal queries and
keys (sliding windows in every Mistral layer, in some Qwen 2 and Gemma 3 layers; key/value heads shared by groups of
query heads; Qwen 3's and Gemma 3's query/key norms, Gemma 3's query scale), against Hugging Face's eager attention
weights (float64), the same numbers under eager and sdpa, every summary against the dense computation, head
importance with shared key/value heads, value vectors per query head, IG's completeness, and AttnLRP's rules on
RMSNorm and the gated MLP."""

from __future__ import annotations

import math

import pytest
import torch
import transformers

from attnlens.attention.band import received_attention, topk_attended, topk_attending
from attnlens.attention.full import FullLayer
from attnlens.attention.weighted import rollout, value_norm_received, value_norms
from attnlens.attribution.explanations import attention_pass
from attnlens.attribution.ig import Inputs, attribute_example, freeze
from attnlens.attribution.lrp import attnlrp, attnlrp_rules
from attnlens.classifier.importance import estimate_head_importance, taylor_terms
from attnlens.errors import InputError
from attnlens.models import ARCHITECTURES, architecture, forward_bands
from attnlens.models import DECODERS as CLASSES
from attnlens.models.checkpoints import agree_on_padding, load_tokenizer, packaged_model_dir
from attnlens.models.gemma3 import GEMMA3
from attnlens.models.llama import LLAMA, MISTRAL
from attnlens.models.loading import build_base_model, source_config
from attnlens.models.qwen import QWEN2, QWEN3
from attnlens.pipeline.config import ModelConfig
from benchmarks.suites.decoders import bench_decoder_length
from tests.support.dense import assert_grad_attention_is_dense, dense_rollout
from tests.support.tiny_models import DECODER_HEADS as HEADS
from tests.support.tiny_models import DECODER_KV_HEADS as KV_HEADS
from tests.support.tiny_models import DECODER_WINDOW as WINDOW
from tests.support.tiny_models import tiny_decoder

N = 17
#: Every decoder family, its architecture and its two layers' windows in :func:`tiny_decoder`.
FAMILIES = {
    "llama": (LLAMA, [None, None]),
    "mistral": (MISTRAL, [WINDOW, WINDOW]),
    "qwen2": (QWEN2, [None, WINDOW]),  # use_sliding_window from max_window_layers = 1 on
    "qwen3": (QWEN3, [None, None]),
    "gemma3": (GEMMA3, [WINDOW, None]),  # a local layer, then a global one
}
KINDS = list(FAMILIES)
WINDOWED = [kind for kind, (_, windows) in FAMILIES.items() if any(windows)]


def _batch(pad: int = 6) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 60, (2, N), generator=g)
    mask = torch.ones(2, N, dtype=torch.long)
    mask[1, N - pad :] = 0
    ids[1, N - pad :] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _eager_alone(model, item: dict[str, torch.Tensor]) -> tuple:
    with torch.no_grad():
        return model(**item, output_attentions=True).attentions


def _dense_eager(model, batch, item: int) -> list[torch.Tensor]:
    """Each layer's eager attention weights of one example computed alone (its real tokens), padded to ``N``."""
    length = int(batch["attention_mask"][item].sum())
    eager = _eager_alone(model, {k: v[item : item + 1, :length] for k, v in batch.items()})
    out = []
    for weights in eager:
        a = torch.zeros(HEADS, N, N, dtype=torch.float64)
        a[:, :length, :length] = weights[0]
        out.append(a)
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_registered_by_model_type(kind):
    model = tiny_decoder(kind)
    arch = architecture(model)
    assert arch is FAMILIES[kind][0] and arch.name == kind
    assert set(arch.embedding_layers(model)) == {"word"}
    assert [arch.group_heads(model.config, g) for g in arch.head_group_names] == [HEADS, KV_HEADS, KV_HEADS, HEADS]
    assert arch.windows(model.config) == FAMILIES[kind][1]
    described = arch.describe(model.config)
    assert "4 query heads sharing 2 key/value heads" in described
    assert ("sliding window of 5 keys" in described) == (kind in WINDOWED)
    assert ("in 1 of 2 layers" in described) == (kind in ("qwen2", "gemma3"))


@pytest.mark.parametrize("kind", KINDS)
def test_layers_read_as_causal_queries_and_keys_equal_eager_attention_weights(kind):
    """A padded batch read by attnlens equals each example's eager attention weights computed alone (Hugging Face's
    eager softmax runs in float32 whatever the model's precision, as do Qwen 3's and Gemma 3's query/key norms:
    1e-6 relative); keys stay per key/value head, never repeated."""
    model = tiny_decoder(kind)
    batch = _batch()
    with torch.no_grad():
        _, layers = architecture(model).run(model, batch, attentions=True)
    for item in range(2):
        for layer, expected in zip(layers[item], _dense_eager(model, batch, item), strict=True):
            assert isinstance(layer, FullLayer) and layer.causal and layer.key_heads == KV_HEADS
            torch.testing.assert_close(layer.dense(), expected, rtol=1e-6, atol=1e-7)
        assert [layer.window for layer in layers[item]] == FAMILIES[kind][1]
    for layer in layers[0]:  # a window binds: a query attends to no key 5 or more positions back
        assert (layer.window is not None) == (not bool(layer.dense().tril(-WINDOW).any()))


@pytest.mark.parametrize("kind", KINDS)
def test_a_causal_language_model_is_read_through_the_same_seam(kind):
    """A family's ``…ForCausalLM`` (the model that generates an answer): found by its ``model_type`` as the
    classifier is, the same decoder stack under its head, next-token logits over the vocabulary, and its layers read
    as causal queries and keys equal to each example's eager attention weights (the classifier's bound above)."""
    model = tiny_decoder(kind, head="causal_lm")
    arch = architecture(model)
    assert arch is FAMILIES[kind][0] and type(model).__name__ == arch.head_class("causal_lm")
    assert arch.encoder(model) is model.model
    batch = _batch()
    with torch.no_grad():
        out, layers = arch.run(model, batch, attentions=True)
    assert out.logits.shape == (2, N, 60)
    for item in range(2):
        for layer, expected in zip(layers[item], _dense_eager(model, batch, item), strict=True):
            assert isinstance(layer, FullLayer) and layer.causal and layer.key_heads == KV_HEADS
            torch.testing.assert_close(layer.dense(), expected, rtol=1e-6, atol=1e-7)


def test_an_encoder_has_no_causal_language_model():
    with pytest.raises(InputError, match="Hugging Face has no Longformer causal-lm model"):
        ARCHITECTURES["longformer"].head_class("causal_lm")


@pytest.mark.parametrize("kind", WINDOWED)
def test_eager_attention_is_nan_on_padded_windowed_batches_so_prepare_runs_sdpa(kind):
    batch = _batch()
    arch = FAMILIES[kind][0]
    with torch.no_grad():
        if FAMILIES[kind][1][0]:  # Hugging Face's eager path, where a windowed layer's NaN reaches a later layer
            assert torch.isnan(tiny_decoder(kind)(**batch).logits[1]).all()
        prepared = arch.prepare(tiny_decoder(kind))
        assert prepared.config._attn_implementation == "sdpa" and torch.isfinite(prepared(**batch).logits).all()
    assert LLAMA.prepare(tiny_decoder("llama")).config._attn_implementation == "eager"  # no window: kept


@pytest.mark.parametrize("kind", KINDS)
def test_eager_and_sdpa_give_the_same_numbers(kind):
    # unpadded where windowed: Hugging Face's eager path is NaN on padded rows there
    batch = _batch() if kind not in WINDOWED else {k: v[:1] for k, v in _batch().items()}
    with torch.no_grad():
        a_out, a = architecture(tiny_decoder(kind)).run(tiny_decoder(kind), batch, attentions=True)
        b_out, b = architecture(tiny_decoder(kind)).run(tiny_decoder(kind, "sdpa"), batch, attentions=True)
    # eager's softmax is float32, sdpa's float64: the logits a few float32 roundings apart
    torch.testing.assert_close(a_out.logits, b_out.logits, rtol=1e-6, atol=1e-8)
    # the first layer is read from the same embeddings: equal bit for bit; later ones from hidden states as close
    # as the logits
    item = len(a) - 1  # the padded example where there is one
    torch.testing.assert_close(a[item][0].dense(), b[item][0].dense(), rtol=0, atol=0)
    for x, y in zip(a[item][1:], b[item][1:], strict=True):
        torch.testing.assert_close(x.dense(), y.dense(), rtol=1e-6, atol=1e-8)


def test_flex_attention_gives_the_same_numbers():
    """A checkpoint run with FlexAttention (compiled; float32, the precision it is used in) is read as under sdpa: the
    sliding window is a block mask there, and attnlens reads the layers from their queries and keys either way
    (float32 roundings of the hidden states between the two kernels: 1e-5)."""
    batch = {k: v[:1] for k, v in _batch().items()}
    with torch.no_grad():
        a_out, a = MISTRAL.run(tiny_decoder("mistral", "flex_attention").float(), batch, attentions=True)
        b_out, b = MISTRAL.run(tiny_decoder("mistral", "sdpa").float(), batch, attentions=True)
    torch.testing.assert_close(a_out.logits, b_out.logits, rtol=1e-5, atol=1e-6)
    for x, y in zip(a[0], b[0], strict=True):
        assert x.window == y.window == WINDOW
        torch.testing.assert_close(x.dense(), y.dense(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["mistral", "qwen3", "gemma3"])
def test_summaries_and_value_vectors_equal_the_dense_computation(kind):
    """Received attention, top-k, value norms (each query head's value vector its key/value head's), rollout and
    gradient-weighted attention of a padded example against its eager matrices (float32 softmaxes: 1e-6)."""
    arch = FAMILIES[kind][0]
    model = arch.prepare(tiny_decoder(kind))  # sdpa where windowed: eager's padded rows are NaN
    freeze(model)
    batch = {k: v[1:] for k, v in _batch().items()}
    length = int(batch["attention_mask"].sum())
    dense = _dense_eager(tiny_decoder(kind), {k: torch.cat([v, v]) for k, v in batch.items()}, 0)
    layers, hidden = attention_pass(model, batch)
    for layer, a in zip(layers, dense, strict=True):
        torch.testing.assert_close(received_attention(layer).double(), a.sum(1), rtol=1e-6, atol=1e-7)
        _, val = topk_attended(layer, 3)
        torch.testing.assert_close(val[:, :length], a[:, :length].topk(3, -1).values, rtol=1e-6, atol=1e-7)
        _, val = topk_attending(layer, 3)
        ref = a.transpose(1, 2)[:, :length].topk(3, -1).values
        torch.testing.assert_close(val[:, :length], ref, rtol=1e-6, atol=1e-7)
    group = HEADS // KV_HEADS
    for block, layer, h, a in zip(model.model.layers, layers, hidden, dense, strict=True):
        value = arch.value_projections(block)["local"]
        v = value(h).view(N, HEADS, -1).transpose(0, 1)
        own = block.self_attn.v_proj(h).view(N, KV_HEADS, -1).transpose(0, 1)
        for head in range(HEADS):  # query head h reads key/value head h // group
            torch.testing.assert_close(v[head], own[head // group], rtol=0, atol=0)
        norms = value_norms(h, value, block.self_attn.o_proj, HEADS)
        torch.testing.assert_close(
            value_norm_received(layer, norms, norms), (a * norms[:, None]).sum(1), rtol=1e-6, atol=1e-7
        )
    # the classifier reads the last real token
    torch.testing.assert_close(rollout(layers, length - 1), dense_rollout(dense, length - 1), rtol=1e-6, atol=1e-7)
    assert_grad_attention_is_dense(model, batch, dense, target=2, atol=1e-7)


def test_head_importance_shares_a_key_value_head_among_its_query_heads():
    """The Taylor terms of ``k_proj`` and ``v_proj`` are per key/value head, shared equally by the query heads that
    read it: each of the two query heads of a group gets half, and a layer's total is its parameters'."""
    model = tiny_decoder("llama")
    batch = {k: v[:1] for k, v in _batch().items()}
    batch["labels"] = torch.tensor([1])
    model.zero_grad()
    model(**batch).loss.backward()
    terms = taylor_terms(model, HEADS)
    for layer, block in enumerate(model.model.layers):
        for name, linear in (("key", block.self_attn.k_proj), ("value", block.self_attn.v_proj)):
            prod = (linear.weight.grad * linear.weight).reshape(KV_HEADS, -1)
            sq, lin = terms[name]
            for head in range(HEADS):
                torch.testing.assert_close(sq[layer, head], (prod[head // 2] ** 2).sum() / 2, rtol=1e-12, atol=0)
                torch.testing.assert_close(lin[layer, head], prod[head // 2].sum() / 2, rtol=1e-12, atol=0)
            torch.testing.assert_close(lin[layer].sum(), prod.sum(), rtol=1e-12, atol=1e-15)
    out = estimate_head_importance(model, [batch])
    assert out["fixed_local"].shape == (2, HEADS) and bool((out["fixed_local"] > 0).all())


@pytest.mark.parametrize(
    ("kind", "implementation"), [("mistral", "eager"), ("mistral", "sdpa"), ("qwen3", "sdpa"), ("gemma3", "sdpa")]
)
def test_integrated_gradients_are_complete(kind, implementation):
    """Completeness at the embedding output (Gemma 3's scaled by sqrt(hidden): the baseline is the pad token's
    scaled embedding), from a drawn pad row (from a zero one Qwen 3 and Gemma 3 stay 14 % and 33 % incomplete at
    256 steps: :mod:`attnlens.models.llama.scratch_decoder`)."""
    model = tiny_decoder(kind, implementation)
    ids = torch.tensor([[1, 17, 23, 9, 41, 5, 33, 2]])
    baseline = ids.clone()
    baseline[0, 1:-1] = 0
    inputs = Inputs(ids, baseline, torch.ones_like(ids), FAMILIES[kind][0].position_ids(model.config, 8), {})
    res = attribute_example(model, inputs, 0, min_steps=64, max_steps=256, tolerance=0.01, internal_batch_size=16)
    assert abs(res.delta) <= 0.01 * abs(res.gap) + 1e-9 and res.scores.shape == (8,)


def test_attnlrp_holds_rmsnorms_scale_and_halves_the_gated_product():
    """Under AttnLRP's rules an RMSNorm's gradient is ``w / rms(x)`` with ``rms`` held (the identity rule on
    ``y = x · w / rms(x)``), the gated MLP's ``act(gate) · up`` passes half its gradient (the uniform rule at
    ``down_proj``'s input), and the forward is unchanged; a whole decoder's relevance is one finite score a token.
    (Parity with the method's authors' code, lxt, is the issue's next step.)"""
    model = tiny_decoder("llama")
    norm = model.model.layers[0].input_layernorm
    x = torch.randn(1, 3, 24, dtype=torch.float64, requires_grad=True)
    with attnlrp_rules(model):
        y = norm(x)
        (grad,) = torch.autograd.grad(y.sum(), x)
    rms = x.detach().pow(2).mean(-1, keepdim=True).add(norm.variance_epsilon).sqrt()
    # Hugging Face's RMSNorm normalises in float32 whatever the input's precision: the held scale is float32's
    torch.testing.assert_close(grad, (norm.weight / rms).expand_as(x), rtol=1e-6, atol=0)
    torch.testing.assert_close(y, norm(x), rtol=0, atol=0)
    mlp = model.model.layers[0].mlp
    h = torch.randn(1, 3, 24, dtype=torch.float64, requires_grad=True)
    with attnlrp_rules(model):
        out = mlp(h)
        (ruled,) = torch.autograd.grad(out.sum(), h)
    gate, up = mlp.gate_proj(h.detach()), mlp.up_proj(h.detach())
    silu = torch.nn.functional.silu(gate)
    # uniform rule on the product, identity rule on SiLU: ∂̃/∂h = ½ (W_gate^T (s(g)/g · u · c) + W_up^T (s(g) · c))
    upstream = torch.ones(1, 3, 24, dtype=torch.float64) @ mlp.down_proj.weight  # ∂sum/∂(product)
    expected = 0.5 * ((silu / gate * up * upstream) @ mlp.gate_proj.weight + (silu * upstream) @ mlp.up_proj.weight)
    torch.testing.assert_close(ruled, expected, rtol=1e-6, atol=1e-7)
    ids = torch.tensor([[1, 17, 23, 9, 41, 5, 33, 2]])
    inputs = Inputs(ids, ids, torch.ones_like(ids), LLAMA.position_ids(model.config, 8), {})
    relevance = attnlrp(model, inputs, 1)
    assert relevance.scores.shape == (8,) and bool(torch.isfinite(torch.as_tensor(relevance.scores)).all())


@pytest.mark.parametrize(("kind", "per_layer"), [("llama", 2), ("qwen3", 4), ("gemma3", 6)])
def test_attnlrp_holds_the_scale_of_every_rmsnorm(kind, per_layer):
    """Every RMSNorm is in the wiring, whatever the family calls it: a layer's two (Llama), with the per-head query
    and key norms (Qwen 3), and Gemma 3's four around attention and MLP with its query/key norms; and the final
    one. Gemma's norm multiplies by ``1 + w``: under the identity rule its gradient is ``(1 + w) / rms(x)``."""
    model = tiny_decoder(kind)
    wiring = FAMILIES[kind][0].relevance_wiring(model)
    norms = [m for m in wiring.activations if "RMSNorm" in type(m).__name__]
    assert len(norms) == 2 * per_layer + 1
    assert len(wiring.products) == 2 and all(m.in_features == 40 for m in wiring.products)  # down_proj
    if kind != "gemma3":
        return
    norm = model.model.layers[0].pre_feedforward_layernorm
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(1, 3, 24, dtype=torch.float64, requires_grad=True)
    with attnlrp_rules(model):
        (grad,) = torch.autograd.grad(norm(x).sum(), x)
    rms = x.detach().pow(2).mean(-1, keepdim=True).add(norm.eps).sqrt()
    torch.testing.assert_close(grad, ((1 + norm.weight) / rms).expand_as(x), rtol=1e-6, atol=0)  # float32 norm


# --- what a decoder checkpoint may lack or set: one line each, before anything runs ------------------------------


def _tokenizer_without_pad():
    tokenizer = load_tokenizer(packaged_model_dir())
    tokenizer.pad_token = None
    assert tokenizer.pad_token_id is None
    return tokenizer


def test_a_decoder_without_a_pad_token_pads_with_its_config_or_its_end_token_or_is_refused():
    """A classifier's config names its pad token: the tokenizer takes it. A pretrained checkpoint with none pads
    with its end-of-sequence token. A classifier with none is refused in one line."""
    model, tokenizer = tiny_decoder("llama"), _tokenizer_without_pad()
    agree_on_padding(model, tokenizer, "saved/clf", "classifier")  # config.pad_token_id = 0
    assert tokenizer.pad_token_id == 0 == model.config.pad_token_id
    model.config.pad_token_id = None
    tokenizer = _tokenizer_without_pad()
    with pytest.raises(InputError, match=r"hub/base: pad_token_id: expected a pad or an end-of-sequence token"):
        agree_on_padding(model, tokenizer, "hub/base", "pretrained")  # a BERT tokenizer has no end token
    tokenizer.eos_token = "[SEP]"
    agree_on_padding(model, tokenizer, "hub/base", "pretrained")
    assert tokenizer.pad_token == tokenizer.eos_token and model.config.pad_token_id == tokenizer.eos_token_id
    model.config.pad_token_id = None
    with pytest.raises(
        InputError,
        match=r"^saved/clf: pad_token_id: expected a pad token \(config.json pad_token_id "
        r"or the tokenizer's pad_token\)",
    ) as err:
        agree_on_padding(model, _tokenizer_without_pad(), "saved/clf", "classifier")
    assert "\n" not in str(err.value)


def test_gemma3_settings_that_change_what_attention_is_are_refused_before_anything_runs(tmp_path):
    model = tiny_decoder("gemma3")
    model.config.attn_logit_softcapping = 50.0
    model.save_pretrained(tmp_path / "capped")
    with pytest.raises(InputError, match=r"capped: config.json attn_logit_softcapping: expected null .* got 50.0"):
        source_config(str(tmp_path / "capped"), "classifier")
    config = tiny_decoder("gemma3").config
    config.use_bidirectional_attention = True
    with pytest.raises(InputError, match=r"use_bidirectional_attention: expected false"):
        GEMMA3.check(config, "x")
    with pytest.raises(
        InputError,
        match=r"data.task: expected a task Gemma 3 has a head for: Hugging Face has no "
        r"Gemma 3 question-answering model",
    ):
        GEMMA3.head_class("question_answering")
    assert QWEN3.head_class("question_answering") == "Qwen3ForQuestionAnswering"


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_a_question_answering_head_reads_the_same_decoder_stack(kind):
    """Hugging Face's decoder question answerers keep the stack under ``transformer``, its classifiers under
    ``model``: the seam finds it under either (``base_model``), and the layers read the same."""
    classifier = tiny_decoder(kind)
    qa_class = getattr(transformers, FAMILIES[kind][0].head_class("question_answering"))
    qa = qa_class(classifier.config).eval().double()
    qa.base_model.load_state_dict(classifier.base_model.state_dict())
    arch = architecture(qa)
    assert arch.encoder(qa) is qa.transformer and len(arch.head_groups(qa)) == 2
    with torch.no_grad():
        _, a = arch.run(qa, _batch(), attentions=True)
        _, b = arch.run(classifier, _batch(), attentions=True)
    for x, y in zip(a[1], b[1], strict=True):
        torch.testing.assert_close(x.dense(), y.dense(), rtol=0, atol=0)


def test_a_window_that_reaches_past_every_input_is_said_in_the_run_notes():
    config = tiny_decoder("gemma3").config  # a window of 5 keys in its local layer
    assert GEMMA3.reading_notes(config, [9, 6]) == []
    (note,) = GEMMA3.reading_notes(config, [5, 3])
    assert note.startswith("Gemma 3's sliding window (5 keys) reaches back past the first token of every input")
    assert LLAMA.reading_notes(tiny_decoder("llama").config, [3]) == []  # no window


@pytest.mark.parametrize("kind", ["qwen3", "gemma3"])
def test_from_config_draws_each_family_from_the_packaged_sizes(kind):
    model, _ = build_base_model(ModelConfig(source="from_config", architecture=kind, max_length=128), num_labels=4)
    config = model.config
    assert type(model).__name__ == CLASSES[kind][1] and architecture(model).name == kind
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (6, 12, 4)
    windows = architecture(model).windows(config)
    assert windows == ([9] * 5 + [None] if kind == "gemma3" else [None] * 6)  # window 16: 16 / 2 + 1 keys back
    if kind == "gemma3":
        assert config.query_pre_attn_scalar == config.head_dim == 32
    pad = model.get_input_embeddings().weight[config.pad_token_id]
    assert bool(pad.abs().sum() > 0)  # drawn, not the padding_idx zero row (IG's baseline: see scratch)


def test_forward_bands_reads_every_layer_as_a_causal_layer():
    layers = forward_bands(tiny_decoder("mistral", "sdpa"), {k: v[:1] for k, v in _batch().items()})
    assert [(type(x).__name__, x.causal, x.window) for x in layers] == [("FullLayer", True, WINDOW)] * 2


# --- the .test run with a Mistral drawn from its configuration (conftest.architecture_grid) ---------------------


@pytest.mark.parametrize("family", ["llama", "mistral", "gemma3"])
def test_the_decoders_benchmark_measures_a_family_on_its_tiny_shape(family):
    """``make bench``'s decoder rows (``benchmarks/suites/decoders.py``) on the suite's ``tiny`` shape at 64 tokens,
    in this process: every time and ratio is written, the probabilities' floor beside the summaries, and Hugging
    Face's eager attention ran (its outputs fit)."""
    row = bench_decoder_length(family, "tiny", 64)
    for field in (
        "forward_s",
        "probabilities_s",
        "summaries_s",
        "forward_backward_s",
        "attnlrp_s",
        "huggingface_attentions_s",
        "probabilities_over_forward",
        "summaries_over_forward",
        "attnlrp_over_forward_backward",
    ):
        assert isinstance(row[field], float) and row[field] >= 0, field
    assert row["tokens"] == 64 and "causal" in row["describe"]
    assert math.isfinite(row["attnlrp_conservation_delta"])
