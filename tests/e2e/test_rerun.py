"""Crash, rerun, determinism: a second clean run of `.test`, killed with ``kill -9`` or stopped with SIGTERM inside
each long stage.

The run starts from an empty working directory and is interrupted three times — killed while the classifier
trains and while the IG shards run (one finished, the next started), and stopped with SIGTERM (what SLURM sends
at the walltime) while the pair-attribution shards run, which the job reports in one ``attnlens: stopped:``
line — each time resumed with ``--rerun-incomplete``, then finished. Finished shards are never
recomputed, no half-written artifact survives, and every result equals the uninterrupted session run
(``tiny_run``) byte for byte: tables, parquet contents, tensors, model weights, figures' pixels. What may
differ is listed in ``python -m attnlens.pipeline.compare``'s ``MAY_DIFFER``, each with its reason; nothing else may.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from attnlens.io import provenance, save_parquet
from attnlens.pipeline.compare import describe, differences
from tests.support.helpers import GUARD, LIVE, ROOT, SNAKEMAKE, hang_report, live, local_env, run_guarded, run_snakemake
from tests.support.session_runs import session_run

pytestmark = pytest.mark.workflow


def _job_pids(pgid: int, rule: str) -> list[int]:
    """PIDs in process group ``pgid`` running a job of ``rule``: every rule runs workflow/scripts/stage.py, of which
    Snakemake runs a copy (``tmp*.stage.py``) with the job, its rule's name among it, written into its preamble."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            args = (proc / "cmdline").read_bytes().decode(errors="ignore").split("\0") if proc.name.isdigit() else []
            scripts = [Path(a) for a in args if a.endswith(".stage.py")]
            cwd = (proc / "cwd").readlink() if scripts else None
            if any(rule.encode() in (cwd / s).read_bytes() for s in scripts) and os.getpgid(int(proc.name)) == pgid:
                pids.append(int(proc.name))
        except (OSError, ProcessLookupError):
            continue
    return pids


def _kill_when(
    cmd: list[str],
    work: Path,
    ready: Callable[[], bool],
    what: str,
    limit: float = GUARD["run"],
    sig: int = signal.SIGKILL,
    job: str | None = None,
) -> None:
    """Start ``cmd``; ``kill -9`` its whole process tree as soon as ``ready()`` holds — or, with ``job``, send ``sig``
    to the running job of that rule only, and wait for Snakemake to end. ``limit``: a hang guard (helpers.GUARD);
    a run that never gets there fails with how far it got (Snakemake's log)."""
    proc = live(
        subprocess.Popen(
            cmd, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=local_env()
        )
    )
    try:
        deadline = time.time() + limit
        while time.time() < deadline and proc.poll() is None and not ready():
            time.sleep(0.1)
        if proc.poll() is None and not ready():
            logs = sorted((work / ".snakemake/log").glob("*.log"))
            pytest.fail(
                hang_report(cmd, limit, logs[-1].read_text() if logs else "") + f"\n(waiting to kill {what})",
                pytrace=False,
            )
        assert proc.poll() is None, f"the run ended before it could be killed {what}"
        if job is None:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=30)
            return
        pids = _job_pids(proc.pid, job)
        assert pids, f"no running {job} job to stop {what}"
        for pid in pids:
            os.kill(pid, sig)
        assert proc.wait(timeout=GUARD["stage"]) != 0  # Snakemake reports the stopped job and ends
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        LIVE.discard(proc)


def _mid_shards(res: Path, outputs: list[str], logs: list[str], started: float) -> Callable[[], bool]:
    """One shard finished (after ``started``) and the next one's job under way."""

    def ready() -> bool:
        done = [(res / o).exists() and (res / o).stat().st_mtime > started for o in outputs]
        running = [
            (res / lg).exists() and (res / lg).stat().st_mtime > started and not d
            for lg, d in zip(logs, done, strict=True)
        ]
        return any(done) and any(running)

    return ready


@session_run("killed_and_resumed_run", seconds=250)
def _killed_and_resumed(work: Path) -> Path:
    """The `.test` run from an empty folder, one thread a job as ``tiny_run``, interrupted three times and resumed
    to the end (the module's docstring); what each interruption must leave is checked as it happens."""
    shutil.copytree(ROOT / ".test" / "config", work / "config")
    res = work / "results"
    base = [*SNAKEMAKE, "--snakefile", str(ROOT / "workflow" / "Snakefile"), "--directory", str(work), "--cores", "1"]

    def resume(*targets: str) -> list[str]:
        unlock = run_snakemake(ROOT, "--directory", str(work), "--unlock")
        assert unlock.returncode == 0, unlock.stderr[-2000:]
        return [*base, "--rerun-incomplete", *targets]

    # 1. inside training (its model loaded a second ago): the model folder is written only when training ends
    train_log = res / "logs/train_classifier/train_classifier.log"
    seen: list[float] = []

    def training() -> bool:
        if not seen and train_log.exists() and "Loading weights" in train_log.read_text(errors="ignore"):
            seen.append(time.time())
        return bool(seen) and time.time() - seen[0] > 1.0

    _kill_when([*base, "train_classifier"], work, training, "in training")
    assert not (res / "models/finetuned").exists() and not (res / "models/train_metrics.json").exists()

    # 2. inside IG: one shard finished, the other under way
    ig = [f"attributions/shard{k}.parquet" for k in range(2)]
    started = time.time()
    ig_logs = [f"logs/attribute/shard{k}.log" for k in range(2)]
    _kill_when(resume(*(f"results/{o}" for o in ig)), work, _mid_shards(res, ig, ig_logs, started), "inside IG")
    finished_ig = {o: (res / o).stat().st_mtime_ns for o in ig if (res / o).exists()}
    assert len(finished_ig) == 1

    # 3. inside pair attribution: one shard finished, the other under way and stopped by SIGTERM, as SLURM stops a
    # job at its walltime: the job says so in one line, exits 143 and leaves no half-written artifact
    pairs = [f"pairs/scores_shard{k}.parquet" for k in range(2)]
    pair_logs = [f"logs/attribute_pairs/shard{k}.log" for k in range(2)]
    started = time.time()
    _kill_when(
        resume(*(f"results/{o}" for o in pairs)),
        work,
        _mid_shards(res, pairs, pair_logs, started),
        "inside pair attribution",
        sig=signal.SIGTERM,
        job="attribute_pairs",
    )
    finished_pairs = {o: (res / o).stat().st_mtime_ns for o in pairs if (res / o).exists()}
    assert len(finished_pairs) == 1
    stopped = [lg for lg in pair_logs if "attnlens: stopped: SIGTERM received" in (res / lg).read_text()]
    assert len(stopped) == 1 and "Traceback" not in (res / stopped[0]).read_text()
    assert not [p for p in res.rglob("*") if ".tmp-" in p.name]

    # 4. the rest, to the end: only what was killed (and what follows) runs again
    out = run_guarded(resume(), cwd=work, timeout=GUARD["run"], env=local_env())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for o, mtime in {**finished_ig, **finished_pairs}.items():
        assert (res / o).stat().st_mtime_ns == mtime, f"{o} was recomputed"
    assert not [p for p in res.rglob("*") if ".tmp-" in p.name or p.name.endswith(".partial")]
    return work


@pytest.fixture(scope="session")
def killed_and_resumed_run(session_runs) -> Path:
    """The working folder of the interrupted and resumed run (:func:`_killed_and_resumed`), once per session."""
    return session_runs.get("killed_and_resumed_run")


def test_killed_and_resumed_run_equals_the_uninterrupted_one(tiny_run, killed_and_resumed_run):
    res = killed_and_resumed_run / "results"
    # 5. byte for byte the uninterrupted run, but for what MAY_DIFFER lists
    differ = differences(tiny_run / "results", res)
    assert not differ, "differs from the uninterrupted run:\n" + "\n".join(
        describe(tiny_run / "results", res, rel) for rel in differ
    )


def test_the_comparison_sees_a_changed_number_but_not_a_wall_time(tmp_path):
    """The run comparison above is only as good as this: it must tell results apart, and only results."""
    a, b = tmp_path / "a", tmp_path / "b"
    for root, value, seconds in ((a, 0.5, 1.0), (b, 0.5, 2.0)):
        (root / "pairs").mkdir(parents=True)
        frame = pd.DataFrame({"pair_id": ["p1"], "score": [value], "seconds": [seconds]})
        save_parquet(frame, root / "pairs/scores_shard0.parquet", provenance("pair_scores/v1"))
        frame.to_csv(root / "pairs/table.csv", index=False)
        Image.fromarray(np.zeros((4, 4, 3), dtype=np.uint8)).save(root / "figure.png")
    assert differences(a, b) == []  # only the wall time and the provenance differ
    save_parquet(
        pd.DataFrame({"pair_id": ["p1"], "score": [0.5000001], "seconds": [2.0]}),
        b / "pairs/scores_shard0.parquet",
        provenance("pair_scores/v1"),
    )
    Image.fromarray(np.full((4, 4, 3), 1, dtype=np.uint8)).save(b / "figure.png")
    (b / "extra.csv").write_text("x\n1\n", encoding="utf-8")
    assert differences(a, b) == ["only in one run: extra.csv", "figure.png", "pairs/scores_shard0.parquet"]
    # a metric column: rows of wall-time metrics are left out, every other row is compared
    for root, seconds in ((a, 1.0), (b, 2.0)):
        rows = pd.DataFrame({"method": ["m", "m"], "metric": ["spearman", "seconds"], "value": [0.3, seconds]})
        save_parquet(rows, root / "board.parquet", provenance("explanation_leaderboard/v1"))
        rows.to_csv(root / "board.csv", index=False)
    assert "board.parquet" not in differences(a, b) and "board.csv" not in differences(a, b)
    rows = pd.DataFrame({"method": ["m", "m"], "metric": ["spearman", "seconds"], "value": [0.31, 2.0]})
    save_parquet(rows, b / "board.parquet", provenance("explanation_leaderboard/v1"))
    assert "board.parquet" in differences(a, b)
    # and the failure message says how: the column, the rows, the size of the difference and where
    said = describe(a, b, "board.parquet")
    assert said == ("board.parquet: value: 1 of 1 rows, largest |Δ| 0.01; first {'method': 'm', 'metric': 'spearman'}")


def test_batched_forwards_are_compared_to_the_last_bit(tmp_path):
    """predict's and evaluate_faithfulness's probabilities, and what is computed from them, are compared exactly:
    one float32 rounding (a probability 6e-8 apart, the size of the drift once forgiven) is a difference, and the
    failure says its size (tests/README.md, "Two runs on one machine")."""
    a, b = tmp_path / "a", tmp_path / "b"
    one_rounding = np.nextafter(np.float32(0.502318), np.float32(1))
    for root, prob in ((a, np.float32(0.502318)), (b, one_rounding)):
        (root / "faithfulness").mkdir(parents=True)
        (root / "paper/tables").mkdir(parents=True)
        frame = pd.DataFrame(
            {"example_id": ["e"], "ranking": ["ig"], "curve": ["deletion"], "prob": np.array([prob], dtype=np.float32)}
        )
        save_parquet(frame, root / "faithfulness/curves.parquet", provenance("faithfulness_curves/v1"))
        (root / "paper/tables/faithfulness_aopc.csv").write_text("ranking,aopc\nig,0.4410001\n", encoding="utf-8")
    assert differences(a, b) == ["faithfulness/curves.parquet"]
    assert describe(a, b, "faithfulness/curves.parquet").startswith("faithfulness/curves.parquet: prob: 1 of 1 rows")
    (b / "paper/tables/faithfulness_aopc.csv").write_text("ranking,aopc\nig,0.4410002\n", encoding="utf-8")
    assert differences(a, b) == ["faithfulness/curves.parquet", "paper/tables/faithfulness_aopc.csv"]


def test_two_commits_explorer_pages_differ_only_in_their_provenance(tmp_path):
    """An explorer page names the commit that wrote it twice (the head's provenance tag, its data's provenance):
    two commits' pages of the same numbers compare equal, a changed number does not."""
    page = (
        '<meta name="attnlens-provenance" content="{{&quot;git_commit&quot;: &quot;{c}&quot;}}">'
        '<script>{{"schema":"explorer/v1","git_commit":"{c}","tokens":["a"],"scores":[{v}]}}</script>'
    )
    for name, commit, value in (("a", "2efe24e", "0.5"), ("b", "0febcd7", "0.5"), ("c", "0febcd7", "0.6")):
        (tmp_path / name / "explorer").mkdir(parents=True)
        (tmp_path / name / "explorer" / "doc.html").write_text(page.format(c=commit, v=value), encoding="utf-8")
    assert differences(tmp_path / "a", tmp_path / "b") == []
    assert differences(tmp_path / "a", tmp_path / "c") == ["explorer/doc.html"]


def test_the_leaderboard_markdown_is_compared_without_its_cost_columns(tmp_path):
    """The Markdown leaderboard's caption holds escaped pipes (``\\|method\\|``), which are text, not cells: its
    cost columns are left out by their header and every other cell is compared."""
    table = (
        "**leaderboard: agreement = \\|method\\| vs \\|IG\\|**\n\n"
        "| method | Spearman ρ with IG | seconds per example | cost / one forward pass |\n"
        "|---|---|---|---|\n"
        "| saliency | {rho} | {s} \\* | {c} |\n"
    )
    for name, rho, s, c in (
        ("a", "0.552", "0.88", "0.21"),
        ("b", "0.552", "0.91", "0.23"),
        ("c", "0.553", "0.88", "0.21"),
    ):
        (tmp_path / name / "paper/tables").mkdir(parents=True)
        (tmp_path / name / "paper/tables/explanation_leaderboard.md").write_text(table.format(rho=rho, s=s, c=c))
    assert differences(tmp_path / "a", tmp_path / "b") == []
    assert differences(tmp_path / "a", tmp_path / "c") == ["paper/tables/explanation_leaderboard.md"]
