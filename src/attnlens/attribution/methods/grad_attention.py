"""Gradient-weighted attention: ``Σ_h Σ_i A_ij · ∂F/∂A_ij`` (signed), ``∂F/∂A_ij = ⟨∂F/∂o_i, v_j⟩`` formed on the
band block by block, summed over the heads of ``explanations.layers``."""

from attnlens.attribution.methods.cards import DOCUMENT, Method, Scored, register

METHOD = register(
    Method("grad_attention", "gradient-weighted attention", signed=True, needs="gradient", cost="forward + backward")
)


@METHOD.explains(DOCUMENT)
def document_scores(x, shared) -> Scored:
    from attnlens.attribution.explanations.passes import grad_attention_score  # noqa: PLC0415 (torch: the card is read without it)

    return Scored(x.token_scores(grad_attention_score(x.model, shared, x.layers)))
