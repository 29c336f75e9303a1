"""Bad input a user plausibly gives: one clear line, no traceback, no artifact.

Each case runs the real workflow (``snakemake … prepare_dataset``, the first rule) in a fresh working
directory holding the `.test` configuration with one thing wrong, and asserts: a non-zero exit, exactly
one ``attnlens: error:`` line naming the file (or config file), the field and what was expected, no
Python traceback, and no new file under ``results/`` except the failing rule's log — which holds that
same line (a log is where Snakemake's ``--show-failed-logs`` and a cluster's job output point the user).

Each case costs a Snakemake start-up on one core (~3 s): the cases run one after another as a session run
(:func:`bad_input_outcomes`, tests/support/session_runs.py) on a core the other runs leave, and each test reads its
case's outcome.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from transformers import LongformerConfig

from tests.support.helpers import GUARD, ROOT, SNAKEMAKE, ForkedSnakemake, fresh_env, run_guarded, tiny_config
from tests.support.session_runs import session_run

pytestmark = pytest.mark.workflow


@dataclass(frozen=True)
class Case:
    """``setup(workdir, config) -> config`` breaks one thing; the error line must contain every ``expect``."""

    setup: Callable[[Path, dict], dict | str]
    expect: tuple[str, ...]
    env: dict | None = None


def _csv(work: Path, text: str | bytes, name: str = "notes.csv") -> Path:
    path = work / "input" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def _file_source(text: str | bytes, **extra) -> Callable[[Path, dict], dict]:
    def setup(work: Path, cfg: dict) -> dict:
        cfg["data"] = {"source": "file", "path": str(_csv(work, text)), **extra}
        return cfg

    return setup


def _rows(labels, texts=None) -> str:
    texts = texts or [f"note number {i} about a patient" for i in range(len(labels))]
    return "text,label\n" + "".join(f"{t},{lab}\n" for t, lab in zip(texts, labels, strict=True))


def _set(path: str, value) -> Callable[[Path, dict], dict]:
    def setup(work: Path, cfg: dict) -> dict:
        *parents, leaf = path.split(".")
        node = cfg
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
        return cfg

    return setup


def _raw(text: str) -> Callable[[Path, dict], str]:
    return lambda work, cfg: text


def _folders(empty_class: bool) -> Callable[[Path, dict], dict]:
    def setup(work: Path, cfg: dict) -> dict:
        root = work / "input" / "notes"
        for k, name in enumerate(("cardiology", "oncology")):
            (root / name).mkdir(parents=True)
            if not (empty_class and k == 1):
                for i in range(3):
                    (root / name / f"note {i}.txt").write_text(f"{name} note {i}", encoding="utf-8")
        cfg["data"] = {"source": "folders", "path": str(root), "classes": ["cardiology", "oncology"]}
        return cfg

    return setup


def _classifier(num_labels: int, saved_as: str = "LongformerForSequenceClassification"):
    """A saved Longformer classifier's config (the checks run before any weight is read)."""

    def setup(work: Path, cfg: dict) -> dict:
        folder = work / "models" / "clf"
        LongformerConfig(num_labels=num_labels, architectures=[saved_as]).save_pretrained(folder)
        cfg["model"] = {"source": "classifier", "name_or_path": str(folder)}
        return cfg

    return setup


def _read_only_results(work: Path, cfg: dict) -> dict:
    (work / "results").mkdir()
    (work / "results").chmod(0o555)
    return cfg


BALANCED = [0, 1] * 4
CASES = {
    # --- config
    "unknown key": Case(_set("train.epochz", 3), ("config.yaml", "train.epochz", "unknown key")),
    "wrong type": Case(_set("train.epochs", "two"), ("config.yaml", "train.epochs", "an integer", "got 'two'")),
    "out of range": Case(_set("train.lr", -1.0), ("config.yaml", "train.lr", "expected")),
    "YAML syntax error": Case(_raw("train:\n  epochs: [1\n"), ("config.yaml", "(file)", "syntax error at line")),
    "empty config file": Case(_raw(""), ("config.yaml", "(file)", "the file is empty")),
    "file source without a path": Case(_set("data.source", "file"), ("config.yaml", "data.path", "expected a path")),
    # --- data
    "no text column": Case(_file_source("body,label\na,0\nb,1\n"), ("notes.csv", "text", "expected a column 'text'")),
    "no label column": Case(_file_source("text,category\na,0\nb,1\n"), ("notes.csv", "label", "found ['text'")),
    "empty data file": Case(_file_source(""), ("notes.csv", "(format)", "expected valid csv")),
    "header only": Case(_file_source("text,label\n"), ("notes.csv", "text", "expected at least one example")),
    "one class only": Case(_file_source(_rows([0] * 8)), ("notes.csv", "label", "expected at least two classes")),
    "mixed labels": Case(_file_source(_rows([0, 1, "neg", 1] * 2)), ("notes.csv", "label", "row 3", "'neg'")),
    "empty label cell": Case(_file_source(_rows([0, 1, "", 1] * 2)), ("notes.csv", "label", "row 3", "empty cell")),
    "label outside the classes": Case(
        _file_source(_rows([0, 1, 2, 0, 1, 2]), classes=["cardiology", "oncology"]), ("notes.csv", "label", "0..1")
    ),
    "missing text": Case(
        _file_source(_rows(BALANCED, ["a", "", "c", "d", "e", "f", "g", "h"])), ("notes.csv", "text", "has none")
    ),
    "non-UTF-8 bytes": Case(
        _file_source("text,label\ncaf\xe9,0\nb,1\nc,0\nd,1\n".encode("latin-1")), ("notes.csv", "(encoding)", "0xe9")
    ),
    "duplicate ids": Case(
        _file_source("id,text,label\nn1,a,0\nn1,b,1\nn2,c,0\nn3,d,1\n", id_column="id"),
        ("notes.csv", "example_id", "expected unique ids, 'n1'"),
    ),
    "one row": Case(_file_source("text,label\nthe only note,0\n"), ("notes.csv", "label", "expected at least two")),
    "missing data file": Case(
        lambda work, cfg: _set("data", {"source": "file", "path": str(work / "nope.csv")})(work, cfg),
        ("nope.csv", "data.path", "expected an existing CSV"),
    ),
    "empty class folder": Case(_folders(empty_class=True), ("oncology", "data.classes[1]", "at least one .txt")),
    # --- model
    "missing local model": Case(_set("model.name_or_path", "./models/mine"), ("model.name_or_path", "existing model")),
    "hub id offline": Case(
        _set("model.name_or_path", "allenai/longformer-base-4096"),
        ("model.name_or_path", "could not load 'allenai/longformer-base-4096'", "HF_HUB_OFFLINE"),
        env={"HF_HUB_OFFLINE": "1"},
    ),
    "checkpoint of the wrong architecture": Case(
        _set("model.source", "longformer"), ("model.name_or_path", "expected a Longformer checkpoint", "'bert'")
    ),
    "existing classifier of other classes": Case(
        _classifier(num_labels=3),
        ("model.name_or_path", "expected a classifier of the dataset's 2 classes", "predicts 3 labels"),
    ),
    "existing classifier without a head": Case(
        _classifier(num_labels=2, saved_as="LongformerModel"), ("model.name_or_path", "use model.source 'pretrained'")
    ),
    "pretrained checkpoint of an architecture attnlens does not read": Case(
        _set("model.source", "pretrained"),
        ("model.name_or_path", "expected a pretrained checkpoint of a model_type attnlens reads", "'bert'"),
    ),
    "existing classifier, hub id offline": Case(
        lambda work, cfg: _set("model", {"source": "classifier", "name_or_path": "someone/longformer-clf"})(work, cfg),
        ("model.name_or_path", "could not load 'someone/longformer-clf'", "HF_HUB_OFFLINE"),
        env={"HF_HUB_OFFLINE": "1"},
    ),
    # --- grid
    "grid: two runs of one name": Case(_set("grid", {"seeds": [1, 1]}), ("config.yaml", "grid.seeds", "share a name")),
    "grid: excluding a model it does not have": Case(
        _set("grid", {"models": {"a": {}}, "exclude": [{"model": "b"}]}), ("grid.exclude[0].model", "got 'b'")
    ),
    "grid: an empty axis": Case(_set("grid", {"models": {}}), ("config.yaml", "grid.models", "at least 1 entry")),
    "grid: a seed set twice": Case(
        _set("grid", {"models": {"a": {"train": {"seed": 3}}}, "seeds": [1, 2]}),
        ("grid.models.a.train.seed", "grid.seeds sets each run's train.seed"),
    ),
    "grid: a run whose config is invalid": Case(
        _set("grid", {"models": {"wide": {"model": {"attention_window": 512}}}}),
        ("grid run default__wide__s7", "model.attention_window", "at most model.max_length"),
    ),
    # --- the generation study
    "generation with the classification study": Case(
        _set("data.task", "generation"), ("config.yaml", "studies", "for data.task 'generation', got 'classification'")
    ),
    "generation from a converted BERT": Case(
        lambda work, cfg: {**cfg, "data": {**cfg["data"], "task": "generation"}, "studies": ["generation"]},
        ("config.yaml", "model.source", "expected one of ['from_config', 'pretrained'] for data.task 'generation'"),
    ),
    "generation: an empty reference answer": Case(
        lambda work, cfg: {
            **_file_source(
                "text,question,label\n"
                + "".join(f"Fact {i} holds.,What holds?,{'' if i == 2 else i}\n" for i in range(8)),
                task="generation",
            )(work, cfg),
            "studies": ["generation"],
            "model": {"source": "from_config", "architecture": "llama"},
        },
        ("notes.csv", "label", "expected a reference answer in every row", "row 3"),
    ),
    # --- file system
    "read-only results": Case(
        _read_only_results, ("results", "(permissions)", "expected a folder this user can write")
    ),
}


#: Root writes into a read-only folder: without these capabilities it obeys file permissions like any user.
AS_USER = ["setpriv", "--inh-caps=-dac_override,-dac_read_search", "--bounding-set=-dac_override,-dac_read_search"]


def _run(work: Path, env: dict | None, obey_permissions: bool, forked: ForkedSnakemake) -> subprocess.CompletedProcess:
    """Rule ``prepare_dataset`` in ``work``: in a fork of a process that has imported Snakemake (34 imports of ~1 s
    saved), but where the capabilities are dropped, which takes a process of its own."""
    args = ["--directory", work, "--cores", 1, "prepare_dataset"]
    if not (obey_permissions and os.geteuid() == 0):
        out = forked.run(*args, env=env)
        return subprocess.CompletedProcess(out.args, out.returncode, out.stdout, "")  # the output once
    # a job without the capabilities dropped here must not run in a fork of the (root) job server
    cmd = [*AS_USER, *SNAKEMAKE, "--snakefile", ROOT / "workflow" / "Snakefile", *args]
    return run_guarded(cmd, cwd=work, timeout=GUARD["plan"], env={**fresh_env(), **(env or {})})


@dataclass(frozen=True)
class Outcome:
    """A case's working directory, the files it held before the run, and the run."""

    work: Path
    before: frozenset[Path]
    out: subprocess.CompletedProcess


def _outcome(name: str, folder: Path, forked: ForkedSnakemake) -> Outcome:
    case = CASES[name]
    work = Path(tempfile.mkdtemp(prefix="case-", dir=folder))
    (work / "config").mkdir()
    cfg = case.setup(work, tiny_config(ROOT))
    text = cfg if isinstance(cfg, str) else yaml.safe_dump(cfg)
    (work / "config/config.yaml").write_text(text, encoding="utf-8")
    before = frozenset(p for p in work.rglob("*") if p.is_file())
    return Outcome(work, before, _run(work, case.env, name == "read-only results", forked))


@session_run("bad_input_outcomes", seconds=90)
def _all_outcomes(work: Path) -> dict[str, Outcome]:
    """Every case, one after another on one core (Snakemake's start-up is single-threaded)."""
    forked = ForkedSnakemake(ROOT)
    try:
        return {name: _outcome(name, work, forked) for name in CASES}
    finally:
        forked.close()


@pytest.fixture(scope="module")
def bad_input_outcomes(session_runs) -> dict[str, Outcome]:
    """Every case's outcome (the session run :func:`_all_outcomes`); their folders removed after the module."""
    done = session_runs.get("bad_input_outcomes")
    yield done
    for outcome in done.values():
        if (outcome.work / "results").exists():
            (outcome.work / "results").chmod(0o755)
        shutil.rmtree(outcome.work, ignore_errors=True)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_clear_line(name, bad_input_outcomes):
    work, before, out = (bad_input_outcomes[name].work, bad_input_outcomes[name].before, bad_input_outcomes[name].out)
    said = out.stdout + out.stderr
    assert out.returncode != 0, said[-3000:]
    lines = [ln for ln in said.splitlines() if ln.startswith("attnlens: error:")]
    assert len(lines) == 1, said[-3000:]
    for part in CASES[name].expect:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    assert "Traceback" not in said, said[-3000:]
    new = sorted(p.relative_to(work) for p in work.rglob("*") if p.is_file() and p not in before)
    results = [p for p in new if p.parts[0] == "results"]
    artifacts = [p for p in results if p.parts[:2] != ("results", "logs")]
    assert not artifacts, artifacts
    for log in results:  # the failing rule's log holds the line
        assert lines[0] in (work / log).read_text(encoding="utf-8"), log


def test_at_least_twenty_distinct_bad_inputs():
    assert len(CASES) >= 20 and len({c.expect for c in CASES.values()}) == len(CASES)
