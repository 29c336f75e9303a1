"""Paper tables as CSV + LaTeX + Markdown, and the attribution tables of recipes §10.

Attribution tables read the L2-normalised IG scores (§9.1 step 6):

* per example — the ``top_n`` most positive and most negative tokens with their positions
  (Fig 10 a/b), and the scores summed per token type (Fig 10 c/d);
* over the dataset — per token type, the legacy ``Σ / N`` (sum over every example's per-type sums,
  divided by the number of examples N, Fig 10 e/f) next to the mean per occurrence with its
  occurrence and example counts (B-18).

Each table comes masked (``figures.mask``) and unmasked, labelled in its name and caption. In
``legacy`` mode tokens are grouped by their raw string (with ``Ġ`` / ``##``) and displayed
stripped — the original's duplicate labels (B-18); ``fixed`` groups by the surface string.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from attnlens.data.tokens import display_tokens
from attnlens.io import atomic_path, write_csv, write_sidecar
from attnlens.render.escape import latex_escape, markdown_cell
from attnlens.similarity.aggregate import GROUP
from attnlens.similarity.metrics import MODES
from attnlens.similarity.paper import LAYER_LABELS, MASKED_WITH, PaperMetric
from attnlens.stats import MIN_BOOTSTRAP, bootstrap_means, not_computable

#: Tokens seen fewer times than this are left out of the mean-per-occurrence ranking (too noisy).
MIN_OCCURRENCES = 3


def write_table(df: pd.DataFrame, stem: Path, caption: str) -> list[Path]:
    """``<stem>.csv``, ``.tex`` (booktabs, every special character escaped), ``.md`` and their provenance sidecar."""
    stem = Path(stem)
    written = []
    with atomic_path(stem.with_suffix(".csv")) as tmp:
        write_csv(df, tmp)
    written.append(stem.with_suffix(".csv"))
    rows = [" & ".join(latex_escape(str(c)) for c in df.columns) + r" \\"]
    for rec in df.itertuples(index=False):
        rows.append(" & ".join(latex_escape(_fmt(v)) for v in rec) + r" \\")
    tex = (
        "\\begin{table}[ht]\n\\centering\n"
        f"\\caption{{{latex_escape(caption)}}}\n"
        f"\\begin{{tabular}}{{{'l' * len(df.columns)}}}\n\\toprule\n{rows[0]}\n\\midrule\n"
        + "\n".join(rows[1:])
        + "\n\\bottomrule\n\\end{tabular}\n\\end{table}\n"
    )
    with atomic_path(stem.with_suffix(".tex")) as tmp:
        tmp.write_text(tex, encoding="utf-8")
    written.append(stem.with_suffix(".tex"))
    with atomic_path(stem.with_suffix(".md")) as tmp:
        tmp.write_text(markdown_table(df, caption), encoding="utf-8")
    written.append(stem.with_suffix(".md"))
    write_sidecar(stem, [p.name for p in written])
    return written


def markdown_table(df: pd.DataFrame, caption: str) -> str:
    """A captioned Markdown table; caption, header and cells escaped (:func:`attnlens.render.escape.markdown_cell`)."""
    md = [
        f"**{markdown_cell(caption)}**",
        "",
        "| " + " | ".join(markdown_cell(c) for c in df.columns) + " |",
        "|" + "---|" * len(df.columns),
    ]
    md += ["| " + " | ".join(markdown_cell(_fmt(v)) for v in rec) + " |" for rec in df.itertuples(index=False)]
    return "\n".join(md) + "\n"


def number(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals; a value that rounds to zero prints ``0.000``, never ``-0.000``."""
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _fmt(value) -> str:
    if value is None or (isinstance(value, float | np.floating) and np.isnan(value)):
        return "n/a"
    if isinstance(value, float | np.floating):
        return number(value, 4)
    return str(value)


def token_labels(tokenizer, ids, mode: str) -> tuple[list[str], list[str]]:
    """``(group keys, display labels)``: raw token / stripped (legacy) or surface / surface (fixed)."""
    shown = display_tokens(tokenizer, ids)
    if mode == "legacy":
        return tokenizer.convert_ids_to_tokens([int(i) for i in ids]), shown
    return shown, shown


def top_tokens(scores: np.ndarray, labels: list[str], keep: np.ndarray, n: int, positive: bool) -> pd.DataFrame:
    """The ``n`` most positive (or negative) kept tokens, ties by position: ``token, position, attribution``."""
    pos = np.flatnonzero(keep)
    order = np.lexsort((pos, -scores[pos] if positive else scores[pos]))[:n]
    chosen = pos[order]
    return pd.DataFrame(
        {"token": [labels[i] for i in chosen], "position": chosen, "attribution": scores[chosen].astype(float)}
    )


def per_type_sums(scores: np.ndarray, keys: list[str], shown: list[str], keep: np.ndarray) -> pd.DataFrame:
    """Scores summed per token type (kept tokens): ``key, token, attribution, occurrences``."""
    frame = pd.DataFrame({"key": keys, "token": shown, "attribution": scores.astype(float)})[keep]
    return (
        frame.groupby("key", sort=False)
        .agg(token=("token", "first"), attribution=("attribution", "sum"), occurrences=("attribution", "size"))
        .reset_index()
    )


def ranked(frame: pd.DataFrame, column: str, n: int, positive: bool) -> pd.DataFrame:
    """Top ``n`` rows by ``column`` (descending, or ascending for the negative side), ties by token."""
    out = frame.sort_values([column, "token"], ascending=[not positive, True], kind="stable").head(n)
    return out.reset_index(drop=True)


def dataset_aggregate(per_example: list[pd.DataFrame]) -> pd.DataFrame:
    """Combine per-example type sums: legacy ``Σ / N`` and the mean per occurrence (with counts)."""
    n = len(per_example)
    if not n:
        return pd.DataFrame(columns=["token", "sum_over_n", "mean_per_occurrence", "occurrences", "examples"])
    allx = pd.concat(per_example, ignore_index=True)
    agg = (
        allx.groupby("key", sort=False)
        .agg(
            token=("token", "first"),
            total=("attribution", "sum"),
            occurrences=("occurrences", "sum"),
            examples=("attribution", "size"),
        )
        .reset_index()
    )
    agg["sum_over_n"] = agg["total"] / n
    agg["mean_per_occurrence"] = agg["total"] / agg["occurrences"]
    return agg[["key", "token", "sum_over_n", "mean_per_occurrence", "occurrences", "examples"]]


CONVERGENCE_CAPTION = (
    "IG convergence: examples per final step count, how many met the tolerance, and |delta| / |F(x) - F(x')|"
)


def convergence_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per final step count: examples, converged, not converged, median and max relative delta; and a total row."""
    rows = []
    groups = [(str(s), g) for s, g in frame.groupby("n_steps")] + [("all", frame)]
    for steps, g in groups:
        rel = g["relative_delta"].astype(float)
        ok = g["converged"].astype(bool)
        rows.append(
            {
                "n_steps": steps,
                "examples": len(g),
                "converged": int(ok.sum()),
                "not_converged": int((~ok).sum()),
                "median_relative_delta": float(rel.median()) if len(g) else float("nan"),
                "max_relative_delta": float(rel.max()) if len(g) else float("nan"),
            }
        )
    return pd.DataFrame(rows)


def scientific(frame: pd.DataFrame, columns) -> pd.DataFrame:
    """A copy of ``frame`` with ``columns`` as ``1.23e-04`` strings (None for missing or non-finite values)."""
    out = frame.copy()
    for c in columns:
        out[c] = [f"{v:.2e}" if v is not None and np.isfinite(v) else None for v in out[c]]
    return out


# --- the similarity stage's table layouts (Tables 1–4, the in-depth example tables) ---------------


def interval_cell(row: pd.Series) -> str:
    """``mean [95 % CI] (chance)`` of one summary row, three decimals; a missing number gives its reason."""
    note = row.get("note") or ""
    if pd.isna(row["mean"]):
        return note or "n/a"
    mean, chance = number(row["mean"], 3), number(row["chance"], 3)
    if pd.isna(row["ci_lo"]):
        return f"{mean} [no interval: {note or 'n/a'}] ({chance})"
    return f"{mean} [{number(row['ci_lo'], 3)}, {number(row['ci_hi'], 3)}] ({chance})"


def paper_table(summary: pd.DataFrame, metrics: Sequence[PaperMetric], layers=("last", "all")) -> pd.DataFrame:
    """Tables 1–4 layout: rows layers × scaled × masked; per metric a legacy and a fixed column.

    A cell is ``mean [95 % CI] (chance)``; "masked" is the legacy zero-filled mask in legacy
    columns and the fixed position subset in fixed columns.
    """
    index = summary.set_index(GROUP)
    rows = []
    for ly in layers:
        for scaled in (True, False):
            for masked in (True, False):
                row = {
                    "layers": LAYER_LABELS[ly],
                    "scaled": "yes" if scaled else "no",
                    "masked": "yes" if masked else "no",
                }
                for m in metrics:
                    for mode, name, header in (
                        ("legacy", m.legacy, m.legacy_header),
                        ("fixed", m.fixed, m.fixed_header),
                    ):
                        key = (mode, ly, scaled, MASKED_WITH[mode] if masked else "none", name)
                        row[header] = interval_cell(index.loc[key]) if key in index.index else "n/a"
                rows.append(row)
    return pd.DataFrame(rows)


def example_metrics_table(rows: pd.DataFrame, layers=("last", "all")) -> pd.DataFrame:
    """One example's metrics (scaled, as in the notebooks): ``value (chance)`` per layers × masked."""
    rows = rows[rows["scaled"] & rows["configuration"].isin(layers)]
    out = []
    for mode in MODES:
        part = rows[rows["mode"] == mode]
        for metric in dict.fromkeys(part["metric"]):
            rec = {"mode": mode, "metric": metric}
            for ly in layers:
                for masked in (False, True):
                    mask = MASKED_WITH[mode] if masked else "none"
                    hit = part[(part["metric"] == metric) & (part["configuration"] == ly) & (part["mask"] == mask)]
                    v = hit.iloc[0] if len(hit) else None
                    label = f"{LAYER_LABELS[ly]}{', masked' if masked else ''}"
                    rec[label] = (
                        "n/a"
                        if v is None or pd.isna(v["value"])
                        else f"{number(v['value'], 4)} ({number(v['chance'], 4)})"
                    )
            out.append(rec)
    return pd.DataFrame(out)


def summary_table(frame: pd.DataFrame, metrics: Sequence[str], seed: int) -> pd.DataFrame:
    """Per ranking: ``metric`` mean with ``[lo, hi]`` bootstrap interval, and the example count."""
    rows = []
    for name, part in frame.groupby("ranking", sort=False):
        row = {"ranking": name, "examples": int(part["example_id"].nunique())}
        for m in metrics:
            values = part[m].to_numpy(dtype=np.float64)[:, None]
            mean, lo, hi = (float(x[0]) for x in bootstrap_means(values, seed, n_boot=1000))
            n = int(np.isfinite(values).sum())
            row[m] = mean if np.isfinite(mean) else not_computable(n, "no defined value")
            row[f"{m}_ci95"] = (
                f"[{number(lo, 3)}, {number(hi, 3)}]"
                if np.isfinite(lo)
                else not_computable(n, f"an interval needs {MIN_BOOTSTRAP} values")
            )
        rows.append(row)
    return pd.DataFrame(rows)


def leaderboard_table(summary: pd.DataFrame, columns: Sequence) -> pd.DataFrame:
    """One row per method, one column per metric (:func:`attnlens.attribution.leaderboard.metrics`): ``mean [lo, hi]``,
    chance in parentheses for agreement, ``*`` where the paired test against the baseline gives p < 0.05 after Holm's
    adjustment over every test of the table;
    ``–`` where the method has no such number (the random control's agreement and cost)."""
    methods = list(dict.fromkeys(summary["method"]))
    by_key = {(r.method, r.metric): r for r in summary.itertuples(index=False)}
    rows = []
    for method in methods:
        row = {"method": method}
        for metric in columns:
            r = by_key.get((method, metric.name))
            if r is None:
                row[metric.label] = "reference" if method == "ig" and metric.group == "agreement" else "–"
                continue
            digits = 2 if metric.group == "cost" else 3
            if not np.isfinite(r.mean):
                row[metric.label] = not_computable(r.n, "no defined value")
                continue
            text = f"{r.mean:.{digits}f}"
            if np.isfinite(r.lo):
                text += f" [{r.lo:.{digits}f}, {r.hi:.{digits}f}]"
            if metric.group == "agreement" and np.isfinite(r.chance):
                text += f" (chance {r.chance:.3f})"
            if np.isfinite(r.p_holm) and r.p_holm < 0.05:
                text += " *"
            row[metric.label] = text
        rows.append(row)
    return pd.DataFrame(rows)
