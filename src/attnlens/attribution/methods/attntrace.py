"""AttnTrace's top-k pooled attention (Wang et al., 2025): the attention each token receives from the answer's rows,
averaged over the rows, heads and layers; a source scores the mean of its ``generation.pool_k`` largest token
weights, which does not grow with the source's length."""

from attnlens.attribution.methods.cards import ANSWER, Method, Scored, register

METHOD = register(
    Method(
        "attntrace",
        "AttnTrace top-k pooled attention (Wang et al. 2025)",
        signed=False,
        needs="attention",
        cost="forward",
    )
)


@METHOD.explains(ANSWER)
def answer_scores(x, rows) -> Scored:
    return Scored(x.pooled(rows.mean(axis=(0, 1))))
