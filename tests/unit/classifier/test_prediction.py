import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.metrics import accuracy_score, f1_score
from transformers import AutoTokenizer

from attnlens.classifier.prediction import (
    Encoded,
    _length_sorted_batches,
    encode_examples,
    encode_texts,
    predict_logits,
)
from attnlens.classifier.selection import role_left_out, roles_left_out, select_examples, showcased_once
from attnlens.errors import InputError
from attnlens.models.checkpoints import packaged_model_dir
from attnlens.models.longformer import LONGFORMER
from attnlens.tasks import CLASSIFICATION, QA, classification_metrics, softmax

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


@pytest.mark.parametrize("seed", range(5))
def test_metrics_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    k = 2 + seed % 3
    y, p = rng.integers(0, k, 50), rng.integers(0, k, 50)
    got = classification_metrics(y, p, k)
    assert got["accuracy"] == pytest.approx(accuracy_score(y, p))  # float64 ratios against sklearn: rounding
    assert got["macro_f1"] == pytest.approx(f1_score(y, p, average="macro", labels=list(range(k)), zero_division=0))


def _preds(probs1, labels):
    probs = np.stack([1 - np.asarray(probs1), np.asarray(probs1)], axis=1)
    return pd.DataFrame(
        {
            "example_id": [f"e{i}" for i in range(len(labels))],
            "label": labels,
            "pred": probs.argmax(1),
            "probs": list(probs),
        }
    )


def test_selection_rules():
    #            e0    e1    e2    e3    e4    e5    e6
    p1 = [0.9, 0.6, 0.2, 0.45, 0.99, 0.05, 0.3]
    labels = [0, 0, 1, 1, 1, 0, 0]
    sel = {s["role"]: s for s in select_examples(_preds(p1, labels), seed=0, extra_ids=["e3"])}
    assert sel["false_positive"]["example_id"] == "e0"  # most confident of the two false positives
    assert sel["false_negative"]["example_id"] == "e2"  # p0 = 0.8 beats e3's 0.55
    assert sel["most_confident_1"]["example_id"] == "e4"
    assert sel["most_confident_0"]["example_id"] == "e5"
    assert sel["random_correct_0"]["example_id"] in {"e5", "e6"}
    assert sel["random_correct_1"]["example_id"] == "e4"
    assert sel["fixed"]["example_id"] == "e3"
    again = {s["role"]: s for s in select_examples(_preds(p1, labels), seed=0)}
    assert again["random_correct_0"] == sel["random_correct_0"]


def test_selection_without_errors_and_unknown_extra():
    frame = _preds([0.1, 0.9], [0, 1])
    roles = [s["role"] for s in select_examples(frame, seed=1)]
    assert "false_positive" not in roles and "false_negative" not in roles
    with pytest.raises(InputError, match=r"predict\.extra_ids"):
        select_examples(frame, seed=1, extra_ids=["nope"])


def test_predict_logits_is_order_and_batch_invariant(tiny_classifier):
    model, tokenizer = tiny_classifier
    texts = ["short one", "a somewhat longer text " * 5, "mid size text here", "x " * 80]
    enc = encode_texts(tokenizer, texts)
    assert max(len(r) for r in enc.input_ids) == 64  # truncated to model_max_length
    a = predict_logits(model, enc, batch_size=1)
    b = predict_logits(model, enc, batch_size=3)
    # padding must not change a prediction: float32 logits ≲ 10 of the same tokens in batches of other widths
    # (matmuls of other shapes sum in another order): float32 rounding through the model, ≲ 1e-6
    np.testing.assert_allclose(a, b, atol=1e-5)
    assert np.allclose(softmax(a).sum(1), 1)  # float64 softmax of a row: rounding


def test_batches_are_a_function_of_the_data():
    """A document's padded batch shapes its float32 bits (tests/README.md, "Two runs on one machine"): batches are
    the documents sorted by length, ties in input order (a stable sort), never by anything a process varies."""
    enc = Encoded([[0] * n for n in (5, 3, 5, 3, 5, 4)], pad_token_id=1)
    assert _length_sorted_batches(enc, 4) == [[1, 3, 5, 0], [2, 4]]


def test_showcased_once_keeps_order_and_joins_roles():

    sel = [
        {"example_id": "b", "role": "false_positive"},
        {"example_id": "a", "role": "most_confident_1"},
        {"example_id": "b", "role": "random_correct_1"},
    ]
    out = showcased_once(sel)
    assert [(e["example_id"], e["role"], roles) for e, roles in out] == [
        ("b", "false_positive", "false_positive, random_correct_1"),
        ("a", "most_confident_1", "most_confident_1"),
    ]


def test_a_role_no_example_meets_is_left_out_not_filled_from_the_other_class():
    """Every test note predicted 1: no 'most confident 0', no correct 0, no false negative — and no stand-in."""
    frame = _preds([0.7, 0.8, 0.95], [0, 1, 1])
    sel = {s["role"]: s for s in select_examples(frame, seed=0)}
    assert set(sel) == {"false_positive", "most_confident_1", "random_correct_1"}
    assert all(s["pred"] == 1 for s in sel.values())
    assert roles_left_out(frame, seed=0) == [
        {"role": "false_negative", "why": "no test example has label 1 and is predicted 0"},
        {"role": "most_confident_0", "why": "no test example is predicted 0"},
        {"role": "random_correct_0", "why": "no test example of class 0 is predicted 0"},
    ]


def test_three_classes_one_never_predicted_one_rare():
    """K = 3, a 1 : 20 imbalance, class 1 never predicted: roles exist per class, binary roles do not."""
    rng = np.random.default_rng(0)
    labels = np.array([0] * 20 + [1] + [2] * 20)
    probs = rng.dirichlet([1, 1, 1], size=len(labels))
    probs[:, 1] = 0.0
    probs /= probs.sum(axis=1, keepdims=True)
    frame = pd.DataFrame(
        {
            "example_id": [f"e{i}" for i in range(len(labels))],
            "label": labels,
            "pred": probs.argmax(1),
            "probs": list(probs),
        }
    )
    chosen = select_examples(frame, seed=0)
    left = roles_left_out(frame, seed=0)
    roles = {s["role"] for s in chosen}
    assert roles == {"most_confident_0", "most_confident_2", "random_correct_0", "random_correct_2"}
    assert {r["role"] for r in left} == {"most_confident_1", "random_correct_1"}
    selection = {"examples": chosen, "left_out": left}
    assert role_left_out(selection, "most_confident_1") == "no test example is predicted 1"
    assert role_left_out(selection, "most_confident_3") == "the classifier has 3 classes, none numbered 3"
    assert "two-class tasks" in role_left_out(selection, "false_positive")
    assert role_left_out(selection, "most_confident_0") is None  # it exists: nothing to say
    assert role_left_out(selection, "e7") is None and role_left_out(selection, "mostconfident_1") is None


def test_metrics_count_every_class_and_say_when_f1_is_undefined():
    got = classification_metrics(np.array([0, 0, 0]), np.array([0, 1, 0]), 2)
    assert got["per_class"]["0"] == {"n_true": 3, "n_predicted": 2, "f1": pytest.approx(0.8), "note": ""}  # 2·⅔·1/(⅔+1)
    assert got["per_class"]["1"] == {
        "n_true": 0,
        "n_predicted": 1,
        "f1": 0.0,
        "note": "no test example of this class: recall is undefined, F1 counted as 0 in the macro mean",
    }


def test_examples_are_encoded_as_their_task_reads_them_with_its_global_tokens():
    tokenizer = AutoTokenizer.from_pretrained(str(packaged_model_dir()))
    examples = pd.DataFrame(
        {"question": ["who designed falcon?", "when?"], "text": ["falcon was designed by ada byrne. " * 20, "in 1971."]}
    )
    single = encode_examples(tokenizer, examples, CLASSIFICATION, max_length=32)
    assert single.input_ids == encode_texts(tokenizer, examples["text"], max_length=32).input_ids
    assert single.global_tokens is None and single.texts == list(examples["text"])
    pairs = encode_examples(tokenizer, examples, QA, max_length=32)
    first = tokenizer.convert_ids_to_tokens(pairs.input_ids[0])
    assert len(first) == 32 and first[:7] == ["[CLS]", "who", "designed", "falcon", "?", "[SEP]", "falcon"]
    assert first[-1] == "[SEP]"  # the context is what truncation cut, the question is whole
    assert pairs.global_tokens == [[0, 1, 2, 3, 4], [0, 1, 2]]  # "when ?" is two tokens
    # each token's characters are in the example's text, the context: a question's tokens have none
    for encoded in (single, pairs):
        for ids, offsets, inside, text in zip(
            encoded.input_ids, encoded.offsets, encoded.in_text, encoded.texts, strict=True
        ):
            for token, (a, b), mine in zip(tokenizer.convert_ids_to_tokens(ids), offsets, inside, strict=True):
                assert mine == (b > a) and (not mine or text[a:b].lower() == token.removeprefix("##"))
    assert pairs.in_text[0][:6].tolist() == [False] * 6 and pairs.in_text[0][6]
    batch = pairs.batch([1, 0], arch=LONGFORMER)  # a global-attention mask over the padded batch, in batch order
    expected = torch.zeros(2, 32, dtype=torch.long)
    expected[0, :3] = expected[1, :5] = 1
    assert torch.equal(batch["global_attention_mask"], expected)
    assert torch.equal(
        Encoded(pairs.input_ids, 0).batch([0], arch=LONGFORMER)["global_attention_mask"][0, :2], torch.tensor([1, 0])
    )  # without chosen tokens: CLS alone
