"""Saliency: ``Σ_d |∂F/∂e_jd|`` at the embedding output (Captum's ``Saliency``), read from the shared gradient."""

from attnlens.attribution.methods.cards import DOCUMENT, Method, Scored, register

METHOD = register(
    Method("saliency", "saliency |∂F/∂e|", signed=False, needs="embedding_gradient", cost="forward + backward")
)


@METHOD.explains(DOCUMENT)
def document_scores(x, shared) -> Scored:
    return Scored(x.token_scores(shared.gradient[0].abs().sum(-1)))
