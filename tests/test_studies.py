"""``studies`` selects the studies a run holds: a dry run plans exactly their jobs (and what they need)."""

from __future__ import annotations

import re

import pytest
import yaml
from helpers import run_snakemake

pytestmark = pytest.mark.workflow

#: Rules of the data and the classifier, which the classification and topology studies both need.
CLASSIFIER = {"prepare_dataset": 1, "build_base_model": 1, "train_classifier": 1, "predict": 1}
CLASSIFICATION = {
    **CLASSIFIER, "estimate_head_importance": 1, "extract_attention": 2, "attribute": 2, "attribute_embeddings": 1,
    "attribution_tables": 1, "attribution_overlays": 1, "evaluate_faithfulness": 1, "plot_faithfulness": 1,
    "plot_head_importance": 1, "plot_attention": 1, "count_topk": 1, "render_overlays": 1, "compare": 2,
    "aggregate_similarity": 1, "similarity_examples": 1, "plot_similarity": 1, "build_explorers": 1,
    "explain": 2, "explanation_leaderboard": 1,
}  # fmt: skip
TOPOLOGY = {**CLASSIFIER, "topology": 2, "bottleneck_distances": 1, "plot_topology": 1}
PAIRS = {"prepare_pairs": 1, "train_pair_encoder": 1, "attribute_pairs": 2, "pair_convergence": 1,
         "pair_topology": 1, "pair_tables": 1, "plot_pairs": 1}  # fmt: skip
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
    planned = _plan(root, tmp_path, studies=["classification"], explanations={"methods": []},
                    faithfulness={"fractions": [0.1, 0.5], "rankings": ["ig", "attention_all", "random"]})  # fmt: skip
    expected = {**CLASSIFICATION, **ALWAYS}
    del expected["explain"], expected["explanation_leaderboard"]
    assert planned == expected


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
