"""The generation task (:mod:`attnlens.tasks.generation`) and its embedded corpus: labels read and checked as every
task's are, the studies it runs refused elsewhere in one line, and the planted truth of a one-hop question."""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pytest

from attnlens.data.corpus import generate_generation_corpus, generate_qa_corpus
from attnlens.data.corpus.questions import QA_ANSWER, QA_SUPPORTING
from attnlens.errors import InputError
from attnlens.pipeline.config import validate_config
from attnlens.tasks import GENERATION, get_task


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
