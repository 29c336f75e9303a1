"""The Snakemake workflow: lint, dry run, a tiny end-to-end run on .test, and bad input through it."""

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
from pandas.compat._optional import VERSIONS

from attnlens.attention.band import received_attention
from attnlens.attention.summaries import load_bands, load_summaries
from attnlens.attribution.artifacts import load_attributions, load_embedding_attributions, load_explanations
from attnlens.attribution.methods import method_names
from attnlens.classifier.selection import load_selection
from attnlens.data.sources import load_examples
from attnlens.io import load_json, load_model_provenance, load_parquet, load_tensors, unpack_strings
from attnlens.models.checkpoints import load_classifier
from attnlens.pairs.pair_artifacts import (
    PAIR_CONVERGENCE_SCHEMA,
    PAIR_MATRICES_SCHEMA,
    load_pairs,
    load_scores,
    matrix_key,
)
from attnlens.pipeline.config import AttributionConfig, ExplorerConfig, load_config
from attnlens.pipeline.manifest import read_provenance, sha256_file, sha256_tree
from attnlens.render.explorer import (
    read_explorer,
)
from attnlens.similarity.aggregate import SUMMARY_SCHEMA
from attnlens.similarity.metrics import COLUMNS, LEGACY_METRICS, fixed_metrics, load_similarity
from attnlens.stages import attribution as attribution_stage
from attnlens.stages.figures import run_build_explorers
from attnlens.topology.persistence import BOTTLENECK_SCHEMA, ESTIMATORS, TWO_LN2, load_diagrams
from tests.support.helpers import copy_run
from tests.support.helpers import run_snakemake as _snakemake


def test_lint(root):
    out = _snakemake(root, "--lint")
    assert out.returncode == 0, out.stdout + out.stderr


def test_dry_run(root):
    out = _snakemake(root, "-n", "--quiet", "rules")
    assert out.returncode == 0, out.stderr


def test_pairs_without_the_exact_model(root, workdir):
    """pairs.exact.enabled: false drops train_pair_encoder from the DAG; the pair rules still plan."""
    args = ["results/pairs/tables", "--directory", str(workdir), "-n", "--forceall"]
    (workdir / "config/no_exact.yaml").write_text("pairs:\n  exact:\n    enabled: false\n", encoding="utf-8")
    on = _snakemake(root, *args)
    off = _snakemake(root, *args, "--configfile", str(workdir / "config/no_exact.yaml"))
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    assert "train_pair_encoder" in on.stdout and "train_pair_encoder" not in off.stdout
    assert "attribute_pairs" in off.stdout


@pytest.fixture()
def workdir(root, tmp_path):
    shutil.copytree(root / ".test" / "config", tmp_path / "config")
    return tmp_path


@pytest.fixture(scope="module")
def tiny(tiny_run) -> SimpleNamespace:
    """The finished .test run: its results folder, test split and showcased examples."""
    res = tiny_run / "results"
    return SimpleNamespace(
        res=res,
        test=load_examples(res / "data/test.parquet")[0],
        selection=load_selection(res / "predictions/selection.json"),
    )


@pytest.mark.workflow
def test_data_model_and_prediction_stages(tiny):
    res, test = tiny.res, tiny.test
    train, _ = load_examples(res / "data/train.parquet")
    assert len(train) == 18 and len(test) == 6
    rationales, _ = load_parquet(res / "data/rationales.parquet", "rationales/v1")
    assert len(rationales) > 0
    model, tokenizer = load_classifier(res / "models/finetuned")
    assert model.config.id2label == {0: "programming_languages", 1: "artificial_intelligence"}
    assert tokenizer.model_max_length == 128 and model.config.attention_window == [32] * 6
    assert load_model_provenance(res / "models/finetuned", "classifier/v1")["config"]["epochs"] == 1
    metrics = load_json(res / "models/train_metrics.json", "train_metrics/v1")
    assert len(metrics["epochs"]) == 1
    preds, _ = load_parquet(res / "predictions/test.parquet", "predictions/v1")
    assert sorted(preds["example_id"]) == sorted(test["example_id"])
    roles = {s["role"] for s in tiny.selection}
    left_out = load_json(res / "predictions/selection.json", "selection/v1")["left_out"]
    # the tiny model may predict one class only: a role nobody meets is listed, never filled from the other class
    assert {"most_confident_0", "most_confident_1"} <= roles | {r["role"] for r in left_out}
    assert all(int(s["role"][-1]) == s["pred"] for s in tiny.selection if s["role"].startswith("most_confident"))
    assert all(s["example_id"] in set(test["example_id"]) for s in tiny.selection)


@pytest.mark.workflow
def test_a_finished_run_has_nothing_to_do(root, tiny_run):
    again = _snakemake(root, "--directory", str(tiny_run), "--cores", "2")
    assert again.returncode == 0 and "Nothing to be done" in again.stdout + again.stderr


@pytest.mark.workflow
def test_attribute_resumes_from_its_checkpoints(root, tiny_run, tmp_path):
    _check_attribute_resumes(root, copy_run(tiny_run, tmp_path / "copy"))


@pytest.mark.workflow
def test_explorers(tiny):
    res, selection = tiny.res, tiny.selection
    pages = sorted((res / "explorer").glob("*.html"))
    assert sorted(p.stem for p in pages) == sorted({s["example_id"] for s in selection})
    for page in pages:
        meta, arrays = read_explorer(page)
        n, views = meta["n_tokens"], meta["n_layers"] * meta["n_heads"] + len(meta["configurations"])
        assert meta["example_id"] == page.stem and len(meta["tokens"]) == n
        assert arrays["received"].shape == (views, n) and arrays["attribution"].shape == (n,)
        assert arrays["attended_gaps"].shape == (2, views, meta["top_k"], n)
        assert "evidence" in arrays  # the synthetic corpus plants evidence
        assert [e["method"] for e in meta["explanations"]] == list(method_names())  # one overlay per explanation method
        assert all(arrays[f"explanation_{m}"].shape == (n,) for m in method_names())
        assert meta["provenance"]["schema"] == "explorer/v2" and meta["provenance"]["config_sha256"]


#: Files that are figures or tables, wherever a rule writes them.
FIGURE_OR_TABLE = {".png", ".pdf", ".csv", ".tex", ".md", ".html"}


@pytest.mark.workflow
def test_manifest_and_provenance(tiny):
    """The manifest names each artifact's rule and its inputs' current hashes; every figure and table has provenance."""
    res = tiny.res
    manifest = load_json(res / "manifest.json", "manifest/v1")
    artifacts = {a["path"]: a for a in manifest["artifacts"]}
    rules = {a["rule"] for a in artifacts.values() if a["rule"]}
    assert {
        "prepare_dataset",
        "train_classifier",
        "extract_attention",
        "attribute",
        "compare",
        "build_explorers",
        "plot_pairs",
        "pair_topology",
        "bottleneck_distances",
    } <= rules
    assert manifest["summary"]["without_provenance"] == []
    for path, entry in artifacts.items():
        assert entry["rule"] is not None, f"{path}: no rule made it"
        assert entry["kind"] in ("file", "directory")
        for inp in entry["inputs"]:
            ip = res.parent / inp["path"]
            current = sha256_tree(ip)[0] if ip.is_dir() else sha256_file(ip)
            assert inp["sha256"] == current, f"{path}: input {inp['path']} changed since"
            assert inp["path"] in artifacts
    for folder in ("paper", "topology", "pairs", "explorer"):
        for f in (res / folder).rglob("*"):
            if f.suffix in FIGURE_OR_TABLE and ".tmp-" not in f.name:
                prov = read_provenance(f)
                assert prov is not None, f"{f} carries no provenance"
                assert prov["git_commit"] and prov["attnlens_version"] and prov["config_sha256"], f
                assert "seed" in prov, f


@pytest.mark.workflow
def test_attribution_stage(tiny):
    res, test, selection = tiny.res, tiny.test, tiny.selection
    shards = sorted((res / "attributions").glob("shard*.parquet"))
    assert len(shards) == 2 and not list((res / "attributions").glob(".*partial"))
    frame = load_attributions(shards)
    assert sorted(frame["example_id"]) == sorted(test["example_id"])  # every test example, once
    for row in frame.itertuples(index=False):
        assert len(row.scores) == len(row.input_ids)
        # δ is stored as Σ scores − gap (float64 of float32 scores): only the float64 sum's rounding remains
        assert np.sum(row.scores) == pytest.approx(row.gap + row.delta, abs=1e-9)
        assert row.n_steps in (2, 4) and list(row.rounds_steps)[-1] == row.n_steps
        assert row.target == int(np.argmax(row.probs))  # target: predicted
    showcased = {s["example_id"] for s in selection}
    emb = load_embedding_attributions(res / "attributions/embeddings.parquet")
    assert set(emb) == showcased and all(set(e["scores"]) == {"word", "position"} for e in emb.values())
    tables = res / "paper/tables/attributions"
    for name in ("dataset_pos_sum_over_n_masked", "dataset_neg_mean_unmasked", "convergence"):
        for ext in ("csv", "tex", "md"):
            assert (tables / f"{name}.{ext}").stat().st_size > 100
    role = selection[0]
    top = (tables / f"{role['role']}_{role['example_id']}_top_pos_unmasked.csv").read_text(encoding="utf-8")
    assert top.splitlines()[0] == "token,position,attribution" and len(top.splitlines()) == 11
    overlays = res / "paper/attribution_overlays"
    assert len(list(overlays.glob("*.html"))) == len(selection)
    html = next(overlays.glob("*.html")).read_text(encoding="utf-8")
    assert "Attribution Score" in html and "hsl(" in html
    for ext in ("png", "pdf"):
        assert (res / f"paper/figures/faithfulness_curves.{ext}").stat().st_size > 1000
    aopc = (res / "paper/tables/faithfulness_aopc.csv").read_text(encoding="utf-8")
    for name in ("ig", "attention_last", "attention_all", "random"):
        assert f"\n{name}," in aopc
    assert "auprc" in (res / "paper/tables/plausibility.csv").read_text(encoding="utf-8")


@pytest.mark.workflow
def test_explanation_stage(tiny):
    """Every method for every test example, on IG's ids and target; raw attention as extraction gave it."""
    res, test = tiny.res, tiny.test
    frame = load_explanations(sorted((res / "explanations").glob("shard*.parquet")))
    attributions = load_attributions(sorted((res / "attributions").glob("shard*.parquet"))).set_index("example_id")
    assert sorted(frame["example_id"].unique()) == sorted(test["example_id"])
    assert sorted(frame["method"].unique()) == sorted(method_names())
    summaries = load_summaries(sorted((res / "attention").glob("shard*.safetensors"))).examples
    for row in frame.itertuples(index=False):
        ig = attributions.loc[row.example_id]
        assert list(row.input_ids) == list(ig["input_ids"]) and row.target == ig["target"]
        assert np.isfinite(row.scores).all() and row.seconds > 0 and row.forward_seconds > 0
        if row.method.startswith("attention_"):
            received = summaries[row.example_id].received
            expected = received[-1:] if row.method == "attention_last" else received
            # the same float32 received attention, summed over 6 × 12 heads in another order: float32 rounding
            np.testing.assert_allclose(row.scores, expected.double().sum((0, 1)).numpy(), rtol=1e-5, atol=1e-6)
        if row.method == "rollout":
            assert np.sum(row.scores) == pytest.approx(1.0)  # a row of products of stochastic matrices, float32
        if row.method == "attnlrp":  # the explained logit and its conservation gap (unit/attribution/test_attnlrp)
            assert np.isfinite(row.explained) and row.delta == pytest.approx(row.explained - np.sum(row.scores))
        else:
            assert np.isnan(row.explained) and np.isnan(row.delta)
    summary, _ = load_parquet(res / "explanations/leaderboard.parquet", "explanation_leaderboard/v1")
    assert list(dict.fromkeys(summary["method"])) == ["ig", *method_names(), "random"]
    spearman = summary[summary["metric"] == "spearman"].set_index("method")
    assert set(spearman.index) == set(method_names()) and spearman["chance"].abs().max() < 0.2
    faithful = summary[summary["metric"] == "comprehensiveness"]
    assert set(faithful["method"]) == {"ig", *method_names(), "random"} and (faithful["n"] == len(test)).all()
    table = (res / "paper/tables/explanation_leaderboard.md").read_text(encoding="utf-8")
    assert all(f"| {m} |" in table for m in ("ig", *method_names(), "random"))
    for ext in ("png", "pdf"):
        assert (res / f"paper/figures/explanation_leaderboard.{ext}").stat().st_size > 1000


@pytest.mark.workflow
def test_similarity_stage(tiny):
    res, test, selection = tiny.res, tiny.test, tiny.selection
    frame = load_similarity(sorted((res / "similarity").glob("shard*.parquet")))
    assert list(frame.columns) == list(COLUMNS)
    assert sorted(frame["example_id"].unique()) == sorted(test["example_id"])
    per_example = 4 * 2 * 3 * (len(LEGACY_METRICS) + len(fixed_metrics((0.9, 0.98))))
    assert len(frame) == len(test) * per_example
    assert frame["value"].notna().mean() > 0.95 and frame["chance"].notna().mean() > 0.95
    fixed = frame[frame["mode"] == "fixed"]
    assert (fixed.groupby("example_id")["n"].max() < frame.groupby("example_id")["n"].max()).all()  # specials dropped
    heads = pd.concat(
        load_parquet(p, "head_agreement/v1")[0] for p in (res / "similarity").glob("heads_shard*.parquet")
    )
    assert len(heads) == len(test) * 6 * 12 and np.isfinite(heads["spearman"]).all()
    summary, prov = load_parquet(res / "similarity/summary.parquet", SUMMARY_SCHEMA)
    assert (summary["n_examples"] <= len(test)).all() and prov["deviations"]
    tables = res / "paper/tables/similarity"
    for stem in ("table1_similarity", "table2_jaccard", "masking_increase", "similarity_tests"):
        for ext in ("csv", "tex", "md"):
            assert (tables / f"{stem}.{ext}").stat().st_size > 200, stem
    table1 = pd.read_csv(tables / "table1_similarity.csv")
    assert len(table1) == 8 and "τ-b fixed" in table1.columns
    assert table1["cosine legacy"].str.match(r"-?\d\.\d{3} \[-?\d\.\d{3}, -?\d\.\d{3}\] \(-?\d\.\d{3}\)").all()
    assert len(pd.read_csv(tables / "similarity_means_legacy.csv")) == 16
    views = res / "paper/similarity_examples"
    first = selection[0]
    page = (views / f"{first['role']}_{first['example_id']}.md").read_text(encoding="utf-8")
    assert "Jaccard = " in page and "attention_only" in page
    top = pd.read_csv(views / f"{first['role']}_{first['example_id']}_fixed_last_masked_top5.csv")
    assert list(top.columns) == [
        "set",
        "token",
        "position",
        "attention_norm",
        "attention_rank",
        "attribution_norm",
        "attribution_rank",
    ]
    for stem in ("similarity_distributions", "similarity_distributions_scaled", "head_agreement"):
        assert (res / f"paper/figures/{stem}.png").stat().st_size > 5000


@pytest.mark.workflow
def test_topology_stage(tiny):
    res, test, selection = tiny.res, tiny.test, tiny.selection
    diagrams = load_diagrams(sorted((res / "topology").glob("diagrams_shard*.parquet")))
    assert sorted(diagrams["example_id"].unique()) == sorted(test["example_id"])
    assert set(diagrams["estimator"]) == set(ESTIMATORS) and set(diagrams["dim"]) <= {0, 1}
    h0 = diagrams[diagrams["dim"] == 0]
    assert (h0.groupby(["example_id", "estimator"])["infinite"].sum() == 1).all()  # one component survives
    assert (diagrams["death"] >= diagrams["birth"]).all() and (diagrams["death"] <= TWO_LN2 + 1e-9).all()
    tensors, _ = load_tensors(res / "topology/matrices_shard0.safetensors", "topology_matrices/v1")
    d = next(v for k, v in tensors.items() if k.endswith("|distance")).numpy()
    assert np.allclose(d, d.T) and (np.diag(d) == 0).all()  # symmetric by construction, float32 entries ≤ 2 ln 2
    pairs, prov = load_parquet(res / "topology/bottleneck.parquet", BOTTLENECK_SCHEMA)
    n = len(test)
    assert sorted(prov["example_ids"]) == sorted(test["example_id"])
    assert len(pairs) == len(ESTIMATORS) * 3 * n * (n - 1) // 2 and np.isfinite(pairs["distance"]).all()
    claims = load_json(res / "topology/claim.json", "topology_claim/v1")["claims"]
    assert len(claims) == len(ESTIMATORS) * 3 and all(c["n_permutations"] == 50 for c in claims)
    assert "1-NN" in (res / "topology/claim.md").read_text(encoding="utf-8")
    figures = res / "topology/figures"
    assert (figures / "bottleneck_xlogy_max.png").stat().st_size > 5000
    first = selection[0]
    assert (figures / f"{first['role']}_{first['example_id']}_joint_ppmi.png").exists()


@pytest.mark.workflow
def test_pairs_stage(tiny):
    res = tiny.res
    train, test = load_pairs(res / "data/pairs_train.parquet"), load_pairs(res / "data/pairs_test.parquet")
    assert len(train) == len(test) == 6 and not set(train["pair_id"]) & set(test["pair_id"])
    scores = load_scores(sorted((res / "pairs").glob("scores_shard*.parquet")))
    assert set(zip(scores["model"], scores["similarity"], scores["mode"], strict=True)) == {
        (model, sim, mode)
        for model, sim in (("off_the_shelf", "cosine"), ("off_the_shelf", "dot"), ("exact", "shifted_dot"))
        for mode in ("fixed", "legacy")
    }
    assert set(zip(scores["mode"], scores["quadrature"], strict=True)) == {
        ("fixed", "gauss_legendre"),
        ("legacy", "right_riemann"),
    }
    assert sorted(scores["pair_id"].unique()) == sorted(test["pair_id"]) and (scores["layer"] == 5).all()
    matrices = {}
    for p in sorted((res / "pairs").glob("matrices_shard*.safetensors")):
        matrices.update(load_tensors(p, PAIR_MATRICES_SCHEMA)[0])
    for rec in scores.to_dict("records"):
        m = matrices[matrix_key(rec["pair_id"], rec["model"], rec["similarity"], rec["mode"])].numpy()
        assert m.shape == (len(rec["tokens_a"]), len(rec["tokens_b"])) == (rec["n_a"], rec["n_b"])
        # the stored total is this matrix's sum (the same float32 values, the same sum), and the error is defined
        # as total − target: float64 rounding only
        assert float(m.sum()) == rec["total"] and abs(rec["total"] - rec["target"] - rec["error"]) < 1e-9
    exact = scores[scores["model"] == "exact"]
    # exact mode: the reference embeds to 0, so the target is the score up to float32 rounding (allclose's 1e-5)
    assert (exact["score_a_rb"] == 0).all() and np.allclose(exact["score"], exact["target"])
    conv, _ = load_parquet(res / "pairs/convergence.parquet", PAIR_CONVERGENCE_SCHEMA)
    assert sorted(conv["n_steps"].unique()) == [1, 2, 4]
    assert set(zip(conv["mode"], conv["quadrature"], strict=True)) == {
        ("fixed", "gauss_legendre"),
        ("fixed", "midpoint"),
        ("legacy", "right_riemann"),
    }
    corr = load_json(res / "pairs/correlation.json", "pair_topology_correlation/v1")["correlations"]
    assert len(corr) == 1 + 2 * 3 * 2 and all(c["n"] == 12 for c in corr)
    tables = res / "pairs/tables"
    assert "exact" in (tables / "pair_errors.md").read_text(encoding="utf-8")
    assert len(pd.read_csv(tables / "pair_scores.csv")) == len(scores)
    figures = res / "pairs/figures"
    assert (figures / "convergence.png").stat().st_size > 5000
    assert len(list(figures.glob("pair_*_exact_shifted_dot_fixed.png"))) == 2
    assert len(list(figures.glob("pair_*_off_the_shelf_cosine_legacy.png"))) == 2
    assert "right Riemann" in (tables / "pair_errors.md").read_text(encoding="utf-8")
    assert (figures / "topology_vs_similarity_xlogy.png").exists()


def _check_attribute_resumes(root, workdir):
    """A shard killed after its first example resumes from its checkpoint; other shards are untouched."""

    res = workdir / "results"
    before, _ = load_parquet(res / "attributions/shard1.parquet")
    (res / "attributions/shard1.parquet").unlink()
    plan = _snakemake(root, "--directory", str(workdir), "-n", "--quiet", "rules")
    assert re.search(r"^attribute\s+1$", plan.stdout, re.M)  # shard 1 only: shard 0 is not recomputed
    cfg = AttributionConfig.from_dict(load_config(workdir / "config/config.yaml")["attribution"])
    real = attribution_stage.attribute_configured
    calls = []

    def crash_on_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    paths = {
        "model_dir": res / "models/finetuned",
        "test_path": res / "data/test.parquet",
        "predictions_path": res / "predictions/test.parquet",
        "selection_path": res / "predictions/selection.json",
        "shard": 1,
        "out_path": res / "attributions/shard1.parquet",
    }
    attribution_stage.attribute_configured = crash_on_second
    try:
        with pytest.raises(KeyboardInterrupt):
            attribution_stage.run_attribute(cfg, **paths)
    finally:
        attribution_stage.attribute_configured = real
    assert not (res / "attributions/shard1.parquet").exists()
    assert len(list((res / "attributions/.shard1.parquet.partial").glob("*.parquet"))) == 1
    done = attribution_stage.run_attribute(cfg, **paths)
    assert done["resumed"] == 1 and done["n_examples"] == len(before)
    after, _ = load_parquet(res / "attributions/shard1.parquet")
    assert list(after["example_id"]) == list(before["example_id"])
    for a, b in zip(after["scores"], before["scores"], strict=True):
        assert list(a) == pytest.approx(list(b), abs=1e-6)  # the same IG, resumed: float32 scores ≲ 1


@pytest.mark.workflow
def test_attention_stage(tiny):
    res, test, selection = tiny.res, tiny.test, tiny.selection
    imp, prov = load_tensors(res / "importance/head_importance.safetensors", "head_importance/v1")
    assert prov["split"] == "train" and len(prov["example_ids"]) == 4
    assert imp["fixed"].shape == imp["legacy"].shape == (6, 12)
    assert imp["legacy"].min() == 0 and imp["legacy"].max() == 1 and imp["fixed"].max() == 1
    assert (imp["fixed_global"] > 0).all()
    shards = sorted((res / "attention").glob("shard*.safetensors"))
    assert len(shards) == 2
    for shard in shards:  # ids and offsets are tensors too: the file reads without its metadata
        t, prov = load_tensors(shard, "attention_summaries/v1")
        assert unpack_strings(t["example_id_bytes"], t["example_id_offsets"]) == prov["example_ids"]
        assert unpack_strings(t["topk_id_bytes"], t["topk_id_offsets"]) == prov["topk_ids"]
        assert len(t["offsets"]) == len(prov["example_ids"]) + 1 and t["offsets"][-1] == t["received"].shape[-1]
    summaries = load_summaries(shards)
    assert sorted(summaries.examples) == sorted(test["example_id"])  # every test example, once
    for ex in summaries.examples.values():
        n = len(ex.input_ids)
        assert ex.received.shape == (6, 12, n)
        # float32 probabilities: n rows each summing to 1 within ~n·2⁻²⁴, summed again over n ≤ 128 queries
        assert torch.allclose(ex.received.sum(-1), torch.full((6, 12), float(n)), rtol=1e-4)
    showcased = {s["example_id"] for s in selection}
    assert {e for e, ex in summaries.examples.items() if ex.topk is not None} == showcased
    bands_paths = sorted((res / "attention/bands").glob("shard*.safetensors"))
    eid = selection[0]["example_id"]
    bands, _ = load_bands(bands_paths, eid)
    received = torch.stack([received_attention(b) for b in bands])  # the same code on the stored band: rounding
    assert torch.allclose(received, summaries.examples[eid].received)
    paper = res / "paper"
    for name in ("head_importance", "attention_aggregate", "topk_counts", "topk_intersections"):
        for ext in ("png", "pdf"):
            assert (paper / f"figures/{name}.{ext}").stat().st_size > 1000
    assert len(list((paper / "figures/attention_heatmaps").glob("*.png"))) == len(showcased)
    overlays = paper / "overlays"
    assert len(list(overlays.glob("*.html"))) == 2 * len(showcased)  # last layer × {unscaled, scaled}
    tex = next(overlays.glob("*_last_unscaled.tex")).read_text(encoding="utf-8")
    assert tex.count("\\colorbox{") > 10
    counts = (paper / "tables/topk_attended_by_type.csv").read_text(encoding="utf-8").splitlines()
    assert counts[0] == "token,count" and len(counts) > 3
    assert "[CLS]" not in "".join(counts) and ",the," not in "".join(counts)


def test_scripts_do_not_shadow_installed_modules(root):
    """Snakemake puts workflow/scripts on sys.path: a script named like a package breaks its importers."""

    clashes = [
        p.stem
        for p in (root / "workflow/scripts").glob("*.py")
        if p.stem in VERSIONS or importlib.util.find_spec(p.stem)
    ]
    assert not clashes, f"rename these scripts: {clashes}"


def test_ruff_clean(root):
    for args in (["check", "."], ["format", "--check", "."]):
        out = subprocess.run([sys.executable, "-m", "ruff", *args], cwd=root, capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.workflow
def test_snakemake_report(root, tiny_run, tmp_path):
    """`snakemake --report` renders every report-tagged figure and table, grouped by study, with captions."""
    report = tmp_path / "report.html"
    out = _snakemake(root, "--directory", str(tiny_run), "--report", str(report))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "ERROR/" not in out.stderr, out.stderr  # a caption that does not render as reStructuredText
    text = report.read_text(encoding="utf-8")
    for category in ("1 Classification (Longformer)", "2 Topology", "3 Siamese pairs"):
        assert category in text
    captions = sorted((root / "workflow/report").glob("*.rst"))
    rules = "".join(p.read_text() for p in (root / "workflow/rules").glob("*.smk"))
    categories = "CLASSIFICATION|TOPOLOGY|PAIRS|FINDINGS|GENERATION"
    tagged = rf'caption="\.\./report/(\w+)\.rst"|report_\w+\([^)]*"(\w+)",\s*(?:{categories})'
    used = re.findall(tagged, rules)
    names = {a or b for a, b in used}
    assert names == {p.stem for p in captions} - {"workflow"}, "every caption is used and every used caption exists"
    for name in ("head_importance.png", "table1_similarity.csv", "claim.csv", "correlation.csv", "convergence.png"):
        assert name in text, f"{name} missing from the report"
    explorers = sorted((tiny_run / "results/explorer").glob("*.html"))
    assert explorers and all(p.name in text for p in explorers)


@pytest.mark.workflow  # it reads tiny_run: not one of the numerics the portable-kernels run repeats
def test_a_run_that_showcases_no_example_builds_an_empty_explorer(tiny_run, tmp_path):
    """A run whose showcase roles no document meets (every test answer cut away, say): ``selection.json`` lists no
    example, and ``build_explorers`` writes an explorer of no pages instead of asking the tokenizer for none."""
    res = tiny_run / "results"
    selection = json.loads((res / "predictions/selection.json").read_text(encoding="utf-8"))
    selection["examples"] = []
    (tmp_path / "selection.json").write_text(json.dumps(selection), encoding="utf-8")
    shards = sorted((res / "attention/bands").glob("shard*.safetensors"))
    written = run_build_explorers(
        ExplorerConfig.from_dict({"top_k": 3, "importance": "fixed"}),
        shards,
        sorted((res / "attributions").glob("shard*.parquet")),
        res / "importance/head_importance.safetensors",
        tmp_path / "selection.json",
        res / "data/test.parquet",
        res / "data/rationales.parquet",
        res / "data/split_manifest.json",
        res / "models/finetuned",
        tmp_path / "explorer",
    )
    assert written == [] and (tmp_path / "explorer").is_dir() and not list((tmp_path / "explorer").iterdir())
