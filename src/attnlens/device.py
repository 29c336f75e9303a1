"""One device policy: where every model-running stage puts its model, and in which precision it computes.

``model.device`` (config) is ``auto`` (default: the job's CUDA device when it has one, else the CPU),
``cpu``, ``cuda`` or ``cuda:N``. Every stage that runs the classifier — training, prediction, head
importance, attention extraction, IG, the explanations, faithfulness and topology — asks :func:`place`
(or :func:`resolve_device` where a launcher places the model, as accelerate does in training), so a rule
that asks the cluster for a GPU uses it, and one config key moves the whole study. Each call writes one
``device:`` line to the job's log. The pair-encoder rules ask for no GPU and keep their small sentence
encoder on the CPU.

Precision follows the device: ``fp16`` autocast (``train.fp16``), and IG's steps under float16 or bfloat16
autocast (``attribution.autocast``), apply on CUDA only (:func:`autocast_dtype`); on a CPU every stage computes in
float32.

Batches follow it too: a batch size set to ``auto`` (IG's steps, occlusion's and the removal curves' copies,
AttnLRP's documents per pass) is the most a card's free memory holds, measured once per job on its longest item
(:func:`batch_size`), and :data:`CPU_BATCH` on a CPU (one document per AttnLRP pass).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable

import torch

from attnlens.errors import InputError

log = logging.getLogger(__name__)

#: What ``model.device`` accepts (the schema's pattern says the same).
DEVICE_PATTERN = re.compile(r"^(auto|cpu|cuda(:[0-9]+)?)$")


def resolve_device(requested: str = "auto") -> torch.device:
    """The device a stage runs its model on: ``auto`` → ``cuda`` when the job sees a CUDA device, else ``cpu``.

    A named ``cuda`` device that this job cannot see is a config error (one line), not a silent CPU run.
    """
    if not DEVICE_PATTERN.match(requested):
        raise InputError("config", "model.device", f"expected auto, cpu, cuda or cuda:N, got {requested!r}")
    if requested == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(requested)
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise InputError(
                "config",
                "model.device",
                f"expected a CUDA device this job can see, got {requested!r} with {count} visible "
                "(set model.device: auto or cpu, or run the job on a GPU node)",
            )
    log.info(
        "device: %s (model.device %s)%s",
        device,
        requested,
        f" {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "",
    )
    return device


def place(model: torch.nn.Module, requested: str = "auto") -> torch.device:
    """Move ``model`` to the device :func:`resolve_device` picks; returns that device."""
    device = resolve_device(requested)
    model.to(device)
    return device


#: Half precisions an autocast setting names (``true`` is ``fp16``, the paper's).
HALF_PRECISIONS = {"fp16": torch.float16, "bf16": torch.bfloat16}


def autocast_dtype(
    device: torch.device | str, precision: bool | str, where: str = "attribution.autocast"
) -> torch.dtype | None:
    """The autocast dtype a setting asks for on ``device``, ``None`` for float32: ``false`` → ``None``; ``true`` or
    ``fp16`` → ``torch.float16``; ``bf16`` → ``torch.bfloat16`` (a card without it is a config error naming
    ``where``); ``auto`` → bfloat16 where the card has it (its exponent range: no overflow of a float16), else
    float16. Off a card always ``None``: a CPU computes in float32."""
    device = torch.device(device)
    if precision is False or device.type != "cuda":
        return None
    if precision == "auto":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if precision is True:
        return torch.float16
    if precision == "bf16" and not torch.cuda.is_bf16_supported():
        card = torch.cuda.get_device_name(device)
        raise InputError("config", where, f"expected a card with bfloat16 for bf16, got {card} (set fp16 or auto)")
    return HALF_PRECISIONS[precision]


def precision_name(device: torch.device | str, precision: bool | str, where: str = "attribution.autocast") -> str:
    """What :func:`autocast_dtype` computes in, by name (``float16``, ``bfloat16``, ``float32``): for a log or an
    artifact's provenance."""
    return str(autocast_dtype(device, precision, where) or torch.float32).removeprefix("torch.")


#: The portable CPU kernel set, as the environment variables torch, MKL and oneDNN read when they load: PyTorch's
#: kernels without SIMD, MKL held to SSE4.2, oneDNN to SSE4.1. Each kernel set orders its float sums its own way, so
#: a float32 result differs in its last bits from one CPU to the next; a process started with these computes as
#: no particular CPU does (tests/README.md, "CPU kernels"; ``benchmarks/kernel_sets.py``).
PORTABLE_KERNELS = {
    "ATEN_CPU_CAPABILITY": "default",
    "MKL_ENABLE_INSTRUCTIONS": "SSE4_2",
    "ONEDNN_MAX_CPU_ISA": "SSE41",
}


def cpu_kernels() -> str:
    """The CPU kernel set this process computes with: PyTorch's (``AVX512``, ``AVX2`` or ``DEFAULT``), and MKL's and
    oneDNN's limits where the environment sets them."""
    libraries = [k for k in PORTABLE_KERNELS if k != "ATEN_CPU_CAPABILITY"]  # PyTorch's own: the capability itself
    limits = ", ".join(f"{k}={os.environ[k]}" for k in libraries if os.environ.get(k))
    return torch.backends.cpu.get_cpu_capability() + (f" ({limits})" if limits else "")


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (so a wall-clock reading covers it); a no-op on the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


#: Items per batch of an ``auto`` batch size off a card: host memory is not what limits a CPU's batch, and larger
#: batches are not faster per item there (``docs/benchmarks.md``, IG's internal batch).
CPU_BATCH = 8
#: The share of a card's free memory an ``auto`` batch may fill (the rest: the allocator's fragmentation, and the
#: activations of an item longer than the one measured within the job's length limit).
MEMORY_SHARE = 0.8


def batch_fitting(free: int, first: int, per_item: int, most: int, share: float = MEMORY_SHARE) -> int:
    """The largest batch ``b`` (``1 ≤ b ≤ most``) whose memory ``first + (b − 1) · per_item`` fits ``share · free``:
    ``first`` the bytes a batch of one takes, ``per_item`` what each further item adds."""
    room = share * free - first
    extra = int(room // max(per_item, 1)) if room > 0 else 0
    return max(1, min(most, 1 + extra))


def batch_size(
    requested: int | str,
    device: torch.device | str,
    probe: Callable[[int], object],
    most: int,
    what: str,
    cpu: int = CPU_BATCH,
) -> tuple[int, dict]:
    """A stage's batch: an integer as configured; ``auto`` → ``cpu`` items off a card (:data:`CPU_BATCH`), and on a
    card the most items its free memory holds, measured, not guessed: ``probe(1)`` and ``probe(2)`` (a batch of one
    and of two of the job's longest item) give the memory of the first item and of each further one
    (:func:`batch_fitting`). At most ``most``. Returns the batch and what decided it (for the artifact's provenance
    and the job's log)."""
    if requested != "auto":
        return int(requested), {"batch": int(requested), "how": "as configured"}
    device = torch.device(device)
    if device.type != "cuda":
        batch = max(1, min(most, cpu))
        return batch, {"batch": batch, "how": f"auto off a card: {cpu} (at most {most})"}
    peaks = {}
    for items in (1, 2):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        probe(items)
        synchronize(device)
        peaks[items] = torch.cuda.max_memory_allocated(device) - before
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    per_item = max(peaks[2] - peaks[1], 1)
    batch = batch_fitting(free, peaks[1], per_item, most)
    log.info(
        "%s: %d per batch (%.0f MiB the first, %.0f MiB each further; %.0f of %.0f MiB free)",
        what,
        batch,
        peaks[1] / 2**20,
        per_item / 2**20,
        free / 2**20,
        total / 2**20,
    )
    return batch, {
        "batch": batch,
        "how": f"auto: {MEMORY_SHARE:.0%} of the card's free memory",
        "bytes_first": int(peaks[1]),
        "bytes_per_item": int(per_item),
        "free_bytes": int(free),
    }


class PeakMemory:
    """The peak memory a block of work adds, in bytes (``with PeakMemory(device) as peak: …; peak.bytes``): on a
    card, its peak allocation above what was allocated at the start; on a CPU, the rise of the process's peak
    resident memory (``ru_maxrss``), which is 0 where the work stays under an earlier peak of the process."""

    def __init__(self, device: torch.device | str):
        self.device, self.bytes = torch.device(device), 0

    def _now(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device)
        import resource  # noqa: PLC0415 (POSIX only; the CPU branch)

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

    def __enter__(self) -> PeakMemory:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
        else:
            self._start = self._now()
        return self

    def __exit__(self, *exc) -> None:
        synchronize(self.device)
        self.bytes = max(0, self._now() - self._start)
