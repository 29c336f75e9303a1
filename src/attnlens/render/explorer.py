"""Interactive long-document explorer: one self-contained HTML file per showcased example.

The page shows the whole document as text with a colour overlay — IG attribution, received
attention of a *view* (a layer configuration of recipes §8/§11 over all heads, or one layer and
head; raw or scaled by head importance), one overlay per explanation method of the ``explain`` rule
(signed methods on IG's purple–orange scale, the others on attention's) or, for the synthetic corpus, the
planted evidence.
Clicking a token shows its position, attribution, received attention and its top-k attended and
attending tokens in the current view, which are then highlighted in the text and on a minimap.

Everything the page shows is computed here, in Python, from the stored attention *bands* of the
showcased example (never the n × n matrix): a layer configuration's attention is the band
``Σ_{l,h} w[l,h] · A[l,h]`` (:func:`combine_bands`), so its received attention and top-k partners
are exact, not merged from per-head lists. The browser only decodes and draws.

Data are embedded compactly (summaries, not attention): per view the received attention
(float16) and, per token, the k partners in both directions — the partner as an int16 offset
from the token (runs of equal offsets compress well) and its attention quantised to 8 bits on a
square-root scale of the view's largest partner value. The arrays are concatenated, deflated
(zlib) and base64-encoded into the page; the page inflates them with the browser's
``DecompressionStream``. The HTML opens from disk: no server, no network.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnlens.attention.band import Band, received_attention, topk_attended, topk_attending
from attnlens.attention.full import Combination
from attnlens.attention.layers import LAYER_CONFIGURATIONS, layer_slice
from attnlens.attribution.methods import label, signed
from attnlens.data.tokens import structural_ids, surface_pieces
from attnlens.render.escape import csp_meta, html_text, script_json
from attnlens.tasks import CLASSIFICATION, Task

EXPLORER_SCHEMA = "explorer/v2"  # v2: a target selector (meta "targets", arrays attribution_t<k>, evidence_t<k>)
#: int16 offset meaning "no partner" (fewer than k partners with non-zero attention).
NO_PARTNER = -32768
#: Levels of the 8-bit square-root quantisation of partner attention.
LEVELS = 255


def configuration_weights(n_layers: int, n_heads: int, layers: str, importance: torch.Tensor | None) -> torch.Tensor:
    """``(L, H)`` weights of a layer configuration: 1 (or the head importance) on its layers, 0 elsewhere."""
    weights = torch.zeros(n_layers, n_heads)
    chosen = layer_slice(n_layers, layers)
    weights[chosen] = 1.0 if importance is None else importance.float()[chosen]
    return weights


def combine_bands(bands: list, weights: torch.Tensor):
    """``Σ_{l,h} w[l,h] · A[l,h]`` as one single-head layer.

    Where every layer is a band of one layout (length, window, global tokens), the weighted attention of a
    layer configuration is itself a band and every band operation applies to it. Layers of different forms
    (ModernBERT's windowed and full layers) combine by query blocks (:class:`~attnlens.attention.full.Combination`).
    """
    first = bands[0]
    same = all(isinstance(b, Band) and b.slots == first.slots and b.x == first.x for b in bands)
    if not same:
        return Combination(tuple(bands), weights)
    local = torch.zeros(1, first.n, first.slots, dtype=torch.float32)
    glob = None if first.global_ is None else torch.zeros(1, *first.global_.shape[1:], dtype=torch.float32)
    for layer, band in enumerate(bands):
        w = weights[layer].to(torch.float32)
        if not bool(w.any()):
            continue
        local[0] += torch.einsum("h,hns->ns", w, band.local.float())
        if glob is not None:
            glob[0] += torch.einsum("h,hnx->nx", w, band.global_.float())
    return Band(local, glob, first.length, first.global_positions)


@dataclass
class Views:
    """Received attention and top-k partners of every view of one example.

    Views are ordered: the ``L × H`` single heads (layer-major, unscaled; the page multiplies by the
    head's importance when "scaled" is on, which does not change the partners), then every layer
    configuration unscaled and scaled (``configurations``).
    """

    received: np.ndarray  # (V, n) float32
    attended_idx: np.ndarray  # (V, n, k) int64, −1 = none
    attended_val: np.ndarray  # (V, n, k) float32
    attending_idx: np.ndarray
    attending_val: np.ndarray
    configurations: list[dict[str, Any]] = field(default_factory=list)  # {"layers", "scaled", "view"}


def compute_views(bands: list[Band], importance: torch.Tensor, k: int) -> Views:
    """Every view of an example from its stored bands (one per layer) and the ``(L, H)`` importance."""
    n_layers, n_heads, n = len(bands), bands[0].heads, bands[0].n
    n_views = n_layers * n_heads + 2 * len(LAYER_CONFIGURATIONS)
    received = np.zeros((n_views, n), dtype=np.float32)
    parts = {
        name: (np.full((n_views, n, k), -1, dtype=np.int64), np.zeros((n_views, n, k), dtype=np.float32))
        for name in ("attended", "attending")
    }

    def fill(view: slice, band: Band) -> None:
        received[view] = received_attention(band).numpy()
        for name, fn in (("attended", topk_attended), ("attending", topk_attending)):
            idx, val = fn(band, k)
            parts[name][0][view] = idx.numpy()
            parts[name][1][view] = val.numpy()

    for layer, band in enumerate(bands):
        fill(slice(layer * n_heads, (layer + 1) * n_heads), band)
    configurations = []
    view = n_layers * n_heads
    for layers in LAYER_CONFIGURATIONS:
        for scaled in (False, True):
            weights = configuration_weights(n_layers, n_heads, layers, importance if scaled else None)
            fill(slice(view, view + 1), combine_bands(bands, weights))
            configurations.append({"layers": layers, "scaled": scaled, "view": view})
            view += 1
    return Views(
        received=received,
        attended_idx=parts["attended"][0],
        attended_val=parts["attended"][1],
        attending_idx=parts["attending"][0],
        attending_val=parts["attending"][1],
        configurations=configurations,
    )


def document_for(
    example: dict[str, Any],
    roles: list[str],
    bands: list[Band],
    input_ids: list[int],
    attribution_row,
    importance: torch.Tensor,
    tokenizer,
    class_names: list[str],
    evidence: np.ndarray | None,
    top_k: int,
    prov: dict[str, Any],
    explanations: dict[str, np.ndarray] | None = None,
    notes: list[str] | None = None,
    task: Task = CLASSIFICATION,
    other_targets: Sequence[tuple[Any, np.ndarray | None]] = (),
) -> ExplorerDocument:
    """Assemble one example's page from the pipeline's artifacts; ``class_names``: the names of the model's
    outputs (:meth:`attnlens.tasks.Task.output_names`), read as ``task`` says (:meth:`~attnlens.tasks.Task.outcome`);
    ``notes``: lines the page's header shows (what was cut, a high share of unknown tokens:
    attnlens.data.reading.document_reading). ``attribution_row`` and ``evidence`` are the headline target's;
    ``other_targets``: ``(attribution row, evidence)`` of each other explained output, in rank order, which the
    page's target selector shows."""
    eid = example["example_id"]
    rows = [attribution_row, *(row for row, _ in other_targets)]
    if any([int(i) for i in row["input_ids"]] != input_ids for row in rows):
        raise ValueError(f"{eid}: attention and attribution saw different token ids")
    special_set = structural_ids(tokenizer)
    raw = tokenizer.convert_ids_to_tokens(input_ids)
    pieces = surface_pieces(tokenizer, raw)
    tokens = [t if i in special_set else p[0] for i, t, p in zip(input_ids, raw, pieces, strict=True)]
    starts = [bool(p[1]) or i in special_set for i, p in zip(input_ids, pieces, strict=True)]
    outcome = task.outcome(example["label"], attribution_row["probs"], int(attribution_row["target"]), class_names)
    targets = [
        Target(
            name=task.outcome(example["label"], row["probs"], int(row["target"]), class_names).explained,
            attribution=np.asarray(row["scores"], dtype=np.float32),
            evidence=ev,
            ig_steps=int(row["n_steps"]),
            ig_delta=float(row["delta"]),
        )
        for row, ev in [(attribution_row, evidence), *other_targets]
    ]
    info = {
        "roles": roles,
        "label": outcome.label,
        "prediction": outcome.prediction,
        "outputs": {name: round(p, 4) for name, p in outcome.outputs.items()},
        "explained": outcome.explained,
        "ig_steps": int(attribution_row["n_steps"]),
        "ig_delta": float(attribution_row["delta"]),
    }
    if notes:
        info["notes"] = list(notes)
    known = "" if info["label"] is None else f"label {info['label']}, "
    title = f"{eid} ({', '.join(roles)}): {known}predicted {info['prediction']}"
    return ExplorerDocument(
        example_id=eid,
        title=title,
        info=info,
        tokens=tokens,
        starts_word=starts,
        special=np.array([i in special_set for i in input_ids], dtype=bool),
        attribution=np.asarray(attribution_row["scores"], dtype=np.float32),
        evidence=evidence,
        importance=importance.numpy(),
        views=compute_views(bands, importance, top_k),
        provenance=prov,
        explanations=[(m, label(m), signed(m), v) for m, v in (explanations or {}).items()],
        other_targets=targets[1:],
    )


# --- compact encoding ----------------------------------------------------------------------------


def encode_partners(idx: np.ndarray, val: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(V, n, k)`` partners → int16 gap byte planes ``(2, V, k, n)``, uint8 levels ``(V, k, n)``, scales ``(V,)``.

    Within a token the partners are stored in position order: the first as ``partner − position``,
    each next one as the gap to the previous partner (:data:`NO_PARTNER` for none, stored last).
    Neighbouring tokens mostly share partners or offsets, so these gaps repeat along the token axis
    and deflate well, the more so split into a low-byte and a high-byte plane. A value is stored as
    the level ``round(255 · √(value / scale))``, ``scale`` being the view's largest partner value,
    so small attention keeps relative precision. :func:`decode_partners` inverts it; the page sorts
    the decoded partners by value for display.
    """
    n = idx.shape[1]
    order = np.argsort(np.where(idx >= 0, idx, np.iinfo(np.int64).max), axis=2, kind="stable")
    sidx = np.take_along_axis(idx, order, 2)
    sval = np.take_along_axis(val, order, 2)
    present = sidx >= 0
    rel = np.where(present, sidx - np.arange(n)[None, :, None], 0)
    gaps = np.diff(rel, axis=2, prepend=0)
    gaps[..., 1:] = np.where(present[..., 1:], np.diff(sidx, axis=2), 0)
    if np.abs(gaps[present]).max(initial=0) > 32767:
        raise ValueError("documents longer than 32 768 tokens do not fit the int16 partner gaps")
    gaps = np.where(present, gaps, NO_PARTNER).astype("<i2").transpose(0, 2, 1)
    planes = np.ascontiguousarray(gaps).view(np.uint8).reshape(*gaps.shape, 2)
    scale = np.maximum(sval.reshape(len(sval), -1).max(1, initial=0.0), 0.0).astype(np.float32)
    safe = np.where(scale > 0, scale, 1.0)[:, None, None]
    levels = np.where(present, np.rint(LEVELS * np.sqrt(np.clip(sval / safe, 0.0, 1.0))), 0)
    return (
        np.ascontiguousarray(np.moveaxis(planes, -1, 0)),
        np.ascontiguousarray(levels.transpose(0, 2, 1)).astype(np.uint8),
        scale,
    )


def decode_partners(planes: np.ndarray, levels: np.ndarray, scale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`encode_partners`: ``(V, n, k)`` partner positions (−1 none) and values, position order.

    Values are exact to within the quantisation (relative error below ``1 / level``).
    """
    gaps = np.ascontiguousarray(np.moveaxis(planes, 0, -1)).view("<i2")[..., 0].astype(np.int64)
    gaps = gaps.transpose(0, 2, 1)
    n = gaps.shape[1]
    present = gaps != NO_PARTNER
    first = np.arange(n)[None, :, None]
    idx = np.cumsum(np.where(present, gaps, 0), axis=2) + first
    idx = np.where(present, idx, -1)
    val = scale[:, None, None] * (levels.transpose(0, 2, 1).astype(np.float64) / LEVELS) ** 2
    return idx, np.where(present, val, 0.0)


_DTYPES = {"float32": "f4", "float16": "f2", "int16": "i2", "uint8": "u1", "int32": "i4"}


def pack_arrays(arrays: dict[str, np.ndarray]) -> tuple[list[dict[str, Any]], bytes]:
    """Concatenate arrays (little-endian, each 8-byte aligned) → (header, deflated bytes)."""
    header, chunks, offset = [], [], 0
    for name, array in arrays.items():
        a = np.ascontiguousarray(array)
        if a.dtype.name not in _DTYPES:
            raise TypeError(f"{name}: dtype {a.dtype} cannot be embedded")
        raw = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header.append({"name": name, "dtype": _DTYPES[a.dtype.name], "shape": list(a.shape), "offset": offset})
        pad = (-len(raw)) % 8
        chunks.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    return header, zlib.compress(b"".join(chunks), 9)


def unpack_arrays(header: list[dict[str, Any]], blob: bytes) -> dict[str, np.ndarray]:
    """Inverse of :func:`pack_arrays` (what the page does in JavaScript)."""
    raw = zlib.decompress(blob)
    out = {}
    for entry in header:
        dtype = np.dtype("<" + entry["dtype"])
        count = int(np.prod(entry["shape"])) if entry["shape"] else 1
        out[entry["name"]] = np.frombuffer(raw, dtype, count, entry["offset"]).reshape(entry["shape"])
    return out


# --- the page ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """One explained output of a page beyond the headline: its name, IG scores and planted evidence."""

    name: str  # the output as the page names it (a label, a class)
    attribution: np.ndarray  # (n,) IG scores toward it
    evidence: np.ndarray | None  # (n,) bool: its planted evidence, or None
    ig_steps: int
    ig_delta: float


@dataclass
class ExplorerDocument:
    """Everything one explorer page shows."""

    example_id: str
    title: str
    info: dict[str, Any]  # label, prediction, outputs, explained, roles, ... (shown in the header)
    tokens: list[str]  # surface strings
    starts_word: list[bool]  # a space goes before the token
    special: np.ndarray  # (n,) bool
    attribution: np.ndarray  # (n,) raw IG scores toward the attributed class
    evidence: np.ndarray | None  # (n,) bool planted evidence, or None when the corpus has none
    importance: np.ndarray  # (L, H)
    views: Views
    provenance: dict[str, Any]
    #: ``[(method, label, signed, (n,) scores)]`` of the explain rule, one overlay each
    explanations: list[tuple[str, str, bool, np.ndarray]] = field(default_factory=list)
    #: the other explained outputs (a multi-label document's other labels), in rank order: the target selector
    other_targets: list[Target] = field(default_factory=list)


def payload(doc: ExplorerDocument) -> tuple[dict[str, Any], bytes]:
    """The page's JSON metadata and its deflated binary arrays."""
    n_layers, n_heads = doc.importance.shape
    n = len(doc.tokens)
    arrays: dict[str, np.ndarray] = {
        "attribution": doc.attribution.astype(np.float32),
        "special": doc.special.astype(np.uint8),
        "received": doc.views.received.astype(np.float16),
        "importance": doc.importance.astype(np.float32),
    }
    if doc.evidence is not None:
        arrays["evidence"] = doc.evidence.astype(np.uint8)
    for method, _, _, scores in doc.explanations:
        arrays[f"explanation_{method}"] = np.asarray(scores, dtype=np.float32)
    for k, target in enumerate(doc.other_targets, start=1):  # the headline's are "attribution" and "evidence"
        arrays[f"attribution_t{k}"] = target.attribution.astype(np.float32)
        if target.evidence is not None:
            arrays[f"evidence_t{k}"] = target.evidence.astype(np.uint8)
    for name in ("attended", "attending"):
        off, lev, scale = encode_partners(getattr(doc.views, f"{name}_idx"), getattr(doc.views, f"{name}_val"))
        arrays[f"{name}_gaps"], arrays[f"{name}_level"], arrays[f"{name}_scale"] = off, lev, scale
    header, blob = pack_arrays(arrays)
    meta = {
        "schema": EXPLORER_SCHEMA,
        "example_id": doc.example_id,
        "title": doc.title,
        "info": doc.info,
        "tokens": doc.tokens,
        "starts_word": [bool(s) for s in doc.starts_word],
        "n_tokens": n,
        "n_layers": int(n_layers),
        "n_heads": int(n_heads),
        "top_k": int(doc.views.attended_idx.shape[2]),
        "levels": LEVELS,
        "no_partner": NO_PARTNER,
        "configurations": doc.views.configurations,
        "explanations": [
            {"method": m, "label": label, "signed": bool(signed)} for m, label, signed, _ in doc.explanations
        ],
        "targets": [
            {"name": doc.info["explained"], "ig_steps": doc.info["ig_steps"], "ig_delta": doc.info["ig_delta"]},
            *({"name": t.name, "ig_steps": t.ig_steps, "ig_delta": t.ig_delta} for t in doc.other_targets),
        ],
        "arrays": header,
        "provenance": doc.provenance,
    }
    return meta, blob


def _asset(name: str) -> str:
    return resources.files("attnlens.render").joinpath("assets", name).read_text(encoding="utf-8")


def render_explorer(meta: dict[str, Any], blob: bytes) -> str:
    """The self-contained HTML page (inline CSS, JavaScript and data), under a Content-Security-Policy that lets
    only its own script and style run (:func:`attnlens.render.escape.csp_meta`)."""
    page = _asset("explorer.html")
    css, js = _asset("explorer.css"), _asset("explorer.js")
    replacements = {
        "__CSP__": csp_meta(scripts=(js,), styles=(css,)),
        "__TITLE__": html_text(meta["title"]),
        "__PROVENANCE__": html_text(json.dumps(meta["provenance"], sort_keys=True)),
        "__CSS__": css,
        "__JS__": js,
        "__META__": script_json(meta),
        "__DATA__": base64.b64encode(blob).decode("ascii"),
    }
    for key in replacements:
        if key not in page:
            raise RuntimeError(f"explorer template lacks {key}")
    # one pass, so that inserted text (tokens, data) is never searched for placeholders
    pattern = "|".join(re.escape(key) for key in replacements)
    page = re.sub(pattern, lambda m: replacements[m.group(0)], page)
    return page


def read_explorer(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The metadata and arrays embedded in an explorer page (for tests and for reuse)."""
    text = Path(path).read_text(encoding="utf-8")
    meta = json.loads(re.search(r'<script id="attnlens-meta" type="application/json">(.*?)</script>', text, re.S)[1])
    data = re.search(r'<script id="attnlens-data" type="application/octet-stream">(.*?)</script>', text, re.S)[1]
    return meta, unpack_arrays(meta["arrays"], base64.b64decode(data))


# --- the rule ------------------------------------------------------------------------------------
