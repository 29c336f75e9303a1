"""The one entry of every rule's job: rule ``X`` runs ``attnlens.stages.<module>.run_X``, its arguments bound by name.

Every rule's script is ``workflow/scripts/stage.py`` (its rule kind in ``workflow/rules/kinds.smk`` says so), which
calls :func:`call_stage` with Snakemake's ``snakemake`` object. What a stage function is given:

- its config sections, positionally, in the order its :func:`stage` decorator names them (each the rule's
  ``keys(...)`` of that section as its dataclass, :func:`~attnlens.pipeline.config.rule_section`; a dotted name reaches
  into a nested section: ``@stage("report.explorer")``);
- every other parameter by its name: the rule's output, input or params entry of that name (a rule names its files
  as its function names its parameters; one name means one thing in a rule), ``shard`` (the wildcard, as an int),
  ``run_config`` (the whole config of the job's run), or one of the :data:`SHARED_KEYS` that stages of other
  sections read (``device`` is ``model.device``); a parameter ending in ``_stem`` is given the stem that a table's or
  figure's files share (``report_table``/``report_figure`` in the workflow), one ending in ``_dir`` given several
  files the folder they are in;
- an input that is absent or empty leaves its parameter at its default, and where the function takes ``**inputs``,
  the inputs no parameter names go there.

The module of rule ``X`` is found by reading the stage modules' source for ``def run_X(`` (:func:`stage_module`),
without importing any: a light job (a table, a figure) imports its own module only, and never torch
(``tests/project/test_startup.py``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from attnlens.io import Job, set_job
from attnlens.pipeline.config import rule_section
from attnlens.pipeline.grid import job_config
from attnlens.pipeline.runtime import rule_job, use_threads

#: The package whose modules hold the rules' functions.
STAGES = "attnlens.stages"

#: Keys of one section that stages of others read, given to a parameter of their name: ``section.key``.
SHARED_KEYS = {"device": "model.device", "target": "attribution.target", "bins": "attention.bins", "dpi": "figures.dpi"}


def stage(*sections: str) -> Callable[[Callable], Callable]:
    """Mark a rule's function and name the config sections it takes first, in order (see the module's docstring)."""

    def mark(fn: Callable) -> Callable:
        fn.sections = sections
        return fn

    return mark


def stage_module(rule: str) -> str:
    """The module of :data:`STAGES` that defines ``run_<rule>`` (its source read, not imported)."""
    defines = re.compile(rf"^def run_{re.escape(rule)}\(", re.M)
    for folder in importlib.util.find_spec(STAGES).submodule_search_locations:  # imports attnlens, not the stages
        for path in sorted(Path(folder).rglob("*.py")):
            if defines.search(path.read_text(encoding="utf-8")):
                parts = path.relative_to(folder).with_suffix("").parts
                return ".".join((STAGES, *(parts[:-1] if parts[-1] == "__init__" else parts)))
    raise LookupError(f"rule {rule}: no function run_{rule} in {STAGES} (rule X runs {STAGES}.<module>.run_X)")


def stage_function(rule: str) -> Callable:
    """Rule ``rule``'s function, ``run_<rule>``, its module imported."""
    return getattr(importlib.import_module(stage_module(rule)), f"run_{rule}")


def _value(name: str, value: Any) -> Any:
    if name.endswith("_stem"):
        first = value if isinstance(value, str) else value[0]
        return Path(first).with_suffix("")
    if name.endswith("_dir") and not isinstance(value, str):
        return Path(value[0]).parent
    return value


def _section(cfg: dict, dotted: str) -> Any:
    section, *nested = dotted.split(".")
    value = rule_section(cfg, section)
    for part in nested:
        value = getattr(value, part)
    return value


def arguments(fn: Callable, smk: Any) -> tuple[list, dict]:
    """The positional and keyword arguments ``fn`` is called with for the job ``smk`` (the module's docstring)."""
    cfg = smk.params.get("cfg") or {}
    positional = [_section(cfg, name) for name in getattr(fn, "sections", ())]
    named: dict[str, Any] = {}
    files = {**dict(smk.params.items()), **dict(smk.input.items()), **dict(smk.output.items())}
    files.pop("cfg", None)
    special = {
        "shard": lambda: int(smk.wildcards.shard),
        "run_config": lambda: job_config(smk.config, dict(smk.wildcards.items())),
        **{name: (lambda dotted=dotted: _section(cfg, dotted)) for name, dotted in SHARED_KEYS.items()},
    }
    parameters = inspect.signature(fn).parameters
    for name, parameter in list(parameters.items())[len(positional) :]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if name in files:
            value = files.pop(name)
            if isinstance(value, str) or len(value):  # an empty input list: the parameter's default
                named[name] = _value(name, value)
        elif name in special:
            named[name] = special[name]()
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        named.update((name, value) for name, value in dict(smk.input.items()).items() if name in files)
    return positional, named


def call_stage(smk: Any) -> None:
    """Run the job ``smk`` (Snakemake's ``snakemake`` object): its rule's function, in :func:`rule_job`."""
    fn = stage_function(smk.rule)
    with rule_job(smk):
        if "torch" in sys.modules:  # a model's job (its stage imported torch): the threads Snakemake granted it
            use_threads(smk.threads)
        positional, named = arguments(fn, smk)
        fn(*positional, **named)


class _Named(dict):
    """A job's named entries read back from its record, as a rule's function is given them (Snakemake's ``input``,
    ``output``, ``params`` and ``wildcards`` by name)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def rerun_job(record: str | Path, workdir: str | Path, out_root: str | Path, config: dict | None = None) -> Callable:
    """Call a finished job's function again, in this process, from its record (``results/logs/…/*.job.json``): its
    inputs read in ``workdir`` (where the run ran, the call's working folder), its outputs written under ``out_root``
    instead (the same paths below it), its config keys the ones it was given. ``config``: the run's whole config, for
    the one rule that reads it (``manifest``). Returns the function; a step through a debugger, or a changed stage
    tried on a run's files."""
    job = json.loads(Path(record).read_text(encoding="utf-8"))
    fn = stage_function(job["rule"])

    def rebase(root: Path, value: Any) -> Any:
        return [str(root / v) for v in value] if isinstance(value, list) else str(root / value)

    given = job["given"]
    smk = SimpleNamespace(
        rule=job["rule"],
        params=_Named(given["params"]),
        input=_Named(given["input"]),  # as the job read them: relative to the run's folder, which the call runs in
        output=_Named({k: rebase(Path(out_root).resolve(), v) for k, v in given["output"].items()}),
        wildcards=_Named(job["wildcards"]),
        config=config or {},
    )
    for paths in smk.output.values():
        for path in [paths] if isinstance(paths, str) else paths:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    positional, named = arguments(fn, smk)
    section = smk.params.get("cfg") if isinstance(smk.params.get("cfg"), dict) else {}
    set_job(Job(job["rule"], section, job["seed"], job["run_config_sha256"]))  # its files' provenance, as the job's
    try:
        with contextlib.chdir(workdir):
            fn(*positional, **named)
    finally:
        set_job(None)
    return fn
