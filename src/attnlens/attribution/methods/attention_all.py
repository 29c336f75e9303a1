"""Raw attention of every layer: ``Σ_l Σ_h Σ_i A_ij`` (a document), or averaged over the answer's rows, the heads and
the layers and summed over a source's tokens (an answer): the attention vector of the similarity tables, unscaled."""

from attnlens.attribution.methods.cards import ANSWER, DOCUMENT, Method, Scored, register

METHOD = register(Method("attention_all", "raw attention, all layers", signed=False, needs="attention", cost="forward"))


@METHOD.explains(DOCUMENT)
def document_scores(x, shared) -> Scored:
    from attnlens.attribution.explanations.passes import received_scores  # noqa: PLC0415 (torch: the card is read without it)

    return Scored(x.token_scores(received_scores(shared.bands, "all")))


@METHOD.explains(ANSWER)
def answer_scores(x, rows) -> Scored:
    return Scored(x.sums(rows.mean(axis=(0, 1))))
