"""The explanation methods, as a registry: one :class:`Method` card per method, registered once.

A card says what a method is called (its ``name`` in configs and artifacts, its ``label`` on a page), whether
its sign carries meaning, which shared pass over the model it reads (:data:`PASSES`: the passes a run of several
methods computes once per example for all the methods that need them), and its cost class. Its computation is
the scorer that :mod:`attnlens.attribution.explanations` registers under the same name (``@scorer(name)``,
one ``scores(example, shared)`` call for every method), so :func:`~attnlens.attribution.explanations.explain_example`
runs any registered method without naming it.

Everything that lists, names or colours methods reads this module: the config schema's method lists
(:func:`schema_lists`), the ``explain`` rule and the one-document API (through ``explain_example``), the
leaderboard's order, faithfulness's rankings (:func:`ranking_source`), the explorer's overlays and the docs'
table (``tests/unit/attribution/test_methods.py`` checks it). Plain Python at the package's top, beside
:mod:`attnlens.families` (the architectures' registry): the config and the light rules read it without torch,
and the numerics that compute the methods import it, never the other way round.

Adding a method: a :class:`Method` card passed to :func:`register` here, a scorer in
:mod:`attnlens.attribution.explanations`, and a test against an independent reference
(docs/explanations.md, "Adding a method").
"""

from __future__ import annotations

from dataclasses import dataclass

from attnlens.attention.layers import LAYER_CONFIGURATIONS
from attnlens.registry import Registry


@dataclass(frozen=True)
class Pass:
    """A pass over the model that several methods read: run once per example for all of them."""

    name: str
    runs: str  # what the pass computes, as the docs say it


#: The shared passes, in the order a run computes them; ``own``: a method that runs its own passes.
PASSES = {
    p.name: p
    for p in (
        Pass("attention", "one forward without gradient, every layer's attention band and the hidden states"),
        Pass("embedding_gradient", "the embedding output and Captum's gradient of F at it, one backward"),
        Pass("gradient", "one forward + backward of F with every layer's band, hidden states and ∂F/∂o"),
        Pass("own", "nothing shared: the method runs its own forwards and backwards"),
    )
}


#: Cost classes, cheapest first: what a method costs beyond its shared pass, in forward passes of the example.
COST_CLASSES = (
    "forward",
    "forward + backward",
    "forward + backward per step",
    "forward per span",
    "forward per source",
    "forward per ablation",
)

#: What a method explains: a document's output, per token (the classification study's tasks), or a generated answer,
#: per source of its context (the generation study, :mod:`attnlens.attribution.context`).
DOCUMENT, ANSWER = "document", "answer"
SCOPES = (DOCUMENT, ANSWER)


@dataclass(frozen=True)
class Method:
    """One explanation method's card."""

    name: str  # as configs, artifacts and the leaderboard name it
    label: str  # as a page, a figure or the explorer names it
    signed: bool  # its sign carries meaning: ranked by signed score; otherwise non-negative
    needs: str  # the shared pass it reads (a key of PASSES)
    cost: str  # its cost class (one of COST_CLASSES)
    conserves: str = ""  # what its scores sum to, for a conserving method (the row's `explained` and `delta`)
    scopes: tuple[str, ...] = (DOCUMENT,)  # what it explains (SCOPES): a document's output, a generated answer

    def __post_init__(self):
        if self.needs not in PASSES:
            raise ValueError(f"method {self.name!r}: needs {self.needs!r}, expected one of {list(PASSES)}")
        if self.cost not in COST_CLASSES:
            raise ValueError(f"method {self.name!r}: cost {self.cost!r}, expected one of {list(COST_CLASSES)}")
        if not self.scopes or set(self.scopes) - set(SCOPES):
            raise ValueError(f"method {self.name!r}: scopes {self.scopes!r}, expected some of {list(SCOPES)}")


#: Every registered method by name, in leaderboard order (the order of registration).
REGISTRY: Registry[Method] = Registry("explanation methods", "explanations.methods")


def register(method: Method) -> Method:
    """Add a method's card to :data:`REGISTRY` (a name registered twice, or the reference's or the control's
    name, is an error)."""
    if method.name in (REFERENCE, CONTROL):
        raise ValueError(f"{method.name!r} names the reference or the control, not an explanation method")
    return REGISTRY.register(method)


def method_names(scope: str = DOCUMENT) -> tuple[str, ...]:
    """The names of the registered methods that explain ``scope`` (:data:`SCOPES`), in leaderboard order."""
    if scope not in SCOPES:
        raise ValueError(f"scope {scope!r}: expected one of {list(SCOPES)}")
    return tuple(name for name, card in REGISTRY.items() if scope in card.scopes)


def get_method(name: str) -> Method:
    """The card of ``name``; an unknown name is one :class:`~attnlens.registry.UnknownName` line naming the
    registered ones."""
    return REGISTRY.get(name)


# --- the reference and the control, beside the methods ------------------------------------------------

#: The reference every method is compared with (the ``attribute`` rule's IG) and the random control.
REFERENCE, CONTROL = "ig", "random"
_OTHER_LABELS = {REFERENCE: "integrated gradients (reference)", CONTROL: "random ranking (control)"}


def label(name: str) -> str:
    """How a method, the reference or the control is named on a page (an unknown name as itself)."""
    return REGISTRY[name].label if name in REGISTRY else _OTHER_LABELS.get(name, name)


def signed(name: str) -> bool:
    """Whether ``name``'s sign carries meaning (IG's does; the random control has none)."""
    return REGISTRY[name].signed if name in REGISTRY else name == REFERENCE


#: Rankings faithfulness reads from the attention summaries: received attention of each layer configuration.
ATTENTION_RANKINGS = tuple(f"attention_{c}" for c in LAYER_CONFIGURATIONS)


def ranking_source(name: str) -> str:
    """Where the faithfulness rule reads a ranking's scores: ``ig`` (the attribute shards), ``attention`` (the
    attention summaries), ``explain`` (the explain shards) or ``random`` (seeded, no scores)."""
    if name in (REFERENCE, CONTROL):
        return name
    if name in ATTENTION_RANKINGS:
        return "attention"
    get_method(name)
    return "explain"


def schema_lists() -> dict[str, tuple[list[str], list[str]]]:
    """``{registry: (enum, default)}`` of the config schema's lists marked ``x-registry``: the explanation methods of a
    document (all of them by default), faithfulness's rankings (IG, received attention of every layer configuration,
    the methods, the random control; by default IG, the methods and the control) and the methods of a generated
    answer (all of them by default)."""
    methods = list(method_names(DOCUMENT))
    answers = list(method_names(ANSWER))
    rankings = [REFERENCE, *ATTENTION_RANKINGS, *(m for m in methods if m not in ATTENTION_RANKINGS), CONTROL]
    return {
        "explanation_methods": (methods, methods),
        "rankings": (rankings, [REFERENCE, *methods, CONTROL]),
        "answer_methods": (answers, answers),
    }


# --- the methods attnlens ships (docs/explanations.md) -------------------------------------------------

BOTH = (DOCUMENT, ANSWER)
register(
    Method("attention_last", "raw attention, last layer", signed=False, needs="attention", cost="forward", scopes=BOTH)
)
register(
    Method("attention_all", "raw attention, all layers", signed=False, needs="attention", cost="forward", scopes=BOTH)
)
register(
    Method(
        "value_norm",
        "value-norm weighted attention (Kobayashi et al. 2020)",
        signed=False,
        needs="attention",
        cost="forward",
    )
)
register(Method("rollout", "attention rollout (Abnar & Zuidema 2020)", signed=False, needs="attention", cost="forward"))
register(
    Method("grad_attention", "gradient-weighted attention", signed=True, needs="gradient", cost="forward + backward")
)
register(Method("saliency", "saliency |∂F/∂e|", signed=False, needs="embedding_gradient", cost="forward + backward"))
register(
    Method(
        "grad_input",
        "gradient × input",
        signed=True,
        needs="embedding_gradient",
        cost="forward + backward",
        scopes=BOTH,
    )
)
register(
    Method(
        "attnlrp",
        "AttnLRP (Achtibat et al. 2024)",
        signed=True,
        needs="own",
        cost="forward + backward",
        conserves="logit",
        scopes=BOTH,
    )
)
register(Method("occlusion", "sentence occlusion", signed=True, needs="own", cost="forward per span"))

# --- the methods of a generated answer only (docs/explanations.md, "A generated answer's sources") --------------

register(
    Method(
        "attntrace",
        "AttnTrace top-k pooled attention (Wang et al. 2025)",
        signed=False,
        needs="attention",
        cost="forward",
        scopes=(ANSWER,),
    )
)
register(
    Method(
        "learned_attention",
        "learned attention (AT2, Cohen-Wang et al. 2025)",
        signed=True,
        needs="attention",
        cost="forward",
        scopes=(ANSWER,),
    )
)
register(
    Method(
        "integrated_gradients",
        "integrated gradients (Captum)",
        signed=True,
        needs="own",
        cost="forward + backward per step",
        conserves="log-probability gap",
        scopes=(ANSWER,),
    )
)
register(
    Method(
        "leave_one_out",
        "leave-one-out",
        signed=True,
        needs="own",
        cost="forward per source",
        scopes=(ANSWER,),
    )
)
register(
    Method(
        "surrogate",
        "ablation surrogate (ContextCite, Cohen-Wang et al. 2024)",
        signed=True,
        needs="own",
        cost="forward per ablation",
        scopes=(ANSWER,),
    )
)
