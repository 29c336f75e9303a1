"""The stages that end the classification, topology and pairs studies, each called again on its own, in process, from
the record its job left in the `.test` run (:func:`attnlens.pipeline.entry.rerun_job`: the files and keys the job was
given, bound as the one entry binds them): each writes what its job wrote. Without Snakemake, its sharding or its job
server; the per-example stages before them are in ``tests/unit/stages/``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import load_file

from attnlens.pipeline.entry import rerun_job
from attnlens.pipeline.runtime import job_record_path
from tests.support.helpers import ROOT, tiny_config

#: Each rule of the `.test` run that a table, a figure, a page, the manifest or a study's last numbers come from.
RULES = (
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

#: Files a job writes that say when or how it ran, not what it computed: figures (a PNG's or PDF's metadata holds
#: its time), the explorer's pages and the manifest (each names its job's record and log).
AS_WRITTEN = (".png", ".pdf", ".html", ".json")


def _files(path: Path) -> dict[str, Path]:
    if path.is_dir():
        return {str(p.relative_to(path)): p for p in sorted(path.rglob("*")) if p.is_file() and p.name[0] != "."}
    return {"": path}


def _same(ours: Path, theirs: Path) -> None:
    """A table as the job wrote it: the same rows (parquet: its frame, safetensors: its arrays, the provenance aside;
    text: its lines); a figure, page or record: there, and not empty."""
    if ours.suffix == ".parquet":
        pd.testing.assert_frame_equal(pd.read_parquet(ours), pd.read_parquet(theirs))
    elif ours.suffix == ".safetensors":
        mine, job = load_file(ours), load_file(theirs)
        assert mine.keys() == job.keys() and all(np.array_equal(mine[k], job[k]) for k in mine)
    elif ours.suffix in AS_WRITTEN:
        assert ours.stat().st_size > 0
    else:
        assert ours.read_text(encoding="utf-8") == theirs.read_text(encoding="utf-8"), ours.name


@pytest.mark.parametrize("rule", RULES)
def test_a_stage_called_again_from_its_record_writes_what_its_job_wrote(rule, tiny_run, tmp_path):
    """Why exact for the tables: the stage runs the same code on the same input files and config keys as its job, on
    this machine, one thread either way."""
    logs = {p.parent.name: p for p in (tiny_run / "results" / "logs").rglob("*.job.json")}
    record = logs[rule]
    assert record == job_record_path(record.with_name(f"{rule}.log"))
    given = json.loads(record.read_text(encoding="utf-8"))["given"]
    config = tiny_config(ROOT) if rule == "manifest" else None
    fn = rerun_job(record, tiny_run, tmp_path, config)
    assert fn.__name__ == f"run_{rule}"
    outputs = [p for paths in given["output"].values() for p in ([paths] if isinstance(paths, str) else paths)]
    assert outputs
    for output in outputs:
        theirs, ours = _files(tiny_run / output), _files(tmp_path / output)
        assert set(ours) == set(theirs), output
        for name, path in ours.items():
            _same(path, theirs[name])
