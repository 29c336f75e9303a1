"""Dataset means of the per-example similarity metrics (rule ``aggregate_similarity``): bootstrap
intervals, chance levels and paired tests between configurations.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnlens.similarity.metrics import MASKS
from attnlens.stats import (
    MIN_BOOTSTRAP,
    bootstrap_means,
    not_computable,
    paired_wilcoxon,
)

# --- aggregate_similarity: dataset means, intervals, tests, tables --------------------------------

GROUP = ["mode", "configuration", "scaled", "mask", "metric"]


def summarise(frame: pd.DataFrame, seed: int, n_boot: int) -> pd.DataFrame:
    """Per (mode, configuration, scaled, mask, metric): mean with interval, chance, excess over chance.

    Columns: ``n_examples, mean, ci_lo, ci_hi, chance, excess, excess_lo, excess_hi, mean_z,
    frac_significant`` (share of examples whose permutation p-value is below 0.05), and ``note``: why a
    number is missing (no example with a defined value, or one example: no interval).
    """
    if frame.empty:
        return pd.DataFrame(columns=[*GROUP, "n_examples", "mean", "ci_lo", "ci_hi", "chance", "excess", "note"])
    frame = frame.assign(excess=frame["value"] - frame["chance"], significant=(frame["p_perm"] < 0.05) * 1.0)
    frame.loc[frame["p_perm"].isna(), "significant"] = np.nan
    wide = frame.set_index([*GROUP, "example_id"])[["value", "excess", "chance", "z", "significant"]].unstack(GROUP)
    value_mean, lo, hi = bootstrap_means(wide["value"].to_numpy(), seed, n_boot)
    excess_mean, elo, ehi = bootstrap_means(wide["excess"].to_numpy(), seed, n_boot)
    keys = wide["value"].columns.to_frame(index=False)
    out = keys.assign(
        n_examples=wide["value"].notna().sum(0).to_numpy(),
        mean=value_mean,
        ci_lo=lo,
        ci_hi=hi,
        chance=wide["chance"].mean(0).to_numpy(),
        excess=excess_mean,
        excess_lo=elo,
        excess_hi=ehi,
        mean_z=wide["z"].mean(0).to_numpy(),
        frac_significant=wide["significant"].mean(0).to_numpy(),
    )
    out["note"] = [summary_note(int(n)) for n in out["n_examples"]]
    return out.sort_values(GROUP, kind="stable").reset_index(drop=True)


def summary_note(n_examples: int) -> str:
    """Why a dataset mean or its interval is missing, for ``n_examples`` examples with a defined value."""
    if n_examples == 0:
        return not_computable(0, "the metric is undefined for every example")
    if n_examples < MIN_BOOTSTRAP:
        return not_computable(n_examples, f"a bootstrap interval needs {MIN_BOOTSTRAP} examples")
    return ""


TEST_COLUMNS = (
    "comparison",
    "mode",
    "configuration",
    "metric",
    "held",
    "n",
    "median_difference",
    "statistic",
    "p_value",
    "note",
)


def paired_tests(frame: pd.DataFrame) -> pd.DataFrame:
    """Paired Wilcoxon signed-rank tests per example: masked vs unmasked and scaled vs unscaled.

    ``held`` names what stays fixed in the pair; ``median_difference`` is the median of
    (masked − unmasked) or (scaled − unscaled).
    """
    rows = []
    if frame.empty:
        return pd.DataFrame(columns=list(TEST_COLUMNS))
    keys = ["mode", "configuration", "metric", "example_id", "scaled", "mask"]
    wide = frame.set_index(keys)["value"].unstack(["scaled", "mask"])
    for (mode, layers, metric), part in wide.groupby(level=["mode", "configuration", "metric"], sort=True):
        pairs = [
            ("masked − unmasked", f"mask {mask}, scaled {scaled}", (scaled, mask), (scaled, "none"))
            for scaled in (False, True)
            for mask in ("legacy", "fixed")
        ] + [("scaled − unscaled", f"mask {mask}", (True, mask), (False, mask)) for mask in MASKS]
        for comparison, held, x, y in pairs:
            if x in part and y in part:
                rows.append(
                    (comparison, mode, layers, metric, held, *paired_wilcoxon(part[x].to_numpy(), part[y].to_numpy()))
                )
    return pd.DataFrame(rows, columns=list(TEST_COLUMNS))


SUMMARY_SCHEMA = "similarity_summary/v1"
