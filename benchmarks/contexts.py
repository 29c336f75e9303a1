"""The answer methods at long contexts on the CPU: ``python -m benchmarks.contexts --out results/bench`` writes
``contexts.json`` (see ``benchmarks/suites/contexts.py`` for what each row measures); ``make bench`` runs the same
plan through ``bench.py``. The file is rewritten after each row, so that a run stopped early keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from benchmarks.measuring import STRICT_MALLOC, bench_child, write_result
from benchmarks.suites.contexts import LENGTHS
from benchmarks.suites.decoders import FAMILIES, SHAPES

#: What ``--only`` runs of each row: its function in :mod:`benchmarks.suites.contexts`.
PARTS = {"all": "bench_context_length", "leave_one_out": "bench_leave_one_out"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--shape", choices=list(SHAPES), default="small")
    parser.add_argument("--lengths", nargs="+", type=int, default=list(LENGTHS))
    parser.add_argument("--only", choices=list(PARTS), default="all", help="every method, or leave-one-out alone")
    args = parser.parse_args(argv)
    strict = {**os.environ, **STRICT_MALLOC}
    rows: list[dict] = []
    for n in args.lengths:  # every family at a length before the next: a stopped run covers them all
        for family in args.families:
            t0 = time.perf_counter()
            try:
                row = bench_child("contexts", PARTS[args.only], n, strict, family, args.shape)
            except RuntimeError as failed:
                row = {"family": family, "shape": args.shape, "tokens": n, "not_run": str(failed).splitlines()[0]}
            row["wall_s"] = round(time.perf_counter() - t0, 2)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            Path(args.out).mkdir(parents=True, exist_ok=True)
            write_result(args.out, "contexts", {"rows": rows})


if __name__ == "__main__":
    main()
