"""Extractive question answering's building blocks (issue 51, item 3): SQuAD's metrics, the span readout and its
decoder, answers found in their context, the generated corpus, the three architectures' question-answering heads
through the model seam with a question's tokens global, the attention a question's and an answer's tokens pay,
and Integrated Gradients of a span score."""

from __future__ import annotations

import json
import math
import string
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from transformers import AutoTokenizer

from attnlens.attention.band import attention_from
from attnlens.attention.summaries import query_attention
from attnlens.attribution.engine import explain_together
from attnlens.attribution.explanations import Example
from attnlens.attribution.ig import attribute_example, integrate, prepare_inputs
from attnlens.attribution.lrp import attnlrp
from attnlens.classifier.prediction import encode_examples
from attnlens.data.corpus import generate_qa_corpus
from attnlens.data.sources import prepare_dataset
from attnlens.errors import InputError
from attnlens.models import architecture, draw_decoder, forward_bands
from attnlens.models.checkpoints import load_classifier, packaged_model_dir
from attnlens.models.loading import import_classifier, with_head
from attnlens.pipeline.config import DataConfig, ModelConfig, SyntheticConfig, validate_config
from attnlens.tasks import QA, task_of
from attnlens.tasks.qa import QA_ANSWER, QA_DISTRACTOR, QA_SUPPORTING
from attnlens.tasks.spans import MAX_ANSWER_TOKENS, best_span, gold_spans, span_index, span_of, span_scores, token_span
from attnlens.tasks.squad import check_answers, exact_match, normalize_answer, qa_metrics, token_f1
from tests.support.dense import dense_reference, independent_attention
from tests.support.tiny_models import tiny_bigbird, tiny_longformer, tiny_modernbert

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
    brute = max(
        (start[0, a] + end[0, b], a, b) for a in range(n) for b in range(a, min(n, a + L)) if allowed[a : b + 1].all()
    )
    assert (best, s, e) == brute
    with pytest.raises(ValueError, match="not one of"):
        span_index(3, 3 + L, L)


def test_an_answer_is_found_on_its_tokens_and_a_cut_one_is_none():
    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_dir()))
    question = "Who designed the compiler used at the Lund lab?"
    context = "The compiler used at the Lund lab is known as Falcon. Much later: Falcon was designed by Ada Byrne."
    answer_start = context.index("Ada Byrne")
    for max_length, found in ((64, True), (24, False)):
        enc = tokenizer(question, context, truncation="only_second", max_length=max_length, return_offsets_mapping=True)
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
            questions,
            ctx,
            [hf[0], {"text": ["OCaml"], "answer_start": [19]}],
        ),
        "question: expected a question in every row, row 1 (example 'a')": (["  ", questions[1]], ctx, hf),
        "answers: expected at least one answer, row 1": (questions, ctx, [{"text": [], "answer_start": []}, hf[1]]),
        "answers: expected answer_start a character offset": (
            questions,
            ctx,
            [[{"text": "Ada Byrne", "answer_start": "23"}], squad[1]],
        ),
        "answers: expected an answer text that is not empty": (
            questions,
            ctx,
            [[{"text": "", "answer_start": 0}], squad[1]],
        ),
        'answers: expected the answers as JSON text in a CSV cell ({"text": ["..."], "answer_start": [0]} or '
        '[{"text": "...", "answer_start": 0}]), row 1 (example \'a\') has \'Ada Byrne\'': (
            questions,
            ctx,
            ["Ada Byrne", squad[1]],
        ),
        'answers: expected {"text": ["..."], "answer_start": [0]} or [{"text": "...", "answer_start": 0}] (as JSON '
        "text in a CSV cell), row 1 (example 'a') has 23": (questions, ctx, ["23", squad[1]]),
    }
    for expected, (q, c, a) in bad.items():
        with pytest.raises(InputError) as err:
            check_answers(q, c, a, ["a", "b"], "qa.jsonl")
        assert str(err.value).startswith("qa.jsonl: ") and expected in str(err.value), str(err.value)


# --- the generated corpus --------------------------------------------------------------------------------


def test_the_generated_questions_need_a_sentence_far_from_their_answer():
    cfg = SyntheticConfig(n_documents=30, min_words=120, max_words=200, n_evidence=6, n_distractors=3, label_noise=0.05)
    corpus = generate_qa_corpus(cfg, seed=3)
    again = generate_qa_corpus(cfg, seed=3)
    assert corpus.documents.equals(again.documents) and corpus.rationales.equals(again.rationales)
    docs, spans = corpus.documents, corpus.rationales
    assert list(docs.columns) == ["example_id", "question", "text", "label"] and len(docs) == 30
    before = []
    check_answers(docs["question"], docs["text"], docs["label"], docs["example_id"], "generated")  # no error
    for row in docs.itertuples():
        mine = spans[spans["example_id"] == row.example_id]
        assert (mine.apply(lambda r, t=row.text: t[r.char_start : r.char_end] == r.phrase, axis=1)).all()
        (support,) = mine[mine["phrase_label"] == QA_SUPPORTING].itertuples()
        (fact,) = mine[mine["phrase_label"] == QA_ANSWER].itertuples()
        answer = row.label[0]
        assert fact.char_start <= answer["answer_start"] < fact.char_end  # the answer inside its fact
        entity = support.phrase.rsplit(" ", 1)[-1].rstrip(".")
        assert fact.phrase.startswith(entity) and entity not in row.question  # the link is in the text only
        # the supporting sentence in one end sixth, the answer's in the other: most of the document apart
        first, second = sorted([support, fact], key=lambda r: r.char_start)
        words_between = len(row.text[first.char_end : second.char_start].split())
        assert words_between >= len(row.text.split()) // 2
        assert (mine["evidence"] == (mine["phrase_label"] != QA_DISTRACTOR)).all()
        assert 1 <= (mine["phrase_label"] == QA_DISTRACTOR).sum() <= 2 * cfg.n_distractors
        # a fact of the question's relation about another system shares the answer's end: position does not tell
        others = mine[(mine["phrase_label"] == QA_DISTRACTOR) & ~mine["phrase"].str.contains(" is known as ")]
        assert (abs(others["char_start"] - fact.char_start) < len(row.text) // 3).any()
        before.append(support.char_start < fact.char_start)
    assert 0 < sum(before) < len(before)  # which end holds the answer is drawn per document


# --- the heads through the model seam --------------------------------------------------------------------


def _qa_model(name: str, window: int = 4):
    """A seeded tiny question-answering model of each architecture, float64, eval mode: the tests' tiny encoders'
    configurations with Hugging Face's two-label question-answering head."""
    base = {
        "longformer": lambda: tiny_longformer(window=window, double=True),
        "bigbird": tiny_bigbird,
        "modernbert": tiny_modernbert,
    }
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
        dense_hf = independent_attention(model.longformer, out.hidden_states, mask, args["global_attention_mask"])
    bands = forward_bands(model, args)
    stored = query_attention(bands, question[0])  # what extract_attention keeps: the same sums, float32
    for layer, band in enumerate(bands):
        assert torch.equal(stored[layer], attention_from(band, question[0]).float())
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
    res = integrate(
        reader,
        reader.embeddings,
        ids,
        baseline,
        (),
        span_index(s, e, reader.max_len),
        min_steps=8,
        max_steps=8,
        tolerance=None,
        internal_batch_size=8,
    )
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
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            global_attention_mask=global_attention_mask,
        )
        return span_scores(out.start_logits, out.end_logits, 4)

    for p in model.parameters():
        p.requires_grad_(False)
    target = span_index(10, 12, 4)
    res = integrate(
        forward,
        arch.embeddings(model),
        ids,
        baseline,
        (mask, positions, extra["global_attention_mask"]),
        target,
        min_steps=16,
        max_steps=128,
        tolerance=1e-3,
        internal_batch_size=16,
    )
    # completeness, Σ scores = F(x) − F(x′), within the adaptive rule's tolerance (0.1 % of the gap): Gauss–
    # Legendre converges fast on a smooth two-layer model
    assert res.converged and abs(res.delta) <= 1e-3 * abs(res.gap)
    assert math.isfinite(res.gap) and res.gap != 0


# --- the task: labels, head, readout, predictions, removal ----------------------------------------------------


def _qa_examples():
    """Two questions on one short context each, the second's answer placed past the 40 tokens a cut keeps."""
    first = "The compiler used at the Lund lab is known as Falcon. Falcon was designed by Ada Byrne in 1999."
    second = "Heron is a type checker. " + "It checks types of programs in many ways. " * 6 + "Heron was made by Bo Li."
    frame = pd.DataFrame(
        {
            "example_id": ["a", "b"],
            "question": ["Who designed the compiler?", "Who made Heron?"],
            "text": [first, second],
        }
    )
    frame["label"] = [
        [{"text": "Ada Byrne", "answer_start": first.index("Ada Byrne")}],
        [{"text": "Bo Li", "answer_start": second.index("Bo Li")}],
    ]
    return frame


def test_the_span_readout_is_a_distribution_over_spans_in_torch_and_numpy():
    """``F`` is the softmax over every span of at most L tokens of start + end logits: the torch readout (what IG
    explains) and the NumPy outputs (what predict writes) agree within float32 rounding of a softmax (≈ 1e-7
    relative; 1e-6 absolute), sum to 1, and AttnLRP's explained score is the span score itself."""
    logits = torch.randn(2, 2, 12, generator=torch.Generator().manual_seed(0)) * 3
    got = QA.readout(logits)
    assert got.shape == (2, 12 * MAX_ANSWER_TOKENS) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), QA.outputs(logits.numpy()), rtol=0, atol=1e-6)
    np.testing.assert_allclose(QA.outputs(logits.numpy()).sum(1), 1, rtol=0, atol=1e-12)
    s, e = 3, 5
    assert QA.explained_logits(logits)[1, span_index(s, e)] == logits[1, 0, s] + logits[1, 1, e]
    valid = [(a, b) for a in range(12) for b in range(a, min(12, a + MAX_ANSWER_TOKENS))]
    x = logits.double()
    scores = np.array([float(x[1, 0, a] + x[1, 1, b]) for a, b in valid])
    by_hand = np.exp(scores[valid.index((s, e))]) / np.exp(scores).sum()
    assert QA.outputs(logits.numpy())[1, span_index(s, e)] == pytest.approx(by_hand, rel=1e-12)
    assert QA.readout(logits.half()).dtype == torch.float32


def test_gold_spans_head_labels_and_predictions_come_from_the_tokens():
    tokenizer = AutoTokenizer.from_pretrained(packaged_model_dir())
    examples = _qa_examples()
    full = encode_examples(tokenizer, examples, QA, max_length=128)
    cut = encode_examples(tokenizer, examples, QA, max_length=40)
    gold = gold_spans(examples["label"], full)
    for i, (s, e) in enumerate(gold):  # the gold span's tokens are the answer's words
        assert tokenizer.decode(full.input_ids[i][s : e + 1]) == examples["label"][i][0]["text"].lower()
        assert full.in_text[i][s : e + 1].all()
    assert gold_spans(examples["label"], cut)[1].tolist() == [-1, -1]  # cut away
    heads = QA.head_labels(examples["label"], cut)  # a cut answer trains toward [CLS], as Hugging Face's scripts
    assert heads["start_positions"][1] == heads["end_positions"][1] == 0
    assert QA.global_tokens(full.input_ids[0], tokenizer) == list(range(full.input_ids[0].index(102)))
    groups = QA.query_groups(examples["label"][0], full, 0)  # the question's tokens and the gold answer's
    assert np.flatnonzero(groups["question"]).tolist() == list(range(1, full.input_ids[0].index(102)))
    assert np.flatnonzero(groups["answer"]).tolist() == list(range(gold[0][0], gold[0][1] + 1))
    assert not QA.query_groups(examples["label"][1], cut, 1)["answer"].any()  # cut away: no answer tokens
    # logits that pick each gold span, and a question token scored higher still: the decoder answers from the context
    width = max(len(r) for r in full.input_ids)
    logits = np.full((2, 2, width), -5.0, dtype=np.float32)
    for i, (s, e) in enumerate(gold):
        logits[i, 0, s], logits[i, 1, e] = 4.0, 4.0
        logits[i, :, 1] = 9.0  # the first question token
    frame = QA.predictions(examples, logits, full)
    assert frame["pred"].tolist() == ["Ada Byrne", "Bo Li"] and frame["exact_match"].tolist() == [1.0, 1.0]
    assert frame["span"].tolist() == [span_index(int(s), int(e)) for s, e in gold] == frame["gold_span"].tolist()
    for i, row in frame.iterrows():  # the stored distribution is F restricted to the context's spans
        probs = np.asarray(row["span_probs"], dtype=np.float64)
        assert QA.targets("predicted", row["label"], probs) == (row["span"],)
        assert probs[span_index(1, 1)] == 0.0 and len(probs) == len(full.input_ids[i]) * MAX_ANSWER_TOKENS
    metrics = QA.metrics(examples["label"].to_numpy(), logits, full)
    assert metrics == {"exact_match": 1.0, "f1": 1.0, "n_scored": 2, "n_truncated": 0}
    cut_logits = np.full((2, 2, 40), -5.0, dtype=np.float32)
    cut_logits[:, :, 12] = 1.0
    assert QA.metrics(examples["label"].to_numpy(), cut_logits, cut)["n_truncated"] == 1  # never scored as a miss
    loss = QA.eval_loss(logits, examples["label"].to_numpy(), full)
    start = torch.nn.functional.cross_entropy(torch.from_numpy(logits[:, 0]), torch.from_numpy(gold[:, 0]))
    end = torch.nn.functional.cross_entropy(torch.from_numpy(logits[:, 1]), torch.from_numpy(gold[:, 1]))
    assert loss == pytest.approx(float((start + end) / 2), rel=1e-6)  # Hugging Face's QA loss, float32


def test_a_removed_token_moves_the_answer_span_and_a_removed_span_is_gone():
    keep = np.ones(12, dtype=bool)
    keep[[2, 6]] = False  # one token before the span (5, 7), one inside it
    assert span_of(QA.kept_target(span_index(5, 7), keep)) == (4, 5)
    keep[[5, 7]] = False
    assert QA.kept_target(span_index(5, 7), keep) is None  # probability 0: the answer is gone
    assert QA.kept_target(span_index(0, 0), np.ones(3, dtype=bool)) == span_index(0, 0)


def test_the_qa_roles_name_a_wrong_span_and_right_ones():
    frame = pd.DataFrame(
        {
            "example_id": list("abcde"),
            "span_prob": [0.9, 0.2, 0.6, 0.8, 0.99],
            "exact_match": [0.0, 1.0, 1.0, 0.0, 0.0],
            "truncated": [False, False, False, False, True],
        }
    )
    roles = {role: i for role, i, _ in QA.roles(frame, seed=0)}
    assert roles["wrong_span"] == 0  # the cut one (0.99) is never scored
    assert roles["most_confident_right"] == 2 and roles["least_confident_right"] == 1
    assert roles["random_right"] in (1, 2)
    none = {role: i for role, i, _ in QA.roles(frame.assign(exact_match=0.0), seed=0)}
    assert none["most_confident_right"] is None and none["random_right"] is None


def test_every_role_left_out_says_so_when_no_answer_could_be_read():
    """Every test answer cut away by truncation: no role names an example, and each says why in the same words."""
    frame = pd.DataFrame(
        {"example_id": list("ab"), "span_prob": [0.9, 0.2], "exact_match": [0.0, 0.0], "truncated": [True, True]}
    )
    roles = QA.roles(frame, seed=0)
    assert [i for _, i, _ in roles] == [None] * 4
    assert {why for _, _, why in roles} == {
        "every test answer was cut away by truncation at model.max_length: no question is right or wrong"
    }


def test_a_csv_with_squads_answers_column_written_as_json_is_read_as_the_jsonl_is(tmp_path):
    """SQuAD's column name (``answers``, no ``label`` column, ``data.label_column`` left at its default) and its
    answers as JSON text in a CSV cell, in either form, give the splits the same JSONL file gives."""
    examples = _qa_examples()
    hf = [{"text": [a[0]["text"]], "answer_start": [a[0]["answer_start"]]} for a in examples["label"]]
    squad = [[{"text": a[0]["text"], "answer_start": a[0]["answer_start"]}] for a in examples["label"]]
    rows = [
        {
            "id": f"q{i}",
            "context": examples["text"][i % 2],
            "question": examples["question"][i % 2],
            "answers": (hf if i % 3 else squad)[i % 2],
        }
        for i in range(10)
    ]
    pd.DataFrame(rows).to_json(tmp_path / "squad.jsonl", orient="records", lines=True)
    pd.DataFrame([{**r, "answers": json.dumps(r["answers"])} for r in rows]).to_csv(tmp_path / "squad.csv", index=False)
    read = {}
    for name in ("squad.jsonl", "squad.csv"):
        cfg = DataConfig(
            task="qa",
            source="file",
            path=str(tmp_path / name),
            text_column="context",
            id_column="id",
            test_fraction=0.2,
        )
        assert cfg.label_column == "label"
        read[name] = prepare_dataset(cfg)
    (jsonl, _, jsonl_manifest), (csv, _, csv_manifest) = read.values()
    for split in ("train", "test"):
        pd.testing.assert_frame_equal(jsonl[split], csv[split])
    assert jsonl_manifest["examples"] == csv_manifest["examples"]
    pd.DataFrame([{**rows[0], "answers": "Ada Byrne"}, rows[1]]).to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(InputError, match=r"bad\.csv: answers: expected the answers as JSON text in a CSV cell"):
        prepare_dataset(DataConfig(task="qa", source="file", path=str(tmp_path / "bad.csv"), text_column="context"))


def test_a_squad_file_and_the_generator_give_question_answering_splits(tmp_path):
    examples = _qa_examples()
    answers = [{"text": [a[0]["text"]], "answer_start": [a[0]["answer_start"]]} for a in examples["label"]]  # HF's
    rows = [
        {
            "id": f"q{i}",
            "context": examples["text"][i % 2],
            "question": examples["question"][i % 2],
            "answers": answers[i % 2],
        }
        for i in range(10)
    ]
    path = tmp_path / "squad.jsonl"
    pd.DataFrame(rows).to_json(path, orient="records", lines=True)
    cfg = DataConfig(
        task="qa",
        source="file",
        path=str(path),
        text_column="context",
        label_column="answers",
        id_column="id",
        test_fraction=0.2,
    )
    frames, _, manifest = prepare_dataset(cfg)
    assert manifest["task"] == "qa" and manifest["classes"] == [] and len(frames["test"]) == 2
    assert list(frames["train"].columns) == ["example_id", "text", "label", "question"]
    assert {e["example_id"]: e["label"] for e in manifest["examples"]}["q0"] == list(examples["label"][0])
    bad = [dict(rows[0]), {**rows[1], "question": "  "}]
    bad[0]["answers"] = {"text": ["Ada Byrne"], "answer_start": [3]}
    no_question = [{k: v for k, v in rows[0].items() if k != "question"}]
    for broken, match in (
        (
            bad[:1],
            r"squad\.jsonl: answers: expected each answer's text in the context at its "
            r"answer_start, row 1 \(example 'q0'\): 'Ada Byrne' at 3",
        ),
        (bad[1:], r"squad\.jsonl: question: expected a question in every row, row 1"),
        (
            no_question,
            r"squad\.jsonl: question: expected a question column 'question' for "
            r"data\.task 'qa'",
        ),
    ):
        pd.DataFrame(broken).to_json(path, orient="records", lines=True)
        with pytest.raises(InputError, match=match):
            prepare_dataset(cfg)
    frames, rationales, manifest = prepare_dataset(DataConfig(task="qa", synthetic=SyntheticConfig(n_documents=10)))
    assert manifest["task"] == "qa" and set(rationales["phrase_label"]) >= {QA_ANSWER, QA_SUPPORTING}
    assert all(len(cell) == 1 for cell in frames["test"]["label"])


def _tiny_qwen3():
    return draw_decoder(
        "qwen3",
        0,
        vocab_size=30522,
        hidden_size=24,
        intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=6,
        pad_token_id=0,
        num_labels=2,
    )


@pytest.mark.parametrize("name", ["longformer", "bigbird", "modernbert", "qwen3"])
def test_a_question_answering_model_is_built_loaded_and_read_as_qa(name, tmp_path):
    """``with_head`` puts a question-answering head on a classifier's encoder without changing a weight of it (a
    pooler the head does not read is left behind; a decoder's classifier keeps its stack as ``model``, its question
    answerer as ``transformer``); the saved model loads as a question-answering model and is read as the qa task."""
    model = {
        "longformer": lambda: tiny_longformer(window=4, num_labels=2),
        "bigbird": tiny_bigbird,
        "modernbert": tiny_modernbert,
        "qwen3": _tiny_qwen3,
    }[name]()
    model.config.num_labels = 2
    qa = with_head(model, "question_answering", seed=0)
    assert type(qa).__name__ == architecture(model.config).qa_class
    encoder = qa.base_model.state_dict()
    for key, value in model.base_model.state_dict().items():
        assert key.startswith("pooler.") or torch.equal(encoder[key], value)
    assert with_head(qa, "question_answering", seed=0) is qa
    qa.config.problem_type = QA.problem_type
    assert task_of(qa.config) is QA
    assert task_of({"problem_type": None, "architectures": [type(qa).__name__]}) is QA  # a hub reader's config
    qa.save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(packaged_model_dir()).save_pretrained(tmp_path)
    loaded, _ = load_classifier(tmp_path)
    assert type(loaded).__name__ == type(qa).__name__ and task_of(loaded.config) is QA


def test_a_fine_tuned_reader_is_imported_as_it_is(tmp_path):
    """``model.source: classifier`` takes a question-answering checkpoint (a SQuAD reader from the hub, say) with its
    weights unchanged."""
    qa = with_head(tiny_longformer(window=4, num_labels=2), "question_answering", seed=0)
    qa.save_pretrained(tmp_path)  # no problem_type: read by its class, as a hub reader is
    AutoTokenizer.from_pretrained(packaged_model_dir()).save_pretrained(tmp_path)
    cfg = ModelConfig(source="classifier", name_or_path=str(tmp_path))
    model, _, _ = import_classifier(cfg, list(QA.output_names(())))
    assert type(model).__name__ == "LongformerForQuestionAnswering" and task_of(model.config) is QA
    for key, value in qa.state_dict().items():
        assert torch.equal(model.state_dict()[key], value)


def test_the_config_refuses_what_a_question_answering_run_cannot_mean():
    cases = (
        (
            {"classes": ["a", "b"]},
            ["classification"],
            r"data\.classes: expected none for data\.task 'qa' \(an answer "
            r"is a span of the context, not a class\)",
        ),
        ({}, ["classification", "topology"], r"studies: expected no topology study"),
        ({"source": "folders", "path": "x", "classes": ["a", "b"]}, ["classification"], r"data\.source: expected a"),
    )
    for data, studies, match in cases:
        with pytest.raises(InputError, match=match):
            validate_config({"data": {"task": "qa", **data}, "studies": studies})


class _Vocab:
    """What prepare_inputs and the QA task read of a tokenizer: the structural ids (CLS 0, PAD 1, SEP 2)."""

    pad_token_id, cls_token_id, sep_token_id = 1, 0, 2

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [0, 2]}


def test_ig_and_attnlrp_explain_a_span_through_the_task():
    """Through the seam a reader's span is explained as a class is: IG adds up to F_t(x) − F_t(x′), F the span
    distribution (completeness, float64, 64 Gauss–Legendre steps: ≲ 1e-4 of the gap), with the question's tokens
    global; AttnLRP explains the span's score start[s] + end[e] (the same float64 forward: 1e-12)."""
    model = (
        with_head(tiny_longformer(window=4, num_labels=2, double=True), "question_answering", seed=0).double().eval()
    )
    model.config.problem_type = QA.problem_type
    ids = [0, 7, 12, 2, 9, 30, 11, 14, 2]
    inputs = prepare_inputs(model, _Vocab(), ids)
    assert inputs.model_args["global_attention_mask"][0].tolist() == [1, 1, 1, 0, 0, 0, 0, 0, 0]
    with torch.no_grad():
        out = model(input_ids=inputs.input_ids, **inputs.forward_kwargs())
    target = span_index(5, 6)
    res = attribute_example(model, inputs, target, min_steps=64, max_steps=64, tolerance=None, internal_batch_size=64)
    expected = QA.outputs(QA.logits(out).numpy())[0, target]
    assert res.probs[target] == pytest.approx(expected, rel=1e-12)
    assert abs(res.scores.sum() - res.gap) <= 1e-4 * abs(res.gap)
    relevance = attnlrp(model, inputs, target)
    assert relevance.explained == pytest.approx(float(out.start_logits[0, 5] + out.end_logits[0, 6]), rel=1e-12)


def test_readers_explained_together_get_their_own_spans():
    """AttnLRP over two readers' inputs in one pass (the ``explain`` rule's ``documents_per_pass``): questions of
    different lengths (so different global tokens) and contexts of different lengths, right-padded; each span's score
    and relevance are what the input gets alone. A span's index does not depend on the input's length
    (:func:`span_index`) and its score reads only its two tokens' logits; the bound is the classifiers' (Longformer's
    float32 softmax: 1e-6 of the largest relevance, tests/unit/attribution/test_attnlrp.py). Through attnlens's
    Longformer path, as the rules load it: Hugging Face's own, in float64, gives the absent global row of the reader
    with fewer global tokens −inf scores in its float32 softmax, and a NaN gradient to every token of that reader."""
    model = (
        with_head(tiny_longformer(window=4, num_labels=2, double=True), "question_answering", seed=0).double().eval()
    )
    model.config.problem_type = QA.problem_type
    architecture(model).prepare(model)
    readers = [
        ([0, 7, 12, 2, 9, 30, 11, 14, 2], span_index(5, 6)),
        ([0, 7, 2, 9, 30, 11, 14, 21, 33, 17, 40, 2], span_index(8, 10)),
    ]
    examples = [Example(model, prepare_inputs(model, _Vocab(), ids), target) for ids, target in readers]
    assert [int(x.inputs.model_args["global_attention_mask"].sum()) for x in examples] == [3, 2]
    together = explain_together(examples, ["attnlrp"], documents=2)
    for x, got in zip(examples, together, strict=True):
        alone = attnlrp(model, x.inputs, x.target)
        scale = np.abs(alone.scores).max()
        assert np.abs(got.scores["attnlrp"] - alone.scores).max() <= 1e-6 * scale
        assert got.explained["attnlrp"] == pytest.approx(alone.explained, rel=1e-6)
