# attnlens: does what a transformer attends to agree with what its prediction depends on?
# Entry point of the pipeline; see README.md for what runs and where its files go.
import os
import sys

from snakemake.utils import min_version

from attnlens.config import read_config_file
from attnlens.errors import InputError

min_version("9.0")


# the default config file, read here first so that a broken one is one clear line (not Snakemake's parser error)
if os.path.exists("config/config.yaml"):
    try:
        read_config_file("config/config.yaml")
    except InputError as err:
        sys.exit(f"attnlens: error: {err}")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/attention.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/attribution.smk"
include: "workflow/rules/explanations.smk"
include: "workflow/rules/similarity.smk"
include: "workflow/rules/topology.smk"
include: "workflow/rules/pairs.smk"
include: "workflow/rules/report.smk"


# Light rules run in the Snakemake process itself, also under the SLURM profile: tables, figures, overlays,
# explorers and the manifest take seconds and would otherwise wait in the queue one by one; preparing the data
# and the base model runs where the network is (a hub dataset or checkpoint), which login nodes have.
localrules:
    all,
    prepare_dataset,
    build_base_model,
    import_classifier,
    prepare_pairs,
    plot_head_importance,
    plot_attention,
    count_topk,
    render_overlays,
    attribution_tables,
    attribution_overlays,
    plot_faithfulness,
    explanation_leaderboard,
    similarity_examples,
    plot_similarity,
    plot_topology,
    pair_tables,
    plot_pairs,
    build_explorers,
    manifest,


rule all:
    default_target: True
    input:
        get_final_outputs(),
        "results/manifest.json",
