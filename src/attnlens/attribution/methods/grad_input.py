"""Gradient × input: ``Σ_d e_jd · ∂F/∂e_jd`` at the embedding output (Captum's ``InputXGradient``), signed; for an
answer, of its log-probability, summed over each source's tokens."""

from attnlens.attribution.methods.cards import ANSWER, DOCUMENT, Method, Scored, register

METHOD = register(
    Method("grad_input", "gradient × input", signed=True, needs="embedding_gradient", cost="forward + backward")
)


@METHOD.explains(DOCUMENT)
def document_scores(x, shared) -> Scored:
    return Scored(x.token_scores((shared.gradient[0] * shared.embeddings[0]).sum(-1)))


@METHOD.explains(ANSWER)
def answer_scores(x, token_scores) -> Scored:
    return Scored(x.sums(token_scores))
