"""Which explanation can be trusted: one comparison of every explanation method over the test split.

Per example and method (``ig`` the reference, ``random`` the control), four groups of numbers:

* **agreement with IG** — fixed-mode Spearman ρ, Kendall τ-b, top-``f`` Jaccard and RBO at each
  ``p`` of ``|method|`` against ``|IG|`` over the non-special tokens, each with its permutation chance
  level (IG permuted ``n_permutations`` times within the example, as in the similarity tables);
* **faithfulness** — comprehensiveness and sufficiency AOPC over the faithfulness fractions, from
  ``evaluate_faithfulness``'s deletion / insertion curves of the method's ranking;
* **plausibility** — token AUPRC and top-``k`` F1 against the planted evidence (synthetic corpus);
* **cost** — seconds per example, and that divided by one plain forward pass of the same example.

The dataset summary gives, per method and metric, the mean with a paired bootstrap 95 % interval
(:func:`attnlens.stats.bootstrap_means`, the examples resampled once for every column), the mean paired difference
from the baseline (raw attention) with its own bootstrap interval, and a paired Wilcoxon signed-rank test of the
method against the baseline (:func:`attnlens.stats.paired_wilcoxon`) whose p-value is Holm-adjusted over every test
of the table (:func:`attnlens.stats.holm`): a table of a hundred tests stars a difference only where the family
holds it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnlens.sharding import example_rng
from attnlens.similarity.metrics import chance_stats, fixed_agreement, permutations, rbo_name
from attnlens.stats import bootstrap_means, holm, not_computable, paired_wilcoxon

LEADERBOARD_SCHEMA = "explanation_leaderboard/v1"
#: Per-example columns of the comparison (long format).
EXAMPLE_COLUMNS = ("example_id", "method", "metric", "value", "chance")


@dataclass(frozen=True)
class Metric:
    """One leaderboard column."""

    name: str
    group: str  # agreement, faithfulness, plausibility, cost
    label: str
    higher_is_better: bool | None  # None: no direction (cost is reported, not ranked)


def agreement_metrics(top_fraction: float, rbo_p: Sequence[float]) -> list[Metric]:
    """The agreement columns: Spearman, Kendall τ-b, top-``f`` Jaccard, RBO at each ``p``."""
    pct = f"{100 * top_fraction:g}"
    return [
        Metric("spearman", "agreement", "Spearman ρ with IG", True),
        Metric("kendall_tau_b", "agreement", "Kendall τ-b with IG", True),
        Metric(f"jaccard_top{pct}", "agreement", f"top-{pct} % Jaccard with IG", True),
        *[Metric(rbo_name(p), "agreement", f"RBO (p = {p:g}) with IG", True) for p in rbo_p],
    ]


def metrics(top_fraction: float, rbo_p: Sequence[float], plausibility_k: int) -> list[Metric]:
    """Every leaderboard column, in order."""
    return [
        *agreement_metrics(top_fraction, rbo_p),
        Metric("comprehensiveness", "faithfulness", "comprehensiveness AOPC", True),
        Metric("sufficiency", "faithfulness", "sufficiency AOPC", False),
        Metric("auprc", "plausibility", "evidence AUPRC", True),
        Metric("f1", "plausibility", f"evidence top-{plausibility_k} F1", True),
        Metric("seconds", "cost", "seconds per example", None),
        Metric("cost_ratio", "cost", "cost / one forward pass", None),
    ]


def higher_is_better(name: str, group: str) -> bool | None:
    """Whether a larger value of leaderboard column ``name`` (of ``group``) is better; None for the cost columns,
    which are reported, not ranked."""
    if group == "agreement":
        return True
    for metric in metrics(0.05, (), 10):  # the columns after agreement do not depend on these arguments
        if metric.name == name:
            return metric.higher_is_better
    raise KeyError(f"no leaderboard column {name!r} in group {group!r}")


def agreement_rows(
    example_id: str,
    ig: np.ndarray,
    scores: Mapping[str, np.ndarray],
    special: np.ndarray,
    *,
    n_permutations: int,
    top_fraction: float,
    rbo_p: Sequence[float],
    seed: int,
) -> list[tuple]:
    """Agreement of every method's scores with IG on one example, each with its chance level.

    Rows ``(example_id, method, metric, value, chance)``; an example with fewer than two non-special
    tokens gives NaN. IG's permutations are the same for every method of the example.
    """
    valid = ~np.asarray(special, dtype=bool)
    idx = np.flatnonzero(valid)
    wanted = [m.name for m in agreement_metrics(top_fraction, rbo_p)]
    if len(idx) < 2:
        return [(example_id, method, name, np.nan, np.nan) for method in scores for name in wanted]
    perms = permutations(example_rng(seed, example_id, 11), len(idx), n_permutations)
    # magnitudes on both sides: a signed method (gradient × input, occlusion) is compared by where it is large
    vectors = {method: np.abs(np.asarray(s, dtype=np.float64)[idx]) for method, s in scores.items()}
    by_method = fixed_agreement(np.asarray(ig, dtype=np.float64)[idx], vectors, perms, rbo_p, top_fraction)
    renamed = {f"jaccard_top{100 * top_fraction:g}": "jaccard_top5"}
    rows = []
    for method, values in by_method.items():
        for name in wanted:
            value, chance, *_ = chance_stats(values[renamed.get(name, name)])
            rows.append((example_id, method, name, value, chance))
    return rows


def summarise(
    per_example: pd.DataFrame,
    columns: Sequence[Metric],
    baseline: str,
    seed: int,
    n_boot: int,
    references: Collection[str] = (),
) -> pd.DataFrame:
    """Per method and metric: examples, mean, bootstrap 95 % interval, chance, the mean paired difference from
    ``baseline`` with its bootstrap interval (the same resamples), and the paired test vs ``baseline``, its p-value
    and its Holm-adjusted one over every test of the table. Only claims are tested: a column with no direction
    (cost, reported, not ranked) and a row of ``references`` (what the methods are measured against) get their
    difference but no test, so that they do not widen the family Holm adjusts over.

    Returns rows ``method, metric, group, n, mean, lo, hi, chance, versus, difference, difference_lo,
    difference_hi, median_difference, p_value, p_holm, note``.
    """
    out_cols = [
        "method",
        "metric",
        "group",
        "n",
        "mean",
        "lo",
        "hi",
        "chance",
        "versus",
        "difference",
        "difference_lo",
        "difference_hi",
        "median_difference",
        "p_value",
        "p_holm",
        "note",
    ]
    if per_example.empty:
        return pd.DataFrame(columns=out_cols)
    wide = per_example.set_index(["example_id", "method", "metric"])["value"].unstack(["method", "metric"])
    chance = per_example.groupby(["method", "metric"])["chance"].mean()
    keys = list(wide.columns)
    mean, lo, hi = bootstrap_means(wide.to_numpy(dtype=np.float64), seed, n_boot)
    stats = {key: (m, a, b) for key, m, a, b in zip(keys, mean, lo, hi, strict=True)}
    paired = [key for key in keys if key[0] != baseline and (baseline, key[1]) in stats]
    differences = (
        np.stack(
            [wide[key].to_numpy(np.float64) - wide[(baseline, key[1])].to_numpy(np.float64) for key in paired], axis=1
        )
        if paired
        else np.zeros((len(wide), 0))
    )
    # the same seed resamples the same examples as the means': each difference's interval is of the paired one
    d_mean, d_lo, d_hi = bootstrap_means(differences, seed, n_boot)
    difference = {key: (m, a, b) for key, m, a, b in zip(paired, d_mean, d_lo, d_hi, strict=True)}
    group = {m.name: m.group for m in columns}
    methods = list(dict.fromkeys(per_example["method"]))
    rows = []
    for method in methods:
        for metric in columns:
            key = (method, metric.name)
            if key not in stats:
                continue
            values = wide[key].to_numpy(dtype=np.float64)
            n = int(np.isfinite(values).sum())
            m, a, b = stats[key]
            versus, median, p, test_note = "", np.nan, np.nan, ""
            d, d_lo, d_hi = difference.get(key, (np.nan, np.nan, np.nan))
            notes = [] if metric.group == "agreement" else ["chance level: agreement metrics only"]
            if method == baseline:
                notes.append("the baseline of the paired tests")
            elif (baseline, metric.name) not in stats:
                notes.append(f"no paired test: {baseline} has no {metric.name}")
            elif metric.higher_is_better is None:
                notes.append("no paired test: reported, not ranked")
            elif method in references:
                notes.append("no paired test: a reference, not a method")
            else:
                versus = baseline
                _, median, _, p, test_note = paired_wilcoxon(values, wide[(baseline, metric.name)].to_numpy(np.float64))
            if not n:
                notes.append(not_computable(0, "no example has this number"))
            note = "; ".join([*notes, test_note] if test_note else notes)
            head = (method, metric.name, group[metric.name], n, m, a, b, chance.get(key, np.nan), versus)
            rows.append((*head, d, d_lo, d_hi, median, p, np.nan, note))
    out = pd.DataFrame(rows, columns=out_cols)
    out["p_holm"] = holm(out["p_value"].to_numpy(np.float64))
    return out
