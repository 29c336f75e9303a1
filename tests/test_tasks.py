"""The task registry (attnlens.tasks): every task's labels, readout, targets, metrics and showcase roles, against
independent references (scikit-learn's metrics, NumPy's correlation, closed-form toy models, IG's completeness)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import merged, tiny_longformer
from scipy import stats
from sklearn.metrics import mean_absolute_error, mean_squared_error

from attnlens.attribution.attnlrp import attnlrp
from attnlens.attribution.ig import attribute_example, baseline_ids, prepare_inputs
from attnlens.config import DataConfig, SyntheticConfig, load_schema, read_config_file, validate_config
from attnlens.corpus import COUNTED_FIELD, generate_regression_corpus
from attnlens.data import prepare_dataset
from attnlens.errors import InputError
from attnlens.selection import outcome_text, role_left_out, roles_left_out, select_examples
from attnlens.tasks import CLASSIFICATION, REGISTRY, REGRESSION, Task, get_task, task_names, task_of

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


def test_the_registry_names_each_task_once_and_the_schema_lists_them():
    assert task_names() == ["classification", "regression"]
    assert load_schema()["properties"]["data"]["properties"]["task"]["enum"] == task_names()
    assert get_task(None) is CLASSIFICATION and get_task("regression") is REGRESSION
    with pytest.raises(InputError, match="expected one of"):
        get_task("ranking")
    for task in REGISTRY.values():  # a model's problem_type names its task
        assert task_of({"problem_type": task.problem_type}) is task
    assert task_of({"problem_type": None}) is CLASSIFICATION  # a classifier saved without one
    with pytest.raises(InputError, match="problem_type"):
        task_of({"problem_type": "multi_label_classification"})


def test_the_readout_is_the_same_in_torch_and_numpy():
    """What the methods explain (torch, float32) and what predict writes (NumPy, float64) are one function: within
    float32 rounding of a softmax of logits ≲ 10 (≈ 1e-7 relative; 1e-6 absolute on values ≲ 10)."""
    logits = torch.tensor([[0.5, -1.25, 2.0], [3.0, 3.0, -2.0]])
    for task, x in ((CLASSIFICATION, logits), (REGRESSION, logits[:, :1])):
        np.testing.assert_allclose(task.readout(x).numpy(), task.outputs(x.numpy()), rtol=0, atol=1e-6)
    np.testing.assert_allclose(CLASSIFICATION.outputs(logits.numpy()).sum(1), 1, rtol=0, atol=1e-15)
    assert REGRESSION.readout(logits[:, :1]) is not None and torch.equal(
        REGRESSION.readout(logits[:, :1]), logits[:, :1]
    )
    half = logits.half()
    assert CLASSIFICATION.readout(half).dtype == torch.float32 and REGRESSION.readout(half).dtype == torch.float32


def test_regression_metrics_match_scikit_learn_and_numpy():
    rng = np.random.default_rng(0)
    y = rng.normal(size=40)
    v = y + rng.normal(scale=0.5, size=40)
    got = REGRESSION.metrics(y, v[:, None].astype(np.float32))
    v32 = v.astype(np.float32).astype(np.float64)  # the logits are float32
    assert got["mse"] == pytest.approx(mean_squared_error(y, v32), rel=1e-12)  # the same float64 sums
    assert got["mae"] == pytest.approx(mean_absolute_error(y, v32), rel=1e-12)
    assert got["rmse"] == pytest.approx(np.sqrt(got["mse"]), rel=1e-15)
    assert got["pearson"] == pytest.approx(np.corrcoef(v32, y)[0, 1], rel=1e-12)  # two float64 formulas: 1e-12
    ranks = stats.rankdata(v32), stats.rankdata(y)
    assert got["spearman"] == pytest.approx(np.corrcoef(*ranks)[0, 1], rel=1e-12)  # Pearson of the ranks
    constant = REGRESSION.metrics(np.ones(5), np.ones((5, 1), dtype=np.float32))
    assert constant["mse"] == 0 and constant["pearson"] is None and constant["spearman"] is None


def _regression_frame(labels, preds):
    logits = np.asarray(preds, dtype=np.float32)[:, None]
    examples = pd.DataFrame({"example_id": [f"e{i}" for i in range(len(labels))], "label": labels})
    return REGRESSION.predictions(examples, logits)


def test_regression_roles_name_the_largest_errors():
    frame = _regression_frame([1.0, 2.0, 3.0, 4.0], [1.5, 1.0, 3.1, 6.0])
    chosen = {e["role"]: e for e in select_examples(frame, seed=0, task=REGRESSION)}
    assert chosen["largest_overestimate"]["example_id"] == "e3"  # +2.0
    assert chosen["largest_underestimate"]["example_id"] == "e1"  # −1.0
    assert chosen["closest"]["example_id"] == "e2"  # 0.1
    assert chosen["highest_predicted"]["example_id"] == "e3"
    assert chosen["random"]["example_id"] in {"e0", "e1", "e2", "e3"}
    assert chosen["closest"]["value"] == [pytest.approx(3.1, rel=1e-6)]  # float32 of the logit
    assert outcome_text(chosen["closest"]) == "label 3, predicted 3.1"
    # nobody under: the role is left out and says why
    frame = _regression_frame([1.0, 2.0], [1.5, 2.5])
    assert roles_left_out(frame, seed=0, task=REGRESSION) == [
        {"role": "largest_underestimate", "why": "no test example is predicted below its true value"}
    ]
    selection = {"task": "regression", "examples": select_examples(frame, 0, task=REGRESSION), "left_out": []}
    assert role_left_out(selection, "most_confident_1") == (
        "most_confident_1 is a role of classification runs, this run is a regression"
    )
    assert role_left_out({"examples": [], "left_out": []}, "closest") == (
        "closest is a role of regression runs, this run is a classification"
    )


def test_regression_labels_are_finite_numbers_and_each_bad_row_is_named():
    ids = pd.Series(["a", "b", "c"])
    got, names = REGRESSION.resolve_labels(pd.Series(["1.5", " 2 ", "-3e1"]), ids, None, "d.csv", "score")
    assert got.tolist() == [1.5, 2.0, -30.0] and names == ()  # no classes: its one output is the value
    for bad, message in ((["1", "", "2"], "row 2 \\(example 'b'\\) has an empty cell"),
                         (["1", "x", "2"], "row 2 \\(example 'b'\\) has 'x'"),
                         ([1.0, np.inf, 2.0], "row 2 \\(example 'b'\\) has inf")):  # fmt: skip
        with pytest.raises(InputError, match=message):
            REGRESSION.resolve_labels(pd.Series(bad), ids, None, "d.csv", "score")
    with pytest.raises(InputError, match="booleans"):
        REGRESSION.check_labels(pd.Series([True, False]), (), "d.csv", "score")
    with pytest.raises(InputError, match="vary in the training split"):
        REGRESSION.check_splits(np.array([2.0, 2.0, 5.0]), np.array([True, True, False]), (), "d.csv", "score")


def test_regression_strata_are_quartiles_of_the_target():
    values = np.random.default_rng(1).normal(size=40)
    strata = REGRESSION.strata(values, "d.csv", "score")
    assert np.bincount(strata).tolist() == [10, 10, 10, 10]
    assert all(values[strata == k].max() < values[strata == k + 1].min() for k in range(3))


def test_the_regression_corpus_counts_its_planted_phrases():
    cfg = SyntheticConfig(n_documents=20, min_words=30, max_words=60, n_evidence=4, n_distractors=2, label_noise=0)
    corpus = generate_regression_corpus(cfg, seed=3)
    counted = corpus.rationales[corpus.rationales["phrase_label"] == COUNTED_FIELD].groupby("example_id").size()
    target = corpus.documents.set_index("example_id")["label"]
    assert (counted.reindex(target.index, fill_value=0) == target).all()  # the target is the count, exactly
    assert sorted(target.value_counts().tolist()) == [4, 4, 4, 4, 4]  # 0 … 4, spread evenly
    assert (corpus.rationales["evidence"] == (corpus.rationales["phrase_label"] == COUNTED_FIELD)).all()
    for _, r in corpus.rationales.iterrows():
        text = corpus.documents.set_index("example_id").loc[r.example_id, "text"]
        assert text[r.char_start : r.char_end] == r.phrase
    noisy = generate_regression_corpus(SyntheticConfig(**{**cfg.to_dict(), "label_noise": 0.3}), seed=3)
    assert 0.1 < float((noisy.documents["label"] - target.to_numpy()).std()) < 0.5  # σ = 0.3 over 20 draws
    assert noisy.documents["text"].tolist() == corpus.documents["text"].tolist()  # the noise comes last


def test_a_regression_dataset_from_a_file_and_from_the_generator(tmp_path):
    path = tmp_path / "scores.csv"
    pd.DataFrame({"text": [f"document number {i}" for i in range(16)], "score": np.linspace(0, 3, 16)}).to_csv(
        path, index=False
    )
    frames, _, manifest = prepare_dataset(DataConfig(task="regression", source="file", path=str(path),
                                                     label_column="score", test_fraction=0.25))  # fmt: skip
    assert manifest["task"] == "regression" and manifest["classes"] == []
    assert frames["train"]["label"].dtype == np.float64 and len(frames["test"]) == 4  # one per quartile
    assert manifest["counts"]["test"]["n"] == 4 and manifest["counts"]["train"]["min"] == 0.0
    frames, rationales, manifest = prepare_dataset(
        DataConfig(task="regression", synthetic=SyntheticConfig(n_documents=12, min_words=30, max_words=50))
    )
    assert manifest["task"] == "regression" and len(rationales) and frames["test"]["label"].dtype == np.float64


def test_the_config_refuses_what_a_regression_cannot_mean():
    base = {"data": {"task": "regression"}, "studies": ["classification"]}
    validate_config({**base})
    for extra, key in (({"data": {"task": "regression", "source": "folders", "path": "x", "classes": ["a", "b"]}},
                        "data.source"),
                       ({"data": {"task": "regression", "source": "file", "path": "x", "classes": ["a"]}},
                        "data.classes"),
                       ({"attribution": {"target": "class_1"}}, "attribution.target"),
                       ({"studies": ["classification", "topology"]}, "studies")):  # fmt: skip
        with pytest.raises(InputError, match=key):
            validate_config({**base, **extra})


def _regression_model():
    model = tiny_longformer(num_labels=1, double=True, seed=4)
    model.config.problem_type = "regression"
    return model


class _Vocab:
    """What prepare_inputs reads of a tokenizer: the structural ids (CLS 0, PAD 1, SEP 2)."""

    pad_token_id, cls_token_id, sep_token_id = 1, 0, 2

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [0, 2]}


def test_ig_of_a_regression_explains_the_value_completely():
    """F is the predicted value: IG's scores add up to F(x) − F(x′) (completeness; float64 model, 64 Gauss–Legendre
    steps: the quadrature error of a smooth path, ≲ 1e-4 of the gap) and the end points are the model's own output."""
    model = _regression_model()
    assert task_of(model.config) is REGRESSION
    ids = [0, 7, 12, 9, 30, 2]
    inputs = prepare_inputs(model, _Vocab(), ids)
    res = attribute_example(model, inputs, 0, min_steps=64, max_steps=64, tolerance=None, internal_batch_size=64)
    with torch.no_grad():
        value = model(input_ids=inputs.input_ids, **inputs.forward_kwargs()).logits[0, 0].item()
        base = model(input_ids=baseline_ids(inputs.input_ids, {0, 2}, 1), **inputs.forward_kwargs()).logits[0, 0]
    assert res.probs[0] == pytest.approx(value, rel=1e-12) and res.gap == pytest.approx(value - base.item(), rel=1e-9)
    assert abs(res.scores.sum() - res.gap) <= 1e-4 * abs(res.gap)


def test_attnlrp_of_a_regression_explains_its_one_logit():
    """AttnLRP explains the logit, which for a regression is the value F itself."""
    model = _regression_model()
    inputs = prepare_inputs(model, _Vocab(), [0, 5, 8, 13, 2])
    relevance = attnlrp(model, inputs, 0)
    with torch.no_grad():
        value = model(input_ids=inputs.input_ids, **inputs.forward_kwargs()).logits[0, 0].item()
    assert relevance.explained == pytest.approx(value, rel=1e-12)
    assert relevance.delta == pytest.approx(value - relevance.scores.sum(), rel=1e-9, abs=1e-12)


def test_the_regression_overlay_validates_on_the_default(root):
    """``--configfile config/regression.yaml`` over config/config.yaml is a valid configuration of the task."""
    config = merged(read_config_file(root / "config/config.yaml"), read_config_file(root / "config/regression.yaml"))
    config = validate_config(config)
    assert config["data"]["task"] == "regression" and "topology" not in config["studies"]


def test_an_incomplete_task_cannot_be_registered():
    """A task lacking one of the seam's methods fails where it is declared, not in a stage: it cannot be
    instantiated, so it cannot be registered."""

    class Bare(Task):
        name = "bare"

    with pytest.raises(TypeError, match="abstract"):
        Bare()

    class Graded(type(REGRESSION)):  # a complete task instantiates (it is not registered here)
        name = "graded"

    assert Graded().name == "graded" and "graded" not in REGISTRY
