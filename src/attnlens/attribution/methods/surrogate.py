"""The ablation surrogate (ContextCite, Cohen-Wang et al. 2024): a sparse linear model of the answer's score on the
cached random ablations of its context (:func:`attnlens.attribution.datamodels.fit_surrogate`); a source scores its
weight. Its target is ContextCite's by default: the logit of the answer with its end token
(``generation.fit_score``, ``generation.fit_end_token``)."""

from attnlens.attribution.datamodels import fit_surrogate
from attnlens.attribution.methods.cards import ANSWER, Method, Scored, register

METHOD = register(
    Method(
        "surrogate",
        "ablation surrogate (ContextCite, Cohen-Wang et al. 2024)",
        signed=True,
        needs="own",
        cost="forward per ablation",
        ablations="random",
    )
)


@METHOD.explains(ANSWER)
def answer_scores(x, _shared) -> Scored:
    if x.random is None:
        raise ValueError("surrogate: the answer has no cached random ablations")
    target, tokens = x.random.target(x.n_answer_tokens)
    weights, _bias = fit_surrogate(x.random.masks, target, tokens, x.alpha)
    return Scored(weights, len(x.random.masks), 0, x.random.seconds)
