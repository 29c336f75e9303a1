# Validation, helpers and wildcard constraints: the only Python of the workflow.
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path

from attnlens.config import PLANNED_CPUS_ENV, machine_cpus, planned_cpus, resolve_shards, validate_config
from attnlens.errors import InputError

# the checkout that `--sdm conda` installs into each rule's environment (workflow/envs/pipeline.post-deploy.sh)
os.environ.setdefault("ATTNLENS_SOURCE", str(Path(workflow.basedir).resolve()))

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
    that reads a key it does not list fails (``attnlens.config.ConfigKeyNotGiven``)."""
    cfg = {}
    for name, paths in sections.items():
        for path in paths:
            src, dst = config[name], cfg.setdefault(name, {})
            *parents, leaf = path.split(".")
            for part in parents:
                src, dst = src[part], dst.setdefault(part, {})
            dst[leaf] = src[leaf]
    return cfg


def shards(section, pattern):
    """One path per shard of a sharded rule (``<section>.n_shards`` of them; dotted for nested sections)."""
    value = config
    for part in section.split("."):
        value = value[part]
    return expand(pattern, shard=range(value["n_shards"]))


TOPK_TABLES = [f"{kind}_by_{by}" for kind in ("attended", "attending") for by in ("type", "position")] + [
    "intersection_by_type",
    "intersection_by_position",
    "token_occurrences",
]


def report_figure(stem, caption, category, subcategory, **labels):
    """``<stem>.png`` (shown in the Snakemake report with ``caption``) and ``<stem>.pdf``."""
    png = report(f"{stem}.png", caption=f"../report/{caption}.rst", category=category, subcategory=subcategory,
                 labels=labels or None)  # fmt: skip
    return [png, f"{stem}.pdf"]


def report_table(stem, caption, category, subcategory, **labels):
    """``<stem>.csv`` (shown in the Snakemake report with ``caption``), ``.tex`` and ``.md``."""
    csv = report(f"{stem}.csv", caption=f"../report/{caption}.rst", category=category, subcategory=subcategory,
                 labels=labels or None)  # fmt: skip
    return [csv, f"{stem}.tex", f"{stem}.md"]


def report_dir(path, pattern, caption, category, subcategory):
    """An output folder whose files matching ``pattern`` go into the Snakemake report, one per ``{name}``."""
    return report(directory(path), patterns=[pattern], caption=f"../report/{caption}.rst", category=category,
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


#: Report categories: what the run did to the data and left out, then one per study.
RUN_NOTES = "0 Run notes"
CLASSIFICATION = f"1 Classification ({classifier_label()})"
TOPOLOGY, PAIRS = "2 Topology", "3 Siamese pairs"


def train_launcher(wildcards, resources):
    """How train_classifier starts: one process, or one per GPU through `accelerate launch` when given several."""
    from snakemake.settings.types import DeploymentMethod

    # under --use-conda the env's own python; otherwise the interpreter Snakemake runs in (the .venv)
    methods = getattr(workflow.deployment_settings, "deployment_method", ()) or ()
    python = "python" if DeploymentMethod.CONDA in methods else sys.executable
    script = shlex.quote(str(Path(workflow.basedir) / "workflow" / "scripts" / "train_classifier.py"))
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


def explanation_shards(wildcards):
    """The explain shards, when explanations.methods is not empty (the explorer's overlays)."""
    if config["explanations"]["methods"]:
        return {"explanations": shards("explanations", "results/explanations/shard{shard}.parquet")}
    return {}


def explained_rankings(wildcards):
    """The explain shards, when faithfulness.rankings names an explanation method (not IG, attention or random)."""
    computed = set(config["explanations"]["methods"]) - {"attention_last", "attention_all"}
    return explanation_shards(wildcards) if computed & set(config["faithfulness"]["rankings"]) else {}


def explanation_outputs():
    """The leaderboard's figure and table, when explanations.methods is not empty."""
    if not config["explanations"]["methods"]:
        return []
    return ["results/paper/figures/explanation_leaderboard.png", "results/paper/tables/explanation_leaderboard.csv"]


def trains_classifier():
    """Whether the run fine-tunes its classifier (every model.source but an existing classifier)."""
    return config["model"]["source"] != "classifier"


def study_outputs(study):
    """What `rule all` builds for one study of `studies` (what each needs before it follows from the DAG)."""
    if study == "classification":
        return [
            "results/models/finetuned",
            *(["results/models/train_metrics.json"] if trains_classifier() else []),
            "results/predictions/test.parquet",
            "results/predictions/metrics.json",
            "results/predictions/selection.json",
            "results/importance/head_importance.safetensors",
            *shards("attention", "results/attention/shard{shard}.safetensors"),
            "results/paper/figures/head_importance.png",
            "results/paper/figures/attention_heatmaps",
            "results/paper/figures/attention_aggregate.png",
            "results/paper/figures/topk_counts.png",
            "results/paper/overlays",
            *shards("attribution", "results/attributions/shard{shard}.parquet"),
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
    """Everything the `all` rule builds, the outputs of the selected studies (config key `studies`)."""
    return [path for study in config["studies"] for path in study_outputs(study)]


wildcard_constraints:
    split="train|test",
    shard=r"\d+",
