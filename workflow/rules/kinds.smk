# The kinds of rule, each said once: every rule is `use rule <kind> as <rule> with:` its files, log, benchmark and
# config keys. Every kind runs the one script workflow/scripts/stage.py, which calls the rule's function
# attnlens.stages.<module>.run_<rule> with the rule's files bound by name (attnlens.pipeline.entry). A kind is no
# step of its own: its log only keeps `snakemake --lint` content, every rule names its own. Memory and walltime on a
# cluster are the SLURM profile's (workflow/profiles/slurm), the one place they are said.


# Runs a model: one GPU (a workstation without one shares its cores among these jobs, README "Running"), two
# threads, and first in line, so that the one-thread table and figure jobs wait and then run two at a time beside
# it instead of one at a time beside an idle core (docs/benchmarks.md, "The default run").
rule model_job:
    log:
        "results/logs/kinds/model_job.log",
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    resources:
        gpu=1,
    script:
        "../scripts/stage.py"


# Runs CPU kernels (comparison and topology shards, the pair encoder): two threads, first in line.
rule kernel_job:
    log:
        "results/logs/kinds/kernel_job.log",
    priority: 1
    conda:
        "../envs/pipeline.yaml"
    threads: 2
    script:
        "../scripts/stage.py"


# One thread of data or model preparation, submitted like the rest on a cluster.
rule cpu_job:
    log:
        "results/logs/kinds/cpu_job.log",
    conda:
        "../envs/pipeline.yaml"
    script:
        "../scripts/stage.py"


# A table, a figure, an explorer or the manifest: seconds of work, one thread. Each such rule also says
# `localrule: True` (it runs where Snakemake runs, also under the SLURM profile, instead of waiting in the queue one by
# one): Snakemake 9's `use rule … with:` resets that directive to False, so a kind cannot say it for its rules.
rule light_job:
    log:
        "results/logs/kinds/light_job.log",
    conda:
        "../envs/pipeline.yaml"
    script:
        "../scripts/stage.py"
