import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import accuracy_score, f1_score

from attnlens.errors import InputError
from attnlens.prediction import (
    classification_metrics,
    encode_texts,
    predict_logits,
    select_examples,
    showcased_once,
    softmax,
)


@pytest.mark.parametrize("seed", range(5))
def test_metrics_match_sklearn(seed):
    rng = np.random.default_rng(seed)
    k = 2 + seed % 3
    y, p = rng.integers(0, k, 50), rng.integers(0, k, 50)
    got = classification_metrics(y, p, k)
    assert got["accuracy"] == pytest.approx(accuracy_score(y, p))
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
    np.testing.assert_allclose(a, b, atol=1e-5)  # padding must not change a prediction
    assert np.allclose(softmax(a).sum(1), 1)


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
