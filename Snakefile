# attnlens: does what a transformer attends to agree with what its prediction depends on?
# Entry point of the pipeline; see README.md for what runs and where its files go.
import os
import sys

from snakemake.utils import min_version

from attnlens.pipeline import jobserver
from attnlens.pipeline.config import read_config_file
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
include: "workflow/rules/faithfulness.smk"
include: "workflow/rules/similarity.smk"
include: "workflow/rules/topology.smk"
include: "workflow/rules/pairs.smk"
include: "workflow/rules/generation.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/findings.smk"


# A local run's jobs start in forks of one process that has imported the stages (attnlens.pipeline.jobserver; README,
# "Warm job starts"): a job's start-up goes from seconds to half a second. ATTNLENS_WARM_JOBS=0 starts every job
# fresh; a cluster's jobs always start fresh.
onstart:
    jobserver.start(workflow)


onsuccess:
    jobserver.stop()


onerror:
    jobserver.stop()


# Light rules (tables, figures, overlays, explorers, the manifest) say `localrule: True`: they run in the
# Snakemake process itself, also under the SLURM profile, instead of waiting in the queue one by one for
# seconds of work.
localrules:
    all,


rule all:
    default_target: True
    input:
        get_final_outputs(),
        manifests(),
