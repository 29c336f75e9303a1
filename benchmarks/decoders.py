"""The decoder benchmark on one device: ``python -m benchmarks.decoders --device cuda --out results/bench`` writes
``decoders_<device>.json`` (see ``benchmarks/suites/decoders.py`` for what each row measures).

On a card every family, shape and length runs in this process, one after another, the file rewritten after each
row so that a run stopped at its time limit keeps what it measured; a row that runs out of the card's memory
records that and the next one runs. ``make bench`` runs the CPU plan (``decoders.json``) through ``bench.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from benchmarks.measuring import write_result
from benchmarks.suites.decoders import FAMILIES, LENGTHS, SHAPES, bench_decoder_length, record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=["small", "0.5b"])
    parser.add_argument("--lengths", nargs="+", type=int, default=list(LENGTHS))
    parser.add_argument("--record", metavar="JSON", help="run nothing: record a decoders_cpu.json written before")
    args = parser.parse_args(argv)
    if args.record:
        record(json.loads(Path(args.record).read_text(encoding="utf-8")))
        return
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("decoders: error: --device: no CUDA device is visible here")
    card = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") else "cpu"
    rows: list[dict] = []
    name = f"decoders_{args.device.split(':')[0]}"
    for n in args.lengths:  # every family at a length before the next length: a stopped run covers them all
        for shape in args.shapes:
            for family in args.families:
                t0 = time.perf_counter()
                try:
                    row = bench_decoder_length(family, shape, n, args.device)
                except torch.OutOfMemoryError as err:
                    row = {"family": family, "shape": shape, "tokens": n, "error": f"out of memory: {err}"[:300]}
                    torch.cuda.empty_cache()
                row["wall_s"] = round(time.perf_counter() - t0, 2)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                Path(args.out).mkdir(parents=True, exist_ok=True)
                write_result(args.out, name, {"card": card, "rows": rows})
    if card == "cpu":  # the CPU's answer: the record decoders, from the result just written (its provenance)
        record(json.loads((Path(args.out) / f"{name}.json").read_text(encoding="utf-8")))


if __name__ == "__main__":
    main()
