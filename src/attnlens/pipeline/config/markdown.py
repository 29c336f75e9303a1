"""``config/README.md``, generated from the schema and the workflow: one row per key (type, default, meaning, and
the rules that read it, as their ``keys(...)`` in ``workflow/rules/`` list them — the one place a rule's keys are
said)."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attnlens.pipeline.config import shared_keys
from attnlens.pipeline.config.sections import SCHEMA_PATH, load_schema

#: The workflow's rule files, beside the schema the package links to in a checkout.
RULES_DIR = SCHEMA_PATH.resolve().parents[1] / "rules"

_RULE = re.compile(r"^\s*(?:use rule \w+ as (\w+) with|rule (\w+)):$", re.M)
_KEYS_CALL = re.compile(r"\b(?:job_)?keys\(")


def _call_text(text: str, start: int) -> str:
    """The call that opens at ``text[start:]`` up to its closing parenthesis."""
    depth = 0
    for i in range(text.index("(", start), len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start : i + 1]
    raise ValueError(f"unclosed call at {text[start : start + 40]!r}")


def _listed(call: ast.Call) -> list[str]:
    """The dotted keys a ``keys(section=[...], **NAMED)`` call lists (``NAMED``: a dict of :mod:`.shared_keys`)."""
    out = []
    for kw in call.keywords:
        sections = getattr(shared_keys, kw.value.id) if kw.arg is None else {kw.arg: ast.literal_eval(kw.value)}
        out += [f"{section}.{key}" for section, keys in sections.items() for key in keys]
    return out


def rule_keys(rules_dir: Path = RULES_DIR) -> dict[str, list[str]]:
    """Each rule of ``rules_dir`` and the config keys its ``keys(...)`` lists (a section's name: all of its keys)."""
    out: dict[str, list[str]] = {}
    for path in sorted(rules_dir.glob("*.smk")):
        text = path.read_text(encoding="utf-8")
        heads = list(_RULE.finditer(text))
        for head, after in zip(heads, [*heads[1:], None], strict=False):
            block = text[head.end() : after.start() if after else len(text)]
            calls = [ast.parse(_call_text(block, m.start())).body[0].value for m in _KEYS_CALL.finditer(block)]
            out[head.group(1) or head.group(2)] = [key for call in calls for key in _listed(call)]
    return out


def readers(keys_by_rule: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """Each dotted key and the rules that read it: those listing it or a section that holds it."""
    out: dict[str, list[str]] = {}
    for rule, keys in keys_by_rule.items():
        for key in keys:
            out.setdefault(key, []).append(rule)
    return out


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
        text += " (" + " / ".join(f"`{'null' if v is None else v}`" for v in prop["enum"]) + ")"
    bounds = [
        f"{sym} {prop[key]}"
        for key, sym in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"), ("exclusiveMaximum", "<"))
        if key in prop
    ]
    if bounds:
        text += f" ({', '.join(bounds)})"
    return text


HEADER = "| key | type | default | meaning | read by |"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def _read_by(key: str, read: Mapping[str, list[str]]) -> str:
    parts = key.split(".")
    rules = sorted({r for n in range(1, len(parts) + 1) for r in read.get(".".join(parts[:n]), [])})
    return ", ".join(f"`{r}`" for r in rules)


def schema_markdown(schema: dict[str, Any] | None = None, rules_dir: Path = RULES_DIR) -> str:
    """``config/README.md``: one table row per key of the schema (``python -m attnlens.pipeline.config``)."""
    schema = schema or load_schema()
    read = readers(rule_keys(rules_dir))
    lines = [
        "# Configuration keys",
        "",
        "Every key of `config/config.yaml` (the embedded default) and `config/paper.yaml` (the paper's",
        "replication), as checked by `workflow/schemas/config.schema.yaml`. A key left out takes its default; an",
        "unknown key, a wrong type or an out-of-range value stops the pipeline with one line naming the key.",
        "A rule reads only the keys its `keys(...)` in `workflow/rules/` lists (read by): changing a key re-runs",
        "those rules and what follows; a key no rule lists is read by the workflow itself (what runs, the grid, the",
        "shards). Generated from the schema and the rules: `python -m attnlens.pipeline.config > config/README.md`.",
    ]

    def rows(section: dict[str, Any], prefix: str):
        for name, prop in section["properties"].items():
            if prop.get("type") == "object":
                yield f"| **`{prefix}{name}`** | section | | {_cell(prop.get('description', ''))} | |"
                yield from rows(prop, f"{prefix}{name}.")
            else:
                default = json.dumps(prop.get("default"), ensure_ascii=False)
                meaning, by = _cell(prop.get("description", "")), _read_by(prefix + name, read)
                yield f"| `{prefix}{name}` | {_type_text(prop)} | `{default}` | {meaning} | {by} |"

    for name, section in schema["properties"].items():
        if section.get("type") != "object":  # a top-level value (studies)
            default = json.dumps(section.get("default"), ensure_ascii=False)
            lines += ["", f"## `{name}`", "", HEADER, "|---|---|---|---|---|"]
            meaning = _cell(section.get("description", ""))
            lines += [f"| `{name}` | {_type_text(section)} | `{default}` | {meaning} | {_read_by(name, read)} |"]
            continue
        lines += ["", f"## `{name}` — {section.get('description', '')}", "", HEADER]
        lines += ["|---|---|---|---|---|", *rows(section, f"{name}.")]
    return "\n".join(lines) + "\n"
