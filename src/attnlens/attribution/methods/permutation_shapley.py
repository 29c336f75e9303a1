"""Shapley values by permutation sampling (Castro et al., 2009): ``generation.shapley_orders`` orders of the sources
drawn at random, each adding them one at a time from the empty context to the whole (``n + 1`` ablations an order,
the empty and the whole one shared), a source's score its marginal contribution to ``F`` averaged over the orders
(:func:`~attnlens.attribution.exact.permutation_shapley`); read from the cached ablations of kind ``permutation``
(rule ``ablate_contexts``), whose distinct masks' forwards it is charged. Unbiased for the exact Shapley values, its
budget stated: ``orders · (n − 1) + 2`` forwards at most."""

import numpy as np

from attnlens.attribution.exact import permutation_shapley
from attnlens.attribution.methods.cards import ANSWER, Method, Scored, register

METHOD = register(
    Method(
        "permutation_shapley",
        "Shapley values, permutation sampling (Castro et al. 2009)",
        signed=True,
        needs="own",
        cost="forward per ablation",
        ablations="permutation",
    )
)


@METHOD.explains(ANSWER)
def answer_scores(x, _shared) -> Scored:
    if x.permutation is None:
        raise ValueError("permutation_shapley: the answer has no cached permutation ablations")
    chains = x.permutation
    forwards = len(np.unique(chains.masks, axis=0))
    return Scored(permutation_shapley(chains.masks, chains.scores), forwards, 0, chains.seconds)
