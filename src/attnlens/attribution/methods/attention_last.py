"""Raw attention of the last layer: what each token receives, ``Σ_h Σ_i A_ij`` over the last layer's heads (a
document), or averaged over the answer's rows and the last layer's heads and summed over a source's tokens (an
answer)."""

from attnlens.attribution.methods.cards import ANSWER, DOCUMENT, Method, Scored, register

METHOD = register(
    Method("attention_last", "raw attention, last layer", signed=False, needs="attention", cost="forward")
)


@METHOD.explains(DOCUMENT)
def document_scores(x, shared) -> Scored:
    from attnlens.attribution.explanations.passes import received_scores  # noqa: PLC0415 (torch: the card is read without it)

    return Scored(x.token_scores(received_scores(shared.bands, "last")))


@METHOD.explains(ANSWER)
def answer_scores(x, rows) -> Scored:
    return Scored(x.sums(rows[-1].mean(axis=0)))
