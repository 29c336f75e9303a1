"""AttnTrace (Wang et al., 2025), as its authors run it: top-k pooled attention (``attention_pooled``) on
``generation.trace_samples`` sub-sampled contexts, each keeping ``generation.trace_keep`` of the sources, a source's
score its mean over the samples that kept it
(:func:`~attnlens.attribution.source_scores.subsampled_pooled_attention`). The sub-sampling is what its authors add
against attention spread over many sources; its forwards are its own."""

import numpy as np

from attnlens.attribution.methods.cards import ANSWER, Method, Scored, register

METHOD = register(
    Method(
        "attntrace",
        "AttnTrace, sub-sampled contexts (Wang et al. 2025)",
        signed=False,
        needs="own",
        cost="forward per ablation",
    )
)

#: The stream of answer ``k``'s sub-samples among its seeded draws (``default_rng([generation.seed, k, stream])``).
TRACE_STREAM = 17


@METHOD.explains(ANSWER)
def answer_scores(x, _shared) -> Scored:
    from attnlens.attribution.source_scores import subsampled_pooled_attention  # noqa: PLC0415 (torch: the card is read without it)

    rng = np.random.default_rng([x.seed, x.index, TRACE_STREAM])
    scores = subsampled_pooled_attention(
        x.model, x.input_ids, x.answer_length, x.owner, x.n_sources, x.pool_k, x.trace_samples, x.trace_keep, rng
    )
    return Scored(scores, x.trace_samples)
