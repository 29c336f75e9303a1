"""The pipeline's infrastructure: what a run is and how its jobs run, with no numerics of its own.

* :mod:`~attnlens.pipeline.config` — the configuration: one declaration per key in the schema, the section classes,
  validation and the generated ``config/README.md``;
* :mod:`~attnlens.pipeline.grid` — a grid of runs (datasets × models × seeds) and the jobs they share;
* :mod:`~attnlens.pipeline.outputs` — what the workflow builds: each study's files, a run's and a grid's;
* :mod:`~attnlens.pipeline.startup` — what the workflow does before it plans a job, as one call;
* :mod:`~attnlens.pipeline.manifest` — ``results/manifest.json``: every artifact, its rule and its inputs' hashes;
* :mod:`~attnlens.pipeline.compare` — whether two runs' results are the same, to the last bit;
* :mod:`~attnlens.pipeline.runtime` — a rule job's log, its one-line errors and its clean stop;
* :mod:`~attnlens.pipeline.jobserver` — warm job starts for a local run.
"""
