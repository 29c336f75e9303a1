# attnlens: does what a transformer attends to agree with what its prediction depends on?
# Entry point of the pipeline; see README.md for what runs and where its files go.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/attention.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/attribution.smk"
include: "workflow/rules/similarity.smk"
include: "workflow/rules/topology.smk"
include: "workflow/rules/pairs.smk"
include: "workflow/rules/report.smk"


localrules:
    all,
    manifest,


rule all:
    default_target: True
    input:
        get_final_outputs(),
        "results/explorer",
        "results/manifest.json",
