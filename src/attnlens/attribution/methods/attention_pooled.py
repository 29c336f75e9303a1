"""Top-k pooled attention, AttnTrace's pooling alone (Wang et al., 2025, without its context sub-sampling): the
attention each token receives from the answer's rows, averaged over the rows, heads and layers; a source scores the
mean of its ``generation.pool_k`` largest token weights, which does not grow with the source's length."""

from attnlens.attribution.methods.cards import ANSWER, Method, Scored, register

METHOD = register(
    Method(
        "attention_pooled",
        "top-k pooled attention (AttnTrace's pooling)",
        signed=False,
        needs="attention",
        cost="forward",
    )
)


@METHOD.explains(ANSWER)
def answer_scores(x, rows) -> Scored:
    return Scored(x.pooled(rows.mean(axis=(0, 1))))
