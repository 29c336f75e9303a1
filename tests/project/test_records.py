"""Every measured figure the docs generate comes from one record (``benchmarks/records/``), and every record from a
bench that writes it (:mod:`benchmarks.records`)."""

from __future__ import annotations

import ast
import json
from functools import partial

import pytest

from benchmarks import records
from tests.support.helpers import ROOT


def test_the_docs_say_what_the_records_say():
    """docs/benchmarks.md's question table and every quoted figure are the records' (``python -m
    benchmarks.records`` rewrites them)."""
    assert records.stale() == []


def test_every_question_has_one_record_and_every_record_a_question():
    found = records.records()
    assert set(found) == set(records.QUESTIONS)
    for rid, record in found.items():
        assert record.id == rid
        assert record.written == "bench" or record.written.startswith("transcribed from "), rid


@pytest.mark.parametrize("rid", records.QUESTIONS)
def test_every_record_names_a_bench_that_writes_it(rid):
    """The record's bench is a module of ``benchmarks/`` with a ``write_record(<its id>, …)`` call."""
    bench = records.records()[rid].bench
    path = ROOT / (bench.replace(".", "/") + ".py")
    assert path.is_file(), f"{rid}: no bench {bench}"
    calls = [
        node
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "write_record"
    ]
    written = {c.args[0].value for c in calls if c.args and isinstance(c.args[0], ast.Constant)}
    assert rid in written, f"{rid}: {bench} writes the records {sorted(written)}"


def test_a_doc_that_differs_from_its_record_is_found(tmp_path, monkeypatch):
    """The check can fail: a quoted figure typed by hand, and a table row edited, are both named."""
    found = records.records()
    doc = tmp_path / "doc.md"
    pipeline = found["default_run"].figures.get("pipeline", found["default_run"].answer)
    table = records.question_table(found)
    doc.write_text(
        f"about <!-- record: default_run.answer -->8 ½ minutes<!-- /record -->\n\n"
        f"{records.TABLE_START}\n{table.replace('|', '¦', 3)}\n{records.TABLE_END}\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(records, "DOCS", (doc,))
    monkeypatch.setattr(records, "ROOT", tmp_path)
    assert records.stale(found) == ["doc.md"]
    fixed = records.rendered(doc.read_text(encoding="utf-8"), found)
    assert f"<!-- record: default_run.answer -->{found['default_run'].answer}<!-- /record -->" in fixed
    assert table in fixed and pipeline
    doc.write_text(fixed, encoding="utf-8")
    assert records.stale(found) == []


def test_a_bench_writes_its_record_with_its_provenance(tmp_path, monkeypatch):
    """:func:`benchmarks.records.write_record` stamps the commit, the date and this machine."""
    monkeypatch.setattr(records, "RECORDS", tmp_path)
    path = records.write_record("x", "Q?", "A.", "[s](#s)", "benchmarks.x", {"n": 1}, measured_on="a machine")
    got = json.loads(path.read_text(encoding="utf-8"))
    assert got["id"] == "x" and got["figures"] == {"n": 1} and got["written"] == "bench"
    assert got["date"][:4].isdigit() and got["commit"] and got["measured_on"] == "a machine"


def _row(**kw):
    return kw


#: Each writer of a record, fed a made-up result of its bench's shape: ``(writer, result, id, what its answer says)``.
def _writers():
    from benchmarks import (  # noqa: PLC0415
        attnlrp,
        beside,
        cite_gemma,
        contexts,
        gpu,
        hierarchy,
        kernel_sets,
        paper_shape,
        pipeline_runs,
        slurm_study,
        startup,
    )
    from benchmarks.suites import (  # noqa: PLC0415
        architectures,
        attention,
        attribution,
        decoders,
        explanations,
        explorer,
        pairs,
        prompts,
        similarity,
        targets,
        topology,
    )

    timing = {"forward_with_attentions_s": 4.0, "summaries_s": 1.0, "peak_extra_bytes": 6e7, "dense_bytes": 2.4e9,
              "legacy_all_heads_s_extrapolated": 40.0, "speedup_over_legacy": 40.0}  # fmt: skip
    lengths = [
        _row(tokens=2048, summaries_over_forward=0.21, peak_extra_over_dense=0.011, **timing),
        _row(tokens=4096, summaries_over_forward=0.26, peak_extra_over_dense=0.027, **timing),
    ]
    yield attention.record, {"lengths": lengths}, "attention_summaries", "0.21–0.26 × the forward, 1.1–2.7 %"
    seam = {"forward_with_bands_s": 10.0, "bands_over_dense": 0.25}
    arch = [{**r, **seam, "architecture": a} for a in ("longformer", "modernbert") for r in lengths]
    arch[2]["summaries_over_forward"], arch[3]["summaries_over_forward"] = 0.30, 0.36
    yield architectures.record, {"lengths": arch}, "architectures", "longformer 0.21–0.26 ×, modernbert 0.30–0.36 ×"
    seconds = {"forward_s": 4.0, "forward_with_bands_s": 4.2, "probabilities_s": 2.0, "summaries_s": 4.0,
               "forward_backward_s": 14.0, "attnlrp_s": 15.0, "summaries_peak_extra_over_dense": 1e-4}  # fmt: skip
    dec = [
        _row(family=f, shape="small", tokens=n, summaries_over_forward=s, attnlrp_over_forward_backward=1.1, **seconds)
        for f, s in (("llama", 2.2), ("mistral", 0.42))
        for n in (8192, 16384)
    ]
    yield decoders.record, {"rows": dec}, "decoders", "at 16384 tokens the windowed families' summaries 0.42 ×"
    methods = {
        "rollout": {"over_forward": 0.21, "peak_extra_over_dense": 0.016, "seconds": 0.1, "peak_extra_bytes": 4e7}
    }
    run = {"tokens": 2048, "forward_s": 4.0, "methods": methods}
    yield explanations.record, {"lengths": [run]}, "explanation_methods", "≤ 0.21 ×"
    throughput = {"tokens": 256, "n_steps": 32, "internal_batch_size": 8, "ig_over_steps_x_forward_backward": 0.8,
                  "ig_s": 3.3, "ig_over_steps_x_input_grad_step": 0.9}  # fmt: skip
    yield attribution.record, {"throughput": throughput}, "ig_step", "0.80 × 32 passes"
    ig, lrp = {"one_label_s": 3.3, "4_labels_s": 13.9}, {"one_label_s": 0.12, "4_labels_s": 0.46}
    t = {
        "tokens": 256,
        "n_steps": 32,
        "ig": {"ratio_k_over_one": 4.2, **ig},
        "attnlrp": {"ratio_k_over_one": 3.8, **lrp},
    }
    span_ig, span_lrp = {"classification_s": 3.2, "qa_s": 3.2}, {"classification_s": 0.12, "qa_s": 0.12}
    qa = {"qa": {"ig": {"ratio_over_classification": 1.0, **span_ig},
                 "attnlrp": {"ratio_over_classification": 1.02, **span_lrp}}}  # fmt: skip
    yield targets.record, {"lengths": [{**t, **qa}]}, "targets", "4.20 × IG, 3.80 × AttnLRP"
    sim = {"tokens": 2048, "compare_seconds": 0.44, "aggregate_examples": 1000, "aggregate_seconds": 1.0,
           "rows_per_example": 456, "n_permutations": 100, "head_agreement_seconds": 0.05,
           "compare_target_seconds": 1.0, "aggregate_rows": 456000, "aggregate_target_seconds": 30.0}  # fmt: skip
    yield similarity.record, sim, "similarity", "0.44 s per 2048-token document"
    per = {"units": 32, "forward_with_attentions_s": 1.0, "pooling_s": 0.3, "mi_and_persistence_s": 0.02,
           "peak_extra_bytes": 2e8}  # fmt: skip
    topo = [
        {"tokens": 512, "topology_s_per_example": 0.31, **per},
        {"tokens": 1024, "topology_s_per_example": 0.79, **per},
    ]
    bottleneck = {"bottleneck_examples": 100, "bottleneck_pairs": 4950, "bottleneck_mean_bars": {"0": 31, "1": 15},
                  "bottleneck_all_pairs_s": 3.4, "bottleneck_target_s": 60.0}  # fmt: skip
    yield topology.record, {"per_length": topo, **bottleneck}, "topology", "0.31 s (512 tokens) to 0.79 s (1024)"
    pair = [{"tokens_per_text": 32, "seconds_per_pair": 21.9, "n_steps": 50, "peak_extra_bytes": 2.3e8,
             "attribution_error": {"cosine": -4e-7, "dot": 9e-7}}]  # fmt: skip
    yield pairs.record, {"pairs": pair}, "pairs", "21.9 s per pair of 32-token texts"
    sizes = {"data_deflated_mb": 3.0, "views_s": 9.0, "encode_s": 2.0}
    pages = [{"top_k": 3, "page_mb": 9.0, **sizes}, {"top_k": 1, "page_mb": 4.27, **sizes}]
    page = {"tokens": 4096, "heads": 144, "pages": pages}
    yield explorer.record, page, "explorer", "4.27 MB for 4096 tokens × 144 heads at `top_k: 1`"
    ctx = [
        _row(family="llama", tokens=2048, forward_s=0.7, attention_over_forward=0.9, attention_extra_over_dense=0.002,
             attnlrp_over_forward_backward=1.5, loo_speedup=1.6),
        _row(family="llama", tokens=32768, forward_s=46.0, attention_over_forward=1.0,
             attnlrp_over_forward_backward=1.3),
    ]  # fmt: skip
    yield contexts.record_contexts, ctx, "long_contexts", "leave-one-out from the shared prefix 1.6 × cheaper"
    gemma = [{**r, "family": "gemma3"} for r in ctx]
    del gemma[1]["attnlrp_over_forward_backward"]  # the backward did not fit the machine: the forward's row alone
    says = "at 32 768 tokens the answer rows' attention 1 × a forward, AttnLRP not run"
    yield partial(contexts.record_contexts, shape="gemma3-270m"), gemma, "long_contexts_gemma", says
    method = {"forwards": 40, "seconds": 120.0, "over_forward": 20.0, "top1_drop": 1.5, "top3_drop": 2.5,
              "planted_in_top3": True}  # fmt: skip
    searched = {"leave_one_out": {**method, "forwards": 144}, "hierarchical": {**method, "forwards": 48},
                "surrogate": {**method, "forwards": 64}}  # fmt: skip
    tree = {"tokens": 4096, "sources": 144, "methods": searched, "forwards_ratio": 0.333, "top3_drop_ratio": 1.0}
    yield hierarchy.record, tree, "hierarchy_gemma", "48 forwards against flat leave-one-out's 144 (0.33 ×)"
    window = {"wall_s": 600.0, "cpu_s": 1100.0, "answer_jobs": 24, "answer_rules_s": 400.0}
    scale = {"answers": 320, "shards": 8, "one_job": {**window, "answer_rules_s": 500.0},
             "slurm": {**window, "submitted": 25, "rules": ["ablate_contexts"], "squeue": []},
             "equal": {name: {"rows": 10, "difference": None} for name in ("ablations", "judged")}}  # fmt: skip
    yield slurm_study.record, scale, "slurm_study", "25 jobs through sbatch in 6 min 40 s (one job a rule: 8 min 20 s)"
    ran = {"s": 25.4, "cpu_s": 50.0, "peak_bytes": 2.5e8}
    ours = {"surrogate": ran, "attention": ran, "gradient_x_input": ran}
    killed = {"not_run": "killed (SIGKILL): out of memory on a machine of 24 GiB"}
    side = [{"family": "llama", "tokens": 2048, "context_cite": {**ran, "s": 36.8}, "attnlens": ours,
             "inseq_attention": killed, "inseq_input_x_gradient": killed, "context_cite_over_attnlens": 1.45,
             "inseq_attention_over_attnlens": None}]  # fmt: skip
    yield beside.record_beside, side, "beside", "context-cite's surrogate 1.45 × attnlens's at 2048–2048 tokens"
    proof = {
        "card": "NVIDIA H200", "torch": "2.11.0", "shape": {"max_length": 2048}, "stages": {"attribute": {}},
        "ig": {"seconds_per_document": 0.99, "steps": 50, "paper_t4_seconds_per_document": 43.5},
    }  # fmt: skip
    yield gpu.record_proof, proof, "gpu_proof", "yes; IG 0.99 s per 2048-token document at 50 steps (paper: 43.5"
    board = {m: {"top1_drop": 7.9, "lds": lds, "seconds": 0.5} for m, lds in (("surrogate", 0.81), ("attnlrp", 0.83))}
    run = {"wall_seconds": 258.0, "cpu_seconds": 493.0, "n_held_out": 1600, "mean_answer_log_prob": -0.004}
    runs = {
        f"{k}-s{seed}": {
            **run,
            "kernels": k,
            "seed": seed,
            "cpu_kernels": "AVX512",
            "exact_match": e,
            "leaderboard": board,
        }
        for k, seed, e in (("native", 0, 1.0), ("native", 1, 0.999), ("portable", 0, 0.999))
    }
    ks = {
        "runs": runs,
        "seeds": {"largest": {"lds": 0.2}},
        "kernel_sets": {"portable": {"largest_difference": {"lds": 0.1}, "same_answers": 1.0}},
    }
    said = "yes, within its seeds' spread: exact match 0.999–1.000"
    yield kernel_sets.record_kernel_sets, ks, "generation_kernel_sets", said
    boot = {"rules": {"explain": {"jobs": 2, "startup_median": 0.35, "startup_max": 0.5, "work_median": 3.0}},
            "imports": {"interpreter_seconds": 0.05, "modules": {
                "attnlens.stages.model": {"seconds": 5.0, "loads": ["torch"]}}}}  # fmt: skip
    yield startup.record_startup, boot, "job_start", "median 0.35 s a job of a local run (warm job starts)"
    rule = {"jobs": 2, "seconds": 103.0, "max_rss_mb": 7700.0, "unit": "IG gradient steps", "seconds_per_unit": 11.6,
            "hours_paper": 190.0, "paper_shards": 16, "hours_per_shard_paper": 11.89,
            "slurm": {"mem_mb": 16000, "runtime_min": 720, "memory_fits": True, "cpu_runtime_fits": True}}  # fmt: skip
    shape = {"rules": {"attribute": rule, "plot": {"unit": "fixed", "jobs": 1, "seconds": 3.0}},
             "rehearsal": {"cores": 2}, "cpu_hours_paper": 339.2}  # fmt: skip
    yield paper_shape.record_paper_shape, shape, "paper_shape", "about 339 CPU hours on 2 cores (IG 190)"
    cost = {"architecture": "longformer", "tokens": 2048, "forward_s": 3.0, "forward_backward_s": 9.4,
            "attnlrp_s": 10.5,
            "attnlrp_over_forward_backward": 1.1, "ig50_s": 598.0, "ig50_measured": False, "ig_steps": 4,
            "ig50_over_attnlrp": 53.0, "attnlrp_per_document_over_alone": 1.32, "attnlrp_documents": 2}  # fmt: skip
    made = {"git_commit": "0" * 40, "created": "2026-12-05T00:00:00+00:00", "config": {"device": "cpu"}}
    lrp = {"device": "a CPU", "torch": "2.13.0+cpu", "rows": [cost], "provenance": made}
    yield attnlrp.record_attnlrp, lrp, "attnlrp_vs_ig", "53 × on a CPU; AttnLRP 1.1 × one forward + backward"
    yield attnlrp.record_attnlrp, lrp, "documents_per_pass", "not on a CPU (1.32 × per document at 2)"
    base = {"pipeline_s": 579.0, "cpu_s": 1086.0, "jobs": 34, "headline": {}, "rules": {"attribute": 75.0}}
    gen = {"pipeline_s": 300.0, "cpu_s": 700.0, "jobs": 20, "headline": {"exact_match": 1.0}, "lds": {"surrogate": 0.8}}
    gen["rules"] = {"train_generator": 194.0}
    task = {"pipeline_s": 650.0, "cpu_s": 1100.0, "jobs": 36, "headline": {"micro_f1": 0.8, "n_examples": 32}}
    grid = {"pipeline_s": 2560.0, "cpu_s": 4257.0, "jobs": 175, "rules": {"attribute": 385.0}}
    seeds = {**grid, "best_by_lds": {"surrogate": 6}}
    pipeline = {pipeline_runs.CLASSIFICATION: base, "config/generation.yaml": gen, "config/multilabel.yaml": task,
                "config/grid.yaml": grid, "config/generation_grid.yaml": seeds,
                "config/generation_scratch.yaml": {**gen, "pipeline_s": 270.0}}  # fmt: skip
    yield pipeline_runs._records, pipeline, "default_run", "9 min 39 s of pipeline"
    yield pipeline_runs._records, pipeline, "generation_default", "0.52 × the classification default (5 min 00 s"
    yield pipeline_runs._records, pipeline, "generation_scratch", "0.47 × the classification default (4 min 30 s"
    yield pipeline_runs._records, pipeline, "task_defaults", "multi-label 1.12 ×"
    yield pipeline_runs._records, pipeline, "grid", "42 min 40 s for config/grid.yaml's runs, 175 jobs"
    yield pipeline_runs._records, pipeline, "generation_seeds", "best by LDS: surrogate in 6 runs"
    cut = [{"sentences": 2000, "bytes": 60000, "kept": 2000, "tokenizations": 1, "s": 0.2, "cpu_s": 0.2, "old_s": 1.0,
            "old_cpu_s": 1.0},
           {"sentences": 30000, "bytes": 945000, "kept": 3100, "tokenizations": 3, "s": 2.5, "cpu_s": 2.5}]  # fmt: skip
    yield prompts.record, {"rows": cut}, "prompt_cut", "2.5 s for 30 000 sentences (945 KB, 3 tokenizations)"
    methods = {"attnlrp": {"s": 1.0, "forwards": 1, "backwards": 1}}
    door = {"default": {"s": 9.5, "methods": methods}, "all": {"s": 90.0, "methods": methods}}
    cited = {"attnlens": door, "context_cite": {"s": 142.5, "ablations": 64}, "context_cite_over_default": 15.0,
             "context_cite_over_all": 1.58}  # fmt: skip
    yield cite_gemma.record, cited, "cite_gemma", "9.5 s at its defaults (the methods of a few forwards), 15.0 × faster"


#: The tables each record's writer gives (docs/benchmarks.md prints each one, generated).
TABLES = {
    "attention_summaries": {"lengths"}, "architectures": {"lengths"}, "decoders": {"rows"},
    "explanation_methods": {"methods"}, "ig_step": {"throughput"}, "targets": {"labels", "spans"},
    "similarity": {"costs"}, "topology": {"lengths", "bottleneck"}, "pairs": {"pairs"}, "explorer": {"pages"},
    "long_contexts": {"lengths"}, "beside": {"tools"}, "gpu_proof": set(),
    "generation_kernel_sets": {"runs", "leaderboard"}, "job_start": {"imports", "rules"}, "paper_shape": {"rules"},
    "attnlrp_vs_ig": {"costs"}, "documents_per_pass": set(),
    "default_run": {"rules"}, "generation_default": {"rules", "lds"}, "generation_scratch": {"rules", "lds"},
    "task_defaults": {"runs"}, "grid": {"rules"},
    "generation_seeds": {"best_by_lds", "rules"}, "prompt_cut": {"rows"}, "cite_gemma": {"tools"},
    "long_contexts_gemma": {"lengths"}, "hierarchy_gemma": {"methods"}, "slurm_study": set(),
}  # fmt: skip


@pytest.mark.parametrize("case", list(_writers()), ids=lambda c: c[2])
def test_each_bench_writes_its_record_from_its_result(case, tmp_path, monkeypatch):
    """Every writer runs on a result of its bench's shape and states its figures: a bench that ran for an hour does
    not fail at its record."""
    writer, result, rid, says = case
    monkeypatch.setattr(records, "RECORDS", tmp_path)
    monkeypatch.setattr(records, "machine", lambda: "a 2-core test machine")
    writer(result)
    got = json.loads((tmp_path / f"{rid}.json").read_text(encoding="utf-8"))
    assert says in got["answer"], got["answer"]
    assert got["bench"] == records.records()[rid].bench and got["question"]
    assert set(got["tables"]) == TABLES[rid]
    for name, table in got["tables"].items():
        assert table["rows"] and all(len(row) == len(table["header"]) for row in table["rows"]), name


def test_a_quoted_figure_no_record_holds_is_one_line():
    found = records.records()
    with pytest.raises(ValueError, match=r"default_run\.lunch -->: no such record figure"):
        records.rendered("<!-- record: default_run.lunch -->1 h<!-- /record -->", found)


def test_a_section_table_is_the_records_and_an_edited_cell_is_found(tmp_path, monkeypatch):
    """A section's table of measured figures is generated from its record's ``tables``, under a line that says what,
    where and when; a cell typed over by hand makes the doc stale, and a table no record has is one clear error."""
    found = records.records()
    rid, name = "explorer", "pages"
    rendered = records.section_table(found, rid, name)
    row = found[rid].tables[name]["rows"][0]
    assert f"| {' | '.join(row)} |" in rendered and found[rid].commit in rendered.splitlines()[0]
    doc = tmp_path / "doc.md"
    edited = rendered.replace(row[1], "1.00 MB", 1)
    doc.write_text(f"<!-- records: table {rid}.{name} -->\n{edited}\n{records.TABLE_END}\n", encoding="utf-8")
    monkeypatch.setattr(records, "DOCS", (doc,))
    monkeypatch.setattr(records, "ROOT", tmp_path)
    assert records.stale(found) == ["doc.md"]
    doc.write_text(f"<!-- records: table {rid}.nope -->\n\n{records.TABLE_END}\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"records: table explorer\.nope"):
        records.stale(found)


def test_the_suites_measured_since_records_began_generate_their_sections_tables():
    """Each record its bench wrote with tables has every one of them in docs/benchmarks.md."""
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    tabled = {(rid, n) for rid, r in records.records().items() for n in r.tables}
    assert len(tabled) >= 9
    missing = [f"{rid}.{n}" for rid, n in sorted(tabled) if f"<!-- records: table {rid}.{n} -->" not in text]
    assert not missing
