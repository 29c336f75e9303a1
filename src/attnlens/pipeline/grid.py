"""A grid of runs: one config, one run per (dataset, model, seed), and the jobs the runs share.

A config with a ``grid:`` section (its ``datasets``, ``models`` and ``seeds`` axes; an axis left out is the one
section above it) is expanded by :func:`expand_grid` into :class:`Run` s. Each run's config is the config's
sections with the run's dataset entry merged over ``data``, its model entry over ``model`` and ``train``, and
its seed as the seed of what it trains (its task's :attr:`~attnlens.tasks.task.Task.seed_key`: ``train.seed``, a
generation run's ``generation.train.seed``; and ``data.seed`` with ``grid.split_follows_seed``); it is validated like
any config.

A run is named ``<dataset>__<model>__s<seed>`` (``<dataset>__<model>`` for a model that is not trained — a classifier
of the user's own, a pretrained generator — which runs once per dataset) and is a Snakemake wildcard: its files are
the one-run layout under ``results/runs/<run>/`` (:func:`grid_path`). Two jobs are shared by the runs that give
them the same keys: the prepared dataset (rule ``prepare_dataset``, under ``results/datasets/<group>/``) and the
base model (rule ``build_base_model``, under ``results/base_models/<group>/``). The keys are those the rule is given
(its ``keys(...)`` in the workflow), so runs share a job exactly when the job could not tell them apart. The pair
study reads none of the grid's axes and runs once, at its one-run paths.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from attnlens.errors import InputError
from attnlens.pipeline.config import validate_config
from attnlens.pipeline.config.shared_keys import BUILD_BASE_MODEL_KEYS, PREPARE_DATASET_KEYS
from attnlens.tasks import get_task

#: Between the parts of a run's name (a dataset or model name may not hold it).
SEP = "__"
#: The name of the one entry of an axis the grid leaves out.
DEFAULT_NAME = "default"
#: The axes of a grid, as ``grid:`` names them.
AXES = ("datasets", "models", "seeds")

#: Rules whose jobs are shared across runs, and the scope of their files.
RULE_SCOPES = {
    "prepare_dataset": "data",
    "build_base_model": "base",
    **dict.fromkeys(
        (
            "prepare_pairs",
            "train_pair_encoder",
            "attribute_pairs",
            "pair_convergence",
            "pair_topology",
            "pair_tables",
            "plot_pairs",
            "findings",
        ),
        "global",
    ),
}
#: The files of the prepared dataset (rule prepare_dataset).
DATA_FILES = ("data/train.parquet", "data/test.parquet", "data/rationales.parquet", "data/split_manifest.json")
#: Where each scope's files go in a grid ({wildcard} patterns); the global scope keeps the one-run paths.
SCOPE_PREFIX = {
    "data": "results/datasets/{dataset_group}/",
    "base": "results/base_models/{base_group}/",
    "run": "results/runs/{run}/",
    "global": "results/",
}
#: The wildcard that names a scope's group.
SCOPE_WILDCARD = {"data": "dataset_group", "base": "base_group", "run": "run"}


def trains_classifier(model: Mapping[str, Any]) -> bool:
    """Whether a run fine-tunes its classifier (every ``model.source`` but an existing classifier)."""
    return model["source"] != "classifier"


@dataclass(frozen=True)
class Run:
    """One run of a grid: its name, its place on each axis and the shared jobs it reads."""

    name: str
    dataset: str
    model: str
    seed: int | None  # None: a classifier of the user's own, not fine-tuned
    dataset_group: str
    base_group: str | None  # None: no base model (an imported classifier)
    config: dict[str, Any] = field(compare=False, repr=False)

    @property
    def trains_classifier(self) -> bool:
        """Whether the run fine-tunes a classifier of its own (what ``train_classifier`` runs for; a generation
        run's generator is trained, or not, by its own rules: ``Task.trains``)."""
        return trains_classifier(self.config["model"])


@dataclass(frozen=True)
class Grid:
    """The runs of a grid, in axis order (datasets, then models, then seeds)."""

    runs: tuple[Run, ...]
    split_follows_seed: bool

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.runs]

    def run(self, name: str) -> Run:
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(f"no run {name!r} in the grid (runs: {self.names})")

    def groups(self, scope: str) -> dict[str, Run]:
        """Each group of ``scope`` (``data``, ``base`` or ``run``) with the first run that reads it."""
        return self._groups[scope]

    @functools.cached_property
    def _groups(self) -> dict[str, dict[str, Run]]:
        """:meth:`groups` of every scope, built once (every job's input and params functions ask)."""
        out: dict[str, dict[str, Run]] = {"data": {}, "base": {}, "run": {}}
        for r in self.runs:
            for scope, name in (("data", r.dataset_group), ("base", r.base_group), ("run", r.name)):
                if name is not None:
                    out[scope].setdefault(name, r)
        return out

    def representative(self, wildcards: Mapping[str, str]) -> Run:
        """The run a job's wildcards stand for (the first run of its group)."""
        for scope in ("run", "base", "data"):
            name = wildcards.get(SCOPE_WILDCARD[scope])
            if name is not None:
                return self.groups(scope)[name]
        raise KeyError(f"no grid wildcard among {sorted(wildcards)}")


def has_grid(config: Mapping[str, Any]) -> bool:
    """Whether ``config`` (validated) sweeps a grid: a ``grid:`` with at least one axis."""
    grid = config.get("grid") or {}
    return any(grid.get(axis) is not None for axis in AXES)


def _merge(base: Any, override: Any) -> Any:
    """``override`` over ``base``: mappings key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merge(base.get(key), value)
        return out
    return copy.deepcopy(override)


def _check_axes(grid: Mapping[str, Any], where: str) -> None:
    if not any(grid.get(axis) is not None for axis in AXES):
        given = sorted(k for k, v in grid.items() if v not in (None, False, []))
        raise InputError(
            where, "grid", f"expected at least one of the axes {list(AXES)}, got only {given or 'defaults'}"
        )
    seeds = grid.get("seeds") or []
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise InputError(
            where, "grid.seeds", f"expected different seeds (two runs would share a name), got {twice[0]} twice"
        )
    for axis in ("datasets", "models"):
        names = list(grid.get(axis) or {})
        folded = [n.lower() for n in names]
        clash = [n for n, f in zip(names, folded, strict=True) if folded.count(f) > 1]
        if clash:
            raise InputError(
                where,
                f"grid.{axis}",
                f"expected names that differ in more than case (runs would share a folder on a case-insensitive "
                f"file system), got {clash}",
            )


def _check_overrides(grid: Mapping[str, Any], where: str) -> None:
    """A key both an axis and an entry set is ambiguous: which one a run would take is not said."""
    if grid.get("seeds") is not None:
        for name, entry in (grid.get("models") or {}).items():
            if "seed" in (entry or {}).get("train", {}):
                raise InputError(
                    where,
                    f"grid.models.{name}.train.seed",
                    "expected no train.seed in a model of a grid with seeds (grid.seeds sets each run's train.seed)",
                )
    if grid.get("split_follows_seed"):
        for name, entry in (grid.get("datasets") or {}).items():
            if "seed" in (entry or {}):
                raise InputError(
                    where,
                    f"grid.datasets.{name}.seed",
                    "expected no data.seed in a dataset of a grid with split_follows_seed (the run's seed sets it)",
                )


def _at_path(config: dict[str, Any], parts: Sequence[str]) -> dict[str, Any]:
    """The nested section of ``config`` that ``parts`` name."""
    for part in parts:
        config = config[part]
    return config


def _own_seed(config: dict[str, Any], task) -> int:
    """The seed a run of ``task`` trains with when the grid has no seed axis (the value at its ``seed_key``)."""
    *section, leaf = task.seed_key.split(".")
    return _at_path(config, section)[leaf]


def _excluded(exclude: Sequence[Mapping[str, Any]], dataset: str, model: str, seed: int | None) -> bool:
    here = {"dataset": dataset, "model": model, "seed": seed}
    return any(all(here[k] == v for k, v in rule.items()) for rule in exclude)


def _check_exclude(grid: Mapping[str, Any], datasets: list[str], models: list[str], seeds: list[int | None]) -> None:
    known = {"dataset": datasets, "model": models, "seed": [s for s in seeds if s is not None]}
    for i, rule in enumerate(grid.get("exclude", [])):
        for key, value in rule.items():
            if value not in known[key]:
                raise InputError(
                    "config",
                    f"grid.exclude[{i}].{key}",
                    f"expected one of the grid's {key}s {known[key]}, got {value!r}",
                )


def _grouped(runs: list[dict[str, Any]], key_of, levels) -> list[str]:
    """A group name per run: runs share a group exactly when they share a key; the group is named by the first
    naming level under which different keys get different names (the name its first run has at that level)."""
    keys = [key_of(r) for r in runs]
    for level in levels:
        named: dict[str, str] = {}
        for r, k in zip(runs, keys, strict=True):
            named.setdefault(k, level(r))
        if len(set(named.values())) == len(named):
            return [named[k] for k in keys]
    raise AssertionError("the last naming level must tell every key apart")


def _name(*parts: Any) -> str:
    """A group's name from its parts (a seed as ``s<seed>``; a missing seed left out)."""
    return SEP.join(p if isinstance(p, str) else f"s{p}" for p in parts if p is not None)


def _section_key(config: Mapping[str, Any], keys: Mapping[str, Sequence[str]]) -> str:
    """The values of the dotted ``keys`` of each section, as one comparable string."""
    picked = {}
    for section, names in keys.items():
        for name in names:
            value: Any = config[section]
            for part in name.split("."):
                value = value[part]
            picked[f"{section}.{name}"] = value
    return json.dumps(picked, sort_keys=True, default=str)


def expand_grid(
    config: Mapping[str, Any],
    dataset_keys: Mapping[str, Sequence[str]] = PREPARE_DATASET_KEYS,
    base_keys: Mapping[str, Sequence[str]] = BUILD_BASE_MODEL_KEYS,
    where: str = "config",
) -> Grid:
    """The runs of ``config``'s grid (``config`` validated, defaults filled).

    Args:
        dataset_keys: the keys rule ``prepare_dataset`` reads, by section; runs that give it the same values share
            one prepared dataset.
        base_keys: the keys rule ``build_base_model`` reads, by section; runs of one dataset that give it the same
            values share one base model (it reads the dataset's classes, the same in every split of it).

    Raises:
        InputError: an empty or missing axis, two runs that would share a name, an ``exclude`` naming what the grid
            does not have, a key both an axis and an entry set, no run left, or a run whose config is invalid
            (named by its run).
    """
    grid = config["grid"]
    _check_axes(grid, where)
    _check_overrides(grid, where)
    base = {k: copy.deepcopy(v) for k, v in config.items() if k != "grid"}
    datasets = dict(grid.get("datasets") or {DEFAULT_NAME: {}})
    models = dict(grid.get("models") or {DEFAULT_NAME: {}})
    given: list[int | None] = list(grid.get("seeds") or [])
    tasks = {d: get_task(_merge(base["data"], entry or {}).get("task")) for d, entry in datasets.items()}
    own = {_own_seed(base, task) for task in tasks.values()}  # no seed axis: each run's own seed
    try:
        _check_exclude(grid, list(datasets), list(models), given or sorted(own))
    except InputError as err:
        raise InputError(where, err.field, err.expected) from None
    made = []
    for d, d_entry in datasets.items():
        data, task = _merge(base["data"], d_entry or {}), tasks[d]
        *section, leaf = task.seed_key.split(".")
        seeds = given or [_own_seed(base, task)]
        for m, m_entry in models.items():
            m_entry = m_entry or {}
            model = _merge(base["model"], m_entry.get("model", {}))
            # a model that trains nothing runs once per dataset, unless the seed draws the dataset itself
            for seed in seeds if task.trains(model) or grid.get("split_follows_seed") else [None]:
                if _excluded(grid.get("exclude", []), d, m, seed):
                    continue
                cfg = copy.deepcopy(base)
                cfg["data"] = copy.deepcopy(data)
                cfg["model"] = model
                cfg["train"] = _merge(base["train"], m_entry.get("train", {}))
                if seed is not None:
                    _at_path(cfg, section)[leaf] = seed
                    if grid.get("split_follows_seed"):
                        cfg["data"]["seed"] = seed
                name = SEP.join([d, m] + ([] if seed is None else [f"s{seed}"]))
                cfg.pop("grid", None)
                try:
                    validate_config(cfg, where=f"{where} (grid run {name})")
                except InputError as err:
                    raise InputError(f"{where} (grid run {name})", err.field, err.expected) from None
                made.append({"name": name, "dataset": d, "model": m, "seed": seed, "config": cfg})
    if not made:
        raise InputError(where, "grid.exclude", "expected at least one run left, every combination is excluded")
    dataset_groups = _grouped(
        made,
        lambda r: _section_key(r["config"], dataset_keys),
        [
            lambda r: _name(r["dataset"]),
            lambda r: _name(r["dataset"], r["seed"]),
            lambda r: _name(r["dataset"], r["model"]),
            lambda r: r["name"],
        ],
    )
    for r, group in zip(made, dataset_groups, strict=True):
        r["dataset_group"] = group
    trained = [r for r in made if r["config"]["model"]["source"] != "classifier"]
    base_groups = dict(
        zip(
            [r["name"] for r in trained],
            _grouped(
                trained,
                lambda r: r["dataset"] + "|" + _section_key(r["config"], base_keys),
                [lambda r: _name(r["model"]), lambda r: _name(r["model"], r["dataset"]), lambda r: r["name"]],
            ),
            strict=True,
        )
    )
    runs = tuple(Run(base_group=base_groups.get(r["name"]), **r) for r in made)
    return Grid(runs=runs, split_follows_seed=bool(grid.get("split_follows_seed")))


def scope_of(path: str) -> str:
    """Which scope a one-run path (``results/…``) belongs to in a grid: ``data``, ``base``, ``run`` or ``global``."""
    rest = path.removeprefix("results/")
    parts = rest.split("/")
    if parts[0] in ("logs", "benchmarks") and len(parts) > 1:
        return RULE_SCOPES.get(parts[1], "run")
    if rest in DATA_FILES:
        return "data"
    if rest == "models/base" or rest.startswith("models/base/"):
        return "base"
    if rest.startswith(("pairs/", "data/pairs_", "models/pair_encoder_exact", "findings/")):
        return "global"
    return "run"


def grid_path(path: str) -> str:
    """A one-run path (``results/…``) as a grid lays it out: a pattern with its scope's wildcard."""
    return SCOPE_PREFIX[scope_of(path)] + path.removeprefix("results/")


def resolve_path(path: str, run: Run) -> str:
    """A one-run path as the file ``run`` reads in a grid (its scope's wildcard filled for that run)."""
    out = grid_path(path)
    for wildcard, value in (("run", run.name), ("dataset_group", run.dataset_group), ("base_group", run.base_group)):
        if value is not None:
            out = out.replace("{" + wildcard + "}", value)
    return out


def job_config(config: Mapping[str, Any], wildcards: Mapping[str, str]) -> Mapping[str, Any]:
    """The config a job runs under: its run's, when ``config`` sweeps a grid and the job's wildcards name a run or
    a group of the runs' shared jobs (its first run's); ``config`` itself otherwise."""
    if not has_grid(config) or not any(w in wildcards for w in SCOPE_WILDCARD.values()):
        return config
    return expand_grid(config).representative(wildcards).config
