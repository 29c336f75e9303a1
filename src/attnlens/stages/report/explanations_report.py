"""The explanation methods' results: the leaderboard (agreement with IG, faithfulness, plausibility) and the
faithfulness curves and AOPC tables.

A light job (:mod:`attnlens.stages.report`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnlens.attribution.artifacts import (
    load_attributions,
    load_explanations,
    scores_by_example,
)
from attnlens.attribution.leaderboard import (
    EXAMPLE_COLUMNS,
    LEADERBOARD_SCHEMA,
    agreement_rows,
    metrics,
)
from attnlens.attribution.leaderboard import summarise as summarise_leaderboard
from attnlens.attribution.methods import CONTROL, REFERENCE, method_names
from attnlens.attribution.ranking_faithfulness import FAITHFULNESS_SCHEMA, PLAUSIBILITY_SCHEMA, aopc
from attnlens.data.tokens import load_vocabulary, structural_ids
from attnlens.io import (
    StrPath,
    load_parquet,
    provenance,
    save_parquet,
)
from attnlens.pipeline.config import (
    ExplanationsConfig,
    FaithfulnessConfig,
    FiguresConfig,
    SimilarityConfig,
)
from attnlens.pipeline.entry import stage
from attnlens.render.figures import (
    plot_faithfulness_curves,
    plot_leaderboard,
    save_figure,
)
from attnlens.render.tables import (
    leaderboard_table,
    summary_table,
    write_table,
)
from attnlens.tasks import get_task

logger = logging.getLogger(__name__)


@stage("faithfulness", "figures")
def run_plot_faithfulness(
    cfg: FaithfulnessConfig,
    figures_cfg: FiguresConfig,
    curves_path: StrPath,
    plausibility_path: StrPath,
    figure_stem: StrPath,
    tables_dir: StrPath,
) -> None:
    """Rule ``plot_faithfulness``: mean deletion / insertion curves, AOPC and plausibility tables."""
    curves, prov = load_parquet(curves_path, FAITHFULNESS_SCHEMA)
    plaus, _ = load_parquet(plausibility_path, PLAUSIBILITY_SCHEMA)
    save_figure(
        plot_faithfulness_curves(curves, get_task(prov.get("task")).readout_label), figure_stem, figures_cfg.dpi
    )
    per_example = aopc(curves, cfg.fractions)
    fractions = ", ".join(f"{f:g}" for f in cfg.fractions)
    aopc_table = summary_table(per_example, ["comprehensiveness", "sufficiency"], cfg.seed)
    cap = (
        f"AOPC over fractions {fractions} of the tokens, mean with bootstrap 95 % interval "
        "(higher comprehensiveness, lower sufficiency = more faithful)"
    )
    write_table(aopc_table, Path(tables_dir) / "faithfulness_aopc", cap)
    cap = f"plausibility against the planted evidence: token AUPRC and top-{cfg.plausibility_k} precision / recall / F1"
    if len(plaus):
        ptable = summary_table(plaus, ["auprc", "precision", "recall", "f1"], cfg.seed)
    else:
        logger.warning("no planted evidence in this dataset: the plausibility table says so")
        ptable = pd.DataFrame({"note": ["no example of this dataset has planted evidence (synthetic corpus only)"]})
    write_table(ptable, Path(tables_dir) / "plausibility", cap)


@stage("explanations", "similarity", "faithfulness", "figures")
def run_explanation_leaderboard(
    cfg: ExplanationsConfig,
    sim: SimilarityConfig,
    faith: FaithfulnessConfig,
    figures: FiguresConfig,
    explanation_paths: Sequence[StrPath],
    attribution_paths: Sequence[StrPath],
    curves_path: StrPath,
    plausibility_path: StrPath,
    model_dir: StrPath,
    comparison_path: StrPath,
    summary_path: StrPath,
    figure_stem: StrPath,
    tables_dir: StrPath,
) -> pd.DataFrame:
    """Rule ``explanation_leaderboard``: the comparison over the test split, its table and its figure."""
    tokenizer = load_vocabulary(model_dir)
    explanations = load_explanations(explanation_paths)
    attributions = load_attributions(attribution_paths)
    curves, _ = load_parquet(curves_path, FAITHFULNESS_SCHEMA)
    plaus, _ = load_parquet(plausibility_path, PLAUSIBILITY_SCHEMA)
    per_ranking = aopc(curves, faith.fractions) if len(curves) else pd.DataFrame(columns=["example_id", "ranking"])
    per_example = comparison_frame(cfg, sim, explanations, attributions, per_ranking, plaus, structural_ids(tokenizer))
    columns = metrics(sim.top_fraction, sim.rbo_p, faith.plausibility_k)
    summary = summarise_leaderboard(per_example, columns, cfg.baseline, sim.seed, sim.n_boot)
    n = attributions["example_id"].nunique()
    missing = sorted({REFERENCE, CONTROL, *cfg.methods} - set(per_ranking.get("ranking", [])))
    notes = [f"no faithfulness curves for {', '.join(missing)} (not in faithfulness.rankings)"] if missing else []
    prov = provenance(LEADERBOARD_SCHEMA, {**cfg.to_dict(), **sim.to_dict()}, sim.seed, n_examples=n, notes=notes)
    save_parquet(per_example, comparison_path, prov)
    save_parquet(summary, summary_path, prov)
    tables = Path(tables_dir)
    caption = (
        f"explanation leaderboard over {n} test examples: mean [bootstrap 95 % interval]; agreement = |method| vs "
        f"|IG| on the non-special tokens (chance = IG permuted {sim.n_permutations} times); AOPC over fractions "
        f"{', '.join(f'{f:g}' for f in faith.fractions)}; plausibility against the planted evidence; cost per "
        f"example and per forward pass; * paired Wilcoxon p < 0.05 against {cfg.baseline}, Holm-adjusted over the "
        "table's tests"
    )
    write_table(leaderboard_table(summary, columns), tables / "explanation_leaderboard", caption)
    caption = f"explanation leaderboard, every number (paired Wilcoxon signed-rank tests against {cfg.baseline})"
    write_table(summary, tables / "explanation_leaderboard_long", caption)
    save_figure(plot_leaderboard(summary, columns, cfg.baseline), figure_stem, figures.dpi)
    for note in notes:
        logger.warning(note)
    logger.info("%d examples, %d methods, %d metrics", n, summary["method"].nunique(), summary["metric"].nunique())
    return summary


def comparison_frame(
    cfg: ExplanationsConfig,
    sim: SimilarityConfig,
    explanations: pd.DataFrame,
    attributions: pd.DataFrame,
    per_ranking: pd.DataFrame,
    plausibility: pd.DataFrame,
    special_set: set[int],
) -> pd.DataFrame:
    """Per example, method and metric (long): agreement with IG, faithfulness, plausibility and cost."""
    scores = scores_by_example(explanations, method_names())
    forward = explanations.groupby("example_id")["forward_seconds"].first()
    cost = explanations.set_index(["example_id", "method"])["seconds"]
    rows: list[tuple] = []
    for row in attributions.itertuples(index=False):
        eid = row.example_id
        if eid not in scores:
            raise ValueError(f"{eid}: IG explained it but the explain shards did not")
        ids = [int(i) for i in row.input_ids]
        special = np.array([i in special_set for i in ids], dtype=bool)
        rows += agreement_rows(
            eid,
            np.asarray(row.scores, dtype=np.float64),
            scores[eid],
            special,
            n_permutations=sim.n_permutations,
            top_fraction=sim.top_fraction,
            rbo_p=sim.rbo_p,
            seed=sim.seed,
        )
        fwd = float(forward[eid])
        for method in [REFERENCE, *scores[eid]]:
            s = float(row.seconds) if method == REFERENCE else float(cost[(eid, method)])
            rows += [(eid, method, "seconds", s, np.nan), (eid, method, "cost_ratio", s / fwd, np.nan)]
    known = {REFERENCE, CONTROL, *cfg.methods}
    for frame, names in ((per_ranking, ("comprehensiveness", "sufficiency")), (plausibility, ("auprc", "f1"))):
        frame = frame[frame["ranking"].isin(known)]
        for name in names:
            rows += [
                (e, r, name, float(v), np.nan)
                for e, r, v in zip(frame["example_id"], frame["ranking"], frame[name], strict=True)
            ]
    out = pd.DataFrame(rows, columns=list(EXAMPLE_COLUMNS))
    order = {m: i for i, m in enumerate([REFERENCE, *cfg.methods, CONTROL])}
    return out.sort_values(
        ["method", "example_id"], key=lambda c: c.map(order) if c.name == "method" else c, kind="stable"
    ).reset_index(drop=True)
