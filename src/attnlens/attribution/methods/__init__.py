"""The explanation methods, one module each: its card, and its scorer for each scope it explains.

A method's module registers its :class:`~attnlens.attribution.methods.cards.Method` card and decorates one scorer
per scope (:data:`~attnlens.attribution.methods.cards.SCOPES`): ``@METHOD.explains(DOCUMENT)`` gives a document's
per-token scores for the output its task explains, ``@METHOD.explains(ANSWER)`` a generated answer's per-source
scores. A scorer reads the shared pass its card ``needs`` (run once per example for every method that reads it,
by :func:`attnlens.attribution.engine.explain`) and returns a :class:`~attnlens.attribution.methods.cards.Scored`.

The modules are light: the config reads their cards without torch (``tests/project/test_startup.py``), so a
scorer imports the numerics it calls inside itself. :data:`MODULES` lists them in the leaderboards' order.

Adding a method is one module here, its name in :data:`MODULES`, a test against an independent reference and its
docs row (docs/explanations.md, "Adding a method").
"""

import importlib

from attnlens.attribution.methods.cards import (
    ANSWER,
    ATTENTION_RANKINGS,
    CONTROL,
    COST_CLASSES,
    DOCUMENT,
    PASSES,
    REFERENCE,
    REGISTRY,
    SCOPES,
    Method,
    Pass,
    Scored,
    get_method,
    label,
    method_names,
    ranking_source,
    register,
    schema_lists,
    signed,
)

__all__ = [
    "ANSWER",
    "ATTENTION_RANKINGS",
    "CONTROL",
    "COST_CLASSES",
    "DOCUMENT",
    "PASSES",
    "REFERENCE",
    "REGISTRY",
    "SCOPES",
    "Method",
    "Pass",
    "Scored",
    "get_method",
    "label",
    "method_names",
    "ranking_source",
    "register",
    "schema_lists",
    "signed",
]

#: The methods' modules, in the leaderboards' order: importing one registers its card and scorers.
MODULES = (
    "attention_last",
    "attention_all",
    "value_norm",
    "rollout",
    "grad_attention",
    "saliency",
    "grad_input",
    "attnlrp",
    "occlusion",
    "attntrace",
    "learned_attention",
    "integrated_gradients",
    "leave_one_out",
    "surrogate",
)
for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")
