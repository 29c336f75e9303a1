import pytest
import torch

from attnlens.errors import InputError
from attnlens.models.from_bert import tile_positions
from attnlens.models.loading import build_base_model
from attnlens.models.longformer import global_attention_mask
from attnlens.models.longformer.bert_to_longformer import convert_bert_to_longformer, validate_window
from attnlens.pipeline.config import ModelConfig

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)

TEXTS = [
    "Longformer replaces full self-attention with a sliding window plus a few global tokens. " * 6,
    "A much shorter second document about compilers and type systems.",
]


def test_tile_positions():
    table = torch.arange(12.0).reshape(4, 3)  # 4 "BERT" positions, hidden 3
    tiled = tile_positions(table, max_length=10, offset=1)
    assert tiled.shape == (11, 3)
    assert torch.equal(tiled[0], torch.zeros(3))  # copies of rows (no arithmetic): equal
    for k in range(10):
        assert torch.equal(tiled[1 + k], table[k % 4])


def test_global_attention_mask_only_real_tokens():
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0]])
    assert global_attention_mask(mask).tolist() == [[1, 0, 0, 0], [0, 0, 0, 0]]
    assert global_attention_mask(mask, (0, 2)).tolist() == [[1, 0, 1, 0], [0, 0, 0, 0]]


@pytest.mark.parametrize(
    ("max_length", "window", "match"),
    [(0, 64, "positive integer"), (-3, 64, "positive integer"), (128, 63, "even"), (128, 256, "at most")],
)
def test_validate_window_rejects(max_length, window, match):
    with pytest.raises(InputError, match=match):
        validate_window(max_length, window, 2)


def test_conversion_is_faithful_to_bert(minilm):
    """With a window covering the whole input and only CLS global, the Longformer *is* the BERT model.

    Tolerance: both models run in float64 on the same weights, but Longformer computes its local
    softmax in float32 whatever the input dtype (``softmax(..., dtype=torch.float32)``), so the
    attention probabilities carry float32 rounding (~6e-8 relative). Measured: at most 2.4e-7
    absolute over all 7 hidden-state tensors (values up to ~10). atol=1e-6 keeps 4x headroom and
    is still 4 orders of magnitude below a real discrepancy (a wrong position offset, a missing
    global copy or a global key counted twice all give differences > 1e-2).
    """
    bert, tokenizer = minilm
    enc = tokenizer(TEXTS, padding=True, return_tensors="pt")
    n = enc["input_ids"].shape[1]
    window = 2 * n + (2 * n) % 2  # one-sided half-window >= n: every token sees every token
    model = convert_bert_to_longformer(
        bert, tokenizer, max_length=window, attention_window=window, num_labels=2, seed=0
    )
    bert64, model64 = bert.double(), model.double()
    with torch.no_grad():
        ref = bert64(**enc, output_hidden_states=True)
        out = model64.longformer(
            input_ids=enc["input_ids"],
            attention_mask=enc["attention_mask"],
            global_attention_mask=global_attention_mask(enc["attention_mask"]),
            output_hidden_states=True,
        )
    real = enc["attention_mask"].bool()
    assert len(out.hidden_states) == len(ref.hidden_states) == 7
    for layer, (a, b) in enumerate(zip(out.hidden_states, ref.hidden_states, strict=True)):
        a = a[:, :n][real]
        torch.testing.assert_close(a, b[real], rtol=0, atol=1e-6, msg=lambda m, i=layer: f"layer {i}: {m}")
    bert.float()


def test_conversion_copies_and_initialises(minilm):
    bert, tokenizer = minilm
    model = convert_bert_to_longformer(bert, tokenizer, max_length=1100, attention_window=64, num_labels=3, seed=5)
    sd, bsd = model.state_dict(), bert.state_dict()
    layer = "longformer.encoder.layer.3.attention.self."  # the conversion copies weights: every check is equality
    for proj in ("query", "key", "value"):
        assert torch.equal(sd[f"{layer}{proj}_global.weight"], bsd[f"encoder.layer.3.attention.self.{proj}.weight"])
    pos = sd["longformer.embeddings.position_embeddings.weight"]
    assert pos.shape[0] == 1101
    assert torch.equal(pos[1 + 600], bsd["embeddings.position_embeddings.weight"][600 - 512])
    assert torch.equal(sd["classifier.dense.weight"], bsd["pooler.dense.weight"])
    assert model.config.attention_window == [64] * 6 and model.config.num_labels == 3
    again = convert_bert_to_longformer(bert, tokenizer, max_length=1100, attention_window=64, num_labels=3, seed=5)
    assert torch.equal(again.classifier.out_proj.weight, model.classifier.out_proj.weight)


def test_build_base_model_default(tmp_path):
    model, tokenizer = build_base_model(ModelConfig(max_length=256, attention_window=32), num_labels=2)
    assert tokenizer.model_max_length == 256
    assert model.config.max_position_embeddings == 257 and model.config.pad_token_id == tokenizer.pad_token_id


@pytest.mark.parametrize(
    "cfg",
    [
        ModelConfig(source="longformer", name_or_path="allenai/longformer-base-4096"),
        ModelConfig(source="convert_bert", name_or_path="some-org/some-bert"),
    ],
)
def test_hub_id_offline_is_one_clear_line(cfg, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError) as err:
        build_base_model(cfg, num_labels=2)
    assert err.value.field == "model.name_or_path"
    assert "could not load" in str(err.value) and "\n" not in str(err.value)


def test_missing_local_folder(tmp_path):
    with pytest.raises(InputError, match="existing model folder"):
        build_base_model(ModelConfig(name_or_path=str(tmp_path / "nope")), num_labels=2)
