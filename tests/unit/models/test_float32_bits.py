"""What a float32 forward's bits are a function of: the reproducers behind comparing two runs to the last bit.

``attnlens.pipeline.compare`` compares two runs' numbers exactly, predict's and evaluate_faithfulness's batched
forwards included (their 1e-5 allowance is gone: tests/README.md, "Two runs on one machine", tells the story).
The candidates for a drift between two processes, each ruled in or out here or where named:

* **memory alignment** (MKL and ATen choosing a kernel, or where a vector loop starts, by a buffer's address):
  ruled out, :func:`test_the_kernels_of_a_forward_ignore_memory_alignment`;
* **the process** (hash seed, environment size, so the stack's alignment, heap layout): ruled out,
  :func:`test_fresh_processes_give_a_padded_batch_the_same_bits`;
* **the thread count**: ruled in (the sums are partitioned by thread); every model job pins it from its rule's
  ``threads`` (``attnlens.pipeline.runtime.use_threads``), and numba's OpenMP start-up leaves it so
  (``test_runtime.test_kernels_leave_torch_on_the_threads_it_was_given``);
* **padded-batch composition**: ruled in (a document's padded length shapes its kernels), and a function of the
  data: predict batches by a stable length sort (``test_prediction``), evaluate_faithfulness one document's
  masked copies at a time.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

from attnlens.classifier.prediction import Encoded, predict_logits
from tests.support.helpers import ROOT
from tests.support.tiny_models import tiny_longformer

#: Offsets, in float32 elements, of a buffer's first element from a 64-byte boundary: 0 … 60 bytes.
OFFSETS = range(16)


def _at_offset(x: torch.Tensor, offset: int) -> torch.Tensor:
    """``x``'s values in a buffer that starts ``offset`` elements past a 64-byte-aligned allocation."""
    buf = torch.empty(x.numel() + len(OFFSETS))
    view = buf[offset : offset + x.numel()].view_as(x)
    view.copy_(x)
    assert view.data_ptr() % 64 == 4 * offset % 64
    return view


@pytest.mark.numerics  # and under the portable kernels (test_kernel_sets.py): MKL's SSE4.2 path, ATen's default
@pytest.mark.parametrize("threads", [1, 2])
def test_the_kernels_of_a_forward_ignore_memory_alignment(threads):
    """Every operation a transformer's float32 forward runs, on inputs at each alignment from 0 to 60 bytes:
    the same bits as on an aligned input (MKL's GEMM for one row and for many, the batched matmul of attention
    scores, layer norm, softmax, the sums of pooling) — under 1 thread and 2, on this machine's kernel set."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(37, 384, generator=g), torch.randn(1536, 384, generator=g)
    q, k = torch.randn(12, 37, 32, generator=g), torch.randn(12, 37, 32, generator=g)
    ops = {
        "linear, 37 rows": (lambda a: F.linear(a, w), x),
        "linear, 1 row": (lambda a: F.linear(a, w), x[:1].clone()),
        "linear, weight": (lambda a: F.linear(x, a), w),
        "bmm": (lambda a: a @ k.transpose(1, 2), q),
        "layer norm": (lambda a: F.layer_norm(a, (384,)), x),
        "softmax": (lambda a: a.softmax(-1), q @ k.transpose(1, 2)),
        "sum": (lambda a: a.sum(0), x),
        "mean": (lambda a: a.mean(-1), x),
    }
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for name, (op, value) in ops.items():
            aligned = op(value)
            for offset in OFFSETS:
                assert torch.equal(op(_at_offset(value, offset)), aligned), (name, offset)
    finally:
        torch.set_num_threads(before)


#: One fresh process's :func:`padded_forward` on one thread, its heap first shifted by ``argv[1]`` small
#: allocations; prints the logits' hash. It runs in the checkout (``cwd``), so it imports the tests as a package.
_PROBE = textwrap.dedent("""
    import sys
    keep = [bytearray(n % 61 + 1) for n in range(int(sys.argv[1]))]  # a heap laid out differently
    import torch
    torch.set_num_threads(1)
    from tests.unit.models.test_float32_bits import padded_forward
    print(padded_forward())
""")


def padded_forward() -> str:
    """A seeded random Longformer classifier of the default model's layer shape (hidden 384, 12 heads, window 32;
    one layer) on a padded batch of eight documents of 82–128 tokens: its logits, hashed. At this shape the
    thread count changes the bits (22 of 24 logits, up to 6.7e-8, at 2 threads against 1 on this project's
    2-core AVX-512 machines), so a process's thread pools are at work here, not idle."""
    model = tiny_longformer(
        num_labels=3, hidden=384, heads=12, layers=1, intermediate=1536, window=32, max_positions=160, seed=5
    )
    g = torch.Generator().manual_seed(1)
    ids = [[0, *torch.randint(3, 50, (n,), generator=g).tolist(), 2] for n in (126, 100, 120, 80, 126, 126, 90, 110)]
    logits = predict_logits(model, Encoded(ids, pad_token_id=1), batch_size=8)
    return hashlib.sha1(logits.tobytes()).hexdigest()


def test_fresh_processes_give_a_padded_batch_the_same_bits():
    """Three fresh processes, each with its own hash seed, environment size (so stack alignment) and heap layout,
    run the same batched, padded float32 forward: the same logits to the last bit, and the in-process call's."""
    runs = []
    for shift, seed in ((0, "0"), (1234, "1"), (777, "random")):
        env = {**os.environ, "PYTHONHASHSEED": seed, "ATTNLENS_PAD": "x" * (shift % 4093)}
        runs.append(
            subprocess.Popen(
                [sys.executable, "-c", _PROBE, str(shift)],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outs = [proc.communicate(timeout=300) for proc in runs]
    assert all(proc.returncode == 0 for proc in runs), [err[-2000:] for _, err in outs]
    assert torch.get_num_threads() == 1  # as the probes (conftest)
    hashes = {out.strip() for out, _ in outs} | {padded_forward()}
    assert len(hashes) == 1, hashes
