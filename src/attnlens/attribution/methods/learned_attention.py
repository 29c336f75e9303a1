"""Learned attention (AT2, Cohen-Wang et al. 2025): each source's attention from the answer's rows per layer and
head, weighted by head weights fitted on training answers (rule ``fit_learned_attention``)."""

from attnlens.attribution.methods.cards import ANSWER, Method, Scored, register

METHOD = register(
    Method(
        "learned_attention",
        "learned attention (AT2, Cohen-Wang et al. 2025)",
        signed=True,
        needs="attention",
        cost="forward",
    )
)


@METHOD.explains(ANSWER)
def answer_scores(x, rows) -> Scored:
    from attnlens.attribution.head_weights import learned_scores, source_features  # noqa: PLC0415 (torch: the card is read without it)

    if x.head_weights is None:
        raise ValueError("learned_attention: no fitted head weights (rule fit_learned_attention)")
    if x.head_weights.shape != rows.shape[:2]:
        raise ValueError(f"learned_attention: weights {x.head_weights.shape} for {rows.shape[:2]} layers × heads")
    return Scored(learned_scores(source_features(rows, x.owner, x.n_sources), x.head_weights))
