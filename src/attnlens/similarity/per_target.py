"""Per-target agreement (rule ``target_agreement``): how well a document's one attention map agrees with the
attribution of each output it is explained for, against chance and against how much those attributions agree
with each other.

A multi-label classifier has one attention pattern per document but one attribution per label
(:meth:`attnlens.tasks.Task.targets`): attention can agree with several labels' attributions only as far as they
agree with each other. The table puts the two side by side, per explained output, in the fixed recipe's metrics:

* ``attention``: the attention–attribution agreement of the ``compare`` rows of that target, and the mean of
  their permutation ``chance``;
* ``between_targets``: the same metric between the target's attribution and each other explained target's
  attribution of the same document (``|a_j|`` against ``|a_k|``, over the same kept tokens: exactly how attention
  is compared with an attribution).

* ``difference``: attention's agreement minus the between-targets agreement, paired by document and target (a
  document's ``attention`` value for the target minus the mean of its ``between_targets`` values for it): below 0,
  with its interval, the other labels' attributions stand in for this label's better than the attention map does.

Means and bootstrap 95 % intervals are over documents (a document's values averaged first).

A classification or a regression explains one output per document: its table has one row per output explained
and no pair (``between_targets`` is empty and says why).

The second table (:func:`target_sensitivity`) asks the same of every explanation method: how much each method's
explanations of one document's targets agree with each other (IG's always; the other methods' with
``explanations.targets: every``). A method whose explanation is the same whatever target it is asked about (raw
attention, attention rollout: they read no output) agrees perfectly with itself across targets and cannot tell
labels apart; the lower a method's agreement, the more its explanation depends on the target.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from attnlens.similarity.metrics import vector_agreement
from attnlens.stats import bootstrap_means, not_computable

#: The ``compare`` rows the table reads: the fixed recipe, its token mask, attention scaled by head importance.
VIEW = {"mode": "fixed", "mask": "fixed", "scaled": True}
#: The metrics of the table (fixed recipe): rank agreement of the magnitudes, overlap of the top tokens.
METRICS = ("kendall_tau_b", "jaccard_top5")
#: The attention of the table: the last layer's, and every layer's (recipes §11 ``att12``, ``attAll``).
CONFIGURATIONS = ("last", "all")

PAIR_COLUMNS = ("example_id", "target", "other", "metric", "value", "n")
SENSITIVITY_COLUMNS = (
    "method",
    "metric",
    "n_documents",
    "n_pairs",
    "between_targets",
    "between_lo",
    "between_hi",
    "note",
)
COLUMNS = (
    "target",
    "name",
    "configuration",
    "metric",
    "n_explanations",
    "attention",
    "attention_lo",
    "attention_hi",
    "chance",
    "n_pairs",
    "between_targets",
    "between_lo",
    "between_hi",
    "difference",
    "difference_lo",
    "difference_hi",
    "note",
)


def pair_agreement(
    example_id: str, scores: Mapping[int, np.ndarray], valid: np.ndarray, rbo_p: Sequence[float], top_fraction: float
) -> pd.DataFrame:
    """:data:`METRICS` between every two explained targets' attributions of one document (``scores``: target →
    ``(n,)`` signed attribution; ``valid``: the tokens the fixed mask keeps). One row per ordered pair
    ``(target, other)``: both metrics are symmetric, so each unordered pair is computed once and written twice,
    once for each target's row of the table."""
    idx = np.flatnonzero(valid)
    rows = []
    targets = list(scores) if len(idx) >= 2 else []
    for n, j in enumerate(targets):
        a = np.asarray(scores[j], dtype=np.float64)[idx]
        for k in targets[n + 1 :]:
            values = vector_agreement(a, np.abs(np.asarray(scores[k], dtype=np.float64)[idx]), rbo_p, top_fraction)
            for first, second in ((j, k), (k, j)):
                rows += [(example_id, int(first), int(second), m, values[m], len(idx)) for m in METRICS]
    return pd.DataFrame(rows, columns=list(PAIR_COLUMNS))


def _mean_ci(rows: pd.DataFrame, seed: int, n_boot: int) -> tuple[float, float, float]:
    """Mean over documents (a document's values averaged first: its explanations, or its pairs, are not
    independent draws) with the bootstrap 95 % interval over documents."""
    per_document = rows.dropna(subset=["value"]).groupby("example_id")["value"].mean().to_numpy()
    if not len(per_document):
        return float("nan"), float("nan"), float("nan")
    mean, lo, hi = bootstrap_means(per_document[:, None], seed, n_boot)
    return float(mean[0]), float(lo[0]), float(hi[0])


def _paired_difference(cell: pd.DataFrame, pairs: pd.DataFrame, seed: int, n_boot: int) -> tuple[float, float, float]:
    """Attention's agreement minus the between-targets agreement, paired: per document and target, ``attention``
    minus the mean of that target's pairs; a document's differences averaged; the mean over documents with its
    bootstrap 95 % interval (NaN where no document has both)."""
    attention = cell.dropna(subset=["value"]).groupby(["example_id", "target"])["value"].mean()
    between = pairs.dropna(subset=["value"]).groupby(["example_id", "target"])["value"].mean()
    both = pd.concat([attention.rename("attention"), between.rename("between")], axis=1, join="inner")
    if both.empty:
        return float("nan"), float("nan"), float("nan")
    per_document = (both["attention"] - both["between"]).groupby(level="example_id").mean().to_numpy()
    mean, lo, hi = bootstrap_means(per_document[:, None], seed, n_boot)
    return float(mean[0]), float(lo[0]), float(hi[0])


def target_agreement(
    similarity: pd.DataFrame, pairs: pd.DataFrame, names: Sequence[str], seed: int, n_boot: int
) -> pd.DataFrame:
    """The per-target table: one row per explained output × :data:`CONFIGURATIONS` × :data:`METRICS`, then the
    same over every explanation (``target`` −1, name ``all``). Means and intervals are over documents
    (``n_explanations``, ``n_pairs``: the values behind them).

    ``similarity``: ``compare`` rows of every target (:func:`~attnlens.similarity.metrics.load_similarity` with
    ``every_target``); ``pairs``: :func:`pair_agreement` rows of every document; ``names``: the outputs' names."""
    view = similarity
    for key, value in VIEW.items():
        view = view[view[key] == value]
    view = view[view["metric"].isin(METRICS) & view["configuration"].isin(CONFIGURATIONS)]
    rows = []
    groups = [(int(t), names[int(t)] if int(t) < len(names) else str(t)) for t in sorted(view["target"].unique())]
    for target, name in [*groups, (-1, "all")]:
        mine = view if target == -1 else view[view["target"] == target]
        # every unordered pair once over all targets; a target's row: its pairs with each other target
        mine_pairs = pairs[pairs["target"] < pairs["other"]] if target == -1 else pairs[pairs["target"] == target]
        for configuration in CONFIGURATIONS:
            for metric in METRICS:
                cell = mine[(mine["configuration"] == configuration) & (mine["metric"] == metric)]
                att, att_lo, att_hi = _mean_ci(cell, seed, n_boot)
                between = mine_pairs[mine_pairs["metric"] == metric]
                btw, btw_lo, btw_hi = _mean_ci(between, seed, n_boot)
                # paired per target: every ordered pair, so that each target has its own pairs (the "all" row too)
                paired = pairs[pairs["metric"] == metric] if target == -1 else between
                diff, diff_lo, diff_hi = _paired_difference(cell, paired, seed, n_boot)
                n_values, n_pairs = int(cell["value"].notna().sum()), int(between["value"].notna().sum())
                note = ""
                if not n_values:
                    note = not_computable(0, "the metric is undefined for every explanation")
                elif not n_pairs:
                    note = "no other target explained on the same documents: no agreement between targets"
                rows.append(
                    (
                        target,
                        name,
                        configuration,
                        metric,
                        n_values,
                        att,
                        att_lo,
                        att_hi,
                        float(cell["chance"].mean()) if len(cell) else float("nan"),
                        n_pairs,
                        btw,
                        btw_lo,
                        btw_hi,
                        diff,
                        diff_lo,
                        diff_hi,
                        note,
                    )
                )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def target_sensitivity(pairs: Mapping[str, pd.DataFrame], seed: int, n_boot: int) -> pd.DataFrame:
    """How much each method's explanations of one document's targets agree with each other: one row per method
    (``pairs``: method → its :func:`pair_agreement` rows, in the order to report) × :data:`METRICS`, the mean over
    documents of each document's mean over its unordered pairs of targets, with its bootstrap 95 % interval. A
    method with no document of two explained targets has an empty row that says why."""
    rows = []
    for method, frame in pairs.items():
        once = frame[frame["target"] < frame["other"]] if len(frame) else frame
        for metric in METRICS:
            cell = once[once["metric"] == metric] if len(once) else once
            mean, lo, hi = _mean_ci(cell, seed, n_boot) if len(cell) else (float("nan"),) * 3
            n_pairs = int(cell["value"].notna().sum()) if len(cell) else 0
            n_docs = int(cell.dropna(subset=["value"])["example_id"].nunique()) if len(cell) else 0
            note = "" if n_pairs else "no document with two targets explained by this method (explanations.targets)"
            rows.append((method, metric, n_docs, n_pairs, mean, lo, hi, note))
    return pd.DataFrame(rows, columns=list(SENSITIVITY_COLUMNS))
