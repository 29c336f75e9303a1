"""Route a rule's logging and stderr into its log file; turn bad input into one clear line.

Scripts wrap their one package call in :func:`log_to`. Inside, ``logging`` and ``sys.stderr``
(warnings, progress bars) go to the rule's log. An :class:`~attnlens.errors.InputError` is written
as a single ``attnlens: error: <file>: <field>: <expected>`` line to the log *and* to the terminal,
and the process exits with status 1 — no traceback. Any other exception is a bug: its traceback
goes to the log and to the terminal.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from attnlens import __version__
from attnlens.config import KEYS_GIVEN, KEYS_READ
from attnlens.errors import InputError
from attnlens.io import Job, atomic_path, config_sha256, git_commit, set_job


def error_line(err: InputError) -> str:
    return f"attnlens: error: {err}"


@contextmanager
def log_to(path: str | os.PathLike | None) -> Iterator[None]:
    """Send logging and stderr to ``path`` (append); report :class:`InputError` as one line and exit 1."""
    terminal = sys.stderr
    handle = open(path, "a", buffering=1, encoding="utf-8") if path else terminal  # noqa: SIM115
    root = logging.getLogger()
    handler = logging.StreamHandler(handle)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    sys.stderr = handle
    try:
        yield
    except InputError as err:
        print(error_line(err), file=handle, flush=True)
        if handle is not terminal:
            print(error_line(err), file=terminal, flush=True)
        raise SystemExit(1) from None
    except Exception:
        # a bug: its traceback goes to the rule's log (which the profile's failed-log display shows) and,
        # as the exception propagates, to the terminal
        if handle is not terminal:
            traceback.print_exc(file=handle)
        raise
    finally:
        sys.stderr = terminal
        root.removeHandler(handler)
        if handle is not terminal:
            handle.close()


def job_record_path(log: str | os.PathLike) -> Path:
    """Where a job's record goes: next to its log, ``<log stem>.job.json``."""
    log = Path(log)
    return log.with_name(log.stem + ".job.json")


def write_job_record(
    rule: str, inputs: Sequence[str], outputs: Sequence[str], log: str | os.PathLike,
    wildcards: Mapping[str, Any] | None = None, run_config_sha256: str | None = None,
) -> Path:  # fmt: skip
    """Record what a finished job read and wrote; ``results/manifest.json`` is built from these records."""
    record = {
        "rule": rule,
        "wildcards": dict(wildcards or {}),
        "input": [str(p) for p in inputs],
        "output": [str(p) for p in outputs],
        "log": str(log),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "attnlens_version": __version__,
        "git_commit": git_commit(),
        "run_config_sha256": run_config_sha256,
        # the config keys the job was given (its params) and those it read
        "config_keys": sorted(KEYS_GIVEN),
        "config_keys_read": sorted(KEYS_READ),
    }
    path = job_record_path(log)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


@contextmanager
def rule_job(smk) -> Iterator[None]:
    """What every rule script runs its one package call in (``smk`` is Snakemake's ``snakemake`` object).

    It routes logging to the rule's log (:func:`log_to`), makes the job current so that figures and
    tables written inside carry its provenance (rule, config section and hash, seed), and, when the
    call returns, writes the job's record next to its log.
    """
    params = dict(smk.params.items())
    # the rule's config: its `cfg` parameter, the keys it reads by section (`keys(...)` in the workflow)
    section = params.get("cfg") if isinstance(params.get("cfg"), Mapping) else {}
    seed = first_seed(section)
    if seed is None:  # rules without a seed of their own: the data seed everything downstream derives from
        seed = (smk.config.get("data") or {}).get("seed")
    run_hash = config_sha256(smk.config)
    set_job(Job(smk.rule, json.loads(json.dumps(section, default=str)), seed, run_hash))
    log = smk.log[0] if len(smk.log) else None
    try:
        with log_to(log):
            yield
        if log:
            write_job_record(smk.rule, list(smk.input), list(smk.output), log, dict(smk.wildcards.items()), run_hash)
    finally:
        set_job(None)


def first_seed(cfg: Mapping[str, Any]) -> int | None:
    """The first ``seed`` of a rule's config (``{section: {key: value}}``, nested sections searched in order)."""
    if cfg.get("seed") is not None:
        return cfg["seed"]
    for value in cfg.values():
        if isinstance(value, Mapping) and (seed := first_seed(value)) is not None:
            return seed
    return None


def use_threads(n: int) -> None:
    """Let torch use the ``threads`` Snakemake granted the job (never more than the machine has)."""
    torch.set_num_threads(max(1, min(int(n), os.cpu_count() or 1)))
