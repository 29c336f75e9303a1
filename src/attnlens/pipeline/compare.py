"""Are two runs' results the same? Every artifact compared by content, wall times and provenance left out.

    python -m attnlens.pipeline.compare RESULTS_A RESULTS_B     # or: python -m attnlens.pipeline.compare A B

``RESULTS_A`` and ``RESULTS_B`` are two runs' ``results/`` folders. Prints the artifacts that differ (one per
line) and exits 1 if any does, 0 if none. What may differ without counting is :data:`MAY_DIFFER`, each with
its reason: logs, timings, provenance stamps, wall-time columns. Tables, parquet contents, tensors, model
weights and figures' pixels must be equal, every number to the last bit. ``tests/e2e/test_rerun.py`` uses it to
show that a killed and resumed run equals an uninterrupted one; ``benchmarks/side_by_side.py`` to show that a
faster commit gives the same numbers.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from PIL import Image
from safetensors import safe_open

#: What two runs may differ in, and why. Everything else must be byte-identical (or, for containers
#: whose metadata carries provenance, identical in content).
MAY_DIFFER = {
    "logs/": "logs and job records hold times and durations",
    "benchmarks/": "Snakemake's per-job timings",
    ".provenance.json": "provenance sidecars hold the creation time",
    "key git_commit": "the commit that wrote an artifact (models/*/provenance.json): two commits' runs differ in it",
    "manifest.json": "the manifest copies each artifact's provenance (creation times) and the files' hashes",
    "run_notes.csv": "compared as content: its rows are the same, in the same order",
    ".pdf": "PDF figures embed their provenance (creation time); their PNG twins are compared pixel by pixel",
    "column or key seconds": "wall times: pair attributions per pair (pairs/scores_shard*, pairs/tables), training "
    "per epoch and in all (train_metrics.json: seconds, train_seconds), the pair encoder's training "
    "(pair_encoder_exact_metrics.json: seconds, seconds_per_step)",
    "column seconds per pair and model": "the pair error table's mean wall time",
    "column forward_seconds": "explain's wall time of one forward per example (explanations/shard*)",
    "columns seconds per example, cost / one forward pass": "the explanation leaderboard's cost columns",
    "rows with metric seconds or cost_ratio": "the explanation leaderboard's cost per example and its summary",
    "paper/figures/explanation_leaderboard.png": "two of its panels plot those wall times (its numbers are "
    "compared in explanations/leaderboard.parquet)",
    "column or key ablation_seconds, fit_seconds, peak_bytes; rows with metric peak_mib": "the generation study's "
    "wall times and peak memory per answer and method (generation/scores, judged, leaderboard, learned_attention): "
    "off a card the peak is the rise of the process's resident peak, which its earlier work moves",
    "columns seconds per answer, peak memory (MiB)": "the answer leaderboard's cost columns",
    "paper/figures/answer_leaderboard.png": "its cost panels plot those wall times and peaks (its numbers are "
    "compared in generation/leaderboard.parquet)",
}
#: Table columns and JSON keys holding wall times (see MAY_DIFFER).
TIMING_COLUMNS = (
    "seconds",
    "seconds per pair and model",
    "train_seconds",
    "seconds_per_step",
    "forward_seconds",
    "ablation_seconds",
    "fit_seconds",
    "peak_bytes",
    "seconds per answer",
    "peak memory (MiB)",
    "seconds per example",
    "cost / one forward pass",
)
#: Values of a ``metric`` column whose rows are wall times (see MAY_DIFFER).
TIMING_METRICS = ("seconds", "cost_ratio", "peak_mib")
#: Files that plot wall times (see MAY_DIFFER).
TIMING_FIGURES = ("paper/figures/explanation_leaderboard.png", "paper/figures/answer_leaderboard.png")


def _parquet_rows(path: Path) -> dict:
    table = pq.read_table(path)
    keep = (
        [m not in TIMING_METRICS for m in table.column("metric").to_pylist()]
        if "metric" in table.column_names
        else [True] * table.num_rows
    )
    return {
        name: [v for v, k in zip(table.column(name).to_pylist(), keep, strict=True) if k]
        for name in table.column_names
        if name not in TIMING_COLUMNS
    }


def _tensors(path: Path) -> dict:
    with safe_open(str(path), "np") as fh:
        return {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (safe_open is not a mapping)


def _csv_rows(path: Path) -> list[list[str]]:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8"))))
    drop = {i for i, h in enumerate(rows[0] if rows else []) if h in TIMING_COLUMNS}
    return [[c for i, c in enumerate(r) if i not in drop] for r in _without_timing_rows(rows)]


def _without_timing_rows(rows: list[list[str]]) -> list[list[str]]:
    """Rows whose ``metric`` cell is a wall time left out (tables with a ``metric`` column)."""
    header = next((r for r in rows if "metric" in r), None)
    if header is None:
        return rows
    at = header.index("metric")
    return [r for r in rows if not (len(r) == len(header) and r[at].replace("\\_", "_") in TIMING_METRICS)]


def _table_rows(path: Path) -> list[list[str]]:
    """Rows of a Markdown (``| a | b |``) or LaTeX (``a & b \\``) table, timing columns left out. A Markdown row is a
    line that starts with ``|``, split at unescaped ``|`` (a caption's ``\\|x\\|`` is text, not cells)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if path.suffix == ".md":
        rows = [
            [c.strip() for c in re.split(r"(?<!\\)\|", ln.strip().strip("|"))] if ln.startswith("|") else [ln]
            for ln in lines
        ]
    else:
        rows = [[c.strip() for c in ln.removesuffix(r" \\").split(" & ")] if " & " in ln else [ln] for ln in lines]
    header = next((r for r in rows if len(r) > 1), [])
    drop = {i for i, c in enumerate(header) if c in TIMING_COLUMNS}
    return [[c for i, c in enumerate(r) if i not in drop] for r in _without_timing_rows(rows)]


def _without_times(value):
    if isinstance(value, dict):
        skip = ("provenance", "created", "git_commit", *TIMING_COLUMNS)
        return {k: _without_times(v) for k, v in value.items() if k not in skip}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    return value


def _json_content(path: Path):
    return _without_times(json.loads(path.read_text(encoding="utf-8")))


def _png_pixels(path: Path) -> np.ndarray:
    with Image.open(path) as img:
        return np.asarray(img.convert("RGBA"))


def _html_content(path: Path) -> str:
    """The page without its provenance: the head's meta tag and the commit the explorer's data names."""
    text = re.sub(r'<meta name="attnlens-provenance" content="[^"]*">', "", path.read_text(encoding="utf-8"))
    return re.sub(r'"git_commit":"[^"]*"', '"git_commit":""', text)


def _content(path: Path) -> Callable[[Path], object] | None:
    """How a file is compared: its content without provenance; ``None``: byte for byte."""
    return {
        ".parquet": _parquet_rows,
        ".safetensors": _tensors,
        ".json": _json_content,
        ".png": _png_pixels,
        ".html": _html_content,
        ".csv": _csv_rows,
        ".md": _table_rows,
        ".tex": _table_rows,
    }.get(path.suffix)


def _equal(a, b) -> bool:
    """``a == b`` through dicts, lists and arrays (NaN equal to NaN; arrays to the last bit, dtype included)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (a != a and b != b)  # NaN in both
    return a == b


def differences(a_root: Path, b_root: Path) -> list[str]:
    """The artifacts of ``a_root`` and ``b_root`` (two ``results/`` folders) that differ, or exist in one only:
    every number to the last bit."""
    skip = ("logs/", "benchmarks/")
    files_a = {p.relative_to(a_root).as_posix() for p in a_root.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b_root).as_posix() for p in b_root.rglob("*") if p.is_file()}
    out = [f"only in one run: {f}" for f in sorted(files_a ^ files_b) if not f.startswith(skip)]
    return out + [
        rel for rel in sorted(files_a & files_b) if not rel.startswith(skip) and not same(a_root, b_root, rel)
    ]


def same(a_root: Path, b_root: Path, rel: str) -> bool:
    """Whether artifact ``rel`` (a file's path below two ``results/`` folders) is the same in both, as
    :func:`differences` compares it: its content to the last bit, what :data:`MAY_DIFFER` aside."""
    if rel.endswith((".provenance.json", ".pdf")) or rel in ("manifest.json", *TIMING_FIGURES):
        return True
    a, b = a_root / rel, b_root / rel
    if a.read_bytes() == b.read_bytes():
        return True
    compare = _content(a)
    if rel.startswith("models/") and rel.count("/") >= 2 and a.name != "provenance.json":
        compare = _content(a) if a.suffix == ".safetensors" else None  # config.json, tokenizer: byte for byte
    return compare is not None and _equal(compare(a), compare(b))


def describe(a_root: Path, b_root: Path, rel: str) -> str:
    """How a table artifact ``rel`` differs between two runs: per differing column, the rows that differ, the largest
    absolute difference of a numeric column and the first differing row — whether a difference is a last-bit
    rounding or a changed result. Other files: ``rel`` alone."""
    if not rel.endswith(".parquet") or not (a_root / rel).exists() or not (b_root / rel).exists():
        return rel
    ta, tb = (pq.read_table(root / rel).to_pandas() for root in (a_root, b_root))
    if "metric" in ta.columns and "metric" in tb.columns:  # wall-time rows left out, as differences() does
        ta, tb = (t[~t["metric"].isin(TIMING_METRICS)].reset_index(drop=True) for t in (ta, tb))
    if list(ta.columns) != list(tb.columns) or len(ta) != len(tb):
        return f"{rel}: columns {list(ta.columns)} / {list(tb.columns)}, rows {len(ta)} / {len(tb)}"
    parts = []
    for column in ta.columns:
        if column in TIMING_COLUMNS:
            continue
        x, y = ta[column], tb[column]
        if x.dtype.kind in "fiu" and y.dtype.kind in "fiu":
            diff = (x.astype(float) - y.astype(float)).abs()
            rows = np.flatnonzero(~((x == y) | (x.isna() & y.isna())).to_numpy())
            detail = f", largest |Δ| {float(diff.max()):.3g}" if len(rows) else ""
        else:
            rows = np.flatnonzero([not _equal(u, v) for u, v in zip(x.tolist(), y.tolist(), strict=True)])
            detail = ""
        if len(rows):
            first = ta.iloc[rows[0]].drop(labels=[column]).to_dict()
            parts.append(f"{column}: {len(rows)} of {len(ta)} rows{detail}; first {first}")
    return f"{rel}: " + (" | ".join(parts) if parts else "equal after the timing columns")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs=2, type=Path, help="two runs' results/ folders")
    args = parser.parse_args(argv)
    differ = differences(*args.results)
    print("\n".join(describe(*args.results, rel) for rel in differ) if differ else "same results")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
