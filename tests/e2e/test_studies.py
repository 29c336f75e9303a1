"""``studies`` selects the studies a run holds: a dry run plans exactly their jobs (and what they need)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

from attnlens.data.corpus import generate_corpus
from attnlens.models.checkpoints import source_tokenizer
from attnlens.pipeline.config import SyntheticConfig, load_config
from tests.support.helpers import run_snakemake

pytestmark = pytest.mark.workflow

#: Rules of the data and the classifier, which the classification and topology studies both need.
CLASSIFIER = {"prepare_dataset": 1, "build_base_model": 1, "train_classifier": 1, "predict": 1}
CLASSIFICATION = {
    **CLASSIFIER,
    "estimate_head_importance": 1,
    "extract_attention": 2,
    "attribute": 2,
    "attribute_embeddings": 1,
    "attribution_tables": 1,
    "attribution_overlays": 1,
    "evaluate_faithfulness": 1,
    "plot_faithfulness": 1,
    "plot_head_importance": 1,
    "plot_attention": 1,
    "count_topk": 1,
    "render_overlays": 1,
    "compare": 2,
    "aggregate_similarity": 1,
    "similarity_examples": 1,
    "plot_similarity": 1,
    "target_agreement": 1,
    "query_attention": 1,
    "build_explorers": 1,
    "explain": 2,
    "explanation_leaderboard": 1,
}
TOPOLOGY = {**CLASSIFIER, "topology": 2, "bottleneck_distances": 1, "plot_topology": 1}
PAIRS = {
    "prepare_pairs": 1,
    "train_pair_encoder": 1,
    "attribute_pairs": 2,
    "pair_convergence": 1,
    "pair_topology": 1,
    "pair_tables": 1,
    "plot_pairs": 1,
}
ALWAYS = {"manifest": 1, "all": 1}


def _plan(root, tmp_path, **override) -> dict[str, int]:
    """Job counts of a forced dry run of the `.test` configuration with ``override`` on top."""
    cfg = yaml.safe_load((root / ".test/config/config.yaml").read_text(encoding="utf-8"))
    cfg.update(override)
    (tmp_path / "config").mkdir(exist_ok=True)
    (tmp_path / "config/config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    out = run_snakemake(root, "--directory", str(tmp_path), "-n", "--forceall", "--quiet", "rules", timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    table = out.stdout.split("Job stats:")[1].split("total")[0]
    return {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)}


@pytest.mark.parametrize(
    ("studies", "expected"),
    [
        (["classification", "topology", "pairs"], {**CLASSIFICATION, **TOPOLOGY, **PAIRS, **ALWAYS}),
        (["classification"], {**CLASSIFICATION, **ALWAYS}),
        (["topology"], {**TOPOLOGY, **ALWAYS}),
        (["pairs"], {**PAIRS, **ALWAYS}),
        (["topology", "pairs"], {**TOPOLOGY, **PAIRS, **ALWAYS}),
    ],
    ids=lambda v: "+".join(v) if isinstance(v, list) else None,
)
def test_each_choice_of_studies_plans_exactly_its_jobs(root, tmp_path, studies, expected):
    assert _plan(root, tmp_path, studies=studies) == expected


def test_the_default_runs_all_three_studies(root, tmp_path):
    assert _plan(root, tmp_path) == _plan(root, tmp_path, studies=["classification", "topology", "pairs"])


def test_an_existing_classifier_replaces_building_and_training(root, tmp_path):
    model = {"source": "classifier", "name_or_path": str(tmp_path / "my-classifier")}
    planned = _plan(root, tmp_path, model=model, studies=["classification", "topology"])
    expected = {**CLASSIFICATION, **TOPOLOGY, **ALWAYS, "import_classifier": 1}
    del expected["build_base_model"], expected["train_classifier"]
    assert planned == expected


def test_no_explanation_methods_means_no_explain_and_no_leaderboard(root, tmp_path):
    planned = _plan(
        root,
        tmp_path,
        studies=["classification"],
        explanations={"methods": []},
        faithfulness={"fractions": [0.1, 0.5], "rankings": ["ig", "attention_all", "random"]},
    )
    expected = {**CLASSIFICATION, **ALWAYS}
    del expected["explain"], expected["explanation_leaderboard"]
    assert planned == expected


#: The generation study's jobs: one each, the dataset's included.
GENERATION = {
    "prepare_dataset": 1,
    "train_generator": 1,
    "fit_learned_attention": 1,
    "generate_answers": 1,
    "ablate_contexts": 1,
    "explain_answers": 1,
    "judge_answers": 1,
    "answer_leaderboard": 1,
    "answer_explorer": 1,
}


def test_the_rag_recipe_plans_every_generation_rule_without_the_network(root, tmp_path):
    """config/hotpotqa_rag.yaml over the default (a hub dataset and a hub model, read by the jobs, not the plan):
    its dry run plans every rule of the generation study."""
    configs = [str(root / "config" / name) for name in ("config.yaml", "hotpotqa_rag.yaml")]
    args = ("--directory", str(tmp_path), "-n", "--forceall", "--quiet", "rules", "--configfile", *configs)
    out = run_snakemake(root, *args, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    table = out.stdout.split("Job stats:")[1].split("total")[0]
    assert {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)} == {**GENERATION, **ALWAYS}


def test_the_generation_grid_recipe_plans_six_runs_each_checked_and_their_findings(root, tmp_path):
    """config/generation_grid.yaml over the generation study's control (a decoder trained from scratch): six runs of
    the study (one prepared dataset), each with its randomisation check, and the findings across them."""
    configs = [
        str(root / "config" / name) for name in ("config.yaml", "generation_scratch.yaml", "generation_grid.yaml")
    ]
    args = ("--directory", str(tmp_path), "-n", "--forceall", "--quiet", "rules", "--configfile", *configs)
    out = run_snakemake(root, *args, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    table = out.stdout.split("Job stats:")[1].split("total")[0]
    per_run = {rule: 6 * n for rule, n in {**GENERATION, **ALWAYS, "answer_sanity": 1}.items()}
    expected = {**per_run, "prepare_dataset": 1, "findings": 1, "all": 1}
    assert {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)} == expected


def test_a_ranking_that_is_not_explained_is_refused(root, tmp_path):
    cfg = yaml.safe_load((root / ".test/config/config.yaml").read_text(encoding="utf-8"))
    cfg["explanations"] = {"methods": ["attention_all", "rollout"]}
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text(yaml.safe_dump(cfg), encoding="utf-8")
    out = run_snakemake(root, "--directory", str(tmp_path), "-n", timeout=300)
    assert out.returncode != 0
    assert "faithfulness.rankings: expected only methods listed in explanations.methods, got 'value_norm'" in (
        out.stdout + out.stderr
    )


def test_every_study_of_the_tiny_run_says_something(tiny_run):
    """The default's shape, at toy scale: no study's claim reads "nothing to test" (the topology study has H1 bars
    to compare), and at most half of the test documents are cut, so the model reads the evidence planted in them."""
    notes = pd.read_csv(tiny_run / "results" / "run_notes.csv")
    assert not notes["note"].str.contains("nothing to test").any(), notes["note"].tolist()
    diagrams = pd.concat(
        pd.read_parquet(p) for p in (tiny_run / "results" / "topology").glob("diagrams_shard*.parquet")
    )
    h1 = diagrams[(diagrams["dim"] == 1) & (diagrams["death"] > diagrams["birth"])]
    assert set(h1["estimator"]) == set(diagrams["estimator"]), "an estimator has no H1 bar in any document"
    manifest = json.loads((tiny_run / "results" / "data" / "split_manifest.json").read_text(encoding="utf-8"))
    test = manifest["truncation"]["test"]
    assert test["truncated"] <= test["documents"] / 2, test


def test_the_default_config_sizes_documents_to_the_model(root):
    """The embedded default's documents fit ``model.max_length``: at most half of them are cut (the generator is
    deterministic, so this counts exactly what ``make run`` will), and topology has several chunks per window."""
    cfg = load_config(root / "config" / "config.yaml")
    corpus = generate_corpus(SyntheticConfig.from_dict(cfg["data"]["synthetic"]), cfg["data"]["seed"])
    tokenizer = source_tokenizer(cfg["model"]["name_or_path"], 10**6)
    lengths = [len(ids) for ids in tokenizer(list(corpus.documents["text"]))["input_ids"]]
    cut = sum(n > cfg["model"]["max_length"] for n in lengths)
    assert cut <= len(lengths) / 2, f"{cut} of {len(lengths)} documents longer than {cfg['model']['max_length']}"
    window = cfg["model"]["attention_window"] or cfg["model"]["max_length"] // 8
    assert window // cfg["topology"]["chunk_size"] >= 4
