"""Where attention and attribution fall: the shares of a query group's attention and of the attribution's mass
that land in named regions of a document (its planted evidence, its distractors, a question, an answer).

The per-token comparisons (:mod:`attnlens.similarity.metrics`) ask whether attention *ranks* tokens as the
attribution does. A long document asks something coarser first: does the attention of the tokens the head reads
(``[CLS]``; a question's and an answer's tokens, :meth:`attnlens.tasks.Task.query_groups`) reach the sentences the
prediction depends on at all, a supporting sentence further away than the window, say, and does the attribution
put its mass there? Every share is of one document: a region's part of the total, beside the region's part of the
tokens (what a uniform spread would give).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlens.stats import bootstrap_means, not_computable

#: The layer configurations of a query group's attention: the last layer, and the mean over every layer (heads
#: averaged in both).
CONFIGURATIONS = ("last", "all")
#: The regions every document has beside its named ones.
SPECIAL, OTHER = "special tokens", "other"
#: The fewest tokens of a region whose rank agreement is computed (fewer: undefined, NaN).
MIN_TOKENS = 3
#: One row per document, query group, configuration and region (:func:`query_rows`).
ROW_COLUMNS = ("example_id", "group", "configuration", "region", "attention", "attribution", "tokens", "kendall_tau_b")
#: The table (:func:`query_attention_table`).
COLUMNS = (
    "group",
    "configuration",
    "region",
    "n_documents",
    "attention",
    "attention_lo",
    "attention_hi",
    "attribution",
    "attribution_lo",
    "attribution_hi",
    "tokens",
    "difference",
    "difference_lo",
    "difference_hi",
    "n_tau",
    "kendall_tau_b",
    "tau_lo",
    "tau_hi",
    "note",
)


def region_masks(named: dict[str, np.ndarray], special: np.ndarray) -> dict[str, np.ndarray]:
    """Disjoint ``(n,)`` masks covering every token: the ``named`` regions in their order (a token in two counts in
    the first), the ``special`` tokens not in one, then every other token (:data:`SPECIAL`, :data:`OTHER`)."""
    taken = np.zeros(len(special), dtype=bool)
    out = {}
    for name, mask in {**named, SPECIAL: np.asarray(special, dtype=bool)}.items():
        out[name] = np.asarray(mask, dtype=bool) & ~taken
        taken |= out[name]
    out[OTHER] = ~taken
    return out


def shares(values: np.ndarray, masks: dict[str, np.ndarray]) -> dict[str, float]:
    """Each region's share of the total of the non-negative ``values`` (NaN when the total is 0)."""
    v = np.asarray(values, dtype=np.float64)
    total = v.sum()
    return {name: float(v[mask].sum() / total) if total > 0 else float("nan") for name, mask in masks.items()}


def region_tau(attention: np.ndarray, magnitude: np.ndarray, mask: np.ndarray) -> float:
    """Kendall's τ_b of the attention and the attribution's magnitude over the tokens of one region (scipy's, ties
    counted); NaN for fewer than :data:`MIN_TOKENS` tokens or a constant side."""
    from scipy.stats import kendalltau  # noqa: PLC0415 (scipy.stats: 1 s to import; this rule only)

    if mask.sum() < MIN_TOKENS or np.ptp(attention[mask]) == 0 or np.ptp(magnitude[mask]) == 0:
        return float("nan")
    return float(kendalltau(attention[mask], magnitude[mask]).statistic)


def query_rows(
    example_id: str, group: str, attention: np.ndarray, scores: np.ndarray, masks: dict[str, np.ndarray]
) -> list[tuple]:
    """:data:`ROW_COLUMNS` rows of one document and query group: ``attention`` ``(L, H, n)`` (what the group's tokens
    pay each key), ``scores`` the attribution ``(n,)`` (its absolute values are its mass), ``masks`` from
    :func:`region_masks`: each region's share of the attention, of the mass and of the tokens, and the rank
    agreement of attention and mass inside the region (:func:`region_tau`: agreement restricted to a supporting
    sentence, say)."""
    a = np.asarray(attention, dtype=np.float64)
    views = {"last": a[-1].mean(0), "all": a.mean((0, 1))}
    magnitude = np.abs(np.asarray(scores, dtype=np.float64)[: a.shape[-1]])
    mass, tokens = shares(magnitude, masks), shares(np.ones(a.shape[-1]), masks)
    rows = []
    for configuration in CONFIGURATIONS:
        for region, share in shares(views[configuration], masks).items():
            tau = region_tau(views[configuration], magnitude, masks[region])
            rows.append((example_id, group, configuration, region, share, mass[region], tokens[region], tau))
    return rows


def query_attention_table(rows: pd.DataFrame, seed: int, n_boot: int) -> pd.DataFrame:
    """Per query group, configuration and region: the mean over documents of the attention share, of the
    attribution's share and of the token share, with bootstrap 95 % intervals over documents; ``difference``,
    attention's share minus the attribution's, paired by document; and the mean τ_b inside the region over the
    ``n_tau`` documents where it is defined."""
    out = []
    for (group, configuration, region), cell in rows.groupby(["group", "configuration", "region"], sort=False):
        values = cell[["attention", "attribution", "kendall_tau_b"]].to_numpy(dtype=np.float64)
        values = np.column_stack([values[:, :2], values[:, 0] - values[:, 1], values[:, 2]])
        mean, lo, hi = bootstrap_means(values, seed, n_boot)
        n_tau = int(cell["kendall_tau_b"].notna().sum())
        notes = []
        if np.isnan(lo[:3]).any():
            notes.append(not_computable(len(cell), "an interval needs two documents or more"))
        if np.isnan(mean[3]):
            why = (
                f"τ_b needs {MIN_TOKENS} tokens of the region or more, neither side constant over them (attention "
                "a query cannot reach is 0: keys outside a local token's window, or after it in a causal "
                "model)"
            )
            notes.append(not_computable(n_tau, why))
        elif np.isnan(lo[3]):
            notes.append(not_computable(n_tau, "τ_b's interval needs two documents with it or more"))
        out.append(
            (
                group,
                configuration,
                region,
                len(cell),
                mean[0],
                lo[0],
                hi[0],
                mean[1],
                lo[1],
                hi[1],
                float(cell["tokens"].mean()),
                mean[2],
                lo[2],
                hi[2],
                n_tau,
                mean[3],
                lo[3],
                hi[3],
                "; ".join(notes),
            )
        )
    return pd.DataFrame(out, columns=list(COLUMNS))
