"""The topology study's figures: persistence diagrams and the bottleneck distances.

A light job (:mod:`attnlens.stages.report`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attnlens.classifier.selection import load_selection, showcased_once
from attnlens.data.sources import load_examples
from attnlens.io import (
    StrPath,
    atomic_dir,
    file_stem,
    load_parquet,
)
from attnlens.pipeline.config import (
    FiguresConfig,
    TopologyConfig,
)
from attnlens.pipeline.entry import stage
from attnlens.render.figures import (
    plot_distance_matrix,
    plot_persistence,
)
from attnlens.topology.persistence import BOTTLENECK_SCHEMA, TWO_LN2, load_diagrams


@stage("topology", "figures")
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
            plot_distance_matrix(
                mat,
                labels,
                tmp / f"bottleneck_{est}_{dim}",
                f"Bottleneck distance between attention persistence diagrams ({est}, {what})",
                figures_cfg.dpi,
            )
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
