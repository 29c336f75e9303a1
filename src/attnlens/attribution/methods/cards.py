"""The cards of the explanation methods and of the passes they share: plain data the config reads without torch.

A :class:`Method` card says what a method is called (its ``name`` in configs and artifacts, its ``label`` on a
page), whether its sign carries meaning, which shared pass it reads (:data:`PASSES`), its cost class and what a
conserving method's scores sum to in each scope. Its computation joins the card in the method's own module
(:mod:`attnlens.attribution.methods`): one scorer per scope it explains (:data:`SCOPES`: a document's tokens, a
generated answer's sources), registered with :meth:`Method.explains`, so the card's scopes are the scorers it has.
A :class:`Pass` card carries one runner per scope, registered where the scope's passes are computed.

Everything that lists, names or colours methods reads this module: the config schema's method lists
(:func:`schema_lists`), the leaderboards' order, faithfulness's rankings (:func:`ranking_source`), the explorer's
overlays and the docs' table (``tests/unit/attribution/test_methods.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from attnlens.attention.layers import LAYER_CONFIGURATIONS
from attnlens.registry import Registry

#: What a method explains: a document's output, per token (the classification study's tasks), or a generated answer,
#: per source of its context (the generation study, :mod:`attnlens.attribution.source_scores`).
DOCUMENT, ANSWER = "document", "answer"
SCOPES = (DOCUMENT, ANSWER)


def _check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise ValueError(f"scope {scope!r}: expected one of {list(SCOPES)}")


def _add(table: dict, scope: str, fn, what: str):
    if scope in table:
        raise ValueError(f"{what} has a {scope} computation already")
    table[scope] = fn
    return fn


@dataclass
class Scored:
    """What a scorer returns: float64 scores (``(n,)`` a document's tokens, ``(n_sources,)`` an answer's sources),
    what it ran beyond its shared pass, and what a conserving method explains."""

    scores: Any
    n_forwards: int = 0
    n_backwards: int = 0
    ablation_seconds: float = 0.0  # the wall seconds of the cached ablations it read (an answer's)
    explained: float | None = None
    delta: float | None = None  # explained − Σ its scores


@dataclass(frozen=True, eq=False)
class Pass:
    """A pass over the model that several methods read: run once per example for all of them, by the runner of the
    example's scope (:meth:`runs_for`)."""

    name: str
    runs: str  # what the pass computes, as the docs say it
    forwards: int  # what it costs every method that reads it: forwards of the example …
    backwards: int  # … and backwards
    runners: dict[str, Callable[[Any], Any]] = field(default_factory=dict, repr=False)  # {scope: run(example)}

    def runs_for(self, scope: str):
        """Register the function that runs this pass on one example of ``scope``: ``run(example) -> shared``."""
        _check_scope(scope)
        return lambda fn: _add(self.runners, scope, fn, f"pass {self.name!r}")


#: The shared passes, in the order a run computes them; ``own``: a method that runs its own passes.
PASSES = {
    p.name: p
    for p in (
        Pass("attention", "one forward without gradient: every layer's attention (and hidden states)", 1, 0),
        Pass("embedding_gradient", "the embedding output and the gradient of F at it: one forward, one backward", 1, 1),
        Pass("gradient", "one forward + backward of F with every layer's band, hidden states and ∂F/∂o", 1, 1),
        Pass("own", "nothing shared: the method runs its own forwards and backwards", 0, 0),
    )
}


#: Cost classes, cheapest first: what a method costs beyond its shared pass, in forward passes of the example.
COST_CLASSES = (
    "forward",
    "forward + backward",
    "forward + backward per step",
    "forward per span",
    "forward per group",
    "forward per source",
    "forward per ablation",
)
#: The cost classes of a method that costs a few forwards whatever the context's length: the ``cite`` door's default.
FEW_FORWARDS = COST_CLASSES[:2]
#: The cached ablations of an answer a method can read (:class:`~attnlens.attribution.answer_example.AnswerExample`'s
#: fields of the same names), computed before the methods run.
ANSWER_ABLATIONS = ("leave_one_out", "random", "permutation", "hierarchical")


@dataclass(frozen=True, eq=False)
class Method:
    """One explanation method's card, and its scorers (one per scope it explains)."""

    name: str  # as configs, artifacts and the leaderboard name it
    label: str  # as a page, a figure or the explorer names it
    signed: bool  # its sign carries meaning: ranked by signed score; otherwise non-negative
    needs: str  # the shared pass it reads (a key of PASSES)
    cost: str  # its cost class (one of COST_CLASSES)
    #: ``{scope: what its scores sum to}``, for a conserving method (the row's ``explained`` and ``delta``): what
    #: it explains may differ by scope (AttnLRP: a document's logit, an answer's log-probability)
    conserves: dict[str, str] = field(default_factory=dict)
    #: the cached ablations of an answer it reads (one of :data:`ANSWER_ABLATIONS`; None: none), so that a caller
    #: computes only those its methods read
    ablations: str | None = None
    #: ``{scope: scores(example, shared) -> Scored}``, ``shared`` what the pass :attr:`needs` gave the example
    scorers: dict[str, Callable[[Any, Any], Scored]] = field(default_factory=dict, repr=False)
    #: ``{scope: scores(examples) -> [Scored]}``: one pass over several examples, each scored as alone (to rounding)
    batch_scorers: dict[str, Callable[[Any], list[Scored]]] = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if self.needs not in PASSES:
            raise ValueError(f"method {self.name!r}: needs {self.needs!r}, expected one of {list(PASSES)}")
        if self.cost not in COST_CLASSES:
            raise ValueError(f"method {self.name!r}: cost {self.cost!r}, expected one of {list(COST_CLASSES)}")
        for scope in self.conserves:
            _check_scope(scope)
        if self.ablations is not None and self.ablations not in ANSWER_ABLATIONS:
            raise ValueError(
                f"method {self.name!r}: ablations {self.ablations!r}, expected one of {list(ANSWER_ABLATIONS)}"
            )

    @property
    def few_forwards(self) -> bool:
        """It costs a few forwards whatever the number of sources or tokens (:data:`FEW_FORWARDS`)."""
        return self.cost in FEW_FORWARDS

    @property
    def scopes(self) -> tuple[str, ...]:
        """What it explains: the scopes it has a scorer for, in :data:`SCOPES` order."""
        return tuple(scope for scope in SCOPES if scope in self.scorers)

    def explains(self, scope: str):
        """Register the method's computation for one example of ``scope``: ``scores(example, shared) -> Scored``."""
        _check_scope(scope)
        return lambda fn: _add(self.scorers, scope, fn, f"method {self.name!r}")

    def explains_together(self, scope: str):
        """Register the method's computation over several examples of ``scope`` in one pass:
        ``scores(examples) -> [Scored]``, each what :meth:`explains`'s scorer gives it alone (to rounding)."""
        _check_scope(scope)
        return lambda fn: _add(self.batch_scorers, scope, fn, f"method {self.name!r} (together)")


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
    _check_scope(scope)
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
