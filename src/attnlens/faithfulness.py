"""Faithfulness and plausibility of token rankings (IG, attention, random), on token ids.

For a ranking of an example's non-special tokens (most important first) and a fraction ``f``:

* **deletion** removes the top ``⌈f · m⌉`` of the ``m`` ranked tokens from the id sequence (special
  tokens stay; the rest keeps its order and is renumbered by the model as a shorter input);
* **insertion** keeps only those tokens (plus the special ones) — the input grows from nothing.

Perturbations are made on the token ids and never decoded and re-tokenised, so a word piece stays
the piece that was scored. With ``p`` the probability of the explained class (the IG target),
**comprehensiveness** at ``f`` is ``p(x) − p(x without the top f)`` and **sufficiency** is
``p(x) − p(only the top f)`` (DeYoung et al., 2020, ERASER); AOPC averages each over the fractions.
A good ranking has high comprehensiveness and low sufficiency; the random ranking is the control.

Plausibility compares a ranking with the evidence phrases planted in the synthetic corpus
(``rationales.parquet``): a token is evidence when its character span overlaps an evidence phrase.
We report the token-level average precision (AUPRC) of the scores and precision / recall / F1 of the
top ``k`` tokens.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

logger = logging.getLogger(__name__)

FAITHFULNESS_SCHEMA = "faithfulness/v1"
PLAUSIBILITY_SCHEMA = "plausibility/v1"


def ranking(scores: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """Eligible positions ordered by descending score, ties by position."""
    pos = np.flatnonzero(eligible)
    return pos[np.lexsort((pos, -np.asarray(scores, dtype=np.float64)[pos]))]


def random_ranking(eligible: np.ndarray, seed: int, example_id: str) -> np.ndarray:
    """A seeded permutation of the eligible positions, stable per example id."""
    from attnlens.data import example_rng

    return example_rng(seed, example_id).permutation(np.flatnonzero(eligible))


def n_top(fraction: float, m: int) -> int:
    """How many ranked tokens a fraction covers: ``⌈f · m⌉`` (at least one when ``m > 0``)."""
    return min(m, math.ceil(fraction * m - 1e-9))


def perturb(ids: Sequence[int], order: np.ndarray, special: np.ndarray, count: int, kind: str) -> list[int]:
    """``deletion``: ids without the first ``count`` of ``order``; ``insertion``: specials + those only."""
    chosen = np.zeros(len(ids), dtype=bool)
    chosen[order[:count]] = True
    keep = ~chosen if kind == "deletion" else (chosen | special)
    return [int(i) for i, k in zip(ids, keep, strict=True) if k]


@torch.no_grad()
def class_probabilities(model, sequences: list[list[int]], pad_id: int, batch_size: int) -> np.ndarray:
    """``(len(sequences), n_labels)`` softmax probabilities, length-sorted batches, CLS global."""
    from attnlens.prediction import Encoded, softmax

    encoded = Encoded([list(s) for s in sequences], pad_id)
    device = next(model.parameters()).device
    out = np.zeros((len(sequences), model.config.num_labels))
    order = np.argsort([len(s) for s in sequences], kind="stable")
    for start in range(0, len(order), batch_size):
        index = order[start : start + batch_size].tolist()
        logits = model(**encoded.batch(index, device)).logits.double().cpu().numpy()
        out[index] = softmax(logits)
    return out


def evaluate_example(
    model, ids: Sequence[int], special: np.ndarray, orders: dict[str, np.ndarray], target: int, fractions, batch_size
) -> pd.DataFrame:
    """Deletion and insertion probabilities of every ranking at every fraction (plus the end points).

    Returns rows ``ranking, curve, fraction, n_tokens, prob`` with ``fraction`` 0 and 1 included
    (deletion at 0 = the full input, insertion at 0 = the special tokens only).
    """
    m = int((~special).sum())
    grid = sorted({0.0, *map(float, fractions), 1.0})
    jobs, seqs, cache = [], [], {}
    for name, order in orders.items():
        for curve in ("deletion", "insertion"):
            for f in grid:
                count = n_top(f, m)
                seq = perturb(ids, order, special, count, curve)
                key = tuple(seq)
                if key not in cache:  # the end points are shared by every ranking
                    cache[key] = len(seqs)
                    seqs.append(seq)
                jobs.append((name, curve, f, count, cache[key]))
    probs = class_probabilities(model, seqs, model.config.pad_token_id, batch_size)[:, target]
    return pd.DataFrame(
        [(name, curve, f, count, float(probs[j])) for name, curve, f, count, j in jobs],
        columns=["ranking", "curve", "fraction", "n_tokens", "prob"],
    )


def aopc(curves: pd.DataFrame, fractions) -> pd.DataFrame:
    """Per example and ranking: comprehensiveness and sufficiency AOPC over ``fractions``."""
    fr = set(map(float, fractions))
    full = curves[(curves["curve"] == "deletion") & (curves["fraction"] == 0.0)]
    full = full.groupby(["example_id", "ranking"])["prob"].first().rename("p_full")
    part = curves[curves["fraction"].isin(fr)].join(full, on=["example_id", "ranking"])
    part["drop"] = part["p_full"] - part["prob"]
    table = part.pivot_table(index=["example_id", "ranking"], columns="curve", values="drop", aggfunc="mean")
    table = table.rename(columns={"deletion": "comprehensiveness", "insertion": "sufficiency"})
    return table.reset_index()


def evidence_labels(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int]]) -> np.ndarray:
    """``(n,)`` bool: the token's character span overlaps an evidence span (special tokens (0, 0): no)."""
    out = np.zeros(len(offsets), dtype=bool)
    for i, (a, b) in enumerate(offsets):
        if b > a:
            out[i] = any(a < e and s < b for s, e in spans)
    return out


def example_evidence(tokenizer, text: str, input_ids: Sequence[int], spans, example_id: str = "") -> np.ndarray:
    """``(n,)`` bool: the example's tokens that overlap a planted evidence span (character offsets of ``text``)."""
    enc = tokenizer(text, truncation=True, max_length=tokenizer.model_max_length, return_offsets_mapping=True)
    if enc["input_ids"] != [int(i) for i in input_ids]:
        raise ValueError(f"{example_id}: re-encoding the text for character offsets gave different token ids")
    return evidence_labels(enc["offset_mapping"], spans)


def plausibility(scores: np.ndarray, labels: np.ndarray, eligible: np.ndarray, k: int) -> dict[str, float]:
    """Token-level AUPRC of ``scores`` and precision / recall / F1 of the top ``k`` eligible tokens."""
    from sklearn.metrics import average_precision_score

    y = labels[eligible]
    s = np.asarray(scores, dtype=np.float64)[eligible]
    if not y.any():
        return {"auprc": float("nan"), "precision": float("nan"), "recall": float("nan"), "f1": float("nan")}
    top = ranking(scores, eligible)[:k]
    hits = int(labels[top].sum())
    precision, recall = hits / max(len(top), 1), hits / int(y.sum())
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return {"auprc": float(average_precision_score(y, s)), "precision": precision, "recall": recall, "f1": f1}


def attention_scores(received: torch.Tensor, config: str) -> np.ndarray:
    """``(n,)`` received attention summed over the heads of a layer configuration (unscaled)."""
    from attnlens.attention import layer_configuration

    return layer_configuration(received, config).numpy().astype(np.float64)


def run_evaluate_faithfulness(
    cfg, model_dir, test_path, rationales_path, attribution_paths, summary_paths, curves_path, plausibility_path
) -> dict:
    """Rule ``evaluate_faithfulness``: curves of every ranking for every test example, and plausibility."""
    import time

    from attnlens.attention import load_summaries
    from attnlens.attribution import load_attributions
    from attnlens.data import load_examples
    from attnlens.io import provenance, save_parquet
    from attnlens.modeling import load_classifier
    from attnlens.tokens import special_ids

    model, tokenizer = load_classifier(model_dir)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    examples, _ = load_examples(test_path)
    text_of = dict(zip(examples["example_id"].astype(str), examples["text"], strict=True))
    rationales = pd.read_parquet(rationales_path)
    with_evidence = set(rationales.loc[rationales["evidence"], "example_id"].astype(str)) if len(rationales) else set()
    attributions = load_attributions(attribution_paths)
    summaries = load_summaries(summary_paths).examples if summary_paths else {}
    special_set = special_ids(tokenizer)
    curves, plaus = [], []
    t0 = time.perf_counter()
    for row in attributions.itertuples(index=False):
        eid = row.example_id
        ids = [int(i) for i in row.input_ids]
        special = np.array([i in special_set for i in ids], dtype=bool)
        eligible = ~special
        scores = {"ig": np.asarray(row.scores, dtype=np.float64)}
        for name in cfg.rankings:
            if name.startswith("attention_"):
                ex = summaries[eid]
                if ex.input_ids.tolist() != ids:
                    raise ValueError(f"{eid}: attention and attribution saw different token ids")
                scores[name] = attention_scores(ex.received, name.removeprefix("attention_"))
        orders = {
            name: random_ranking(eligible, cfg.seed, eid) if name == "random" else ranking(scores[name], eligible)
            for name in cfg.rankings
        }
        frame = evaluate_example(model, ids, special, orders, int(row.target), cfg.fractions, cfg.batch_size)
        frame.insert(0, "example_id", eid)
        curves.append(frame)
        if eid in with_evidence:
            ev = rationales[(rationales["example_id"] == eid) & rationales["evidence"]]
            spans = list(zip(ev["char_start"], ev["char_end"], strict=True))
            labels = example_evidence(tokenizer, text_of[eid], ids, spans, eid)
            if "random" in orders:  # scores that reproduce the random order
                scores["random"] = np.zeros(len(ids))
                scores["random"][orders["random"]] = np.arange(len(orders["random"]), 0, -1)
            for name in cfg.rankings:
                plaus.append(
                    {"example_id": eid, "ranking": name, "n_evidence": int(labels[eligible].sum()),
                     **plausibility(scores[name], labels, eligible, cfg.plausibility_k)}
                )  # fmt: skip
    seconds = time.perf_counter() - t0
    curves_frame = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame()
    prov = provenance(FAITHFULNESS_SCHEMA, cfg.to_dict(), cfg.seed, seconds=round(seconds, 2), model=str(model_dir))
    save_parquet(curves_frame, curves_path, prov)
    plaus_frame = pd.DataFrame(
        plaus, columns=["example_id", "ranking", "n_evidence", "auprc", "precision", "recall", "f1"]
    )
    save_parquet(plaus_frame, plausibility_path, provenance(PLAUSIBILITY_SCHEMA, cfg.to_dict(), cfg.seed))
    logger.info("%d examples x %d rankings in %.1f s", len(attributions), len(cfg.rankings), seconds)
    return {"n_examples": len(attributions), "seconds": seconds}


def bootstrap_ci(values: np.ndarray, seed: int, n_boot: int = 1000) -> tuple[float, float, float]:
    """Mean and percentile 95 % interval of the mean (NaNs dropped)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    if not len(v):
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(1)
    return float(v.mean()), float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def summary_table(frame: pd.DataFrame, metrics: Sequence[str], seed: int) -> pd.DataFrame:
    """Per ranking: ``metric`` mean with ``[lo, hi]`` bootstrap interval, and the example count."""
    rows = []
    for name, part in frame.groupby("ranking", sort=False):
        row = {"ranking": name, "examples": int(part["example_id"].nunique())}
        for m in metrics:
            mean, lo, hi = bootstrap_ci(part[m].to_numpy(), seed)
            row[m] = mean
            row[f"{m}_ci95"] = f"[{lo:.3f}, {hi:.3f}]"
        rows.append(row)
    return pd.DataFrame(rows)


def run_plot_faithfulness(cfg, figures_cfg, curves_path, plausibility_path, figure_stem, tables_dir) -> None:
    """Rule ``plot_faithfulness``: mean deletion / insertion curves, AOPC and plausibility tables."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnlens.io import load_parquet
    from attnlens.plots import save_figure
    from attnlens.tables import write_table

    curves, _ = load_parquet(curves_path, FAITHFULNESS_SCHEMA)
    plaus, _ = load_parquet(plausibility_path, PLAUSIBILITY_SCHEMA)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    for ax, curve in zip(axes, ("deletion", "insertion"), strict=True):
        part = curves[curves["curve"] == curve]
        for name, g in part.groupby("ranking", sort=False):
            stats = g.groupby("fraction")["prob"].agg(["mean", "sem"]).reset_index()
            line = ax.plot(stats["fraction"], stats["mean"], marker="o", ms=3, label=name)[0]
            sem = stats["sem"].fillna(0)
            ax.fill_between(
                stats["fraction"], stats["mean"] - sem, stats["mean"] + sem, color=line.get_color(), alpha=0.15
            )
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_xlabel("fraction of non-special tokens " + ("deleted" if curve == "deletion" else "kept"))
        ax.set_title(f"{curve} ({curves['example_id'].nunique()} examples)")
    axes[0].set_ylabel("probability of the explained class (mean ± s.e.)")
    axes[1].legend(frameon=False, fontsize=8)
    save_figure(fig, figure_stem, figures_cfg.dpi)
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
