"""AttnLRP (Achtibat et al., ICML 2024): the relevance of the explained logit (a document) or of the answer's
log-probability (an answer: a sum of its tokens' log-softmax values, which AttnLRP's rules carry through the
log-softmax as a gradient, so what its scores conserve is that sum, not a logit) from one forward and one backward
under AttnLRP's rules (:mod:`attnlens.attribution.lrp`), ``Σ_d e_jd · ∂̃f/∂e_jd``; the scores keep what they explain
and ``δ = f − Σ R``, what biases and softmaxes absorbed. Several documents share one pass
(:meth:`~attnlens.attribution.methods.cards.Method.explains_together`)."""

from attnlens.attribution.methods.cards import ANSWER, DOCUMENT, Method, Scored, register

METHOD = register(
    Method(
        "attnlrp",
        "AttnLRP (Achtibat et al. 2024)",
        signed=True,
        needs="own",
        cost="forward + backward",
        conserves={
            DOCUMENT: "logit",
            ANSWER: "answer log-probability (a sum of log-softmax values, not a logit)",
        },
    )
)


@METHOD.explains_together(DOCUMENT)
def documents_scores(xs) -> list[Scored]:
    from attnlens.attribution.ig import stack_inputs  # noqa: PLC0415 (torch: the card is read without it)
    from attnlens.attribution.lrp import attnlrp_batch  # noqa: PLC0415

    model = xs[0].model
    inputs = stack_inputs([x.inputs for x in xs], model.config.pad_token_id)
    relevance = attnlrp_batch(model, inputs, [x.target for x in xs], [x.n for x in xs])
    return [Scored(r.scores, n_forwards=1, n_backwards=1, explained=r.explained, delta=r.delta) for r in relevance]


@METHOD.explains(DOCUMENT)
def document_scores(x, _shared) -> Scored:
    return documents_scores([x])[0]


@METHOD.explains(ANSWER)
def answer_scores(x, _shared) -> Scored:
    from attnlens.attribution.source_scores import answer_attnlrp  # noqa: PLC0415 (torch: the card is read without it)

    r = answer_attnlrp(x.model, x.input_ids, x.answer_length)
    return Scored(x.sums(r.scores), 1, 1, explained=r.explained, delta=r.delta)
