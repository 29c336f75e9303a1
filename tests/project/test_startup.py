"""Light modules stay light: importing them in a fresh process loads none of the heavy libraries, and the rules
of ``report.smk`` and ``findings.smk`` (their stage modules among them) start without torch.

A job pays for every library its modules import before its first line of work (``python -X importtime``:
torch about 1.5 s, scikit-learn 1.7 s, seaborn with scipy.stats 2 s, transformers 0.6 s, captum 0.6 s on a 2-core
machine of the project's kind). These modules are what the artifact readers, tables, figures, findings and
comparisons are built from, so they load a heavy library only inside the one function that needs it
(``benchmarks/startup.py`` measures each stage module and each rule's start-up).
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Libraries a light module must not load when imported.
HEAVY = ("torch", "transformers", "captum", "sklearn", "seaborn", "accelerate", "datasets")

#: Modules that import none of :data:`HEAVY`, in the order the check imports them.
LIGHT = (
    "attnlens",
    "attnlens.errors",
    "attnlens.pipeline.config",
    "attnlens.pipeline.grid",
    "attnlens.families",
    "attnlens.pipeline.outputs",
    "attnlens.data.tokens",
    "attnlens.io",
    "attnlens.pipeline.runtime",
    "attnlens.pipeline.jobserver",
    "attnlens.pipeline.entry",
    "attnlens.pipeline.manifest",
    "attnlens.data.corpus",
    "attnlens.data.sources",
    "attnlens.classifier.selection",
    "attnlens.stats",
    "attnlens.topology.persistence",
    "attnlens.pairs.pair_artifacts",
    "attnlens.attention.layers",
    "attnlens.attention.kernels",
    "attnlens.similarity.metrics",
    "attnlens.similarity.aggregate",
    "attnlens.similarity.paper",
    "attnlens.attribution.methods",
    "attnlens.tasks",
    "attnlens.attribution.artifacts",
    "attnlens.attribution.leaderboard",
    "attnlens.attribution.ranking_faithfulness",
    "attnlens.attribution.sanity_check",
    "attnlens.findings.verdicts",
    "attnlens.findings.statements",
    "attnlens.render.escape",
    "attnlens.render.figures",
    "attnlens.render.overlays",
    "attnlens.render.tables",
    "attnlens.render.findings_report",
    # the light rules' stage modules: every rule of report.smk and findings.smk
    "attnlens.generation.answer_artifacts",
    "attnlens.generation.answer_leaderboard",
    "attnlens.attribution.datamodels",
    "attnlens.stages.report",
    "attnlens.stages.findings",
)

_PROBE = """
import importlib, json, sys
heavy, found = {heavy!r}, {{}}
for name in {modules!r}:
    importlib.import_module(name)
    loaded = [h for h in heavy if h in sys.modules and h not in sum(found.values(), [])]
    if loaded:
        found[name] = loaded
print(json.dumps(found))
"""


def test_light_modules_load_no_heavy_library():
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY, modules=LIGHT)], capture_output=True, text=True, check=True
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == {}, f"importing these loads heavy libraries (first importer named): {found}"


def test_the_probe_sees_a_heavy_import():
    """The check can fail: a module that does import torch is named."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(heavy=HEAVY, modules=("attnlens.io", "attnlens.models"))],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"attnlens.models": ["torch", "transformers"]}
