"""What the workflow does before it plans a job, as one call (``workflow/rules/common.smk``): the environment the
jobs inherit, the config validated, ``n_shards: auto`` made a count and the grid expanded. A bad config or an
unwritable ``results/`` is one :class:`~attnlens.errors.InputError`, which the workflow prints as one line.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

from attnlens.pipeline.config import validate_config
from attnlens.pipeline.config.shared_keys import BUILD_BASE_MODEL_KEYS, PREPARE_DATASET_KEYS
from attnlens.pipeline.grid import Grid, expand_grid, has_grid
from attnlens.pipeline.outputs import check_writable
from attnlens.sharding import PLANNED_CPUS_ENV, machine_cpus, planned_cpus, resolve_shards

#: glibc malloc keeps freed activation buffers (up to 32 MB each) in the heap instead of returning them to the OS,
#: so the next forward or backward does not page-fault them in again; the jobs inherit it at their start
#: (docs/benchmarks.md, "glibc malloc"); a ``GLIBC_TUNABLES`` of the user's own is kept; other C libraries ignore it.
GLIBC_TUNABLES = (
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=100000000000:glibc.malloc.top_pad=268435456"
)
#: The checkout ``--sdm conda`` installs into each rule's environment (``workflow/envs/pipeline.post-deploy.sh``).
SOURCE_ENV = "ATTNLENS_SOURCE"


def start_workflow(
    config: MutableMapping[str, Any], configfiles: Sequence[Any], checkout: Path, dry_run: bool
) -> Grid | None:
    """Prepare a run of the workflow and return its grid (``None``: one run with its files under ``results/``).

    Sets what the jobs inherit (the checkout, glibc's malloc settings, the CPU count ``n_shards: auto`` follows:
    a cluster job parses the workflow again on its node and reaches the same counts), validates ``config`` in place
    (its defaults filled in), resolves its shard counts and expands its grid; a run that writes checks that
    ``results/`` is writable.

    Raises:
        InputError: the config, its grid or ``results/`` — one line naming the file and the key.
    """
    where = " + ".join(map(str, configfiles)) or "config"
    os.environ.setdefault(SOURCE_ENV, str(checkout))
    os.environ.setdefault("GLIBC_TUNABLES", GLIBC_TUNABLES)
    os.environ.setdefault(PLANNED_CPUS_ENV, str(machine_cpus()))
    validate_config(config, where=where)
    resolve_shards(config, planned_cpus())
    grid = expand_grid(config, PREPARE_DATASET_KEYS, BUILD_BASE_MODEL_KEYS, where=where) if has_grid(config) else None
    if not dry_run:
        check_writable("results")
    return grid
