"""attnlens as a Snakemake module: a user's own directory, own config, a three-line Snakefile, no clone edited.

The user's ``Snakefile`` declares ``module attnlens`` with the checkout's ``workflow/Snakefile`` and ``use rule * from
attnlens`` — what ``snakedeploy deploy-workflow`` writes, with a local path where a release would give
``github("…/attnlens", path="workflow/Snakefile", tag=…)``. With the `.test` config it must plan exactly the jobs the
checkout's own Snakefile plans, and its jobs must compute what the session run (``tiny_run``) computed: the
prepared data, the fine-tuned model and the predictions, compared byte for byte (:mod:`attnlens.pipeline.compare`).
Its jobs run
in fresh processes (``ATTNLENS_WARM_JOBS=0``) and the session run's in forks of the warm job server
(``attnlens.pipeline.jobserver``): the equality is also the proof that a warm job computes what a fresh one does.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from attnlens.pipeline.compare import describe, differences
from tests.support.helpers import GUARD, ROOT, SNAKEMAKE, fresh_env, local_env, run_guarded, run_snakemake
from tests.support.session_runs import session_run

pytestmark = pytest.mark.workflow

ONLY = "only in one run: "
TARGET = "results/predictions/metrics.json"

USER_SNAKEFILE = """\
configfile: "config/config.yaml"


module attnlens:
    snakefile:
        "{snakefile}"
    config:
        config


use rule * from attnlens
"""


def _planned(stdout: str) -> dict[str, int]:
    """Jobs per rule of a dry run's job table."""
    table = stdout.split("Job stats:")[-1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M) if m[1] != "total"}


def _user_dir(user: Path) -> Path:
    """A user's directory: the `.test` config and the three-line module Snakefile."""
    (user / "config").mkdir(parents=True)
    shutil.copy(ROOT / ".test/config/config.yaml", user / "config/config.yaml")
    (user / "Snakefile").write_text(USER_SNAKEFILE.format(snakefile=ROOT / "workflow" / "Snakefile"), encoding="utf-8")
    return user


@session_run("module_run", seconds=40)
def _module_run(work: Path) -> Path:
    """The module's jobs up to the predictions, one thread a job as ``tiny_run``'s, each in a fresh process (no warm
    job server)."""
    user = _user_dir(work / "my-study")
    out = run_guarded([*SNAKEMAKE, "--cores", "1", TARGET], cwd=user, timeout=GUARD["stage"], env=fresh_env())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return user


@pytest.fixture(scope="session")
def module_run(session_runs) -> Path:
    return session_runs.get("module_run")


def test_the_module_plans_what_the_checkout_plans(root, tmp_path):
    user_dir = _user_dir(tmp_path / "my-study")
    mine = run_guarded([*SNAKEMAKE, "-n", "--cores", "2"], cwd=user_dir, timeout=GUARD["plan"], env=local_env())
    assert mine.returncode == 0, mine.stdout[-3000:] + mine.stderr[-3000:]
    own = run_snakemake(root, "--directory", str(user_dir), "-n", "--cores", "2")
    assert own.returncode == 0, own.stdout[-3000:] + own.stderr[-3000:]
    assert _planned(mine.stdout) == _planned(own.stdout) and sum(_planned(own.stdout).values()) > 30


def test_the_modules_jobs_compute_what_the_session_run_computed(module_run, tiny_run):
    # its jobs ran in fresh processes (no warm job server): what they compute must equal the session run's warm jobs
    for part in ("data", "models", "predictions"):
        ref, mine = tiny_run / "results" / part, module_run / "results" / part
        # the session run also holds the pair study's data and encoder, which this target does not ask for
        asked = [d for d in differences(ref, mine) if not (d.startswith(ONLY) and not (mine / d[len(ONLY) :]).exists())]
        assert not asked, "\n".join(describe(ref, mine, rel) for rel in asked)
