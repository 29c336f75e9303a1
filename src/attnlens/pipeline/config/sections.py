"""The schema and the sections: the schema loaded with the registries' lists filled in, and one frozen dataclass
per section generated from it (only the class names are written in Python); a rule reads its own keys only.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import typing
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

import yaml

from attnlens.attribution.methods import schema_lists
from attnlens.data.corpus.questions import STRUCTURES
from attnlens.data.layouts import DEFAULT as DEFAULT_LAYOUT
from attnlens.data.layouts import layout_names
from attnlens.errors import InputError
from attnlens.tasks import DEFAULT as DEFAULT_TASK
from attnlens.tasks import task_names
from attnlens.tasks.contexts import REMOVALS, SPLITTERS

#: The schema, shipped inside the package (a link to ``workflow/schemas/config.schema.yaml`` in a checkout; a copy
#: in an installed package), so the section classes exist wherever attnlens is installed.
SCHEMA_PATH = Path(__file__).parent.with_name("config.schema.yaml")


#: Dotted config keys (``attribution.n_steps``) this process was given, and those it read, through
#: :meth:`_Section.from_dict` sections. A rule's job record lists both (``results/logs/…/*.job.json``).
KEYS_GIVEN: set[str] = set()
KEYS_READ: set[str] = set()


class ConfigKeyNotGiven(AttributeError):
    """A rule read a config key its ``params`` do not pass (add it to the rule's ``keys(...)``)."""


class _Section:
    """A frozen dataclass of one config section; nested sections are fields of section type.

    Built by :meth:`from_dict` with ``strict=True`` (what rule scripts do, through :func:`rule_section`)
    from the keys a rule was given, it knows which keys those were: reading any other key raises
    :class:`ConfigKeyNotGiven` instead of silently using the default, and every read is recorded in
    :data:`KEYS_READ`. Otherwise (``AttributionConfig(n_steps=8)``, ``from_dict`` of a partial dict in a
    test) missing keys take their defaults.
    """

    @classmethod
    def from_dict(cls, values: dict[str, Any], path: str | None = None, strict: bool = False):
        path = path or _SECTION_NAMES.get(cls, cls.__name__)
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name not in values:
                continue
            value = values[f.name]
            hint = hints[f.name]
            if isinstance(hint, type) and issubclass(hint, _Section) and isinstance(value, dict):
                value = hint.from_dict(value, f"{path}.{f.name}", strict)
            else:
                if strict:
                    KEYS_GIVEN.add(f"{path}.{f.name}")
                if isinstance(value, list):
                    value = tuple(value)
            kwargs[f.name] = value
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        if unknown:
            raise InputError("config", f"{cls.__name__}", f"unexpected keys {sorted(unknown)}")
        section = cls(**kwargs)
        if strict:
            object.__setattr__(section, "_given", frozenset(kwargs))
            object.__setattr__(section, "_path", path)
        return section

    def __getattribute__(self, name: str):
        if name.startswith("_") or name not in _field_names(type(self)):
            return object.__getattribute__(self, name)
        given = object.__getattribute__(self, "__dict__").get("_given")
        if given is None:
            return object.__getattribute__(self, name)
        key = f"{object.__getattribute__(self, '_path')}.{name}"
        if name not in given:
            raise ConfigKeyNotGiven(f"config key {key} was not passed to this rule: add it to the rule's keys(...)")
        value = object.__getattribute__(self, name)
        if not isinstance(value, _Section):
            KEYS_READ.add(key)
        return value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"

    def to_dict(self) -> dict[str, Any]:
        """The section's values (only the given ones when built by :meth:`from_dict`), nested as dicts."""
        given = object.__getattribute__(self, "__dict__").get("_given")
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if given is not None and f.name not in given:
                continue
            value = object.__getattribute__(self, f.name)
            out[f.name] = value.to_dict() if isinstance(value, _Section) else value
        return out


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


# --- the sections: dataclasses generated from the schema, the one declaration of every key ------------


def load_schema(path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    """The schema, with the keys marked ``x-registry`` given their enum and default from the registry they name
    (:func:`attnlens.attribution.methods.schema_lists`: the explanation methods and the rankings; ``tasks``: the
    registered
    :mod:`attnlens.tasks`; ``layouts``: the registered :mod:`attnlens.data.layouts`)."""
    with open(path, encoding="utf-8") as fh:
        schema = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    registries = {
        "tasks": (task_names(), DEFAULT_TASK),
        "layouts": (layout_names(), DEFAULT_LAYOUT),
        "splitters": (list(SPLITTERS), "sentence"),
        "removals": (list(REMOVALS), "delete"),
        "structures": (list(STRUCTURES), []),
    }
    _fill_registries(schema, {**schema_lists(), **registries})
    return schema


def _fill_registries(schema: dict[str, Any], lists: dict[str, tuple[list[str], list[str] | str]]) -> None:
    """A list marked ``x-registry`` gets the registry's names as its items' enum (and the registry's default where
    the schema declares none: a list that may be null keeps its null); a string, as its enum."""
    for prop in schema.get("properties", {}).values():
        name = prop.get("x-registry")
        if name is not None:
            if name not in lists:
                raise KeyError(f"config schema: x-registry {name!r} is not one of {sorted(lists)}")
            enum, default = lists[name]
            types = prop.get("type")
            if types == "array" or (isinstance(types, list) and "array" in types):
                prop["items"] = {**prop.get("items", {}), "enum": list(enum)}
                prop.setdefault("default", list(default))
            elif isinstance(types, list) and "null" in types:  # a name or null: null stays allowed, and its default
                prop["enum"] = [*enum, None]
                prop.setdefault("default", default)
            else:
                prop["enum"], prop["default"] = list(enum), default
        _fill_registries(prop, lists)


#: The Python name of every section, by its dotted path in the schema (the schema declares the keys, their
#: types, ranges, defaults and meanings; only the class names are given here).
SECTION_CLASSES = {
    "data": "DataConfig",
    "data.hub": "HubConfig",
    "data.synthetic": "SyntheticConfig",
    "model": "ModelConfig",
    "train": "TrainConfig",
    "predict": "PredictConfig",
    "importance": "ImportanceConfig",
    "attention": "AttentionConfig",
    "attribution": "AttributionConfig",
    "explanations": "ExplanationsConfig",
    "faithfulness": "FaithfulnessConfig",
    "similarity": "SimilarityConfig",
    "topology": "TopologyConfig",
    "pairs": "PairsConfig",
    "pairs.data": "PairDataConfig",
    "pairs.data.hub": "PairHubConfig",
    "pairs.data.synthetic": "PairSyntheticConfig",
    "pairs.encoder": "PairEncoderConfig",
    "pairs.exact": "PairExactConfig",
    "pairs.attribution": "PairAttributionConfig",
    "pairs.topology": "PairTopologyConfig",
    "generation": "GenerationConfig",
    "generation.scratch": "GenerationScratchConfig",
    "generation.train": "GenerationTrainConfig",
    "generation.learned": "GenerationLearnedConfig",
    "figures": "FiguresConfig",
    "report": "ReportConfig",
    "report.explorer": "ExplorerConfig",
    "grid": "GridConfig",
    "findings": "FindingsConfig",
}


class PersistenceConfig(_Section):
    """Attention → MI → distance → Rips persistence: what the topology stage and the pair stage share (the
    base of :class:`TopologyConfig` and :class:`PairTopologyConfig`, whose keys the schema declares)."""


#: Sections that share a base class beyond :class:`_Section`.
_BASES = {"topology": PersistenceConfig, "pairs.topology": PersistenceConfig}
_SCALARS = {"integer": int, "number": float, "string": str, "boolean": bool, "null": type(None)}


def _python_type(prop: dict[str, Any]) -> Any:
    """The Python annotation of a schema property (lists become tuples: sections are frozen)."""
    if "oneOf" in prop or "anyOf" in prop:
        options = [_python_type(p) for p in prop.get("oneOf", prop.get("anyOf"))]
        return functools.reduce(operator.or_, options)
    kinds = prop.get("type", "string")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    out = []
    for kind in kinds:
        if kind == "array":
            out.append(tuple[_python_type(prop.get("items", {})), ...])
        elif kind == "object":
            out.append(dict[str, str])
        elif kind == "string" and "enum" in prop:
            out.append(Literal[tuple(prop["enum"])])
        else:
            out.append(_SCALARS[kind])
    return functools.reduce(operator.or_, out)


def _frozen(value: Any) -> Any:
    """A schema default as a section holds it: lists as tuples."""
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def _section_class(path: str, schema: dict[str, Any], made: dict[str, type]) -> type:
    """The frozen dataclass of section ``path`` (and, into ``made``, of every section inside it)."""
    fields = []
    for name, prop in schema["properties"].items():
        if prop.get("type") == "object" and "properties" in prop:
            sub = _section_class(f"{path}.{name}", prop, made)
            fields.append((name, sub, field(default_factory=sub)))
        else:
            fields.append((name, _python_type(prop), field(default=_frozen(prop.get("default")))))
    if path not in SECTION_CLASSES:
        raise KeyError(
            f"config schema section {path!r} has no class name: add it to attnlens.pipeline.config.SECTION_CLASSES"
        )
    cls = dataclasses.make_dataclass(
        SECTION_CLASSES[path],
        fields,
        bases=(_BASES.get(path, _Section),),
        frozen=True,
        repr=False,
        namespace={"__doc__": schema.get("description", ""), "__module__": __name__},
    )
    made[path] = cls
    return cls


def _section_classes(schema: dict[str, Any]) -> dict[str, type]:
    made: dict[str, type] = {}
    for name, prop in schema["properties"].items():
        if prop.get("type") == "object":
            _section_class(name, prop, made)
    return made


_CLASSES = _section_classes(load_schema())
DataConfig = _CLASSES["data"]
HubConfig = _CLASSES["data.hub"]
SyntheticConfig = _CLASSES["data.synthetic"]
ModelConfig = _CLASSES["model"]
TrainConfig = _CLASSES["train"]
PredictConfig = _CLASSES["predict"]
ImportanceConfig = _CLASSES["importance"]
AttentionConfig = _CLASSES["attention"]
AttributionConfig = _CLASSES["attribution"]
ExplanationsConfig = _CLASSES["explanations"]
FaithfulnessConfig = _CLASSES["faithfulness"]
SimilarityConfig = _CLASSES["similarity"]
TopologyConfig = _CLASSES["topology"]
PairsConfig = _CLASSES["pairs"]
PairDataConfig = _CLASSES["pairs.data"]
PairHubConfig = _CLASSES["pairs.data.hub"]
PairSyntheticConfig = _CLASSES["pairs.data.synthetic"]
PairEncoderConfig = _CLASSES["pairs.encoder"]
PairExactConfig = _CLASSES["pairs.exact"]
PairAttributionConfig = _CLASSES["pairs.attribution"]
PairTopologyConfig = _CLASSES["pairs.topology"]
GenerationConfig = _CLASSES["generation"]
GenerationScratchConfig = _CLASSES["generation.scratch"]
GenerationTrainConfig = _CLASSES["generation.train"]
GenerationLearnedConfig = _CLASSES["generation.learned"]
FiguresConfig = _CLASSES["figures"]
ReportConfig = _CLASSES["report"]
ExplorerConfig = _CLASSES["report.explorer"]
GridConfig = _CLASSES["grid"]
FindingsConfig = _CLASSES["findings"]


#: The studies ``studies`` may select, in the order of the report's categories.
STUDIES = ("classification", "topology", "pairs", "generation")

#: Top-level schema keys that are values, not sections.
TOP_LEVEL_VALUES = ("studies",)

#: Top-level schema key → dataclass of that section.
SECTIONS: dict[str, type[_Section]] = {name: cls for name, cls in _CLASSES.items() if "." not in name}


#: Dataclass → its top-level key (for the dotted names of the keys a rule reads).
_SECTION_NAMES: dict[type, str] = {cls: name for name, cls in SECTIONS.items()}


def rule_section(cfg: dict[str, Any], name: str) -> Any:
    """Section ``name`` of a rule's ``cfg`` parameter (``keys(...)`` in the workflow) as its dataclass.

    Strict: the section holds only the keys the rule was given, and reading another one raises
    :class:`ConfigKeyNotGiven`, so a rule cannot depend on a key Snakemake does not track for it.
    """
    return SECTIONS[name].from_dict(dict(cfg.get(name) or {}), path=name, strict=True)
