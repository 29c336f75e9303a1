"""The explanation methods, one module each: its card, and its scorer for each scope it explains.

A method's module registers its :class:`~attnlens.attribution.methods.cards.Method` card and decorates one scorer
per scope (:data:`~attnlens.attribution.methods.cards.SCOPES`): ``@METHOD.explains(DOCUMENT)`` gives a document's
per-token scores for the output its task explains, ``@METHOD.explains(ANSWER)`` a generated answer's per-source
scores. A scorer reads the shared pass its card ``needs`` (run once per example for every method that reads it,
by :func:`attnlens.attribution.engine.explain`) and returns a :class:`~attnlens.attribution.methods.cards.Scored`.

The modules are light: the config reads their cards without torch (``tests/project/test_startup.py``), so a
scorer imports the numerics it calls inside itself. Their imports below are in the leaderboards' order.

Adding a method is one module here, its import below, a test against an independent reference and its
docs row (docs/explanations.md, "Adding a method").
"""

# Importing a method's module registers it: this order is the leaderboards' (isort keeps it).
# isort: off
from attnlens.attribution.methods import attention_last  # noqa: F401
from attnlens.attribution.methods import attention_all  # noqa: F401
from attnlens.attribution.methods import value_norm  # noqa: F401
from attnlens.attribution.methods import rollout  # noqa: F401
from attnlens.attribution.methods import grad_attention  # noqa: F401
from attnlens.attribution.methods import saliency  # noqa: F401
from attnlens.attribution.methods import grad_input  # noqa: F401
from attnlens.attribution.methods import attnlrp  # noqa: F401
from attnlens.attribution.methods import occlusion  # noqa: F401
from attnlens.attribution.methods import attention_pooled  # noqa: F401
from attnlens.attribution.methods import attntrace  # noqa: F401
from attnlens.attribution.methods import learned_attention  # noqa: F401
from attnlens.attribution.methods import integrated_gradients  # noqa: F401
from attnlens.attribution.methods import leave_one_out  # noqa: F401
from attnlens.attribution.methods import hierarchical  # noqa: F401
from attnlens.attribution.methods import arc_jsd  # noqa: F401
from attnlens.attribution.methods import surrogate  # noqa: F401
from attnlens.attribution.methods import permutation_shapley  # noqa: F401

# isort: on
from attnlens.attribution.methods.cards import (
    ANSWER,
    ANSWER_ABLATIONS,
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
    "ANSWER_ABLATIONS",
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
