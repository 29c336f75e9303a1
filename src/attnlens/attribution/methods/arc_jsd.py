"""ARC-JSD (Li et al., 2025): a source scores the Jensen–Shannon divergence of the answer's token distributions with
that source removed from those on the whole context, summed over the answer's tokens; read from the cached
leave-one-out ablations' forwards (rule ``ablate_contexts``), whose cost it shares. It compares whole distributions,
not the answer's probability: a source whose removal reshapes what the model would say scores, even where the
answer's own tokens keep their probability."""

import numpy as np

from attnlens.attribution.methods.cards import ANSWER, Method, Scored, register

METHOD = register(
    Method(
        "arc_jsd",
        "ARC-JSD (Li et al. 2025)",
        signed=False,
        needs="own",
        cost="forward per source",
        ablations="leave_one_out",
    )
)


@METHOD.explains(ANSWER)
def answer_scores(x, _shared) -> Scored:
    loo = x.leave_one_out
    if loo is None or loo.divergence is None:
        raise ValueError("arc_jsd: the answer has no cached leave-one-out divergences")
    scores = np.zeros(x.n_sources)
    scores[np.argmin(loo.masks, axis=1)] = loo.divergence  # the one source each mask removes
    return Scored(scores, len(loo.masks), 0, loo.seconds)
