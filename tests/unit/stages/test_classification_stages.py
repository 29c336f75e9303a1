"""The classification study's per-example stages called one by one, without Snakemake, on the `.test` configuration
(one shard a sharded rule): what each writes, and that each reads what the stage before it wrote — the attention,
the attributions and the explanations of one example are of the same token ids, every method scores every token,
the comparison compares every example IG explained. The same path through Snakemake, with its sharding, notes and
pages, is ``tests/e2e/test_workflow.py``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnlens.attention.summaries import load_summaries
from attnlens.attribution.artifacts import load_attributions, load_explanations
from attnlens.classifier.selection import load_selection
from attnlens.pipeline.config import (
    AttentionConfig,
    AttributionConfig,
    DataConfig,
    ExplanationsConfig,
    ImportanceConfig,
    ModelConfig,
    PredictConfig,
    SimilarityConfig,
    TrainConfig,
    validate_config,
)
from attnlens.similarity.metrics import load_similarity
from attnlens.stages.attention import run_estimate_head_importance, run_extract_attention
from attnlens.stages.attribution import run_attribute
from attnlens.stages.data import run_prepare_dataset
from attnlens.stages.explanations import run_explain
from attnlens.stages.model import run_build_base_model, run_predict, run_train_classifier
from attnlens.stages.similarity import run_compare
from tests.support.helpers import ROOT, tiny_config

ONE_SHARD = {"n_shards": 1}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The stages from the data to the comparison, in order, in one folder; the validated config."""
    d = tmp_path_factory.mktemp("classification")
    cfg = tiny_config(ROOT, attention=ONE_SHARD, attribution=ONE_SHARD, explanations=ONE_SHARD, similarity={})
    full = validate_config(cfg)
    model = ModelConfig.from_dict(full["model"])
    data = DataConfig.from_dict(full["data"])
    run_prepare_dataset(data, model, d / "train.parquet", d / "test.parquet", d / "rat.parquet", d / "m.json")
    run_build_base_model(model, d / "m.json", d / "base")
    train = TrainConfig.from_dict(full["train"])
    run_train_classifier(train, d / "base", d / "train.parquet", d / "test.parquet", d / "model", d / "train.json")
    run_predict(PredictConfig.from_dict(full["predict"]), d / "model", d / "test.parquet", d / "pred.parquet",
                d / "metrics.json", d / "selection.json")  # fmt: skip
    importance = ImportanceConfig.from_dict(full["importance"])
    run_estimate_head_importance(importance, d / "model", d / f"{importance.split}.parquet", d / "importance.st")
    run_extract_attention(AttentionConfig.from_dict(full["attention"]), d / "model", d / "test.parquet",
                          d / "selection.json", 0, d / "summary.st", d / "bands.st")  # fmt: skip
    run_attribute(AttributionConfig.from_dict(full["attribution"]), d / "model", d / "test.parquet",
                  d / "pred.parquet", d / "selection.json", 0, d / "attributions.parquet")  # fmt: skip
    explanations = ExplanationsConfig.from_dict(full["explanations"])
    run_explain(explanations, d / "model", [d / "attributions.parquet"], 0, d / "explanations.parquet")
    run_compare(SimilarityConfig.from_dict(full["similarity"]), d / "summary.st", [d / "attributions.parquet"],
                d / "importance.st", d / "model", d / "similarity.parquet", d / "heads.parquet")  # fmt: skip
    return d, full


def test_predict_scores_and_selects_from_the_test_split(run):
    d, _ = run
    test = pd.read_parquet(d / "test.parquet")
    predictions = pd.read_parquet(d / "pred.parquet")
    assert sorted(predictions["example_id"]) == sorted(test["example_id"])
    chosen = {e["example_id"] for e in load_selection(d / "selection.json")}
    assert chosen and chosen <= set(test["example_id"])


def test_one_example_is_read_on_the_same_tokens_by_every_stage(run):
    """extract_attention, attribute and explain each encode or read the test split: one example's token ids are
    the same in all three, and the attention and every method give one value a token."""
    d, full = run
    summaries = load_summaries([d / "summary.st"]).examples
    attributions = load_attributions([d / "attributions.parquet"]).set_index("example_id")
    explanations = load_explanations([d / "explanations.parquet"])
    assert set(summaries) == set(attributions.index) == set(explanations["example_id"])
    for row in explanations.itertuples():
        ids = np.asarray(attributions.loc[row.example_id, "input_ids"])
        np.testing.assert_array_equal(row.input_ids, ids)
        np.testing.assert_array_equal(summaries[row.example_id].input_ids.numpy(), ids)
        assert row.scores.shape == ids.shape and np.isfinite(row.scores).all()
        assert row.target == attributions.loc[row.example_id, "target"]  # the output IG explains
    methods = explanations.groupby("example_id")["method"].apply(sorted)
    assert all(m == sorted(full["explanations"]["methods"]) for m in methods)  # each method once an example


def test_compare_compares_every_explained_example_in_both_modes(run):
    d, _ = run
    similarity = load_similarity([d / "similarity.parquet"])
    attributions = load_attributions([d / "attributions.parquet"])
    assert set(similarity["example_id"]) == set(attributions["example_id"])
    assert set(similarity["mode"]) == {"legacy", "fixed"}
    rank_correlations = similarity[similarity["metric"].isin(["spearman", "kendall_tau_b"])]["value"].dropna()
    assert len(rank_correlations) and rank_correlations.between(-1, 1).all()
