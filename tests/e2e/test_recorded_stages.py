"""The stages that end the classification, topology and pairs studies, and those that prepare their data and run the
topology and pair attributions, each called again on its own, in process, from
the record its job left in the `.test` run (:func:`attnlens.pipeline.entry.rerun_job`: the files and keys the job was
given, bound as the one entry binds them): each writes what its job wrote. Without Snakemake, its sharding or its job
server; the per-example stages before them are in ``tests/unit/stages/``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnlens.pipeline.compare import same
from attnlens.pipeline.entry import rerun_job
from attnlens.pipeline.runtime import job_record_path
from tests.support.helpers import ROOT, tiny_config

#: Each rule of the `.test` run that a table, a figure, a page, the manifest or a study's last numbers come from, and
#: the data, topology and pair stages the per-example tests of tests/unit/stages/ do not call.
RULES = (
    "prepare_dataset",
    "prepare_pairs",
    "train_pair_encoder",
    "attribute_pairs",
    "pair_convergence",
    "topology",
    "plot_head_importance",
    "plot_attention",
    "count_topk",
    "render_overlays",
    "build_explorers",
    "attribution_tables",
    "attribution_overlays",
    "explanation_leaderboard",
    "plot_faithfulness",
    "aggregate_similarity",
    "plot_similarity",
    "target_agreement",
    "query_attention",
    "similarity_examples",
    "bottleneck_distances",
    "plot_topology",
    "pair_topology",
    "pair_tables",
    "plot_pairs",
    "manifest",
)


#: What a file keeps of the process that wrote it, not of the stage: a saved tokenizer's config records whether the
#: process read the hub offline (the run's jobs did, under the suite's HF_HUB_OFFLINE; this process's loader may not).
OF_THE_PROCESS = ("tokenizer_config.json",)


def _files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    return [p for p in sorted(path.rglob("*")) if p.is_file() and p.name[0] != "." and p.name not in OF_THE_PROCESS]


@pytest.mark.parametrize("rule", RULES)
def test_a_stage_called_again_from_its_record_writes_what_its_job_wrote(rule, tiny_run, tmp_path):
    """Compared as two runs are (attnlens.pipeline.compare: every number to the last bit, wall times and provenance
    aside). Why exact: the stage runs the same code on the same input files and config keys as its job, on this
    machine, one thread either way."""
    records = sorted((tiny_run / "results" / "logs" / rule).glob("*.job.json"))  # a sharded rule's: its first shard's
    record = records[0]
    assert record == job_record_path(record.with_name(record.name.replace(".job.json", ".log")))
    given = json.loads(record.read_text(encoding="utf-8"))["given"]
    config = tiny_config(ROOT) if rule == "manifest" else None
    fn = rerun_job(record, tiny_run, tmp_path, config)
    assert fn.__name__ == f"run_{rule}"
    outputs = [p for paths in given["output"].values() for p in ([paths] if isinstance(paths, str) else paths)]
    assert outputs
    results = tmp_path / "results"
    for output in outputs:
        theirs = {p.relative_to(tiny_run / "results") for p in _files(tiny_run / output)}
        ours = {p.relative_to(results) for p in _files(tmp_path / output)}
        assert ours == theirs, output
        differ = [str(rel) for rel in sorted(ours) if not same(tiny_run / "results", results, rel.as_posix())]
        assert not differ, f"{rule}: {differ} differ from what its job wrote"
