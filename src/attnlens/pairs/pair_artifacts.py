"""The pairs and the pair attributions as artifacts: the pair sources, checked and split, the score rows,
showcased pairs, their readers and the error summary. Plain pandas: the rules that tabulate and draw pair
attributions load no model."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import pyarrow as pa

from attnlens.data.corpus import generate_pairs
from attnlens.data.sources import compute_split, read_table
from attnlens.errors import InputError
from attnlens.io import load_parquet, load_shards

if TYPE_CHECKING:
    from attnlens.pairs.jacobians import PairAttribution

PAIRS_SCHEMA = "pairs/v1"


PAIR_SCORES_SCHEMA = "pair_scores/v2"


PAIR_MATRICES_SCHEMA = "pair_matrices/v2"


PAIR_CONVERGENCE_SCHEMA = "pair_convergence/v2"


PAIR_TOPOLOGY_SCHEMA = "pair_topology/v1"


PAIR_COLUMNS = ("pair_id", "text_a", "text_b", "gold")


#: Columns of an ``attribute_pairs`` shard's scores, one row per pair × model × similarity × mode.
PAIR_SCORES_TYPES = pa.schema(
    [
        ("pair_id", pa.string()),
        ("model", pa.string()),
        ("similarity", pa.string()),
        ("mode", pa.string()),
        ("layer", pa.int64()),
        ("n_steps", pa.int64()),
        ("quadrature", pa.string()),
        ("n_a", pa.int64()),
        ("n_b", pa.int64()),
    ]
    + [
        (name, pa.float64())
        for name in (
            "gold",
            "score",
            "score_a_rb",
            "score_ra_b",
            "score_ra_rb",
            "target",
            "total",
            "error",
            "score_error",
            "seconds",
        )
    ]
    + [("tokens_a", pa.list_(pa.string())), ("tokens_b", pa.list_(pa.string()))]
)


def _check_pairs(df: pd.DataFrame, where: str, cfg) -> pd.DataFrame:
    """``pair_id, text_a, text_b, gold`` (+ ``split`` when the source has one), checked."""
    for column in (cfg.text_a_column, cfg.text_b_column, cfg.score_column):
        if column not in df.columns:
            raise InputError(where, column, f"expected a column {column!r}; found {list(map(str, df.columns))}")
    if cfg.id_column is not None and cfg.id_column not in df.columns:
        raise InputError(where, cfg.id_column, f"expected a pair id column {cfg.id_column!r}")
    ids = df[cfg.id_column].astype(str) if cfg.id_column else pd.Series([f"pair{i:05d}" for i in range(len(df))])
    if ids.duplicated().any():
        raise InputError(where, cfg.id_column, f"expected unique pair ids, {ids[ids.duplicated()].iloc[0]!r} repeats")
    for column in (cfg.text_a_column, cfg.text_b_column):
        bad = [k for k, t in enumerate(df[column]) if not isinstance(t, str) or not t.strip()]
        if bad:
            raise InputError(where, column, f"expected non-empty text in every row, row {bad[0]} has none")
    gold = pd.to_numeric(df[cfg.score_column], errors="coerce")
    if gold.isna().any() or not np.isfinite(gold.to_numpy(dtype=float)).all():
        row = int(np.flatnonzero(gold.isna() | ~np.isfinite(gold.fillna(0).to_numpy(dtype=float)))[0])
        raise InputError(where, cfg.score_column, f"expected a finite number in every row, row {row} is not")
    out = pd.DataFrame(
        {
            "pair_id": ids.to_numpy(),
            "text_a": df[cfg.text_a_column].to_numpy(),
            "text_b": df[cfg.text_b_column].to_numpy(),
            "gold": gold.to_numpy(dtype=float),
        }
    )
    if "split" in df.columns:
        bad = sorted(set(df["split"].astype(str)) - {"train", "test"})
        if bad:
            raise InputError(where, "split", f"expected values 'train' or 'test', got {bad[:3]}")
        out["split"] = df["split"].astype(str).to_numpy()
    return out


def load_pair_source(cfg) -> tuple[pd.DataFrame, str]:
    """The pairs of ``pairs.data`` (a :class:`~attnlens.pipeline.config.PairDataConfig`) and where they came from."""
    if cfg.source == "synthetic":
        syn = cfg.synthetic
        df = generate_pairs(syn.n_pairs, cfg.seed, syn.n_filler, syn.n_phrases)
        out = df.rename(columns={"score": "gold"})
        return out, "synthetic pairs"
    if cfg.source == "file":
        path = Path(cfg.path)
        if not path.is_file():
            raise InputError(str(path), "pairs.data.path", "expected an existing CSV, JSONL or parquet file of pairs")
        return _check_pairs(read_table(path), str(path), cfg), str(path)
    import datasets  # noqa: PLC0415 (only the hub source needs it, and it is slow to import)

    hub = cfg.hub
    try:
        ds = datasets.load_dataset(hub.name, hub.config, split=hub.split, revision=hub.revision)
    except Exception as err:
        raise InputError(
            "config",
            "pairs.data.hub.name",
            f"could not load {hub.name!r} split {hub.split!r} from the Hugging Face Hub "
            f"({type(err).__name__}; offline or unknown id); use pairs.data.source 'file' offline",
        ) from None
    where = f"hub:{hub.name}"
    return _check_pairs(ds.to_pandas(), where, cfg), where


def split_pairs(df: pd.DataFrame, test_fraction: float, seed: int) -> np.ndarray:
    """``True`` marks test pairs: a seeded split stratified by grade (synthetic) or by gold-score tercile."""
    from scipy.stats import rankdata  # noqa: PLC0415 (0.9 s to import: loaded when a job ranks or tests)

    if "split" in df.columns:
        return df["split"].to_numpy() == "test"
    strata = df["grade"].to_numpy() if "grade" in df.columns else (rankdata(df["gold"], "min") - 1) * 3 // len(df)
    return compute_split(np.asarray(strata), test_fraction, seed)


def load_pairs(path) -> pd.DataFrame:
    return load_parquet(path, PAIRS_SCHEMA)[0]


def attribution_row(pair_id: str, model: str, res: PairAttribution, cfg, gold: float, seconds: float) -> dict:
    return {
        "pair_id": pair_id,
        "model": model,
        "similarity": res.similarity,
        "mode": res.mode,
        "layer": cfg.attribution.layer,
        "n_steps": res.n_steps,
        "quadrature": res.quadrature,
        "n_a": res.matrix.shape[0],
        "n_b": res.matrix.shape[1],
        "gold": gold,
        "score": res.score,
        "score_a_rb": res.score_a_rb,
        "score_ra_b": res.score_ra_b,
        "score_ra_rb": res.score_ra_rb,
        "target": res.target,
        "total": res.total,
        "error": res.error,
        "score_error": res.score_error,
        "seconds": seconds,
    }


def matrix_key(pair_id: str, model: str, similarity: str, mode: str) -> str:
    """Name of one pair's matrix in an ``attribute_pairs`` shard (safetensors)."""
    return f"{pair_id}/{model}/{similarity}/{mode}"


def showcased_pairs(pairs: pd.DataFrame, n: int) -> list[str]:
    """Up to ``n`` test pairs: highest gold score, lowest, the middle one, then the rest by pair id."""
    ordered = pairs.sort_values(["gold", "pair_id"], ascending=[False, True])["pair_id"].tolist()
    picks = [ordered[0], ordered[-1], ordered[len(ordered) // 2]] if ordered else []
    picks += [p for p in sorted(ordered) if p not in picks]
    return list(dict.fromkeys(picks))[:n]


def load_scores(paths) -> pd.DataFrame:
    return load_shards(paths, PAIR_SCORES_SCHEMA, PAIR_SCORES_TYPES).sort_values(
        ["model", "similarity", "mode", "pair_id"], ignore_index=True
    )


def error_summary(scores: pd.DataFrame) -> pd.DataFrame:
    """Per model, similarity and mode: how well ΣA adds up to the target and to the score, and the score's rank
    agreement."""
    from scipy.stats import spearmanr  # noqa: PLC0415 (0.9 s to import: loaded when a job ranks or tests)

    rows = []
    for (model, sim, mode), part in scores.groupby(["model", "similarity", "mode"], sort=False):
        rel = np.abs(part["score_error"]) / np.maximum(np.abs(part["score"]), 1e-12)
        rows.append(
            {
                "model": model,
                "similarity": sim,
                "mode": mode,
                "pairs": len(part),
                "mean abs error": float(np.abs(part["error"]).mean()),
                "max abs error": float(np.abs(part["error"]).max()),
                "mean abs(ΣA − score)": float(np.abs(part["score_error"]).mean()),
                "median abs(ΣA − score) / abs(score)": float(np.median(rel)),
                "spearman(score, gold)": float(spearmanr(part["score"], part["gold"]).statistic)
                if part["score"].nunique() > 1 and part["gold"].nunique() > 1
                else None,
                "seconds per pair and model": float(part["seconds"].mean()),
            }
        )
    return pd.DataFrame(rows)
