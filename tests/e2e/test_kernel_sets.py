"""The numerics tests once more under the portable CPU kernels, so a bound that holds on one CPU only fails here too.

PyTorch picks its vectorised kernels by CPU (AVX-512, AVX2 or the portable ``default``), and MKL and oneDNN pick
theirs; each orders its floating-point sums its own way, so a float result can differ in its last bits from one
CPU to the next. A comparison bounded tighter than that passes on the machine it was written on and fails on
another (tests/README.md, "Tolerances"). The suite runs every test marked ``numerics`` with this machine's own
kernels; this test runs them again in a subprocess with the portable set: ``ATEN_CPU_CAPABILITY=default``
(PyTorch's kernels without SIMD), MKL held to SSE4.2 and oneDNN to SSE4.1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from attnlens.device import PORTABLE_KERNELS
from tests.support.helpers import GUARD, ROOT, run_guarded
from tests.support.session_runs import session_run

#: Hang guard: the numerics tests take ~35 s here under the portable kernels (tests/README.md).
LIMIT = GUARD["stage"]


@session_run("portable_kernels_run", seconds=90)
def _portable_kernels(work: Path) -> subprocess.CompletedProcess:
    """The numerics tests in a pytest of their own under the portable kernels, on one core (a session run)."""
    # not -q: the session header must show which kernels ran (conftest.pytest_report_header)
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "numerics and not workflow",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=--strict-markers -rfE",
        "--basetemp",
        work / "tmp",
    ]
    return run_guarded(cmd, timeout=LIMIT, cwd=ROOT, env={**os.environ, **PORTABLE_KERNELS, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="session")
def portable_kernels_run(session_runs) -> subprocess.CompletedProcess:
    return session_runs.get("portable_kernels_run")


def test_numerics_hold_under_the_portable_kernels(portable_kernels_run):
    out = portable_kernels_run
    log = out.stdout + out.stderr
    assert "CPU kernels: DEFAULT" in log, "the subprocess did not run the portable kernels:\n" + log[-2000:]
    passed = re.search(r"(\d+) passed", log)
    assert out.returncode == 0 and passed and int(passed.group(1)) >= 300, log[-6000:]
