"""The pair study's tables and figures: token-pair attributions and their convergence.

A light job (:mod:`attnlens.stages.report`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from attnlens.io import (
    StrPath,
    atomic_dir,
    load_json,
    load_parquet,
    load_tensors,
)
from attnlens.pairs.pair_artifacts import (
    PAIR_CONVERGENCE_SCHEMA,
    PAIR_MATRICES_SCHEMA,
    PAIR_TOPOLOGY_SCHEMA,
    error_summary,
    load_scores,
    matrix_key,
    showcased_pairs,
)
from attnlens.pipeline.config import (
    PairsConfig,
)
from attnlens.pipeline.entry import stage
from attnlens.render.figures import (
    plot_pair_convergence,
    plot_pair_matrix,
    plot_pair_topology,
)
from attnlens.render.tables import (
    scientific,
    write_table,
)


@stage()
def run_pair_tables(
    score_paths: Sequence[StrPath], out_dir: StrPath, exact_metrics_path: StrPath | None = None
) -> list[Path]:
    """Rule ``pair_tables``: score / ΣA / error per pair, and the exact-vs-approximate error summary."""
    scores = load_scores(score_paths)
    columns = [
        "pair_id",
        "model",
        "similarity",
        "mode",
        "gold",
        "score",
        "score_a_rb",
        "score_ra_b",
        "score_ra_rb",
        "target",
        "total",
        "error",
        "score_error",
    ]
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


@stage("pairs")
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
            title = (
                f"{rec['pair_id']} ({rec['model']}, {rec['similarity']}, {rec['mode']}): gold {rec['gold']:.2f}, "
                f"s = {rec['score']:.3f}, ΣA = {rec['total']:.3f}, error {rec['error']:.1e}"
            )
            stem = tmp / f"pair_{rec['pair_id']}_{rec['model']}_{rec['similarity']}_{rec['mode']}"
            plot_pair_matrix(matrices[key].numpy(), rec["tokens_a"], rec["tokens_b"], stem, title, dpi)
        plot_pair_convergence(load_parquet(convergence_path, PAIR_CONVERGENCE_SCHEMA)[0], tmp / "convergence", dpi)
        topo = load_parquet(topology_path, PAIR_TOPOLOGY_SCHEMA)[0]
        for est in cfg.topology.estimators:
            plot_pair_topology(topo, est, "max", tmp / f"topology_vs_similarity_{est}", dpi)
