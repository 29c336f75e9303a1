"""Attention rollout (Abnar & Zuidema, ACL 2020): the row of the token the head reads in ``Ã_L ⋯ Ã_1``,
``Ã = ½ mean_h A + ½ I``, carried down as a vector on the band (never the dense product)."""

from attnlens.attribution.methods.cards import DOCUMENT, Method, Scored, register

METHOD = register(
    Method("rollout", "attention rollout (Abnar & Zuidema 2020)", signed=False, needs="attention", cost="forward")
)


@METHOD.explains(DOCUMENT)
def document_scores(x, shared) -> Scored:
    from attnlens.attribution.explanations.passes import rollout_scores  # noqa: PLC0415 (torch: the card is read without it)

    return Scored(x.token_scores(rollout_scores(x.model, shared.bands, x.n)))
