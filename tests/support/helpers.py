"""Helpers shared by the tests (import them from here, not from ``conftest``)."""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import yaml
from transformers import LongformerConfig, LongformerForSequenceClassification

from attnlens.data.corpus import CLASS_NAMES, generate_corpus
from attnlens.models.checkpoints import load_tokenizer, packaged_model_dir
from attnlens.pipeline import jobserver
from attnlens.pipeline.config import SyntheticConfig

ROOT = Path(__file__).resolve().parents[2]
#: The `.test` grid: the `.test` model and a BigBird of it (blocks of 8, one random block), two seeds (the grid's
#: unit tests, tests/unit/pipeline/test_grid.py, and its end-to-end run, tests/e2e/test_grid_runs.py).
TEST_GRID = {
    "models": {
        "minilm_w32": {},
        "bigbird": {
            "model": {"attention_window": None, "architecture": "bigbird", "block_size": 8, "num_random_blocks": 1}
        },
    },
    "seeds": [7, 8],
}
#: float32's machine epsilon (2⁻²³ ≈ 1.2e-7): the relative size of one float32 rounding, the unit of the bounds
#: of comparisons whose path rounds to float32 somewhere (see tests/README.md, "Tolerances").
EPS32 = torch.finfo(torch.float32).eps
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


#: Hang guards, in seconds: a test's time limit is there to end a run that hangs, never to judge its speed
#: (that is `make bench`'s job). Each is at least 3 × the slowest duration measured on any machine of the
#: project's kind for what it guards (tests/README.md lists the measurements); one that fires fails its test
#: with how far the run got (:func:`hang_report`).
GUARD = {
    "plan": 300,  # one command: a dry run, lint, a report, a script (≤ 12 s measured; × 1.9 on a slower machine)
    "stage": 900,  # a few jobs: the folders run, 7 jobs through SLURM, an apt-get install (≤ 90 s measured)
    "run": 2700,  # a whole .test-sized run (≤ 260 s measured here; 549 s, the slowest on record, on a slower one)
}


def run_guarded(cmd, *, timeout: float, cwd=None, env=None) -> subprocess.CompletedProcess:
    """``cmd`` in a session of its own, stdout and stderr captured as text; past ``timeout`` seconds its whole
    process group is killed and the test fails with how far it got, instead of leaving orphans behind."""
    proc = live(
        subprocess.Popen(
            [str(c) for c in cmd],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(hang_report(cmd, timeout, stdout + stderr), pytrace=False)
    finally:
        LIVE.discard(proc)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


#: The guarded processes under way (:func:`run_guarded`, :func:`live`): a session that ends while a session run
#: (tests/support/session_runs.py) still has one going kills it (conftest's ``session_runs``), leaving no orphan.
LIVE: set[subprocess.Popen] = set()


def live(proc: subprocess.Popen) -> subprocess.Popen:
    """``proc`` (started in a session of its own) registered in :data:`LIVE` until it has ended."""
    LIVE.add(proc)
    return proc


def kill_live() -> None:
    """Kill every process of :data:`LIVE` still under way, with its process group."""
    for proc in list(LIVE):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


def hang_report(cmd, limit: float, log: str) -> str:
    """What a run that hit its hang guard had done: Snakemake's last progress line, the jobs it had started
    but not finished, and the end of its output."""
    steps = re.findall(r"^.*\d+ of \d+ steps \(.*?\) done.*$", log, re.M)
    started = re.findall(r"^\s*(?:local)?rule (\w+):\n(?:\s+\w+:.*\n)*?\s+jobid: (\d+)", log, re.M)
    finished = set(re.findall(r"Finished jobid: (\d+)", log))
    running = sorted({rule for rule, job in started if job not in finished})
    tail = "\n".join(log.strip().splitlines()[-15:])
    command = " ".join(map(str, cmd))
    return (
        f"hang guard: `{command[:300]}` still running after {limit:.0f} s and was killed; "
        f"{steps[-1].strip() if steps else 'no Snakemake step finished'}; running: {', '.join(running) or '?'}\n"
        f"last lines:\n{tail}"
    )


def snakemake_cmd(root, *args) -> list[str]:
    """``snakemake --snakefile <root>/workflow/Snakefile *args``, as a command line."""
    return [*SNAKEMAKE, "--snakefile", str(root / "workflow" / "Snakefile"), *map(str, args)]


def run_snakemake(root, *args, cwd=None, timeout=GUARD["plan"], prefix=(), slurm=False):
    """``snakemake --snakefile <root>/workflow/Snakefile *args`` (optionally behind ``prefix``, e.g. ``timeout``), under
    the hang guard ``timeout`` (:data:`GUARD`).

    Local runs see no SLURM commands (:func:`local_env`); ``slurm=True`` keeps them, for runs that submit to it.
    """
    return run_guarded(
        [*prefix, *snakemake_cmd(root, *args)],
        timeout=timeout,
        cwd=cwd or root,
        env=None if slurm else local_env(),
    )


#: The fork server of :class:`ForkedSnakemake`: imports Snakemake once, then runs each command line it is sent
#: (one JSON object a line) in a fork of itself, its output to a file, and answers with the exit code.
_FORK_SERVER = r"""
import json, os, sys
import snakemake.cli
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.chdir(job["cwd"])
        os.environ.update(job.get("env", {}))
        code = 1
        try:
            snakemake.cli.main(job["args"])
        except SystemExit as stop:  # as the interpreter ends on one: a message is printed, exit status 1
            code = stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 1
            if not isinstance(stop.code, int | None):
                print(stop.code, file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
"""


class ForkedSnakemake:
    """``snakemake`` command lines run as forks of one process that has imported Snakemake already.

    Importing Snakemake takes ~1 s of the ~1.7 s a dry run costs; a test that plans a hundred dry runs
    (test_params) pays it once this way. One command at a time; runs see no SLURM commands
    (:func:`local_env`), and each is under the hang guard ``timeout``.
    """

    def __init__(self, root: Path):
        self.root = root
        self.logs = Path(tempfile.mkdtemp(prefix="attnlens-forked-snakemake-"))
        self.count = 0
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
        self.server = subprocess.Popen(
            [sys.executable, "-c", _FORK_SERVER], cwd=root, env=local_env(), text=True, start_new_session=True, **pipes
        )

    def run(self, *args, timeout: float = GUARD["plan"], env: dict | None = None) -> subprocess.CompletedProcess:
        """``snakemake --snakefile <root>/workflow/Snakefile *args``, with ``env`` added to its environment; its output
        (stdout and stderr together) in both fields."""
        cmd = ["--snakefile", str(self.root / "workflow" / "Snakefile"), *map(str, args)]
        log = self.logs / f"{self.count}.log"
        self.count += 1
        job = {"args": cmd, "cwd": str(self.root), "log": str(log), "env": env or {}}
        self.server.stdin.write(json.dumps(job) + "\n")
        self.server.stdin.flush()
        if not select.select([self.server.stdout], [], [], timeout)[0]:
            os.killpg(self.server.pid, signal.SIGKILL)
            said = log.read_text(errors="replace") if log.exists() else ""
            pytest.fail(hang_report(["snakemake", *cmd], timeout, said), pytrace=False)
        answer = self.server.stdout.readline().strip()
        if not answer:
            raise RuntimeError(f"the Snakemake fork server ended: {log.read_text(errors='replace')[-2000:]}")
        said = log.read_text(encoding="utf-8", errors="replace")
        return subprocess.CompletedProcess(["snakemake", *cmd], int(answer), said, said)

    def close(self) -> None:
        self.server.stdin.close()
        self.server.wait(timeout=30)
        shutil.rmtree(self.logs, ignore_errors=True)


#: SLURM's client commands: Snakemake's SLURM plugin runs them whenever it loads (`scontrol show config`
#: waits ~9 s for a controller that is not running, e.g. after tests/slurm has stopped its cluster).
SLURM_COMMANDS = {"sinfo", "squeue", "sacct", "scontrol", "sbatch", "scancel", "srun", "salloc", "sacctmgr"}


@functools.cache
def local_env() -> dict[str, str]:
    """This environment with a PATH that offers every command but SLURM's, thread pools of one thread
    (:data:`ONE_THREAD`) and the session's job server (:func:`job_server`), built once per test session."""
    shadow = Path(tempfile.mkdtemp(prefix="attnlens-bin-without-slurm-"))
    atexit.register(shutil.rmtree, shadow, ignore_errors=True)  # the links only: the session's end removes them
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        for tool in Path(folder).iterdir():
            link = shadow / tool.name
            if tool.name not in SLURM_COMMANDS and not link.is_symlink():
                link.symlink_to(tool)
    env = {**os.environ, **ONE_THREAD, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{shadow}"}
    return {**env, jobserver.SOCKET_ENV: job_server(env)}


#: A subprocess's thread pools on one thread, as the test process's (conftest): the session runs hold the other
#: cores. Not in the test process's own environment: ``nproc`` reads ``OMP_NUM_THREADS`` (tests/slurm/cluster.sh
#: would give its node one CPU, and the Makefile ``--cores 1``).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


#: The session's job server (:func:`job_server`); its standard input stays open until the session ends.
_JOB_SERVER: list[subprocess.Popen] = []


def job_server(env: dict[str, str]) -> str:
    """Start one warm job server for the whole session (``python -m attnlens.pipeline.jobserver``) and return its
    socket:
    every local run the tests start (:func:`local_env`) hands its jobs to it instead of starting a server of its
    own (``attnlens.pipeline.jobserver.start``), so that no run pays the stages' imports again, nor fresh starts for its
    first jobs while its own server imports. It ends with the session (its standard input closes); until it has
    imported, jobs start fresh, as they would."""
    path = Path(tempfile.mkdtemp(prefix="attnlens-jobs-")) / "socket"
    with open(path.parent / "server.log", "wb") as log:
        _JOB_SERVER.append(
            subprocess.Popen(
                [sys.executable, "-m", "attnlens.pipeline.jobserver", str(path)],
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        )
    atexit.register(_stop_job_server, _JOB_SERVER[-1], path.parent)
    return str(path)


def _stop_job_server(server: subprocess.Popen, folder: Path) -> None:
    """At the session's end: close the server's standard input (it ends), then remove its socket's folder, keeping
    the folder where the server wrote to its log (a server that failed says why there, and the path is printed)."""
    jobserver.end_server(server)
    if (folder / "server.log").stat().st_size:
        print(f"the session's job server wrote to {folder / 'server.log'}", file=sys.stderr)
    else:
        shutil.rmtree(folder, ignore_errors=True)


def fresh_env() -> dict[str, str]:
    """:func:`local_env` without a warm job server (``ATTNLENS_WARM_JOBS=0``): each job a fresh process, as
    under SLURM. The runs that compare such jobs with the session runs' warm ones show the two give the same
    bytes; a run in a namespace of its own (a private mount) needs it, as the server cannot see into that."""
    env = {**local_env(), jobserver.SWITCH_ENV: "0"}
    env.pop(jobserver.SOCKET_ENV)
    return env


#: The tests that guard a claim needing the machine's help (a real SLURM, a real browser): CI sets their
#: switch (``.ci/run``), so that where the machine cannot give that help the run fails instead of skipping.
REQUIRED = {"slurm": "ATTNLENS_REQUIRE_SLURM", "browser": "ATTNLENS_REQUIRE_BROWSER", "latex": "ATTNLENS_REQUIRE_LATEX"}


def unavailable(what: str, reason: str):
    """Skip a test whose ``what`` (a key of :data:`REQUIRED`) this machine lacks — or fail, where it is required."""
    if os.environ.get(REQUIRED[what]) == "1":
        pytest.fail(f"{what} test required ({REQUIRED[what]}=1) but {reason}")
    pytest.skip(reason)


def copy_run(run: Path, dest: Path) -> Path:
    """A copy of a finished run (modification times kept, so Snakemake sees nothing to do)."""
    shutil.copytree(run, dest, symlinks=True)
    return dest


#: The checkpoint's own shape: 128 tokens (Longformer numbers positions from pad id + 1), window 16.
OWN_LENGTH, OWN_WINDOW = 128, 16


def build_classifier(
    folder: Path, labels=CLASS_NAMES, steps: int = 8, architectures=True, never: int | None = None
) -> Path:
    """A small Longformer classifier, fine-tuned ``steps`` AdamW steps on synthetic documents and saved the way a
    user would (``save_pretrained``): 2 layers, hidden 32, window 16, 128 positions, the packaged WordPiece
    tokenizer; class ``k`` is named ``labels[k]``. Class ``never`` gets an output bias of −10⁴: it is never
    predicted."""
    tokenizer = load_tokenizer(packaged_model_dir())
    config = LongformerConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=OWN_LENGTH + tokenizer.pad_token_id + 1,
        attention_window=OWN_WINDOW,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        sep_token_id=tokenizer.sep_token_id,
        id2label=dict(enumerate(labels)),
        label2id={c: i for i, c in enumerate(labels)},
    )
    torch.manual_seed(3)
    model = LongformerForSequenceClassification(config)
    docs = generate_corpus(SyntheticConfig(n_documents=16, min_words=40, max_words=120), seed=11).documents
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    for step in range(steps):
        batch = docs.iloc[(step * 4) % len(docs) :][:4]
        enc = tokenizer(list(batch["text"]), truncation=True, max_length=OWN_LENGTH, padding=True, return_tensors="pt")
        loss = model(**enc, labels=torch.tensor(batch["label"].to_numpy()) % len(labels)).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    model.eval()
    if never is not None:
        with torch.no_grad():
            model.classifier.out_proj.bias[never] = -1e4
    if not architectures:
        model.config.architectures = None
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def merged(base: dict, over: dict) -> dict:
    """``over`` laid on ``base`` as Snakemake lays a ``--configfile`` on the config: mappings key by key, at any
    depth; any other value replaced."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def tiny_config(root: Path, **sections) -> dict:
    """The `.test` configuration with whole sections replaced (``data=…``, ``model=…``) or, for a dict whose
    section exists, merged one level deep."""
    cfg = yaml.safe_load((root / ".test/config/config.yaml").read_text(encoding="utf-8"))
    for name, value in sections.items():
        if isinstance(value, dict) and name not in ("data", "model") and isinstance(cfg.get(name), dict):
            cfg[name] = {**cfg[name], **value}
        else:
            cfg[name] = value
    return cfg


def write_config(work: Path, cfg: dict) -> Path:
    """``cfg`` as ``work/config/config.yaml`` (the file a run in ``work`` reads); returns ``work``."""
    (work / "config").mkdir(parents=True, exist_ok=True)
    (work / "config/config.yaml").write_text(yaml.safe_dump(cfg, allow_unicode=True), encoding="utf-8")
    return work


#: A rule that takes its kind's defaults: ``use rule <kind> as <rule> with:`` (kinds: workflow/rules/kinds.smk).
USE_RULE = re.compile(r"^\s*use rule (\w+) as (\w+) with:", re.M)


def rules_by_kind(rule_files) -> dict[str, set[str]]:
    """The rules of the given ``workflow/rules/*.smk`` files, by their kind."""
    kinds: dict[str, set[str]] = {}
    for smk in rule_files:
        for kind, rule in USE_RULE.findall(Path(smk).read_text(encoding="utf-8")):
            kinds.setdefault(kind, set()).add(rule)
    return kinds


def gpu_rules(rule_files) -> set[str]:
    """Rules that ask for a GPU, read from the given ``workflow/rules/*.smk`` files: a rule of a kind whose resources
    say ``gpu=1`` (``workflow/rules/kinds.smk``), or a rule of its own that says it."""
    kinds_smk = Path(ROOT / "workflow" / "rules" / "kinds.smk").read_text(encoding="utf-8")
    gpu_kinds = {
        block.split(":", 1)[0].strip()
        for block in re.split(r"^rule ", kinds_smk, flags=re.M)[1:]
        if re.search(r"^\s*gpu=1,", block, re.M)
    }
    rule_files = list(rule_files)
    rules = {rule for kind, named in rules_by_kind(rule_files).items() if kind in gpu_kinds for rule in named}
    for smk in rule_files:
        if Path(smk).name == "kinds.smk":
            continue
        for block in re.split(r"^\s*rule ", Path(smk).read_text(encoding="utf-8"), flags=re.M)[1:]:
            if re.search(r"^\s*gpu=1,", block, re.M):
                rules.add(block.split(":", 1)[0].strip())
    return rules
