import pandas as pd

from attnlens.data.corpus import CLASS_NAMES, EVIDENCE_PHRASES, generate_corpus, generate_pairs
from attnlens.pipeline.config import SyntheticConfig


def test_deterministic_and_seed_sensitive():
    cfg = SyntheticConfig(n_documents=20, min_words=50, max_words=120)
    a, b, c = generate_corpus(cfg, 1), generate_corpus(cfg, 1), generate_corpus(cfg, 2)
    pd.testing.assert_frame_equal(a.documents, b.documents)
    pd.testing.assert_frame_equal(a.rationales, b.rationales)
    assert not a.documents["text"].equals(c.documents["text"])


def test_spans_lengths_balance_and_counts():
    cfg = SyntheticConfig(n_documents=40, min_words=100, max_words=300, n_evidence=4, n_distractors=2, label_noise=0)
    corpus = generate_corpus(cfg, 3)
    docs = corpus.documents.set_index("example_id")
    assert docs["label"].value_counts().to_dict() == {0: 20, 1: 20}
    words = docs["text"].str.split().str.len()
    assert words.min() >= cfg.min_words
    # planted sentences add words on top of the filler budget, so allow their length
    assert words.max() <= cfg.max_words + 25 + 12 * (cfg.n_evidence + cfg.n_distractors)
    r = corpus.rationales
    for row in r.itertuples():
        assert docs.loc[row.example_id, "text"][row.char_start : row.char_end] == row.phrase
    per_doc = r.groupby(["example_id", "evidence"]).size().unstack(fill_value=0)
    assert per_doc[True].between(2, 4).all()  # ceil(n_evidence / 2) .. n_evidence
    assert per_doc.get(False, pd.Series(0)).between(0, 2).all()
    # without noise, evidence phrases are of the document's own class
    merged = r.merge(corpus.documents, on="example_id")
    assert ((merged["phrase_label"] == merged["label"]) == merged["evidence"]).all()


def test_label_noise_flips_labels_and_marks_evidence():
    cfg = SyntheticConfig(n_documents=200, min_words=30, max_words=40, label_noise=0.25)
    corpus = generate_corpus(cfg, 5)
    assert 25 <= len(corpus.flipped) <= 75
    clean = generate_corpus(SyntheticConfig(n_documents=200, min_words=30, max_words=40, label_noise=0.0), 5)
    flipped = corpus.documents["label"] != clean.documents["label"]
    # same rng stream up to the noise draw: texts equal, labels differ exactly on the flipped ids
    assert set(corpus.documents.loc[flipped, "example_id"]) == set(corpus.flipped)
    r = corpus.rationales[corpus.rationales["example_id"].isin(corpus.flipped)]
    merged = r.merge(corpus.documents, on="example_id")
    assert ((merged["phrase_label"] == merged["label"]) == merged["evidence"]).all()


def test_generated_pairs_have_the_stated_grades():

    pairs = generate_pairs(30, seed=3, n_filler=1, n_phrases=2)
    assert pairs["grade"].value_counts().to_dict() == {0: 10, 1: 10, 2: 10}
    assert pairs.equals(generate_pairs(30, seed=3, n_filler=1, n_phrases=2))  # deterministic
    for row in pairs.itertuples():
        phrases = {
            side: {p for lab in (0, 1) for p in EVIDENCE_PHRASES[lab] if p in getattr(row, f"text_{side}")}
            for side in "ab"
        }
        assert len(phrases["a"]) >= 2 and len(phrases["b"]) >= 2
        same_field = row.field_a == row.field_b
        assert same_field == (row.grade > 0) and row.score == row.grade / 2
        assert row.field_a in CLASS_NAMES
        shared = phrases["a"] & phrases["b"]
        if row.grade == 2:
            assert row.shared_phrase in shared
        if row.grade == 1:
            assert not shared
