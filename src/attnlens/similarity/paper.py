"""The paper's layout of the similarity results (recipes §11): Tables 1–2's metrics and their masking
increase, the legacy per-example means, and the single-example top-set view (§11.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnlens.similarity.aggregate import GROUP
from attnlens.similarity.measures import descending_positions, legacy_ranks, legacy_top_set, minmax
from attnlens.similarity.metrics import rbo_name
from attnlens.stats import (
    n_top,
)


@dataclass(frozen=True)
class PaperMetric:
    """One column pair of Tables 1–4: the legacy metric and its fixed counterpart."""

    label: str
    legacy: str
    fixed: str
    legacy_header: str
    fixed_header: str


def paper_metrics(rbo_p: Sequence[float]) -> dict[str, list[PaperMetric]]:
    """The metrics of Table 1 (cosine, Kendall τ, RBO) and Table 2 (top-5 % Jaccard)."""
    p = rbo_p[0]
    return {
        "similarity": [
            PaperMetric("cosine", "cosine", "cosine", "cosine legacy", "cosine fixed"),
            PaperMetric("Kendall τ", "kendall_tau", "kendall_tau_b", "τ legacy", "τ-b fixed"),
            PaperMetric("RBO", "rbo_ao", rbo_name(p), "RBO legacy (AO, p = 1)", f"RBO fixed (p = {p:g}, ext)"),
        ],
        "jaccard": [PaperMetric("top-5 % Jaccard", "jaccard_top5", "jaccard_top5", "Jaccard legacy", "Jaccard fixed")],
    }


#: The masked rows of Tables 1–4: each mode with its own mask.
MASKED_WITH = {"legacy": "legacy", "fixed": "fixed"}
LAYER_LABELS = {"last": "last layer", "all": "all layers", "lower": "lower half", "upper": "upper half"}


def masking_increase(summary: pd.DataFrame, rbo_p: Sequence[float], layers=("last", "all")) -> pd.DataFrame:
    """The paper's "percentage increase due to masking", legacy and fixed, with the chance level's own change.

    ``pct_increase`` = mean over (layers × scaled) of ``(masked − unmasked) / unmasked · 100`` of the
    dataset means (the notebook's formula, §11.2); ``delta_value`` and ``delta_chance`` are the mean
    absolute changes of the metric and of its chance level, and ``delta_excess`` their difference —
    the part of the increase that is not an artefact of the recipe. A percentage of an unmasked mean of 0
    does not exist: such (layers × scaled) cells are left out of ``pct_increase`` and ``note`` says so.
    """
    index = summary.set_index(GROUP)
    rows = []
    for group in paper_metrics(rbo_p).values():
        for m in group:
            for mode, name in (("legacy", m.legacy), ("fixed", m.fixed)):
                pct, dv, dc, at_zero = [], [], [], 0
                for ly in layers:
                    for scaled in (True, False):
                        masked, plain = (mode, ly, scaled, MASKED_WITH[mode], name), (mode, ly, scaled, "none", name)
                        if masked in index.index and plain in index.index:
                            u, v = index.loc[plain], index.loc[masked]
                            if u["mean"]:
                                pct.append((v["mean"] - u["mean"]) / u["mean"] * 100)
                            elif u["mean"] == 0:
                                at_zero += 1
                            dv.append(v["mean"] - u["mean"])
                            dc.append(v["chance"] - u["chance"])
                rows.append(
                    {
                        "metric": m.label,
                        "mode": mode,
                        "name": name,
                        "pct_increase": _mean(pct),
                        "delta_value": _mean(dv),
                        "delta_chance": _mean(dc),
                        "note": _zero_note(at_zero, len(pct)),
                    }
                )
    out = pd.DataFrame(rows)
    out["delta_excess"] = out["delta_value"] - out["delta_chance"]
    return out[[c for c in out.columns if c != "note"] + ["note"]]


def _mean(values: list[float]) -> float:
    """The mean of the values that exist (NaN when none does)."""
    values = [v for v in values if not np.isnan(v)]
    return float(np.mean(values)) if values else np.nan


def _zero_note(at_zero: int, used: int) -> str:
    """Why ``pct_increase`` leaves cells out (an unmasked mean of 0 has no percentage), or ``""``."""
    if not at_zero:
        return ""
    if not used:
        return "pct_increase not computable: the unmasked mean is 0 in every cell"
    return f"pct_increase from {used} of {used + at_zero} cells: the unmasked mean is 0 in the others"


LEGACY_EXAMPLE_NAMES = {
    "last": "attrib_vs_layer12_attn",
    "all": "attrib_vs_all_layer_attn",
    "lower": "attrib_vs_lower_layer_attn",
    "upper": "attrib_vs_upper_layer_attn",
}


def legacy_means_layout(summary: pd.DataFrame) -> pd.DataFrame:
    """The original ``attrib_attn_sim_means.csv`` layout (legacy mode; newer notebook's columns), 6 decimals."""
    columns = {
        "cosine": "mean_cosine_sim",
        "rank_cosine": "mean_cosine_sim_ranks",
        "kendall_tau": "mean_kendall_tau",
        "rbo_ao": "mean_RBO",
        "jaccard_top5": "mean_Jaccard_95th",
    }
    part = summary[(summary["mode"] == "legacy") & summary["mask"].isin(["none", "legacy"])]
    part = part[part["metric"].isin(list(columns))]
    wide = part.pivot_table(index=["configuration", "scaled", "mask"], columns="metric", values="mean").reset_index()
    out = pd.DataFrame({"example": wide["configuration"].map(LEGACY_EXAMPLE_NAMES)})
    for metric, name in columns.items():
        out[name] = wide[metric].round(6) if metric in wide else np.nan
    out["scaled"] = wide["scaled"].astype(bool)
    out["alpha_only"] = wide["mask"] == "legacy"
    return out.sort_values(["example", "scaled", "alpha_only"], kind="stable").reset_index(drop=True)


# --- the single-example in-depth view (recipes §11.1) -------------------------------------------

SET_ORDER = ("shared", "attention_only", "attribution_only")


def top_set_table(
    labels: Sequence[str],
    a: np.ndarray,
    t: np.ndarray,
    mode: str,
    keep: np.ndarray | None,
    special: np.ndarray,
    top_fraction: float,
    legacy_sort: str = "stable",
) -> tuple[pd.DataFrame, int, int]:
    """The attention-only / attribution-only / shared top tokens of one example (§11.1 items 11–13).

    Legacy: ``{i : v_i ≥ pct95(v), v_i ≠ 0}`` of ``mm(v)`` over the whole sequence, masked entries
    zero-filled (the percentile still over the full length). Fixed: the top ``⌈f · n⌉`` by stable
    sort among the kept non-special positions. Ranks (1 = largest) and normalised values come from
    the same configuration on both sides (the original mixed layer-12 ranks into all-layer tables, B-11).

    Returns:
        ``(table, |shared|, |union|)``; the table has columns ``set, token, position,
        attention_norm, attention_rank, attribution_norm, attribution_rank``.
    """
    mag = np.abs(np.asarray(a, dtype=np.float64))
    t = np.asarray(t, dtype=np.float64)
    if mode == "legacy":
        pos = np.arange(len(mag))
        norm_a, norm_t = minmax(mag), minmax(t)
        if keep is not None:
            norm_a, norm_t = np.where(keep, norm_a, 0.0), np.where(keep, norm_t, 0.0)
        top_a, top_t = legacy_top_set(norm_a), legacy_top_set(norm_t)
        rank_a, rank_t = legacy_ranks(norm_a, legacy_sort)[0] + 1, legacy_ranks(norm_t, legacy_sort)[0] + 1
    else:
        pos = np.flatnonzero(~special if keep is None else keep & ~special)
        norm_a, norm_t = minmax(mag[pos]), minmax(t[pos])
        k = n_top(top_fraction, len(pos))
        rank_a, rank_t = descending_positions(mag[pos])[0] + 1, descending_positions(t[pos])[0] + 1
        top_a, top_t = rank_a <= k, rank_t <= k
    member = {"shared": top_a & top_t, "attention_only": top_t & ~top_a, "attribution_only": top_a & ~top_t}
    parts = []
    for name in SET_ORDER:
        idx = np.flatnonzero(member[name])
        part = pd.DataFrame(
            {
                "set": name,
                "token": [labels[pos[i]] for i in idx],
                "position": pos[idx],
                "attention_norm": norm_t[idx],
                "attention_rank": rank_t[idx],
                "attribution_norm": norm_a[idx],
                "attribution_rank": rank_a[idx],
            }
        )
        parts.append(part.sort_values("attribution_rank" if name == "attribution_only" else "attention_rank"))
    shared = int(member["shared"].sum())
    return pd.concat(parts, ignore_index=True), shared, int((top_a | top_t).sum())


def value_counts(table: pd.DataFrame) -> pd.DataFrame:
    """Tokens of each set counted (the notebooks' ``value_counts()``), most frequent overall first."""
    counts = table.groupby(["token", "set"]).size().unstack("set", fill_value=0)
    counts = counts.reindex(columns=list(SET_ORDER), fill_value=0)
    counts["total"] = counts.sum(1)
    counts = counts.reset_index().sort_values(["total", "token"], ascending=[False, True], kind="stable")
    return counts.reset_index(drop=True)
