"""Rules of ``workflow/rules/explanations.smk``: explanation shards and the explanation leaderboard."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnlens.attribution.explanations import (
    EXPLANATION_TYPES,
    EXPLANATIONS_SCHEMA,
    explain_example,
    explanation_rows,
    load_explanations,
    scores_by_example,
)
from attnlens.attribution.faithfulness import FAITHFULNESS_SCHEMA, PLAUSIBILITY_SCHEMA, aopc
from attnlens.attribution.ig import freeze, load_attributions, prepare_inputs
from attnlens.attribution.leaderboard import (
    CONTROL,
    EXAMPLE_COLUMNS,
    LEADERBOARD_SCHEMA,
    REFERENCE,
    agreement_rows,
    metrics,
    summarise,
)
from attnlens.attribution.sanity import SANITY_SCHEMA, layers_of, levels, sanity_rows
from attnlens.config import ExplanationsConfig, FaithfulnessConfig, FiguresConfig, FindingsConfig, SimilarityConfig
from attnlens.data import shard_of
from attnlens.device import place
from attnlens.io import StrPath, load_parquet, provenance, save_parquet
from attnlens.models import architecture
from attnlens.models.loading import load_classifier, load_tokenizer
from attnlens.models.randomisation import randomise_top
from attnlens.render.figures import plot_leaderboard, save_figure
from attnlens.render.tables import leaderboard_table, write_table
from attnlens.tokens import structural_ids, structural_mask

logger = logging.getLogger(__name__)


def run_explain(
    cfg: ExplanationsConfig,
    model_dir: StrPath,
    attribution_paths: Sequence[StrPath],
    shard: int,
    out_path: StrPath,
    device: str = "auto",
) -> dict:
    """Rule ``explain``: every method of ``explanations.methods`` for the test examples of one shard.

    Each example is explained for IG's target class on IG's token ids (read from the ``attribute``
    shards), so every method answers the same question as the reference it is compared with.
    """
    model, tokenizer = load_classifier(model_dir)
    on = place(freeze(model), device)
    attributions = load_attributions(attribution_paths)
    mine = attributions[[shard_of(str(e), cfg.n_shards) == shard for e in attributions["example_id"]]]
    rows = []
    t0 = time.perf_counter()
    for row in mine.itertuples(index=False):
        ids = [int(i) for i in row.input_ids]
        inputs = prepare_inputs(model, tokenizer, ids, on)
        special = structural_mask(tokenizer, ids)
        res = explain_example(
            model,
            inputs,
            int(row.target),
            cfg.methods,
            layers=cfg.layers,
            tokens=tokenizer.convert_ids_to_tokens(ids),
            special=special,
            pad_id=tokenizer.pad_token_id,
            occlusion_max_tokens=cfg.occlusion_max_tokens,
            batch_size=cfg.batch_size,
        )
        rows.extend(explanation_rows(row.example_id, ids, int(row.target), res, cfg.methods))
        logger.info(
            "%s: %d tokens, forward %.3f s; %s",
            row.example_id,
            len(ids),
            res.forward_seconds,
            ", ".join(f"{m} {res.seconds[m]:.3f} s" for m in cfg.methods),
        )
    seconds = time.perf_counter() - t0
    frame = pd.DataFrame(rows, columns=list(EXPLANATION_TYPES.names))
    prov = provenance(EXPLANATIONS_SCHEMA, cfg.to_dict(), None, shard=shard, n_shards=cfg.n_shards,
                      model=str(model_dir), device=str(on), seconds=round(seconds, 2))  # fmt: skip
    save_parquet(frame, out_path, prov, EXPLANATION_TYPES)
    n_examples = frame["example_id"].nunique() if len(frame) else 0
    logger.info("shard %d/%d: %d examples x %d methods in %.1f s", shard, cfg.n_shards, n_examples,
                len(cfg.methods), seconds)  # fmt: skip
    return {"n_examples": n_examples, "seconds": seconds}


def run_sanity_check(
    cfg: ExplanationsConfig,
    findings: FindingsConfig,
    model_dir: StrPath,
    attribution_paths: Sequence[StrPath],
    out_path: StrPath,
    device: str = "auto",
) -> pd.DataFrame:
    """Rule ``sanity_check``: the first ``findings.sanity_examples`` test examples (by id) explained by every method
    of ``explanations.methods`` on the trained classifier and on each randomised copy of the cascade
    (:mod:`attnlens.attribution.sanity`), and each method's Spearman ρ between the two."""
    model, tokenizer = load_classifier(model_dir)
    on = place(freeze(model), device)
    attributions = load_attributions(attribution_paths).sort_values("example_id", kind="stable")
    chosen = attributions.head(findings.sanity_examples)
    cascade = levels(len(architecture(model).layers(model)))
    examples = []
    for row in chosen.itertuples(index=False):
        ids = [int(i) for i in row.input_ids]
        examples.append((str(row.example_id), ids, int(row.target), structural_mask(tokenizer, ids)))

    def explain_all(net) -> dict[str, dict[str, np.ndarray]]:
        out = {}
        for example_id, ids, target, special in examples:
            res = explain_example(net, prepare_inputs(net, tokenizer, ids, on), target, cfg.methods, layers=cfg.layers,
                                  tokens=tokenizer.convert_ids_to_tokens(ids), special=special,
                                  pad_id=tokenizer.pad_token_id, occlusion_max_tokens=cfg.occlusion_max_tokens,
                                  batch_size=cfg.batch_size)  # fmt: skip
            out[example_id] = res.scores
        return out

    t0 = time.perf_counter()
    trained = explain_all(model)
    by_level = {}
    for level in cascade:
        fresh, _ = load_classifier(model_dir)
        freeze(randomise_top(fresh, layers_of(level), findings.seed))
        place(fresh, device)
        by_level[level] = explain_all(fresh)
        del fresh
        logger.info("%s: %d examples explained again", level, len(examples))
    rows = []
    for example_id, _ids, _target, special in examples:
        rows += sanity_rows(example_id, trained[example_id], {lv: by_level[lv][example_id] for lv in cascade}, ~special,
                            cfg.methods)  # fmt: skip
    frame = pd.DataFrame(rows, columns=["example_id", "method", "level", "layers", "spearman"])
    seconds = time.perf_counter() - t0
    prov = provenance(SANITY_SCHEMA, {**cfg.to_dict(), **findings.to_dict()}, findings.seed, levels=cascade,
                      model=str(model_dir), seconds=round(seconds, 2))  # fmt: skip
    save_parquet(frame, out_path, prov)
    logger.info(
        "%d examples x %d methods x %d levels in %.1f s", len(examples), len(cfg.methods), len(cascade), seconds
    )
    return frame


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
    scores = scores_by_example(explanations)
    forward = explanations.groupby("example_id")["forward_seconds"].first()
    cost = explanations.set_index(["example_id", "method"])["seconds"]
    rows: list[tuple] = []
    for row in attributions.itertuples(index=False):
        eid = row.example_id
        if eid not in scores:
            raise ValueError(f"{eid}: IG explained it but the explain shards did not")
        ids = [int(i) for i in row.input_ids]
        special = np.array([i in special_set for i in ids], dtype=bool)
        rows += agreement_rows(eid, np.asarray(row.scores, dtype=np.float64), scores[eid], special,
                               n_permutations=sim.n_permutations, top_fraction=sim.top_fraction, rbo_p=sim.rbo_p,
                               seed=sim.seed)  # fmt: skip
        fwd = float(forward[eid])
        for method in [REFERENCE, *scores[eid]]:
            s = float(row.seconds) if method == REFERENCE else float(cost[(eid, method)])
            rows += [(eid, method, "seconds", s, np.nan), (eid, method, "cost_ratio", s / fwd, np.nan)]
    known = {REFERENCE, CONTROL, *cfg.methods}
    for frame, names in ((per_ranking, ("comprehensiveness", "sufficiency")), (plausibility, ("auprc", "f1"))):
        frame = frame[frame["ranking"].isin(known)]
        for name in names:
            rows += [(e, r, name, float(v), np.nan) for e, r, v in zip(frame["example_id"], frame["ranking"],
                                                                       frame[name], strict=True)]  # fmt: skip
    out = pd.DataFrame(rows, columns=list(EXAMPLE_COLUMNS))
    order = {m: i for i, m in enumerate([REFERENCE, *cfg.methods, CONTROL])}
    return out.sort_values(["method", "example_id"], key=lambda c: c.map(order) if c.name == "method" else c,
                           kind="stable").reset_index(drop=True)  # fmt: skip


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
    tokenizer = load_tokenizer(model_dir)
    explanations = load_explanations(explanation_paths)
    attributions = load_attributions(attribution_paths)
    curves, _ = load_parquet(curves_path, FAITHFULNESS_SCHEMA)
    plaus, _ = load_parquet(plausibility_path, PLAUSIBILITY_SCHEMA)
    per_ranking = aopc(curves, faith.fractions) if len(curves) else pd.DataFrame(columns=["example_id", "ranking"])
    per_example = comparison_frame(cfg, sim, explanations, attributions, per_ranking, plaus, structural_ids(tokenizer))
    columns = metrics(sim.top_fraction, sim.rbo_p, faith.plausibility_k)
    summary = summarise(per_example, columns, cfg.baseline, sim.seed, sim.n_boot)
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
        f"example and per forward pass; * paired Wilcoxon p < 0.05 against {cfg.baseline}"
    )
    write_table(leaderboard_table(summary, columns), tables / "explanation_leaderboard", caption)
    caption = f"explanation leaderboard, every number (paired Wilcoxon signed-rank tests against {cfg.baseline})"
    write_table(summary, tables / "explanation_leaderboard_long", caption)
    save_figure(plot_leaderboard(summary, columns, cfg.baseline), figure_stem, figures.dpi)
    for note in notes:
        logger.warning(note)
    logger.info("%d examples, %d methods, %d metrics", n, summary["method"].nunique(), summary["metric"].nunique())
    return summary
