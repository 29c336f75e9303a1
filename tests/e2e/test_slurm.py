"""The slurm profile against a real single-node SLURM (tests/slurm/cluster.sh), not a mock.

The cluster comes up from Debian's packages on localhost (root only); where it cannot, the tests are
skipped with the reason — or failed, in CI (``ATTNLENS_REQUIRE_SLURM=1`` in ``.ci/run``). The profile is
workflow/profiles/slurm itself, with its placeholders filled
for this node and fast status checks (squeue: the test cluster runs no accounting daemon).

The run through SLURM is as small as its claim: on a copy of the session's local `.test` run, the jobs of
four rules are run again through the profile — the attention and IG shards (transformer rules, which a real
cluster sends to its GPU partition), the comparison shards that read both, and the table that gathers them
(7 jobs). Each must be submitted with ``sbatch``, end ``COMPLETED`` and give the local run's numbers. The
other ~35 jobs of the DAG would add minutes and no new claim: every rule is submitted the same way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

import numpy as np
import pandas as pd
import pytest
import yaml

from tests.support.helpers import GUARD, copy_run, hang_report, rules_by_kind, run_guarded, run_snakemake, unavailable

pytestmark = pytest.mark.slurm

#: The rules whose jobs run again through SLURM, the target that needs them, and its tables, compared number
#: for number with the local run of the same configuration.
THROUGH_SLURM = ("extract_attention", "attribute", "compare", "aggregate_similarity")
TARGET = "results/paper/tables/similarity"
COMPARED = ("paper/tables/similarity/table1_similarity.csv", "paper/tables/similarity/table2_jaccard.csv")


@pytest.fixture(scope="module")
def cluster(root):
    if os.geteuid() != 0:
        unavailable("slurm", "a real SLURM needs root here: tests/slurm/cluster.sh installs and starts munge and slurm")
    if shutil.which("slurmctld") is None and shutil.which("apt-get") is None:
        unavailable("slurm", "SLURM is not installed and there is no apt-get to install it")
    had_slurm = shutil.which("scontrol") is not None
    started = time.perf_counter()
    up = run_guarded(["bash", root / "tests/slurm/cluster.sh", "up"], timeout=GUARD["stage"])  # apt-get: ≤ 60 s
    if up.returncode != 0:
        unavailable("slurm", f"could not bring up SLURM: {(up.stderr.strip().splitlines() or ['?'])[-1]}")
    yield time.perf_counter() - started
    # the machine as the tests found it: no daemon, and no SLURM client left to slow later snakemake calls
    clean = run_guarded(["bash", root / "tests/slurm/cluster.sh", "clean"], timeout=GUARD["stage"])
    assert clean.returncode == 0, clean.stderr[-2000:]
    assert had_slurm or shutil.which("scontrol") is None, "cluster.sh clean left SLURM's client installed"


def _kinds(root):
    """Each rule of workflow/rules by its kind (workflow/rules/kinds.smk); train_classifier, a rule of its own."""
    return rules_by_kind((root / "workflow/rules").glob("*.smk"))


def test_profile_has_placeholders_and_says_only_sizes(root):
    """The profile says what a cluster needs and nothing the rules say: the account and the partitions are
    placeholders, a job that asks for a GPU can go to the GPU partition only, threads stay the rules', and each
    rule the profile sizes exists."""
    folder = root / "workflow/profiles/slurm"
    profile = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    assert profile["executor"] == "slurm" and profile["rerun-incomplete"] and profile["retries"] >= 1
    assert profile["latency-wait"] >= 60
    assert profile["default-resources"]["slurm_account"].startswith("EDIT_ME")
    partitions = yaml.safe_load((folder / profile["slurm-partition-config"]).read_text(encoding="utf-8"))["partitions"]
    assert all(name.startswith("EDIT_ME") for name in partitions)
    assert sorted(p.get("max_gpu", 0) > 0 for p in partitions.values()) == [False, True]
    assert "set-threads" not in profile
    sized = profile["set-resources"]
    assert all(set(values) <= {"mem_mb", "runtime"} for values in sized.values())
    kinds = _kinds(root)
    assert set(sized) <= set().union(*kinds.values()) | {"train_classifier"}
    assert kinds["model_job"] <= set(sized), "every model job is sized for the paper's shape"


def test_light_rules_are_local_and_model_rules_are_not(root):
    """Figures, tables, overlays, explorers and the manifest are light jobs that say ``localrule: True``: they run
    where Snakemake does (no queue wait for seconds of work); no rule that asks for a GPU is local. Each light rule
    says it itself: ``use rule … with:`` resets the directive, so its kind cannot (workflow/rules/kinds.smk)."""
    rules = "".join(p.read_text(encoding="utf-8") for p in (root / "workflow/rules").glob("*.smk"))
    blocks = {
        m.group(2): (m.group(1), m.group(3))
        for m in re.finditer(r"^\s*use rule (\w+) as (\w+) with:\n((?:(?!^\s*(?:use )?rule ).*\n?)*)", rules, re.M)
    }
    local = {name for name, (_, block) in blocks.items() if re.search(r"^\s*localrule: True$", block, re.M)}
    kinds = _kinds(root)
    light = {r for r in blocks if r.startswith("plot_") or r.endswith(("_tables", "_overlays", "_leaderboard"))}
    light |= {"count_topk", "similarity_examples", "build_explorers", "manifest"}
    assert light <= kinds["light_job"] == local, f"light rules not local: {sorted(kinds['light_job'] - local)}"
    text = (root / "workflow/rules/kinds.smk").read_text(encoding="utf-8")
    kind_blocks = dict(re.findall(r"^rule (\w+):\n((?:    .*\n|\n)*)", text, re.M))
    assert re.search(r"^\s*gpu=1,$", kind_blocks["model_job"], re.M)
    assert not local & kinds["model_job"]


def node_profile(root, tmp_path) -> str:
    """The production profile with its placeholders filled for this node (tests/slurm/local_profile.py), every job
    on one CPU: the session's runs hold the node's other core (tests/README.md), and a two-thread job beside them
    spins — the seven jobs below took 195 s so, and 105 s with one thread each (CI, 2026-11-26)."""
    from tests.slurm.local_profile import write_local_profile  # noqa: PLC0415 (the SLURM tests only)

    return str(write_local_profile(tmp_path / "profile", max_threads=1))


def _slurm_run(root, work, profile, *args, limit=GUARD["stage"]):
    """Snakemake through the profile under ``timeout``: a hang (the plugin waiting on jobs that ended) fails the
    test with how far the run got, and never holds up CI. ``limit``: the hang guard (helpers.GUARD)."""
    t0 = time.perf_counter()
    out = run_snakemake(
        root,
        "--directory",
        str(work),
        "--profile",
        profile,
        *args,
        prefix=("timeout", "-k", "10", str(limit)),
        timeout=limit + 60,
        slurm=True,
    )
    if out.returncode in (124, 137):  # killed by `timeout`
        pytest.fail(hang_report(out.args, limit, out.stdout + out.stderr), pytrace=False)
    return out, time.perf_counter() - t0


@pytest.mark.workflow
def test_jobs_through_slurm_match_the_local_run(root, cluster, tiny_run, tmp_path):
    work = copy_run(tiny_run, tmp_path / "work")
    out, seconds = _slurm_run(root, work, node_profile(root, tmp_path), TARGET, "--forcerun", *THROUGH_SLURM)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    job_ids = re.findall(r"submitted with SLURM jobid (\d+)", log)
    stats = re.search(r"Job stats:\n(.*?)\n\s*total\s+(\d+)", log, re.S)
    planned = dict(re.findall(r"^(\w+)\s+(\d+)$", stats.group(1), re.M))
    assert set(planned) == set(THROUGH_SLURM), planned  # these rules' jobs, and only these
    assert len(job_ids) == int(stats.group(2)) == 7  # every one of them went through sbatch
    logs = {p.stem: p.parent.name for p in (work / ".snakemake/slurm_logs").rglob("*.log")}
    assert set(logs) == set(job_ids)  # one SLURM log per job id, under the rule it ran
    states = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i %T", "-j", ",".join(job_ids)],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    found = dict(line.split() for line in states.splitlines())
    assert set(found) == set(job_ids) and set(found.values()) == {"COMPLETED"}, found
    for rel in COMPARED:
        a = pd.read_csv(tiny_run / "results" / rel)
        b = pd.read_csv(work / "results" / rel)
        assert list(a.columns) == list(b.columns) and len(a) == len(b), rel
        for col in a.columns:
            if pd.api.types.is_numeric_dtype(a[col]):
                # the same code on the same CPU, but a SLURM job may run with another thread count, which
                # reorders the float32 sums of IG and attention: ~100 float32 ulps of these O(1) means
                np.testing.assert_allclose(b[col], a[col], rtol=1e-5, atol=1e-7, err_msg=f"{rel}:{col}")
            else:
                assert list(a[col].astype(str)) == list(b[col].astype(str)), f"{rel}:{col}"
    print(f"\nSLURM: cluster up in {cluster:.1f} s, {len(job_ids)} sbatch jobs, pipeline {seconds:.0f} s")


def test_a_failing_job_fails_the_run_instead_of_hanging(root, cluster, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(root / ".test" / "config", work / "config")
    (work / "config/bad.yaml").write_text("pairs:\n  data:\n    source: file\n    path: no/such/pairs.csv\n")
    out, _ = _slurm_run(
        root,
        work,
        node_profile(root, tmp_path),
        "results/data/pairs_test.parquet",
        "--configfile",
        str(work / "config/bad.yaml"),
    )
    log = out.stdout + out.stderr
    assert out.returncode != 0, log[-3000:]  # failed (a hang would have failed the test in _slurm_run)
    assert re.search(r"submitted with SLURM jobid \d+", log)
    assert not (work / "results/data/pairs_test.parquet").exists()


@pytest.mark.workflow
def test_a_grid_runs_through_slurm(root, cluster, architecture_grid, tmp_path):
    """The architecture grid (conftest.architecture_grid: three models, the decoder at two seeds), its four runs'
    bottleneck jobs again through sbatch side by side, then the findings across them: each run's claim as the local
    run's, the findings complete."""
    work = copy_run(architecture_grid, tmp_path / "work")
    out, seconds = _slurm_run(
        root, work, node_profile(root, tmp_path), "results/findings/findings.csv", "--forcerun", "bottleneck_distances"
    )
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    job_ids = re.findall(r"submitted with SLURM jobid (\d+)", log)
    runs = sorted(p.name for p in (work / "results/runs").iterdir())
    assert len(job_ids) == len(runs) == 4, log[-3000:]  # one bottleneck job per run, every one through sbatch
    for run in runs:
        claim = f"results/runs/{run}/topology/claim.csv"
        pd.testing.assert_frame_equal(pd.read_csv(work / claim), pd.read_csv(architecture_grid / claim))
    statements = pd.read_csv(work / "results/findings/statements.csv")
    assert len(statements) == len(pd.read_csv(architecture_grid / "results/findings/statements.csv"))
    print(f"\nSLURM grid: {len(runs)} runs, {len(job_ids)} sbatch jobs, pipeline {seconds:.0f} s")
