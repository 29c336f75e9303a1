"""The session's end-to-end runs, scheduled on the machine's cores beside the tests.

Most of the suite's time is end-to-end runs: chains of short jobs, one thread each. One such run alone leaves a
core of two idle most of the time, and two runs, or a run and the unit tests, side by side on one core each
take little longer than one. So each run is registered once (:func:`session_run`, in the module that owns it)
and :class:`SessionRuns` runs them in background threads from the session's first test, one core each, the
longest chain of runs first, while the tests that need none of them run in the test process (conftest puts those first):

* The test process holds one core while it runs tests; its torch and BLAS compute on one thread (conftest), so
  nothing runs more threads than there are cores (oversubscribed thread pools spin: a try with two-thread jobs
  beside the unit tests cost CI 16 more CPU minutes).
* A test that needs a run not finished yet lends its core to the runs and waits; a run a test waits for goes
  first. A run that fails, fails every test that needs it, with its own message, as if the test had run it.
* A run may need another's result (``after=``); it starts when those have finished.

Every run's subprocesses are under a hang guard (``helpers.GUARD``) and are killed when the session ends
(:func:`helpers.kill_live`), so a wait here always ends.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path


@dataclass
class Run:
    """One registered run: ``launch(work, *results of after)`` returns what the tests read (a folder, a record)."""

    name: str
    launch: Callable[..., object]
    after: tuple[str, ...] = ()
    seconds: float = 0.0
    state: str = "pending"  # pending → running → done
    outcome: tuple[bool, object] = (False, None)
    work: Path | None = field(default=None, repr=False)
    began: float | None = None  # time.monotonic() at its start and end
    ended: float | None = None


#: Every run, by name (= the name of the session fixture through which tests need it: conftest starts the runs
#: whose fixture some collected test asks for, with the runs they come after).
REGISTRY: dict[str, Run] = {}


def session_run(
    name: str, *, seconds: float, after: tuple[str, ...] = ()
) -> Callable[[Callable[..., object]], Callable[..., object]]:
    """Register ``launch(work: Path, *results of after)`` as the session run ``name``; ``work`` is an empty folder
    of its own. ``seconds``: how long it took on one core (tests/README.md's table): the longest start first, so
    that no long run is left alone at the end."""

    def register(launch: Callable[..., object]) -> Callable[..., object]:
        REGISTRY[name] = Run(name, launch, tuple(after), seconds)
        return launch

    return register


def ranks(names: set[str], registry: dict[str, Run]) -> dict[str, float]:
    """Each run's seconds plus the longest chain of runs that come after it among ``names`` (list scheduling's
    bottom level): a short run that the notes runs need starts before a longer run that nothing waits for."""
    rank: dict[str, float] = {}

    def of(name: str) -> float:
        if name not in rank:
            later = [of(n) for n in names if name in registry[n].after]
            rank[name] = registry[name].seconds + max(later, default=0.0)
        return rank[name]

    return {name: of(name) for name in names}


def start_order(names: set[str], registry: dict[str, Run]) -> list[str]:
    """``names`` and the runs they come after, in the order :meth:`SessionRuns.start` starts them: the longest
    chain first (:func:`ranks`), ties by name."""
    rank = ranks(closure(names, registry), registry)
    return sorted(rank, key=lambda name: (-rank[name], name))


def module_order(
    needs: dict[str, set[str]], registry: dict[str, Run], first: tuple[str, ...] = (), last: tuple[str, ...] = ()
) -> list[str]:
    """The test modules in the order the test process runs them, given the session runs each needs (``needs``, by
    module name, in collection order): those that need none first, then the modules of ``first``, then the others
    by when the last run they need starts, and ``last`` at the end; ties keep the collection order. The runs start
    in :func:`start_order`, but for those a module of ``first`` waits for, which go first (:meth:`SessionRuns.get`):
    so the tests reading early runs run while later runs compute."""
    order = start_order(set().union(*needs.values()), registry) if needs else []
    pulled = [run for run in order if any(run in closure(needs[m], registry) for m in first if m in needs)]
    order = [*pulled, *(run for run in order if run not in pulled)]

    def place(module: str) -> tuple[int, int]:
        runs = closure(needs[module], registry)
        if not runs:
            return (0, 0)
        if module in first or module in last:
            return (1 if module in first else 3, 0)
        return (2, max(order.index(run) for run in runs))

    return sorted(needs, key=place)


def closure(names: set[str], registry: dict[str, Run]) -> set[str]:
    """``names`` and every run they come after."""
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in registry and name not in seen:
            seen.add(name)
            todo.extend(registry[name].after)
    return seen


class SessionRuns:
    """Runs the registered runs a session needs on ``cores`` cores, one of which the test process holds (see the
    module's docstring)."""

    def __init__(self, cores: int | None = None, registry: dict[str, Run] = REGISTRY):
        self.cores = max(1, cores or os.cpu_count() or 1)
        self.registry = registry
        self._cond = threading.Condition()
        self._free = self.cores - 1  # the test process holds one
        self._runs: dict[str, Run] = {}
        self._first: list[str] = []  # runs a waiting test needs go first
        self._test_waits_for_core = False
        self._awaited: str | None = None  # the run the test process waits for
        self._folder: Callable[[str], Path] = Path
        self._t0 = time.monotonic()
        self.waits: list[tuple[str, float, float]] = []  # (run, from, to): the test process waiting for a run

    def start(self, names: set[str], folder: Callable[[str], Path]) -> None:
        """Start the runs ``names`` and those they come after, the longest chain first (:func:`ranks`), each in an
        empty folder ``folder(name)``; one worker thread per core."""
        self._folder = folder
        for name in start_order(names, self.registry):
            self._runs[name] = replace(self.registry[name], work=folder(name))
        self._start_workers()

    def _start_workers(self) -> None:
        """One worker thread per core (the ones that have nothing left to start have ended)."""
        for k in range(self.cores):
            threading.Thread(target=self._work, name=f"session-runs-{k}", daemon=True).start()

    def _pending(self) -> list[Run]:
        order = [*self._first, *self._runs]
        return [self._runs[n] for n in dict.fromkeys(order) if self._runs[n].state == "pending"]

    def _next(self) -> Run | None:
        """The first pending run whose predecessors have finished; one whose predecessor failed fails with it."""
        for run in self._pending():
            before = [self._runs[n] for n in run.after]
            failed = [b for b in before if b.state == "done" and not b.outcome[0]]
            if failed:
                self._finish(run, failed[0].outcome)
                continue
            if all(b.state == "done" for b in before):
                return run
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._pending():
                        return
                    run = self._next() if self._free > 0 and not self._test_waits_for_core else None
                    if run is not None:
                        break
                    self._cond.wait()
                run.state, run.began = "running", time.monotonic()
                self._free -= 1
            try:
                outcome = (True, run.launch(run.work, *(self._runs[n].outcome[1] for n in run.after)))
            except BaseException as err:  # an assertion or pytest.fail too: raised again where the run is needed
                outcome = (False, err)
            with self._cond:
                self._free += 1
                self._finish(run, outcome)

    def _finish(self, run: Run, outcome: tuple[bool, object]) -> None:
        """``run`` done (under the lock); if the test process waits for it, the next free core is the test's."""
        run.state, run.outcome, run.ended = "done", outcome, time.monotonic()
        if run.name == self._awaited:
            self._test_waits_for_core = True
        self._cond.notify_all()

    def report(self) -> list[str]:
        """One line a run that ran: when it started and ended (seconds from the session's start) and its wall time,
        for tests/README.md's table (conftest prints it at the session's end)."""
        lines = []
        for run in sorted((r for r in self._runs.values() if r.began is not None), key=lambda r: r.began):
            began, ended = run.began - self._t0, (run.ended or run.began) - self._t0
            said = "" if run.outcome[0] else " (failed)"
            lines.append(f"{run.name}: from {began:.0f} s to {ended:.0f} s, {ended - began:.0f} s{said}")
        return lines

    def since_start(self, moment: float) -> float:
        """``moment`` (``time.monotonic()``) in seconds from the session's start, as :meth:`report` gives them."""
        return moment - self._t0

    def _lend(self) -> None:
        """The test process's core to the runs (under the lock)."""
        self._free += 1
        self._cond.notify_all()

    def _take_back(self) -> None:
        """A core back for the test process (under the lock, with ``_test_waits_for_core`` set: no worker starts a
        run meanwhile)."""
        while self._free < 1:
            self._cond.wait()
        self._free -= 1
        self._test_waits_for_core, self._awaited = False, None
        self._cond.notify_all()

    def get(self, name: str):
        """What run ``name`` gave, once it has finished (the test process lends its core meanwhile); its error, if
        it failed."""
        with self._cond:
            if name not in self._runs:  # asked for by no collected test's fixtures (request.getfixturevalue)
                for new in start_order({name}, self.registry):
                    if new not in self._runs:
                        self._runs[new] = replace(self.registry[new], work=self._folder(new))
                self._start_workers()
            run = self._runs[name]
            if run.state != "done":
                began = time.monotonic()
                self._first[:0] = [n for n in self._runs if n in closure({name}, self.registry)]
                self._awaited = name
                self._lend()
                while run.state != "done":
                    self._cond.wait()
                self._take_back()  # _finish has set _test_waits_for_core
                self.waits.append((name, began - self._t0, time.monotonic() - self._t0))
        ok, value = run.outcome
        if not ok:
            raise value
        return value
