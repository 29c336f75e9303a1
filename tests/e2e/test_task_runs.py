"""Each task other than the paper's classification, end to end: the `.test` run of the task through every rule of
the classification study (docs/tasks.md), and what its artifacts must say of the task's target.

One session run per task (``regression_run``, ``multilabel_run``, ``qa_run``, in ``tests/support/task_runs.py``):
the `.test` configuration with ``data.task`` set and the smallest corpus that still trains, splits and showcases
(12 documents, one shard per sharded rule), so that a task adds about a minute of CI (tests/README.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import attnlens
from attnlens.attention.summaries import load_bands
from attnlens.attribution.artifacts import load_explanations
from attnlens.classifier.selection import load_selection
from attnlens.data.corpus import TOPIC_NAMES
from attnlens.errors import InputError
from attnlens.render.explorer import read_explorer
from attnlens.tasks import MULTILABEL
from attnlens.tasks.spans import span_of

pytestmark = pytest.mark.workflow


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_a_regression_run_explains_the_predicted_value(regression_run):
    res = regression_run / "results"
    assert _json(res / "data/split_manifest.json")["task"] == "regression"
    assert _json(res / "models/finetuned/config.json")["problem_type"] == "regression"
    metrics = _json(res / "predictions/metrics.json")
    assert metrics["task"] == "regression" and {"mse", "rmse", "mae", "pearson", "spearman"} <= set(metrics)
    preds = pd.read_parquet(res / "predictions/test.parquet").set_index("example_id")
    value = preds["value"].map(lambda v: float(v[0]))
    assert np.array_equal(value.to_numpy(), preds["pred"].astype(np.float32).to_numpy())  # pred: the float32 value
    assert metrics["mse"] == pytest.approx(float(((preds["pred"] - preds["label"]) ** 2).mean()), rel=1e-12)
    selection = _json(res / "predictions/selection.json")
    assert selection["task"] == "regression"
    assert {e["role"] for e in selection["examples"]} | {r["role"] for r in selection["left_out"]} == {
        "largest_overestimate",
        "largest_underestimate",
        "closest",
        "highest_predicted",
        "random",
    }

    # IG explains F = the value: its end point is predict's value (one example alone against a padded batch of
    # float32 forwards: a few float32 roundings of values ≲ 10, 1e-5), and its gap is F(x) − F(x′)
    ig = pd.read_parquet(res / "attributions/shard0.parquet").set_index("example_id")
    assert (ig["target"] == 0).all() and ig["probs"].map(len).eq(1).all()
    f_x = ig["probs"].map(lambda v: v[0])
    np.testing.assert_allclose(f_x.to_numpy(), value.loc[f_x.index].to_numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(ig["gap"], f_x - ig["probs_baseline"].map(lambda v: v[0]), rtol=0, atol=1e-12)
    # the removal curves measure the same F: nothing deleted is the full document's value (exact: the same forward)
    curves = pd.read_parquet(res / "faithfulness/curves.parquet")
    start = curves[(curves["curve"] == "deletion") & (curves["fraction"] == 0)].groupby("example_id")["prob"].first()
    np.testing.assert_allclose(start.to_numpy(), f_x.loc[start.index].to_numpy(), rtol=0, atol=1e-5)
    # every leaderboard method explained the one output, and AttnLRP its logit, which is the value
    explained = pd.read_parquet(res / "explanations/shard0.parquet")
    assert (explained["target"] == 0).all()
    lrp = explained[explained["method"] == "attnlrp"].set_index("example_id")["explained"]
    np.testing.assert_allclose(lrp.to_numpy(), f_x.loc[lrp.index].to_numpy(), rtol=0, atol=1e-5)

    # pages say the value, not a class
    page = next((res / "explorer").glob("*.html"))
    meta, _ = read_explorer(page)
    eid = meta["example_id"]
    assert meta["info"]["explained"] == "value" and list(meta["info"]["outputs"]) == ["value"]
    assert meta["info"]["prediction"] == f"{f_x.loc[eid]:.4g}"
    overlay = next((res / "paper/attribution_overlays").glob("*.html")).read_text(encoding="utf-8")
    assert "<td><b>value</b></td>" in overlay  # the attribution label
    assert (res / "paper/figures/faithfulness_curves.png").is_file() and (res / "manifest.json").is_file()
    # where [CLS]'s attention goes: the counted phrases, the distractors, the rest; each configuration's shares sum to 1
    where = pd.read_csv(res / "paper/tables/query_attention.csv")
    assert set(where["group"]) == {"[CLS]"} and {"evidence", "special tokens", "other"} <= set(where["region"])
    for _, cell in where.groupby("configuration"):  # means of shares over the same documents: float64, 1e-9
        assert cell["attention"].sum() == pytest.approx(1, abs=1e-9) and cell["tokens"].sum() == pytest.approx(1)

    # the one-document API reads a regression's true value as a number
    doc = attnlens.explain("We rely on neural network throughout.", attnlens.load(res), label="2.5")
    assert doc.outcome.label == "2.5" and doc.outcome.explained == "value"
    with pytest.raises(InputError, match=r"expected a finite number"):
        attnlens.explain("some words", attnlens.load(res), label="high")


def test_a_multilabel_run_explains_each_label(multilabel_run):
    res = multilabel_run / "results"
    manifest = _json(res / "data/split_manifest.json")
    assert manifest["task"] == "multilabel" and manifest["classes"] == list(TOPIC_NAMES)
    assert _json(res / "models/finetuned/config.json")["problem_type"] == "multi_label_classification"
    metrics = _json(res / "predictions/metrics.json")
    assert metrics["task"] == "multilabel" and {"micro_f1", "macro_f1", "macro_auroc", "per_label"} <= set(metrics)
    assert list(metrics["per_label"]) == list(TOPIC_NAMES)  # by the names the manifest has, not by index
    preds = pd.read_parquet(res / "predictions/test.parquet").set_index("example_id")
    probs = preds["probs"].map(lambda v: np.asarray(v, dtype=np.float64))
    assert (preds["pred"].map(list) == probs.map(lambda p: (p >= 0.5).astype(int).tolist())).all()
    selection = _json(res / "predictions/selection.json")
    assert {e["role"] for e in selection["examples"]} | {r["role"] for r in selection["left_out"]} == {
        "missed_label",
        "false_label",
        "random_exact",
        *(f"most_confident_{k}" for k in range(4)),
    }

    # one IG row per document and label, the likeliest label first; each explains its own label's sigmoid: the end
    # point is predict's probability (one document alone against a padded batch: a few float32 roundings, 1e-6)
    ig = pd.read_parquet(res / "attributions/shard0.parquet")
    for eid, rows in ig.groupby("example_id"):
        assert tuple(rows.sort_values("target_rank")["target"]) == MULTILABEL.targets("all", None, probs.loc[eid])
    f_x = ig.apply(lambda r: r["probs"][r["target"]], axis=1)
    expected = ig.apply(lambda r: probs.loc[r["example_id"]][r["target"]], axis=1)
    np.testing.assert_allclose(f_x.to_numpy(), expected.to_numpy(), rtol=0, atol=1e-6)
    gap = ig.apply(lambda r: r["probs"][r["target"]] - r["probs_baseline"][r["target"]], axis=1)
    np.testing.assert_allclose(ig["gap"], gap, rtol=0, atol=1e-12)
    assert ig.groupby("example_id")["scores"].apply(lambda s: not np.allclose(s.iloc[0], s.iloc[1])).all()

    # similarity compares the one attention map with every label's attribution
    sim = pd.read_parquet(res / "similarity/shard0.parquet")
    assert set(map(tuple, sim[["example_id", "target"]].drop_duplicates().to_numpy())) == set(
        map(tuple, ig[["example_id", "target"]].to_numpy())
    )
    table = pd.read_csv(res / "paper/tables/target_agreement.csv")
    assert set(table["name"]) == {*TOPIC_NAMES, "all"}
    n_docs = ig["example_id"].nunique()
    overall = table[(table["name"] == "all")]
    assert (overall["n_explanations"] == len(ig)).all() and (overall["n_pairs"] == n_docs * 6).all()  # C(4, 2)
    assert table["between_targets"].notna().all() and (res / "paper/figures/target_agreement.png").is_file()
    assert table["difference"].notna().all()  # every document has labels to pair with: all explained

    # every method explains every label IG explains (explanations.targets: every), on IG's tokens
    every = pd.read_parquet(res / "explanations/shard0.parquet")
    for method, rows in every.groupby("method"):
        assert sorted(map(tuple, rows[["example_id", "target", "target_rank"]].to_numpy())) == sorted(
            map(tuple, ig[["example_id", "target", "target_rank"]].to_numpy())
        ), method
    # raw attention reads no output: one map whatever the label, so its target sensitivity is exactly 1; the
    # gradient and AttnLRP explain each label's own sigmoid and differ between labels, as IG does
    sensitivity = pd.read_csv(res / "paper/tables/target_sensitivity.csv").set_index(["method", "metric"])
    assert list(dict.fromkeys(m for m, _ in sensitivity.index)) == ["ig", "attention_last", "grad_input", "attnlrp"]
    assert (sensitivity.loc["attention_last", "between_targets"] == 1.0).all()
    for method in ("ig", "grad_input", "attnlrp"):
        assert sensitivity.loc[(method, "kendall_tau_b"), "between_targets"] < 0.99, method
        assert sensitivity.loc[(method, "kendall_tau_b"), "n_pairs"] == n_docs * 6  # C(4, 2) a document

    # the headline explanation (the likeliest label) goes on through the single-target stages
    explained = load_explanations([res / "explanations/shard0.parquet"])
    headline = ig[ig["target_rank"] == 0].set_index("example_id")["target"]
    assert (explained.set_index("example_id")["target"] == headline.loc[explained["example_id"]].to_numpy()).all()
    page = next((res / "explorer").glob("*.html"))
    meta, arrays = read_explorer(page)
    assert meta["info"]["explained"] == TOPIC_NAMES[int(headline.loc[meta["example_id"]])]
    assert list(meta["info"]["outputs"]) == list(TOPIC_NAMES)
    # and the page's target selector holds every label's IG scores and planted evidence, the headline first
    rows = ig[ig["example_id"] == meta["example_id"]].sort_values("target_rank")
    assert [t["name"] for t in meta["targets"]] == [TOPIC_NAMES[t] for t in rows["target"]]
    for k, scores in enumerate(rows["scores"]):
        got = arrays["attribution" if k == 0 else f"attribution_t{k}"]
        np.testing.assert_array_equal(got, np.asarray(scores, dtype=np.float32))  # the row, stored as float32
    rationales = pd.read_parquet(res / "data/rationales.parquet")
    mine = rationales[rationales["example_id"] == meta["example_id"]]
    lit = [arrays["evidence" if k == 0 else f"evidence_t{k}"].astype(bool) for k in range(len(rows))]
    for k, target in enumerate(rows["target"]):  # a label's evidence: its own topic's planted phrases only
        if not (mine["evidence"] & (mine["phrase_label"] == target)).any():
            assert not lit[k].any()  # a label the document lacks has none (one cut by truncation may have none)
    assert any(mask.any() for mask in lit) and len({mask.tobytes() for mask in lit}) > 1


def test_the_api_explains_any_label_it_is_asked_for(multilabel_run):
    """``attnlens.explain(..., target=k)`` of a showcased document equals the run's IG row of label ``k``, bit for
    bit (the same seam functions on one thread, as the run's jobs); its true labels are read as a list of names or
    as ``a|b``, and a target or a label the model does not have is one clear line."""
    res = multilabel_run / "results"
    eid = load_selection(res / "predictions/selection.json")[0]["example_id"]
    test = pd.read_parquet(res / "data/test.parquet").set_index("example_id")
    stored = pd.read_parquet(res / "attributions/shard0.parquet").set_index(["example_id", "target"])
    classifier = attnlens.load(res)
    truth = [TOPIC_NAMES[k] for k, v in enumerate(test.loc[eid, "label"]) if v]
    config = multilabel_run / "config/config.yaml"
    for k in (3, 0):
        doc = attnlens.explain(
            test.loc[eid, "text"],
            classifier,
            config=config,
            example_id=eid,
            target=k,
            label=truth if k else "|".join(truth),
        )
        np.testing.assert_array_equal(doc.ig, np.asarray(stored.loc[(eid, k), "scores"]))
        assert doc.attribution["target_kind"] == "given" and doc.outcome.explained == TOPIC_NAMES[k]
        assert doc.outcome.label == (", ".join(truth) or "none")
    by_name = attnlens.explain(test.loc[eid, "text"], classifier, config=config, target=TOPIC_NAMES[2])
    assert by_name.attribution["target"] == 2
    with pytest.raises(InputError, match=r"target: 4: expected an output index below 4"):
        attnlens.explain("some words", classifier, target=4)
    with pytest.raises(InputError, match=r"has the unknown label 'tax'"):
        attnlens.explain("some words", classifier, label=["tax"])


def test_a_qa_run_answers_from_the_context_and_explains_the_answer_span(qa_run):
    res = qa_run / "results"
    assert _json(res / "data/split_manifest.json")["task"] == "qa"
    config = _json(res / "models/finetuned/config.json")
    assert config["problem_type"] == "question_answering" and config["architectures"] == [
        "LongformerForQuestionAnswering"
    ]
    test = pd.read_parquet(res / "data/test.parquet").set_index("example_id")
    preds = pd.read_parquet(res / "predictions/test.parquet").set_index("example_id")
    metrics = _json(res / "predictions/metrics.json")
    assert metrics["task"] == "qa" and metrics["n_scored"] + metrics["n_truncated"] == len(preds)
    scored = preds[~preds["truncated"]]
    assert metrics["exact_match"] == pytest.approx(scored["exact_match"].mean(), rel=1e-12)
    assert all(p in test.loc[e, "text"] for e, p in preds["pred"].items())  # an answer is a span of its context
    probs = preds["span_probs"].map(lambda v: np.asarray(v, dtype=np.float64))
    assert (probs.map(np.argmax) == preds["span"]).all()  # the most probable span of the context
    selection = _json(res / "predictions/selection.json")
    assert {e["role"] for e in selection["examples"]} | {r["role"] for r in selection["left_out"]} == {
        "wrong_span",
        "most_confident_right",
        "least_confident_right",
        "random_right",
    }

    # IG explains the predicted span's probability: its end point is predict's (one example alone against a padded
    # batch of float32 forwards: a few float32 roundings of probabilities ≤ 1, 1e-6), its gap F(x) − F(x′)
    ig = pd.read_parquet(res / "attributions/shard0.parquet").set_index("example_id")
    assert (ig["target"] == preds.loc[ig.index, "span"]).all()
    f_x = ig.apply(lambda r: r["probs"][r["target"]], axis=1)
    expected = [probs.loc[e][t] for e, t in ig["target"].items()]
    np.testing.assert_allclose(f_x.to_numpy(), expected, rtol=0, atol=1e-6)
    gap = ig.apply(lambda r: r["probs"][r["target"]] - r["probs_baseline"][r["target"]], axis=1)
    np.testing.assert_allclose(ig["gap"], gap, rtol=0, atol=1e-12)
    # the removal curves measure the same F at the same span: nothing deleted is the full document's (same forward)
    curves = pd.read_parquet(res / "faithfulness/curves.parquet")
    start = curves[(curves["curve"] == "deletion") & (curves["fraction"] == 0)].groupby("example_id")["prob"].first()
    np.testing.assert_allclose(start.to_numpy(), f_x.loc[start.index].to_numpy(), rtol=0, atol=1e-6)
    # AttnLRP explains the span's score, start + end logit (predict's float32 logits: 1e-5 of scores ≲ 10)
    explained = pd.read_parquet(res / "explanations/shard0.parquet")
    lrp = explained[explained["method"] == "attnlrp"].set_index("example_id")
    for eid, row in lrp.iterrows():
        logits = np.asarray(preds.loc[eid, "logits"], dtype=np.float64).reshape(2, -1)
        s, e = span_of(int(row["target"]))
        assert row["explained"] == pytest.approx(logits[0, s] + logits[1, e], abs=1e-5)

    # every question token attends globally, and the band holds them so; the page names the answer span
    page = next((res / "explorer").glob("*.html"))
    meta, _ = read_explorer(page)
    eid = meta["example_id"]
    bands, ids = load_bands(sorted((res / "attention/bands").glob("*.safetensors")), eid)
    question = ids.tolist().index(102)  # [SEP] after the question
    assert bands[0].global_positions.tolist() == list(range(question))
    s, e = span_of(int(ig.loc[eid, "target"]))
    assert meta["info"]["explained"] == f"the answer span, tokens {s}–{e}"
    table = pd.read_csv(res / "paper/tables/target_agreement.csv")
    assert set(table["name"]) == {"answer span", "all"}  # every document's span, reported as one target

    # where the question's and the answer's attention goes: every region of every document, shares summing to 1
    where = pd.read_csv(res / "paper/tables/query_attention.csv")
    regions = {"supporting sentence", "answer sentence", "question", "special tokens", "other"}
    assert set(where["group"]) == {"question", "answer"} and regions <= set(where["region"])
    for _, cell in where.groupby(["group", "configuration"]):  # means over the same documents: float64, 1e-9
        assert cell["attention"].sum() == pytest.approx(1, abs=1e-9) and cell["tokens"].sum() == pytest.approx(1)
        assert cell["attribution"].sum() == pytest.approx(1, abs=1e-9)
    assert (where["n_documents"] == len(ig)).all()
    # the question's tokens are global: their attention reaches the supporting sentence, and is ranked inside it
    supporting = where[(where["region"] == "supporting sentence") & (where["group"] == "question")]
    assert (supporting["n_tau"] == len(ig)).all() and supporting["kendall_tau_b"].between(-1, 1).all()


def test_the_api_answers_a_question_and_explains_the_span(qa_run):
    """``attnlens.explain(context, question=...)`` of a showcased question equals the run's IG row bit for bit (the
    same seam functions on one thread), as does a span given by its tokens; a question-answering model without a
    question, and an answer not in its context, are one clear line each."""
    res = qa_run / "results"
    eid = load_selection(res / "predictions/selection.json")[0]["example_id"]
    test = pd.read_parquet(res / "data/test.parquet").set_index("example_id")
    stored = pd.read_parquet(res / "attributions/shard0.parquet").set_index("example_id")
    reader = attnlens.load(res)
    answers = [dict(a) for a in test.loc[eid, "label"]]
    doc = attnlens.explain(
        test.loc[eid, "text"],
        reader,
        config=qa_run / "config/config.yaml",
        example_id=eid,
        question=test.loc[eid, "question"],
        label=answers,
    )
    np.testing.assert_array_equal(doc.ig, np.asarray(stored.loc[eid, "scores"]))
    assert doc.attribution["target"] == stored.loc[eid, "target"] and doc.outcome.label == answers[0]["text"]
    s, e = span_of(int(stored.loc[eid, "target"]))
    given = attnlens.explain(test.loc[eid, "text"], reader, question="Who?", target=(s, e), showcased=False)
    assert given.attribution["target"] == stored.loc[eid, "target"] and given.attribution["target_kind"] == "given"
    with pytest.raises(InputError, match=r"question: expected a question: the model answers questions"):
        attnlens.explain("some words", reader)
    with pytest.raises(InputError, match=r"label: expected each answer's text in the context"):
        attnlens.explain("some words", reader, question="Who?", label=[{"text": "Ada", "answer_start": 0}])
