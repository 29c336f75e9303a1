import numpy as np
import pandas as pd
import torch

from attnlens.config import TrainConfig
from attnlens.train import train_classifier


def _data(n):
    rng = np.random.default_rng(0)
    words = {0: "compiler type lambda syntax", 1: "neural learning reward gradient"}
    rows = []
    for i in range(n):
        y = i % 2
        filler = " ".join(rng.choice(["the", "of", "study", "we", "results"], 20))
        rows.append({"example_id": f"t{i}", "text": f"{filler} {words[y]} {filler}", "label": y})
    return pd.DataFrame(rows)


def _train(model, tokenizer, **kw):
    cfg = TrainConfig(epochs=2, lr=1e-3, batch_size=2, gradient_accumulation_steps=2, eval_batch_size=4, **kw)
    return train_classifier(model, tokenizer, _data(16), _data(6), cfg)


def test_training_is_seeded_and_reported(tiny_classifier):
    from copy import deepcopy

    model, tokenizer = tiny_classifier
    start = deepcopy(model.state_dict())
    a, metrics = _train(deepcopy(model), tokenizer)
    b, _ = _train(deepcopy(model), tokenizer)
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key
    assert any(not torch.equal(v, start[k]) for k, v in a.state_dict().items())
    assert [e["epoch"] for e in metrics["epochs"]] == [1, 2]
    assert {"train_loss", "eval_loss", "accuracy", "macro_f1", "seconds"} <= set(metrics["epochs"][0])
    assert metrics["optimizer_steps"] == 8 and metrics["mixed_precision"] == "fp32"
    c, _ = _train(deepcopy(model), tokenizer, seed=43)
    assert not torch.equal(c.classifier.out_proj.weight, a.classifier.out_proj.weight)


def test_gradient_checkpointing_gives_the_same_model(tiny_classifier):
    from copy import deepcopy

    model, tokenizer = tiny_classifier
    a, _ = _train(deepcopy(model), tokenizer, gradient_checkpointing=False)
    b, _ = _train(deepcopy(model), tokenizer, gradient_checkpointing=True)
    for key, value in a.state_dict().items():
        torch.testing.assert_close(value, b.state_dict()[key], rtol=1e-4, atol=1e-5)
