"""Rules of ``workflow/rules/report.smk``: the run's result tables and figures drawn from the analyses' tables
(IG's attribution tables and overlays, the explanation leaderboard, the faithfulness figure and AOPC tables, the
similarity Tables 1–4 and figures, the persistence diagrams' figures, the pair attributions' tables and figures) and
``results/manifest.json``.

Light jobs: nothing here loads torch, transformers or a model; the tokenizer is read as a
:class:`~attnlens.data.tokens.Vocabulary` (``tests/test_startup.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnlens.attention.layers import LAYER_CONFIGURATIONS
from attnlens.attribution.artifacts import (
    l2_normalise,
    load_attributions,
    load_embedding_attributions,
    load_explanations,
    scores_by_example,
)
from attnlens.attribution.faithfulness import FAITHFULNESS_SCHEMA, PLAUSIBILITY_SCHEMA, aopc
from attnlens.attribution.leaderboard import (
    EXAMPLE_COLUMNS,
    LEADERBOARD_SCHEMA,
    agreement_rows,
    metrics,
)
from attnlens.attribution.leaderboard import summarise as summarise_leaderboard
from attnlens.attribution.methods import CONTROL, REFERENCE
from attnlens.classifier.selection import load_selection, outcome_text, showcased_once
from attnlens.data.sources import MANIFEST_SCHEMA as SPLIT_MANIFEST_SCHEMA
from attnlens.data.sources import load_examples
from attnlens.data.tokens import load_vocabulary, stopword_source, structural_ids, surface_pieces, token_mask
from attnlens.errors import InputError
from attnlens.io import (
    StrPath,
    atomic_dir,
    atomic_path,
    config_sha256,
    file_stem,
    load_json,
    load_parquet,
    load_shards,
    load_tensors,
    provenance,
    save_csv,
    save_json,
    save_parquet,
    write_csv,
    write_sidecar,
)
from attnlens.pairs.artifacts import (
    PAIR_CONVERGENCE_SCHEMA,
    PAIR_MATRICES_SCHEMA,
    PAIR_TOPOLOGY_SCHEMA,
    error_summary,
    load_scores,
    matrix_key,
    showcased_pairs,
)
from attnlens.pipeline.config import (
    ExplanationsConfig,
    FaithfulnessConfig,
    FiguresConfig,
    PairsConfig,
    SimilarityConfig,
    TopologyConfig,
)
from attnlens.pipeline.manifest import MANIFEST_SCHEMA, NO_NOTES, artifact_notes, build_manifest, lacking_provenance
from attnlens.render.figures import (
    plot_distance_matrix,
    plot_faithfulness_curves,
    plot_head_agreement,
    plot_leaderboard,
    plot_pair_convergence,
    plot_pair_matrix,
    plot_pair_topology,
    plot_persistence,
    plot_similarity_distributions,
    save_figure,
)
from attnlens.render.overlays import (
    SIGNED_SCALE,
    AttributionRecord,
    Overlay,
    hsl_to_rgb,
    render_attribution_html,
    render_png,
    signed_colour,
)
from attnlens.render.tables import (
    CONVERGENCE_CAPTION,
    MIN_OCCURRENCES,
    convergence_table,
    dataset_aggregate,
    leaderboard_table,
    paper_table,
    per_type_sums,
    ranked,
    scientific,
    summary_table,
    token_labels,
    top_tokens,
    write_table,
)
from attnlens.similarity.aggregate import SUMMARY_SCHEMA, paired_tests, summarise
from attnlens.similarity.metrics import DEVIATIONS, HEADS_SCHEMA, HEADS_TYPES, load_similarity
from attnlens.similarity.paper import MASKED_WITH, legacy_means_layout, masking_increase, paper_metrics
from attnlens.tasks import get_task
from attnlens.topology.persistence import BOTTLENECK_SCHEMA, TWO_LN2, load_diagrams

logger = logging.getLogger(__name__)


def run_manifest(
    config: dict[str, Any], targets: Sequence[str], logs_dir: StrPath, out_path: StrPath, notes_path: StrPath
) -> dict[str, Any]:
    """Rule ``manifest``: write ``results/manifest.json`` and the run notes (``results/run_notes.csv``)."""
    artifacts = build_manifest(targets, logs_dir)
    notes = artifact_notes(artifacts)
    for n in notes:
        logger.warning("%s (%s): %s", n["artifact"], n["rule"], n["note"])
    rows = notes or [{"artifact": "", "rule": "", "note": NO_NOTES}]
    save_csv(pd.DataFrame(rows, columns=["artifact", "rule", "note"]), notes_path, provenance("run_notes/v1"))
    missing = lacking_provenance(artifacts)
    summary = {
        "n_artifacts": len(artifacts),
        "n_files": sum(len(a.get("files", [])) or 1 for a in artifacts),
        "rules": sorted({a["rule"] for a in artifacts if a["rule"]}),
        "run_config_sha256": config_sha256(config),
        "without_provenance": missing,
        "n_notes": len(notes),
    }
    save_json({"summary": summary, "artifacts": artifacts}, out_path, provenance(MANIFEST_SCHEMA, None, None))
    logger.info("%d artifacts (%d files) from %d rules", summary["n_artifacts"], summary["n_files"],
                len(summary["rules"]))  # fmt: skip
    return summary


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
    save_figure(plot_faithfulness_curves(curves, get_task(prov.get("task")).readout_label), figure_stem,
                figures_cfg.dpi)  # fmt: skip
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


def run_aggregate_similarity(
    cfg: SimilarityConfig,
    similarity_paths: Sequence[StrPath],
    manifest_path: StrPath,
    summary_path: StrPath,
    tables_dir: StrPath,
) -> dict:
    """Rule ``aggregate_similarity``: Tables 1–2 (and 3–4 per extra dataset), tests and the tidy summary.

    This run's dataset is called ``similarity.dataset_name``, or by its source (split manifest ``name``).
    """
    name = cfg.dataset_name or load_json(manifest_path, SPLIT_MANIFEST_SCHEMA)["name"]
    if name in [extra["name"] for extra in cfg.extra_datasets]:
        raise InputError(
            "config", "similarity.extra_datasets", f"expected names other than this run's dataset name {name!r}"
        )
    datasets = [(name, load_similarity(similarity_paths))]
    for extra in cfg.extra_datasets:
        datasets.append(
            (
                extra["name"],
                load_similarity([extra["path"]], where=f"config: similarity.extra_datasets[{extra['name']}]"),
            )
        )
    t0 = time.perf_counter()
    summaries, notes = [], []
    with atomic_dir(tables_dir) as tmp:
        for i, (name, frame) in enumerate(datasets):
            summary = summarise(frame, cfg.seed, cfg.n_boot)
            tests = paired_tests(frame)
            n_examples = int(frame["example_id"].nunique()) if len(frame) else 0
            numbers = (1, 2) if i == 0 else (3, 4)
            _dataset_tables(summary, tests, cfg, Path(tmp), numbers, name, n_examples)
            summaries.append(summary.assign(dataset=name))
            notes += missing_numbers(name, summary, tests)
    seconds = time.perf_counter() - t0
    merged = pd.concat(summaries, ignore_index=True)
    prov = provenance(SUMMARY_SCHEMA, cfg.to_dict(), cfg.seed, seconds=round(seconds, 2),
                      deviations=list(DEVIATIONS), notes=notes)  # fmt: skip
    for note in notes:
        logger.warning("%s", note)
    save_parquet(merged, summary_path, prov)
    logger.info("similarity tables for %s in %.1f s", ", ".join(n for n, _ in datasets), seconds)
    return {"seconds": seconds}


def run_plot_similarity(
    cfg: SimilarityConfig,
    figures_cfg: FiguresConfig,
    similarity_paths: Sequence[StrPath],
    heads_paths: Sequence[StrPath],
    distributions_stem: StrPath,
    heads_stem: StrPath,
) -> None:
    """Rule ``plot_similarity``: metric distributions (legacy, fixed, chance) and the per-head agreement map."""
    frame = load_similarity(similarity_paths)
    families = [(m.label, m.legacy, m.fixed) for g in paper_metrics(cfg.rbo_p).values() for m in g]
    for scaled, stem in ((False, distributions_stem), (True, f"{distributions_stem}_scaled")):
        plot_similarity_distributions(frame, families, LAYER_CONFIGURATIONS, MASKED_WITH, scaled, stem, figures_cfg.dpi)
    heads = load_shards(heads_paths, HEADS_SCHEMA, HEADS_TYPES)
    n_layers, n_heads = int(heads["layer"].max()) + 1, int(heads["head"].max()) + 1
    means = heads.groupby(["layer", "head"])[["spearman", "jaccard_top5"]].mean()
    maps = {
        "Spearman ρ (received attention vs |IG|)": means["spearman"].to_numpy().reshape(n_layers, n_heads),
        "top-5 % Jaccard": means["jaccard_top5"].to_numpy().reshape(n_layers, n_heads),
    }
    plot_head_agreement(maps, heads_stem, int(heads["example_id"].nunique()), figures_cfg.dpi)


def _dataset_tables(summary, tests, cfg, out: Path, numbers: tuple[int, int], name: str, n_examples: int) -> None:
    """Tables ``numbers`` (1–2 or 3–4) of one dataset, its masking increase, tests, summary, legacy layout."""
    suffix = "" if numbers[0] == 1 else f"_{file_stem(name)}"
    groups = paper_metrics(cfg.rbo_p)
    intro = (
        f"{name}, {n_examples} examples; cell = mean [bootstrap 95 % CI] "
        f"(chance: mean over {cfg.n_permutations} permuted attributions)"
    )
    write_table(
        paper_table(summary, groups["similarity"]),
        out / f"table{numbers[0]}_similarity{suffix}",
        f"Table {numbers[0]}: attention vs IG attribution, cosine, Kendall τ and RBO, legacy and fixed. {intro}.",
    )
    write_table(
        paper_table(summary, groups["jaccard"]),
        out / f"table{numbers[1]}_jaccard{suffix}",
        f"Table {numbers[1]}: Jaccard of the top-5 % attended and attributed tokens, legacy and fixed. {intro}.",
    )
    write_table(
        masking_increase(summary, cfg.rbo_p),
        out / f"masking_increase{suffix}",
        "Percentage increase due to masking (paper §5.2.3: mean over layer configurations × scaling of "
        "(masked − unmasked) / unmasked), and the absolute change of the metric and of its chance level.",
    )
    shown = {m.legacy for g in groups.values() for m in g} | {m.fixed for g in groups.values() for m in g}
    paper_tests = tests[tests["configuration"].isin(["last", "all"]) & tests["metric"].isin(shown)]
    own_mask = ((paper_tests["mode"] == "legacy") & ~paper_tests["held"].str.contains("mask fixed")) | (
        (paper_tests["mode"] == "fixed") & ~paper_tests["held"].str.contains("mask legacy")
    )
    shown_tests = paper_tests[own_mask].reset_index(drop=True)
    shown_tests["p_value"] = [f"{p:.2e}" if np.isfinite(p) else "n/a" for p in shown_tests["p_value"]]
    write_table(
        shown_tests,
        out / f"similarity_tests{suffix}",
        f"Paired Wilcoxon signed-rank tests over the {n_examples} examples of {name} "
        f"(every configuration, metric and mask: similarity_tests_all{suffix}.csv).",
    )
    save_csv(tests, out / f"similarity_tests_all{suffix}.csv")
    save_csv(summary, out / f"similarity_summary{suffix}.csv")
    save_csv(legacy_means_layout(summary), out / f"similarity_means_legacy{suffix}.csv")


def missing_numbers(name: str, summary: pd.DataFrame, tests: pd.DataFrame) -> list[str]:
    """Run notes for what a dataset's tables could not compute: one line per distinct reason."""
    out = []
    for what, frame in (("dataset means", summary), ("Wilcoxon tests", tests)):
        if not len(frame) or "note" not in frame:
            continue
        for reason, count in frame.loc[frame["note"].str.startswith("not computable"), "note"].value_counts().items():
            out.append(f"{name}: {count} of {len(frame)} {what} {reason}")
    return out


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


def run_attribution_tables(
    cfg: FiguresConfig,
    attribution_paths: Sequence[StrPath],
    embeddings_path: StrPath,
    selection_path: StrPath,
    model_dir: StrPath,
    out_dir: StrPath,
) -> list[Path]:
    """Rule ``attribution_tables``: Fig 10 a–f (+ per-embedding tables), masked and unmasked."""
    tokenizer = load_vocabulary(model_dir)
    frame = load_attributions(attribution_paths)
    embeddings = load_embedding_attributions(embeddings_path)
    selection = load_selection(selection_path)
    masks = {"unmasked": "none", "masked": cfg.mask}
    written: list[Path] = []
    with atomic_dir(out_dir) as tmp:
        per_example: dict[str, list[pd.DataFrame]] = {name: [] for name in masks}
        by_id = {}
        for row in frame.itertuples(index=False):
            ids = np.asarray(row.input_ids)
            scores = l2_normalise(np.asarray(row.scores, dtype=np.float64))
            keys, shown = token_labels(tokenizer, ids, cfg.mode)
            by_id[row.example_id] = (ids, scores, keys, shown, row)
            for name, kind in masks.items():
                keep = token_mask(tokenizer, ids, kind)
                per_example[name].append(per_type_sums(scores, keys, shown, keep))
        for e in selection:
            eid = e["example_id"]
            if eid not in by_id:
                continue
            ids, scores, keys, shown, row = by_id[eid]
            what = f"{eid} ({e['role']}; {outcome_text(e)}), IG target {row.target}"
            for name, kind in masks.items():
                keep = token_mask(tokenizer, ids, kind)
                label = f"{name} (mask {kind})"
                sums = per_type_sums(scores, keys, shown, keep)
                for side, positive in (("pos", True), ("neg", False)):
                    top = top_tokens(scores, shown, keep, cfg.top_n, positive)
                    stem = tmp / f"{file_stem(e['role'])}_{file_stem(eid)}_top_{side}_{name}"
                    cap = f"{what}: top {cfg.top_n} {'positive' if positive else 'negative'} tokens, {label}"
                    written += write_table(top, stem, cap)
                    agg = ranked(sums, "attribution", cfg.top_n, positive)[["token", "attribution", "occurrences"]]
                    stem = tmp / f"{file_stem(e['role'])}_{file_stem(eid)}_agg_{side}_{name}"
                    written += write_table(agg, stem, f"{what}: attribution summed per token, {label}")
            if eid in embeddings:
                emb = embeddings[eid]
                table = pd.DataFrame({"position": np.arange(len(ids)), "token": shown})
                for layer, values in emb["scores"].items():
                    table[layer] = l2_normalise(values)
                table = table.reindex(table["word"].abs().sort_values(ascending=False, kind="stable").index)
                cap = (
                    f"{what}: per-embedding IG ({emb['mode']}), L2-normalised per layer, by |word|; "
                    f"completeness of the sum: delta {emb['delta']:.3g} of {emb['gap']:.3g}"
                )
                written += write_table(table.head(cfg.top_n * 2), tmp / f"{file_stem(eid)}_embeddings", cap)
        written += write_table(convergence_table(frame), tmp / "convergence", CONVERGENCE_CAPTION)
        for name, kind in masks.items():
            agg = dataset_aggregate(per_example[name])
            n = len(per_example[name])
            for side, positive in (("pos", True), ("neg", False)):
                legacy = ranked(agg, "sum_over_n", cfg.top_n, positive).drop(columns="key")
                cap = f"dataset ({n} examples): sum of per-example attribution / N, {name} (mask {kind})"
                written += write_table(legacy, tmp / f"dataset_{side}_sum_over_n_{name}", cap)
                frequent = agg[agg["occurrences"] >= MIN_OCCURRENCES]
                mean = ranked(frequent, "mean_per_occurrence", cfg.top_n, positive).drop(columns="key")
                cap = (
                    f"dataset ({n} examples): mean attribution per occurrence (tokens seen >= {MIN_OCCURRENCES} "
                    f"times), {name} (mask {kind}; stopwords: {stopword_source()})"
                )
                written += write_table(mean, tmp / f"dataset_{side}_mean_{name}", cap)
    logger.info("wrote %d table files for %d examples", len(written), len(frame))
    return [Path(out_dir) / p.name for p in written]


def run_attribution_overlays(
    cfg: FiguresConfig,
    attribution_paths: Sequence[StrPath],
    selection_path: StrPath,
    model_dir: StrPath,
    manifest_path: StrPath,
    out_dir: StrPath,
) -> list[Path]:
    """Rule ``attribution_overlays``: Fig 9 for every showcased example (HTML + PNG + CSV)."""
    tokenizer = load_vocabulary(model_dir)
    frame = load_attributions(attribution_paths).set_index("example_id")
    special = structural_ids(tokenizer)
    manifest = load_json(manifest_path)
    task = get_task(manifest.get("task"))
    names = list(task.output_names(manifest["classes"]))
    written: list[Path] = []
    with atomic_dir(out_dir) as tmp:
        for e in load_selection(selection_path):
            eid = e["example_id"]
            row = frame.loc[eid]
            ids = [int(i) for i in row["input_ids"]]
            raw = tokenizer.convert_ids_to_tokens(ids)
            pieces = surface_pieces(tokenizer, raw)
            tokens = [f"#{t.strip('<>[]')}" if i in special else p[0] for i, t, p in zip(ids, raw, pieces, strict=True)]
            outcome = task.outcome(row["label"], row["probs"], int(row["target"]), names)
            rec = AttributionRecord(
                example_id=eid,
                tokens=tokens,
                starts_word=[p[1] or i in special for i, p in zip(ids, pieces, strict=True)],
                scores=l2_normalise(np.asarray(row["scores"], dtype=np.float64)),
                true_label=outcome.label,
                pred_label=outcome.prediction,
                pred_prob=outcome.confidence,
                attr_label=outcome.explained,
                delta=float(row["delta"]),
                n_steps=int(row["n_steps"]),
            )
            stem = tmp / f"{file_stem(e['role'])}_{file_stem(eid)}"
            with atomic_path(stem.with_suffix(".html")) as out:
                out.write_text(render_attribution_html(rec), encoding="utf-8")
            table = pd.DataFrame({"position": np.arange(len(ids)), "token": tokens, "attribution_l2": rec.scores})
            with atomic_path(stem.with_suffix(".csv")) as out:
                write_csv(table, out)
            write_sidecar(stem, [stem.with_suffix(".html").name, stem.with_suffix(".csv").name])
            overlay = Overlay(
                tokens=tokens,
                starts_word=rec.starts_word,
                values=rec.scores,
                special=np.zeros(len(ids), dtype=bool),
                title=f"{eid} ({e['role']}): integrated gradients toward {rec.attr_label}",
                note="",
            )
            colours = [hsl_to_rgb(*signed_colour(a)) for a in rec.scores]
            subtitle = (
                f"true {rec.true_label} | predicted {rec.predicted} | attribution label "
                f"{rec.attr_label} | attribution score {rec.attr_score:.2f} | "
                f"{rec.n_steps} steps, delta {rec.delta:.2g} | {SIGNED_SCALE}"
            )
            render_png(overlay, stem.with_suffix(".png"), cfg.dpi, colours=colours, subtitle=subtitle)
            written += [stem.with_suffix(s) for s in (".html", ".csv", ".png")]
    return [Path(out_dir) / p.name for p in written]


def run_plot_topology(
    cfg: TopologyConfig,
    figures_cfg: FiguresConfig,
    diagram_paths: Sequence[StrPath],
    matrix_path: StrPath,
    test_path: StrPath,
    selection_path: StrPath,
    out_dir: StrPath,
) -> None:
    """Rule ``plot_topology``: bottleneck heat-maps (ordered by class) and showcased examples' barcodes."""
    diagrams = load_diagrams(diagram_paths)
    pairs, prov = load_parquet(matrix_path, BOTTLENECK_SCHEMA)
    ids = list(prov["example_ids"])
    examples, _ = load_examples(test_path)
    label_of = dict(zip(examples["example_id"].astype(str), examples["label"].astype(int), strict=True))
    labels = np.array([label_of[e] for e in ids])
    pos = {e: i for i, e in enumerate(ids)}
    selection = load_selection(selection_path)
    with atomic_dir(out_dir) as tmp:
        for (est, dim), part in pairs.groupby(["estimator", "dim"], sort=True):
            mat = np.zeros((len(ids), len(ids)))
            a, b = part["example_a"].map(pos).to_numpy(), part["example_b"].map(pos).to_numpy()
            mat[a, b] = mat[b, a] = part["distance"].to_numpy()
            what = "max(H0, H1)" if dim == "max" else f"H{dim}"
            plot_distance_matrix(mat, labels, tmp / f"bottleneck_{est}_{dim}",
                                 f"Bottleneck distance between attention persistence diagrams ({est}, {what})",
                                 figures_cfg.dpi)  # fmt: skip
        for e, _roles in showcased_once(selection):
            eid = e["example_id"]
            if eid not in pos:
                continue
            for est in cfg.estimators:
                part = diagrams[(diagrams["example_id"] == eid) & (diagrams["estimator"] == est)]
                dgms = {int(d): g[["birth", "death", "infinite"]].to_numpy(dtype=float) for d, g in part.groupby("dim")}
                cap = float(part["cap"].iloc[0]) if len(part) else TWO_LN2
                title = f"{eid} ({e['role']}, label {e['label']}): {est}, {cfg.pooling} of {cfg.chunk_size}"
                plot_persistence(
                    dgms, cap, tmp / f"{file_stem(e['role'])}_{file_stem(eid)}_{est}", title, figures_cfg.dpi
                )


def run_pair_tables(score_paths: Sequence[StrPath], exact_metrics_path: StrPath, out_dir: StrPath) -> list[Path]:
    """Rule ``pair_tables``: score / ΣA / error per pair, and the exact-vs-approximate error summary."""
    scores = load_scores(score_paths)
    columns = ["pair_id", "model", "similarity", "mode", "gold", "score", "score_a_rb", "score_ra_b", "score_ra_rb",
               "target", "total", "error", "score_error"]  # fmt: skip
    summary = error_summary(scores)
    written = []
    with atomic_dir(out_dir) as tmp:
        written += write_table(
            scientific(scores[columns].rename(columns={"total": "sum_A"}), ["error", "score_error"]),
            tmp / "pair_scores",
            "Per test pair: gold similarity, the model's score s(a,b), the reference terms s(a,r_b), s(r_a,b), "
            "s(r_a,r_b), target = s(a,b) − s(a,r_b) − s(r_a,b) + s(r_a,r_b), ΣA, error = ΣA − target (quadrature) "
            "and score_error = ΣA − s(a,b) (what the matrix leaves unexplained of the score).",
        )
        caption = (
            "Attribution error per model. Off-the-shelf (approximate, EACL 2024): ΣA misses the score by the "
            "reference terms. Exact (EMNLP 2023, shifted embedding e'(x) = g(x) − g(r_x), dot product): the "
            "reference terms are 0, so ΣA − score is the quadrature error alone."
        )
        if "legacy" in set(scores["mode"]):
            caption += (
                " Legacy rows follow the authors' reference implementation (right Riemann sum; cosine matrix = dot "
                "matrix / (‖g(a)‖‖g(b)‖)), whose cosine ΣA does not converge to the cosine target (docs/studies.md)."
            )
        if exact_metrics_path is not None:
            m = load_json(exact_metrics_path)
            caption += (
                f" The exact model was fine-tuned {m['steps']} steps; its test Spearman against gold went from "
                f"{m['test_before']['spearman']:.3f} to {m['test_after']['spearman']:.3f}."
            )
        written += write_table(
            scientific(
                summary,
                ["mean abs error", "max abs error", "mean abs(ΣA − score)", "median abs(ΣA − score) / abs(score)"],
            ),
            tmp / "pair_errors",
            caption,
        )
    return [Path(out_dir) / p.relative_to(tmp) for p in written]


def run_plot_pairs(
    cfg: PairsConfig,
    score_paths: Sequence[StrPath],
    matrix_paths: Sequence[StrPath],
    convergence_path: StrPath,
    topology_path: StrPath,
    out_dir: StrPath,
    dpi: int = 150,
) -> None:
    """Rule ``plot_pairs``: heatmaps of the showcased pairs, the convergence curve, topology against similarity."""
    scores = load_scores(score_paths)
    matrices = {}
    for p in matrix_paths:
        matrices.update(load_tensors(p, PAIR_MATRICES_SCHEMA)[0])
    shown = showcased_pairs(scores.drop_duplicates("pair_id"), cfg.attribution.n_showcase)
    with atomic_dir(out_dir) as tmp:
        for rec in scores[scores["pair_id"].isin(shown)].to_dict("records"):
            key = matrix_key(rec["pair_id"], rec["model"], rec["similarity"], rec["mode"])
            title = (f"{rec['pair_id']} ({rec['model']}, {rec['similarity']}, {rec['mode']}): gold {rec['gold']:.2f}, "
                     f"s = {rec['score']:.3f}, ΣA = {rec['total']:.3f}, error {rec['error']:.1e}")  # fmt: skip
            stem = tmp / f"pair_{rec['pair_id']}_{rec['model']}_{rec['similarity']}_{rec['mode']}"
            plot_pair_matrix(matrices[key].numpy(), rec["tokens_a"], rec["tokens_b"], stem, title, dpi)
        plot_pair_convergence(load_parquet(convergence_path, PAIR_CONVERGENCE_SCHEMA)[0], tmp / "convergence", dpi)
        topo = load_parquet(topology_path, PAIR_TOPOLOGY_SCHEMA)[0]
        for est in cfg.topology.estimators:
            plot_pair_topology(topo, est, "max", tmp / f"topology_vs_similarity_{est}", dpi)
