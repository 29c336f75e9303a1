"""The model seam: the registry, the Longformer implementation of the interface, the one-line refusals."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
import transformers

from attnlens.errors import InputError
from attnlens.models import ARCHITECTURES, architecture, forward_bands
from attnlens.models.checkpoints import load_classifier
from attnlens.models.longformer import LONGFORMER, bands_from_outputs, global_attention_mask
from attnlens.models.seam import Architecture


def test_registry_is_keyed_by_model_type(tiny_classifier):
    model, _ = tiny_classifier
    assert architecture(model) is LONGFORMER and architecture(model.config) is LONGFORMER
    assert all(key == arch.model_type for key, arch in ARCHITECTURES.items())
    for arch in ARCHITECTURES.values():  # every architecture implements the whole interface
        assert isinstance(arch, Architecture) and not inspect.isabstract(type(arch))
        assert hasattr(transformers, arch.classifier_class)


def test_unsupported_model_type_is_one_line_naming_the_supported_ones(tmp_path):
    config = transformers.BertConfig(
        vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16
    )
    with pytest.raises(InputError) as err:
        architecture(config, where="some/folder")
    message = str(err.value)
    assert "\n" not in message and "some/folder" in message and "model_type" in message
    assert f"expected one of the architectures attnlens reads {ARCHITECTURES.names()}, got 'bert'" in message
    assert {"big_bird", "gemma3_text", "llama", "longformer", "mistral", "modernbert", "qwen2", "qwen3"} <= set(
        ARCHITECTURES
    )
    # a saved classifier of an unsupported architecture is refused the same way, before any weight is read
    transformers.BertForSequenceClassification(config).save_pretrained(tmp_path / "bert-clf")
    supported = re.escape(str(ARCHITECTURES.names()))
    with pytest.raises(InputError, match=rf"expected one of the architectures attnlens reads {supported}, got 'bert'"):
        load_classifier(tmp_path / "bert-clf")


def test_longformer_layers_by_name(tiny_classifier):
    model, _ = tiny_classifier
    lf = model.longformer
    assert LONGFORMER.encoder(model) is lf and LONGFORMER.embeddings(model) is lf.embeddings
    assert list(LONGFORMER.layers(model)) == list(lf.encoder.layer)
    emb = LONGFORMER.embedding_layers(model)
    assert emb == {
        "word": lf.embeddings.word_embeddings,
        "position": lf.embeddings.position_embeddings,
        "token_type": lf.embeddings.token_type_embeddings,
    }
    layer = lf.encoder.layer[0]
    assert LONGFORMER.self_attention(layer) is layer.attention.self
    assert LONGFORMER.value_projections(layer) == {
        "local": layer.attention.self.value,
        "global": layer.attention.self.value_global,
    }
    assert LONGFORMER.output_projection(layer) is layer.attention.output.dense


def test_longformer_head_groups_split_by_head(tiny_classifier):
    model, _ = tiny_classifier
    groups = LONGFORMER.head_groups(model)
    assert len(groups) == model.config.num_hidden_layers
    hidden = model.config.hidden_size
    for layer in groups:
        assert tuple(layer) == LONGFORMER.head_group_names == LONGFORMER.local_groups + LONGFORMER.global_groups
        for name, (weight, bias, rows) in layer.items():
            assert weight.shape == (hidden, hidden) and rows == slice(None)  # rows (columns for output) of R_h
            assert (bias is None) == (name == "output")


def test_longformer_forward_arguments_and_positions(tiny_classifier):
    model, _ = tiny_classifier
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    args = LONGFORMER.forward_args(mask)
    assert set(args) == {"global_attention_mask"}
    assert torch.equal(args["global_attention_mask"], global_attention_mask(mask))
    assert args["global_attention_mask"].tolist() == [[1, 0, 0, 0], [1, 0, 0, 0]]  # CLS only
    pad = model.config.pad_token_id
    assert LONGFORMER.position_ids(model.config, 3, batch=2).tolist() == [[pad + 1, pad + 2, pad + 3]] * 2


def test_run_reads_the_band_of_the_outputs(tiny_classifier):
    model, tokenizer = tiny_classifier
    enc = tokenizer(["a text long enough to cross the window of sixteen tokens at least once"], return_tensors="pt")
    batch = {
        "input_ids": enc["input_ids"],
        "attention_mask": enc["attention_mask"],
        **LONGFORMER.forward_args(enc["attention_mask"]),
    }
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    with torch.no_grad():
        read = LONGFORMER.run(model, batch, attentions=True)[1]
    direct = bands_from_outputs(
        out.attentions, out.global_attentions, batch["attention_mask"], batch["global_attention_mask"]
    )
    bands = forward_bands(model, batch)
    assert len(read) == 1 and len(read[0]) == model.config.num_hidden_layers
    for a, b, c in zip(read[0], direct[0], bands, strict=True):
        assert torch.equal(a.local, b.local) and torch.equal(a.global_, b.global_) and torch.equal(a.local, c.local)
        assert a.global_positions.tolist() == [0] and a.length == enc["input_ids"].shape[1]
