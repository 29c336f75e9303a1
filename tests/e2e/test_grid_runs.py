"""Grids of runs end to end: the DAG a grid plans, the architecture grid's findings and shared jobs, and a grid of
one that gives the numbers of the same configuration without a grid."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import yaml

from attnlens.findings.statements import ALL_MODELS
from attnlens.findings.verdicts import HOLDS, NOT_STABLE, TOO_FEW
from attnlens.pipeline.compare import differences
from tests.conftest import ARCHITECTURE_ALPHA
from tests.support.helpers import (
    GUARD,
    ROOT,
    SNAKEMAKE,
    TEST_GRID,
    local_env,
    run_guarded,
    run_snakemake,
    tiny_config,
    write_config,
)
from tests.support.session_runs import session_run

#: The architecture grid's models, in its order (conftest.ARCHITECTURES)
MODELS = ("bigbird", "modernbert", "mistral")
#: The architecture grid's runs: each model at seed 7, the decoder at seed 8 too (conftest.ARCHITECTURE_EXCLUDED).
RUNS = ("default__bigbird__s7", "default__modernbert__s7", "default__mistral__s7", "default__mistral__s8")


#: The run of the `.test` configuration as a grid of one (:func:`_grid_of_one`).
GRID_OF_ONE = "results/runs/default__default__s7"


@session_run("grid_of_one_run", seconds=40)
def _grid_of_one(work: Path) -> Path:
    """The `.test` configuration as a grid of one run, up to its predictions, one thread a job as ``tiny_run``."""
    write_config(work, {**tiny_config(ROOT), "grid": {"seeds": [7]}})
    out = run_snakemake(
        ROOT,
        "--directory",
        str(work),
        "--cores",
        "1",
        f"{GRID_OF_ONE}/predictions/metrics.json",
        timeout=GUARD["stage"],
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return work


@pytest.fixture(scope="session")
def grid_of_one_run(session_runs) -> Path:
    return session_runs.get("grid_of_one_run")


@pytest.mark.workflow
def test_the_findings_of_a_grid_are_complete(architecture_grid):
    out = architecture_grid / "results/findings"
    statements = pd.read_csv(out / "statements.csv")
    assert set(statements["model"]) == {"bigbird", "modernbert", "mistral", ALL_MODELS}  # encoders and a decoder
    assert {"method ordering", "above chance", "masked vs unmasked", "topology claim"} <= set(statements["kind"])
    # every statement is counted and judged: at the grid's α = 0.2 one or two runs of a model are too few for the sign
    # test; the 4 runs of the three models together are enough (4 of 4: p = 2 · 2⁻⁴ = 0.125 < 0.2)
    assert statements["p_value"].between(0, 1).all() and statements["runs_holding"].le(statements["n_runs"]).all()
    per_model = statements[statements["model"] != ALL_MODELS]
    assert set(per_model["verdict"]) == {TOO_FEW} and per_model["note"].str.contains("needs at least 4").all()
    assert set(per_model.groupby("model")["n_runs"].max()) == {1, 2}  # the encoders' one seed, the decoder's two
    pooled = statements[(statements["model"] == ALL_MODELS) & (statements["n_runs"] == len(RUNS))]
    assert {HOLDS, NOT_STABLE} <= set(pooled["verdict"])
    holding = pooled[pooled["verdict"] == HOLDS]
    assert holding["runs_holding"].ge(0.8 * len(RUNS)).all() and holding["p_value"].lt(ARCHITECTURE_ALPHA).all()
    # every quantity is a number, or says why not
    quantities = pd.read_csv(out / "quantities.csv", keep_default_na=False, na_values=[""])
    assert {"classification", "similarity", "masking increase (legacy)", "leaderboard", "topology"} <= set(
        quantities["family"]
    )
    numbers = quantities[["mean", "std", "min", "max"]].notna().all(axis=1)
    assert (numbers | quantities["note"].fillna("").ne("")).all()
    assert quantities.loc[quantities["model"] == ALL_MODELS, "n_runs"].max() == len(RUNS)
    concordance = pd.read_csv(out / "concordance.csv")
    assert set(concordance["n_runs"]) == {1, 2, len(RUNS)}  # W needs two rankings: NaN for a model of one run
    assert concordance.loc[concordance["n_runs"] > 1, "kendall_w"].between(0, 1).all()
    runs = pd.read_csv(out / "runs.csv")
    assert runs["run"].tolist() == sorted(RUNS)  # by name
    assert runs["base_group"].tolist() == [name.split("__")[1] for name in sorted(RUNS)]
    shown = pd.read_csv(out / "findings.csv")
    assert len(shown) and set(shown["statement"]) <= set(statements["statement"])
    assert "# Findings across the runs of the grid" in (out / "findings.md").read_text(encoding="utf-8")
    assert (out / "findings.tex").is_file()
    figures = {p.stem for p in (out / "figures").glob("*.png")}
    assert {
        "classification_accuracy",
        "leaderboard_comprehensiveness",
        "topology_gap",
        "leaderboard_rbo_p0-9",
        "leaderboard_rbo_p0-98",
        "sanity_default_all_models",
    } <= figures
    # the sanity check: every explained method, the cascade of 6 layers, a verdict per scope and method
    sanity = pd.read_csv(out / "sanity.csv", keep_default_na=False, na_values=[""])
    assert set(sanity["level"]) == {"head", *(f"top{k}" for k in range(1, 7))}
    final = sanity[sanity["verdict"].fillna("") != ""]
    scopes = len(MODELS) + 1  # each model and all of them
    assert len(final) == scopes * sanity["method"].nunique() and final["mean_rho"].between(-1, 1).all()
    assert "Sanity check" in (out / "findings.md").read_text(encoding="utf-8")


@pytest.mark.workflow
def test_runs_of_a_grid_share_the_jobs_that_do_not_depend_on_an_axis(architecture_grid):
    results = architecture_grid / "results"
    # prepare_dataset reads model.source: BigBird's (convert_bert) differs from the two models drawn from their
    # configuration (from_config), which share one prepared dataset
    groups = pd.read_csv(results / "findings/runs.csv").set_index("run")["dataset_group"]
    assert groups["default__mistral__s8"] == groups["default__modernbert__s7"] != groups["default__bigbird__s7"]
    assert sorted(p.name for p in (results / "datasets").iterdir()) == sorted(set(groups))
    assert sorted(p.name for p in (results / "base_models").iterdir()) == sorted(MODELS)
    runs = sorted(p.name for p in (results / "runs").iterdir())
    assert runs == sorted(RUNS)  # grid.exclude left the encoders' second seeds out
    seeds = [
        json.loads((results / "runs" / r / "models/train_metrics.json").read_text())["provenance"]["seed"] for r in runs
    ]
    assert seeds == [int(r.rsplit("__s", 1)[1]) for r in runs]


@pytest.mark.workflow
def test_a_grid_run_gives_the_numbers_of_the_same_config_without_a_grid(tiny_run, grid_of_one_run, tmp_path):
    """The `.test` configuration as a grid of one run: its prepared data, models and predictions equal the one-run
    session run's (``tiny_run``) byte for byte but for what ``attnlens.pipeline.compare.MAY_DIFFER`` lists."""
    work, run = grid_of_one_run, GRID_OF_ONE
    one, grid = tmp_path / "one", tmp_path / "grid"
    pairs = {
        "data": ("results/data", "results/datasets/default/data"),
        "models/base": ("results/models/base", "results/base_models/default/models/base"),
        "models/finetuned": ("results/models/finetuned", f"{run}/models/finetuned"),
        "predictions": ("results/predictions", f"{run}/predictions"),
    }
    for name, (a, b) in pairs.items():
        shutil.copytree(tiny_run / a, one / name, ignore=shutil.ignore_patterns("pairs_*"))
        shutil.copytree(work / b, grid / name)
    # the one thing that differs: the path of the base model the classifier was fine-tuned from
    record = grid / "models/finetuned/provenance.json"
    prov = json.loads(record.read_text(encoding="utf-8"))
    assert prov["base_model"] == "results/base_models/default/models/base"
    record.write_text(json.dumps({**prov, "base_model": "results/models/base"}, indent=2), encoding="utf-8")
    assert not differences(one, grid), differences(one, grid)


@pytest.mark.workflow
def test_the_grid_dag_shares_jobs_that_do_not_depend_on_an_axis(tmp_path):
    """A dry run of the `.test` grid (2 models × 2 seeds): rule by rule, the jobs of one run times the runs, but
    one prepared dataset, one base model per model and the pair study once."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config/config.yaml").write_text(yaml.safe_dump(tiny_config(ROOT)), encoding="utf-8")
    (tmp_path / "config/grid.yaml").write_text(yaml.safe_dump({"grid": TEST_GRID}), encoding="utf-8")

    def counts(*extra) -> Counter:
        cmd = [
            *SNAKEMAKE,
            "--snakefile",
            ROOT / "workflow" / "Snakefile",
            "--directory",
            tmp_path,
            "-n",
            "--quiet",
            "rules",
            *extra,
        ]
        out = run_guarded(cmd, cwd=tmp_path, timeout=GUARD["plan"], env=local_env())
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        table = re.findall(r"^(\w+)\s+(\d+)$", out.stdout, flags=re.M)
        return Counter({rule: int(n) for rule, n in table if rule != "total"})

    one, grid = counts(), counts("--configfile", tmp_path / "config/grid.yaml")
    shared = {"prepare_dataset": 1, "build_base_model": 2, "findings": 1, "all": 1, "sanity_check": 4}
    pair_rules = [r for r in one if "pair" in r]
    for rule, n in one.items():
        expected = shared.get(rule, n if rule in pair_rules else 4 * n)
        assert grid[rule] == expected, (rule, grid[rule], expected)
    assert set(grid) == set(one) | {"findings", "sanity_check"}  # the cross-run rule, and what it alone reads
    pair_jobs = sum(one[r] for r in pair_rules)
    assert sum(grid.values()) == 4 * (sum(one.values()) - pair_jobs - 1 + 1) - 3 - 2 + pair_jobs + 2
