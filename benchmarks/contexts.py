"""The answer methods at long contexts: ``python -m benchmarks.contexts --out results/bench`` writes ``contexts.json``
(see ``benchmarks/suites/contexts.py`` for what each row measures); ``make bench`` runs the same plan through
``bench.py``. On a card, ``--device cuda --shape 0.5b`` writes ``contexts_cuda.json``: every row in this process,
times synchronised, memory the card's peak allocated bytes, leave-one-out at every length. The file is rewritten
after each row, so that a run stopped early keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from benchmarks.measuring import STRICT_MALLOC, bench_child, write_result
from benchmarks.records import seconds, span, thousands, write_record
from benchmarks.suites.contexts import (
    LENGTHS,
    PRETRAINED,
    bench_attention,
    bench_context_length,
    bench_leave_one_out,
)
from benchmarks.suites.decoders import FAMILIES, SHAPES

#: What ``--only`` runs of each row: its function in :mod:`benchmarks.suites.contexts`.
PARTS = {"all": "bench_context_length", "leave_one_out": "bench_leave_one_out", "attention": "bench_attention"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--shape", choices=[*SHAPES, *PRETRAINED], default="small", help="random weights, or real")
    parser.add_argument("--lengths", nargs="+", type=int, default=list(LENGTHS))
    parser.add_argument("--only", choices=list(PARTS), default="all", help="every method, or one part alone")
    parser.add_argument("--append", action="store_true", help="keep the rows of the result in --out run before")
    parser.add_argument("--device", default="cpu", help="cpu (default: each row in a fresh interpreter) or cuda[:N]")
    args = parser.parse_args(argv)
    on_card = args.device.startswith("cuda")
    if on_card and not torch.cuda.is_available():
        sys.exit("contexts: error: --device: no CUDA device is visible here")
    strict = {**os.environ, **STRICT_MALLOC}
    name = ("contexts_cuda" if on_card else "contexts") + (f"_{args.shape}" if args.shape in PRETRAINED else "")
    card = {"card": torch.cuda.get_device_name(torch.device(args.device))} if on_card else {}
    rows: list[dict] = _earlier(Path(args.out) / f"{name}.json", args) if args.append else []
    for n in args.lengths:  # every family at a length before the next: a stopped run covers them all
        for family in args.families:
            t0 = time.perf_counter()
            try:
                row = (
                    on_card_row(args.only, family, args.shape, n, args.device, max(args.lengths))
                    if on_card
                    else bench_child("contexts", PARTS[args.only], n, strict, family, args.shape)
                )
            except (RuntimeError, torch.OutOfMemoryError) as failed:
                row = {"family": family, "shape": args.shape, "tokens": n, "not_run": str(failed).splitlines()[0]}
                if on_card:
                    torch.cuda.empty_cache()
            row["wall_s"] = round(time.perf_counter() - t0, 2)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            Path(args.out).mkdir(parents=True, exist_ok=True)
            write_result(args.out, name, {**card, "rows": rows})
    if args.only in ("all", "attention") and not on_card:
        record_contexts(rows, args.shape)


def _earlier(path: Path, args) -> list[dict]:
    """The rows of the result at ``path`` (``--append``) but those of the families and lengths run now."""
    if not path.exists():
        return []
    found = json.loads(path.read_text(encoding="utf-8"))["rows"]
    return [r for r in found if not (r["family"] in args.families and r["tokens"] in args.lengths)]


def record_contexts(rows: list[dict], shape: str = "small") -> None:
    """The record of a CPU run over the families and lengths (``long_contexts``; ``long_contexts_gemma`` on real
    weights): at the shortest and the longest length run, the answer rows' attention and AttnLRP against a forward
    (+ backward), the memory beyond the forward, and leave-one-out's gain from the shared prefix where it ran."""
    run = [r for r in rows if "attention_over_forward" in r]
    if not run:
        return
    parts, figures = [], {}
    for n in sorted({min(r["tokens"] for r in run), max(r["tokens"] for r in run)}):
        at = [r for r in run if r["tokens"] == n]
        extra = [r["attention_extra_over_dense"] for r in at if r.get("attention_extra_over_dense") is not None]
        lrp = [r["attnlrp_over_forward_backward"] for r in at if "attnlrp_over_forward_backward" in r]
        attention = [r["attention_over_forward"] for r in at]
        text = f"at {n:,} tokens".replace(",", " ") + f" the answer rows' attention {span(attention)} × a forward"
        text += f" (≤ {100 * max(extra):.1f} % of the dense attention beyond it)" if extra else ""
        parts.append(text + (f", AttnLRP {span(lrp)} × a forward + backward" if lrp else ", AttnLRP not run"))
        figures[str(n)] = {"attention_over_forward": attention, "attnlrp_over_forward_backward": lrp, "extra": extra}
    loo = [r["loo_speedup"] for r in run if "loo_speedup" in r]
    if loo:
        longest = max(r["tokens"] for r in run if "loo_speedup" in r)
        parts.append(f"leave-one-out from the shared prefix {span(loo)} × cheaper (up to {longest} tokens)")
        figures["loo_speedup"] = loo
    families = sorted({r["family"] for r in run})
    answer, tables = "; ".join(parts) + f" ({', '.join(families)})", {"lengths": lengths_table(run)}
    if shape in PRETRAINED:  # real weights: a record of their own
        write_record(
            "long_contexts_gemma",
            "What do the answer methods cost at long contexts on Gemma 3 270M?",
            answer,
            "[long contexts on real weights](#long-contexts-on-real-weights-gemma-3-270m-issue-82)",
            "benchmarks.contexts",
            figures,
            tables=tables,
        )
        return
    write_record(
        "long_contexts",
        "What do the answer methods cost at long contexts?",
        answer,
        "[the answer methods at long contexts](#the-answer-methods-at-long-contexts-contextsjson-issue-70)",
        "benchmarks.contexts",
        figures,
        tables=tables,
    )


def lengths_table(rows: list[dict]) -> dict:
    """One row a family and length: Hugging Face's forward, the answer rows' attention over it and its memory beyond
    the forward's own, and AttnLRP over a forward + backward."""
    table = [
        [r["family"], thousands(r["tokens"]), seconds(r["forward_s"]), f"{r['attention_over_forward']:.2f}",
         "–" if r.get("attention_extra_over_dense") is None else f"{100 * r['attention_extra_over_dense']:.2f} %",
         f"{r['attnlrp_over_forward_backward']:.2f}" if "attnlrp_over_forward_backward" in r else "not run"]
        for r in sorted(rows, key=lambda r: r["tokens"])
    ]  # fmt: skip
    header = ["family", "tokens", "forward", "answer rows' attention ÷ forward"]
    return {"header": [*header, "its memory beyond the forward ÷ dense", "AttnLRP ÷ fwd + bwd"], "rows": table}


def on_card_row(only: str, family: str, shape: str, n: int, device: str, loo_tokens: int) -> dict:
    """One row on a card, in this process: leave-one-out at every length up to ``loo_tokens``."""
    if only == "leave_one_out":
        return bench_leave_one_out(family, shape, n, device)
    if only == "attention":
        return bench_attention(family, shape, n, device)
    return bench_context_length(family, shape, n, loo_tokens, device)


if __name__ == "__main__":
    main()
