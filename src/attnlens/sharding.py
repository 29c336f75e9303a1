"""Where an example goes and what it draws: shard counts, an example's shard and its random stream.

A sharded rule's ``n_shards`` is a count, or ``auto`` (one shard per :data:`SHARD_THREADS` of the CPUs the run is
planned on: :func:`shard_count`, :func:`resolve_shards`). An example's shard (:func:`shard_of`) and its random
draws (:func:`example_rng`) depend on its id alone, never on the order or number of the others, so a shard's
output changes only when its examples do. A leaf: the numerics and the pipeline both read it.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import numpy as np

from attnlens.errors import InputError

#: Threads of every sharded rule's job: ``n_shards: auto`` gives one shard per this many CPUs.
SHARD_THREADS = 2
#: The CPU count ``n_shards: auto`` follows: set by the Snakemake process that plans a run (to its machine's
#: count, unless already set) and inherited by every job it starts, on this machine or a cluster node.
PLANNED_CPUS_ENV = "ATTNLENS_PLANNED_CPUS"
#: Sections with an ``n_shards`` key (dotted: nested).
SHARDED_SECTIONS = ("attention", "attribution", "explanations", "topology", "pairs.attribution", "generation")


def machine_cpus() -> int:
    """CPUs this process may run on (its affinity mask, where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def planned_cpus() -> int:
    """The CPUs ``n_shards: auto`` follows: :data:`PLANNED_CPUS_ENV` when set, else this machine's."""
    value = os.environ.get(PLANNED_CPUS_ENV, "")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise InputError("environment", PLANNED_CPUS_ENV, f"expected a positive integer, found {value!r}")
        return int(value)
    return machine_cpus()


def shard_count(value: int | str, cpus: int) -> int:
    """``n_shards`` as a number: an integer as it is; ``auto`` = one shard per :data:`SHARD_THREADS` of ``cpus``
    (at least one)."""
    if value != "auto":
        return int(value)
    return max(1, cpus // SHARD_THREADS)


def resolve_shards(config: dict[str, Any], cpus: int) -> dict[str, Any]:
    """Every ``n_shards: auto`` of a validated config replaced by :func:`shard_count` (in place; returned).

    The Snakefile calls it before any rule reads the config, with the CPUs of the machine that plans the
    run; the jobs that run elsewhere (a cluster node) parse the Snakefile again and, through the inherited
    :data:`PLANNED_CPUS_ENV`, reach the same counts, so shard files, jobs and their ``params`` agree. A
    run planned on a machine with another CPU count re-shards (and so re-runs) the sharded rules; an
    integer pins the count.
    """
    for section in SHARDED_SECTIONS:
        node = config
        for part in section.split("."):
            node = node.get(part, {})
        if "n_shards" in node:
            node["n_shards"] = shard_count(node["n_shards"], cpus)
    return config


def shard_of(example_id: str, n_shards: int | str) -> int:
    """Stable shard of an example: the first 8 bytes of sha256(id) modulo ``n_shards``.

    ``n_shards`` is a count, or ``auto`` (this machine's count, :func:`shard_count`) for a
    section built in Python without resolving it; the Snakefile always passes a count.

    Independent of the order, number and content of the other examples, of the Python process
    (unlike ``hash``) and of the platform, so a shard's output changes only when its examples do.
    """
    count = n_shards if isinstance(n_shards, int) else shard_count(n_shards, planned_cpus())
    digest = hashlib.sha256(str(example_id).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def shard_positions(example_ids, n_shards: int | str, shard: int) -> list[int]:
    """The positions of the examples of ``shard`` among ``example_ids`` (:func:`shard_of`), in their order."""
    return [k for k, eid in enumerate(example_ids) if shard_of(eid, n_shards) == shard]


def example_rng(seed: int, example_id: str, *streams: int) -> np.random.Generator:
    """A generator that depends only on (seed, example id, streams): same draws in any shard or order."""
    sub = int.from_bytes(hashlib.sha256(str(example_id).encode()).digest()[:4], "little")
    return np.random.default_rng([seed, sub, *streams])
