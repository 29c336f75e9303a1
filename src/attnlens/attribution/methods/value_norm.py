"""Value-norm weighted attention (Kobayashi et al., EMNLP 2020): ``Σ_h Σ_i ‖A_ij f_h(x_j)‖``, the attention a key
receives times the norm of its value vector through the head's slice of the output projection, summed over the
heads of ``explanations.layers``."""

from attnlens.attribution.methods.cards import DOCUMENT, Method, Scored, register

METHOD = register(
    Method(
        "value_norm",
        "value-norm weighted attention (Kobayashi et al. 2020)",
        signed=False,
        needs="attention",
        cost="forward",
    )
)


@METHOD.explains(DOCUMENT)
def document_scores(x, shared) -> Scored:
    from attnlens.attribution.explanations.passes import value_norm_scores  # noqa: PLC0415 (torch: the card is read without it)

    return Scored(x.token_scores(value_norm_scores(x.model, shared.bands, shared.hidden, x.layers)))
