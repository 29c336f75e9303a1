# Validation, helpers and wildcard constraints: the only Python of the workflow.
import json
import os
import re
import shlex
import sys
import tempfile
from pathlib import Path

from attnlens.attribution.methods import ranking_source
from attnlens.config import PLANNED_CPUS_ENV, machine_cpus, planned_cpus, resolve_shards, validate_config
from attnlens.errors import InputError
from attnlens.grid import BUILD_BASE_MODEL_KEYS, PREPARE_DATASET_KEYS, expand_grid, grid_path, has_grid, resolve_path

#: The checkout this workflow comes from: workflow/rules/ is where this file is parsed (also when a user's own
#: Snakefile takes the workflow as a module, where workflow.basedir is the user's directory).
CHECKOUT = Path(workflow.current_basedir).resolve().parents[1]

# the checkout that `--sdm conda` installs into each rule's environment (workflow/envs/pipeline.post-deploy.sh)
os.environ.setdefault("ATTNLENS_SOURCE", str(CHECKOUT))

try:
    validate_config(config, where=" + ".join(map(str, workflow.configfiles)) or "config")
except InputError as err:
    sys.exit(f"attnlens: error: {err}")

# glibc malloc keeps freed activation buffers (up to 32 MB each) in the heap instead of returning them to the
# OS, so the next forward or backward does not page-fault them in again; the jobs inherit it at their start
# (docs/benchmarks.md, "glibc malloc"); a GLIBC_TUNABLES of your own is kept; other C libraries ignore it
os.environ.setdefault(
    "GLIBC_TUNABLES",
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=100000000000:glibc.malloc.top_pad=268435456",
)

# n_shards: auto -> one shard per 2 CPUs of the machine that plans the run; the jobs it starts (a cluster
# job parses this file again on its node) inherit that count through the environment and agree on it
os.environ.setdefault(PLANNED_CPUS_ENV, str(machine_cpus()))
try:
    resolve_shards(config, planned_cpus())
except InputError as err:
    sys.exit(f"attnlens: error: {err}")

#: The grid's runs (attnlens.grid.Grid), or None: a config without a grid is one run with its files under results/.
GRID = None
if has_grid(config):
    try:
        GRID = expand_grid(
            config, PREPARE_DATASET_KEYS, BUILD_BASE_MODEL_KEYS, where=" + ".join(map(str, workflow.configfiles))
        )
    except InputError as err:
        sys.exit(f"attnlens: error: {err}")


def at(path):
    """A one-run path (``results/…``) as this config lays it out: the path itself; in a grid, the pattern of its
    scope (``results/runs/{run}/…``, ``results/datasets/{dataset_group}/…``, …; attnlens.grid.grid_path)."""
    return grid_path(path) if GRID else path


def shared(path):
    """An input a run's job reads from a job the runs share (the prepared dataset, the base model): the path
    itself; in a grid, a function of the job's wildcards that names the file its run reads."""
    if GRID is None:
        return path
    return lambda wildcards: resolve_path(path, GRID.representative(wildcards))


def run_config(wildcards=None):
    """The config of the run a job's wildcards name (the config itself without a grid, or for a job of no run)."""
    named = wildcards is not None and any(w in wildcards.keys() for w in ("run", "base_group", "dataset_group"))
    return GRID.representative(wildcards).config if GRID and named else config


def job_keys(wildcards, **sections):
    """The config values of ``sections`` (as :func:`keys` names them) for the run of a job's wildcards."""
    cfg, source = {}, run_config(wildcards)
    for name, paths in sections.items():
        for path in paths:
            src, dst = source[name], cfg.setdefault(name, {})
            *parents, leaf = path.split(".")
            for part in parents:
                src, dst = src[part], dst.setdefault(part, {})
            dst[leaf] = src[leaf]
    return cfg


def check_writable(folder="results"):
    """Stop before any job when the run cannot write its results (a read-only results/ or working directory)."""
    probe = Path(folder) if Path(folder).is_dir() else Path(".")
    try:
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".attnlens-write-test-"):
            pass
    except OSError as err:
        sys.exit(
            f"attnlens: error: {probe.resolve()}: (permissions): expected a folder this user can write "
            f"the run's results into ({err.strerror}); make it writable or run from another directory"
        )


if not workflow.dryrun:
    check_writable()


# Rules that run a model (and the comparison and topology shards) say `priority: 1`: on a workstation they go
# first, so the one-thread figure and table jobs wait and then run two at a time, instead of one at a time beside
# a core left idle (docs/benchmarks.md, "The default run"); on a cluster every ready job is submitted anyway.


def keys(**sections):
    """A rule's ``cfg`` parameter: only the config values it reads, by section, e.g.
    ``keys(attribution=["n_steps", "target"], figures=["dpi"])``; a dotted name reaches into a nested
    section (``keys(pairs=["attribution.layer"])``). Snakemake re-runs a job when its params change, so
    changing a key re-runs exactly the rules that list it (and what depends on their outputs); a rule
    that reads a key it does not list fails (``attnlens.config.ConfigKeyNotGiven``). In a grid, a function of
    the job's wildcards: the values of its run."""
    if GRID is None:
        return job_keys(None, **sections)
    return lambda wildcards: job_keys(wildcards, **sections)


def shards(section, pattern):
    """One path per shard of a sharded rule (``<section>.n_shards`` of them; dotted for nested sections), laid out
    by :func:`at`. The sharded sections are not axes of a grid, so every run has the same shards."""
    value = config
    for part in section.split("."):
        value = value[part]
    return expand(at(pattern), shard=range(value["n_shards"]), allow_missing=True)


TOPK_TABLES = [f"{kind}_by_{by}" for kind in ("attended", "attending") for by in ("type", "position")] + [
    "intersection_by_type",
    "intersection_by_position",
    "token_occurrences",
]


def report_figure(stem, caption, category, subcategory, **labels):
    """``<stem>.png`` (shown in the Snakemake report with ``caption``) and ``<stem>.pdf``."""
    stem = at(stem)
    png = report(f"{stem}.png", caption=f"../report/{caption}.rst", category=category, subcategory=subcategory,
                 labels=labels or None)  # fmt: skip
    return [png, f"{stem}.pdf"]


def report_table(stem, caption, category, subcategory, **labels):
    """``<stem>.csv`` (shown in the Snakemake report with ``caption``), ``.tex`` and ``.md``."""
    stem = at(stem)
    csv = report(f"{stem}.csv", caption=f"../report/{caption}.rst", category=category, subcategory=subcategory,
                 labels=labels or None)  # fmt: skip
    return [csv, f"{stem}.tex", f"{stem}.md"]


def report_dir(path, pattern, caption, category, subcategory):
    """An output folder whose files matching ``pattern`` go into the Snakemake report, one per ``{name}``."""
    return report(directory(at(path)), patterns=[pattern], caption=f"../report/{caption}.rst", category=category,
                  subcategory=subcategory, labels={"file": "{name}"})  # fmt: skip


def classifier_label():
    """The classifier's architecture as the report names it: what ``convert_bert`` builds, a Longformer
    checkpoint, or a pretrained checkpoint's or an imported classifier's ``model_type`` (read from a local folder's
    config.json)."""
    model = config["model"]
    kind = {
        "convert_bert": model["architecture"] or "longformer",
        "from_config": "modernbert",
        "longformer": "longformer",
    }.get(model["source"])
    saved = Path(model["name_or_path"]) / "config.json"
    if kind is None and saved.is_file():
        kind = json.loads(saved.read_text(encoding="utf-8")).get("model_type")
    names = {"longformer": "Longformer", "bigbird": "BigBird", "big_bird": "BigBird", "modernbert": "ModernBERT"}
    fallback = "pretrained checkpoint" if model["source"] == "pretrained" else "imported classifier"
    return names.get(kind, kind or fallback)


#: Report categories: the findings across a grid's runs and what each run did to the data and left out, then one per
#: study (in a grid, per run: Snakemake fills in the run's name).
FINDINGS, RUN_NOTES = "0 Findings", "0 Run notes"
CLASSIFICATION = "1 Classification ({run})" if GRID else f"1 Classification ({classifier_label()})"
TOPOLOGY, PAIRS = ("2 Topology ({run})" if GRID else "2 Topology"), "3 Siamese pairs"


def train_launcher(wildcards, resources):
    """How train_classifier starts: one process, or one per GPU through `accelerate launch` when given several."""
    from snakemake.settings.types import DeploymentMethod

    # under --use-conda the env's own python; otherwise the interpreter Snakemake runs in (the .venv)
    methods = getattr(workflow.deployment_settings, "deployment_method", ()) or ()
    python = "python" if DeploymentMethod.CONDA in methods else sys.executable
    script = shlex.quote(str(CHECKOUT / "workflow" / "scripts" / "train_classifier.py"))
    gpus = int(resources.get("gpu", 0) or 0)
    if gpus > 1:
        return f"{python} -m accelerate.commands.launch --multi_gpu --num_processes {gpus} --num_machines 1 {script}"
    return f"{python} {script}"


def exact_model(wildcards):
    """The exact-mode pair encoder, when pairs.exact.enabled."""
    return {"exact": "results/models/pair_encoder_exact"} if config["pairs"]["exact"]["enabled"] else {}


def exact_metrics(wildcards):
    """The exact-mode training metrics, when pairs.exact.enabled."""
    return (
        {"exact_metrics": "results/models/pair_encoder_exact_metrics.json"}
        if config["pairs"]["exact"]["enabled"]
        else {}
    )


def for_run(paths, wildcards):
    """Paths of :func:`at` patterns as the files of the job's run (an input function's paths are used as given)."""
    if GRID is None:
        return paths
    run = GRID.representative(wildcards)
    return [path.replace("{run}", run.name) for path in paths]


def explanation_shards(wildcards):
    """The explain shards, when explanations.methods is not empty (the explorer's overlays)."""
    if config["explanations"]["methods"]:
        return {"explanations": for_run(shards("explanations", "results/explanations/shard{shard}.parquet"), wildcards)}
    return {}


def explained_rankings(wildcards):
    """The explain shards, when faithfulness.rankings names a ranking read from them (attnlens.attribution.methods)."""
    from_explain = [r for r in config["faithfulness"]["rankings"] if ranking_source(r) == "explain"]
    return explanation_shards(wildcards) if from_explain else {}


def explanation_outputs():
    """The leaderboard's figure and table, when explanations.methods is not empty."""
    if not config["explanations"]["methods"]:
        return []
    return ["results/paper/figures/explanation_leaderboard.png", "results/paper/tables/explanation_leaderboard.csv"]


def trains_classifier(model=None):
    """Whether the run fine-tunes its classifier (every model.source but an existing classifier)."""
    return (model or config["model"])["source"] != "classifier"


def study_outputs(study, cfg=None):
    """What `rule all` builds for one study of `studies` (what each needs before it follows from the DAG), as
    one-run paths; ``cfg`` is the run's config (the config itself without a grid)."""
    cfg = cfg or config
    if study == "classification":
        return [
            "results/models/finetuned",
            *(["results/models/train_metrics.json"] if trains_classifier(cfg["model"]) else []),
            "results/predictions/test.parquet",
            "results/predictions/metrics.json",
            "results/predictions/selection.json",
            "results/importance/head_importance.safetensors",
            *expand("results/attention/shard{shard}.safetensors", shard=range(config["attention"]["n_shards"])),
            "results/paper/figures/head_importance.png",
            "results/paper/figures/attention_heatmaps",
            "results/paper/figures/attention_aggregate.png",
            "results/paper/figures/topk_counts.png",
            "results/paper/overlays",
            *expand("results/attributions/shard{shard}.parquet", shard=range(config["attribution"]["n_shards"])),
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
            *explanation_outputs(),
            "results/explorer",
        ]
    if study == "topology":
        return [
            "results/topology/bottleneck.parquet",
            "results/topology/claim.json",
            "results/topology/figures",
        ]
    if study == "pairs":
        return ["results/pairs/tables", "results/pairs/figures", "results/pairs/correlation.json"]
    raise ValueError(f"unknown study {study!r}")


def get_final_outputs():
    """Everything the `all` rule builds, the outputs of the selected studies (config key `studies`); in a grid,
    every run's, the pair study once, each run's manifest and the findings."""
    if GRID is None:
        return [path for study in config["studies"] for path in study_outputs(study)]
    out = []
    for run in GRID.runs:
        out += run_outputs(run)
    if "pairs" in config["studies"]:
        out += study_outputs("pairs")
    return out + findings_outputs()


def manifests():
    """The run's manifest (each run's, in a grid)."""
    return ["results/manifest.json"] if GRID is None else [resolve_path("results/manifest.json", r) for r in GRID.runs]


def run_outputs(run):
    """The files one run of a grid builds (its studies but the pair study, which the runs share)."""
    studies = [s for s in config["studies"] if s != "pairs"]
    return [resolve_path(path, run) for study in studies for path in study_outputs(study, run.config)]


def manifest_targets(wildcards):
    """What the manifest of a run records, the run's outputs (every output of `rule all` without a grid)."""
    return get_final_outputs() if GRID is None else run_outputs(GRID.representative(wildcards))


def findings_inputs(wildcards):
    """What rule findings reads of each run (one list per artifact, in the order of the grid's runs)."""
    studies = config["studies"]
    pick = {}
    if "classification" in studies or "topology" in studies:
        pick["metrics"] = "results/predictions/metrics.json"
    if "classification" in studies:
        pick["summary"] = "results/similarity/summary.parquet"
        pick["similarity"] = "results/paper/tables/similarity"
        if config["explanations"]["methods"]:
            pick["leaderboard"] = "results/explanations/leaderboard.parquet"
            pick["sanity"] = "results/sanity/sanity.parquet"
    if "topology" in studies:
        pick["claims"] = "results/topology/claim.json"
    inputs = {name: [resolve_path(path, run) for run in GRID.runs] for name, path in pick.items()}
    if "pairs" in studies:
        inputs["pairs"] = "results/pairs/tables"
    return inputs


def grid_runs():
    """The grid's runs as the findings list them in runs.csv, each run's place in the grid and the shared jobs it
    reads (none without a grid)."""
    return [
        {"run": r.name, "dataset": r.dataset, "model": r.model, "seed": r.seed, "dataset_group": r.dataset_group,
         "base_group": r.base_group or ""}
        for r in GRID.runs
    ] if GRID else []  # fmt: skip


def findings_outputs():
    """The findings across a grid's runs (nothing without a grid)."""
    if GRID is None:
        return []
    return ["results/findings/findings.csv", "results/findings/figures"]


def group_pattern(names):
    """A wildcard constraint matching exactly ``names`` (nothing when there are none)."""
    return "|".join(re.escape(n) for n in names) or "(?!x)x"


wildcard_constraints:
    split="train|test",
    shard=r"\d+",
    run=group_pattern(GRID.groups("run") if GRID else []),
    dataset_group=group_pattern(GRID.groups("data") if GRID else []),
    base_group=group_pattern(GRID.groups("base") if GRID else []),
