"""What each ``model.source`` builds: the base model fine-tuning starts from (converted, pretrained or drawn from a
config), an existing classifier imported as it is, and the length and window a run uses. Reading a saved checkpoint
is :mod:`attnlens.models.checkpoints`'s.

A ``cfg`` is the ``model`` config section as the stage builds it (:class:`~attnlens.pipeline.config.ModelConfig`): the
numerics take it as data and never import the pipeline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

# transformers resolves its names on first use: the model classes (about 1.5 s to import) are loaded
# only by the jobs that build or run a model, not by those that need just the tokenizer.
import transformers

from attnlens.errors import InputError
from attnlens.models import ARCHITECTURES, architecture
from attnlens.models.bigbird.bert_to_bigbird import convert_bert_to_bigbird, validate_blocks
from attnlens.models.checkpoints import (
    TEXT_AS_TEXT,
    agree_on_padding,
    from_hub,
    gguf_parsed_once,
    resolve_pretrained,
    source_tokenizer,
)
from attnlens.models.llama.scratch_decoder import CLASSES as SCRATCH_DECODERS
from attnlens.models.llama.scratch_decoder import decoder_from_config, draw_decoder, family_settings
from attnlens.models.longformer.bert_to_longformer import convert_bert_to_longformer, default_window, validate_window
from attnlens.models.modernbert.scratch_encoder import modernbert_from_config
from attnlens.tasks import task_of


def build_base_model(
    cfg, num_labels: int, head: str = "sequence_classification"
) -> tuple[transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase]:
    """Create the base classifier that fine-tuning starts from, as the config says.

    ``cfg.source == "convert_bert"`` converts a BERT checkpoint (default: the packaged MiniLM) into a Longformer
    or, with ``cfg.architecture == "bigbird"``, a BigBird; ``cfg.source == "from_config"`` draws a ModernBERT of
    the BERT checkpoint's sizes at random (:mod:`attnlens.models.modernbert.scratch_encoder`), or a decoder (Llama,
    Mistral, Qwen 2 or 3, Gemma 3) with ``cfg.architecture`` (:mod:`attnlens.models.llama.scratch_decoder`);
    ``cfg.source == "pretrained"`` loads a pretrained encoder of any architecture behind the seam (hub id or
    folder: a Longformer, BigBird or ModernBERT checkpoint) and gives it a fresh ``num_labels`` head —
    ``"longformer"`` does the same for a Longformer checkpoint only —, a Longformer with the configured window.
    The length and window are :func:`model_shape`'s. ``head`` is the kind of head
    (:meth:`~attnlens.models.seam.Architecture.head_class`: a question-answering head in place of the classifier's,
    :func:`with_head`).
    """
    name = resolve_pretrained(cfg.name_or_path)
    src_config = source_config(cfg.name_or_path, cfg.source)
    shape = model_shape(cfg, src_config)
    tokenizer = source_tokenizer(cfg.name_or_path, shape.max_length)
    if cfg.source == "convert_bert":
        bert = from_hub(transformers.BertModel.from_pretrained, name, "model.name_or_path", add_pooling_layer=True)
        if cfg.architecture == "bigbird":
            model = convert_bert_to_bigbird(
                bert, tokenizer, shape.max_length, shape.block_size, cfg.num_random_blocks, num_labels, cfg.seed
            )
        else:
            model = convert_bert_to_longformer(bert, tokenizer, shape.max_length, shape.windows, num_labels, cfg.seed)
    elif cfg.source == "from_config" and cfg.architecture in SCRATCH_DECODERS:
        model = decoder_from_config(
            cfg.architecture, src_config, tokenizer, shape.max_length, shape.windows[0], num_labels, cfg.seed
        )
    elif cfg.source == "from_config":
        model = modernbert_from_config(src_config, tokenizer, shape.max_length, shape.windows[0], num_labels, cfg.seed)
    else:
        torch.manual_seed(cfg.seed)  # the new head's weights
        classifier = getattr(transformers, architecture(src_config).head_class(head))
        window = {"attention_window": shape.windows} if shape.windows else {}
        model = from_hub(classifier.from_pretrained, name, "model.name_or_path", num_labels=num_labels, **window)
        agree_on_padding(model, tokenizer, cfg.name_or_path, cfg.source)
    return with_head(model, head, cfg.seed).eval(), tokenizer


def with_head(model: transformers.PreTrainedModel, head: str, seed: int) -> transformers.PreTrainedModel:
    """``model`` with a head of the kind ``head`` (:meth:`~attnlens.models.seam.Architecture.head_class`) on its
    encoder: ``model`` itself when it has one, else a new model of that class whose encoder holds ``model``'s
    weights (every one of them: a pooler the new head does not read is the only weight left behind) and whose
    head is drawn from ``seed``."""
    wanted = architecture(model).head_class(head)
    if type(model).__name__ == wanted:
        return model
    torch.manual_seed(seed)
    new = getattr(transformers, wanted)(model.config)
    # the encoder under each head's own name (a decoder's classifier keeps it as ``model``, its QA head ``transformer``)
    source = {k: v for k, v in model.base_model.state_dict().items() if not k.startswith("pooler.")}
    missing, unexpected = new.base_model.load_state_dict(source, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{wanted}'s encoder does not take {type(model).__name__}'s: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}"
        )
    return new


@dataclass(frozen=True)
class ModelShape:
    """The length and windows a run uses, and where each came from (``"config"`` or ``"checkpoint"``)."""

    max_length: int
    windows: list[int]  # empty for an architecture without a window setting (BigBird, ModernBERT classifiers)
    origin: dict[str, str]
    checkpoint: dict[str, Any]  # the checkpoint's own values (None where it has none)
    block_size: int | None = None  # BigBird's, where convert_bert builds one

    def describe(self) -> str:
        """``model.max_length 128 (from the config); model.attention_window [16, 16] (from the checkpoint)``."""
        return "; ".join(
            f"model.{key} {value} (from the {self.origin[key]})"
            for key, value in (("max_length", self.max_length), ("attention_window", self.windows))
            if key == "max_length" or self.windows
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


def _own_shape(source: str, src_config) -> tuple[int, list[int] | None]:
    """The checkpoint's own maximum length and windows (``None`` for a checkpoint without sliding windows:
    BERT, BigBird)."""
    if source in NEW_POSITIONS or not hasattr(src_config, "attention_window"):
        return int(src_config.max_position_embeddings), None
    w = src_config.attention_window
    windows = [int(v) for v in w] if isinstance(w, list | tuple) else [int(w)] * src_config.num_hidden_layers
    return int(src_config.max_position_embeddings) - int(src_config.pad_token_id or 0) - 1, windows


def resolve_max_length(cfg, src_config) -> int:
    """``model.max_length``, or the checkpoint's own when it is ``null`` (see :func:`model_shape`).

    Raises:
        InputError: a length beyond a Longformer checkpoint's position table.
    """
    own, _ = _own_shape(cfg.source, src_config)
    max_length = cfg.max_length if cfg.max_length is not None else own
    if cfg.source not in NEW_POSITIONS and max_length > own:
        raise InputError(
            "config", "model.max_length", f"expected at most {own} for {cfg.name_or_path}, got {max_length}"
        )
    return int(max_length)


def model_shape(cfg, src_config) -> ModelShape:
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
    builds = BUILDS.get(cfg.source) or (architecture(src_config).name,)  # the others: a checkpoint's own
    if cfg.architecture is not None and cfg.architecture not in builds:
        hint = {
            "convert_bert": " (a ModernBERT or a decoder is built with model.source from_config)",
            **dict.fromkeys(CHECKPOINT_ARCHITECTURE, " (the checkpoint is one)"),
        }.get(cfg.source, "")
        raise InputError(
            "config",
            "model.architecture",
            f"expected one of {list(builds)} with model.source {cfg.source!r}{hint}, got {cfg.architecture!r}",
        )
    if cfg.source in CHECKPOINT_ARCHITECTURE and own_window is None:  # no window setting (BigBird, ModernBERT)
        if cfg.attention_window is not None:
            raise InputError(
                "config",
                "model.attention_window",
                f"expected null for a {src_config.model_type!r} checkpoint (the config sets a Longformer's window "
                f"only: another's is its own), got {cfg.attention_window}",
            )
        origin = {
            "max_length": "config" if cfg.max_length is not None else "checkpoint",
            "attention_window": "checkpoint",
        }
        return ModelShape(max_length, [], origin, {"max_length": own_length, "attention_window": None})
    origin = {
        key: "config" if getattr(cfg, key) is not None else "checkpoint" for key in ("max_length", "attention_window")
    }
    if cfg.source == "convert_bert" and cfg.architecture == "bigbird":
        if cfg.attention_window is not None:
            raise InputError(
                "config",
                "model.attention_window",
                f"expected null with model.architecture bigbird (set model.block_size), got {cfg.attention_window}",
            )
        block = cfg.block_size if cfg.block_size is not None else max(1, default_window(max_length) // 2)
        validate_blocks(max_length, block, cfg.num_random_blocks)
        origin["block_size"] = "config" if cfg.block_size is not None else "default (max_length / 16)"
        return ModelShape(max_length, [], origin, {"max_length": own_length, "attention_window": None}, block)
    if cfg.attention_window is not None:
        window = cfg.attention_window
    elif own_window is not None:
        window = own_window
    else:
        window, origin["attention_window"] = default_window(max_length), "default (max_length / 8)"
    if cfg.source == "from_config" and not isinstance(window, int) and len(set(window)) > 1:
        raise InputError(
            "config",
            "model.attention_window",
            f"expected one window for a model drawn from its configuration (ModernBERT's local_attention, "
            f"a decoder's sliding_window), got {list(window)}",
        )
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
            "config",
            "model.name_or_path",
            f"expected a classifier of the dataset's {len(classes)} classes {list(classes)}, {name!r} predicts "
            f"{len(labels)} labels {labels}",
        )
    if named_model and named_data and [c.casefold() for c in classes] != [lab.casefold() for lab in labels]:
        raise InputError(
            "config",
            "model.name_or_path",
            f"expected the classifier's labels to be the dataset's classes in label order {list(classes)}, "
            f"{name!r} has {labels} (set data.classes, or relabel the data)",
        )


def import_classifier(
    cfg, classes: list[str]
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
    arch = architecture(src_config)
    model_class = arch.head_class(task_of(src_config).head)  # a sequence classifier, or a question answerer
    window = {"attention_window": shape.windows} if shape.windows else {}
    model, info = from_hub(
        getattr(transformers, model_class).from_pretrained,
        name,
        "model.name_or_path",
        output_loading_info=True,
        **window,
    )
    missing = sorted(info.get("missing_keys") or []) + sorted(info.get("mismatched_keys") or [])
    if missing:
        raise InputError(
            cfg.name_or_path,
            "weights",
            f"expected a fine-tuned {model_class}, found no trained weights for {missing[:3]}"
            f"{' …' if len(missing) > 3 else ''}; use model.source 'pretrained' to fine-tune a pretrained checkpoint",
        )
    if not named_labels(model.config.id2label.values()):
        model.config.id2label = dict(enumerate(classes))
        model.config.label2id = {c: i for i, c in enumerate(classes)}
    tokenizer = source_tokenizer(cfg.name_or_path, shape.max_length)
    agree_on_padding(model, tokenizer, cfg.name_or_path, cfg.source)
    return model.eval(), tokenizer, shape


#: The architecture each ``model.source`` that builds a base model starts from (``pretrained``: any behind the seam).
SOURCE_ARCHITECTURES = {
    "convert_bert": ("bert", "a BERT checkpoint to convert"),
    "longformer": ("longformer", "a Longformer checkpoint"),
    "from_config": (
        "bert",
        "a BERT checkpoint whose sizes and tokenizer a ModernBERT or a decoder trained from scratch takes",
    ),
}
#: Sources whose length is the model's to choose (the BERT checkpoint's positions are tiled or unused).
NEW_POSITIONS = ("convert_bert", "from_config")
#: The architectures each source that builds a base model can build (the others: the checkpoint's own).
BUILDS = {
    "convert_bert": ("longformer", "bigbird"),
    "longformer": ("longformer",),
    "from_config": ("modernbert", *SCRATCH_DECODERS),
}
#: Sources that keep the checkpoint's own architecture, whichever of :data:`attnlens.models.ARCHITECTURES` it is.
CHECKPOINT_ARCHITECTURE = ("classifier", "pretrained")


def source_config(name_or_path: str, source: str):
    """The checkpoint's Hugging Face config, checked to be what ``model.source`` needs: the architecture a base
    model is built from, or (``classifier``) a sequence classifier of an architecture behind the model seam
    (:data:`attnlens.models.ARCHITECTURES`) where the config names its class."""
    found = from_hub(transformers.AutoConfig.from_pretrained, resolve_pretrained(name_or_path), "model.name_or_path")
    if source == "pretrained" and found.model_type not in ARCHITECTURES:
        raise InputError(
            "config",
            "model.name_or_path",
            f"expected a pretrained checkpoint of a model_type attnlens reads (one of {sorted(ARCHITECTURES)}) "
            f"(model.source 'pretrained'), {name_or_path!r} is a {found.model_type!r} checkpoint",
        )
    if source in CHECKPOINT_ARCHITECTURE and found.model_type in ARCHITECTURES:
        ARCHITECTURES[found.model_type].check(found, name_or_path)
    if source == "pretrained":
        return found
    if source == "classifier":
        supported = sorted(ARCHITECTURES)
        if found.model_type not in ARCHITECTURES:
            raise InputError(
                "config",
                "model.name_or_path",
                f"expected a fine-tuned sequence classifier of a model_type attnlens reads (one of {supported}) "
                f"(model.source 'classifier'), {name_or_path!r} is a {found.model_type!r} checkpoint",
            )
        arch = ARCHITECTURES[found.model_type]
        saved_as = getattr(found, "architectures", None) or []
        if saved_as and not {arch.classifier_class, arch.qa_class} & set(saved_as):
            raise InputError(
                "config",
                "model.name_or_path",
                f"expected a fine-tuned sequence classifier (model.source 'classifier'), {name_or_path!r} is saved "
                f"as {saved_as}; use model.source 'pretrained' to fine-tune it",
            )
        return found
    wanted, what = SOURCE_ARCHITECTURES[source]
    if found.model_type != wanted:
        raise InputError(
            "config",
            "model.name_or_path",
            f"expected {what} (model.source {source!r}), {name_or_path!r} is a {found.model_type!r} checkpoint",
        )
    return found


def build_generator(
    cfg, hidden_size: int, num_layers: int, num_heads: int
) -> tuple[transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase]:
    """The causal language model the generation study explains, as ``model.source`` says: ``from_config`` draws a
    ``model.architecture`` decoder of the given sizes with the BERT checkpoint's tokenizer and vocabulary (the
    packaged MiniLM's by default), to be trained from scratch; ``pretrained`` loads a causal language model as it
    is (an instruct model: its own tokenizer and chat template). A checkpoint of an architecture with no causal
    language model, or a source of neither kind, is one :class:`InputError` line."""
    if cfg.source == "from_config":
        if cfg.architecture not in SCRATCH_DECODERS:
            raise InputError(
                "config",
                "model.architecture",
                f"expected a decoder of {sorted(SCRATCH_DECODERS)} for model.source 'from_config' with data.task "
                f"'generation', got {cfg.architecture!r}",
            )
        if hidden_size % num_heads:
            raise InputError(
                "config",
                "generation.scratch.num_heads",
                f"expected a divisor of hidden_size {hidden_size}, got {num_heads}",
            )
        shape = model_shape(cfg, source_config(cfg.name_or_path, cfg.source))
        tokenizer = source_tokenizer(cfg.name_or_path, shape.max_length)
        head_dim = hidden_size // num_heads
        model = draw_decoder(
            cfg.architecture,
            cfg.seed,
            head="causal_lm",
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=4 * hidden_size,
            num_hidden_layers=num_layers,
            num_attention_heads=num_heads,
            num_key_value_heads=num_heads,
            head_dim=head_dim,
            max_position_embeddings=shape.max_length,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id,
            tie_word_embeddings=False,
            attn_implementation="sdpa",
            **family_settings(cfg.architecture, head_dim, shape.windows[0] if shape.windows else shape.max_length),
        )
        return model, tokenizer
    if cfg.source == "pretrained":
        return load_causal_lm(cfg.name_or_path, "model.name_or_path")
    raise InputError(
        "config", "model.source", f"expected from_config or pretrained for data.task 'generation', got {cfg.source!r}"
    )


def load_causal_lm(
    name_or_path: str, field: str
) -> tuple[transformers.PreTrainedModel, transformers.PreTrainedTokenizerBase]:
    """A causal language model and its tokenizer (a folder or a hub id) of an architecture behind the seam, in eval
    mode on the CPU; one :class:`InputError` line for a checkpoint that is not one."""
    name = resolve_pretrained(name_or_path, field)
    with gguf_parsed_once(name):
        config = from_hub(transformers.AutoConfig.from_pretrained, name, field)
        arch = architecture(config, where=name_or_path)
        model_class = getattr(transformers, arch.head_class("causal_lm"))
        model = from_hub(model_class.from_pretrained, name, field, config=config)
        tokenizer = from_hub(transformers.AutoTokenizer.from_pretrained, name, field, **TEXT_AS_TEXT)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model.eval(), tokenizer
