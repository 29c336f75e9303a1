"""Token-pair attributions for Siamese encoders with integrated Jacobians (Moeller et al., EMNLP 2023, EACL 2024).

A Siamese encoder embeds each text on its own, ``e(a) = g(x_a)``, where ``x_a ∈ R^{n×d}`` is the
representation entering layer ``l`` and ``g`` runs the remaining layers and the pooling. The
similarity of two texts is ``s(a, b) = e(a)·e(b)`` for ``dot`` and ``ê(a)·ê(b)`` (unit vectors) for
``cosine``. With a reference input ``r`` of the same length (every non-special token replaced by
padding, the reference of the method) and ``Δ_a = x_a − r_a``, the path integral of the embedding
``φ`` (``g`` or ``g/|g|``) gives per token ``i`` a vector

    ``u_a[i] = ∫₀¹ J_φ(r_a + α Δ_a)[:, i, :] Δ_a[i] dα ∈ R^D``   (``Σ_i u_a[i] = φ(x_a) − φ(r_a)``),

and the token-pair attribution ``A[i, j] = u_a[i] · u_b[j]`` sums to

    ``Σ A = s(a, b) − s(a, r_b) − s(r_a, b) + s(r_a, r_b)``

up to the quadrature error of the integrals: the *attribution error* ``Σ A − target``.

**Approximate vs exact.** An off-the-shelf model (EACL 2024) is explained by ``A`` with the three
reference terms left over: ``Σ A − s(a, b)`` is their sum plus the quadrature error. The *exact*
variant (EMNLP 2023) changes the model so the reference terms vanish: the embedding is shifted,
``e'(x) = g(x) − g(r_x)``, and the similarity is the dot product of shifted embeddings
(``shifted_dot``), so ``e'(r) = 0`` and ``Σ A = s'(a, b)`` up to the quadrature error alone. The
shift is a constant, so ``A`` is the ``dot`` matrix; what changes is the score the model reports,
which is why the model is fine-tuned with the shift (:func:`train_pair_encoder`).

**Cost.** Each ``u_a[i]`` is a Jacobian–vector product with ``Δ_a`` restricted to token ``i``: all
(step, token) products run as forward-mode passes over batches of ``chunk`` copies of the sequence,
so the ``D × n × d`` Jacobian is never formed and memory grows with ``chunk``, not with ``D``. One
pass gives both the ``dot`` and the ``cosine`` vectors (chain rule through the normalisation).
Time grows as ``n² · N · (layers after l)`` per text.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import torch
from scipy.stats import rankdata, spearmanr
from torch.func import jvp, vmap
from transformers import AutoModel, AutoTokenizer

from attnlens.corpus import generate_pairs
from attnlens.data import compute_split, read_table
from attnlens.errors import InputError
from attnlens.io import load_parquet, load_shards
from attnlens.models.loading import from_hub, resolve_pretrained
from attnlens.tokens import TEXT_AS_TEXT, structural_ids
from attnlens.train import seed_everything

logger = logging.getLogger(__name__)

#: ``g``: ``(batch, n, d)`` representations at the chosen layer → ``(batch, D)`` pooled embeddings.
Pool = Callable[[torch.Tensor], torch.Tensor]

QUADRATURES = ("gauss_legendre", "midpoint")
#: ``fixed`` = the exact cosine attribution with the configured quadrature; ``legacy`` = the authors' reference
#: implementation (right Riemann sum, cosine matrix = dot matrix / (‖g(a)‖‖g(b)‖)), see :func:`attribute_pair`.
MODES = ("fixed", "legacy")
SIMILARITIES = ("cosine", "dot", "shifted_dot")
#: Architectures whose encoder blocks :class:`SiameseEncoder` can run one by one.
ARCHITECTURES = ("bert", "roberta", "xlm-roberta", "mpnet")
#: Written into a model folder trained by :func:`train_pair_encoder` (exact mode).
PAIR_MODEL_FILE = "attnlens_pair.json"


# --------------------------------------------------------------------------------------------- numerics


def quadrature(rule: str, n_steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes in ``(0, 1)`` and weights summing to 1 of an ``n_steps``-point rule.

    ``gauss_legendre`` is exact for polynomials up to degree ``2N − 1`` (error falls exponentially
    for smooth paths); ``midpoint`` is the uniform Riemann sum at ``(k + ½)/N`` (error ∝ ``1/N²``);
    ``right_riemann`` is the sum at ``α = k/N``, ``k = 1 … N`` (error ∝ ``1/N``), the rule of the
    authors' reference implementation (legacy mode).
    """
    if n_steps < 1:
        raise ValueError(f"n_steps must be at least 1, got {n_steps}")
    if rule == "gauss_legendre":
        x, w = np.polynomial.legendre.leggauss(n_steps)
        return (x + 1) / 2, w / 2
    if rule == "midpoint":
        return (np.arange(n_steps) + 0.5) / n_steps, np.full(n_steps, 1.0 / n_steps)
    if rule == "right_riemann":
        return np.arange(1, n_steps + 1) / n_steps, np.full(n_steps, 1.0 / n_steps)
    raise ValueError(f"unknown quadrature {rule!r}; expected one of {(*QUADRATURES, 'right_riemann')}")


def integrated_jacobians(
    pool: Pool, x: torch.Tensor, r: torch.Tensor, n_steps: int, chunk: int = 64, rule: str = "gauss_legendre"
) -> dict[str, torch.Tensor]:
    """``{"dot": U, "cosine": U}``, each ``(n, D)``: ``u[i] = ∫ J_φ(r + αΔ)[:, i, :] Δ[i] dα``.

    ``φ = g`` for ``dot`` and ``g/|g|`` for ``cosine``; one forward-mode pass per chunk gives both,
    since ``J_{g/|g|} t = (J_g t − ĝ (ĝ·J_g t)) / |g|``.

    At each quadrature point the ``n`` tangents (``Δ`` kept on one token each) are pushed through
    ``g`` together (``vmap`` over ``jvp``): the primal — the point on the path — is computed once
    per point, not once per token, which halves the work of the ``n²`` token-by-token passes.

    Args:
        pool: ``g``, batched over its first axis.
        x, r: ``(n, d)`` input and reference representations.
        n_steps: quadrature points.
        chunk: tangents (tokens) per forward-mode pass; peak memory grows with it.
        rule: ``gauss_legendre`` or ``midpoint``.
    """
    n = x.shape[0]
    delta = x - r
    alphas, weights = (torch.as_tensor(v, dtype=x.dtype) for v in quadrature(rule, n_steps))
    # tangent i: Δ on token i, zero elsewhere; (n, 1, n, d), a batch of one sequence each
    tangents = (torch.eye(n, dtype=x.dtype)[:, :, None] * delta[None])[:, None]
    u_dot, u_cos = [], []
    for start in range(0, n, chunk):
        part = tangents[start : start + chunk]
        dot = cos = 0
        for alpha, w in zip(alphas, weights, strict=True):
            point = (r + alpha * delta)[None]
            g, dg = vmap(lambda t, p=point: jvp(pool, (p,), (t,)), out_dims=(None, 0))(part)
            g, dg = g[0], dg[:, 0]  # (D,), (c, D)
            norm = g.norm()
            unit = g / norm
            dot = dot + dg * w
            cos = cos + (dg - (dg @ unit)[:, None] * unit) / norm * w
        u_dot.append(dot)
        u_cos.append(cos)
    return {"dot": torch.cat(u_dot), "cosine": torch.cat(u_cos)}


def similarity_terms(
    e_a: torch.Tensor, e_ra: torch.Tensor, e_b: torch.Tensor, e_rb: torch.Tensor, similarity: str
) -> tuple[float, float, float, float]:
    """``s(a, b), s(a, r_b), s(r_a, b), s(r_a, r_b)`` from the four pooled embeddings ``g``."""
    if similarity == "cosine":
        e_a, e_ra, e_b, e_rb = (torch.nn.functional.normalize(e, dim=-1) for e in (e_a, e_ra, e_b, e_rb))
    elif similarity == "shifted_dot":  # e'(x) = g(x) − g(r_x): the reference embeds to exactly 0
        e_a, e_b = e_a - e_ra, e_b - e_rb
        e_ra, e_rb = torch.zeros_like(e_ra), torch.zeros_like(e_rb)
    elif similarity != "dot":
        raise ValueError(f"unknown similarity {similarity!r}; expected one of {SIMILARITIES}")
    return float(e_a @ e_b), float(e_a @ e_rb), float(e_ra @ e_b), float(e_ra @ e_rb)


@dataclass
class PairAttribution:
    """Token × token attribution of one pair and the similarity terms it should add up to."""

    similarity: str
    matrix: np.ndarray  # (n_a, n_b)
    score: float  # s(a, b)
    score_a_rb: float  # s(a, r_b)
    score_ra_b: float  # s(r_a, b)
    score_ra_rb: float  # s(r_a, r_b)
    n_steps: int
    mode: str = "fixed"  # fixed or legacy (the reference implementation's recipe)
    quadrature: str = "gauss_legendre"

    @property
    def total(self) -> float:
        """``Σ A``."""
        return float(self.matrix.sum())

    @property
    def target(self) -> float:
        """``s(a, b) − s(a, r_b) − s(r_a, b) + s(r_a, r_b)``: what ``Σ A`` approximates."""
        return self.score - self.score_a_rb - self.score_ra_b + self.score_ra_rb

    @property
    def error(self) -> float:
        """Attribution error ``Σ A − target``: the quadrature error of the path integrals."""
        return self.total - self.target

    @property
    def score_error(self) -> float:
        """``Σ A − s(a, b)``: how far the matrix is from explaining the score itself (reference terms + error)."""
        return self.total - self.score


def attribute_pair(
    pool: Pool,
    x_a: torch.Tensor,
    r_a: torch.Tensor,
    x_b: torch.Tensor,
    r_b: torch.Tensor,
    n_steps: int,
    similarities: tuple[str, ...] = ("cosine", "dot"),
    chunk: int = 64,
    rule: str = "gauss_legendre",
    mode: str = "fixed",
) -> dict[str, PairAttribution]:
    """``A = U_a U_bᵀ`` per similarity, for representations at the chosen layer, with the four terms.

    ``mode="fixed"`` integrates with ``rule`` and attributes the cosine through the Jacobian of
    ``g/|g|``, so ``Σ A`` converges to the four-term cosine target. ``mode="legacy"`` reproduces the
    reference implementation of Moeller et al.: the right Riemann sum (``rule`` is ignored) and the
    cosine matrix taken as the dot matrix divided by ``‖g(x_a)‖ ‖g(x_b)‖``. That matrix sums to
    ``(g(a) − g(r_a))·(g(b) − g(r_b)) / (‖g(a)‖ ‖g(b)‖)``, which is not the cosine target, so its
    error levels off as the steps grow instead of falling to 0.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    rule = "right_riemann" if mode == "legacy" else rule
    u_a = integrated_jacobians(pool, x_a, r_a, n_steps, chunk, rule)
    u_b = integrated_jacobians(pool, x_b, r_b, n_steps, chunk, rule)
    with torch.no_grad():
        (e_a, e_ra), (e_b, e_rb) = pool(torch.stack([x_a, r_a])), pool(torch.stack([x_b, r_b]))
    out = {}
    for sim in similarities:
        if sim == "cosine" and mode == "legacy":
            matrix = (u_a["dot"] @ u_b["dot"].T) / (e_a.norm() * e_b.norm())
        else:
            kind = "cosine" if sim == "cosine" else "dot"
            matrix = u_a[kind] @ u_b[kind].T
        out[sim] = PairAttribution(
            sim, matrix.double().numpy(), *similarity_terms(e_a, e_ra, e_b, e_rb, sim), n_steps, mode, rule
        )
    return out


# --------------------------------------------------------------------------------------------- encoders


def pooling_modes(spec: dict) -> tuple[str, ...]:
    """The pooling modes a sentence-transformers ``*_Pooling/config.json`` names, in either of its formats.

    sentence-transformers ≥ 5 writes ``{"pooling_mode": "mean"}`` (a name or a list of names whose
    pooled vectors are concatenated); earlier versions wrote one boolean per mode,
    ``{"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": false, …}``. The old names are
    mapped to the new ones (``mean_tokens`` → ``mean``, ``cls_token`` → ``cls``, ``max_tokens`` → ``max``).
    """
    if "pooling_mode" in spec:
        mode = spec["pooling_mode"]
        return (mode,) if isinstance(mode, str) else tuple(str(m) for m in mode or ())
    old = {"mean_tokens": "mean", "cls_token": "cls", "max_tokens": "max", "weightedmean_tokens": "weightedmean"}
    flags = [k.removeprefix("pooling_mode_") for k, v in spec.items() if k.startswith("pooling_mode_") and v]
    return tuple(old.get(f, f) for f in flags)


def _pooling_mode(folder: Path | None) -> str:
    """``mean`` or ``cls`` from a sentence-transformers folder's pooling config (``mean`` without one)."""
    if folder is None:
        return "mean"
    for config in sorted(folder.glob("*_Pooling/config.json")):
        try:
            spec = json.loads(config.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise InputError(str(config), "(file)", f"expected a JSON pooling config ({err})") from None
        modes = pooling_modes(spec) if isinstance(spec, dict) else ()
        if modes in (("mean",), ("cls",)):
            return modes[0]
        raise InputError(str(config), "pooling_mode", f"expected mean or CLS pooling, found {list(modes)}")
    return "mean"


class SiameseEncoder:
    """A sentence encoder split before layer ``layer``: representations in, pooled embedding out.

    ``representation(ids)`` is the hidden state entering layer ``layer`` (``0`` = the embedding
    output); :meth:`pool` runs layers ``layer …`` and the pooling (mean or CLS, as the model's
    sentence-transformers config says). Texts are encoded one at a time (no padding), as a Siamese
    model sees them. BERT, RoBERTa and MPNet (relative position bias) encoders are supported.
    """

    def __init__(
        self, model, tokenizer, layer: int, pooling: str = "mean", similarity: str = "cosine", scale: float = 1.0
    ) -> None:
        kind = getattr(model.config, "model_type", "")
        if kind not in ARCHITECTURES:
            raise ValueError(f"unsupported encoder architecture {kind!r}; expected one of {ARCHITECTURES}")
        n_layers = len(model.encoder.layer)
        if not 0 <= layer <= n_layers:
            raise ValueError(f"layer {layer} outside [0, {n_layers}]")
        if getattr(model.config, "_attn_implementation", "eager") != "eager":
            model.set_attn_implementation("eager")  # forward-mode AD through plain softmax attention
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer = tokenizer
        self.kind = kind
        self.layer = layer
        self.pooling = pooling
        self.similarity = similarity  # the model's own similarity (shifted_dot for an exact model)
        self.scale = scale  # fixed factor of the embedding (exact-mode models, see train_pair_encoder)

    @classmethod
    def load(cls, name_or_path: str, layer: int, field: str = "pairs.encoder") -> SiameseEncoder:
        """The packaged MiniLM, a local folder (sentence-transformers or plain HF), or a hub id (needs the network)."""
        source = resolve_pretrained(name_or_path, field)
        folder = Path(source) if Path(source).is_dir() else None
        tokenizer = from_hub(AutoTokenizer.from_pretrained, source, field, **TEXT_AS_TEXT)
        model = from_hub(AutoModel.from_pretrained, source, field, attn_implementation="eager")
        meta = folder / PAIR_MODEL_FILE if folder else None
        spec = json.loads(meta.read_text(encoding="utf-8")) if meta and meta.exists() else {}
        if folder is None:  # hub id: the pooling config sits beside the weights in the hub snapshot
            folder = _hub_folder(source)
        kind = getattr(model.config, "model_type", "")
        if kind not in ARCHITECTURES:
            raise InputError(source, field, f"expected a {'/'.join(ARCHITECTURES)} encoder, got {kind!r}")
        n_layers = len(model.encoder.layer)
        if not 0 <= layer <= n_layers:
            raise InputError(source, "pairs.layer", f"expected a layer in [0, {n_layers}], got {layer}")
        pooling = spec.get("pooling") or _pooling_mode(folder)
        return cls(model, tokenizer, layer, pooling, spec.get("similarity", "cosine"), float(spec.get("scale", 1.0)))

    def encode(self, text: str, max_tokens: int) -> torch.Tensor:
        """Token ids of one text, truncated to ``max_tokens`` (special tokens included)."""
        return torch.tensor(self.tokenizer(text, truncation=True, max_length=max_tokens)["input_ids"])

    def reference_ids(self, input_ids: torch.Tensor, kind: str = "pad") -> torch.Tensor:
        """The reference input: structural tokens kept, every other token (``[UNK]`` too) ``[PAD]`` or ``[MASK]``."""
        token = self.tokenizer.pad_token_id if kind == "pad" else self.tokenizer.mask_token_id
        if token is None:
            raise ValueError(f"the tokenizer has no {kind} token for the reference input")
        return reference_ids(input_ids, token, structural_ids(self.tokenizer))

    @torch.no_grad()
    def representation(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``(n, d)`` hidden state of one text entering layer ``layer``."""
        out = self.model(input_ids=input_ids[None], output_hidden_states=True)
        return out.hidden_states[self.layer][0]

    def pool(self, h: torch.Tensor) -> torch.Tensor:
        """``(batch, n, d)`` → ``(batch, D)``: the remaining layers, then mean or CLS pooling (not normalised)."""
        bias = self.model.encoder.compute_position_bias(h) if self.kind == "mpnet" else None
        for block in self.model.encoder.layer[self.layer :]:
            h = block(h, None, bias) if bias is not None else block(h)
            h = h[0] if isinstance(h, tuple) else h
        g = h[:, 0] if self.pooling == "cls" else h.mean(1)
        return g * self.scale if self.scale != 1.0 else g

    def embed(self, batch: list[torch.Tensor]) -> torch.Tensor:
        """``(len(batch), D)`` pooled embeddings ``g`` of token-id sequences of any length (padded, masked)."""
        return pooled_embeddings(self.model, batch, self.pooling) * self.scale


def _hub_folder(name: str) -> Path | None:
    try:
        from huggingface_hub import snapshot_download  # noqa: PLC0415 (hub ids only)

        return Path(snapshot_download(name, allow_patterns=["*_Pooling/config.json", "modules.json"]))
    except Exception:  # no pooling config to be had: mean pooling, as sentence-transformers defaults to
        return None


def pooled_embeddings(model, batch: list[torch.Tensor], pooling: str = "mean") -> torch.Tensor:
    """Pooled last hidden states of a padded batch, each sequence attending to its own length only.

    Padding *inside* a sequence (the reference input) is attended to, as when the sequence is
    encoded on its own; only the batch's right-padding is masked.
    """
    lengths = torch.tensor([len(b) for b in batch])
    n = int(lengths.max())
    ids = torch.zeros(len(batch), n, dtype=torch.long)
    for k, b in enumerate(batch):
        ids[k, : len(b)] = b
    mask = (torch.arange(n)[None] < lengths[:, None]).long()
    hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    if pooling == "cls":
        return hidden[:, 0]
    return (hidden * mask[..., None]).sum(1) / lengths[:, None].to(hidden.dtype)


def reference_ids(input_ids: torch.Tensor, pad_id: int, special: set[int]) -> torch.Tensor:
    """The reference input: every non-structural token replaced by ``pad_id`` (same length, same structure).

    For a text read as text the structural tokens are its first and last, so this is the reference of the
    authors' code (everything between the first and the last token replaced); docs/deviations.md, D-STRUCT.
    """
    keep = torch.tensor([int(i) in special for i in input_ids.tolist()], dtype=torch.bool)
    return torch.where(keep, input_ids, torch.full_like(input_ids, pad_id))


# --------------------------------------------------------------------------------------------- pair data

PAIRS_SCHEMA = "pairs/v1"
PAIR_SCORES_SCHEMA = "pair_scores/v2"
PAIR_MATRICES_SCHEMA = "pair_matrices/v2"
PAIR_CONVERGENCE_SCHEMA = "pair_convergence/v2"
PAIR_TOPOLOGY_SCHEMA = "pair_topology/v1"
PAIR_COLUMNS = ("pair_id", "text_a", "text_b", "gold")
#: Columns of an ``attribute_pairs`` shard's scores, one row per pair × model × similarity × mode.
PAIR_SCORES_TYPES = pa.schema(
    [("pair_id", pa.string()), ("model", pa.string()), ("similarity", pa.string()), ("mode", pa.string()),
     ("layer", pa.int64()),
     ("n_steps", pa.int64()), ("quadrature", pa.string()), ("n_a", pa.int64()), ("n_b", pa.int64())]
    + [(name, pa.float64()) for name in ("gold", "score", "score_a_rb", "score_ra_b", "score_ra_rb", "target",
                                         "total", "error", "score_error", "seconds")]
    + [("tokens_a", pa.list_(pa.string())), ("tokens_b", pa.list_(pa.string()))]
)  # fmt: skip


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
    out = pd.DataFrame({"pair_id": ids.to_numpy(), "text_a": df[cfg.text_a_column].to_numpy(),
                        "text_b": df[cfg.text_b_column].to_numpy(), "gold": gold.to_numpy(dtype=float)})  # fmt: skip
    if "split" in df.columns:
        bad = sorted(set(df["split"].astype(str)) - {"train", "test"})
        if bad:
            raise InputError(where, "split", f"expected values 'train' or 'test', got {bad[:3]}")
        out["split"] = df["split"].astype(str).to_numpy()
    return out


def load_pair_source(cfg) -> tuple[pd.DataFrame, str]:
    """The pairs of ``pairs.data`` (a :class:`~attnlens.config.PairDataConfig`) and where they came from."""
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
    if "split" in df.columns:
        return df["split"].to_numpy() == "test"
    strata = df["grade"].to_numpy() if "grade" in df.columns else (rankdata(df["gold"], "min") - 1) * 3 // len(df)
    return compute_split(np.asarray(strata), test_fraction, seed)


def load_pairs(path) -> pd.DataFrame:
    return load_parquet(path, PAIRS_SCHEMA)[0]


# --------------------------------------------------------------------------------------------- exact mode


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
            s = torch.cat([shifted_dot(model, *(d[i : i + 32] for d in data), base.pooling, scale)
                           for i in range(0, len(gold), 32)])  # fmt: skip
        return {"mse": float(((s - gold) ** 2).mean()), "spearman": float(spearmanr(s, gold).statistic)}

    seed_everything(exact_cfg.seed)
    tr, te = ids(train), ids(test)
    y_tr = torch.tensor(train["gold"].to_numpy(), dtype=torch.float32)
    y_te = torch.tensor(test["gold"].to_numpy(), dtype=torch.float32)
    with torch.no_grad():
        raw = torch.cat([shifted_dot(model, *(d[i : i + 32] for d in tr), base.pooling, 1.0)
                         for i in range(0, len(y_tr), 32)])  # fmt: skip
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
    spec = {"similarity": "shifted_dot", "pooling": base.pooling, "scale": scale, "reference": encoder_cfg.reference,
            "base": encoder_cfg.name_or_path}  # fmt: skip
    metrics = {"steps": exact_cfg.steps, "seconds": round(seconds, 2), "seconds_per_step": seconds / exact_cfg.steps,
               "scale": scale, "first_loss": losses[0], "last_loss": float(np.mean(losses[-5:])),
               "test_before": before, "test_after": after, "n_train": len(y_tr), "n_test": len(y_te)}  # fmt: skip
    logger.info(
        "exact-mode training: %d steps in %.1f s, test MSE %.3f -> %.3f, Spearman %.3f -> %.3f",
        *(exact_cfg.steps, seconds, before["mse"], after["mse"], before["spearman"], after["spearman"]),
    )
    return model, tok, spec, metrics


# --------------------------------------------------------------------------------------------- rules


def pair_inputs(enc: SiameseEncoder, row, cfg) -> dict:
    """Ids, references and layer representations of both texts of one pair."""
    out = {}
    for side in ("a", "b"):
        ids = enc.encode(row[f"text_{side}"], cfg.encoder.max_tokens)
        ref = enc.reference_ids(ids, cfg.encoder.reference)
        out[side] = (ids, enc.representation(ids), enc.representation(ref))
    return out


def attribution_row(pair_id: str, model: str, res: PairAttribution, cfg, gold: float, seconds: float) -> dict:
    return {"pair_id": pair_id, "model": model, "similarity": res.similarity, "mode": res.mode,
            "layer": cfg.attribution.layer, "n_steps": res.n_steps, "quadrature": res.quadrature,
            "n_a": res.matrix.shape[0],
            "n_b": res.matrix.shape[1], "gold": gold, "score": res.score, "score_a_rb": res.score_a_rb,
            "score_ra_b": res.score_ra_b, "score_ra_rb": res.score_ra_rb, "target": res.target, "total": res.total,
            "error": res.error, "score_error": res.score_error, "seconds": seconds}  # fmt: skip


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
    rows = []
    for (model, sim, mode), part in scores.groupby(["model", "similarity", "mode"], sort=False):
        rel = np.abs(part["score_error"]) / np.maximum(np.abs(part["score"]), 1e-12)
        rows.append({"model": model, "similarity": sim, "mode": mode, "pairs": len(part),
                     "mean abs error": float(np.abs(part["error"]).mean()),
                     "max abs error": float(np.abs(part["error"]).max()),
                     "mean abs(ΣA − score)": float(np.abs(part["score_error"]).mean()),
                     "median abs(ΣA − score) / abs(score)": float(np.median(rel)),
                     "spearman(score, gold)": float(spearmanr(part["score"], part["gold"]).statistic)
                     if part["score"].nunique() > 1 and part["gold"].nunique() > 1 else None,
                     "seconds per pair and model": float(part["seconds"].mean())})  # fmt: skip
    return pd.DataFrame(rows)
