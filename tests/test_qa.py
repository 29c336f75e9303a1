"""Extractive question answering's building blocks (issue 51, item 3): SQuAD's metrics, the span readout and its
decoder, answers found in their context, the generated corpus, the three architectures' question-answering heads
through the model seam with a question's tokens global, the attention a question's and an answer's tokens pay,
and Integrated Gradients of a span score."""

from __future__ import annotations

import math
import string
from collections import Counter

import numpy as np
import pytest
import torch
import transformers
from helpers import tiny_longformer
from test_attention import _independent_attention, dense_reference
from test_bigbird import tiny_bigbird
from test_modernbert import tiny_modernbert
from transformers import AutoTokenizer

from attnlens.attention.band import attention_from
from attnlens.attribution.ig import integrate
from attnlens.config import SyntheticConfig
from attnlens.corpus import QA_ANSWER, QA_DISTRACTOR, QA_SUPPORTING, generate_qa_corpus
from attnlens.errors import InputError
from attnlens.models import architecture, forward_bands
from attnlens.models.loading import packaged_model_dir
from attnlens.tasks.qa import (
    best_span,
    check_answers,
    exact_match,
    normalize_answer,
    qa_metrics,
    span_index,
    span_of,
    span_scores,
    token_f1,
    token_span,
)

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


# --- SQuAD's metrics --------------------------------------------------------------------------------------


def _squad_f1(prediction: str, truth: str) -> float:
    """The official SQuAD v1.1 evaluation script's ``f1_score``, restated from its published definition: the
    normalisation (lower case, punctuation, articles, white space) and a bag-of-words F1."""

    def norm(s: str) -> list[str]:
        s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
        return " ".join(w for w in s.split() if w not in ("a", "an", "the")).split()

    p, t = norm(prediction), norm(truth)
    same = sum((Counter(p) & Counter(t)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(t)
    return 2 * precision * recall / (precision + recall)


def test_squad_metrics_by_hand_and_against_the_official_definitions():
    assert normalize_answer("  The Eiffel-Tower,  in PARIS! ") == "eiffeltower in paris"
    assert exact_match("the Eiffel Tower.", ["Eiffel Tower", "Paris"]) == 1.0
    assert exact_match("Eiffel", ["Eiffel Tower"]) == 0.0
    # "Ada Byrne was" against "Ada Byrne": 2 common words, precision 2/3, recall 1 → F1 = 0.8 exactly
    assert token_f1("Ada Byrne was", ["Ada Byrne"]) == pytest.approx(0.8, abs=1e-15)
    assert token_f1("an", ["the"]) == 0.0  # both normalise to no word
    rng = np.random.default_rng(0)
    words = ["a", "the", "Falcon", "falcon,", "Ada", "Byrne", "1971", "Lund", "lab", "an"]
    for _ in range(200):
        guess = " ".join(rng.choice(words, rng.integers(0, 5)))
        truths = [" ".join(rng.choice(words, rng.integers(1, 5))) for _ in range(rng.integers(1, 3))]
        assert token_f1(guess, truths) == pytest.approx(max(_squad_f1(guess, t) for t in truths), abs=1e-15)
    metrics = qa_metrics(["Ada Byrne", "Lund", "x"], [["Ada Byrne"], ["the Lund lab"], ["y"]], [False, False, True])
    assert metrics["n_scored"] == 2 and metrics["n_truncated"] == 1  # the cut answer is not scored as a miss
    assert metrics["exact_match"] == 0.5 and metrics["f1"] == pytest.approx((1 + 2 * (1 / 2) / (1 + 1 / 2)) / 2)


# --- spans -----------------------------------------------------------------------------------------------


def test_span_scores_lay_out_every_span_and_the_decoder_finds_the_best_allowed_one():
    rng = np.random.default_rng(1)
    n, L = 17, 5
    start, end = rng.normal(size=(2, n)), rng.normal(size=(2, n))
    scores = span_scores(start, end, L)
    assert scores.shape == (2, n * L)
    torch_scores = span_scores(torch.from_numpy(start), torch.from_numpy(end), L).numpy()
    assert np.array_equal(scores, torch_scores)  # one addition per span on both sides: the same bits
    for s in range(n):
        for e in range(n):
            if 0 <= e - s < L:
                assert span_of(span_index(s, e, L), L) == (s, e)
                assert scores[1, span_index(s, e, L)] == start[1, s] + end[1, e]
    assert np.isneginf(scores[0, span_index(n - 1, n - 1, L) + 1])  # a span past the last token
    allowed = np.zeros(n, dtype=bool)
    allowed[4:9] = allowed[11:16] = True  # the context: two runs of tokens, a gap between them
    s, e, best = best_span(start[0], end[0], allowed, L)
    brute = max((start[0, a] + end[0, b], a, b) for a in range(n) for b in range(a, min(n, a + L))
                if allowed[a : b + 1].all())  # fmt: skip
    assert (best, s, e) == brute
    with pytest.raises(ValueError, match="not one of"):
        span_index(3, 3 + L, L)


def test_an_answer_is_found_on_its_tokens_and_a_cut_one_is_none():
    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_dir()))
    question = "Who designed the compiler used at the Lund lab?"
    context = "The compiler used at the Lund lab is known as Falcon. Much later: Falcon was designed by Ada Byrne."
    answer_start = context.index("Ada Byrne")
    for max_length, found in ((64, True), (24, False)):
        enc = tokenizer(question, context, truncation="only_second", max_length=max_length,
                        return_offsets_mapping=True)  # fmt: skip
        is_context = np.array([s == 1 for s in enc.sequence_ids()])
        span = token_span(enc["offset_mapping"], is_context, answer_start, answer_start + len("Ada Byrne"))
        if not found:
            assert span is None  # truncation cut the answer away
            continue
        s, e = span
        assert tokenizer.decode(enc["input_ids"][s : e + 1]) == "ada byrne"  # the uncased tokenizer's words


# --- answers in their context ----------------------------------------------------------------------------


def test_answers_are_checked_against_their_context_in_one_line():
    ctx = ["Falcon was designed by Ada Byrne.", "Heron is written in OCaml."]
    questions = ["Who designed Falcon?", "Which language is Heron written in?"]
    hf = [{"text": ["Ada Byrne"], "answer_start": [23]}, {"text": ["OCaml"], "answer_start": [20]}]
    squad = [[{"text": "Ada Byrne", "answer_start": 23}], [{"text": "OCaml", "answer_start": 20}]]
    assert check_answers(questions, ctx, hf, ["a", "b"], "qa.jsonl") == [[("Ada Byrne", 23)], [("OCaml", 20)]]
    assert check_answers(questions, ctx, squad, ["a", "b"], "qa.jsonl") == [[("Ada Byrne", 23)], [("OCaml", 20)]]
    bad = {
        "answers: expected each answer's text in the context at its answer_start, row 2 (example 'b')": (
            questions, ctx, [hf[0], {"text": ["OCaml"], "answer_start": [19]}]),
        "question: expected a question in every row, row 1 (example 'a')": (["  ", questions[1]], ctx, hf),
        "answers: expected at least one answer, row 1": (questions, ctx, [{"text": [], "answer_start": []}, hf[1]]),
        "answers: expected answer_start a character offset": (
            questions, ctx, [[{"text": "Ada Byrne", "answer_start": "23"}], squad[1]]),
        "answers: expected an answer text that is not empty": (
            questions, ctx, [[{"text": "", "answer_start": 0}], squad[1]]),
        "answers: expected {'text': [...], 'answer_start': [...]}": (questions, ctx, ["Ada Byrne", squad[1]]),
    }  # fmt: skip
    for expected, (q, c, a) in bad.items():
        with pytest.raises(InputError) as err:
            check_answers(q, c, a, ["a", "b"], "qa.jsonl")
        assert str(err.value).startswith("qa.jsonl: ") and expected in str(err.value), str(err.value)


# --- the generated corpus --------------------------------------------------------------------------------


def test_the_generated_questions_need_a_sentence_far_from_their_answer():
    cfg = SyntheticConfig(n_documents=30, min_words=120, max_words=200, n_evidence=6, n_distractors=3,
                          label_noise=0.05)  # fmt: skip
    corpus = generate_qa_corpus(cfg, seed=3)
    again = generate_qa_corpus(cfg, seed=3)
    assert corpus.documents.equals(again.documents) and corpus.rationales.equals(again.rationales)
    docs, spans = corpus.documents, corpus.rationales
    assert list(docs.columns) == ["example_id", "question", "text", "answers"] and len(docs) == 30
    check_answers(docs["question"], docs["text"], docs["answers"], docs["example_id"], "generated")  # no error
    for row in docs.itertuples():
        mine = spans[spans["example_id"] == row.example_id]
        assert (mine.apply(lambda r, t=row.text: t[r.char_start : r.char_end] == r.phrase, axis=1)).all()
        (support,) = mine[mine["phrase_label"] == QA_SUPPORTING].itertuples()
        (fact,) = mine[mine["phrase_label"] == QA_ANSWER].itertuples()
        answer = row.answers[0]
        assert fact.char_start <= answer["answer_start"] < fact.char_end  # the answer inside its fact
        entity = support.phrase.rsplit(" ", 1)[-1].rstrip(".")
        assert fact.phrase.startswith(entity) and entity not in row.question  # the link is in the text only
        # the supporting sentence in the first sixth, the answer's in the last: most of the document apart
        words_between = len(row.text[support.char_end : fact.char_start].split())
        assert words_between >= len(row.text.split()) // 2
        assert (mine["evidence"] == (mine["phrase_label"] != QA_DISTRACTOR)).all()
        assert 1 <= (mine["phrase_label"] == QA_DISTRACTOR).sum() <= 2 * cfg.n_distractors


# --- the heads through the model seam --------------------------------------------------------------------


def _qa_model(name: str, window: int = 4):
    """A seeded tiny question-answering model of each architecture, float64, eval mode: the tests' tiny encoders'
    configurations with Hugging Face's two-label question-answering head."""
    base = {"longformer": lambda: tiny_longformer(window=window, double=True), "bigbird": tiny_bigbird,
            "modernbert": tiny_modernbert}  # fmt: skip
    config = base[name]().config
    config.num_labels = 2  # a start and an end logit per token
    arch = architecture(config)
    torch.manual_seed(0)
    return getattr(transformers, arch.head_class("question_answering"))(config).eval().double(), arch


@pytest.mark.parametrize("name", ["longformer", "bigbird", "modernbert"])
def test_each_architecture_reads_a_question_through_its_question_answering_head(name):
    model, arch = _qa_model(name)
    n, n_question = 40, 9
    ids = torch.randint(5, 50, (1, n), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    question = torch.zeros_like(ids)
    question[:, :n_question] = 1
    args = {"input_ids": ids, "attention_mask": mask, **arch.forward_args(mask, question)}
    with torch.no_grad():
        out = model(**args)
    assert out.start_logits.shape == out.end_logits.shape == (1, n)
    if name == "longformer":  # the question's tokens are global, and the band reads them as such
        assert torch.equal(args["global_attention_mask"], question)
        assert forward_bands(model, args)[0].global_positions.tolist() == list(range(n_question))
    else:  # a layout's own global attention: the argument changes nothing
        assert arch.forward_args(mask, question) == arch.forward_args(mask)


@pytest.mark.parametrize("window", [4, 64])
def test_the_attention_a_question_and_an_answer_pay_matches_the_dense_matrix(window):
    model, arch = _qa_model("longformer", window)
    n, n_question = 30, 7
    ids = torch.randint(5, 50, (1, n), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    question = (torch.arange(n) < n_question).long()[None]
    args = {"input_ids": ids, "attention_mask": mask, **arch.forward_args(mask, question)}
    answer = torch.zeros(n, dtype=torch.long)
    answer[20:23] = 1
    dense_hf = None
    if window >= 2 * n:  # every key within reach: full attention, computed from the hidden states independently
        with torch.no_grad():
            out = model(**args, output_hidden_states=True)
        dense_hf = _independent_attention(model.longformer, out.hidden_states, mask, args["global_attention_mask"])
    for layer, band in enumerate(forward_bands(model, args)):
        dense = dense_reference(band)  # a loop over the band's slots, float64
        for rows in (question[0], answer):
            got = attention_from(band, rows)  # (heads, band.n): Longformer pads to a multiple of its window
            picked = torch.nn.functional.pad(rows, (0, band.n - n)).bool()
            # the same float64 numbers summed in another order: float64 rounding of sums of ≤ 30 terms ≤ 1
            assert torch.allclose(got, dense[:, picked].sum(1), atol=1e-12)
            # each query's row sums to 1, within Longformer's float32 softmax (2⁻²⁴ each, ≤ 7 rows: 1e-6)
            assert float(got.sum(-1).max() - rows.sum()) == pytest.approx(0.0, abs=1e-6)
            if dense_hf is not None:
                # Longformer's float32 softmax against a float64 one: 2⁻²⁴ relative per probability, ≤ 7 summed
                ref = dense_hf[layer, 0][:, rows.bool()].sum(1)
                assert torch.allclose(got[:, :n], ref[:, :n], atol=1e-6)


def test_the_attention_of_a_full_layer_set_of_queries_matches_hugging_faces():
    model, arch = _qa_model("modernbert")
    n = 23
    ids = torch.randint(5, 50, (1, n), generator=torch.Generator().manual_seed(4))
    mask = torch.ones_like(ids)
    rows = (torch.arange(n) % 4 == 1).long()
    args = {"input_ids": ids, "attention_mask": mask, **arch.forward_args(mask)}
    with torch.no_grad():
        dense = model(**args, output_attentions=True).attentions  # eager: (1, heads, n, n) per layer
    for layer, read in enumerate(forward_bands(model, args)):
        # sdpa's kernels against eager's matmul, float64: sums of ≤ 6 probabilities within 1e-12
        assert torch.allclose(attention_from(read, rows), dense[layer][0][:, rows.bool()].sum(1), atol=1e-12)


# --- Integrated Gradients of a span score ----------------------------------------------------------------


class _LinearReader(torch.nn.Module):
    """A closed-form reader: start and end logits linear in the embeddings (``e · w_start``, ``e · w_end``), so the
    span score ``start[s] + end[e]`` is linear and IG of it is exact: token ``j``'s attribution is
    ``(e_j − e′_j) · (w_start [j = s] + w_end [j = e])``."""

    def __init__(self, vocab: int = 30, dim: int = 6, max_len: int = 4):
        super().__init__()
        torch.manual_seed(5)
        self.embeddings = torch.nn.Embedding(vocab, dim).double()
        self.w = torch.nn.Parameter(torch.randn(2, dim, dtype=torch.float64))
        self.max_len = max_len

    def forward(self, input_ids):
        e = self.embeddings(input_ids)
        return span_scores(e @ self.w[0], e @ self.w[1], self.max_len)


def test_ig_of_a_span_score_is_exact_on_a_linear_reader_and_complete_on_a_longformer():
    reader = _LinearReader()
    ids = torch.tensor([[1, 7, 8, 9, 10, 11, 2]])
    baseline = torch.tensor([[1, 0, 0, 0, 0, 0, 2]])
    s, e = 3, 5
    res = integrate(reader, reader.embeddings, ids, baseline, (), span_index(s, e, reader.max_len), min_steps=8,
                    max_steps=8, tolerance=None, internal_batch_size=8)  # fmt: skip
    diff = (reader.embeddings(ids) - reader.embeddings(baseline))[0]
    expected = torch.zeros(ids.shape[1], dtype=torch.float64)
    expected[s] += diff[s] @ reader.w[0]
    expected[e] += diff[e] @ reader.w[1]
    # a linear F: every quadrature point has the same gradient, so IG is exact but for Captum's quadrature weights,
    # which it rounds to float32 (`step_sizes ... .float()`): 8 weights, each within 2⁻²⁴ relative, sum to 1 within
    # 8 · 2⁻²⁴ ≈ 4.8e-7 relative
    bound = 8 * 2.0**-24
    assert np.allclose(res.scores, expected.detach().numpy(), rtol=bound, atol=0.0)
    assert abs(res.delta) <= bound * abs(res.gap) and res.scores[[0, 1, 2, 4, 6]].tolist() == [0.0] * 5

    model, arch = _qa_model("longformer")
    n, n_question = 24, 5
    ids = torch.randint(5, 50, (1, n), generator=torch.Generator().manual_seed(6))
    ids[0, [0, n_question - 1, n - 1]] = torch.tensor([0, 2, 2])  # CLS … SEP, context … SEP
    baseline = torch.where((ids == 0) | (ids == 2), ids, torch.ones_like(ids))
    mask = torch.ones_like(ids)
    globals_ = (torch.arange(n) < n_question).long()[None]
    extra = arch.forward_args(mask, globals_)
    positions = arch.position_ids(model.config, n)

    def forward(input_ids, attention_mask, position_ids, global_attention_mask):
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    global_attention_mask=global_attention_mask)  # fmt: skip
        return span_scores(out.start_logits, out.end_logits, 4)

    for p in model.parameters():
        p.requires_grad_(False)
    target = span_index(10, 12, 4)
    res = integrate(forward, arch.embeddings(model), ids, baseline, (mask, positions, extra["global_attention_mask"]),
                    target, min_steps=16, max_steps=128, tolerance=1e-3, internal_batch_size=16)  # fmt: skip
    # completeness, Σ scores = F(x) − F(x′), within the adaptive rule's tolerance (0.1 % of the gap): Gauss–
    # Legendre converges fast on a smooth two-layer model
    assert res.converged and abs(res.delta) <= 1e-3 * abs(res.gap)
    assert math.isfinite(res.gap) and res.gap != 0
