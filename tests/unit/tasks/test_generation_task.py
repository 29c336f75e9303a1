"""The generation task (:mod:`attnlens.tasks.generation`) and its embedded corpus: labels read and checked as every
task's are, the studies it runs refused elsewhere in one line, and the planted truth of a one-hop question."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest

from attnlens.data.corpus import generate_generation_corpus, generate_qa_corpus
from attnlens.data.corpus.questions import QA_ANSWER, QA_CONFLICTING, QA_SUPPORTING
from attnlens.errors import InputError
from attnlens.pipeline.config import validate_config
from attnlens.tasks import GENERATION, get_task
from attnlens.tasks.contexts import split_context


def _cfg(hops: int, n: int = 12):
    return types.SimpleNamespace(n_documents=n, min_words=20, max_words=40, n_distractors=3, hops=hops)


def test_the_labels_are_reference_answers():
    labels = GENERATION.check_labels(pd.Series([" Ada Byrne ", "1983"]), (), "f.csv", "answer")
    assert list(labels) == ["Ada Byrne", "1983"]
    with pytest.raises(InputError, match=r"^f.csv: answer: expected a reference answer in every row, row 2"):
        GENERATION.check_labels(pd.Series(["Ada", "  "]), (), "f.csv", "answer")
    assert GENERATION.parse_label("Rust", ()) == "Rust"
    assert GENERATION.strata(np.array(["a", "b"], dtype=object), "f", "x").tolist() == [0, 0]
    assert GENERATION.summary(np.array(["Ada Byrne", "1983"], dtype=object), ()) == {"n": 2, "answer_words_mean": 1.5}


def test_the_generation_study_and_the_classifier_studies_refuse_each_other():
    cfg = validate_config(
        {
            "data": {"task": "generation"},
            "studies": ["generation", "pairs"],
            "model": {"source": "from_config", "architecture": "llama"},
        }
    )
    assert cfg["data"]["task"] == "generation"
    with pytest.raises(
        InputError,
        match=r"studies: expected some of \['generation', 'pairs'\] for data.task 'generation', got 'classification'",
    ):
        validate_config({"data": {"task": "generation"}})
    with pytest.raises(InputError, match=r"got 'generation'"):
        validate_config({"studies": ["classification", "generation"]})
    with pytest.raises(InputError, match="not through a classifier's head"):
        get_task("generation").n_outputs(0)


def test_a_one_hop_question_names_the_system_and_only_the_answers_sentence_is_evidence():
    two, one = generate_qa_corpus(_cfg(2), 7), generate_generation_corpus(_cfg(1), 7)
    for doc2, doc1, rat in zip(
        two.documents.itertuples(), one.documents.itertuples(), one.rationales.groupby("example_id"), strict=True
    ):
        facts = rat[1][rat[1]["phrase_label"] == QA_ANSWER]
        entity = facts["phrase"].iloc[0].split()[0]
        assert entity in doc1.question.rstrip("?").split() and "lab" in doc2.question  # named, or described
        assert doc1.label == doc2.label[0]["text"] and doc1.label in facts["phrase"].iloc[0]
        kinds = rat[1].set_index("phrase_label")["evidence"]
        assert kinds.loc[[QA_ANSWER]].all() and not kinds.loc[[QA_SUPPORTING]].any()
    support = two.rationales[two.rationales["phrase_label"] == QA_SUPPORTING]
    assert support.groupby("example_id")["evidence"].any().all()  # two hops: the supporting sentence is evidence


def test_distractors_of_other_relations_leave_one_fact_of_the_asked_relation():
    cfg = types.SimpleNamespace(n_documents=12, min_words=20, max_words=30, n_distractors=3, hops=1)
    same = generate_generation_corpus(cfg, 3)
    other = generate_generation_corpus(types.SimpleNamespace(**vars(cfg), distractor_relation="other"), 3)
    facts = {"Who": " was designed by ", "When": " was first released in ", "Which": " is written in "}
    for corpus, is_one in ((same, False), (other, True)):
        for doc in corpus.documents.itertuples():
            count = doc.text.count(facts[doc.question.split()[0]])
            assert count == 1 if is_one else count >= 2  # the answer's fact, and (same) at least one distractor's
    assert list(same.documents["label"]) == list(generate_generation_corpus(cfg, 3).documents["label"])


def _structured(structures, n: int = 40, n_sentences=(10, 16), n_distractors: int = 2):
    cfg = types.SimpleNamespace(
        n_documents=n, n_distractors=n_distractors, structures=list(structures), n_sentences=list(n_sentences)
    )
    return generate_generation_corpus(cfg, 5)


def test_planted_structures_state_the_answer_as_each_structure_says():
    """Single: one sentence states the answer; redundant: two, in other words; conjunctive: the question names a
    description, one sentence names the system, another states its answer; conflicting: two sentences about the asked
    system that disagree, the reference the first's value. Documents cycle through the structures; each context has
    its drawn number of sentences (as the splitter finds them), the planted ones at distinct positions."""
    corpus = _structured(["single", "redundant", "conjunctive", "conflicting"])
    docs, spans = corpus.documents, corpus.rationales
    assert list(docs["structure"][:5]) == ["single", "redundant", "conjunctive", "conflicting", "single"]
    for row in docs.itertuples(index=False):
        mine = spans[spans["example_id"] == row.example_id]
        sentences = [s.text for s in split_context(row.text)]
        assert 10 <= len(sentences) <= 16
        assert all(
            row.text[a:b] == p for p, a, b in zip(mine["phrase"], mine["char_start"], mine["char_end"], strict=True)
        )
        assert set(mine["phrase"]) <= set(sentences)
        evidence = mine[mine["evidence"]]
        if row.structure == "single":
            assert len(evidence) == 1 and row.label in evidence["phrase"].iloc[0]
        elif row.structure == "redundant":
            assert len(evidence) == 2 and all(row.label in p for p in evidence["phrase"])
            assert evidence["phrase"].nunique() == 2
        elif row.structure == "conjunctive":
            assert sorted(evidence["phrase_label"]) == [QA_ANSWER, QA_SUPPORTING] and " used at the " in row.question
            (support,) = evidence[evidence["phrase_label"] == QA_SUPPORTING]["phrase"]
            assert (
                support.removesuffix(".").split(" known as ")[1]
                in evidence[evidence["phrase_label"] == QA_ANSWER]["phrase"].iloc[0]
            )
        else:
            assert list(evidence["phrase_label"]) == [QA_CONFLICTING] * 2 and len(evidence) == 2
            first, second = evidence["phrase"]
            assert (row.label in first) != (row.label in second)


def test_the_evidence_sits_at_every_position():
    """Over 160 single-fact contexts of exactly 12 sentences, the answer's sentence is found at each of the 12."""
    corpus = _structured(["single"], n=160, n_sentences=(12, 12))
    seen = set()
    for row in corpus.documents.itertuples(index=False):
        sentences = [s.text for s in split_context(row.text)]
        mine = corpus.rationales[(corpus.rationales["example_id"] == row.example_id) & corpus.rationales["evidence"]]
        seen.add(sentences.index(mine["phrase"].iloc[0]))
    assert seen == set(range(12))


GENERATOR = {"source": "from_config", "architecture": "llama"}


def test_structures_are_keys_of_the_generation_corpus_only():
    cfg = validate_config(
        {
            "data": {
                "task": "generation",
                "synthetic": {"structures": ["single", "conflicting"], "n_sentences": [10, 12]},
            },
            "studies": ["generation"],
            "model": {"source": "from_config", "architecture": "llama"},
        }
    )
    assert cfg["data"]["synthetic"]["structures"] == ["single", "conflicting"]
    with pytest.raises(InputError, match=r"data.synthetic.structures\[0\]|data.synthetic.structures"):
        validate_config(
            {
                "data": {"task": "generation", "synthetic": {"structures": ["twofold"]}},
                "studies": ["generation"],
                "model": GENERATOR,
            }
        )
    with pytest.raises(InputError, match=r"data.synthetic.structures: expected null for data.task 'classification'"):
        validate_config({"data": {"synthetic": {"structures": ["single"]}}})
    with pytest.raises(InputError, match=r"data.synthetic.n_sentences: expected \[least, most\] with least ≤ most"):
        validate_config(
            {
                "data": {"task": "generation", "synthetic": {"n_sentences": [12, 10]}},
                "studies": ["generation"],
                "model": GENERATOR,
            }
        )
