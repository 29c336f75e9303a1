"""What the workflow builds, as plain functions of the validated config and its grid: each study's files, a run's
and a whole grid's targets, what the findings read of every run, and which optional inputs a job takes.

``workflow/rules/common.smk`` calls these with its ``config`` and ``GRID`` (and keeps only what needs Snakemake's
own objects: ``report()``, ``directory()``, wildcards); they return one-run paths (``results/…``) or, for a grid,
each run's own (:func:`attnlens.pipeline.grid.resolve_path`). Plain Python: the planner loads no model library.
"""

from __future__ import annotations

import errno
import re
import shlex
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from attnlens.attribution.methods import ranking_source
from attnlens.errors import InputError
from attnlens.pipeline.grid import Grid, Run, resolve_path, trains_classifier

#: The top-k tables of ``attention_figures`` (``results/paper/tables/topk_<name>.csv``): the keys of
#: :data:`attnlens.attention.summaries.TOPK_COLUMNS`, a module the planner does not load
#: (tests/unit/pipeline/test_targets.py).
TOPK_TABLES = (
    *(f"{kind}_by_{by}" for kind in ("attended", "attending") for by in ("type", "position")),
    "intersection_by_type",
    "intersection_by_position",
    "token_occurrences",
)

#: The explanation leaderboard's figure and table, built when the run explains (:func:`explains`).
LEADERBOARD = ["results/paper/figures/explanation_leaderboard.png", "results/paper/tables/explanation_leaderboard.csv"]

#: Report categories: the findings across a grid's runs and what each run did to the data and left out, then one per
#: study (:func:`report_categories`).
FINDINGS, RUN_NOTES = "0 Findings", "0 Run notes"


def explains(cfg: Mapping[str, Any]) -> bool:
    """Whether the run computes explanations (``explanations.methods`` not empty: the leaderboard, the overlays)."""
    return bool(cfg["explanations"]["methods"])


def explains_every_target(cfg: Mapping[str, Any]) -> bool:
    """Whether the methods explain every explained output of a document (``explanations.targets: every``), so that
    rule ``target_agreement`` compares each method's explanations of one document's targets."""
    return explains(cfg) and cfg["explanations"]["targets"] == "every"


def ranks_explanations(cfg: Mapping[str, Any]) -> bool:
    """Whether faithfulness reads the explain shards: ``faithfulness.rankings`` names a ranking read from them."""
    return explains(cfg) and any(ranking_source(r) == "explain" for r in cfg["faithfulness"]["rankings"])


def shard_paths(pattern: str, n_shards: int) -> list[str]:
    """``pattern`` with ``{shard}`` 0 … ``n_shards`` − 1."""
    return [pattern.replace("{shard}", str(k)) for k in range(n_shards)]


#: The generation study's sharded artifacts, each under ``results/generation/<name>/shard{shard}.parquet``.
ANSWER_SHARDS = ("ablations", "scores", "judged")


def study_outputs(study: str, cfg: Mapping[str, Any]) -> list[str]:
    """What ``rule all`` builds for one study of ``studies`` (what each needs before it follows from the DAG), as
    one-run paths; ``cfg`` is the run's config (the config itself without a grid)."""
    if study == "classification":
        return [
            "results/models/finetuned",
            *(["results/models/train_metrics.json"] if trains_classifier(cfg["model"]) else []),
            "results/predictions/test.parquet",
            "results/predictions/metrics.json",
            "results/predictions/selection.json",
            "results/importance/head_importance.safetensors",
            *shard_paths("results/attention/shard{shard}.safetensors", cfg["attention"]["n_shards"]),
            "results/paper/figures/head_importance.png",
            "results/paper/figures/attention_heatmaps",
            "results/paper/figures/attention_aggregate.png",
            "results/paper/figures/topk_counts.png",
            "results/paper/overlays",
            *shard_paths("results/attributions/shard{shard}.parquet", cfg["attribution"]["n_shards"]),
            "results/attributions/embeddings.parquet",
            "results/paper/tables/attributions",
            "results/paper/attribution_overlays",
            "results/paper/figures/faithfulness_curves.png",
            "results/paper/tables/faithfulness_aopc.csv",
            "results/paper/tables/plausibility.csv",
            "results/similarity/summary.parquet",
            "results/paper/tables/similarity",
            "results/paper/similarity_examples",
            "results/paper/figures/similarity_distributions.png",
            "results/paper/figures/head_agreement.png",
            "results/paper/tables/target_agreement.csv",
            "results/paper/tables/target_sensitivity.csv",
            "results/paper/figures/target_agreement.png",
            "results/paper/tables/query_attention.csv",
            *(LEADERBOARD if explains(cfg) else []),
            "results/explorer",
        ]
    if study == "topology":
        return ["results/topology/bottleneck.parquet", "results/topology/claim.json", "results/topology/figures"]
    if study == "pairs":
        return ["results/pairs/tables", "results/pairs/figures", "results/pairs/correlation.json"]
    if study == "generation":
        return [
            "results/models/generator",
            "results/models/generator_metrics.json",
            "results/generation/responses.parquet",
            *(
                path
                for stem in ANSWER_SHARDS
                for path in shard_paths(
                    f"results/generation/{stem}/shard{{shard}}.parquet", cfg["generation"]["n_shards"]
                )
            ),
            "results/generation/leaderboard.parquet",
            "results/paper/tables/answer_leaderboard.csv",
            "results/paper/figures/answer_leaderboard.png",
            "results/generation/explorer",
        ]
    raise ValueError(f"unknown study {study!r}")


def outputs_of_run(config: Mapping[str, Any], run: Run) -> list[str]:
    """The files one run of a grid builds: its studies but the pair study, which the runs share."""
    studies = [s for s in config["studies"] if s != "pairs"]
    return [resolve_path(path, run) for study in studies for path in study_outputs(study, run.config)]


def findings_outputs(grid: Grid | None) -> list[str]:
    """The findings across a grid's runs (nothing without a grid)."""
    return [] if grid is None else ["results/findings/findings.csv", "results/findings/figures"]


def final_outputs(config: Mapping[str, Any], grid: Grid | None) -> list[str]:
    """Everything ``rule all`` builds: the selected studies' outputs; in a grid, every run's, the pair study once
    and the findings."""
    if grid is None:
        return [path for study in config["studies"] for path in study_outputs(study, config)]
    out = [path for run in grid.runs for path in outputs_of_run(config, run)]
    if "pairs" in config["studies"]:
        out += study_outputs("pairs", config)
    return out + findings_outputs(grid)


def manifests(grid: Grid | None) -> list[str]:
    """The run's manifest (each run's, in a grid)."""
    return ["results/manifest.json"] if grid is None else [resolve_path("results/manifest.json", r) for r in grid.runs]


def findings_inputs(config: Mapping[str, Any], grid: Grid) -> dict[str, Any]:
    """What rule ``findings`` reads of each run: one list per artifact, in the order of the grid's runs (the pair
    tables once)."""
    studies = config["studies"]
    pick = {}
    if "classification" in studies or "topology" in studies:
        pick["metrics"] = "results/predictions/metrics.json"
    if "classification" in studies:
        pick["summary"] = "results/similarity/summary.parquet"
        pick["similarity"] = "results/paper/tables/similarity"
        if explains(config):
            pick["leaderboard"] = "results/explanations/leaderboard.parquet"
            if config["findings"]["sanity_examples"]:
                pick["sanity"] = "results/sanity/sanity.parquet"
    if "topology" in studies:
        pick["claims"] = "results/topology/claim.json"
    if "generation" in studies:
        pick["generator_metrics"] = "results/models/generator_metrics.json"
        pick["answer_leaderboard"] = "results/generation/leaderboard.parquet"
        pick["answer_structures"] = "results/generation/leaderboard_by_structure.parquet"
        if config["findings"]["sanity_examples"]:
            pick["answer_sanity"] = "results/generation/sanity.parquet"
    inputs: dict[str, Any] = {name: [resolve_path(path, run) for run in grid.runs] for name, path in pick.items()}
    if "pairs" in studies:
        inputs["pair_tables"] = "results/pairs/tables"
    return inputs


def grid_runs(grid: Grid | None) -> list[dict[str, Any]]:
    """The grid's runs as the findings list them in runs.csv: each run's place in the grid and the shared jobs it
    reads (none without a grid)."""
    if grid is None:
        return []
    return [
        {
            "run": r.name,
            "dataset": r.dataset,
            "model": r.model,
            "seed": r.seed,
            "dataset_group": r.dataset_group,
            "base_group": r.base_group or "",
        }
        for r in grid.runs
    ]


def group_pattern(names: Iterable[str]) -> str:
    """A wildcard constraint matching exactly ``names`` (nothing when there are none)."""
    return "|".join(re.escape(n) for n in names) or "(?!x)x"


def select_keys(source: Mapping[str, Any], sections: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """The values of ``sections`` (``{section: [key, "nested.key", …]}``) of the config ``source``, nested as there:
    a rule's ``cfg`` parameter, so that changing a key re-runs exactly the rules that list it."""
    cfg: dict[str, Any] = {}
    for name, paths in sections.items():
        for path in paths:
            src, dst = source[name], cfg.setdefault(name, {})
            *parents, leaf = path.split(".")
            for part in parents:
                src, dst = src[part], dst.setdefault(part, {})
            dst[leaf] = src[leaf]
    return cfg


def launch_command(python: str, script: str | Path, gpus: int) -> str:
    """How ``train_classifier`` starts: ``python script``, or one process per GPU through ``accelerate launch``."""
    script = shlex.quote(str(script))
    if gpus > 1:
        return f"{python} -m accelerate.commands.launch --multi_gpu --num_processes {gpus} --num_machines 1 {script}"
    return f"{python} {script}"


def check_writable(folder: str | Path = "results") -> None:
    """Raise :class:`InputError` when a run cannot write its results (a read-only ``results/`` or working
    directory), before any job starts."""
    probe = Path(folder) if Path(folder).is_dir() else Path(".")
    try:
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".attnlens-write-test-"):
            pass
    except OSError as err:
        reason = err.strerror or errno.errorcode.get(err.errno or 0, "not writable")
        raise InputError(
            str(probe.resolve()),
            "(permissions)",
            f"expected a folder this user can write the run's results into ({reason}); make it writable or run "
            "from another directory",
        ) from None
