"""Benchmarks behind the performance targets: ``make bench`` → ``results/bench/<suite>.json``.

One module per suite under ``benchmarks/suites/`` (its docstring says what it measures and against which
target); this driver runs them, one after another in this process, and writes each result with its
provenance. Three suites run scripts of their own in a fresh interpreter: ``attnlrp.json``
(``benchmarks/attnlrp.py``, which also runs on a GPU), ``startup.json`` (``benchmarks/startup.py``) and
``kernel_sets.json`` (``benchmarks/kernel_sets.py``: the generation default trained and judged under the native and
the portable CPU kernels, about 20 minutes). A suite that answers
a question of ``benchmarks/records`` writes its record too (``record(result)`` in its module; the scripts write
theirs), and ``python -m benchmarks.records`` then carries the new figures into the docs. ``--record DIR`` runs
nothing and writes the records of the results in ``DIR``. ``python -m benchmarks.bench --out results/bench
[--skip-pipeline] [--only SUITE]`` (``--help`` lists them).

``paper_shape.json``: the classification study at the paper's model shape on a handful of documents, with
its extrapolation to the paper's run (``benchmarks/paper_shape.py``'s rehearsal; alone: ``make paper-shape``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.measuring import ROOT, write_result
from benchmarks.paper_shape import rehearse
from benchmarks.suites import (
    architectures,
    attention,
    attribution,
    contexts,
    decoders,
    explanations,
    explorer,
    foundation,
    gguf,
    pairs,
    prompts,
    similarity,
    targets,
    topology,
)


def _script(name: str) -> dict:
    """``python -m benchmarks.<name>`` at its defaults, in an interpreter of its own: its ``<name>.json``."""
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", f"benchmarks.{name}", "--out", tmp]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        return json.loads((Path(tmp) / f"{name}.json").read_text())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    parser.add_argument("--skip-pipeline", action="store_true")
    suites = {
        "topology": lambda: topology.bench_topology(),
        "similarity": lambda: similarity.bench_similarity(),
        "attribution": lambda: attribution.run(args.config),
        "targets": lambda: targets.run(args.config),
        "attention": lambda: {"lengths": attention.bench_attention()},
        "architectures": lambda: {"lengths": architectures.bench_architectures(args.lengths, args.architectures)},
        "decoders": lambda: {"rows": decoders.bench_decoders()},
        "gguf": lambda: gguf.bench_gguf(),
        "prompts": lambda: prompts.bench_prompts(),
        "contexts": lambda: {"rows": contexts.bench_contexts()},
        "explanations": lambda: explanations.bench_explanations(),
        "pairs": lambda: {"pairs": pairs.bench_pairs()},
        "explorer": lambda: explorer.bench_explorer(),
        "attnlrp": lambda: _script("attnlrp"),
        "startup": lambda: _script("startup"),
        "kernel_sets": lambda: _script("kernel_sets"),
        "foundation": lambda: foundation.run(args.config, args.skip_pipeline),
        "paper_shape": lambda: rehearse(cores=os.cpu_count() or 2),
    }
    parser.add_argument("--only", choices=list(suites), default=None)
    parser.add_argument("--record", metavar="DIR", help="run nothing: record the results in DIR (their commit, date)")
    names, only = list(architectures.BASE_MODELS), "architectures.json: these"
    parser.add_argument("--architectures", nargs="+", choices=names, default=names, help=f"{only} architectures only")
    parser.add_argument("--lengths", nargs="+", type=int, default=[2048, 4096, 8192], help=f"{only} lengths only")
    args = parser.parse_args(argv)
    #: The suites that answer a question of benchmarks.records: each writes its record from its result.
    recorders = {
        "attention": attention.record,
        "architectures": architectures.record,
        "decoders": decoders.record,
        "gguf": gguf.record,
        "prompts": prompts.record,
        "explanations": explanations.record,
        "attribution": attribution.record,
        "targets": targets.record,
        "similarity": similarity.record,
        "topology": topology.record,
        "pairs": pairs.record,
        "explorer": explorer.record,
    }
    for name, write in recorders.items() if args.record else ():
        if args.only in (None, name) and (path := Path(args.record) / f"{name}.json").exists():
            write(json.loads(path.read_text(encoding="utf-8")))  # a result measured before: its provenance's commit
    if args.record:
        return
    for name, suite in suites.items():
        if args.only in (None, name):
            result = suite()
            write_result(args.out, name, result)
            if name in recorders:
                recorders[name](result)


if __name__ == "__main__":
    main()
