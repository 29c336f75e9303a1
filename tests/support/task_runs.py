"""The tasks' session runs (``regression_run``, ``multilabel_run``, ``qa_run``): the `.test` configuration with
``data.task`` set and the smallest corpus that still trains, splits and showcases (12 documents, one shard per
sharded rule). Their fixtures reach every test module through conftest (``tests/e2e/test_task_runs.py`` and
``tests/e2e/test_browser.py`` read them). And the generation study's overlay, :data:`GENERATION_RUN` (its run:
``tests/e2e/test_generation_run.py``; its stages one by one: ``tests/unit/stages/test_generation_stages.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.helpers import GUARD, ROOT, merged, run_snakemake, tiny_config, write_config
from tests.support.session_runs import session_run

#: The `.test` configuration as a regression: what differs from it (the rest is `.test`'s).
REGRESSION = {
    "studies": ["classification"],
    "data": {"task": "regression", "synthetic": {"n_documents": 12, "label_noise": 0.25}},  # 4 test: one a quartile
    "importance": {"max_examples": 2},
    "attention": {"n_shards": 1},
    "attribution": {"n_shards": 1},
    "explanations": {"n_shards": 1},
    "faithfulness": {"fractions": [0.5]},
    "figures": {"topk_role": "highest_predicted"},
}


def task_run(work: Path, overlay: dict, targets: tuple[str, ...] = ()) -> Path:
    """The `.test` configuration with ``overlay`` in ``work``, built up to ``targets`` (every study output when
    none), one thread a job as ``tiny_run``."""
    write_config(work, merged(tiny_config(ROOT), overlay))
    out = run_snakemake(
        ROOT, "--directory", str(work), "--cores", "1", "--show-failed-logs", *targets, timeout=GUARD["run"]
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return work


@session_run("regression_run", seconds=60)
def _regression(work: Path) -> Path:
    """The `.test` configuration as a regression, to the end of its study."""
    return task_run(work, REGRESSION)


@pytest.fixture(scope="session")
def regression_run(session_runs) -> Path:
    return session_runs.get("regression_run")


#: The `.test` configuration as a multi-label run, every label of every test document explained (``all``), so that
#: every document has label pairs to compare; three leaderboard methods (raw attention, a gradient, AttnLRP), each
#: explaining every label (``explanations.targets: every``).
MULTILABEL_RUN = {
    **REGRESSION,
    "data": {"task": "multilabel", "synthetic": {"n_documents": 12, "label_noise": 0.0}},
    "attribution": {"n_shards": 1, "target": "all"},
    "explanations": {
        "n_shards": 1,
        "methods": ["attention_last", "grad_input", "attnlrp"],
        "baseline": "ig",
        "targets": "every",
    },
    "faithfulness": {"fractions": [0.5], "rankings": ["ig", "grad_input", "attnlrp", "random"]},
    "figures": {"topk_role": "most_confident_0"},
}
#: What the multi-label tests read, and so all the run builds (its DAG's share of the study: no faithfulness,
#: leaderboard, overlays or paper figures, which the classification and regression runs cover)
MULTILABEL_TARGETS = (
    "results/paper/tables/target_agreement.csv",
    "results/explorer",
    "results/explanations/shard0.parquet",
)


@session_run("multilabel_run", seconds=60)
def _multilabel(work: Path) -> Path:
    """The `.test` configuration as a multi-label run, up to what its tests read."""
    return task_run(work, MULTILABEL_RUN, MULTILABEL_TARGETS)


@pytest.fixture(scope="session")
def multilabel_run(session_runs) -> Path:
    return session_runs.get("multilabel_run")


#: The `.test` configuration as extractive question answering: short contexts (about 70 tokens with the question,
#: so that no answer is cut at 128), every rule of the study up to its pages, AttnLRP beside IG in the leaderboard.
QA_RUN = {
    **REGRESSION,
    "data": {"task": "qa", "synthetic": {"n_documents": 12, "min_words": 30, "max_words": 50}},
    "explanations": {"n_shards": 1, "methods": ["grad_input", "attnlrp"], "baseline": "ig"},
    "faithfulness": {"fractions": [0.5], "rankings": ["ig", "attnlrp", "random"]},
    "figures": {"topk_role": "wrong_span"},
}
#: What the QA tests read (the single-target rules after them are the regression run's to cover)
QA_TARGETS = (
    "results/paper/tables/target_agreement.csv",
    "results/paper/tables/query_attention.csv",
    "results/explorer",
    "results/faithfulness/curves.parquet",
)


@session_run("qa_run", seconds=60)
def _qa(work: Path) -> Path:
    """The `.test` configuration as a question-answering run, up to what its tests read."""
    return task_run(work, QA_RUN, QA_TARGETS)


@pytest.fixture(scope="session")
def qa_run(session_runs) -> Path:
    return session_runs.get("qa_run")


#: The `.test` configuration as a generation run: what differs from it.
GENERATION_RUN = {
    "studies": ["generation"],
    "data": {"task": "generation", "synthetic": {"n_documents": 24, "min_words": 20, "max_words": 30, "hops": 1}},
    "model": {"source": "from_config", "architecture": "llama", "max_length": 128},
    "attribution": {"target": "true"},
    "generation": {
        "n_examples": 3,
        "n_ablations": 16,
        "n_heldout": 8,
        "ig_steps": 4,
        "showcase": 2,
        "n_bootstrap": 50,
        "scratch": {"hidden_size": 32, "num_layers": 1, "num_heads": 2},
        "train": {"steps": 8, "batch_size": 4},
        "min_exact_match": 0.0,  # 8 steps teach a decoder nothing: explained all the same, to test the study's path
        "learned": {"n_examples": 4, "n_ablations": 8, "steps": 50},
        "n_shards": 2,  # the answer rules' shards: the run reads every one
    },
}
