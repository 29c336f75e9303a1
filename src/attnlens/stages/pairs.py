"""Rules of ``workflow/rules/pairs.smk``: pair data, exact-mode training, pair attributions, their convergence and
topology (the tables and figures: :mod:`attnlens.stages.report`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from attnlens.data.tokens import display_tokens
from attnlens.errors import InputError
from attnlens.io import (
    StrPath,
    atomic_dir,
    provenance,
    save_json,
    save_parquet,
    save_tensors,
)
from attnlens.pairs.encoder import PAIR_MODEL_FILE, SiameseEncoder, pair_inputs
from attnlens.pairs.encoder_training import train_pair_encoder
from attnlens.pairs.jacobians import QUADRATURES, attribute_pair
from attnlens.pairs.pair_artifacts import (
    PAIR_CONVERGENCE_SCHEMA,
    PAIR_MATRICES_SCHEMA,
    PAIR_SCORES_SCHEMA,
    PAIR_SCORES_TYPES,
    PAIR_TOPOLOGY_SCHEMA,
    PAIRS_SCHEMA,
    attribution_row,
    load_pair_source,
    load_pairs,
    matrix_key,
    showcased_pairs,
    split_pairs,
)
from attnlens.pipeline.config import PairDataConfig, PairsConfig
from attnlens.pipeline.entry import stage
from attnlens.render.tables import write_table
from attnlens.sharding import shard_of
from attnlens.stats import rank_correlation
from attnlens.topology.persistence import bottleneck
from attnlens.topology.pooling import text_topology

logger = logging.getLogger(__name__)


@stage("pairs.data")
def run_prepare_pairs(cfg: PairDataConfig, train_path: StrPath, test_path: StrPath) -> dict:
    """Rule ``prepare_pairs``: the pair source, checked and split into train and test pairs."""
    df, where = load_pair_source(cfg)
    if len(df) < 4:
        raise InputError(where, "(rows)", f"expected at least 4 pairs to split, found {len(df)}")
    is_test = split_pairs(df, cfg.test_fraction, cfg.seed)
    if is_test.all() or not is_test.any():
        raise InputError(where, "split", "expected both train and test pairs")
    df = df.drop(columns=["split"], errors="ignore")
    prov = provenance(PAIRS_SCHEMA, cfg.to_dict(), cfg.seed, source=where)
    save_parquet(df[~is_test].reset_index(drop=True), train_path, {**prov, "split": "train"})
    save_parquet(df[is_test].reset_index(drop=True), test_path, {**prov, "split": "test"})
    logger.info("%s: %d train and %d test pairs", where, int((~is_test).sum()), int(is_test.sum()))
    return {"train": int((~is_test).sum()), "test": int(is_test.sum())}


@stage("pairs")
def run_train_pair_encoder(
    cfg: PairsConfig, train_path: StrPath, test_path: StrPath, model_dir: StrPath, metrics_path: StrPath
) -> dict:
    """Rule ``train_pair_encoder``: the exact-mode model (``save_pretrained`` + :data:`PAIR_MODEL_FILE`)."""
    model, tok, spec, metrics = train_pair_encoder(
        cfg.encoder, cfg.exact, load_pairs(train_path), load_pairs(test_path)
    )
    prov = provenance(
        "pair_encoder/v1", {"encoder": cfg.encoder.to_dict(), "exact": cfg.exact.to_dict()}, cfg.exact.seed
    )
    with atomic_dir(model_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / PAIR_MODEL_FILE).write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        (tmp / "provenance.json").write_text(json.dumps(prov, indent=2) + "\n", encoding="utf-8")
    save_json(metrics, metrics_path, prov)
    return metrics


def _models(cfg, exact_dir) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(model name, folder or id, similarities)`` to attribute: off-the-shelf, then exact."""
    out = [("off_the_shelf", cfg.encoder.name_or_path, tuple(cfg.attribution.similarities))]
    if exact_dir is not None:
        out.append(("exact", str(exact_dir), ("shifted_dot",)))
    return out


@stage("pairs")
def run_attribute_pairs(
    cfg: PairsConfig,
    test_path: StrPath,
    shard: int,
    matrices_path: StrPath,
    scores_path: StrPath,
    exact_dir: StrPath | None = None,
) -> dict:
    """Rule ``attribute_pairs``: token × token matrices and score terms of the shard's test pairs, every model."""
    pairs = load_pairs(test_path)
    mine = pairs[[shard_of(p, cfg.attribution.n_shards) == shard for p in pairs["pair_id"]]]
    att = cfg.attribution
    rows, tensors = [], {}
    for model_name, source, sims in _models(cfg, exact_dir):
        enc = SiameseEncoder.load(source, att.layer, "pairs.encoder.name_or_path")
        for row in mine.to_dict("records"):
            x = pair_inputs(enc, row, cfg)
            tokens = {f"tokens_{s}": display_tokens(enc.tokenizer, x[s][0].tolist()) for s in "ab"}
            for mode in att.modes:
                t0 = time.perf_counter()
                res = attribute_pair(
                    enc.pool,
                    x["a"][1],
                    x["a"][2],
                    x["b"][1],
                    x["b"][2],
                    att.n_steps,
                    sims,
                    att.chunk,
                    att.quadrature,
                    mode,
                )
                seconds = time.perf_counter() - t0  # one pass gives every similarity of this model and mode
                for sim, r in res.items():
                    tensors[matrix_key(row["pair_id"], model_name, sim, mode)] = torch.from_numpy(r.matrix)
                    rows.append({**attribution_row(row["pair_id"], model_name, r, cfg, row["gold"], seconds), **tokens})
                logger.info("%s %s (%s): %.1f s", row["pair_id"], model_name, mode, seconds)
    section = {"encoder": cfg.encoder.to_dict(), "attribution": att.to_dict()}
    prov = provenance(PAIR_SCORES_SCHEMA, section, None, shard=shard)
    save_tensors(tensors, matrices_path, {**prov, "schema": PAIR_MATRICES_SCHEMA})
    save_parquet(pd.DataFrame(rows), scores_path, prov, PAIR_SCORES_TYPES)
    return {"pairs": len(mine)}


@stage("pairs")
def run_pair_convergence(
    cfg: PairsConfig, test_path: StrPath, out_path: StrPath, exact_dir: StrPath | None = None
) -> dict:
    """Rule ``pair_convergence``: attribution error against the number of steps for one pair.

    Fixed mode is run with both quadrature rules (Gauss–Legendre and midpoint); legacy mode (when
    ``pairs.attribution.modes`` has it) with its right Riemann sum.
    """
    pairs = load_pairs(test_path)
    pair_id = showcased_pairs(pairs, 1)[0]
    row = pairs.set_index("pair_id").loc[pair_id].to_dict() | {"pair_id": pair_id}
    rows = []
    for model_name, source, sims in _models(cfg, exact_dir):
        enc = SiameseEncoder.load(source, cfg.attribution.layer, "pairs.encoder.name_or_path")
        x = pair_inputs(enc, row, cfg)
        runs = [("fixed", rule) for rule in QUADRATURES if "fixed" in cfg.attribution.modes]
        runs += [("legacy", "right_riemann")] if "legacy" in cfg.attribution.modes else []
        for mode, rule in runs:
            for n in cfg.attribution.convergence_steps:
                t0 = time.perf_counter()
                res = attribute_pair(
                    enc.pool, x["a"][1], x["a"][2], x["b"][1], x["b"][2], n, sims, cfg.attribution.chunk, rule, mode
                )
                seconds = time.perf_counter() - t0
                rows += [attribution_row(pair_id, model_name, r, cfg, row["gold"], seconds) for r in res.values()]
    section = {"encoder": cfg.encoder.to_dict(), "attribution": cfg.attribution.to_dict()}
    save_parquet(pd.DataFrame(rows), out_path, provenance(PAIR_CONVERGENCE_SCHEMA, section, None, pair_id=pair_id))
    return {"pair_id": pair_id}


@stage("pairs")
def run_pair_topology(
    cfg: PairsConfig, pair_paths: Sequence[StrPath], out_path: StrPath, correlation_path: StrPath, table_stem: StrPath
) -> dict:
    """Rule ``pair_topology``: does attention topology track the encoder's similarity and the gold grade?

    Every pair (train and test: the off-the-shelf encoder has seen none of them) is used.

    Each text's attention (every head of ``topology.layers``, the off-the-shelf encoder) becomes an
    MI distance and a Rips persistence diagram, as in the topology stage; each pair gets the
    bottleneck distance of its two diagrams per estimator and dimension (``max`` = the larger of
    H0 and H1). The table gives Spearman's ρ of that distance against the encoder's cosine
    similarity and against the gold score, with permutation p-values; a distance that tracks
    similarity has ρ < 0.
    """
    topo = cfg.topology
    pairs = pd.concat([load_pairs(p) for p in pair_paths], ignore_index=True).sort_values("pair_id")
    enc = SiameseEncoder.load(cfg.encoder.name_or_path, 0, "pairs.encoder.name_or_path")
    rows, t0 = [], time.perf_counter()
    for row in pairs.to_dict("records"):
        tops = [text_topology(enc.model, enc.tokenizer, row[f"text_{s}"], topo, cfg.encoder.max_tokens) for s in "ab"]
        with torch.no_grad():
            g = enc.embed([enc.encode(row[f"text_{s}"], cfg.encoder.max_tokens) for s in "ab"])
        cosine = float(torch.nn.functional.cosine_similarity(g[0], g[1], dim=0))
        for est in topo.estimators:
            (_, _, dgm_a, _), (_, _, dgm_b, _) = tops[0][est], tops[1][est]
            per_dim = {str(d): bottleneck(dgm_a[d], dgm_b[d]) for d in range(topo.max_dimension + 1)}
            per_dim["max"] = max(per_dim.values())
            for dim, value in per_dim.items():
                bars = (len(dgm_a[int(dim)]), len(dgm_b[int(dim)])) if dim != "max" else (None, None)
                rows.append(
                    {
                        "pair_id": row["pair_id"],
                        "estimator": est,
                        "dim": dim,
                        "bottleneck": value,
                        "cosine": cosine,
                        "gold": row["gold"],
                        "bars_a": bars[0],
                        "bars_b": bars[1],
                    }
                )
    frame = pd.DataFrame(rows)
    seconds = time.perf_counter() - t0
    once = frame.drop_duplicates("pair_id")
    own = rank_correlation(once["cosine"].to_numpy(), once["gold"].to_numpy(), topo.n_permutations, topo.seed)
    results = [{"estimator": "-", "dim": "-", "x": "encoder cosine", "y": "gold", **own}]
    for (est, dim), part in frame.groupby(["estimator", "dim"], sort=False):
        for against, label in (("cosine", "encoder cosine"), ("gold", "gold")):
            x = part["bottleneck"].to_numpy()
            if np.ptp(x) == 0:  # every pair equally far (e.g. no H1 bar anywhere): nothing to correlate
                stats = {"spearman": None, "p_value": None, "n": len(x), "n_permutations": topo.n_permutations}
            else:
                stats = rank_correlation(x, part[against].to_numpy(), topo.n_permutations, topo.seed)
            results.append({"estimator": est, "dim": dim, "x": "bottleneck", "y": label, **stats})
    prov = provenance(
        PAIR_TOPOLOGY_SCHEMA,
        {"encoder": cfg.encoder.to_dict(), "topology": topo.to_dict()},
        topo.seed,
        seconds=round(seconds, 2),
    )
    save_parquet(frame, out_path, prov)
    save_json({"correlations": results}, correlation_path, {**prov, "schema": "pair_topology_correlation/v1"})
    table = pd.DataFrame(results).rename(columns={"spearman": "spearman_rho", "dim": "homology"})
    write_table(
        table[["x", "y", "estimator", "homology", "spearman_rho", "p_value", "n"]],
        table_stem,
        "Does attention topology track similarity? Spearman ρ of the bottleneck distance between the two texts' "
        "attention persistence diagrams against the encoder's cosine similarity and against the gold score "
        f"(first row: the encoder's own agreement with the gold score); two-sided p from {topo.n_permutations} "
        "permutations. Tracking means ρ < 0; empty cells: every pair equally far.",
    )
    logger.info("pair topology for %d pairs in %.1f s", len(pairs), seconds)
    return {"seconds": seconds}
