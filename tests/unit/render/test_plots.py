"""Figure helpers: colour scales and that every figure is written as PNG and PDF."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnlens.render.figures import (
    plot_attention_grid,
    plot_head_importance,
    plot_intersections,
    plot_token_occurrences,
    plot_topk_counts,
    scale_per_head,
)


def test_scales_per_head():
    img = np.array([[[[0.0, 1.0], [3.0, np.nan]]]])
    lin = scale_per_head(img, "linear")  # float64 min–max and rank scalings of exact values: allclose's defaults
    assert np.allclose(lin[0, 0][:, 0], [0, 1]) and np.isnan(lin[0, 0, 1, 1])
    rank = scale_per_head(img, "rank")
    assert np.allclose(rank[0, 0, 0], [0, 0.5])
    log = scale_per_head(np.array([[[[1.0, 10.0], [100.0, 0.0]]]]), "log")
    assert np.allclose(log[0, 0], [[0, 0.5], [1, 0]])
    with pytest.raises(ValueError, match="unknown scale"):
        scale_per_head(img, "sqrt")


def test_figures_are_written(tmp_path):
    rng = np.random.default_rng(0)
    written = plot_attention_grid(rng.random((3, 4, 8, 8)), tmp_path / "grid", "t")
    written += plot_head_importance({"a": rng.random((3, 4)), "b": rng.random((3, 4))}, tmp_path / "imp")
    by_type = pd.DataFrame({"token": ["a", "b"], "count": [3, 1]})
    by_pos = pd.DataFrame({"token": ["a", "b"], "position": [4, 7], "count": [3, 1]})
    tables = {
        f"{k}_by_{b}": (by_type if b == "type" else by_pos)
        for k in ("attended", "attending")
        for b in ("type", "position")
    }
    written += plot_topk_counts(tables, tmp_path / "counts", 10, "t")
    inter = by_type.rename(columns={"count": "count_attended"}).assign(count_attending=[2, 2])
    inter_pos = by_pos.rename(columns={"count": "count_attended"}).assign(count_attending=[1, 1])
    written += plot_intersections(inter, inter_pos.iloc[:0], tmp_path / "inter", "t")
    written += plot_token_occurrences(by_pos.iloc[:1], "a", tmp_path / "occ", "t")
    assert len(written) == 10
    for path in written:
        assert path.stat().st_size > 1000, path
    assert {p.suffix for p in written} == {".png", ".pdf"}
