"""The one device policy (attnlens.device): what it picks, what it refuses, and that every GPU rule asks it."""

from __future__ import annotations

import re

import pytest
import torch

from attnlens import device as device_policy
from attnlens.device import CPU_BATCH, autocast_dtype, batch_fitting, batch_size, place, precision_name, resolve_device
from attnlens.errors import InputError
from attnlens.pipeline.config import load_schema


def test_auto_is_the_cpu_without_cuda():
    assert not torch.cuda.is_available()  # CI and this machine: no GPU
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("asked", ["cuda", "cuda:1"])
def test_a_cuda_device_the_job_cannot_see_is_a_config_error(asked):
    with pytest.raises(InputError, match=r"model\.device.*expected a CUDA device this job can see"):
        resolve_device(asked)


def test_an_unknown_device_is_a_config_error():
    with pytest.raises(InputError, match=r"model\.device.*expected auto, cpu, cuda or cuda:N"):
        resolve_device("gpu")


def test_place_moves_the_model_where_the_policy_says():
    moved = []

    class Recorder(torch.nn.Linear):
        def to(self, *args, **kwargs):
            moved.append(args or kwargs)
            return super().to(*args, **kwargs)

    model = Recorder(2, 2)
    assert place(model, "auto") == torch.device("cpu")
    assert moved == [(torch.device("cpu"),)]


def test_fp16_applies_on_cuda_only():
    assert autocast_dtype("cuda", True) is torch.float16
    assert autocast_dtype("cuda", False) is None
    assert autocast_dtype("cpu", True) is None


def test_the_schema_and_the_policy_accept_the_same_names():
    pattern = load_schema()["properties"]["model"]["properties"]["device"]["pattern"]
    for name in ("auto", "cpu", "cuda", "cuda:0", "cuda:12", "gpu", "cuda:", "CPU", "mps"):
        assert bool(re.match(pattern, name)) == bool(re.match(r"^(auto|cpu|cuda(:[0-9]+)?)$", name)), name


# --- batches sized from a card's free memory (``auto``) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "first", "per_item", "most", "expected"),
    [
        (1000, 100, 50, 64, 15),  # 0.8 · 1000 = 800: 100 + 14 · 50 = 800 fits, 100 + 15 · 50 would not
        (1000, 100, 50, 5, 5),  # capped at the most a job can use
        (1000, 900, 50, 64, 1),  # even one is over the share: one, never zero
        (1000, 100, 0, 64, 64),  # items that add nothing measurable: the cap
    ],
)
def test_an_auto_batch_is_the_most_items_whose_memory_fits_the_share_of_free_memory(
    free, first, per_item, most, expected
):
    assert batch_fitting(free, first, per_item, most) == expected
    b = batch_fitting(free, first, per_item, most)
    assert b == most or first + b * max(per_item, 1) > 0.8 * free or per_item == 0  # one more would not fit


def test_a_configured_batch_is_kept_and_auto_off_a_card_is_the_cpu_batch():
    def never(items):
        raise AssertionError("nothing is probed off a card or for a configured batch")

    assert batch_size(5, "cpu", never, 64, "x") == (5, {"batch": 5, "how": "as configured"})
    assert batch_size("auto", "cpu", never, 64, "x")[0] == CPU_BATCH
    assert batch_size("auto", "cpu", never, 3, "x")[0] == 3


def test_auto_on_a_card_probes_one_and_two_items_and_reads_their_peaks(monkeypatch):
    """The card's allocator simulated: each probed item holds 30 MiB on top of 100 MiB for the first, 1 GiB free:
    the batch is ⌊(0.8 GiB − 130 MiB) / 30 MiB⌋ + 1 (the difference of the two probes is the per-item memory)."""
    mib, state = 2**20, {"allocated": 0, "peak": 0}

    def probe(items):
        state["peak"] = max(state["peak"], state["allocated"] + 100 * mib + 30 * mib * items)

    fake = {
        "empty_cache": lambda: None,
        "reset_peak_memory_stats": lambda device=None: state.update(peak=state["allocated"]),
        "memory_allocated": lambda device=None: state["allocated"],
        "max_memory_allocated": lambda device=None: state["peak"],
        "mem_get_info": lambda device=None: (1024 * mib, 4096 * mib),
    }
    for name, fn in fake.items():
        monkeypatch.setattr(torch.cuda, name, fn)
    monkeypatch.setattr(device_policy, "synchronize", lambda device: None)
    batch, how = batch_size("auto", "cuda", probe, 1000, "test batch")
    assert batch == int((0.8 * 1024 - 130) // 30) + 1 == 23
    assert how["bytes_first"] == 130 * mib and how["bytes_per_item"] == 30 * mib and how["free_bytes"] == 1024 * mib


def test_the_steps_precision_names_float16_or_bfloat16_on_a_card_and_float32_off_it(monkeypatch):
    """``attribution.autocast``: ``true``/``fp16`` float16, ``bf16`` bfloat16, ``auto`` bfloat16 where the card has
    it and float16 where not; nothing off a card; ``bf16`` on a card without it is one config line."""
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100")
    for has_bf16, auto in ((True, torch.bfloat16), (False, torch.float16)):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda has=has_bf16: has)
        assert autocast_dtype("cuda", "auto") is auto
        assert autocast_dtype("cuda", "fp16") is autocast_dtype("cuda", True) is torch.float16
        assert autocast_dtype("cpu", "auto") is autocast_dtype("cpu", "bf16") is None
        assert precision_name("cuda", "auto") == str(auto).removeprefix("torch.")
        assert precision_name("cuda", False) == precision_name("cpu", "fp16") == "float32"
    with pytest.raises(InputError, match=r"attribution\.autocast.*bfloat16.*Tesla V100"):
        autocast_dtype("cuda", "bf16")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert autocast_dtype("cuda", "bf16") is torch.bfloat16
