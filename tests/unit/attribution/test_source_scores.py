"""A generated answer's attention and scores per source (:mod:`attnlens.attribution.source_scores`) against the dense
attention matrices and plain loops.

Bounds: the random layers are float64 and their dense matrices the same softmax of the same scores, so 1e-12
absolute (sums of at most 21 probabilities, averaged). Against Hugging Face's eager attention weights of a float64
causal language model: its softmax runs in float32 whatever the model's precision, so 1e-6 relative (as the
decoders' tests bound it) and 1e-9 absolute (float32's resolution near the smallest weights compared, ~1e-3).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers

from attnlens.attention import full
from attnlens.attention.full import QueryRows
from attnlens.attribution.source_scores import (
    AnswerForward,
    answer_gradient_x_input,
    answer_head_attention,
    answer_integrated_gradients,
    answer_rows,
    source_sums,
    top_k_pooled,
)
from attnlens.generation.ablation import answer_token_log_probs
from attnlens.models import architecture
from attnlens.tasks.contexts import PromptFormat
from benchmarks.beside import bench_attnlens, given_sources
from benchmarks.beside_tools import build, prompt_ids
from benchmarks.contexts import main as contexts_main
from benchmarks.contexts import on_card_row
from benchmarks.suites.contexts import bench_context_length, bench_leave_one_out
from benchmarks.suites.decoders import decoder_entries
from tests.support.dense import CAUSAL, random_causal
from tests.support.tiny_models import DECODER_WINDOW, tiny_decoder, tiny_modernbert

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


@pytest.mark.parametrize(("heads", "key_heads", "n", "length", "window"), CAUSAL)
def test_query_rows_are_their_rows_of_the_dense_matrix(heads, key_heads, n, length, window, monkeypatch):
    """A few queries against every key give the dense matrix's rows, in one block or (a tiny block budget) in
    blocks of one row."""
    layer = random_causal(heads, key_heads, length, length, window, seed=n)
    start, stop = length - 4, length - 1
    rows = QueryRows(layer.query[:, start:stop], layer.key, start, window)
    expected = layer.dense()[:, start:stop]
    for budget in (full.BLOCK_BYTES, 1):
        monkeypatch.setattr(full, "BLOCK_BYTES", budget)
        blocks = list(rows.blocks())
        assert len(blocks) == (1 if budget > 1 else 3)
        got = torch.cat([probs for _, _, probs in blocks], dim=1)
        assert blocks[0][0] == start and blocks[-1][1] == stop
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="outside"):
        QueryRows(layer.query[:, :3], layer.key, length - 2, window)


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen2", "qwen3", "gemma3"])
def test_a_causal_language_models_answer_rows_are_its_eager_attention_past_the_window(kind):
    """Every family's answer rows, per layer and head, on a prompt four times its window: Gemma 3's and Mistral's
    windows (and Qwen 2's windowed layer), Qwen 3's and Gemma 3's query/key norms, grouped keys, against Hugging
    Face's eager weights; a windowed layer's rows reach no key a window back."""
    model = tiny_decoder(kind, head="causal_lm")
    n = 4 * DECODER_WINDOW + 3
    ids = torch.randint(5, 60, (1, n), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        eager = model(input_ids=ids, output_attentions=True).attentions
    got = answer_head_attention(model, ids, 4)
    assert got.shape == (2, 4, n)
    windows = architecture(model).windows(model.config)
    for weights, row, window in zip(eager, got, windows, strict=True):
        expected = weights[0, :, n - 5 : n - 1].double()
        np.testing.assert_allclose(row, expected.mean(dim=1).numpy(), rtol=1e-6, atol=1e-9)
        first_reached = n - 5 - DECODER_WINDOW + 1
        assert (row[:, :first_reached].sum() == 0) == (window is not None)
        assert np.allclose(row.sum(axis=1), 1.0)


def test_source_sums_and_attntrace_pooling_are_the_loops():
    rng = np.random.default_rng(0)
    scores = rng.random(30)
    owner = rng.integers(-1, 5, 30)
    owner[owner == 3] = 2  # source 3 has no token
    sums = source_sums(scores, owner, 5)
    for k in range(1, 5):
        pooled = top_k_pooled(scores, owner, 5, k)
        for s in range(5):
            mine = sorted(scores[owner == s], reverse=True)
            assert sums[s] == pytest.approx(sum(mine), abs=1e-12)
            if mine:
                assert pooled[s] == pytest.approx(np.mean(mine[:k]), abs=1e-12)
            else:
                assert np.isnan(pooled[s]) and sums[s] == 0
    # pooling does not grow with a source's length where summing does: a long weak source against a short strong one
    owner, scores = np.array([0] * 10 + [1]), np.array([0.05] * 10 + [0.4])
    assert source_sums(scores, owner, 2).argmax() == 0 and top_k_pooled(scores, owner, 2, k=1).argmax() == 1


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="after a prompt"):
        answer_rows(0, 3)
    with pytest.raises(ValueError, match="a score per token"):
        source_sums(np.zeros(3), np.zeros(4, dtype=int), 2)
    with pytest.raises(ValueError, match="at least 1"):
        top_k_pooled(np.zeros(3), np.zeros(3, dtype=int), 1, k=0)
    with pytest.raises(ValueError, match="not a causal language model"):
        answer_head_attention(tiny_modernbert(), torch.ones(1, 6, dtype=torch.long), 2)


def _sequence(n: int = 14, answer: int = 3):
    ids = torch.randint(5, 60, (1, n), generator=torch.Generator().manual_seed(4))
    baseline = ids.clone()
    baseline[0, 1 : n - answer] = 0  # the context's tokens replaced by the pad token; the first and the answer kept
    return ids, baseline, answer


@pytest.mark.parametrize("kind", ["llama", "mistral", "qwen3"])
def test_the_explained_score_is_the_answers_log_probability(kind):
    model = tiny_decoder(kind, head="causal_lm")
    ids, _, answer = _sequence()
    forward = AnswerForward(model, ids[:, -answer:])
    n = ids.shape[1]
    with torch.no_grad():
        value = forward(ids, torch.ones_like(ids), torch.arange(n)[None]).item()
    (per_token,) = answer_token_log_probs(model, [ids[0].tolist()], [answer])
    assert value == pytest.approx(per_token.sum(), abs=1e-12)


@pytest.mark.parametrize("kind", ["llama", "qwen3", "gemma3"])
def test_gradient_x_input_is_the_embedding_outputs_times_their_gradient(kind):
    """Against autograd written out: the embedding output replaced by a leaf tensor, ``F`` differentiated."""
    model = tiny_decoder(kind, head="causal_lm")
    ids, _, answer = _sequence()
    got = answer_gradient_x_input(model, ids, answer)
    layer = architecture(model).embeddings(model)
    with torch.no_grad():
        e = layer(ids).clone()
    e.requires_grad_(True)
    handle = layer.register_forward_hook(lambda module, args, output: e)
    try:
        logits = model(input_ids=ids).logits[0].double()
    finally:
        handle.remove()
    n = ids.shape[1]
    log_p = torch.log_softmax(logits, -1)
    score = sum(log_p[t - 1, ids[0, t]] for t in range(n - answer, n))
    (grad,) = torch.autograd.grad(score, e)
    np.testing.assert_allclose(got, (e * grad)[0].sum(-1).detach().numpy(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["llama", "mistral"])
def test_integrated_gradients_of_the_answer_are_complete(kind):
    """IG's completeness: the scores add up to ``F(x) − F(x′)``; the δ shrinks as the steps grow (Gauss–Legendre on
    a smooth path of a float64 model; measured at 64 steps: 1.5e-7 (Llama) and 1.1e-8 (Mistral) of the gap, so
    1e-6 of it)."""
    model = tiny_decoder(kind, head="causal_lm")
    ids, baseline, answer = _sequence()
    coarse = answer_integrated_gradients(model, ids, baseline, answer, steps=8, batch=8)
    fine = answer_integrated_gradients(model, ids, baseline, answer, steps=64, batch=16)
    assert abs(fine.delta) <= 1e-6 * abs(fine.gap) and abs(fine.delta) < abs(coarse.delta)
    assert fine.scores.shape == (ids.shape[1],) and fine.scores.sum() == pytest.approx(
        fine.gap, abs=1e-6 * abs(fine.gap)
    )


@pytest.mark.parametrize("family", ["llama", "gemma3"])
def test_the_contexts_benchmark_measures_a_family_on_its_tiny_shape(family):
    """``make bench``'s long-context rows (``benchmarks/suites/contexts.py``) on the ``tiny`` shape at 96 tokens, in
    this process: every time and ratio is written, and leave-one-out from the shared prefix gives the recomputed
    numbers (float32: 1e-4 on log-probabilities of order 10, a few ulps of the logits through two layers)."""
    row = bench_context_length(family, "tiny", 96)
    timed = ("forward_s", "attention_s", "forward_backward_s", "attnlrp_s", "loo_recompute_s", "loo_shared_prefix_s")
    for field in timed:
        assert isinstance(row[field], float) and row[field] > 0, field
    assert row["tokens"] == 96 and row["dense_bytes"] == 2 * 6 * 96 * 96 * 4
    assert row["loo_largest_difference"] < 1e-4
    alone = bench_leave_one_out(family, "tiny", 96)  # ``--only leave_one_out``: the same fields, nothing else timed
    assert {k for k in alone if k.startswith("loo")} == {k for k in row if k.startswith("loo")}
    assert "forward_s" not in alone and alone["loo_largest_difference"] < 1e-4 and alone["loo_shared_prefix_cpu_s"] > 0


def test_the_beside_benchmark_scores_the_tools_prompt(tmp_path):
    """``python -m benchmarks.beside``'s halves on the ``tiny`` Llama at 256 tokens, here in the project's
    environment (the tools' own run theirs): the built prompt and answer come to the tokens asked for, attnlens forms
    the prompt context-cite's half forms (``ContextCiter._get_prompt_ids``: template, chat template, no special
    tokens) from the same sources, and each of attnlens's three rows is timed."""
    build(tmp_path, "LlamaConfig", decoder_entries("llama", "tiny", 256), 256, sources=16, answer=8)
    record = json.loads((tmp_path / "prompt.json").read_text(encoding="utf-8"))
    assert record["tokens"] == 256 and len(record["sources"]) == 16
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path)
    context, sources = given_sources(record["sources"])
    assert [context[s.start : s.end] for s in sources] == record["sources"]
    theirs = prompt_ids(tokenizer, context, record["question"])
    prompt = PromptFormat().build(tokenizer, context, record["question"])
    ours = tokenizer(prompt.text, add_special_tokens=False)["input_ids"]
    assert ours == theirs and len(theirs) == record["prompt_tokens"] == 248
    row = bench_attnlens(str(tmp_path), 8)
    assert row["tokens"] == 256 and row["surrogate"]["ablations"] == 8
    for part in ("surrogate", "attention", "gradient_x_input"):
        assert row[part]["s"] > 0 and row[part]["cpu_s"] >= 0, part


def test_the_contexts_benchmark_on_a_card_runs_in_process_and_refuses_without_one():
    """``python -m benchmarks.contexts --device cuda`` runs each row in this process (here on the CPU, the card's
    path but for its clock), and says in one line that there is no card where there is none."""
    row = on_card_row("leave_one_out", "llama", "tiny", 96, "cpu", 96)
    assert row["loo_largest_difference"] < 1e-4 and row["loo_shared_prefix_s"] > 0
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit, match="--device: no CUDA device is visible here"):
            contexts_main(["--device", "cuda", "--out", "unused"])
