"""Shared fixtures: repository paths, a tiny random Longformer, the real converted MiniLM, and the session's
end-to-end runs (tests/README.md lists which tests read which run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from helpers import (
    GUARD,
    ROOT,
    kill_live,
    run_snakemake,
    run_snakemakes_together,
    tiny_config,
    tiny_longformer,
    write_config,
)
from notes_corpus import FOLDERS_TARGETS, HOSTILE_NOTE, PAIR_SHARDS, SERVICES, write_notes
from transformers import AutoTokenizer, BertModel

from attnlens.models.loading import packaged_model_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_report_header(config) -> str:
    """The CPU kernels float results depend on (tests/test_kernel_sets.py reads this line)."""
    libraries = ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
    env = ", ".join(f"{k}={os.environ[k]}" for k in libraries if os.environ.get(k))
    return f"CPU kernels: {torch.backends.cpu.get_cpu_capability()}" + (f" ({env})" if env else "")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


class SessionRuns:
    """The session's shared end-to-end runs, started in a background thread, one after another, as soon as the
    first test starts (:func:`session_runs`), while the tests that need none of them run (:func:`
    pytest_collection_modifyitems` puts those first): the runs' chains of mostly one-thread jobs and the unit tests
    share the two cores instead of taking turns. A fixture that needs a run waits for it — or runs it itself, if
    the thread has not reached it yet — and gets its folder, or its failure, as if it had run it."""

    def __init__(self):
        self.launchers: dict[str, Callable[[], object]] = {}
        self.taken: set[str] = set()
        self.done: dict[str, threading.Event] = {}
        self.outcome: dict[str, tuple[bool, object]] = {}
        self.lock = threading.Lock()

    def add(self, name: str, launch: Callable[[], object]) -> None:
        self.launchers[name] = launch
        self.done[name] = threading.Event()

    def _take(self, name: str) -> bool:
        with self.lock:
            if name in self.taken:
                return False
            self.taken.add(name)
            return True

    def _run(self, name: str) -> None:
        try:
            self.outcome[name] = (True, self.launchers[name]())
        except BaseException as err:  # pytest.fail's too: re-raised where the run is needed
            self.outcome[name] = (False, err)
        self.done[name].set()

    def start(self, names: list[str]) -> None:
        def work() -> None:
            for name in names:
                if self._take(name):
                    self._run(name)

        threading.Thread(target=work, name="session-runs", daemon=True).start()

    def get(self, name: str):
        if self._take(name):
            self._run(name)
        self.done[name].wait()
        ok, value = self.outcome[name]
        if not ok:
            raise value
        return value


#: The runs, in the order the background thread starts them (most tests read the first), and the fixtures
#: through which a test needs each (a test's fixture closure names them).
RUNS = {"tiny": ("tiny_run",), "architectures": ("architecture_grid", "bigbird_run", "modernbert_run"),
        "notes": ("notes_runs", "notes_run", "own_classifier")}  # fmt: skip
RUN_FIXTURES = {fixture for fixtures in RUNS.values() for fixture in fixtures}


def pytest_collection_modifyitems(session, config, items) -> None:
    """The modules none of whose tests reads a session run first, in their order; then the others, in theirs: the
    session runs (:class:`SessionRuns`) make progress in the background meanwhile. Whole modules move, so that a
    module's own fixtures are set up once."""
    late = {getattr(item, "module", None) for item in items if RUN_FIXTURES & set(item.fixturenames)}
    items[:] = [i for i in items if getattr(i, "module", None) not in late] + [
        i for i in items if getattr(i, "module", None) in late
    ]


@pytest.fixture(scope="session", autouse=True)
def session_runs(request, root, tmp_path_factory) -> Iterator[SessionRuns]:
    """Registers the session runs the collected tests need and starts them in the background (:class:`SessionRuns`)."""
    runs = SessionRuns()
    needed = {fixture for item in request.session.items for fixture in item.fixturenames} & RUN_FIXTURES
    tiny = tmp_path_factory.mktemp("tiny-run")
    runs.add("tiny", lambda: _tiny_run(root, tiny))
    grid = tmp_path_factory.mktemp("architecture-grid")
    runs.add("architectures", lambda: _architecture_grid(root, grid))
    notes = {name: tmp_path_factory.mktemp(name) for name in ("my-classifier", "notes-csv", "notes-folders")}
    runs.add("notes", lambda: _notes_runs(root, notes))
    runs.start([name for name, fixtures in RUNS.items() if needed & set(fixtures)])
    yield runs
    kill_live()  # a session cut short (-x, Ctrl-C) leaves no run behind


def _tiny_run(root: Path, work: Path) -> Path:
    shutil.copytree(root / ".test" / "config", work / "config")
    out = run_snakemake(root, "--directory", str(work), "--cores", "2", "--show-failed-logs", timeout=GUARD["run"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return work


@pytest.fixture(scope="session")
def tiny_run(session_runs) -> Path:
    """A working directory where the .test configuration has run to the end, locally (once per session).

    Tests read it; a test that changes files works on a copy (:func:`copy_run`).
    """
    return session_runs.get("tiny")


@pytest.fixture(scope="session")
def own_classifier(notes_runs) -> Path:
    """A Longformer classifier of the notes' three services (tests/notes_corpus.py), fine-tuned and saved as a user
    would (:func:`helpers.build_classifier`); it never predicts oncology (class 1), the class of the default
    ``figures.topk_role`` (most_confident_1). Built with the notes runs, which analyse it."""
    return notes_runs["classifier"]


#: Builds :func:`own_classifier` in a process of its own (the background thread leaves torch's thread pool, and
#: its thread count, to the tests).
_BUILD_CLASSIFIER = (
    "import sys; from pathlib import Path; from helpers import build_classifier; from notes_corpus import SERVICES; "
    "build_classifier(Path(sys.argv[1]), labels=SERVICES, never=1)"
)


#: The notes run's shard counts: more shards than its three test notes, so most shards are empty.
NOTES_SHARDS = {"attention": {"n_shards": 4}, "attribution": {"n_shards": 4}, "topology": {"n_shards": 4}}


@pytest.fixture(scope="session")
def notes_runs(session_runs) -> dict[str, Path]:
    """Real-shaped data analysed with the user's own classifier (:func:`own_classifier`), two runs side by side on
    one core each (:func:`helpers.run_snakemakes_together`), once per session:

    * ``csv``: the discharge notes as a CSV (three classes, one never predicted, one named by hostile text; three
      test notes, all of one class, one of them hostile and showcased by `predict.extra_ids`), the classification
      and topology studies, more shards than test notes. test_real_data, test_existing_classifier and
      test_browser read it.
    * ``folders``: the same notes as one folder of ``.txt`` files per class (a seeded random split), up to the
      predictions, plus study 3's pair shards (:data:`notes_corpus.FOLDERS_TARGETS`). test_real_data reads it.
    """
    return session_runs.get("notes")


def _notes_runs(root: Path, folders: dict[str, Path]) -> dict[str, Path]:
    own_classifier = folders["my-classifier"] / "longformer-clf"
    built = subprocess.run([sys.executable, "-c", _BUILD_CLASSIFIER, str(own_classifier)], cwd=Path(__file__).parent,
                           capture_output=True, text=True, timeout=GUARD["stage"])  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    csv_work, folders_work = folders["notes-csv"], folders["notes-folders"]
    table, _ = write_notes(csv_work / "input")
    data = {"source": "file", "path": str(table), "id_column": "note_id", "classes": list(SERVICES), "seed": 7}
    model = {"source": "classifier", "name_or_path": str(own_classifier)}
    write_config(csv_work, tiny_config(root, data=data, model=model, studies=["classification", "topology"],
                                       predict={"extra_ids": [HOSTILE_NOTE]}, **NOTES_SHARDS))  # fmt: skip
    _, folders = write_notes(folders_work / "input")
    data = {"source": "folders", "path": str(folders), "classes": list(SERVICES), "seed": 7, "test_fraction": 0.25}
    cfg = tiny_config(root, data=data, model=model)
    cfg["pairs"]["attribution"]["n_shards"] = PAIR_SHARDS
    cfg["pairs"]["data"]["synthetic"]["n_pairs"] = 6
    cfg["pairs"]["exact"]["enabled"] = False
    write_config(folders_work, cfg)
    common = ["--cores", "1", "--show-failed-logs"]
    runs = {"csv": ["--directory", str(csv_work), *common],
            "folders": ["--directory", str(folders_work), *FOLDERS_TARGETS, *common]}  # fmt: skip
    for name, out in run_snakemakes_together(root, runs, timeout=GUARD["run"]).items():
        assert out.returncode == 0, f"notes {name} run:\n" + out.stdout[-6000:]
    return {"csv": csv_work, "folders": folders_work, "classifier": own_classifier}


@pytest.fixture(scope="session")
def notes_run(notes_runs) -> Path:
    """The CSV run of :func:`notes_runs`: real-shaped data analysed with the user's own classifier."""
    return notes_runs["csv"]


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
    model = tiny_longformer(vocab_size=tokenizer.vocab_size, hidden=16, heads=2, intermediate=32, max_positions=66,
                            window=16, pad_token_id=tokenizer.pad_token_id, num_labels=2, seed=0)  # fmt: skip
    return model, tokenizer


#: Each architecture run's sharded rules run one shard: sharding is the tiny and notes runs' to test.
ONE_SHARD = {section: {"n_shards": 1} for section in ("attention", "attribution", "explanations", "topology")}
#: The architecture grid's models: the packaged MiniLM converted to a BigBird (blocks of 8, one random block:
#: block-sparse above 56 tokens), and a ModernBERT of its sizes drawn at random and trained from scratch
#: (``model.source: from_config``, window 32, every third layer full).
ARCHITECTURES = {
    "bigbird": {
        "model": {"attention_window": None, "architecture": "bigbird", "block_size": 8, "num_random_blocks": 1}
    },
    "modernbert": {"model": {"source": "from_config", "architecture": "modernbert"}},
}
#: Its seeds: the first run of each model is built to the end, the second up to what rule findings reads.
ARCHITECTURE_SEEDS = (7, 8)


@pytest.fixture(scope="session")
def architecture_grid(session_runs) -> Path:
    """The `.test` configuration as a grid of the other architectures behind the seam × two fine-tuning seeds, with
    the classification and topology studies, once per session: the seed-7 runs to the end (test_bigbird and
    test_modernbert read them), the seed-8 runs as far as the findings need, and the findings across the four
    (test_grid reads them)."""
    return session_runs.get("architectures")


def _architecture_grid(root: Path, work: Path) -> Path:
    cfg = tiny_config(root, studies=["classification", "topology"], findings={"sanity_examples": 2}, **ONE_SHARD)
    cfg["grid"] = {"models": ARCHITECTURES, "seeds": list(ARCHITECTURE_SEEDS)}
    write_config(work, cfg)
    first = [f"results/runs/default__{m}__s{ARCHITECTURE_SEEDS[0]}/manifest.json" for m in ARCHITECTURES]
    # one thread a job, two jobs at a time: the runs' chains of short jobs overlap (as two one-core runs side by
    # side do, helpers.run_snakemakes_together) instead of one two-thread job at a time
    out = run_snakemake(root, "--directory", str(work), "--cores", "2", "--max-threads", "1", "--show-failed-logs",
                        *first, "results/findings/findings.csv", timeout=GUARD["run"])  # fmt: skip
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    return work


@pytest.fixture(scope="session")
def bigbird_run(architecture_grid) -> Path:
    """The results of the first BigBird run of :func:`architecture_grid` (the one-run layout of ``results/``)."""
    return architecture_grid / f"results/runs/default__bigbird__s{ARCHITECTURE_SEEDS[0]}"


@pytest.fixture(scope="session")
def modernbert_run(architecture_grid) -> Path:
    """The results of the first ModernBERT run of :func:`architecture_grid` (the one-run layout of ``results/``)."""
    return architecture_grid / f"results/runs/default__modernbert__s{ARCHITECTURE_SEEDS[0]}"
