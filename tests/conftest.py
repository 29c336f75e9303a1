"""Shared fixtures: repository paths, a tiny random Longformer, the real converted MiniLM, and the session's
end-to-end runs (tests/README.md lists which tests read which run)."""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from threadpoolctl import threadpool_limits
from transformers import AutoTokenizer, BertModel

from attnlens.device import cpu_kernels
from attnlens.models.checkpoints import packaged_model_dir
from tests.support.helpers import (
    GUARD,
    ROOT,
    kill_live,
    local_env,
    run_guarded,
    run_snakemake,
    tiny_config,
    write_config,
)
from tests.support.notes_corpus import FOLDERS_TARGETS, HOSTILE_NOTE, PAIR_SHARDS, SERVICES, write_notes
from tests.support.session_runs import REGISTRY, SessionRuns, module_order, session_run
from tests.support.task_runs import multilabel_run, qa_run, regression_run  # noqa: F401 (session fixtures)
from tests.support.tiny_models import tiny_longformer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_report_header(config) -> str:
    """The CPU kernels float results depend on (tests/e2e/test_kernel_sets.py reads this line)."""
    return f"CPU kernels: {cpu_kernels()}"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


#: The test process computes on one core, and so do the processes it starts with :func:`helpers.local_env`
#: (:data:`helpers.ONE_THREAD`; a Snakemake job gets its rule's threads from Snakemake): the session runs
#: (:mod:`session_runs`) take the other cores, one each, and no thread pool waits spinning for a core another
#: holds (a two-thread subprocess beside them took 5 × its time).
torch.set_num_threads(1)
threadpool_limits(1)


def _needed(items) -> set[str]:
    """The session runs ``items`` need: each is registered under the name of the fixture that returns it (here, or
    in the test module that owns it), and a test's fixture closure names every fixture it needs."""
    return {fixture for item in items for fixture in item.fixturenames} & set(REGISTRY)


#: Of the modules that need a session run, these go first: their set-up mostly waits (SLURM's packages and
#: daemons, its queue), which the runs' computing fills.
WAITING_FIRST = ("tests.e2e.test_slurm",)
#: And these last: test_params plans two dry runs at a time, which beside a session run oversubscribe the cores
#: (tried: ordered among the others, the kill-and-resume and bad-input runs ran beside it, and CI took 21 min 20 s
#: against 19 min 39 s); at the end, with the runs done, both cores are its own.
LAST = ("tests.e2e.test_params",)


def _module_name(item) -> str:
    return getattr(getattr(item, "module", None), "__name__", "")


def pytest_collection_modifyitems(session, config, items) -> None:
    """Whole test modules reordered (:func:`session_runs.module_order`): those that need no session run first,
    in their order, while the runs make progress on the other cores, then :data:`WAITING_FIRST`, then the others
    by when the runs they need start, then :data:`LAST`. Whole modules move, so that a module's own fixtures are
    set up once. A unit test (``tests/unit/``) that needs a run or Snakemake is refused: it belongs in tests/e2e/."""
    needs: dict[str, set[str]] = {}
    for item in items:
        needs.setdefault(_module_name(item), set()).update(_needed([item]))
    misplaced = sorted(
        item.nodeid
        for item in items
        if _module_name(item).startswith("tests.unit.") and (_needed([item]) or item.get_closest_marker("workflow"))
    )
    if misplaced:
        raise pytest.UsageError(f"unit tests that need an end-to-end run (move them to tests/e2e/): {misplaced}")
    rank = {module: k for k, module in enumerate(module_order(needs, REGISTRY, WAITING_FIRST, LAST))}
    items.sort(key=lambda item: rank[_module_name(item)])  # stable: each module keeps its order


#: Each test module's first start and last end (time.monotonic()), for the terminal summary.
_MODULE_SPANS: dict[str, list[float]] = {}


def pytest_runtest_logstart(nodeid, location) -> None:
    _MODULE_SPANS.setdefault(nodeid.split("::")[0], [time.monotonic(), time.monotonic()])


def pytest_runtest_logfinish(nodeid, location) -> None:
    _MODULE_SPANS[nodeid.split("::")[0]][1] = time.monotonic()


@pytest.fixture(scope="session", autouse=True)
def session_runs(request, tmp_path_factory) -> Iterator[SessionRuns]:
    """The session runs the collected tests need, started in the background from the first test."""
    runs = SessionRuns()
    local_env()  # built once, before the runs' threads use it
    runs.start(_needed(request.session.items), tmp_path_factory.mktemp)
    request.config.stash[RUNS_KEY] = runs
    yield runs
    kill_live()  # a session cut short (-x, Ctrl-C) leaves no run behind


RUNS_KEY = pytest.StashKey[SessionRuns]()


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The session runs' wall times, as `--durations` gives the tests' (they ran in the background)."""
    runs = config.stash.get(RUNS_KEY, None)
    if runs is not None and runs.report():
        terminalreporter.section("session runs (tests/support/session_runs.py)")
        for line in runs.report():
            terminalreporter.write_line(line)
        terminalreporter.section("the test process (modules in the order they ran; the waits for runs)")
        for module, (began, ended) in _MODULE_SPANS.items():
            began, ended = runs.since_start(began), runs.since_start(ended)
            terminalreporter.write_line(f"{module}: from {max(began, 0):.0f} s to {ended:.0f} s, {ended - began:.0f} s")
        for name, began, ended in runs.waits:
            terminalreporter.write_line(f"waited for {name}: from {began:.0f} s to {ended:.0f} s")


@session_run("architecture_grid", seconds=430)
def _architecture_grid(work: Path) -> Path:
    findings = {"sanity_examples": 1, "alpha": ARCHITECTURE_ALPHA}
    cfg = tiny_config(ROOT, studies=["classification", "topology"], findings=findings, **ONE_SHARD)
    cfg["grid"] = {"models": ARCHITECTURES, "seeds": list(ARCHITECTURE_SEEDS), "exclude": ARCHITECTURE_EXCLUDED}
    write_config(work, cfg)
    first = [f"results/runs/default__{m}__s{ARCHITECTURE_SEEDS[0]}/manifest.json" for m in ARCHITECTURES]
    out = run_snakemake(
        ROOT,
        "--directory",
        str(work),
        "--cores",
        "1",
        "--show-failed-logs",
        *first,
        "results/findings/findings.csv",
        timeout=GUARD["run"],
    )
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    return work


@session_run("tiny_run", seconds=200)
def _tiny_run(work: Path) -> Path:
    shutil.copytree(ROOT / ".test" / "config", work / "config")
    out = run_snakemake(ROOT, "--directory", str(work), "--cores", "1", "--show-failed-logs", timeout=GUARD["run"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return work


@pytest.fixture(scope="session")
def tiny_run(session_runs) -> Path:
    """A working directory where the .test configuration has run to the end, locally, one thread a job (once per
    session).

    Tests read it; a test that changes files works on a copy (:func:`copy_run`).
    """
    return session_runs.get("tiny_run")


#: Builds :func:`own_classifier` in a process of its own (torch's threads in this one are the tests').
_BUILD_CLASSIFIER = (
    "import sys; from pathlib import Path; from tests.support.helpers import build_classifier; "
    "from tests.support.notes_corpus import SERVICES; "
    "build_classifier(Path(sys.argv[1]), labels=SERVICES, never=1)"
)


@session_run("own_classifier", seconds=10)
def _own_classifier(work: Path) -> Path:
    folder = work / "longformer-clf"
    built = run_guarded(
        [sys.executable, "-c", _BUILD_CLASSIFIER, folder],
        cwd=ROOT,
        timeout=GUARD["stage"],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return folder


@pytest.fixture(scope="session")
def own_classifier(session_runs) -> Path:
    """A Longformer classifier of the notes' three services (tests/support/notes_corpus.py), fine-tuned and saved as
    a user would (:func:`~tests.support.helpers.build_classifier`); it never predicts oncology (class 1), the class of
    the default ``figures.topk_role`` (most_confident_1)."""
    return session_runs.get("own_classifier")


#: The notes run's shard counts: more shards than its three test notes, so most shards are empty.
NOTES_SHARDS = {"attention": {"n_shards": 4}, "attribution": {"n_shards": 4}, "topology": {"n_shards": 4}}


@session_run("notes_run", seconds=150, after=("own_classifier",))
def _notes_csv(work: Path, classifier: Path) -> Path:
    table, _ = write_notes(work / "input")
    data = {"source": "file", "path": str(table), "id_column": "note_id", "classes": list(SERVICES), "seed": 7}
    model = {"source": "classifier", "name_or_path": str(classifier)}
    write_config(
        work,
        tiny_config(
            ROOT,
            data=data,
            model=model,
            studies=["classification", "topology"],
            predict={"extra_ids": [HOSTILE_NOTE]},
            **NOTES_SHARDS,
        ),
    )
    out = run_snakemake(ROOT, "--directory", str(work), "--cores", "1", "--show-failed-logs", timeout=GUARD["run"])
    assert out.returncode == 0, "notes csv run:\n" + out.stdout[-6000:] + out.stderr[-3000:]
    return work


@session_run("notes_folders_run", seconds=80, after=("own_classifier",))
def _notes_folders(work: Path, classifier: Path) -> Path:
    _, folders = write_notes(work / "input")
    data = {"source": "folders", "path": str(folders), "classes": list(SERVICES), "seed": 7, "test_fraction": 0.25}
    cfg = tiny_config(ROOT, data=data, model={"source": "classifier", "name_or_path": str(classifier)})
    cfg["pairs"]["attribution"]["n_shards"] = PAIR_SHARDS
    cfg["pairs"]["data"]["synthetic"]["n_pairs"] = 6
    cfg["pairs"]["exact"]["enabled"] = False
    write_config(work, cfg)
    out = run_snakemake(
        ROOT, "--directory", str(work), *FOLDERS_TARGETS, "--cores", "1", "--show-failed-logs", timeout=GUARD["run"]
    )
    assert out.returncode == 0, "notes folders run:\n" + out.stdout[-6000:] + out.stderr[-3000:]
    return work


@pytest.fixture(scope="session")
def notes_run(session_runs) -> Path:
    """Real-shaped data analysed with the user's own classifier (:func:`own_classifier`): the discharge notes as a
    CSV (three classes, one never predicted, one named by hostile text; three test notes, all of one class, one of
    them hostile and showcased by `predict.extra_ids`), the classification and topology studies, more shards than
    test notes. test_real_data, test_existing_classifier and test_browser read it."""
    return session_runs.get("notes_run")


@pytest.fixture(scope="session")
def notes_folders_run(session_runs) -> Path:
    """The same notes as one folder of ``.txt`` files per class (a seeded random split), up to the predictions,
    plus study 3's pair shards (:data:`notes_corpus.FOLDERS_TARGETS`). test_real_data reads it."""
    return session_runs.get("notes_folders_run")


@pytest.fixture(scope="session")
def notes_runs(notes_run, notes_folders_run) -> dict[str, Path]:
    """The two notes runs, by the form of their input."""
    return {"csv": notes_run, "folders": notes_folders_run}


@pytest.fixture(scope="session")
def minilm():
    """The packaged all-MiniLM-L6-v2 BERT model (eval mode) and its tokenizer."""

    path = packaged_model_dir()
    return BertModel.from_pretrained(str(path)).eval(), AutoTokenizer.from_pretrained(str(path))


@pytest.fixture()
def tiny_classifier():
    """A 2-layer, 2-head random Longformer classifier with the MiniLM tokenizer, seeded."""

    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_dir()))
    tokenizer.model_max_length = 64
    model = tiny_longformer(
        vocab_size=tokenizer.vocab_size,
        hidden=16,
        heads=2,
        intermediate=32,
        max_positions=66,
        window=16,
        pad_token_id=tokenizer.pad_token_id,
        num_labels=2,
        seed=0,
    )
    return model, tokenizer


#: Each architecture run's sharded rules run one shard: sharding is the tiny and notes runs' to test.
ONE_SHARD = {section: {"n_shards": 1} for section in ("attention", "attribution", "explanations", "topology")}
#: The architecture grid's models: the packaged MiniLM converted to a BigBird (blocks of 8, one random block:
#: block-sparse above 56 tokens), a ModernBERT of its sizes drawn at random and trained from scratch
#: (``model.source: from_config``, window 32, every third layer full), and a Mistral decoder drawn the same way
#: (causal, a sliding window reaching 16 keys back, 4 key/value heads for 12 query heads, read at its last token).
ARCHITECTURES = {
    "bigbird": {
        "model": {"attention_window": None, "architecture": "bigbird", "block_size": 8, "num_random_blocks": 1}
    },
    "modernbert": {"model": {"source": "from_config", "architecture": "modernbert"}},
    "mistral": {"model": {"source": "from_config", "architecture": "mistral"}},
}
#: Its seeds: the first run of each model is built to the end; the decoder's second seed, up to what rule findings
#: reads, gives the findings a model with two seeds and four runs in all.
ARCHITECTURE_SEEDS = (7, 8)
#: The runs the grid leaves out (``grid.exclude``): the encoders' second seeds (two runs of about a minute each
#: that no claim needs: the decoder's two seeds are the within-model scope).
ARCHITECTURE_EXCLUDED = [{"model": "bigbird", "seed": 8}, {"model": "modernbert", "seed": 8}]
#: The grid's sign test: at α = 0.2 four runs, every one agreeing, can hold (2 · 2⁻⁴ = 0.125); α = 0.05 needs six.
ARCHITECTURE_ALPHA = 0.2


@pytest.fixture(scope="session")
def architecture_grid(session_runs) -> Path:
    """The `.test` configuration as a grid of the other architectures behind the seam × two fine-tuning seeds, with
    the classification and topology studies, once per session, one thread a job: the seed-7 runs to the end
    (test_architecture_runs reads them), the decoder's seed-8 run as far as the findings need, and the findings
    across the four runs (test_grid_runs reads them)."""
    return session_runs.get("architecture_grid")


@pytest.fixture(scope="session")
def bigbird_run(architecture_grid) -> Path:
    """The results of the first BigBird run of :func:`architecture_grid` (the one-run layout of ``results/``)."""
    return architecture_grid / f"results/runs/default__bigbird__s{ARCHITECTURE_SEEDS[0]}"


@pytest.fixture(scope="session")
def mistral_run(architecture_grid) -> Path:
    """The results of the first Mistral run of :func:`architecture_grid` (the one-run layout of ``results/``)."""
    return architecture_grid / f"results/runs/default__mistral__s{ARCHITECTURE_SEEDS[0]}"


@pytest.fixture(scope="session")
def modernbert_run(architecture_grid) -> Path:
    """The results of the first ModernBERT run of :func:`architecture_grid` (the one-run layout of ``results/``)."""
    return architecture_grid / f"results/runs/default__modernbert__s{ARCHITECTURE_SEEDS[0]}"
