"""Hierarchical leave-one-out (TracLLM, Wang et al. 2025; AttriBoT, Liu et al. 2024): groups of sources removed
first, then the sources of the ``generation.hierarchy_keep`` groups whose removal lowers ``F`` most, one at a time
(:mod:`attnlens.attribution.hierarchy`); a source scores its own drop where it was searched, else its group's drop
shared among the group's sources. Read from the cached ablations of kind ``hierarchical`` (rule ``ablate_contexts``,
searched there), whose forwards it is charged: about ``3√n`` where flat leave-one-out costs ``n``."""

from attnlens.attribution.hierarchy import hierarchical_scores
from attnlens.attribution.methods.cards import ANSWER, Method, Scored, register

METHOD = register(
    Method(
        "hierarchical",
        "hierarchical leave-one-out (TracLLM, AttriBoT)",
        signed=True,
        needs="own",
        cost="forward per group",
        ablations="hierarchical",
    )
)


@METHOD.explains(ANSWER)
def answer_scores(x, _shared) -> Scored:
    if x.hierarchical is None:
        raise ValueError("hierarchical: the answer has no cached hierarchical ablations")
    found = x.hierarchical
    return Scored(hierarchical_scores(found.masks, found.scores, x.full_score), len(found.masks), 0, found.seconds)
