"""The Siamese encoder: a sentence-transformers-style model run from a chosen layer, its pooling and its
reference inputs."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer

from attnlens.data.tokens import TEXT_AS_TEXT, structural_ids
from attnlens.errors import InputError
from attnlens.models.checkpoints import from_hub, resolve_pretrained

#: Architectures whose encoder blocks :class:`SiameseEncoder` can run one by one.
ARCHITECTURES = ("bert", "roberta", "xlm-roberta", "mpnet")


#: Written into a model folder trained by :func:`train_pair_encoder` (exact mode).
PAIR_MODEL_FILE = "attnlens_pair.json"


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


def pair_inputs(enc: SiameseEncoder, row, cfg) -> dict:
    """Ids, references and layer representations of both texts of one pair."""
    out = {}
    for side in ("a", "b"):
        ids = enc.encode(row[f"text_{side}"], cfg.encoder.max_tokens)
        ref = enc.reference_ids(ids, cfg.encoder.reference)
        out[side] = (ids, enc.representation(ids), enc.representation(ref))
    return out
