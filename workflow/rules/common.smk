# Validation, thin wrappers and wildcard constraints: the only Python of the workflow. What it builds and reads is
# decided in the package (attnlens.pipeline.outputs, attnlens.pipeline.grid, attnlens.families); here are the calls
# that need Snakemake's own objects (config, workflow, report(), directory(), expand(), wildcards).
import sys
from pathlib import Path

from attnlens.errors import InputError
from attnlens.families import classifier_label
from attnlens.pipeline import outputs
from attnlens.pipeline.config.shared_keys import BUILD_BASE_MODEL_KEYS, PREPARE_DATASET_KEYS
from attnlens.pipeline.grid import grid_path, resolve_path
from attnlens.pipeline.outputs import FINDINGS, RUN_NOTES, TOPK_TABLES, group_pattern
from attnlens.pipeline.startup import start_workflow

#: The checkout this workflow comes from: workflow/rules/ is where this file is parsed (also when a user's own
#: Snakefile takes the workflow as a module, where workflow.basedir is the user's directory).
CHECKOUT = Path(workflow.current_basedir).resolve().parents[1]

#: The grid's runs (attnlens.pipeline.grid.Grid), or None: a config without a grid is one run with its files under
#: results/. The config is validated (defaults filled in) and its n_shards resolved before any rule reads it.
try:
    GRID = start_workflow(config, workflow.configfiles, CHECKOUT, dry_run=workflow.dryrun)
except InputError as err:
    sys.exit(f"attnlens: error: {err}")


def at(path):
    """A one-run path (``results/…``) as this config lays it out: the path itself; in a grid, the pattern of its
    scope (``results/runs/{run}/…``, ``results/datasets/{dataset_group}/…``, …; attnlens.pipeline.grid.grid_path)."""
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
    return outputs.select_keys(run_config(wildcards), sections)


def keys(**sections):
    """A rule's ``cfg`` parameter: only the config values it reads, by section, e.g.
    ``keys(attribution=["n_steps", "target"], figures=["dpi"])``; a dotted name reaches into a nested
    section (``keys(pairs=["attribution.layer"])``). Snakemake re-runs a job when its params change, so
    changing a key re-runs exactly the rules that list it (and what depends on their outputs); a rule
    that reads a key it does not list fails (``attnlens.pipeline.config.ConfigKeyNotGiven``). In a grid, a function of
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
    return outputs.shard_paths(at(pattern), value["n_shards"])


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


#: Report categories: the findings across a grid's runs and what each run did to the data and left out (FINDINGS,
#: RUN_NOTES), then one per study (in a grid, per run: Snakemake fills in the run's name).
CLASSIFICATION = "1 Classification ({run})" if GRID else f"1 Classification ({classifier_label(config['model'])})"
TOPOLOGY, PAIRS = ("2 Topology ({run})" if GRID else "2 Topology"), "3 Siamese pairs"
GENERATION = "4 Generation ({run})" if GRID else "4 Generation"


def train_launcher(wildcards, resources):
    """How train_classifier starts: one process, or one per GPU through `accelerate launch` when given several."""
    from snakemake.settings.types import DeploymentMethod

    # under --use-conda the env's own python; otherwise the interpreter Snakemake runs in (the .venv)
    methods = getattr(workflow.deployment_settings, "deployment_method", ()) or ()
    python = "python" if DeploymentMethod.CONDA in methods else sys.executable
    script = CHECKOUT / "workflow" / "scripts" / "train_classifier.py"
    return outputs.launch_command(python, script, int(resources.get("gpu", 0) or 0))


def exact_model(wildcards):
    """The exact-mode pair encoder, when pairs.exact.enabled."""
    return {"exact_dir": "results/models/pair_encoder_exact"} if config["pairs"]["exact"]["enabled"] else {}


def exact_metrics(wildcards):
    """The exact-mode training metrics, when pairs.exact.enabled."""
    return (
        {"exact_metrics_path": "results/models/pair_encoder_exact_metrics.json"}
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
    if outputs.explains(config):
        return {
            "explanation_paths": for_run(shards("explanations", "results/explanations/shard{shard}.parquet"), wildcards)
        }
    return {}


def every_target_explanations(wildcards):
    """The explain shards, when the methods explain every target (explanations.targets every)."""
    return explanation_shards(wildcards) if outputs.explains_every_target(config) else {}


def explained_rankings(wildcards):
    """The explain shards, when faithfulness.rankings names a ranking read from them."""
    return explanation_shards(wildcards) if outputs.ranks_explanations(config) else {}


def trains_classifier():
    """Whether the run fine-tunes its classifier (every model.source but an existing classifier)."""
    return outputs.trains_classifier(config["model"])


def get_final_outputs():
    """Everything the `all` rule builds (attnlens.pipeline.outputs.final_outputs)."""
    return outputs.final_outputs(config, GRID)


def manifests():
    """The run's manifest (each run's, in a grid)."""
    return outputs.manifests(GRID)


def manifest_targets(wildcards):
    """What the manifest of a run records, the run's outputs (every output of `rule all` without a grid)."""
    return get_final_outputs() if GRID is None else outputs.outputs_of_run(config, GRID.representative(wildcards))


def findings_inputs(wildcards):
    """What rule findings reads of each run (one list per artifact, in the order of the grid's runs)."""
    return outputs.findings_inputs(config, GRID)


def grid_runs():
    """The grid's runs as the findings list them in runs.csv."""
    return outputs.grid_runs(GRID)


wildcard_constraints:
    split="train|test",
    shard=r"\d+",
    run=group_pattern(GRID.groups("run") if GRID else []),
    dataset_group=group_pattern(GRID.groups("data") if GRID else []),
    base_group=group_pattern(GRID.groups("base") if GRID else []),


def learned_weights(wildcards):
    """Learned attention's head weights, where the run's generation.methods asks for the method (none otherwise)."""
    if "learned_attention" not in run_config(wildcards)["generation"]["methods"]:
        return []
    return at("results/generation/learned_attention.json").format(**wildcards)
