"""The generation study end to end (docs/studies.md): the `.test` configuration as a generation run — a Llama drawn
and trained from scratch for a few steps, the reference answers of three test questions explained by every answer
method, the leaderboard and the explorer — and what its artifacts must say.

One session run (``generation_run``): the smallest corpus and model that still split, train and explain, so that
the study adds about half a minute of CI (tests/README.md). Its few-step model answers nothing right, so the
reference answers are explained (``attribution.target: true``); the default's model and its greedy answers are
measured in docs/benchmarks.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import attnlens
from attnlens.attribution.artifacts import (
    ABLATION_COLUMNS,
    ANSWER_SCORE_COLUMNS,
    LEARNED_SCHEMA,
    load_answer_shards,
    load_head_weights,
)
from attnlens.attribution.datamodels import answer_masks, answer_scores
from attnlens.attribution.exact import every_mask
from attnlens.attribution.head_weights import learned_scores, source_features
from attnlens.attribution.methods import ANSWER, method_names
from attnlens.attribution.sanity_check import SANITY_SCHEMA
from attnlens.attribution.source_scores import answer_head_attention
from attnlens.errors import InputError
from attnlens.findings.statements import FAILS, PASSES
from attnlens.findings.verdicts import TOO_FEW
from attnlens.generation.ablation import ablation_log_probs, answer_token_log_probs
from attnlens.generation.answer_artifacts import RESPONSE_COLUMNS, response_sources
from attnlens.generation.answer_leaderboard import CEILING, EXACT
from attnlens.io import load_json, load_parquet
from attnlens.models.loading import load_causal_lm
from attnlens.pipeline.config import GenerationConfig, validate_config
from attnlens.stages.generation.generator import check_learned, run_generate_answers
from tests.support.helpers import (
    GUARD,
    ROOT,
    gpu_rules,
    local_env,
    merged,
    run_guarded,
    run_snakemake,
    tiny_config,
    write_config,
)
from tests.support.session_runs import session_run
from tests.support.task_runs import GENERATION_RUN

pytestmark = pytest.mark.workflow

#: The grid's seeds (``generation.train.seed`` of each run): the first run is built to the end, the second as far as
#: rule findings reads.
SEEDS = (0, 1)
RUNS = tuple(f"default__default__s{seed}" for seed in SEEDS)
#: The rules sharded over answers (``generation.n_shards``).
ANSWER_RULES = ("ablate_contexts", "explain_answers", "judge_answers")


@session_run("generation_run", seconds=55)
def _generation(work: Path) -> Path:
    """The `.test` configuration as a generation grid of two training seeds: the first run to the end of its study,
    the second as far as the findings read, and the findings (with the randomisation check of one answer)."""
    cfg = merged(tiny_config(ROOT), GENERATION_RUN)
    cfg["grid"] = {"seeds": list(SEEDS)}
    cfg["findings"] = {**cfg.get("findings", {}), "sanity_examples": 1}
    write_config(work, cfg)
    targets = [f"results/runs/{RUNS[0]}/manifest.json", "results/findings/findings.csv"]
    out = run_snakemake(
        ROOT, "--directory", str(work), "--cores", "1", "--show-failed-logs", *targets, timeout=GUARD["run"]
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return work


@pytest.fixture(scope="session")
def generation_grid(session_runs) -> Path:
    return session_runs.get("generation_run")


@pytest.fixture(scope="session")
def generation_run(generation_grid) -> Path:
    """The grid's first run, built to the end (the one-run layout of ``results/``)."""
    return generation_grid / "results/runs" / RUNS[0]


def _data(run: Path) -> Path:
    """The prepared dataset a run of the grid reads (its runs share it)."""
    return run.parents[1] / "datasets/default/data"


def _config(run: Path) -> GenerationConfig:
    return GenerationConfig.from_dict(validate_config(merged(tiny_config(ROOT), GENERATION_RUN))["generation"])


def _answer_shards(run: Path, name: str, columns) -> pd.DataFrame:
    """Every shard of the run's ``name`` (``ablations``, ``scores``) in the responses' order, as the rules read them."""
    responses, _ = load_parquet(run / "generation/responses.parquet", columns=RESPONSE_COLUMNS)
    paths = sorted((run / "generation" / name).glob("shard*.parquet"))
    assert len(paths) == GENERATION_RUN["generation"]["n_shards"]
    return load_answer_shards(paths, None, columns, responses["example_id"])


def test_the_responses_are_the_references_scored_by_the_trained_model(generation_run):
    responses, _ = load_parquet(generation_run / "generation/responses.parquet", columns=RESPONSE_COLUMNS)
    test, _ = load_parquet(_data(generation_run) / "test.parquet")
    assert list(responses["example_id"]) == list(test["example_id"].head(3))
    assert (responses["answer"] == responses["reference"]).all() and set(responses["target"]) == {"true"}
    model, _ = load_causal_lm(str(generation_run / "models/generator"), "model")
    # the stage's batch again (every answer in one, generation.batch_size 16): the same forwards, the same bits
    again = answer_token_log_probs(
        model, [list(ids) for ids in responses["input_ids"]], list(responses["answer_length"]), batch_size=16
    )
    for row, lp in zip(responses.itertuples(index=False), again, strict=True):
        np.testing.assert_array_equal(lp, np.asarray(row.token_log_probs))
        assert row.log_prob == pytest.approx(lp.sum(), abs=1e-12)
        assert sum(row.planted) == 1 and row.source_kind[int(np.argmax(row.planted))] == 0  # the answer's sentence
        assert row.reference in row.context[row.source_start[int(np.argmax(row.planted))] :]
    metrics = load_json(generation_run / "models/generator_metrics.json")
    assert metrics["trained_from_scratch"] and metrics["steps"] == 8 and 0 <= metrics["exact_match"] <= 1
    assert metrics["n"] == len(test) and np.isfinite(metrics["mean_answer_log_prob"])


def test_a_decoder_that_has_not_learned_to_answer_is_not_explained(generation_run, tmp_path):
    """Under ``generation.min_exact_match`` a decoder trained from scratch is refused before its answers are
    generated: one line naming the metrics file, the field, the bar and what to change; nothing written. A
    pretrained model is explained as it answers."""
    metrics_path = generation_run / "models/generator_metrics.json"
    metrics = load_json(metrics_path)
    assert metrics["exact_match"] < 1  # 8 steps: the bar of 1 is out of reach
    cfg = GenerationConfig.from_dict({**_config(generation_run).to_dict(), "min_exact_match": 1.0})
    out = tmp_path / "responses.parquet"
    with pytest.raises(InputError) as err:
        run_generate_answers(
            cfg,
            "true",
            "cpu",
            generation_run / "models/generator",
            metrics_path,
            _data(generation_run) / "test.parquet",
            _data(generation_run) / "rationales.parquet",
            out,
        )
    assert str(err.value) == (
        f"{metrics_path}: exact_match: expected at least generation.min_exact_match 1 on the held-out questions "
        f"before a decoder trained from scratch is explained, got {metrics['exact_match']:.3f} of {metrics['n']} "
        "after 8 steps: train it longer or at a lower rate (generation.train.steps, learning_rate) or lower the bar"
    )
    assert not out.exists()
    check_learned({**metrics, "trained_from_scratch": False}, 1.0, str(metrics_path))


def test_every_ablation_is_cached_once_and_leave_one_out_reads_them(generation_run):
    cfg = _config(generation_run)
    responses, _ = load_parquet(generation_run / "generation/responses.parquet", columns=RESPONSE_COLUMNS)
    ablations = _answer_shards(generation_run, "ablations", ABLATION_COLUMNS)
    scores = _answer_shards(generation_run, "scores", ANSWER_SCORE_COLUMNS)
    model, tokenizer = load_causal_lm(str(generation_run / "models/generator"), "model")
    assert sorted(scores["method"].unique()) == sorted(method_names(ANSWER))
    for k, row in enumerate(responses.itertuples(index=False)):
        mine = ablations[ablations["example_id"] == row.example_id].set_index("kind")
        n = len(row.source_start)
        train, heldout = answer_masks(cfg.seed, k, n, cfg.n_ablations, cfg.n_heldout, cfg.keep)
        assert np.array_equal(np.array([list(m) for m in mine.loc["random", "masks"]]), train)
        assert np.array_equal(np.array([list(m) for m in mine.loc["heldout", "masks"]]), heldout)
        loo = np.array([list(m) for m in mine.loc["leave_one_out", "masks"]])
        assert np.array_equal(loo, ~np.eye(n, dtype=bool))
        # an ablation's cached scores are the answer's and its end token's on its rebuilt prompt
        answer = [*row.input_ids[len(row.input_ids) - row.answer_length :], row.end_id]
        again = ablation_log_probs(model, tokenizer, row.context, response_sources(row), row.question, answer, loo[:2])
        np.testing.assert_allclose(
            again, np.array([list(t) for t in mine.loc["leave_one_out", "token_log_probs"][:2]]), rtol=0, atol=1e-5
        )  # fmt: skip  (float32 model, another batch: rounding)
        a = row.answer_length  # F, leave-one-out's and the judges' score, is over the answer's own tokens
        cached = answer_scores(np.array([list(t)[:a] for t in mine.loc["leave_one_out", "token_log_probs"]]))[0]
        got = scores[(scores["example_id"] == row.example_id) & (scores["method"] == "leave_one_out")].iloc[0]
        np.testing.assert_allclose(got["scores"], row.log_prob - cached, rtol=0, atol=1e-12)
        assert got["n_forwards"] == n
        # exact truth: every one of the 2ⁿ ablations (the tiny contexts hold at most generation.exact_sources), the
        # all-kept one the answer's own score, leave-one-out's among them
        assert n <= cfg.exact_sources
        every = np.array([list(m) for m in mine.loc["every", "masks"]])
        assert np.array_equal(every, every_mask(n))
        table = answer_scores(np.array([list(t)[:a] for t in mine.loc["every", "token_log_probs"]]))[0]
        # the tree's batches against the response's forward and the shared prefix's on a float32 model: each
        # log-probability (|log p| about 10: 30 522 words, barely trained) sums a few hundred float32 products in
        # another order, so a few hundred eps32 · 10 ≈ 1e-5 apart at most
        assert table[-1] == pytest.approx(row.log_prob, abs=1e-5)
        np.testing.assert_allclose(table[(1 << n) - 1 - (1 << np.arange(n))], cached, rtol=0, atol=1e-5)


def test_learned_attention_is_fitted_on_training_answers_and_scores_the_explained_ones(generation_run):
    """The weights come from the first training examples (never the explained test ones), one a layer and head, L1
    norm 1; an explained answer's learned-attention scores are its sources' head attentions weighted by them."""
    record = load_json(generation_run / "generation/learned_attention.json", LEARNED_SCHEMA)
    weights = load_head_weights(generation_run / "generation/learned_attention.json")
    assert weights.shape == (1, 2) and np.abs(weights).sum() == pytest.approx(1.0)
    assert (record["n_examples"], record["n_fit"], record["n_heldout"], record["n_ablations"]) == (4, 3, 1, 8)
    assert np.isfinite([record["fit_correlation"], record["uniform_fit_correlation"]]).all()
    train, _ = load_parquet(_data(generation_run) / "train.parquet")
    responses, _ = load_parquet(generation_run / "generation/responses.parquet", columns=RESPONSE_COLUMNS)
    assert not set(train["example_id"]) & set(responses["example_id"])
    scores = _answer_shards(generation_run, "scores", ANSWER_SCORE_COLUMNS)
    model, _ = load_causal_lm(str(generation_run / "models/generator"), "model")
    row = next(responses.itertuples(index=False))
    rows = answer_head_attention(model, torch.tensor([list(row.input_ids)]), int(row.answer_length))
    expected = learned_scores(source_features(rows, np.asarray(row.owner), len(row.source_start)), weights)
    got = scores[(scores["example_id"] == row.example_id) & (scores["method"] == "learned_attention")].iloc[0]
    np.testing.assert_allclose(got["scores"], expected, rtol=1e-6, atol=1e-9)  # float32 model, the same pass


def test_the_leaderboard_judges_every_method_and_the_explorer_shows_them(generation_run):
    summary, _ = load_parquet(generation_run / "generation/leaderboard.parquet")
    # the exact values judged beside the methods, and the ceiling of precision and recall against the planted truth
    assert set(summary["method"]) == set(method_names(ANSWER)) | set(EXACT) | {CEILING}
    ceiling = summary[summary["method"] == CEILING].set_index("metric")["mean"]
    assert ceiling["precision_at_1"] == 1.0 and ceiling["recall_at_5"] == 1.0  # one planted sentence an answer
    assert {"top1_drop", "top5_drop", "lds", "precision_at_1", "recall_at_3", "cost_ratio", "peak_mib"} <= set(
        summary["metric"]
    )
    assert {"lds_all", "top1_share", "top3_share", "shapley_tau"} <= set(summary["metric"])
    exact = summary.set_index(["method", "metric"])
    assert exact.loc[("exact_shapley", "shapley_tau"), "mean"] == pytest.approx(1.0)
    shares = summary[summary["metric"].str.endswith("_share")]["mean"].dropna()
    assert shares.le(1 + 1e-9).all()  # no method's drop beats the best over every k-subset
    table = pd.read_csv(generation_run / "paper/tables/answer_leaderboard.csv")
    assert list(table["method"]) == [*method_names(ANSWER), *EXACT, CEILING]
    assert (generation_run / "paper/figures/answer_leaderboard.png").stat().st_size > 0
    pages = sorted(p.name for p in (generation_run / "generation/explorer").glob("*.html"))
    assert "index.html" in pages and len(pages) == 3
    page = next(p for p in (generation_run / "generation/explorer").glob("syn*.html")).read_text()
    assert all(f">{m}<" in page for m in method_names(ANSWER)) and "Content-Security-Policy" in page
    manifest = load_json(generation_run / "manifest.json")
    assert f"results/runs/{RUNS[0]}/generation/judged/shard1.parquet" in str(manifest)


def test_every_generation_rule_on_a_gpu_places_its_model_through_the_policy(generation_run):
    """As the classification study's (tests/e2e/test_architecture_runs.py): each rule that asks SLURM for a GPU
    logged the policy's ``device:`` line and was given ``model.device``."""
    rules = gpu_rules([ROOT / "workflow" / "rules" / "generation.smk"])
    assert rules == {
        "train_generator",
        "generate_answers",
        "fit_learned_attention",
        "ablate_contexts",
        "explain_answers",
        "judge_answers",
        "answer_sanity",
    }
    for rule in sorted(rules):
        folder = generation_run / "logs" / rule
        logs, records = sorted(folder.glob("*.log")), sorted(folder.glob("*.job.json"))
        assert len(logs) == len(records) == (2 if rule in ANSWER_RULES else 1), rule  # a job a shard
        for log, record in zip(logs, records, strict=True):
            assert "device: cpu (model.device auto)" in log.read_text(encoding="utf-8"), rule
            assert "model.device" in record.read_text(encoding="utf-8"), rule


def test_one_call_gives_the_runs_scores_for_its_first_answer(generation_run):
    """``attnlens.cite`` on the run's first explained question, with the run's config and its reference answer (the
    run explains references: ``attribution.target: true``): every method's scores are the run's — the same model,
    prompt, answer-0 masks and learned weights (found in ``results/``). Bounds: the float32 model's forwards batched
    otherwise (the random ablations without the held-out ones), so 1e-5 on scores of order 1."""
    responses, _ = load_parquet(generation_run / "generation/responses.parquet", columns=RESPONSE_COLUMNS)
    test, _ = load_parquet(_data(generation_run) / "test.parquet")
    first = test.iloc[0]
    assert first["example_id"] == responses["example_id"].iloc[0]
    config = merged(tiny_config(ROOT), GENERATION_RUN)
    cited = attnlens.cite(first["text"], first["question"], generation_run, config=config, answer=first["label"])
    scores = _answer_shards(generation_run, "scores", ANSWER_SCORE_COLUMNS)
    mine = scores[scores["example_id"] == first["example_id"]].set_index("method")
    assert set(cited.scores) == set(method_names(ANSWER)) and cited.context == responses["context"].iloc[0]
    for method, values in cited.scores.items():
        np.testing.assert_allclose(values, mine.loc[method, "scores"], rtol=1e-5, atol=1e-5, err_msg=method)
    ranked = cited.ranked("leave_one_out")
    assert [k for k, _, _ in ranked] == list(np.argsort(-cited.scores["leave_one_out"], kind="stable"))
    assert "the tokenizer has no chat template" in " ".join(cited.notes)


def test_the_command_line_cites_a_file_and_refuses_an_empty_question(generation_run, tmp_path):
    """``python -m attnlens cite`` in a fresh process: the page and citation.json out, each method's top source in
    the summary (the reference explained, ``--answer``: the run's eight-step model answers nothing right); an empty
    question is one line and exit status 2."""
    test, _ = load_parquet(_data(generation_run) / "test.parquet")
    (tmp_path / "context.txt").write_text(test["text"].iloc[1], encoding="utf-8")
    command = [sys.executable, "-m", "attnlens", "cite", str(tmp_path / "context.txt"), "--model"]
    command += [str(generation_run), "--methods", "attention_all", "leave_one_out"]
    command += ["--question", test["question"].iloc[1], "--out"]
    out = run_guarded([*command, str(tmp_path / "out"), "--answer", test["label"].iloc[1]],
                      cwd=tmp_path, timeout=GUARD["stage"], env=local_env())  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "top source by method: attention_all" in out.stdout and "page:" in out.stdout
    record = json.loads((tmp_path / "out/citation.json").read_text(encoding="utf-8"))
    assert set(record["scores"]) == {"attention_all", "leave_one_out"}
    assert len(record["scores"]["leave_one_out"]) == len(record["sources"]) > 0
    assert "Content-Security-Policy" in (tmp_path / "out/cite.html").read_text(encoding="utf-8")
    bad = run_guarded(
        [*command, str(tmp_path / "bad"), "--question", " "], cwd=tmp_path, timeout=GUARD["stage"], env=local_env()
    )  # fmt: skip  (the last --question)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "question" in bad.stderr


def test_the_findings_of_a_generation_grid_judge_the_methods_across_seeds(generation_grid):
    """Rule findings over the two seeds: each answer method's leaderboard columns, its LDS as a share of the
    surrogate's, the best method per column, every method ordering, and the randomisation check of every method with
    the randomised scores' agreement with position; two runs are too few for the sign test, and say so."""
    out = generation_grid / "results/findings"
    runs = pd.read_csv(out / "runs.csv")
    assert runs["run"].tolist() == list(RUNS) and runs["seed"].tolist() == list(SEEDS)
    for run, seed in zip(RUNS, SEEDS, strict=True):  # the grid's seed is the decoder's training seed
        metrics = load_json(generation_grid / "results/runs" / run / "models/generator_metrics.json")
        assert metrics["provenance"]["config"]["generation"]["train"]["seed"] == seed
    methods = set(method_names(ANSWER))
    judged = methods  # the exact values' and the ceiling's rows are references: the findings state nothing of them
    quantities = pd.read_csv(out / "quantities.csv", keep_default_na=False, na_values=[""])
    assert {"generation from a context", "answer leaderboard", "against the surrogate"} <= set(quantities["family"])
    board = quantities[quantities["family"] == "answer leaderboard"]
    assert set(board["item"]) == judged and {"lds", "top1_drop", "precision_at_1", "seconds"} <= set(board["metric"])
    shares = quantities[quantities["family"] == "against the surrogate"]
    assert set(shares["item"]) == judged - {"surrogate"} and set(shares["n_runs"]) <= {0, 1, 2}
    statements = pd.read_csv(out / "statements.csv")
    assert {"best method", "method ordering", "against the surrogate"} <= set(statements["kind"])
    best = statements[statements["kind"] == "best method"]
    ks = _config(generation_grid).top_k
    ranked = {
        "lds",
        "lds_all",
        "shapley_tau",
        *(f"top{k}_share" for k in ks),
        *(f"{name}{k}{end}" for k in ks for name, end in (("top", "_drop"), ("precision_at_", ""), ("recall_at_", ""))),
    }
    assert set(best["metric"]) == ranked  # one per ranked column; the cost columns are not ranked
    assert set(statements["verdict"]) == {TOO_FEW} and statements["n_runs"].eq(2).all()
    learned = statements[(statements["kind"] == "against the surrogate")]
    assert learned["statement"].str.contains("80%").all() and "learned_attention" in " ".join(learned["statement"])
    sanity = pd.read_csv(out / "sanity.csv", keep_default_na=False, na_values=[""])
    assert set(sanity["level"]) == {"head", "top1"}  # the one-layer decoder's cascade, its untied head first
    assert set(sanity["method"]) == methods
    final = sanity[sanity["level"] == "top1"]
    assert set(final["verdict"].fillna("")) <= {FAILS, PASSES, ""} and final["mean_position_rho"].abs().le(1).all()
    rows, _ = load_parquet(generation_grid / "results/runs" / RUNS[0] / "generation/sanity.parquet", SANITY_SCHEMA)
    assert len(rows) == len(methods) * 2 and rows["example_id"].nunique() == 1  # findings.sanity_examples: 1
    assert "Sanity check" in (out / "findings.md").read_text(encoding="utf-8")
