"""What the workflow builds and reads, decided in the package (:mod:`attnlens.pipeline.outputs`,
:mod:`attnlens.families`) and only called by ``workflow/rules/common.smk``; the DAG these targets give is planned
in ``tests/e2e/test_grid_runs.py`` and ``tests/e2e/test_workflow.py``."""

from __future__ import annotations

import copy
import json
import re
import shlex

import pytest

from attnlens.attention.summaries import TOPK_COLUMNS
from attnlens.errors import InputError
from attnlens.families import FAMILIES, classifier_label, family_of
from attnlens.models import ARCHITECTURES
from attnlens.pipeline import outputs as targets
from attnlens.pipeline.config import validate_config
from attnlens.pipeline.grid import expand_grid
from attnlens.sharding import resolve_shards
from tests.support.helpers import ROOT, tiny_config

GRID = {"models": {"minilm_w32": {}, "other": {"model": {"max_length": 64}}}, "seeds": [7, 8]}


def _config(grid: dict | None = None, **sections) -> dict:
    cfg = tiny_config(ROOT, **copy.deepcopy(sections))
    if grid:
        cfg["grid"] = copy.deepcopy(grid)
    return resolve_shards(validate_config(cfg), cpus=4)


def test_a_study_lists_its_files_and_its_shards():
    cfg = _config(attention={"n_shards": 3}, attribution={"n_shards": 2})
    files = targets.study_outputs("classification", cfg)
    assert [f for f in files if f.startswith("results/attention/shard")] == [
        f"results/attention/shard{k}.safetensors" for k in range(3)
    ]
    assert sum(f.startswith("results/attributions/shard") for f in files) == 2
    assert "results/models/train_metrics.json" in files and "results/paper/tables/explanation_leaderboard.csv" in files
    assert len(files) == len(set(files))
    with pytest.raises(ValueError, match="unknown study 'vision'"):
        targets.study_outputs("vision", cfg)


def test_options_that_drop_files():
    cfg = _config(explanations={"methods": []}, faithfulness={"rankings": ["ig", "random"]})
    cfg["model"]["source"] = "classifier"
    files = targets.study_outputs("classification", cfg)
    assert not any("leaderboard" in f for f in files) and "results/models/train_metrics.json" not in files
    assert (
        not targets.explains(cfg)
        and not targets.ranks_explanations(cfg)
        and not targets.trains_classifier(cfg["model"])
    )


def test_faithfulness_reads_the_explain_shards_only_for_rankings_from_them():
    assert targets.ranks_explanations(_config())  # the default ranks every method
    only_attention = _config(faithfulness={"rankings": ["ig", "attention_last", "attention_lower", "random"]})
    assert targets.explains(only_attention) and not targets.ranks_explanations(only_attention)
    assert targets.ranks_explanations(_config(faithfulness={"rankings": ["occlusion"]}))


def test_one_run_builds_its_studies_and_a_grid_every_runs():
    one = _config(studies=["classification", "pairs"])
    assert targets.final_outputs(one, None) == [
        *targets.study_outputs("classification", one),
        *targets.study_outputs("pairs", one),
    ]
    assert targets.manifests(None) == ["results/manifest.json"] and targets.findings_outputs(None) == []
    assert targets.grid_runs(None) == []

    cfg = _config(GRID, studies=["classification", "pairs"])
    grid = expand_grid(cfg)
    files = targets.final_outputs(cfg, grid)
    per_run = len(targets.study_outputs("classification", cfg))
    assert len(files) == 4 * per_run + 3 + 2 == len(set(files))  # four runs, the pair study once, the findings
    for run in grid.runs:
        mine = [f for f in files if f.startswith(f"results/runs/{run.name}/")]
        assert mine == [f for f in targets.outputs_of_run(cfg, run) if f.startswith("results/runs/")]
    assert files[-2:] == ["results/findings/findings.csv", "results/findings/figures"]
    assert targets.manifests(grid) == [f"results/runs/{r.name}/manifest.json" for r in grid.runs]
    assert [r["run"] for r in targets.grid_runs(grid)] == grid.names


def test_the_findings_read_every_run_in_grid_order():
    cfg = _config(GRID, studies=["classification", "topology", "pairs"])
    grid = expand_grid(cfg)
    inputs = targets.findings_inputs(cfg, grid)
    assert set(inputs) == {"metrics", "summary", "similarity", "leaderboard", "sanity", "claims", "pair_tables"}
    assert inputs["metrics"] == [f"results/runs/{n}/predictions/metrics.json" for n in grid.names]
    assert inputs["pair_tables"] == "results/pairs/tables"
    quiet = _config(
        GRID, studies=["classification"], explanations={"methods": []}, faithfulness={"rankings": ["ig", "random"]}
    )
    assert set(targets.findings_inputs(quiet, expand_grid(quiet))) == {"metrics", "summary", "similarity"}
    unchecked = _config(GRID, studies=["classification"], findings={"sanity_examples": 0})  # no randomisation check
    assert set(targets.findings_inputs(unchecked, expand_grid(unchecked))) == {
        "metrics", "summary", "similarity", "leaderboard"
    }  # fmt: skip


def test_keys_select_nested_values():
    source = {"pairs": {"attribution": {"layer": 3, "steps": 9}, "seed": 1}, "figures": {"dpi": 90}}
    got = targets.select_keys(source, {"pairs": ["attribution.layer", "seed"], "figures": ["dpi"]})
    assert got == {"pairs": {"attribution": {"layer": 3}, "seed": 1}, "figures": {"dpi": 90}}
    with pytest.raises(KeyError, match="missing"):
        targets.select_keys(source, {"figures": ["missing"]})


def test_wildcard_patterns_match_exactly_their_names():
    pattern = targets.group_pattern(["a.b", "c"])
    assert re.fullmatch(pattern, "a.b") and re.fullmatch(pattern, "c")
    assert not re.fullmatch(pattern, "axb") and not re.fullmatch(pattern, "cc")
    assert not re.fullmatch(targets.group_pattern([]), "") and not re.fullmatch(targets.group_pattern([]), "x")


def test_the_training_launcher():
    script = "/a path/train_classifier.py"
    assert targets.launch_command("python", script, 0) == f"python {shlex.quote(script)}"
    assert targets.launch_command("python", script, 1) == f"python {shlex.quote(script)}"
    multi = shlex.split(targets.launch_command("/x/python", script, 4))
    assert multi[:3] == ["/x/python", "-m", "accelerate.commands.launch"] and multi[-1] == script
    assert multi[multi.index("--num_processes") + 1] == "4"


def test_an_unwritable_results_folder_is_one_line(tmp_path, monkeypatch):
    targets.check_writable(tmp_path)  # writable: nothing to say

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(targets.tempfile, "NamedTemporaryFile", refuse)
    with pytest.raises(
        InputError, match=r": \(permissions\): expected a folder this user can write .*Permission denied"
    ):
        targets.check_writable(tmp_path)


def test_the_topk_tables_are_those_the_figure_rule_writes():
    assert tuple(TOPK_COLUMNS) == targets.TOPK_TABLES


def test_every_architecture_has_its_family_once():
    assert sorted(a.name for a in ARCHITECTURES.values()) == sorted(FAMILIES)
    for arch in ARCHITECTURES.values():
        assert arch.family is FAMILIES[arch.name] and arch.model_type == arch.family.model_type
    assert family_of("big_bird") is family_of("bigbird") is FAMILIES["bigbird"] and family_of("bert") is None


@pytest.mark.parametrize(
    ("model", "saved", "label"),
    [
        ({"source": "convert_bert", "architecture": None}, None, "Longformer"),
        ({"source": "convert_bert", "architecture": "bigbird"}, None, "BigBird"),
        ({"source": "from_config", "architecture": "modernbert"}, None, "ModernBERT"),
        ({"source": "classifier"}, {"model_type": "big_bird"}, "BigBird"),
        ({"source": "classifier"}, {"model_type": "bert"}, "bert"),
        ({"source": "classifier"}, None, "imported classifier"),
        ({"source": "pretrained"}, None, "pretrained checkpoint"),
    ],
)
def test_the_report_names_the_classifier_by_family(tmp_path, model, saved, label):
    if saved is not None:
        (tmp_path / "config.json").write_text(json.dumps(saved), encoding="utf-8")
    assert classifier_label({**model, "name_or_path": str(tmp_path)}) == label
