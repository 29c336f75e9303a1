"""The task registry (attnlens.tasks): every task's labels, readout, targets, metrics and showcase roles, against
independent references (scikit-learn's metrics, NumPy's correlation, closed-form toy models, IG's completeness)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats
from sklearn.metrics import f1_score, hamming_loss, mean_absolute_error, mean_squared_error, roc_auc_score

from attnlens.attribution.ig import attribute_example, baseline_ids, prepare_inputs
from attnlens.attribution.lrp import attnlrp
from attnlens.classifier.selection import outcome_text, role_left_out, roles_left_out, select_examples
from attnlens.data.corpus import (
    CO_OCCURRENCE,
    COUNTED_FIELD,
    GENERATORS,
    TOPIC_NAMES,
    generate_multilabel_corpus,
    generate_regression_corpus,
)
from attnlens.data.sources import compute_split, prepare_dataset
from attnlens.errors import InputError
from attnlens.pipeline.config import DataConfig, SyntheticConfig, load_schema, read_config_file, validate_config
from attnlens.tasks import (
    CLASSIFICATION,
    MULTILABEL,
    REGISTRY,
    REGRESSION,
    Task,
    get_task,
    task_names,
    task_of,
)
from tests.support.helpers import merged
from tests.support.tiny_models import tiny_longformer

pytestmark = pytest.mark.numerics  # run again under the portable CPU kernels (test_kernel_sets.py)


def test_the_registry_names_each_task_once_and_the_schema_lists_them():
    assert task_names() == ["classification", "regression", "multilabel", "qa", "generation"]
    assert load_schema()["properties"]["data"]["properties"]["task"]["enum"] == task_names()
    assert get_task(None) is CLASSIFICATION and get_task("regression") is REGRESSION
    with pytest.raises(InputError, match="expected one of"):
        get_task("ranking")
    for task in REGISTRY.values():  # a model's problem_type names its task
        assert task_of({"problem_type": task.problem_type}) is task
    assert task_of({"problem_type": None}) is CLASSIFICATION  # a classifier saved without one
    with pytest.raises(InputError, match="problem_type"):
        task_of({"problem_type": "ranking"})


def test_the_readout_is_the_same_in_torch_and_numpy():
    """What the methods explain (torch, float32) and what predict writes (NumPy, float64) are one function: within
    float32 rounding of a softmax of logits ≲ 10 (≈ 1e-7 relative; 1e-6 absolute on values ≲ 10)."""
    logits = torch.tensor([[0.5, -1.25, 2.0], [3.0, 3.0, -2.0]])
    for task, x in ((CLASSIFICATION, logits), (REGRESSION, logits[:, :1]), (MULTILABEL, logits * 20)):
        np.testing.assert_allclose(task.readout(x).numpy(), task.outputs(x.numpy()), rtol=0, atol=1e-6)
    np.testing.assert_allclose(CLASSIFICATION.outputs(logits.numpy()).sum(1), 1, rtol=0, atol=1e-15)
    assert REGRESSION.readout(logits[:, :1]) is not None and torch.equal(
        REGRESSION.readout(logits[:, :1]), logits[:, :1]
    )
    half = logits.half()
    headed = [task for task in REGISTRY.values() if "classification" in task.studies]
    assert all(task.readout(half).dtype == torch.float32 for task in headed)


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
    for bad, message in (
        (["1", "", "2"], "row 2 \\(example 'b'\\) has an empty cell"),
        (["1", "x", "2"], "row 2 \\(example 'b'\\) has 'x'"),
        ([1.0, np.inf, 2.0], "row 2 \\(example 'b'\\) has inf"),
    ):
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
    frames, _, manifest = prepare_dataset(
        DataConfig(task="regression", source="file", path=str(path), label_column="score", test_fraction=0.25)
    )
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
    for extra, key in (
        ({"data": {"task": "regression", "source": "folders", "path": "x", "classes": ["a", "b"]}}, "data.source"),
        ({"data": {"task": "regression", "source": "file", "path": "x", "classes": ["a"]}}, "data.classes"),
        ({"attribution": {"target": "class_1"}}, "attribution.target"),
        ({"studies": ["classification", "topology"]}, "studies"),
    ):
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


def test_a_task_is_one_registration_where_it_is_defined():
    """docs/tasks.md, "Adding a task", run: a task subclass registered where it is declared, and its corpus
    generator registered under its name, is a value of ``data.task`` at once (the schema reads the registry), and
    the data stage prepares it without a line of its own; unregistered, it is refused again with the choices."""

    class Graded(type(REGRESSION)):
        name = "graded"
        explains = "the predicted grade"

    REGISTRY.register(Graded())
    GENERATORS.register(generate_regression_corpus, "graded")
    try:
        config = validate_config({"data": {"task": "graded"}, "studies": ["classification"]})
        assert config["data"]["task"] == "graded" and get_task("graded").explains == "the predicted grade"
        data = DataConfig(task="graded", synthetic=SyntheticConfig(n_documents=12, min_words=30, max_words=50))
        frames, _, manifest = prepare_dataset(data)
        assert manifest["task"] == "graded" and frames["test"]["label"].dtype == np.float64
    finally:
        REGISTRY.unregister("graded")
        GENERATORS.unregister("graded")
    with pytest.raises(InputError, match=r"data\.task: .*one of \[.*'regression'.*\]\), got 'graded'"):
        validate_config({"data": {"task": "graded"}, "studies": ["classification"]})


# --- multi-label ---------------------------------------------------------------------------------------------


def test_multilabel_metrics_match_scikit_learn():
    """Micro/macro F1, Hamming loss, subset accuracy and per-label AUROC against scikit-learn (the same counts;
    AUROC by ranks here and by the trapezoid of the ROC curve there: two float64 sums, 1e-12)."""
    rng = np.random.default_rng(5)
    y = (rng.random((60, 4)) < [0.5, 0.3, 0.2, 0.6]).astype(np.int64)
    logits = (2.0 * y - 1 + rng.normal(scale=1.5, size=y.shape)).astype(np.float32)
    logits[:5, 2] = logits[5:10, 2]  # ties across the classes of a label: AUROC counts them one half
    got = MULTILABEL.metrics(list(y), logits)
    pred = MULTILABEL.outputs(logits) >= 0.5
    assert got["micro_f1"] == pytest.approx(f1_score(y, pred, average="micro"), rel=1e-12)
    assert got["macro_f1"] == pytest.approx(f1_score(y, pred, average="macro"), rel=1e-12)
    assert got["hamming_loss"] == pytest.approx(hamming_loss(y, pred), rel=1e-12)
    assert got["subset_accuracy"] == pytest.approx(float((pred == y).all(1).mean()), rel=1e-12)
    for k in range(4):
        assert got["per_label"][str(k)]["auroc"] == pytest.approx(roc_auc_score(y[:, k], logits[:, k]), rel=1e-12)
    assert got["macro_auroc"] == pytest.approx(roc_auc_score(y, logits, average="macro"), rel=1e-12)
    y[:, 1] = 0  # a label with no positive test example: AUROC undefined, said, and left out of the mean
    got = MULTILABEL.metrics(list(y), logits)
    assert got["per_label"]["1"]["auroc"] is None and "no example" in got["per_label"]["1"]["note"]
    aurocs = [roc_auc_score(y[:, k], logits[:, k]) for k in (0, 2, 3)]
    assert got["macro_auroc"] == pytest.approx(np.mean(aurocs), rel=1e-12)


def test_multilabel_targets_are_the_explained_labels_likeliest_first():
    p = np.array([0.7, 0.2, 0.9, 0.5])
    assert MULTILABEL.targets("predicted", None, p) == (2, 0, 3)  # p ≥ 0.5
    assert MULTILABEL.targets("true", np.array([1, 1, 0, 0]), p) == (0, 1)
    assert MULTILABEL.targets("all", None, p) == (2, 0, 3, 1)
    assert MULTILABEL.targets("predicted", None, np.array([0.1, 0.3, 0.2, 0.05])) == (1,)  # none: the likeliest
    assert MULTILABEL.targets("true", np.array([0, 0, 0, 0]), p) == (2,)
    with pytest.raises(InputError, match=r"attribution\.target"):
        MULTILABEL.targets("class_1", None, p)
    assert CLASSIFICATION.targets("predicted", 0, np.array([0.2, 0.8])) == (1,)
    assert REGRESSION.targets("true", 2.5, np.array([3.0])) == (0,)


def test_multilabel_labels_from_lists_names_pipes_and_indices():
    ids = pd.Series(["a", "b", "c"])
    for cells in (pd.Series([["tort", "contract"], [], ["crime"]]), pd.Series(["tort|contract", "[]", " crime "])):
        got, names = MULTILABEL.resolve_labels(cells, ids, None, "d.jsonl", "labels")
        assert names == ("contract", "crime", "tort")  # the names found, sorted
        assert [v.tolist() for v in got] == [[1, 0, 1], [0, 0, 0], [0, 1, 0]]
    got, names = MULTILABEL.resolve_labels(pd.Series([[0, 2], [1], [3]]), ids, None, "d.jsonl", "labels")
    assert names == ("0", "1", "2", "3") and got.iloc[0].tolist() == [1, 0, 1, 0]
    got, names = MULTILABEL.resolve_labels(pd.Series(["b", "a|b", "a"]), ids, ["b", "a"], "d.csv", "labels")
    assert names == ("b", "a") and [v.tolist() for v in got] == [[1, 0], [1, 1], [0, 1]]  # data.classes' order
    for cells, classes, message in (
        (["tort", "tax", "crime"], ["tort", "crime"], "row 2 \\(example 'b'\\) has the unknown label 'tax'"),
        ([["tort"], np.nan, ["crime"]], None, "row 2 \\(example 'b'\\) has an empty cell"),
        ([[0], [5], [1]], ["x", "y"], "row 2 \\(example 'b'\\) has 5"),
        ([["tort"], [1], ["crime"]], None, "every label a name or every label an index"),
    ):
        with pytest.raises(InputError, match=message):
            MULTILABEL.resolve_labels(pd.Series(cells), ids, classes, "d.csv", "labels")


def test_multilabel_split_honours_the_test_fraction():
    """By rarest label, the split keeps data.test_fraction (per stratum, rounded) where one stratum per label set
    rounded each small set up to a test document: 160 documents of the generator, 20 %: 32."""
    corpus = generate_multilabel_corpus(SyntheticConfig(n_documents=160, min_words=20, max_words=30), seed=42)
    labels = MULTILABEL.check_labels(corpus.documents["label"], TOPIC_NAMES, "d", "label")
    strata = MULTILABEL.strata(labels, "d", "label")
    is_test = compute_split(strata, 0.2, 42)
    assert abs(int(is_test.sum()) - 32) <= len(set(strata.tolist()))  # one rounding per stratum at most
    hot = MULTILABEL.hot(labels)
    assert (hot[is_test].sum(0) > 0).all() and (hot[~is_test].sum(0) > 0).all()


def test_multilabel_splits_keep_every_label_on_both_sides():
    hot = np.array([[1, 0], [1, 0], [0, 1], [0, 1], [1, 1], [1, 1], [1, 0], [0, 0]])
    labels = MULTILABEL.check_labels(pd.Series(list(hot)), ("a", "b"), "d", "labels")
    strata = MULTILABEL.strata(labels, "d", "labels")
    # label b is the rarer (4 documents against 5): a document with b is in b's stratum; no label: stratum K = 2
    assert strata.tolist() == [0, 0, 1, 1, 1, 1, 0, 2]
    with pytest.raises(InputError, match="label 1 \\('b'\\) is on no training example"):
        MULTILABEL.check_splits(labels, np.array([1, 1, 0, 0, 0, 0, 1, 1], bool), ("a", "b"), "d", "labels")
    with pytest.raises(InputError, match="label 0 \\('a'\\) is on all of them"):
        MULTILABEL.check_splits(labels, np.array([1, 1, 0, 0, 1, 1, 1, 0], bool), ("a", "b"), "d", "labels")
    with pytest.raises(InputError, match="0/1 vector"):
        MULTILABEL.check_labels(pd.Series([[1, 0, 1]]), ("a", "b"), "d", "labels")


def test_multilabel_roles_name_a_missed_and_a_false_label():
    examples = pd.DataFrame(
        {
            "example_id": ["e0", "e1", "e2", "e3"],
            "label": [np.array(v) for v in ([1, 0, 0], [1, 1, 0], [0, 0, 1], [0, 1, 0])],
        }
    )
    logits = np.array([[3.0, -2.0, -1.0], [2.0, -1.5, -3.0], [-2.0, 1.0, 2.5], [-1.0, 2.0, -2.0]], dtype=np.float32)
    frame = MULTILABEL.predictions(examples, logits)
    chosen = {e["role"]: e for e in select_examples(frame, seed=0, task=MULTILABEL)}
    assert chosen["missed_label"]["example_id"] == "e1"  # label 1 of e1: p = σ(−1.5), the only miss
    assert chosen["false_label"]["example_id"] == "e2"  # label 1 of e2: p = σ(1), the only false label
    assert chosen["most_confident_2"]["example_id"] == "e2"
    assert chosen["random_exact"]["example_id"] in {"e0", "e3"}
    assert chosen["missed_label"]["label"] == [1, 1, 0] and chosen["missed_label"]["pred"] == [1, 0, 0]
    assert outcome_text(chosen["missed_label"]) == "label {0, 1}, predicted {0}"
    outcome = MULTILABEL.outcome([1, 1, 0], MULTILABEL.outputs(logits[1:2])[0], 0, ("a", "b", "c"))
    assert (outcome.label, outcome.prediction, outcome.explained) == ("a, b", "a", "a")
    # the labels' names, where the classifier has them: in the rules, the notes and the metrics, never an index
    names = ("common", "medium", "rare")
    rules = {role: rule for role, _, rule in MULTILABEL.roles(frame, 0, names)}
    assert rules["missed_label"].endswith("(label medium)") and rules["most_confident_2"].startswith("label rare ")
    none = roles_left_out(frame.assign(probs=[np.array([0.9, 0.1, 0.1])] * 4), 0, MULTILABEL, names)
    assert {"role": "most_confident_2", "why": "no test example is predicted to have label rare"} in none
    per_label = MULTILABEL.metrics(examples["label"].to_numpy(), logits, names=names)["per_label"]
    assert list(per_label) == list(names)
    assert list(MULTILABEL.metrics(examples["label"].to_numpy(), logits)["per_label"]) == ["0", "1", "2"]


def test_the_multilabel_corpus_plants_evidence_for_each_label_at_set_rates():
    cfg = SyntheticConfig(n_documents=400, min_words=30, max_words=40, n_evidence=4, n_distractors=2, label_noise=0)
    corpus = generate_multilabel_corpus(cfg, seed=3)
    hot = np.stack(corpus.documents["label"].to_numpy())
    assert corpus.classes == TOPIC_NAMES and hot.shape == (400, 4) and (hot.sum(1) >= 1).all()
    r = corpus.rationales
    counts = (
        r.groupby(["example_id", "phrase_label"])
        .size()
        .unstack(fill_value=0)
        .reindex(corpus.documents["example_id"], fill_value=0)
        .to_numpy()
    )
    assert (counts[hot == 1] >= 2).all() and (counts[hot == 1] <= 4).all()  # ceil(4/2) … 4 phrases per label
    assert (counts[hot == 0] <= 1).all()  # a distractor: one mention at most
    pairs = zip(r["example_id"], r["phrase_label"], strict=True)
    assert (r["evidence"] == [bool(hot[int(e[3:]), k]) for e, k in pairs]).all()
    # co-occurrence: each label leads a quarter of the documents and joins a lead a with CO_OCCURRENCE[a], so
    # P(a and b) = Σ_lead ¼·P(a | lead)·P(b | lead) (labels join independently); over 400 documents each pair's
    # rate is within 4 binomial standard deviations (4·√(p(1 − p)/400) ≤ 0.09) of it
    given = np.where(np.eye(4, dtype=bool), 1.0, CO_OCCURRENCE)  # P(label | lead), row: lead
    expected = given.T @ given / 4
    np.fill_diagonal(expected, given.mean(0))  # P(a) itself
    seen = hot.T @ hot / len(hot)
    assert (np.abs(seen - expected) <= 4 * np.sqrt(expected * (1 - expected) / len(hot))).all()
    assert expected[0, 1] > 3 * expected[0, 2]  # same-field topics co-occur, cross-field ones rarely
    for _, row in r.head(50).iterrows():
        text = corpus.documents.set_index("example_id").loc[row.example_id, "text"]
        assert text[row.char_start : row.char_end] == row.phrase
    noisy = generate_multilabel_corpus(SyntheticConfig(**{**cfg.to_dict(), "label_noise": 0.1}), seed=3)
    flips = np.stack(noisy.documents["label"].to_numpy()) != hot
    assert 0.06 < flips.mean() < 0.14 and len(noisy.flipped) == int(flips.any(1).sum())  # 1 600 draws of p = 0.1


def test_a_multilabel_dataset_from_files_and_from_the_generator(tmp_path):
    texts = [f"document number {i}" for i in range(16)]
    sets = [["a"], ["b"], ["a", "b"], ["c"]] * 4
    pd.DataFrame({"text": texts, "tags": ["|".join(s) for s in sets]}).to_csv(tmp_path / "d.csv", index=False)
    pd.DataFrame({"text": texts, "tags": sets}).to_json(tmp_path / "d.jsonl", orient="records", lines=True)
    for name in ("d.csv", "d.jsonl"):
        frames, _, manifest = prepare_dataset(
            DataConfig(
                task="multilabel", source="file", path=str(tmp_path / name), label_column="tags", test_fraction=0.25
            )
        )
        assert manifest["task"] == "multilabel" and manifest["classes"] == ["a", "b", "c"]
        assert len(frames["test"]) == 4 and manifest["counts"]["train"]["n"] == 12
        assert {tuple(e["label"]) for e in manifest["examples"]} == {(1, 0, 0), (0, 1, 0), (1, 1, 0), (0, 0, 1)}
    wide = pd.DataFrame(
        {
            "text": texts,
            "A": [int("a" in s) for s in sets],
            "B": [s == ["b"] or s == ["a", "b"] for s in sets],
            "C": [str(int("c" in s)) for s in sets],
        }
    )  # 0/1, booleans, "0"/"1"
    wide.to_csv(tmp_path / "wide.csv", index=False)
    frames, _, manifest = prepare_dataset(
        DataConfig(
            task="multilabel",
            source="file",
            path=str(tmp_path / "wide.csv"),
            label_columns=["A", "B", "C"],
            test_fraction=0.25,
        )
    )
    assert manifest["classes"] == ["A", "B", "C"]
    assert {tuple(e["label"]) for e in manifest["examples"]} == {(1, 0, 0), (0, 1, 0), (1, 1, 0), (0, 0, 1)}
    wide["B"] = wide["B"].astype(object)
    wide.loc[5, "B"] = "yes"
    wide.to_csv(tmp_path / "wide.csv", index=False)
    with pytest.raises(InputError, match=r"B: expected 0 or 1 .* row 6 has 'yes'"):
        prepare_dataset(
            DataConfig(task="multilabel", source="file", path=str(tmp_path / "wide.csv"), label_columns=["A", "B", "C"])
        )
    with pytest.raises(InputError, match=r"data\.label_columns"):
        validate_config(
            {"data": {"task": "classification", "source": "file", "path": "x.csv", "label_columns": ["A", "B"]}}
        )
    frames, rationales, manifest = prepare_dataset(
        DataConfig(task="multilabel", synthetic=SyntheticConfig(n_documents=24, min_words=30, max_words=50))
    )
    assert manifest["classes"] == list(TOPIC_NAMES) and len(rationales)
    assert all(len(v) == 4 for v in frames["test"]["label"])


def test_the_config_refuses_what_a_multilabel_run_cannot_mean():
    base = {"data": {"task": "multilabel"}, "studies": ["classification"]}
    validate_config({**base})
    for extra, key in (
        ({"attribution": {"target": "class_1"}}, "attribution.target"),
        ({"studies": ["classification", "topology"]}, "studies"),
    ):
        with pytest.raises(InputError, match=key):
            validate_config({**base, **extra})


def _multilabel_model():
    model = tiny_longformer(num_labels=3, double=True, seed=6)
    model.config.problem_type = "multi_label_classification"
    return model


def test_ig_and_attnlrp_of_each_label_explain_that_label():
    """Each label's explanation is of its own sigmoid: IG adds up to σ(z_k(x)) − σ(z_k(x′)) (completeness, float64,
    64 Gauss–Legendre steps: ≲ 1e-4 of the gap), and AttnLRP conserves the label's logit z_k; different labels of
    one document get different explanations."""
    model = _multilabel_model()
    assert task_of(model.config) is MULTILABEL
    inputs = prepare_inputs(model, _Vocab(), [0, 7, 12, 9, 30, 2])
    with torch.no_grad():
        z = model(input_ids=inputs.input_ids, **inputs.forward_kwargs()).logits[0]
    scores = []
    for k in range(3):
        res = attribute_example(model, inputs, k, min_steps=64, max_steps=64, tolerance=None, internal_batch_size=64)
        assert res.probs[k] == pytest.approx(torch.sigmoid(z[k]).item(), rel=1e-12)
        assert abs(res.scores.sum() - res.gap) <= 1e-4 * abs(res.gap)
        relevance = attnlrp(model, inputs, k)
        assert relevance.explained == pytest.approx(z[k].item(), rel=1e-12)
        scores.append(res.scores)
    assert not np.allclose(scores[0], scores[1])
