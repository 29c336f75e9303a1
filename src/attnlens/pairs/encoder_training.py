"""Fine-tuning a pair encoder for the exact variant: the shifted dot product as the similarity it is trained on."""

from __future__ import annotations

import logging
import time

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from attnlens.classifier.fine_tuning import seed_everything
from attnlens.pairs.encoder import SiameseEncoder, pooled_embeddings

logger = logging.getLogger(__name__)


def shifted_dot(model, ids_a: list[torch.Tensor], ids_b: list[torch.Tensor], ref_a, ref_b, pooling: str, scale: float):
    """``e'(a)·e'(b)`` with ``e'(x) = (g(x) − g(r_x)) · scale`` for a batch of pairs, differentiable."""
    k = len(ids_a)
    g = pooled_embeddings(model, [*ids_a, *ref_a, *ids_b, *ref_b], pooling) * scale
    ga, gra, gb, grb = g[:k], g[k : 2 * k], g[2 * k : 3 * k], g[3 * k :]
    return ((ga - gra) * (gb - grb)).sum(-1)


def train_pair_encoder(encoder_cfg, exact_cfg, train: pd.DataFrame, test: pd.DataFrame):
    """Fine-tune the encoder with the shifted embedding and dot similarity (EMNLP 2023 exact variant).

    The loss is the MSE of ``e'(a)·e'(b)`` against the gold score. Before training, one fixed
    factor ``scale`` (stored with the model) brings the mean shifted dot product of the training
    pairs to their mean gold score, so a few steps suffice; scaling keeps ``e'(r) = 0``.

    Returns:
        ``(model, tokenizer, spec, metrics)``; ``spec`` goes into :data:`PAIR_MODEL_FILE`.
    """
    base = SiameseEncoder.load(encoder_cfg.name_or_path, 0, "pairs.encoder.name_or_path")
    model, tok = base.model, base.tokenizer

    def ids(df):
        a = [base.encode(t, encoder_cfg.max_tokens) for t in df["text_a"]]
        b = [base.encode(t, encoder_cfg.max_tokens) for t in df["text_b"]]
        ref = base.reference_ids
        return a, b, [ref(x, encoder_cfg.reference) for x in a], [ref(x, encoder_cfg.reference) for x in b]

    def evaluate(data, gold, scale):
        model.eval()
        with torch.no_grad():
            s = torch.cat(
                [
                    shifted_dot(model, *(d[i : i + 32] for d in data), base.pooling, scale)
                    for i in range(0, len(gold), 32)
                ]
            )
        return {"mse": float(((s - gold) ** 2).mean()), "spearman": float(spearmanr(s, gold).statistic)}

    seed_everything(exact_cfg.seed)
    tr, te = ids(train), ids(test)
    y_tr = torch.tensor(train["gold"].to_numpy(), dtype=torch.float32)
    y_te = torch.tensor(test["gold"].to_numpy(), dtype=torch.float32)
    with torch.no_grad():
        raw = torch.cat(
            [shifted_dot(model, *(d[i : i + 32] for d in tr), base.pooling, 1.0) for i in range(0, len(y_tr), 32)]
        )
    ratio = float(y_tr.mean() / raw.mean()) if float(raw.mean()) > 0 and float(y_tr.mean()) > 0 else 1.0
    scale = ratio**0.5
    before = evaluate(te, y_te, scale)
    for p in model.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(model.parameters(), lr=exact_cfg.lr, weight_decay=exact_cfg.weight_decay)
    warm = max(1, round(exact_cfg.warmup_ratio * exact_cfg.steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda k: min(1.0, (k + 1) / warm) * max(0.0, (exact_cfg.steps - k) / exact_cfg.steps)
    )
    rng = np.random.default_rng(exact_cfg.seed)
    order, losses, t0 = np.array([], dtype=int), [], time.perf_counter()
    bs = min(exact_cfg.batch_size, len(y_tr))
    model.train()
    for _ in range(exact_cfg.steps):
        if len(order) < bs:
            order = np.concatenate([order, rng.permutation(len(y_tr))])
        idx, order = order[:bs], order[bs:]
        pred = shifted_dot(model, *([d[i] for i in idx] for d in tr), base.pooling, scale)
        loss = torch.nn.functional.mse_loss(pred, y_tr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    seconds = time.perf_counter() - t0
    model.eval()
    after = evaluate(te, y_te, scale)
    spec = {
        "similarity": "shifted_dot",
        "pooling": base.pooling,
        "scale": scale,
        "reference": encoder_cfg.reference,
        "base": encoder_cfg.name_or_path,
    }
    metrics = {
        "steps": exact_cfg.steps,
        "seconds": round(seconds, 2),
        "seconds_per_step": seconds / exact_cfg.steps,
        "scale": scale,
        "first_loss": losses[0],
        "last_loss": float(np.mean(losses[-5:])),
        "test_before": before,
        "test_after": after,
        "n_train": len(y_tr),
        "n_test": len(y_te),
    }
    logger.info(
        "exact-mode training: %d steps in %.1f s, test MSE %.3f -> %.3f, Spearman %.3f -> %.3f",
        *(exact_cfg.steps, seconds, before["mse"], after["mse"], before["spearman"], after["spearman"]),
    )
    return model, tok, spec, metrics
