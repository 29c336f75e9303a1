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

from attnlens.stats import bootstrap_means

#: The layer configurations of a query group's attention: the last layer, and the mean over every layer (heads
#: averaged in both).
CONFIGURATIONS = ("last", "all")
#: The regions every document has beside its named ones.
SPECIAL, OTHER = "special tokens", "other"
#: One row per document, query group, configuration and region (:func:`query_rows`).
ROW_COLUMNS = ("example_id", "group", "configuration", "region", "attention", "attribution", "tokens")
#: The table (:func:`query_attention_table`).
COLUMNS = ("group", "configuration", "region", "n_documents", "attention", "attention_lo", "attention_hi",
           "attribution", "attribution_lo", "attribution_hi", "tokens", "difference", "difference_lo",
           "difference_hi")  # fmt: skip


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


def query_rows(example_id: str, group: str, attention: np.ndarray, scores: np.ndarray,
               masks: dict[str, np.ndarray]) -> list[tuple]:  # fmt: skip
    """:data:`ROW_COLUMNS` rows of one document and query group: ``attention`` ``(L, H, n)`` (what the group's tokens
    pay each key), ``scores`` the attribution ``(n,)`` (its absolute values are its mass), ``masks`` from
    :func:`region_masks`."""
    a = np.asarray(attention, dtype=np.float64)
    views = {"last": a[-1].mean(0), "all": a.mean((0, 1))}
    mass = shares(np.abs(np.asarray(scores, dtype=np.float64)[: a.shape[-1]]), masks)
    tokens = shares(np.ones(a.shape[-1]), masks)
    rows = []
    for configuration in CONFIGURATIONS:
        for region, share in shares(views[configuration], masks).items():
            rows.append((example_id, group, configuration, region, share, mass[region], tokens[region]))
    return rows


def query_attention_table(rows: pd.DataFrame, seed: int, n_boot: int) -> pd.DataFrame:
    """Per query group, configuration and region: the mean over documents of the attention share, of the
    attribution's share and of the token share, with bootstrap 95 % intervals over documents, and ``difference``,
    attention's share minus the attribution's, paired by document."""
    out = []
    for (group, configuration, region), cell in rows.groupby(["group", "configuration", "region"], sort=False):
        values = cell[["attention", "attribution"]].to_numpy(dtype=np.float64)
        values = np.column_stack([values, values[:, 0] - values[:, 1]])
        mean, lo, hi = bootstrap_means(values, seed, n_boot)
        out.append((group, configuration, region, len(cell), mean[0], lo[0], hi[0], mean[1], lo[1], hi[1],
                    float(cell["tokens"].mean()), mean[2], lo[2], hi[2]))  # fmt: skip
    return pd.DataFrame(out, columns=list(COLUMNS))
