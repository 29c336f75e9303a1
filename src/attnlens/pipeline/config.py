"""The configuration: one declaration per key, in ``workflow/schemas/config.schema.yaml``.

The schema declares every key once — type, range, enum, default and meaning. Snakemake validates the
config against it, ``config/README.md`` is generated from it (:func:`schema_markdown`), and the frozen
dataclass of each section (``AttributionConfig`` …) is generated from it here (:func:`_section_class`):
only the class names are written in Python. A rule passes only its own keys (``keys(...)`` in the
workflow) and its script builds the matching dataclass with :func:`rule_section`. What a JSON schema
cannot say — checks across keys — is :func:`_check_cross_fields`.

:func:`load_config` validates a YAML file against the schema (filling defaults) and turns the
first violation into one :class:`~attnlens.errors.InputError` line naming the file and the key.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import operator
import typing
from dataclasses import field
from pathlib import Path
from typing import Any, Literal

import jsonschema
import yaml

from attnlens.attribution.methods import REFERENCE, ranking_source, schema_lists
from attnlens.data.layouts import DEFAULT as DEFAULT_LAYOUT
from attnlens.data.layouts import get_layout, layout_names
from attnlens.errors import InputError
from attnlens.sharding import planned_cpus, resolve_shards
from attnlens.tasks import DEFAULT as DEFAULT_TASK
from attnlens.tasks import get_task, task_names

#: The schema, shipped inside the package (a link to ``workflow/schemas/config.schema.yaml`` in a checkout; a copy
#: in an installed package), so the section classes exist wherever attnlens is installed.
SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")


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
    registries = {"tasks": (task_names(), DEFAULT_TASK), "layouts": (layout_names(), DEFAULT_LAYOUT)}
    _fill_registries(schema, {**schema_lists(), **registries})
    return schema


def _fill_registries(schema: dict[str, Any], lists: dict[str, tuple[list[str], list[str] | str]]) -> None:
    """A list marked ``x-registry`` gets the registry's names as its items' enum; a string, as its enum."""
    for prop in schema.get("properties", {}).values():
        name = prop.get("x-registry")
        if name is not None:
            if name not in lists:
                raise KeyError(f"config schema: x-registry {name!r} is not one of {sorted(lists)}")
            enum, default = lists[name]
            if prop.get("type") == "array":
                prop["items"] = {**prop.get("items", {}), "enum": list(enum)}
                prop["default"] = list(default)
            else:
                prop["enum"], prop["default"] = list(enum), default
        _fill_registries(prop, lists)


#: The Python name of every section, by its dotted path in the schema (the schema declares the keys, their
#: types, ranges, defaults and meanings; only the class names are given here).
SECTION_CLASSES = {
    "data": "DataConfig", "data.hub": "HubConfig", "data.synthetic": "SyntheticConfig",
    "model": "ModelConfig", "train": "TrainConfig", "predict": "PredictConfig", "importance": "ImportanceConfig",
    "attention": "AttentionConfig", "attribution": "AttributionConfig", "explanations": "ExplanationsConfig",
    "faithfulness": "FaithfulnessConfig", "similarity": "SimilarityConfig", "topology": "TopologyConfig",
    "pairs": "PairsConfig", "pairs.data": "PairDataConfig", "pairs.data.hub": "PairHubConfig",
    "pairs.data.synthetic": "PairSyntheticConfig", "pairs.encoder": "PairEncoderConfig",
    "pairs.exact": "PairExactConfig", "pairs.attribution": "PairAttributionConfig",
    "pairs.topology": "PairTopologyConfig", "figures": "FiguresConfig", "report": "ReportConfig",
    "report.explorer": "ExplorerConfig", "grid": "GridConfig", "findings": "FindingsConfig",
}  # fmt: skip


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
        SECTION_CLASSES[path], fields, bases=(_BASES.get(path, _Section),), frozen=True, repr=False,
        namespace={"__doc__": schema.get("description", ""), "__module__": __name__},
    )  # fmt: skip
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
FiguresConfig = _CLASSES["figures"]
ReportConfig = _CLASSES["report"]
ExplorerConfig = _CLASSES["report.explorer"]
GridConfig = _CLASSES["grid"]
FindingsConfig = _CLASSES["findings"]


#: The studies ``studies`` may select, in the order of the report's categories.
STUDIES = ("classification", "topology", "pairs")

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


def _fill_defaults(schema: dict[str, Any], instance: Any) -> None:
    """Insert ``default`` values of missing object properties, recursively (as Snakemake's ``validate`` does)."""
    if not isinstance(instance, dict):
        return
    for key, sub in schema.get("properties", {}).items():
        if key not in instance and "default" in sub:
            instance[key] = _copy(sub["default"])
        if key not in instance and sub.get("type") == "object" and "properties" in sub:
            instance[key] = {}
        if key in instance:
            _fill_defaults(sub, instance[key])


def _copy(value: Any) -> Any:
    return yaml.safe_load(yaml.safe_dump(value))


_TYPE_WORDS = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
               "array": "a list", "object": "a mapping", "null": "null"}  # fmt: skip


def _describe(error) -> tuple[str, str]:
    """(dotted key, expectation) for a jsonschema ValidationError."""
    path = [str(p) for p in error.absolute_path]
    described = error.schema.get("description")
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(known))
        key = ".".join([*path, extra[0]]) if extra else ".".join(path)
        return key, f"unknown key; expected one of: {', '.join(known)}"
    key = ".".join(path) or "(top level)"
    if error.validator == "required":
        return key, error.message
    if error.validator in ("minItems", "minProperties"):
        what = f" ({described})" if described else ""
        return key, f"expected at least {error.validator_value} entry{what}, got an empty one"
    if error.validator == "type":
        kinds = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        what = " or ".join(_TYPE_WORDS.get(k, k) for k in kinds)
        return key, f"expected {what}{f' ({described})' if described else ''}, got {error.instance!r}"
    if error.validator in ("oneOf", "anyOf", "enum") and described:
        options = f" (one of {error.validator_value})" if error.validator == "enum" else ""
        return key, f"expected {described}{options}, got {error.instance!r}"
    rule = f"{error.validator} {error.validator_value!r}"
    return key, f"expected {rule}{f' ({described})' if described else ''}, got {error.instance!r}"


def source_name(source: str, path: str | None, hub_name: str | None) -> str:
    """What tables and figures call a dataset by default: the file's stem, the folder's name, the hub id."""
    if source == "file" and path:
        return Path(path).stem
    if source == "folders" and path:
        return Path(path).resolve().name
    if source == "hub" and hub_name:
        return hub_name
    return "synthetic papers"


def validate_config(config: dict[str, Any], where: str = "config", schema: dict | None = None) -> dict[str, Any]:
    """Validate ``config`` in place against the schema, fill defaults, and return it.

    Raises:
        InputError: the first violation, as ``<where>: <dotted key>: <expected …>``.
    """
    schema = schema or load_schema()
    _fill_defaults(schema, config)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: (len(e.absolute_path), list(e.absolute_path)))
    if errors:
        key, expected = _describe(errors[0])
        raise InputError(where, key, expected)
    _check_cross_fields(config, where)
    return config


def _check_cross_fields(config: dict[str, Any], where: str) -> None:
    """Rules a JSON schema cannot state on its own."""
    data = config.get("data", {})
    source = data.get("source")
    if source in ("file", "folders") and not data.get("path"):
        raise InputError(where, "data.path", f"expected a path for data.source {source!r}")
    if source == "folders" and not data.get("classes"):
        raise InputError(where, "data.classes", "expected the class folder names, in label order")
    if source == "hub" and not data.get("hub", {}).get("name"):
        raise InputError(where, "data.hub.name", "expected a dataset id for data.source 'hub'")
    get_task(data.get("task")).check_config(config, where)
    layout = get_layout(data.get("layout", DEFAULT_LAYOUT))
    if layout.name != DEFAULT_LAYOUT and source not in ("file", "hub"):
        raise InputError(where, "data.layout", f"expected {DEFAULT_LAYOUT!r} for data.source {source!r} (a layout "
                         f"reads a file's or hub dataset's rows), got {layout.name!r}")  # fmt: skip
    if layout.tasks and data.get("task") not in layout.tasks:
        raise InputError(where, "data.layout", f"expected data.task one of {list(layout.tasks)} for data.layout "
                         f"{layout.name!r}, got {data.get('task')!r}")  # fmt: skip
    syn = data.get("synthetic", {})
    if source == "synthetic" and syn.get("min_words", 0) > syn.get("max_words", 0):
        raise InputError(where, "data.synthetic.min_words", "expected at most data.synthetic.max_words")
    ig = config.get("attribution", {})
    if ig.get("adaptive") and ig.get("min_steps", 0) > ig.get("max_steps", 0):
        raise InputError(where, "attribution.min_steps", "expected at most attribution.max_steps")
    explained = set(config.get("explanations", {}).get("methods", ()))
    for name in config.get("faithfulness", {}).get("rankings", ()):
        if ranking_source(name) == "explain" and name not in explained:  # raw attention: from extract_attention
            raise InputError(
                where, "faithfulness.rankings", f"expected only methods listed in explanations.methods, got {name!r}"
            )
    baseline = config.get("explanations", {}).get("baseline")
    if explained and baseline not in explained | {REFERENCE}:
        raise InputError(
            where, "explanations.baseline", f"expected ig or one of explanations.methods, got {baseline!r}"
        )
    sim = config.get("similarity", {})
    own = sim.get("dataset_name") or source_name(data.get("source", "synthetic"), data.get("path"),
                                                 (data.get("hub") or {}).get("name"))  # fmt: skip
    names = [own] + [d.get("name") for d in sim.get("extra_datasets", [])]
    if len(set(names)) < len(names):
        raise InputError(
            where,
            "similarity.extra_datasets",
            f"expected names different from each other and from dataset_name, got {names}",
        )
    pairs = config.get("pairs", {}).get("data", {})
    if pairs.get("source") == "file" and not pairs.get("path"):
        raise InputError(where, "pairs.data.path", "expected a CSV/JSONL/parquet path for pairs.data.source 'file'")
    if pairs.get("source") == "hub" and not pairs.get("hub", {}).get("name"):
        raise InputError(where, "pairs.data.hub.name", "expected a dataset id for pairs.data.source 'hub'")
    model = config.get("model", {})
    windows = model.get("attention_window")
    if isinstance(model.get("max_length"), int) and windows is not None:
        check_window_fits(model["max_length"], windows if isinstance(windows, list) else [windows], where)


def check_window_fits(max_length: int, windows: list[int], where: str = "config") -> None:
    """A sliding window wider than the maximum length is a configuration mistake (it silently degenerates into
    full attention): checked on the config as given and again on the length and window a run resolves.

    Raises:
        InputError: naming ``model.attention_window``.
    """
    for w in windows:
        if w > max_length:
            raise InputError(
                where, "model.attention_window", f"expected at most model.max_length ({max_length}), got {w}"
            )


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping a YAML config file holds, unvalidated.

    Raises:
        InputError: no file, not UTF-8, a YAML syntax error (with its line and column), an empty file,
            or a top level that is not a mapping of sections.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(str(path), "(file)", "expected a YAML config file, found nothing") from None
    except UnicodeDecodeError as err:
        raise InputError(
            str(path), "(encoding)", f"expected UTF-8 text, found byte {err.object[err.start]:#04x}"
        ) from None
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise InputError(str(path), "(file)", f"expected valid YAML, found a syntax error{where}: {problem}") from None
    if config is None:
        raise InputError(
            str(path), "(file)", "expected a mapping of config sections (data:, model:, …), the file is empty"
        )
    if not isinstance(config, dict):
        raise InputError(str(path), "(file)", f"expected a mapping of config sections, found a {type(config).__name__}")
    return config


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file, validate it; ``n_shards: auto`` becomes a count (:func:`planned_cpus`)."""
    return resolve_shards(validate_config(read_config_file(path), str(path)), planned_cpus())


def _type_text(prop: dict[str, Any]) -> str:
    if "oneOf" in prop:
        return " or ".join(_type_text(p) for p in prop["oneOf"])
    kinds = prop.get("type", "any")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    names = []
    for k in kinds:
        item = prop.get("items", {}).get("type")
        names.append(f"list of {item}s" if k == "array" and isinstance(item, str) else k)
    text = " or ".join(names)
    if "enum" in prop.get("items", {}):
        text += " (" + " / ".join(f"`{v}`" for v in prop["items"]["enum"]) + ")"
    if "enum" in prop:
        text += " (" + " / ".join(f"`{v}`" for v in prop["enum"]) + ")"
    bounds = [
        f"{sym} {prop[key]}"
        for key, sym in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"))
        if key in prop
    ]
    if bounds:
        text += f" ({', '.join(bounds)})"
    return text


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def schema_markdown(schema: dict[str, Any] | None = None) -> str:
    """``config/README.md``: one table row per key of the schema (``python -m attnlens.pipeline.config``)."""
    schema = schema or load_schema()
    lines = [
        "# Configuration keys",
        "",
        "Every key of `config/config.yaml` (the embedded default) and `config/paper.yaml` (the paper's",
        "replication), as checked by `workflow/schemas/config.schema.yaml`. A key left out takes its default; an",
        "unknown key, a wrong type or an out-of-range value stops the pipeline with one line naming the key.",
        "Each section is read only by its own rule, so changing a key re-runs that rule and what follows.",
        "This file is generated from the schema: `python -m attnlens.pipeline.config > config/README.md`.",
    ]

    def rows(section: dict[str, Any], prefix: str):
        for name, prop in section["properties"].items():
            if prop.get("type") == "object":
                yield f"| **`{prefix}{name}`** | section | | {_cell(prop.get('description', ''))} |"
                yield from rows(prop, f"{prefix}{name}.")
            else:
                default = json.dumps(prop.get("default"), ensure_ascii=False)
                yield f"| `{prefix}{name}` | {_type_text(prop)} | `{default}` | {_cell(prop.get('description', ''))} |"

    for name, section in schema["properties"].items():
        if section.get("type") != "object":  # a top-level value (studies)
            default = json.dumps(section.get("default"), ensure_ascii=False)
            lines += ["", f"## `{name}`", "", "| key | type | default | meaning |", "|---|---|---|---|"]
            lines += [f"| `{name}` | {_type_text(section)} | `{default}` | {_cell(section.get('description', ''))} |"]
            continue
        lines += ["", f"## `{name}` — {section.get('description', '')}", "", "| key | type | default | meaning |"]
        lines += ["|---|---|---|---|", *rows(section, f"{name}.")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    doc = "Print config/README.md, every config key (python -m attnlens.pipeline.config > config/README.md)"
    argparse.ArgumentParser(prog="python -m attnlens.pipeline.config", description=doc).parse_args()
    print(schema_markdown(), end="")
