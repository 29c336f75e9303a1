"""Context attribution by ablation: which sources of a context (sentences, paragraphs) a generated answer rests on,
read from the answer's score on contexts with sources removed, and how any ranking of the sources is judged there.

The ablation surrogate is ContextCite's (Cohen-Wang et al., 2024): ``n`` random ablations, each keeping a source
with probability ``keep``; the answer's score on each; a sparse linear model ``F(mask) ≈ w · mask + b`` fitted to
them, whose weights are the sources' scores. The ``i``-th mask of an example is drawn from
``numpy.random.RandomState(seed + i)`` as the authors' code draws it, so one seed gives both the same masks, and
the fit is theirs: scikit-learn's Lasso on standardised masks, fitted to the score per answer token and scaled
back (``tests/unit/attribution/test_surrogate.py`` compares both with the authors' code).

The score ``F`` of an answer of tokens ``t`` is its log-probability ``log P = Σ log p_t`` given the prompt, or
its logit ``log P − log(1 − P)`` (ContextCite's); :func:`answer_scores` gives both from the tokens'
log-probabilities. A ranking is judged on ablations by the linear datamodeling score (Spearman's ρ between the
scores a ranking's linear model predicts on held-out random masks and the actual ones) and by the drop in ``F``
when its top ``k`` sources are removed (:func:`top_k_masks` gives the masks to score); and against the planted truth
by precision and recall at ``k`` (:func:`precision_recall_at_k`).
"""

from __future__ import annotations

import numpy as np

from attnlens.attribution.exact import every_mask, permutation_chains

#: ContextCite's defaults: a source kept with probability ½, the Lasso's α on standardised masks.
KEEP = 0.5
ALPHA = 0.01


def ablation_masks(n_sources: int, n_masks: int, seed: int, keep: float = KEEP) -> np.ndarray:
    """``(n_masks, n_sources)`` bool: mask ``i`` keeps each source with probability ``keep``, drawn from
    ``RandomState(seed + i)`` (one generator a mask, as ContextCite draws them)."""
    if not 0 < keep < 1:
        raise ValueError(f"keep: expected a probability strictly between 0 and 1, got {keep}")
    masks = np.zeros((n_masks, n_sources), dtype=bool)
    for i in range(n_masks):
        masks[i] = np.random.RandomState(seed + i).choice([False, True], size=n_sources, p=[1 - keep, keep])
    return masks


#: Answer ``k``'s random masks are drawn from ``RandomState(seed + MASK_STRIDE · k + i)``: disjoint seeds for up to
#: this many masks an answer (the surrogate's and the held-out ones).
MASK_STRIDE = 100_003


def answer_masks(
    seed: int, k: int, n_sources: int, n_ablations: int, n_heldout: int, keep: float = KEEP
) -> tuple[np.ndarray, np.ndarray]:
    """Answer ``k``'s random masks: the surrogate's ``n_ablations``, mask ``i`` from ``RandomState(seed +
    MASK_STRIDE · k + i)``; then the linear datamodeling score's ``n_heldout``, never one the surrogate was fitted to
    nor one drawn before (:func:`heldout_masks`), so that its score is measured off its own training data."""
    if n_ablations + n_heldout > MASK_STRIDE:
        raise ValueError(f"expected at most {MASK_STRIDE} masks an answer in all, got {n_ablations + n_heldout}")
    fitted = ablation_masks(n_sources, n_ablations, seed + MASK_STRIDE * k, keep)
    return fitted, heldout_masks(fitted, n_heldout, seed + MASK_STRIDE * k + n_ablations, keep)


#: The stream of an answer's orders among the generator's draws (``default_rng([seed, k, stream])``).
ORDER_STREAM = 29


def answer_orders(seed: int, k: int, n_sources: int, n_orders: int) -> np.ndarray:
    """Answer ``k``'s permutation chains (:func:`~attnlens.attribution.exact.permutation_chains`): ``n_orders``
    orders of its sources from ``default_rng([seed, k, ORDER_STREAM])``, each ``n + 1`` masks."""
    return permutation_chains(n_sources, n_orders, np.random.default_rng([seed, k, ORDER_STREAM]))


def heldout_masks(
    fitted: np.ndarray, n: int, seed: int, keep: float = KEEP, limit: int = MASK_STRIDE // 2
) -> np.ndarray:
    """``n`` distinct masks none of which is among ``fitted``: candidate ``j`` drawn from ``RandomState(seed + j)``
    as :func:`ablation_masks` draws, a repeat skipped (drawn without replacement from the masks left). Where fewer
    than ``n`` masks are left, every one of them (in the order of their bits, as
    :func:`~attnlens.attribution.exact.every_mask` orders them); where ``limit`` candidates give fewer than ``n``
    (a ``keep`` far from ½ makes some masks rare), the rest uniformly from the masks left."""
    fitted = np.asarray(fitted, dtype=bool)
    n_sources = fitted.shape[1]
    seen = {m.tobytes() for m in fitted}
    left = 2**n_sources - len(seen)
    if left <= n:
        every = every_mask(n_sources)
        return every[[m.tobytes() not in seen for m in every]]
    out: list[np.ndarray] = []
    for j in range(limit):
        if len(out) == n:
            break
        mask = np.random.RandomState(seed + j).choice([False, True], size=n_sources, p=[1 - keep, keep])
        if mask.tobytes() not in seen:
            seen.add(mask.tobytes())
            out.append(mask)
    rng = np.random.RandomState(seed + limit)
    while len(out) < n:  # rare masks: uniformly among those left (a mask of ``n_sources`` bits, drawn until new)
        mask = rng.randint(0, 2, size=n_sources).astype(bool)
        if mask.tobytes() not in seen:
            seen.add(mask.tobytes())
            out.append(mask)
    return np.stack(out) if out else np.zeros((0, n_sources), dtype=bool)


def answer_scores(token_log_probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The answer's log-probability ``log P = Σ_t log p_t`` over the last axis (its tokens) and its logit
    ``log P − log(1 − P)``, float64; ``log(1 − P)`` as ``log(−expm1(log P))`` near ``P = 1`` and
    ``log1p(−exp(log P))`` below ½, so neither end loses its digits."""
    log_p = np.asarray(token_log_probs, dtype=np.float64).sum(axis=-1)
    if np.any(log_p > 0):
        raise ValueError("token_log_probs: expected log-probabilities (≤ 0), got a sum above 0")
    with np.errstate(divide="ignore"):  # P = 1 exactly: log(1 − P) = −inf, the logit +inf
        log_rest = np.where(log_p > -np.log(2), np.log(-np.expm1(log_p)), np.log1p(-np.exp(log_p)))
    return log_p, log_p - log_rest


def score_of(token_log_probs: np.ndarray, score: str) -> np.ndarray:
    """The answer's score ``F`` (``generation.score``) over the last axis: its log-probability (``log_prob``) or its
    logit (``logit``), as :func:`answer_scores` gives them."""
    log_p, logit = answer_scores(token_log_probs)
    if score not in ("log_prob", "logit"):
        raise ValueError(f"score: expected log_prob or logit, got {score!r}")
    return log_p if score == "log_prob" else logit


def fit_surrogate(
    masks: np.ndarray, scores: np.ndarray, n_tokens: int, alpha: float = ALPHA
) -> tuple[np.ndarray, float]:
    """The sparse linear surrogate ``scores ≈ masks · w + b``: weights ``w`` (one a source) and bias ``b``.

    The Lasso (α = ``alpha``, coordinate descent) is fitted to ``scores / n_tokens`` on masks standardised to zero
    mean and unit variance, as ContextCite fits it, so α means the same for answers of any length; the weights and
    bias are then expressed in the masks' own 0/1 units and the score's scale. A source that every mask keeps (or
    drops) has no variance to fit: its weight is 0."""
    from sklearn.linear_model import Lasso  # noqa: PLC0415 (scikit-learn: 1.7 s to import; the fitting jobs only)
    from sklearn.preprocessing import StandardScaler  # noqa: PLC0415

    masks = np.asarray(masks)
    scores = np.asarray(scores)
    if masks.ndim != 2 or len(masks) != len(scores):
        raise ValueError(f"expected masks (n, sources) and n scores, got {masks.shape} and {scores.shape}")
    x = masks.astype(np.float32)
    scaler = StandardScaler().fit(x)
    lasso = Lasso(alpha=alpha, random_state=0, fit_intercept=True).fit(scaler.transform(x), scores / n_tokens)
    weights = lasso.coef_ / scaler.scale_
    bias = lasso.intercept_ - (scaler.mean_ / scaler.scale_) @ lasso.coef_
    return weights * n_tokens, float(bias * n_tokens)


def linear_datamodeling_score(source_scores: np.ndarray, masks: np.ndarray, scores: np.ndarray) -> float:
    """Spearman's ρ between what ``source_scores`` predict for each mask (``masks · source_scores``; a bias and a
    positive scale change no rank) and the actual ``scores`` on those masks: held-out random ablations, so
    that a ranking fitted to some ablations is judged on others. A ranking whose predictions are constant predicts
    nothing and scores 0 (leaving it out of a mean would flatter it); NaN where the actual scores are constant
    (nothing to predict)."""
    from scipy.stats import spearmanr  # noqa: PLC0415 (scipy.stats: 1 s to import; the judging jobs only)

    predicted = np.asarray(masks, dtype=np.float64) @ np.asarray(source_scores, dtype=np.float64)
    if np.ptp(scores) == 0:
        return float("nan")
    if np.ptp(predicted) == 0:
        return 0.0
    return float(spearmanr(predicted, scores).statistic)


def top_k_masks(source_scores: np.ndarray, ks: tuple[int, ...]) -> np.ndarray:
    """``(len(ks), sources)`` bool: the context without its ``k`` highest-scored sources, for each ``k`` (ties
    broken by position, the earlier source first; ``k`` past the number of sources removes them all)."""
    source_scores = np.asarray(source_scores, dtype=np.float64)
    if np.isnan(source_scores).any():
        raise ValueError("source_scores: expected a score for every source, got NaN")
    order = np.argsort(-source_scores, kind="stable")
    masks = np.ones((len(ks), len(source_scores)), dtype=bool)
    for row, k in enumerate(ks):
        masks[row, order[:k]] = False
    return masks


def leave_one_out_masks(n_sources: int) -> np.ndarray:
    """``(n_sources, n_sources)`` bool: mask ``i`` keeps every source but ``i``."""
    return ~np.eye(n_sources, dtype=bool)


def precision_recall_at_k(source_scores: np.ndarray, relevant: np.ndarray, k: int) -> tuple[float, float]:
    """Against the planted truth (``relevant``: a flag per source): the share of the ``k`` highest-scored sources
    that are relevant, and the share of the relevant sources among them (ties broken as :func:`top_k_masks`
    breaks them; NaN recall where no source is relevant)."""
    relevant = np.asarray(relevant, dtype=bool)
    if len(relevant) != len(source_scores) or k < 1:
        raise ValueError(f"expected a flag per source and k ≥ 1, got {len(relevant)} flags, {k}")
    chosen = ~top_k_masks(source_scores, (k,))[0]
    hits = int((chosen & relevant).sum())
    return hits / int(chosen.sum()), hits / int(relevant.sum()) if relevant.any() else float("nan")
