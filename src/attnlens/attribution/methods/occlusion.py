"""Sentence occlusion: sentence groups (whole sentences packed into spans of at most ``occlusion_max_tokens``)
replaced on the ids by the pad token, every token of a span scoring ``F(x) − F(x with the span occluded)``
(Captum's ``FeatureAblation``, one feature group per span: the numerics of
:mod:`attnlens.attribution.explanations.sentence_occlusion`)."""

from attnlens.attribution.methods.cards import DOCUMENT, Method, Scored, register

METHOD = register(Method("occlusion", "sentence occlusion", signed=True, needs="own", cost="forward per span"))


@METHOD.explains(DOCUMENT)
def document_scores(x, _shared) -> Scored:
    from attnlens.attribution.explanations.sentence_occlusion import occlude_sentences  # noqa: PLC0415 (torch: the card is read without it)

    scores, forwards = occlude_sentences(x)
    return Scored(scores, n_forwards=forwards)
