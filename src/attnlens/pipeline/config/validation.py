"""Validation: a config against the schema (defaults filled in, the first violation as one line naming the file and
the key), the checks across keys a JSON schema cannot say, and reading a config file.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from attnlens.attribution.methods import REFERENCE, ranking_source
from attnlens.data.layouts import DEFAULT as DEFAULT_LAYOUT
from attnlens.data.layouts import get_layout, source_name
from attnlens.errors import InputError
from attnlens.lengths import check_window_fits
from attnlens.pipeline.config.sections import load_schema
from attnlens.sharding import planned_cpus, resolve_shards
from attnlens.tasks import get_task


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


_TYPE_WORDS = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "boolean": "true or false",
    "array": "a list",
    "object": "a mapping",
    "null": "null",
}


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


#: Keys renamed in this release: ``{old dotted key: new name in the same section}``. A config that uses an old name
#: still runs, read as the new one, with a one-line notice (:func:`rename_old_keys`); the next release refuses it.
RENAMED_KEYS = {
    "attribution.internal_batch_size": "steps_per_pass",
    "explanations.batch_size": "copies_per_pass",
    "faithfulness.batch_size": "copies_per_pass",
}


def rename_old_keys(config: dict[str, Any], where: str = "config") -> list[str]:
    """Read every key of :data:`RENAMED_KEYS` that ``config`` spells by its old name as its new one (in place); print
    one ``attnlens: notice:`` line each to standard error, and return them.

    Raises:
        InputError: a section that gives a key under both names.
    """
    notices = []
    for old, new in RENAMED_KEYS.items():
        section_name, key = old.rsplit(".", 1)
        section = config.get(section_name)
        if not isinstance(section, dict) or key not in section:
            continue
        if new in section:
            raise InputError(where, old, f"expected one of {old} and {section_name}.{new} (its new name), found both")
        section[new] = section.pop(key)
        notices.append(f"{where}: {old} is now {section_name}.{new}; the old name is read until the next release")
    for notice in notices:
        print(f"attnlens: notice: {notice}", file=sys.stderr)
    return notices


def validate_config(config: dict[str, Any], where: str = "config", schema: dict | None = None) -> dict[str, Any]:
    """Validate ``config`` in place against the schema (a renamed key read under its new name:
    :func:`rename_old_keys`), fill defaults, and return it.

    Raises:
        InputError: the first violation, as ``<where>: <dotted key>: <expected …>``.
    """
    schema = schema or load_schema()
    rename_old_keys(config, where)
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
        raise InputError(
            where,
            "data.layout",
            f"expected {DEFAULT_LAYOUT!r} for data.source {source!r} (a layout "
            f"reads a file's or hub dataset's rows), got {layout.name!r}",
        )
    if layout.tasks and data.get("task") not in layout.tasks:
        raise InputError(
            where,
            "data.layout",
            f"expected data.task one of {list(layout.tasks)} for data.layout {layout.name!r}, got {data.get('task')!r}",
        )
    syn = data.get("synthetic", {})
    if source == "synthetic" and syn.get("min_words", 0) > syn.get("max_words", 0):
        raise InputError(where, "data.synthetic.min_words", "expected at most data.synthetic.max_words")
    lo, hi = syn.get("n_sentences", (2, 2))
    if lo > hi:
        raise InputError(
            where, "data.synthetic.n_sentences", f"expected [least, most] with least ≤ most, got {[lo, hi]}"
        )
    if syn.get("structures") and data.get("task") != "generation":
        raise InputError(
            where, "data.synthetic.structures", f"expected null for data.task {data.get('task')!r} (generation only)"
        )
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
    own = sim.get("dataset_name") or source_name(
        data.get("source", "synthetic"), data.get("path"), (data.get("hub") or {}).get("name")
    )
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
