"""The hang guards (helpers.GUARD): a run past its limit is killed with its children and says how far it got."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.support.helpers import hang_report, run_guarded

#: The shape of Snakemake's log while two jobs run and one has finished.
LOG = """Job stats:
job        count
-------  -------
a              1
b              2
total          3

Select jobs to execute...
[Wed Nov 25 02:10:39 2026]
localrule a:
    output: results/a.txt
    jobid: 3
    reason: Missing output files: results/a.txt
[Wed Nov 25 02:10:39 2026]
rule b:
    output: results/b0.txt
    log: results/logs/b/shard0.log
    jobid: 1
    wildcards: shard=0
[Wed Nov 25 02:10:42 2026]
Finished jobid: 3 (Rule: a)
1 of 3 steps (33%) done
[Wed Nov 25 02:10:42 2026]
rule b:
    output: results/b1.txt
    jobid: 2
    wildcards: shard=1
"""


def test_the_report_names_the_progress_and_the_running_jobs():
    said = hang_report(["snakemake", "--cores", "2"], 900, LOG)
    assert "still running after 900 s" in said and "1 of 3 steps (33%) done" in said
    assert "running: b\n" in said  # a finished; both jobs of b started and none finished
    assert said.rstrip().endswith("wildcards: shard=1")  # the end of the output follows


def test_a_run_past_its_limit_is_killed_with_its_children(tmp_path):
    marker = tmp_path / "child.pid"
    script = f"import subprocess, sys; p = subprocess.Popen(['sleep', '60']); open({str(marker)!r}, 'w').write(str(p.pid)); print('started', flush=True); p.wait()"  # noqa: E501
    t0 = time.perf_counter()
    with pytest.raises(pytest.fail.Exception, match=r"still running after 2 s and was killed"):
        run_guarded([sys.executable, "-c", script], timeout=2)
    assert time.perf_counter() - t0 < 30
    child = int(marker.read_text())
    assert _gone(child, within=10), "the grandchild outlived the guard"  # it went with the process group


def _gone(pid: int, within: float) -> bool:
    """The process ended (or is a zombie its new parent has yet to reap) within ``within`` seconds."""
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False
