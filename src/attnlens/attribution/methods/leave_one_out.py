"""Leave-one-out: a source scores the answer's score on the whole context less its score with that source removed,
read from the cached leave-one-out ablations (rule ``ablate_contexts``), whose forwards it is charged."""

import numpy as np

from attnlens.attribution.methods.cards import ANSWER, Method, Scored, register

METHOD = register(
    Method(
        "leave_one_out", "leave-one-out", signed=True, needs="own", cost="forward per source", ablations="leave_one_out"
    )
)


@METHOD.explains(ANSWER)
def answer_scores(x, _shared) -> Scored:
    if x.leave_one_out is None:
        raise ValueError("leave_one_out: the answer has no cached leave-one-out ablations")
    loo = x.leave_one_out
    dropped = np.argmin(loo.masks, axis=1)  # the one source each mask removes
    scores = np.zeros(x.n_sources)
    scores[dropped] = x.full_score - loo.scores
    return Scored(scores, len(loo.masks), 0, loo.seconds)
