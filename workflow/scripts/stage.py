"""Every rule's script: the rule's function, ``attnlens.stages.<module>.run_<rule>``, called with the job's files
bound by name (attnlens.pipeline.entry)."""

from attnlens.pipeline.jobserver import forward

forward()  # a warm job server, where one is up, runs this job (attnlens.pipeline.jobserver)

from attnlens.pipeline.entry import call_stage

call_stage(snakemake)
