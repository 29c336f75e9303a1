"""One device policy: where every model-running stage puts its model, and in which precision it computes.

``model.device`` (config) is ``auto`` (default: the job's CUDA device when it has one, else the CPU),
``cpu``, ``cuda`` or ``cuda:N``. Every stage that runs the classifier — training, prediction, head
importance, attention extraction, IG, the explanations, faithfulness and topology — asks :func:`place`
(or :func:`resolve_device` where a launcher places the model, as accelerate does in training), so a rule
that asks the cluster for a GPU uses it, and one config key moves the whole study. Each call writes one
``device:`` line to the job's log. The pair-encoder rules ask for no GPU and keep their small sentence
encoder on the CPU.

Precision follows the device: ``fp16`` autocast (``train.fp16``, ``attribution.autocast``) applies on
CUDA only (:func:`autocast_dtype`); on a CPU every stage computes in float32.
"""

from __future__ import annotations

import logging
import re

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
                "config", "model.device",
                f"expected a CUDA device this job can see, got {requested!r} with {count} visible "
                "(set model.device: auto or cpu, or run the job on a GPU node)",
            )  # fmt: skip
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


def autocast_dtype(device: torch.device | str, fp16: bool) -> torch.dtype | None:
    """``torch.float16`` where fp16 autocast applies (``fp16`` asked and the device is CUDA), else ``None``."""
    return torch.float16 if fp16 and torch.device(device).type == "cuda" else None


def synchronize(device: torch.device | str) -> None:
    """Wait for the device's queued work (so a wall-clock reading covers it); a no-op on the CPU."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
