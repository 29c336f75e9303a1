"""The model families attnlens reads (encoders and decoders), as plain data: each family's name (as
``model.architecture`` spells it), its Hugging Face ``model_type`` and its display name, declared once.

The model seam (:mod:`attnlens.models`) registers one architecture per family (``class Longformer(Architecture,
family="longformer")`` takes all three from here); the planner, the report and the config read this module without
loading a model library.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnlens.registry import Registry


@dataclass(frozen=True)
class Family:
    """One model family (an encoder or a decoder)."""

    name: str  # as model.architecture and the grid's model names spell it
    model_type: str  # config.json's model_type
    label: str  # as the report and the docs name it


#: Every family, by name.
FAMILIES: Registry[Family] = Registry("model families", "model.architecture")
FAMILIES.register(Family("longformer", "longformer", "Longformer"))
FAMILIES.register(Family("bigbird", "big_bird", "BigBird"))
FAMILIES.register(Family("modernbert", "modernbert", "ModernBERT"))
FAMILIES.register(Family("llama", "llama", "Llama"))
FAMILIES.register(Family("mistral", "mistral", "Mistral"))
FAMILIES.register(Family("qwen2", "qwen2", "Qwen 2"))
FAMILIES.register(Family("qwen3", "qwen3", "Qwen 3"))
FAMILIES.register(Family("gemma3", "gemma3_text", "Gemma 3"))

#: The family each ``model.source`` builds, where the source says (``convert_bert``: ``model.architecture``).
_BUILT_BY = {"convert_bert": None, "from_config": "modernbert", "longformer": "longformer"}


def family_of(model_type: str | None) -> Family | None:
    """The family of a ``model_type`` (or of a name as ``model.architecture`` spells it); None for neither."""
    for family in FAMILIES.values():
        if model_type in (family.model_type, family.name):
            return family
    return None


def classifier_label(model: Mapping[str, Any]) -> str:
    """The classifier's family as the report names it, from the ``model`` section: what the source builds, or a
    pretrained checkpoint's or an imported classifier's ``model_type`` (read from a local folder's config.json);
    a model type attnlens does not know as itself."""
    source = model["source"]
    kind = (model.get("architecture") or "longformer") if source == "convert_bert" else _BUILT_BY.get(source)
    if source == "from_config" and model.get("architecture"):
        kind = model["architecture"]
    saved = Path(model["name_or_path"]) / "config.json"
    if kind is None and saved.is_file():
        kind = json.loads(saved.read_text(encoding="utf-8")).get("model_type")
    family = family_of(kind)
    if family is not None:
        return family.label
    return kind or ("pretrained checkpoint" if source == "pretrained" else "imported classifier")
