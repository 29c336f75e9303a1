"""The scheduler of the session's end-to-end runs (tests/support/session_runs.py), on runs that only record when
they ran: never more work at once than cores (the test process's included), predecessors first, a waited-for run first,
a failure raised where the run is needed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.support.session_runs import Run, SessionRuns, module_order, ranks


class Recorder:
    """Launches that record their start, and how many ran at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.busy = 0
        self.most = 0
        self.started: list[str] = []

    def launch(self, name: str, seconds: float = 0.05, fail: bool = False):
        def run(work: Path, *before):
            with self.lock:
                self.busy += 1
                self.most = max(self.most, self.busy)
                self.started.append(name)
            time.sleep(seconds)
            with self.lock:
                self.busy -= 1
            if fail:
                raise AssertionError(f"{name} failed")
            return (name, work.name, before)

        return run


def _registry(rec: Recorder, **specs) -> dict[str, Run]:
    return {
        name: Run(name, rec.launch(name, *spec.get("args", ())), tuple(spec.get("after", ())), spec.get("seconds", 1.0))
        for name, spec in specs.items()
    }


def test_runs_fill_the_cores_the_test_process_leaves_and_no_more(tmp_path):
    rec = Recorder()
    registry = _registry(rec, **{name: {"args": (0.2,)} for name in "abcd"})
    runs = SessionRuns(cores=2, registry=registry)
    runs.start({"a", "b", "c", "d"}, lambda name: tmp_path / name)
    time.sleep(0.3)  # the test process holds its core: one run at a time
    assert rec.most == 1 and 1 <= len(rec.started) <= 2
    for name in "abcd":  # waiting, the test process lends its core: two at a time
        assert runs.get(name) == (name, name, ())
    assert rec.most == 2 and sorted(rec.started) == ["a", "b", "c", "d"]
    assert [line.split(":")[0] for line in runs.report()] == rec.started  # when each ran, for the table


def test_the_longest_start_first_and_a_waited_for_run_before_them(tmp_path):
    rec = Recorder()
    registry = _registry(rec, short={"seconds": 1}, long={"seconds": 9, "args": (0.5,)}, mid={"seconds": 5})
    runs = SessionRuns(cores=2, registry=registry)
    runs.start(set(registry), lambda name: tmp_path / name)
    time.sleep(0.2)  # the long one under way on the core the test process leaves
    runs.get("short")  # its core lent: the run it waits for starts before the mid one
    runs.get("mid")
    assert rec.started == ["long", "short", "mid"]


def test_a_short_run_that_a_long_one_needs_starts_before_a_middling_one(tmp_path):
    """The notes runs' case: the classifier (10 s) that two runs need (150 s, 80 s) goes before a 90 s run that
    nothing needs, or the notes runs would end last (:func:`session_runs.ranks`)."""
    rec = Recorder()
    registry = _registry(
        rec,
        classifier={"seconds": 10},
        notes={"seconds": 150, "after": ("classifier",)},
        folders={"seconds": 80, "after": ("classifier",)},
        kernels={"seconds": 90},
    )
    assert ranks(set(registry), registry) == {"classifier": 160, "notes": 150, "folders": 80, "kernels": 90}
    runs = SessionRuns(cores=2, registry=registry)
    runs.start(set(registry), lambda name: tmp_path / name)
    time.sleep(0.4)  # one run at a time on the core the test process leaves, 0.05 s each
    assert rec.started == ["classifier", "notes", "kernels", "folders"]


def test_no_core_to_spare_runs_nothing_until_the_test_waits(tmp_path):
    rec = Recorder()
    runs = SessionRuns(cores=1, registry=_registry(rec, a={}, b={}))
    runs.start({"a", "b"}, lambda name: tmp_path / name)
    time.sleep(0.2)
    assert rec.started == []
    runs.get("b")
    assert rec.started == ["b"]


def test_a_run_starts_after_its_predecessors_and_receives_their_results(tmp_path):
    rec = Recorder()
    registry = _registry(rec, model={"seconds": 0}, study={"after": ("model",), "seconds": 9})
    runs = SessionRuns(cores=3, registry=registry)
    runs.start({"study"}, lambda name: tmp_path / name)  # its predecessor is started with it
    assert runs.get("study") == ("study", "study", (("model", "model", ()),))
    assert rec.started == ["model", "study"]


def test_a_failed_run_fails_every_test_that_needs_it_and_those_after_it(tmp_path):
    rec = Recorder()
    registry = _registry(rec, model={"args": (0.01, True)}, study={"after": ("model",)}, other={})
    runs = SessionRuns(cores=2, registry=registry)
    runs.start(set(registry), lambda name: tmp_path / name)
    for name in ("model", "study", "model"):
        with pytest.raises(AssertionError, match="model failed"):
            runs.get(name)
    assert runs.get("other")[0] == "other"
    assert "study" not in rec.started


def test_a_run_no_collected_test_named_runs_when_asked_for(tmp_path):
    rec = Recorder()
    registry = _registry(rec, model={}, study={"after": ("model",)})
    runs = SessionRuns(cores=2, registry=registry)
    runs.start(set(), lambda name: tmp_path / name)
    assert runs.get("study")[2][0][0] == "model"


def test_modules_run_in_the_order_their_runs_start_the_waiting_first_and_the_last_last():
    rec = Recorder()
    registry = _registry(
        rec,
        grid={"seconds": 9},
        rerun={"seconds": 8},
        tiny={"seconds": 5},
        own={"seconds": 1},
        notes={"seconds": 3, "after": ("own",)},
        late={"seconds": 2},
    )
    needs = {
        "test_units": set(),
        "test_module": {"late"},
        "test_params": {"tiny"},
        "test_notes": {"notes"},
        "test_rerun": {"rerun", "tiny"},
        "test_slurm": {"grid", "tiny"},
        "test_api": {"tiny", "grid"},
        "test_more_units": set(),
    }
    # started by rank: grid (9), rerun (8), tiny (5), own (1 + 3 after it), notes, late; but test_slurm waits
    # for tiny, which then goes first: grid, tiny, rerun, own, notes, late
    order = module_order(needs, registry, first=("test_slurm",), last=("test_params",))
    assert order == [
        "test_units",
        "test_more_units",
        "test_slurm",
        "test_api",
        "test_rerun",
        "test_notes",
        "test_module",
        "test_params",
    ]
