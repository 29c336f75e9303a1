"""Each architecture's run of the architecture grid (``architecture_grid``: BigBird, ModernBERT and a Mistral
decoder from their configs, through every classification stage): what each stored, read through the model seam, and
the one device policy every GPU rule asks."""

from __future__ import annotations

import json

import pandas as pd
import torch

from attnlens.attention.summaries import load_summaries
from attnlens.classifier.importance import IMPORTANCE_SCHEMA
from attnlens.io import load_tensors
from tests.support.helpers import EPS32, ROOT, gpu_rules


def _gpu_rules() -> set[str]:
    """Rules whose resources ask for a GPU (``gpu=1``), read from workflow/rules/*.smk, but the generation study's
    (its own run checks them: tests/e2e/test_generation_run.py)."""
    return gpu_rules(p for p in (ROOT / "workflow" / "rules").glob("*.smk") if p.name != "generation.smk")


#: GPU rules a run has only in a grid (read in a run of conftest.architecture_grid).
GRID_ONLY = {"sanity_check"}


def _every_classification_stage(results, *paths: str) -> None:
    """The leaderboard ranks every method of the default's list, and the stages' artifacts and pages are there."""
    leaderboard = pd.read_csv(results / "paper/tables/explanation_leaderboard.csv")
    assert {"ig", "attention_all", "value_norm", "rollout", "grad_attention", "saliency", "attnlrp"} <= set(
        leaderboard["method"]
    )
    common = (
        "topology/claim.json",
        "faithfulness/curves.parquet",
        "similarity/summary.parquet",
        "paper/figures/attention_aggregate.png",
    )
    for path in (*common, *paths):
        assert (results / path).is_file(), path
    assert list((results / "explorer").glob("*.html"))


def _every_query_sums_to_one(results) -> None:
    """Every real query's attention sums to 1 in every layer (full, windowed or block-sparse), so each stored
    example's received attention sums to its ``n`` real tokens. Float32 throughout: each probability row sums to 1
    within (n + 1)·u (the softmax's sum of n terms and its division, u = 2⁻²⁴), and summing the n × n probabilities
    (over queries into ``received``, then over keys here) adds at most 2·(n − 1)·u of each total: |Σ − n| ≤ 3·n²·u
    (2.9e-3 at the .test length, 128)."""
    summary = load_summaries(sorted((results / "attention").glob("shard*.safetensors")))
    assert summary.examples
    for example in summary.examples.values():
        received, n = example.received, example.received.shape[-1]
        torch.testing.assert_close(
            received.sum(-1), torch.full(received.shape[:2], float(n)), rtol=0, atol=3 * n * n * EPS32 / 2
        )


def test_bigbird_run_builds_and_fine_tunes_a_block_sparse_classifier(bigbird_run):
    config = json.loads((bigbird_run / "models/finetuned/config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "big_bird" and config["attention_type"] == "block_sparse"
    assert (config["block_size"], config["num_random_blocks"]) == (8, 1)
    metrics = json.loads((bigbird_run / "models/train_metrics.json").read_text(encoding="utf-8"))
    assert "accuracy" in json.dumps(metrics)


def test_bigbird_run_reads_every_classification_stage_through_the_seam(bigbird_run):
    results = bigbird_run
    tensors, prov = load_tensors(results / "importance/head_importance.safetensors", IMPORTANCE_SCHEMA)
    assert prov["head_groups"] == {"local": ["query", "key", "value", "output"], "global": []}
    assert torch.count_nonzero(tensors["fixed_global"]) == 0 and torch.count_nonzero(tensors["fixed_local"]) > 0
    _every_classification_stage(results, "paper/figures/head_importance.png")
    notes = pd.read_csv(results / "run_notes.csv")["note"].tolist()
    assert any("Hugging Face draws no random blocks" in note for note in notes)
    # test documents of at most (5 + 2·1)·8 = 56 tokens would run full attention: the .test corpus has none
    assert not any("ran full attention" in note for note in notes)
    _every_query_sums_to_one(results)


def test_modernbert_run_trains_from_config_and_reads_every_stage(modernbert_run):
    results = modernbert_run
    config = json.loads((results / "models/finetuned/config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "modernbert" and config["local_attention"] == 32
    assert config["layer_types"][:3] == ["full_attention", "sliding_attention", "sliding_attention"]
    tensors, prov = load_tensors(results / "importance/head_importance.safetensors", IMPORTANCE_SCHEMA)
    assert prov["head_groups"] == {"local": ["query", "key", "value", "output"], "global": []}
    assert torch.count_nonzero(tensors["fixed_local"]) > 0
    _every_classification_stage(results, "attributions/embeddings.parquet")
    notes = pd.read_csv(results / "run_notes.csv")["note"].tolist()
    assert any("the model has no position embeddings" in note for note in notes)
    embeddings = pd.read_parquet(results / "attributions/embeddings.parquet")
    assert embeddings["position"].isna().all() and embeddings["word"].map(len).gt(0).all()
    _every_query_sums_to_one(results)


def test_mistral_run_trains_from_config_and_reads_every_stage(mistral_run):
    results = mistral_run
    config = json.loads((results / "models/finetuned/config.json").read_text(encoding="utf-8"))
    assert config["model_type"] == "mistral" and config["sliding_window"] == 32 // 2 + 1  # reaches 16 keys back
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (12, 4)  # the MiniLM's 12, shared by 3
    tensors, _ = load_tensors(results / "importance/head_importance.safetensors", IMPORTANCE_SCHEMA)
    assert tensors["fixed_local"].shape == (6, 12) and bool((tensors["fixed_local"] > 0).all())
    _every_classification_stage(results, "attributions/embeddings.parquet")
    # the classifier reads the last real token: its attention is the query group the table reports
    regions = pd.read_csv(results / "paper/tables/query_attention.csv")
    assert set(regions["group"]) == {"last token"}
    summary = load_summaries(sorted((results / "attention").glob("shard*.safetensors")))
    for example in summary.examples.values():
        received = example.received  # every real query's attention sums to 1 in every layer
        n = received.shape[-1]
        # float32: as the ModernBERT run's bound (tests/unit/models/test_modernbert.py), |Σ − n| ≤ 3·n²·u
        torch.testing.assert_close(
            received.sum(-1), torch.full(received.shape[:2], float(n)), rtol=0, atol=3 * n * n * EPS32 / 2
        )
        # causal: the last token is attended by itself alone (one probability, at most 1), the first by every query
        # within the window's reach (its received attention at least its own self-attention, 1 in the first row)
        assert bool((received[..., -1] <= 1 + 1e-6).all()) and bool((received[..., 0] >= 1 - 1e-6).all())


def test_every_gpu_rule_places_its_model_through_the_policy(tiny_run, bigbird_run):
    """Each rule that asks SLURM for a GPU logged the policy's ``device:`` line, and its job record shows it was
    given ``model.device``: its stage moved the model where the policy said, not where its own code guessed."""
    rules = _gpu_rules()
    assert {
        "train_classifier",
        "predict",
        "estimate_head_importance",
        "extract_attention",
        "attribute",
        "attribute_embeddings",
        "explain",
        "evaluate_faithfulness",
        *GRID_ONLY,
    } <= rules
    for rule in sorted(rules):
        folder = (bigbird_run if rule in GRID_ONLY else tiny_run / "results") / "logs" / rule
        logs = sorted(folder.glob("*.log"))
        assert logs, f"{rule}: no log in the tiny run (a grid's rule: in the architecture grid's BigBird run)"
        for log in logs:
            text = log.read_text(encoding="utf-8")
            assert "device: cpu (model.device auto)" in text, f"{rule}: {log.name} has no device line"
        records = sorted(folder.glob("*.job.json"))
        for record in records:
            given = json.loads(record.read_text(encoding="utf-8"))
            assert "model.device" in json.dumps(given), f"{rule}: {record.name} was not given model.device"
