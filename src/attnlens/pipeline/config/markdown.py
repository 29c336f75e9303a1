"""``config/README.md``, generated from the schema: one row per key (type, default, meaning)."""

from __future__ import annotations

import json
from typing import Any

from attnlens.pipeline.config.sections import load_schema


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
