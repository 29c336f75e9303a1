"""The paper-shape rehearsal's bookkeeping (``benchmarks/paper_shape.py``): its configuration is valid, the
Snakemake log is read into per-job seconds, and the extrapolation is the stated linear formula."""

from __future__ import annotations

import copy

import pytest
import yaml

from attnlens.pipeline.config import read_config_file, validate_config
from benchmarks import gpu_run, paper_shape, rule_times
from benchmarks.measuring import snakemake_in
from tests.support.helpers import GUARD, ROOT, merged, run_guarded


def test_rehearsal_config_is_valid_and_keeps_the_paper_settings(tmp_path):
    cfg = paper_shape.rehearsal_config(tmp_path / "clf", n_test=3, ig_steps=4, cores=2)
    merged = copy.deepcopy(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()))
    for section, values in cfg.items():
        if isinstance(values, dict) and isinstance(merged.get(section), dict):
            merged[section].update(values)
        else:
            merged[section] = values
    validate_config(merged, where="paper_shape")
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    assert merged["studies"] == ["classification"] and merged["model"]["source"] == "classifier"
    assert (merged["model"]["max_length"], merged["model"]["attention_window"]) == (2048, 512)
    assert merged["attribution"]["n_steps"] == 4 and merged["attribution"]["adaptive"] is False
    assert merged["faithfulness"]["rankings"] == paper["faithfulness"]["rankings"]
    assert merged["similarity"]["n_permutations"] == paper["similarity"]["n_permutations"]
    test = merged["data"]["test_fraction"] * merged["data"]["synthetic"]["n_documents"]
    assert test == pytest.approx(3)  # a float fraction of a count: rounding only


LOG = """
[Mon Nov 23 18:00:00 2026]
localrule prepare_dataset:
    jobid: 3
[Mon Nov 23 18:00:05 2026]
Finished jobid: 3 (Rule: prepare_dataset)
[Mon Nov 23 18:00:05 2026]
rule attribute:
    jobid: 7
[Mon Nov 23 18:00:05 2026]
rule attribute:
    jobid: 8
[Mon Nov 23 18:01:45 2026]
Finished jobid: 7 (Rule: attribute)
[Mon Nov 23 18:02:05 2026]
Finished jobid: 8 (Rule: attribute)
"""


def test_log_gives_each_jobs_seconds(tmp_path):
    log = tmp_path / "run.snakemake.log"
    log.write_text(LOG)
    jobs = paper_shape.log_jobs(log)
    assert [{k: j[k] for k in ("rule", "seconds")} for j in jobs] == [
        {"rule": "prepare_dataset", "seconds": 5.0},
        {"rule": "attribute", "seconds": 100.0},
        {"rule": "attribute", "seconds": 120.0},
    ]
    assert [(j["start"].strftime("%H:%M:%S"), j["end"].strftime("%H:%M:%S")) for j in jobs] == [
        ("18:00:00", "18:00:05"),
        ("18:00:05", "18:01:45"),
        ("18:00:05", "18:02:05"),
    ]


def test_extrapolation_is_linear_in_the_work_units():
    counts = {"test": 2, "train": 4, "showcased": 2, "paper_showcased": 12}
    jobs = [
        {"rule": "plot_attention", "seconds": 5.0},
        {"rule": "attribute", "seconds": 105.0},
        {"rule": "attribute", "seconds": 105.0},
        {"rule": "predict", "seconds": 9.0},
    ]
    slurm = {"attribute": {"mem_mb": 16000, "runtime": 720}, "predict": {"mem_mb": 100, "runtime": 60}}
    bench = {"attribute": {"cpu_s": 400.0, "max_rss_mb": 9000.0, "jobs": 2}, "predict": {"max_rss_mb": 900.0}}
    rows = paper_shape.extrapolate(jobs, bench, counts, ig_steps=4, shards={"attribute": 16}, slurm=slurm)
    assert rows["plot_attention"]["unit"] == "fixed" and rows["plot_attention"]["seconds_paper"] == 5.0
    ig = rows["attribute"]
    # start-up = the smallest fixed job (5 s): (210 - 2 x 5) / (2 documents x 4 steps) = 25 s per step
    assert ig["seconds_per_unit"] == 25.0 and ig["units_rehearsal"] == 8
    assert ig["units_paper"] == (1070 - 12) * 50 + 12 * 500
    assert ig["seconds_paper"] == round(25.0 * ig["units_paper"] + 16 * 5.0)
    assert ig["slurm"]["memory_fits"] and not ig["slurm"]["cpu_runtime_fits"]
    assert ig["slurm"]["cpu_shards_needed"] == -(-ig["seconds_paper"] // (720 * 60))
    pred = rows["predict"]
    assert pred["seconds_per_unit"] == 2.0 and pred["seconds_paper"] == round(2.0 * 1070 + 5.0)
    assert pred["slurm"]["memory_fits"] is False  # 900 MB measured against a 100 MB allocation


def test_units_cover_every_rule_that_grows_with_the_data():
    counts = {"test": 2, "train": 4, "showcased": 1, "paper_showcased": 12}
    assert paper_shape.units("estimate_head_importance", counts, 4) == ("training documents", 4, 4280)
    assert paper_shape.units("attribute_embeddings", counts, 4) == ("per-embedding IG steps", 4, 12 * 200)
    for rule in ("predict", "extract_attention", "explain", "evaluate_faithfulness", "compare"):
        assert paper_shape.units(rule, counts, 4) == ("test documents", 2, 1070)
    assert paper_shape.units("plot_attention", counts, 4) is None


def test_rule_times_table_sums_each_rules_jobs(tmp_path):
    runs = []
    for i, scale in enumerate((1, 2)):
        run = tmp_path / f"run{i}"
        (run / ".snakemake" / "log").mkdir(parents=True)
        log = LOG.replace("18:01:45", "18:01:45" if scale == 1 else "18:02:05")
        (run / ".snakemake" / "log" / "a.snakemake.log").write_text(log)
        bench = run / "results" / "benchmarks" / "attribute"
        bench.mkdir(parents=True)
        for shard in (0, 1):
            (bench / f"shard{shard}.tsv").write_text(f"s\tmax_rss\tcpu_time\n1\t10\t{50 * scale}\n")
        runs.append(run)
    text = rule_times.table(runs)
    assert "| `attribute` | 2 | 220 | 100 | 240 | 200 |" in text
    assert "| `prepare_dataset` | 1 | 5 | – | 5 | – |" in text
    assert text.splitlines()[-1] == "| **all jobs** | 3 | 225 | 100 | 245 | 200 |"
    empty = tmp_path / "empty"
    (empty / ".snakemake" / "log").mkdir(parents=True)
    with pytest.raises(SystemExit, match="no Snakemake log with finished jobs"):
        rule_times.table([empty])


# --- make gpu-run (benchmarks/gpu_run.py) --------------------------------------------------------------------


def test_the_card_overlay_is_valid_and_plans_every_rule_of_every_study(tmp_path):
    """``config/gpu.yaml`` over ``config/config.yaml`` validates, and Snakemake plans the whole DAG from it (a dry
    run: every rule of the three studies, each per-document rule with its shards), with the batches ``auto``."""
    config = merged(read_config_file(ROOT / "config/config.yaml"), read_config_file(ROOT / "config/gpu.yaml"))
    validate_config(config, where="config/gpu.yaml")
    assert config["model"]["max_length"] == 2048 and config["model"]["attention_window"] == 256
    assert config["data"]["synthetic"]["n_documents"] * 0.2 >= 256  # the steady per-document figures
    batches = (
        ("attribution", "steps_per_pass"),
        ("explanations", "copies_per_pass"),
        ("explanations", "documents_per_pass"),
        ("faithfulness", "copies_per_pass"),
    )
    assert {config[section][key] for section, key in batches} == {"auto"}
    out = run_guarded(
        snakemake_in(
            tmp_path,
            "--configfile",
            str(ROOT / "config/config.yaml"),
            str(ROOT / "config/gpu.yaml"),
            "-n",
            "--quiet",
            "rules",
        ),
        timeout=GUARD["plan"],
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    planned = out.stdout + out.stderr
    for rule in (
        "train_classifier",
        "extract_attention",
        "attribute",
        "explain",
        "evaluate_faithfulness",
        "topology",
        "attribute_pairs",
        "build_explorers",
    ):
        assert rule in planned, rule


def test_the_card_runs_bookkeeping_reads_a_finished_run(tiny_run):
    """``gpu_run.summarise`` on the tiny run: every job's rule and stamps, the card's rules flagged from their
    ``gpu=1`` resource, seconds per document over the run's test split, and the paper's study extrapolated by the
    stated formula (training × documents × epochs, per-document rules × 1 070, the rest as they ran)."""
    out = gpu_run.summarise(tiny_run)
    rules = out["rules"]
    assert rules["attribute"]["gpu"] and rules["train_classifier"]["gpu"] and not rules["aggregate_similarity"]["gpu"]
    assert out["test_documents"] == 6 and out["gpu_jobs"] == sum(r["jobs"] for r in rules.values() if r["gpu"])
    assert rules["attribute"]["per_document_s"] == pytest.approx(rules["attribute"]["wall_s"] / 6, abs=1e-4)
    paper = sum(
        r["per_document_epoch_s"] * 4280 * 2
        if name == "train_classifier"
        else r["per_document_s"] * 1070
        if name in gpu_run.PER_TEST_DOCUMENT
        else r["wall_s"]
        for name, r in rules.items()
        if r["gpu"]
    )
    assert out["paper_study"]["gpu_hours"] == pytest.approx(paper / 3600, abs=1e-3)
