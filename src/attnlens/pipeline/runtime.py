"""Route a rule's logging and stderr into its log file; turn bad input and faults into one clear line.

Scripts wrap their one package call in :func:`log_to`. Inside, ``logging`` and ``sys.stderr``
(warnings, progress bars) go to the rule's log. An :class:`~attnlens.errors.InputError` is written
as a single ``attnlens: error: <file>: <field>: <expected>`` line to the log *and* to the terminal,
and the process exits with status 1 — no traceback. So is a full disk (``ENOSPC``, ``EDQUOT``, however
deep the writer that met it). ``SIGTERM`` — what SLURM sends at the walltime, and ``kill``'s default —
stops the job cleanly: the writers' temporaries are removed as the stop unwinds (no half-written
artifact), one ``attnlens: stopped:`` line is printed and the process exits with 143. Any other
exception is a bug: its traceback goes to the log and to the terminal.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from attnlens.errors import InputError
from attnlens.io import Job, atomic_path, config_sha256, git_commit, set_job
from attnlens.pipeline import jobserver
from attnlens.pipeline.config import KEYS_GIVEN, KEYS_READ
from attnlens.pipeline.grid import job_config
from attnlens.version import __version__


def error_line(err: InputError) -> str:
    return f"attnlens: error: {err}"


class Stopped(BaseException):
    """Raised in the main thread when the job receives ``SIGTERM``; a ``BaseException``, so no ``except
    Exception`` on the way swallows it, and every ``finally`` (the atomic writers') runs."""


#: Exit status of a job stopped by SIGTERM (128 + 15), as a shell reports it.
STOPPED_STATUS = 128 + signal.SIGTERM


class _Stops:
    """SIGTERM's handler and the unraisable-exception hook :func:`log_to` installs, so that a stop always stops.

    A signal's handler runs at the main thread's next bytecode, and where that is a finaliser (a ``__del__`` or a
    weakref callback, which the garbage collector runs anywhere) Python prints the handler's :class:`Stopped` and
    drops it: the job would run on to its end as though never stopped (in CI it landed in the regex module's
    ``Group.__del__``). Such a stop is sent again every :attr:`PAUSE` seconds from a thread of its own until one
    lands in the job's own code, or the job ends."""

    PAUSE = 0.05

    def __init__(self, previous_hook) -> None:
        self.previous_hook = previous_hook
        self.ended = threading.Event()
        self.sender: threading.Thread | None = None
        self.hooked = False

    def handler(self, signum, frame) -> None:
        if not self.hooked:  # inside the hook itself the stop is left to the next sending
            raise Stopped(signal.Signals(signum).name)

    def unraisable(self, unraisable) -> None:
        if not isinstance(unraisable.exc_value, Stopped):
            self.previous_hook(unraisable)
            return
        self.hooked = True
        try:
            if self.sender is None:
                self.sender = threading.Thread(target=self._send, name="attnlens-stop", daemon=True)
                self.sender.start()
        finally:
            self.hooked = False

    def _send(self) -> None:
        while not self.ended.wait(self.PAUSE):
            os.kill(os.getpid(), signal.SIGTERM)

    def end(self) -> None:
        """Stop sending (before the handler is put back: a stop sent after would meet the default action)."""
        self.ended.set()
        if self.sender is not None:
            self.sender.join()


_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def disk_full(err: BaseException) -> bool:
    """``err`` says the device is full: an ``OSError`` with ENOSPC / EDQUOT, or a library's wrapper around one
    (safetensors and torch's writers report it in their message)."""
    if isinstance(err, OSError) and err.errno in _DISK_FULL:
        return True
    text = str(err)
    return "No space left on device" in text or "StorageFull" in text or "Disk quota exceeded" in text


def _named(outputs: Sequence[str]) -> str:
    """The job's outputs, for one line: the first three and how many more."""
    more = f" and {len(outputs) - 3} more" if len(outputs) > 3 else ""
    return ", ".join(str(o) for o in outputs[:3]) + more


def _say(line: str, handle, terminal) -> None:
    """Print ``line`` to the log and the terminal; a log on a full disk may refuse it, the terminal still gets it."""
    if handle is not terminal:
        with contextlib.suppress(OSError):
            print(line, file=handle, flush=True)
    print(line, file=terminal, flush=True)


@contextmanager
def log_to(path: str | os.PathLike | None, outputs: Sequence[str] = ()) -> Iterator[None]:
    """Send logging and stderr to ``path`` (append); report :class:`InputError` and a full disk as one line and
    exit 1; stop cleanly on SIGTERM (exit 143). ``outputs``: the job's outputs, named when the disk is full."""
    terminal = sys.stderr
    handle = open(path, "a", buffering=1, encoding="utf-8") if path else terminal  # noqa: SIM115
    root = logging.getLogger()
    handler = logging.StreamHandler(handle)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    sys.stderr = handle
    stops = _Stops(sys.unraisablehook)
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stops.handler) if main else None
    if main:
        sys.unraisablehook = stops.unraisable
    try:
        yield
    except InputError as err:
        _say(error_line(err), handle, terminal)
        raise SystemExit(1) from None
    except Stopped as why:
        where = f" ({_named(outputs)})" if outputs else ""
        _say(
            f"attnlens: stopped: {why} received{where}; no half-written artifact was kept, run the same command "
            "again to resume",
            handle,
            terminal,
        )
        raise SystemExit(STOPPED_STATUS) from None
    except Exception as err:
        if disk_full(err):
            where = _named(outputs) or getattr(err, "filename", None) or "results"
            line = f"attnlens: error: {where}: disk: expected free space to write it, the device is full ({err})"
            _say(line.splitlines()[0], handle, terminal)
            raise SystemExit(1) from None
        # a bug: its traceback goes to the rule's log (which the profile's failed-log display shows) and,
        # as the exception propagates, to the terminal
        if handle is not terminal:
            traceback.print_exc(file=handle)
        raise
    finally:
        if main:
            stops.end()
            signal.signal(signal.SIGTERM, previous)
            sys.unraisablehook = stops.previous_hook
        sys.stderr = terminal
        root.removeHandler(handler)
        if handle is not terminal:
            with contextlib.suppress(OSError):  # a log on a full disk: the terminal was told what it could not hold
                handle.close()


def job_record_path(log: str | os.PathLike) -> Path:
    """Where a job's record goes: next to its log, ``<log stem>.job.json``."""
    log = Path(log)
    return log.with_name(log.stem + ".job.json")


def process_age() -> float:
    """Seconds since this process started: at a job's first line of work, its start-up (the interpreter,
    Snakemake's preamble and the imports)."""
    started = jobserver.JOB_STARTED  # a job run by the warm job server: when its script's own process started
    return time.time() - (started if started is not None else psutil.Process().create_time())


@dataclass
class JobClock:
    """A job's start-up (:func:`process_age` when its work began) and its work's wall seconds."""

    startup: float = field(default_factory=process_age)
    began: float = field(default_factory=time.perf_counter)

    def seconds(self) -> dict[str, float]:
        return {"startup_seconds": round(self.startup, 3), "work_seconds": round(time.perf_counter() - self.began, 3)}


def write_job_record(
    rule: str,
    inputs: Sequence[str],
    outputs: Sequence[str],
    log: str | os.PathLike,
    wildcards: Mapping[str, Any] | None = None,
    run_config_sha256: str | None = None,
    clock: JobClock | None = None,
    given: Mapping[str, Mapping[str, Any]] | None = None,
    seed: int | None = None,
) -> Path:
    """Record what a finished job read and wrote, and (with ``clock``) how long it took to start and to work;
    ``results/manifest.json`` is built from these records, ``benchmarks/startup.py`` reads the times. ``given``: the
    job's input, output and params by the names its function takes them (:func:`named`), and ``seed`` the seed its
    provenance carried, from which :func:`attnlens.pipeline.entry.rerun_job` calls the function again."""
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
        **(clock.seconds() if clock else {}),
        **({"given": given, "seed": seed} if given is not None else {}),
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
    clock = JobClock()
    params = dict(smk.params.items())
    # the rule's config: its `cfg` parameter, the keys it reads by section (`keys(...)` in the workflow)
    section = params.get("cfg") if isinstance(params.get("cfg"), Mapping) else {}
    seed = first_seed(section)
    config = job_config(smk.config, dict(smk.wildcards.items()))  # a grid's run: that run's config
    if seed is None:  # rules without a seed of their own: the data seed everything downstream derives from
        seed = (config.get("data") or {}).get("seed")
    run_hash = config_sha256(config)
    set_job(Job(smk.rule, json.loads(json.dumps(section, default=str)), seed, run_hash))
    log = smk.log[0] if len(smk.log) else None
    try:
        with log_to(log, list(smk.output)):
            yield
            if log:  # inside: a full disk here is said in one line too
                write_job_record(
                    smk.rule,
                    list(smk.input),
                    list(smk.output),
                    log,
                    dict(smk.wildcards.items()),
                    run_hash,
                    clock,
                    {kind: named(getattr(smk, kind)) for kind in ("input", "output", "params")},
                    seed,
                )
    finally:
        set_job(None)


def named(entries: Any) -> dict[str, Any]:
    """A Snakemake job's named entries (its ``input``, ``output`` or ``params``) as plain JSON data: a file a path, a
    list of files a list."""
    return json.loads(json.dumps(dict(entries.items()), default=str))


def first_seed(cfg: Mapping[str, Any]) -> int | None:
    """The first ``seed`` of a rule's config (``{section: {key: value}}``, nested sections searched in order)."""
    if cfg.get("seed") is not None:
        return cfg["seed"]
    for value in cfg.values():
        if isinstance(value, Mapping) and (seed := first_seed(value)) is not None:
            return seed
    return None


def use_threads(n: int) -> None:
    """Let torch, and numba's compiled kernels where the job has loaded them, use the ``threads`` Snakemake granted
    the job (never more than the machine has): a one-thread job beside others does not spread its kernels over
    every core. Every kernel splits its work by head or by row, so its results do not depend on the count."""
    import torch  # noqa: PLC0415 (loaded already: only the model jobs, which import it first, call this)

    threads = max(1, min(int(n), os.cpu_count() or 1))
    numba = sys.modules.get("numba")  # loaded by the modules with kernels, before the job starts its work
    if numba is not None:
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    # after numba's: starting its OpenMP layer sets the process's thread count, which torch reads
    # (attnlens.attention.kernels.share_torch_threads keeps it so at every kernel launch)
    torch.set_num_threads(threads)
