"""Which conclusions of one run hold across a grid's runs.

:func:`headline_values` turns one run's tables into its headline quantities, one row each (test accuracy and macro
F1; every fixed-mode cell of the similarity summary behind Tables 1–2 with its chance level; the legacy masking
increase; every column of the explanation leaderboard per method; the topology claim's gap and 1-NN accuracy).
Over the runs of a grid:

* :func:`describe` — mean, standard deviation, min and max of every quantity across the seeds of each
  (dataset, model), and across every run of a dataset (all its models);
* :func:`rankings` and :func:`concordance` — each run's ranking of the explanation methods by each leaderboard
  column, and Kendall's W of those rankings across runs;
* :func:`statements` — every ordinal statement a single run's tables make, counted over the runs and judged
  by :func:`attnlens.findings.verdicts.verdict`: one method above another on a leaderboard column, masked
  agreement above unmasked, a metric above its chance level, the topology gap above 0 and 1-NN accuracy above the
  majority rate. A statement is stated the way most runs go, so "A above B" and "B above A" are one statement.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from attnlens.attribution.leaderboard import higher_is_better
from attnlens.findings.verdicts import kendall_w, verdict
from attnlens.generation.answer_leaderboard import REFERENCES, SURROGATE, answer_direction
from attnlens.tasks import get_task

#: One row per headline quantity of one run.
VALUE_COLUMNS = ["family", "item", "metric", "value", "chance", "higher_is_better"]
#: What identifies a run in the grid.
RUN_COLUMNS = ["run", "dataset", "model", "seed"]
#: The model column of a statistic over every model of a dataset.
ALL_MODELS = "all models"
#: The families of leaderboard rows: a classifier's explanation leaderboard, the generation study's answer leaderboard.
LEADERBOARD, ANSWER_LEADERBOARD = "leaderboard", "answer leaderboard"
#: The family of each answer method's linear datamodeling score as a share of the surrogate's.
AGAINST_SURROGATE = "against the surrogate"
#: Its metric.
SHARE_OF_LDS = "LDS / the surrogate's"


def _row(family: str, item: str, metric: str, value: Any, chance: Any = math.nan, higher=True) -> dict[str, Any]:
    value = math.nan if value is None else float(value)
    chance = math.nan if chance is None else float(chance)
    return {
        "family": family,
        "item": item,
        "metric": metric,
        "value": value,
        "chance": chance,
        "higher_is_better": higher,
    }


def surrogate_shares(answer_leaderboard: pd.DataFrame, threshold: float) -> list[dict[str, Any]]:
    """Each answer method's mean linear datamodeling score as a share of the surrogate's (ContextCite's, fitted on
    the same ablations), with ``threshold`` as the level it is judged against; NaN where the surrogate's LDS is not
    above 0 (no share of it means anything)."""
    lds = answer_leaderboard[answer_leaderboard["metric"] == "lds"].set_index("method")["mean"]
    if SURROGATE not in lds.index:
        return []
    reference = float(lds[SURROGATE])
    return [
        _row(AGAINST_SURROGATE, method, SHARE_OF_LDS, float(v) / reference if reference > 0 else math.nan, threshold)
        for method, v in lds.items()
        if method != SURROGATE
    ]


def structure_metric(metric: str, structure: str) -> str:
    """A leaderboard column over one planted structure's answers, as the findings name it."""
    return f"{metric} ({structure})"


def similarity_item(configuration: str, scaled: bool, mask: str) -> str:
    """How a fixed-mode similarity cell is named: its layers, scaling and mask."""
    return f"{configuration} layers, {'scaled' if scaled else 'unscaled'}, mask {mask}"


def headline_values(
    metrics: Mapping[str, Any] | None = None,
    summary: pd.DataFrame | None = None,
    masking: pd.DataFrame | None = None,
    leaderboard: pd.DataFrame | None = None,
    claims: Sequence[Mapping[str, Any]] | None = None,
    answer_leaderboard: pd.DataFrame | None = None,
    surrogate_share: float = 0.8,
    answer_structures: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The headline quantities of one run, from its tables (each ``None`` when the run did not make it).

    Args:
        metrics: ``predictions/metrics.json`` (the ``headline_metrics`` of its :class:`~attnlens.tasks.Task`:
            accuracy and macro F1; MSE and Pearson's r).
        summary: ``similarity/summary.parquet`` (mode, configuration, scaled, mask, metric, mean, chance).
        masking: ``paper/tables/similarity/masking_increase.csv`` (metric, mode, name, pct_increase).
        leaderboard: ``explanations/leaderboard.parquet`` (method, metric, group, mean, chance).
        claims: ``topology/claim.json``'s claims (estimator, dim, gap, knn_accuracy, knn_majority_rate).
        answer_leaderboard: ``generation/leaderboard.parquet`` (method, metric, group, mean, chance): its rows, and
            each answer method's LDS as a share of the surrogate's, against ``surrogate_share``.
        answer_structures: ``generation/leaderboard_by_structure.parquet`` (the same per planted structure): its
            rows, each metric named with its structure (``lds (redundant)``), so that every statement of the
            leaderboard is made, and judged across the runs, per structure too.
    """
    rows = []
    if metrics is not None:
        task = get_task(metrics.get("task"))
        rows += [
            _row(task.label, "test", name, metrics.get(key), higher=higher)
            for name, key, higher in task.headline_metrics
        ]
    if summary is not None:
        for r in summary[summary["mode"] == "fixed"].itertuples(index=False):
            rows.append(
                _row("similarity", similarity_item(r.configuration, bool(r.scaled), r.mask), r.metric, r.mean, r.chance)
            )
    if masking is not None:
        for r in masking[masking["mode"] == "legacy"].itertuples(index=False):
            rows.append(_row("masking increase (legacy)", r.name, "% increase", r.pct_increase))
    if leaderboard is not None:
        for r in leaderboard.itertuples(index=False):
            rows.append(_row("leaderboard", r.method, r.metric, r.mean, r.chance, higher_is_better(r.metric, r.group)))
    if answer_leaderboard is not None:  # the methods' rows: the exact values and the ceiling are references
        answer_leaderboard = answer_leaderboard[~answer_leaderboard["method"].isin(REFERENCES)]
        for r in answer_leaderboard.itertuples(index=False):
            rows.append(_row(ANSWER_LEADERBOARD, r.method, r.metric, r.mean, r.chance, answer_direction(r.metric)))
        rows += surrogate_shares(answer_leaderboard, surrogate_share)
    if answer_structures is not None and len(answer_structures):  # none where the contexts plant no structure
        for r in answer_structures[~answer_structures["method"].isin(REFERENCES)].itertuples(index=False):
            metric = structure_metric(r.metric, r.structure)
            rows.append(_row(ANSWER_LEADERBOARD, r.method, metric, r.mean, r.chance, answer_direction(r.metric)))
    for c in claims or ():
        item = f"{c['estimator']} H{c['dim']}"
        rows.append(_row("topology", item, "gap", c.get("gap"), 0.0))
        rows.append(_row("topology", item, "1-NN accuracy", c.get("knn_accuracy"), c.get("knn_majority_rate")))
    return pd.DataFrame(rows, columns=VALUE_COLUMNS)


def scopes(values: pd.DataFrame) -> Iterable[tuple[str, str, pd.DataFrame]]:
    """(dataset, model, rows) per (dataset, model), then per dataset over all its models when it has several."""
    for (dataset, model), rows in values.groupby(["dataset", "model"], sort=False):
        yield dataset, model, rows
    for dataset, rows in values.groupby("dataset", sort=False):
        if rows["model"].nunique() > 1:
            yield dataset, ALL_MODELS, rows


def describe(values: pd.DataFrame) -> pd.DataFrame:
    """Mean, standard deviation (n − 1), min and max of every quantity across the runs of each scope.

    ``values``: :func:`headline_values` rows with the :data:`RUN_COLUMNS` added. A quantity a run could not compute
    (NaN) is left out of that run's count (``n_runs``).
    """
    out = []
    for dataset, model, rows in scopes(values):
        for (family, item, metric), group in rows.groupby(["family", "item", "metric"], sort=False):
            v = group["value"].to_numpy(dtype=float)
            v = v[np.isfinite(v)]
            missing = len(group) - v.size
            note = "not computable in any run" if v.size == 0 else "one run: no spread" if v.size == 1 else ""
            if missing and v.size:
                note = "; ".join(filter(None, [note, f"not computable in {missing} of {len(group)} runs"]))
            out.append(
                {
                    "dataset": dataset,
                    "model": model,
                    "family": family,
                    "item": item,
                    "metric": metric,
                    "n_runs": int(v.size),
                    "mean": float(v.mean()) if v.size else math.nan,
                    "std": float(v.std(ddof=1)) if v.size > 1 else math.nan,
                    "min": float(v.min()) if v.size else math.nan,
                    "max": float(v.max()) if v.size else math.nan,
                    "note": note,
                }
            )
    return pd.DataFrame(out)


def _ranked(values: pd.DataFrame) -> pd.DataFrame:
    """The leaderboard rows with a direction, as scores where higher ranks first."""
    board = values[values["family"].isin([LEADERBOARD, ANSWER_LEADERBOARD]) & values["higher_is_better"].notna()]
    board = board.copy()
    sign = np.where(board["higher_is_better"].astype(bool), 1.0, -1.0)
    board["score"] = board["value"].to_numpy(dtype=float) * sign
    return board


def rankings(values: pd.DataFrame) -> pd.DataFrame:
    """Each run's ranking of the explanation (or answer) methods by each leaderboard column (1 = best; ties share
    the average rank; a method without a value is not ranked)."""
    board = _ranked(values)
    board = board[np.isfinite(board["score"])].copy()
    board["rank"] = board.groupby(["run", "metric"])["score"].rank(ascending=False, method="average")
    return board[[*RUN_COLUMNS, "metric", "item", "value", "rank"]].rename(columns={"item": "method"})


def concordance(values: pd.DataFrame) -> pd.DataFrame:
    """Kendall's W of the runs' rankings of the methods, per scope and leaderboard column, over the methods every
    run of the scope ranks; with the methods in order of their mean rank."""
    out = []
    for dataset, model, rows in scopes(_ranked(values)):
        for metric, group in rows.groupby("metric", sort=False):
            table = group.pivot_table(index="run", columns="item", values="score", aggfunc="first")
            table = table.dropna(axis=1)
            w = kendall_w(table.to_numpy()) if table.shape[0] >= 2 else math.nan
            order = table.rank(axis=1, ascending=False).mean().sort_values().index.tolist()
            out.append(
                {
                    "dataset": dataset,
                    "model": model,
                    "metric": metric,
                    "n_runs": table.shape[0],
                    "n_methods": table.shape[1],
                    "kendall_w": w,
                    "mean_ranking": " > ".join(order),
                }
            )
    return pd.DataFrame(out)


def _judge(
    base: dict[str, Any],
    above: np.ndarray,
    below: np.ndarray,
    n_runs: int,
    texts: tuple[str, str],
    min_share: float,
    alpha: float,
) -> dict[str, Any]:
    """One statement: per run, whether it goes one way (``above``) or the other (``below``); stated the way most
    runs go (``texts`` = (that way, the other))."""
    k_above, k_below = int(above.sum()), int(below.sum())
    k, text = (k_above, texts[0]) if k_above >= k_below else (k_below, texts[1])
    n = k_above + k_below
    result, p, note = verdict(k, n, n_runs, min_share, alpha)
    return {
        **base,
        "statement": text,
        "runs_holding": k,
        "runs_untied": n,
        "n_runs": n_runs,
        "share": k / n_runs if n_runs else math.nan,
        "p_value": p,
        "verdict": result,
        "note": note,
    }


def _per_run(frame: pd.DataFrame, runs: list[str], column: str = "value") -> np.ndarray:
    """``column`` of one quantity's rows, one value per run in the order of ``runs`` (NaN where a run has none)."""
    return frame.set_index("run")[column].reindex(runs).to_numpy(dtype=float)


def _best_method(
    base: dict[str, Any],
    metric: str,
    by_method: Mapping[str, np.ndarray],
    higher: bool,
    n_runs: int,
    min_share: float,
    alpha: float,
) -> dict[str, Any]:
    """ "A is the best method on ``metric``": A is the method best in most runs (strictly: a run whose best is tied
    goes neither way). The sign test against one half is conservative here: were the rankings random, a method would
    be best in 1 / (number of methods) of the runs."""
    names = list(by_method)
    table = np.vstack([by_method[m] for m in names])  # (methods, runs)
    table = table if higher else -table
    filled = np.where(np.isfinite(table), table, -np.inf)
    top = filled.max(axis=0)
    unique = (filled == top).sum(axis=0) == 1
    best = np.where(unique & np.isfinite(top), filled.argmax(axis=0), -1)
    counts = np.bincount(best[best >= 0], minlength=len(names))
    winner = int(counts.argmax())
    said = f"{names[winner]} is the best method on {metric}"
    if not counts.any():
        said = f"no method is the best on {metric} alone in any run (ties, or no values)"
    return _judge(
        {**base, "kind": "best method", "metric": metric},
        best == winner,
        (best >= 0) & (best != winner),
        n_runs,
        (said, f"no method is the best on {metric} in most runs ({names[winner]} most often)"),
        min_share,
        alpha,
    )


def statements(values: pd.DataFrame, min_share: float, alpha: float) -> pd.DataFrame:
    """Every ordinal statement of a single run's tables, counted over the runs of each scope, with its verdict."""
    out = []
    for dataset, model, rows in scopes(values):
        runs = rows["run"].unique().tolist()
        n_runs = len(runs)
        base = {"dataset": dataset, "model": model}

        board = rows[rows["family"].isin([LEADERBOARD, ANSWER_LEADERBOARD])]
        for metric, group in board.groupby("metric", sort=False):
            higher = group["higher_is_better"].iloc[0]
            if higher is None or (isinstance(higher, float) and math.isnan(higher)):
                continue
            methods = group["item"].unique().tolist()
            by_method = {m: _per_run(group[group["item"] == m], runs) for m in methods}
            out.append(_best_method(base, metric, by_method, bool(higher), n_runs, min_share, alpha))
            word = "above" if higher else "below"
            for a, b in itertools.combinations(methods, 2):
                x, y = by_method[a], by_method[b]
                better_a = (x > y) if higher else (x < y)
                better_b = (y > x) if higher else (y < x)
                out.append(
                    _judge(
                        {**base, "kind": "method ordering", "metric": metric},
                        better_a,
                        better_b,
                        n_runs,
                        (
                            f"{a} better than {b} on {metric} ({word} it)",
                            f"{b} better than {a} on {metric} ({word} it)",
                        ),
                        min_share,
                        alpha,
                    )
                )
        sim = rows[rows["family"] == "similarity"]
        for (item, metric), group in sim.groupby(["item", "metric"], sort=False):
            v, c = _per_run(group, runs), _per_run(group, runs, "chance")
            out.append(
                _judge(
                    {**base, "kind": "above chance", "metric": metric},
                    v > c,
                    v < c,
                    n_runs,
                    (f"{metric} ({item}) above chance", f"{metric} ({item}) below chance"),
                    min_share,
                    alpha,
                )
            )
            if ", mask fixed" in item:
                none = item.replace(", mask fixed", ", mask none")
                unmasked = sim[(sim["item"] == none) & (sim["metric"] == metric)]
                if len(unmasked):
                    u = _per_run(unmasked, runs)
                    said = f"{metric} ({item.replace(', mask fixed', '')}) masked"
                    out.append(
                        _judge(
                            {**base, "kind": "masked vs unmasked", "metric": metric},
                            v > u,
                            v < u,
                            n_runs,
                            (f"{said} > unmasked", f"{said} < unmasked"),
                            min_share,
                            alpha,
                        )
                    )
        for item, group in rows[rows["family"] == AGAINST_SURROGATE].groupby("item", sort=False):
            v, c = _per_run(group, runs), _per_run(group, runs, "chance")
            share = f"{np.nanmax(c):.0%}" if np.isfinite(c).any() else "the set share"
            out.append(
                _judge(
                    {**base, "kind": "against the surrogate", "metric": "lds"},
                    v >= c,
                    v < c,
                    n_runs,
                    (
                        f"{item} reaches {share} of the surrogate's LDS",
                        f"{item} stays under {share} of the surrogate's LDS",
                    ),
                    min_share,
                    alpha,
                )
            )
        for (item, metric), group in rows[rows["family"] == "topology"].groupby(["item", "metric"], sort=False):
            v, c = _per_run(group, runs), _per_run(group, runs, "chance")
            reference = "0" if metric == "gap" else "the majority rate"
            out.append(
                _judge(
                    {**base, "kind": "topology claim", "metric": metric},
                    v > c,
                    v < c,
                    n_runs,
                    (f"{metric} ({item}) above {reference}", f"{metric} ({item}) below {reference}"),
                    min_share,
                    alpha,
                )
            )
    return pd.DataFrame(out)


#: The verdicts of the sanity check (at the deepest level of the cascade).
FAILS, PASSES = "fails the sanity check", "passes the sanity check"
#: Why a method's scores on a randomised model can follow position.
POSITIONAL = (
    "a bias of the architecture, not of what the model learned (in a causal layer a token reaches every position "
    "after it, so the attention it receives and what it feeds forward fall with its position whatever the weights)"
)


def sanity_verdicts(sanity: pd.DataFrame, max_rho: float) -> pd.DataFrame:
    """Per scope, method and level of the randomisation cascade (:mod:`attnlens.attribution.sanity_check`): the mean
    over runs of each run's mean Spearman ρ over its examples; at the deepest level (every layer and the head drawn
    anew) the verdict: :data:`FAILS` when the mean ρ stays above ``max_rho``.

    ``sanity``: rule sanity_check's or answer_sanity's rows (example_id, method, level, layers, spearman, position)
    with :data:`RUN_COLUMNS`. Beside the verdict, the mean ρ of the randomised scores with position; where it is
    above ``max_rho`` in size, the note says the scores follow position (:data:`POSITIONAL`).
    """
    keys = [*RUN_COLUMNS, "method", "level", "layers"]
    per_run = sanity.groupby(keys, sort=False)[["spearman", "position"]].mean().reset_index()
    out = []
    for dataset, model, rows in scopes(per_run):
        deepest = rows["layers"].max()
        for (method, level, layers), group in rows.groupby(["method", "level", "layers"], sort=False):
            v = group["spearman"].to_numpy(dtype=float)
            v = v[np.isfinite(v)]
            mean = float(v.mean()) if v.size else math.nan
            position = float(np.nanmean(group["position"])) if group["position"].notna().any() else math.nan
            verdict, note = "", ""
            if layers == deepest:
                if not v.size:
                    note = "not computable: constant scores in every run"
                verdict = (FAILS if mean > max_rho else PASSES) if v.size else ""
                if abs(position) > max_rho:
                    note = f"its scores on the randomised model follow position (mean ρ {position:+.2f}): {POSITIONAL}"
            out.append(
                {
                    "dataset": dataset,
                    "model": model,
                    "method": method,
                    "level": level,
                    "layers": int(layers),
                    "n_runs": int(v.size),
                    "mean_rho": mean,
                    "min_rho": float(v.min()) if v.size else math.nan,
                    "max_rho": float(v.max()) if v.size else math.nan,
                    "mean_position_rho": position,
                    "verdict": verdict,
                    "note": note,
                }
            )
    return pd.DataFrame(out).sort_values(["dataset", "model", "method", "layers"], kind="stable", ignore_index=True)


def flag_failures(said: pd.DataFrame, sanity: pd.DataFrame) -> pd.DataFrame:
    """The statements, with a note on every method ordering that involves a method failing the sanity check in
    its scope: how faithful such a method looks says nothing about the model."""
    if said.empty or sanity.empty:
        return said
    failing = sanity[sanity["verdict"] == FAILS]
    out = said.copy()
    for row in failing.itertuples(index=False):
        hit = (
            (out["kind"] == "method ordering")
            & (out["dataset"] == row.dataset)
            & (out["model"] == row.model)
            & (
                out["statement"].str.startswith(f"{row.method} better than ")
                | out["statement"].str.contains(f" better than {row.method} on ", regex=False)
            )
        )
        flag = f"{row.method} {FAILS}"
        out.loc[hit, "note"] = [f"{n}; {flag}" if n else flag for n in out.loc[hit, "note"]]
    return out
