"""What the benchmark suites share: where they are, how they measure, how a length runs in a fresh interpreter,
and how a result is written."""

from __future__ import annotations

import gc
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from attnlens.device import synchronize
from attnlens.io import atomic_path, provenance
from attnlens.models.loading import model_shape, source_config
from attnlens.pipeline.config import ModelConfig
from benchmarks.records import measured_paths_changed
from benchmarks.shapes import reset_peak_rss, rss_kib

#: The checkout: the working folder of every fresh interpreter, so that it imports the benchmarks package.
ROOT = Path(__file__).resolve().parent.parent


def snakemake_in(work: Path, *args: str) -> list[str]:
    """The command that runs this checkout's pipeline in ``work`` (which holds the run's ``config/`` and gets its
    ``results/``), with Snakemake's ``args``."""
    return [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(ROOT / "workflow" / "Snakefile"),
        "--directory",
        str(work),
        *args,
    ]


def timed_command(cmd: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float, float]:
    """``subprocess.run(cmd, **kwargs)``, its wall seconds and its CPU seconds (the children's user + system)."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    out = subprocess.run(cmd, **kwargs)
    wall, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


#: glibc told to map every large block freshly and never trim: a peak RSS that counts every byte a step allocates,
#: even where a normal run would reuse memory the forward pass freed.
STRICT_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"}


def bench_child(suite: str, function: str, n: int, env: dict, *first, package: str = "benchmarks.suites") -> dict:
    """``<package>.<suite>.function(*first, n)`` in a fresh interpreter under ``env``: its JSON result."""
    args = ", ".join([*(repr(a) for a in first), str(n)])
    code = f"import json; from {package}.{suite} import {function} as b; print(json.dumps(b({args})))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if run.returncode:
        killed = " (killed: SIGKILL, the kernel's out-of-memory killer)" if run.returncode == -9 else ""
        raise RuntimeError(f"{function} at {n} tokens failed, exit {run.returncode}{killed}:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def measured(fn) -> tuple[object, float, int | None]:
    """``fn()``'s result, its seconds and its peak extra RSS in bytes (None where the peak cannot be reset)."""
    gc.collect()
    before = rss_kib("VmRSS")
    resettable = reset_peak_rss()
    t0 = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - t0
    peak = (rss_kib("VmHWM") - before) * 1024 if resettable else None
    return result, seconds, peak


def timed(fn, clock=measured) -> tuple[object, dict]:
    """``fn()``'s result, and its wall seconds (``s``), CPU seconds of the process, every thread (``cpu_s``), and
    peak extra memory in bytes (``peak_bytes``) as ``clock`` reads it (:func:`measured`, or a :class:`Clock`)."""
    cpu = time.process_time()
    result, seconds, peak = clock(fn)
    return result, {"s": round(seconds, 3), "cpu_s": round(time.process_time() - cpu, 2), "peak_bytes": peak}


class Clock:
    """Seconds and peak extra memory of one call on ``device``: the card's peak allocated bytes on CUDA (the device
    synchronised before the clock stops), else peak RSS (:func:`measured`)."""

    def __init__(self, device: torch.device):
        self.device = device

    def __call__(self, fn) -> tuple[object, float, int | None]:
        if self.device.type != "cuda":
            return measured(fn)
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        before = torch.cuda.memory_allocated(self.device)
        t0 = time.perf_counter()
        result = fn()
        synchronize(self.device)
        seconds = time.perf_counter() - t0
        return result, seconds, torch.cuda.max_memory_allocated(self.device) - before


def measure(fn) -> tuple[float, int | None]:
    """Seconds and peak extra RSS (bytes) of ``fn()``; its result is dropped before returning."""
    result, seconds, peak = measured(fn)
    del result
    return seconds, peak


def over(peak: int | None, dense: int) -> float | None:
    """A peak as a share of the dense bytes, to four places (None stays None)."""
    return None if peak is None else round(peak / dense, 4)


def resolved_model(section: dict) -> ModelConfig:
    """The ``model`` section with its length and window resolved against the checkpoint (null = its own)."""
    cfg = ModelConfig.from_dict(section)
    shape = model_shape(cfg, source_config(cfg.name_or_path, cfg.source))
    window = None if not shape.windows else shape.windows[0] if len(set(shape.windows)) == 1 else list(shape.windows)
    return ModelConfig.from_dict({**cfg.to_dict(), "max_length": shape.max_length, "attention_window": window})


def write_result(out_dir: str, name: str, result: dict) -> None:
    """``<out_dir>/<name>.json`` with provenance, atomically, and echo it."""
    result = {**result, "provenance": provenance(f"bench_{name}/v1", measured_paths_changed=measured_paths_changed())}
    with atomic_path(Path(out_dir) / f"{name}.json") as tmp:
        tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
