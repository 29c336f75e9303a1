"""Integrated gradients of an answer's log-probability at the embedding output (Captum's Gauss–Legendre IG), from
the prompt with its context's tokens replaced by the pad token to the prompt itself; a source scores the sum of its
tokens'. A document's IG is the reference every method is compared with (rule ``attribute``), not a method here."""

from attnlens.attribution.methods.cards import ANSWER, Method, Scored, register

METHOD = register(
    Method(
        "integrated_gradients",
        "integrated gradients (Captum)",
        signed=True,
        needs="own",
        cost="forward + backward per step",
        conserves={ANSWER: "answer log-probability gap from the baseline"},
    )
)


@METHOD.explains(ANSWER)
def answer_scores(x, _shared) -> Scored:
    from attnlens.attribution.source_scores import answer_integrated_gradients  # noqa: PLC0415 (torch: the card is read without it)

    a = answer_integrated_gradients(x.model, x.input_ids, x.baseline(), x.answer_length, x.ig_steps, x.batch_size)
    # delta as every method's: what it explains less Σ its token scores (IG's own δ has the other sign); the tokens
    # outside the context are the baseline's own, so their scores are 0 and the sources hold every token's score
    return Scored(x.sums(a.scores), a.n_steps + 2, a.n_steps, explained=a.gap, delta=-a.delta)
