"""AttnLRP against integrated gradients at the paper's shape: seconds and peak memory per document.

``python -m benchmarks.attnlrp`` (also ``make bench``, as ``results/bench/attnlrp.json``) builds base-size
classifiers with seeded random weights (Longformer: 12 layers × 12 heads, hidden 768, window 512, CLS global;
``--architectures bigbird modernbert`` adds BigBird-base, block 64 and 3 random blocks, and ModernBERT-base)
and, per architecture and length (``--lengths``, default 2 048 and 4 096 tokens), times one document:

* one forward pass without gradient, and one forward + backward of the explained logit to the embedding output
  (parameters frozen, as IG and AttnLRP run): the unit of the target "AttnLRP ≤ 2 × one forward + backward";
* AttnLRP (:func:`attnlens.attribution.lrp.attnlrp`, the one-document API's call), and over ``--documents``
  copies of the document in one pass (:func:`~attnlens.attribution.lrp.attnlrp_batch`, the ``explain`` rule's
  call with ``explanations.batch_size``): seconds per document;
* IG as the ``attribute`` rule runs it (:func:`attnlens.attribution.ig.attribute_example`, fixed steps, internal
  batch ``--ig-batch``) at ``--ig-steps`` steps. IG's cost is its endpoint forward (a batch of two, counted as two
  forwards) plus one batched forward + backward per ``--ig-batch`` steps, so the 50-step figure ``ig50_s`` is the
  endpoint plus the measured batches scaled to ``⌈50 / batch⌉`` of them, unless ``--ig-steps 50`` measures it
  (the default on a GPU; on the CPU 4 steps in batches of 2).

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` above what the model holds; on the CPU the peak resident
set (VmHWM, reset through ``/proc/self/clear_refs``) above the resident set before the call, measured in a second
interpreter with ``MALLOC_MMAP_THRESHOLD_=131072`` (large blocks go back to the system when freed, so a peak is
not hidden by memory the allocator kept from the previous call; its IG runs one internal batch, whose peak is IG's).
On CUDA IG runs under fp16 autocast, as the ``attribute`` rule runs it, and AttnLRP is measured both in float32
(as ``explain`` runs it) and under the same autocast.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from attnlens.attribution.ig import Inputs, attribute_example, freeze, stack_inputs
from attnlens.attribution.lrp import attnlrp, attnlrp_batch, logit_gradients
from attnlens.device import synchronize
from attnlens.io import atomic_path, provenance
from attnlens.models import architecture
from benchmarks.records import figures_beside, measured_paths_changed, seconds, span, stamp, thousands, write_record
from benchmarks.shapes import base_bigbird, base_longformer_long, base_modernbert, reset_peak_rss, rss_kib

ROOT = Path(__file__).resolve().parent.parent

BUILDERS = {
    "longformer": lambda n: base_longformer_long(max(n, 4096)),
    "bigbird": lambda n: base_bigbird(),
    "modernbert": lambda n: base_modernbert(),
}


def document(model, n: int, device: torch.device, seed: int = 0) -> Inputs:
    """``n`` random token ids between a CLS and a SEP id, with the IG baseline (pad ids inside the two)."""
    config = model.config
    arch = architecture(model)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, config.vocab_size, (1, n), generator=g)
    cls_id = getattr(config, "cls_token_id", None) or config.bos_token_id or 0
    sep_id = getattr(config, "sep_token_id", None) or config.eos_token_id or 2
    ids[0, 0], ids[0, -1] = cls_id, sep_id
    baseline = torch.full_like(ids, config.pad_token_id)
    baseline[0, 0], baseline[0, -1] = cls_id, sep_id
    mask = torch.ones_like(ids)
    positions = arch.position_ids(config, n)
    return Inputs(
        input_ids=ids.to(device),
        baseline=baseline.to(device),
        attention_mask=mask.to(device),
        position_ids=None if positions is None else positions.to(device),
        model_args={k: v.to(device) for k, v in arch.forward_args(mask).items()},
    )


def measure(fn, device: torch.device) -> tuple[float, int | None]:
    """Wall seconds and peak extra memory (bytes) of ``fn()``."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        before = rss_kib("VmRSS")
        measured = reset_peak_rss()
    synchronize(device)
    t0 = time.perf_counter()
    result = fn()
    synchronize(device)
    seconds = time.perf_counter() - t0
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) - before
    else:
        peak = (rss_kib("VmHWM") - before) * 1024 if measured else None
    del result
    return seconds, peak


def bench_length(name: str, n: int, device: torch.device, ig_steps: int, ig_batch: int, documents: int = 2) -> dict:
    """One architecture at one length (see the module docstring)."""
    model = BUILDERS[name](n)
    model = freeze(architecture(model).prepare(model).to(device))
    inputs = document(model, n, device)
    half = device.type == "cuda"
    with torch.no_grad():
        model(input_ids=inputs.input_ids, **inputs.forward_kwargs())  # warm-up
        forward_s, _ = measure(lambda: model(input_ids=inputs.input_ids, **inputs.forward_kwargs()), device)
    logit_gradients(model, inputs, [1])  # warm-up of the backward kernels
    fb_s, fb_peak = measure(lambda: logit_gradients(model, inputs, [1]), device)
    lrp_s, lrp_peak = measure(lambda: attnlrp(model, inputs, 1), device)
    row = {
        "architecture": name,
        "tokens": n,
        "forward_s": round(forward_s, 3),
        "forward_backward_s": round(fb_s, 3),
        "forward_backward_peak_bytes": fb_peak,
        "attnlrp_s": round(lrp_s, 3),
        "attnlrp_peak_bytes": lrp_peak,
        "attnlrp_over_forward_backward": round(lrp_s / fb_s, 3),
    }
    if documents > 1:  # the explain rule's pass over several documents (explanations.batch_size)
        together = stack_inputs([inputs] * documents, model.config.pad_token_id)
        attnlrp_batch(model, together, [1] * documents, [n] * documents)  # warm-up of the batch's shapes
        s, peak = measure(lambda: attnlrp_batch(model, together, [1] * documents, [n] * documents), device)
        per_document = s / documents
        row |= {
            "attnlrp_documents": documents,
            "attnlrp_per_document_s": round(per_document, 3),
            "attnlrp_documents_peak_bytes": peak,
            "attnlrp_per_document_over_alone": round(per_document / lrp_s, 3),
        }
    if half:
        with torch.autocast("cuda", dtype=torch.float16):
            attnlrp(model, inputs, 1)
            s, peak = measure(lambda: attnlrp(model, inputs, 1), device)
        row |= {"attnlrp_fp16_s": round(s, 3), "attnlrp_fp16_peak_bytes": peak}

    def ig():
        return attribute_example(
            model,
            inputs,
            1,
            min_steps=ig_steps,
            max_steps=ig_steps,
            tolerance=None,
            internal_batch_size=ig_batch,
            autocast=half,
        )

    ig_s, ig_peak = measure(ig, device)
    batches = math.ceil(ig_steps / ig_batch)
    # IG = the endpoint forward (a batch of two, ~2 forwards) + one batched forward + backward per internal batch
    endpoint = 2 * forward_s
    ig50 = ig_s if ig_steps == 50 else endpoint + (ig_s - endpoint) * math.ceil(50 / ig_batch) / batches
    row |= {
        "ig_steps": ig_steps,
        "ig_internal_batch": ig_batch,
        "ig_s": round(ig_s, 3),
        "ig_peak_bytes": ig_peak,
        "ig50_s": round(ig50, 3),
        "ig50_measured": ig_steps == 50,
        "ig50_over_attnlrp": round(ig50 / lrp_s, 1),
    }
    return row


def _memory_child(name: str, n: int, ig_batch: int, documents: int) -> dict:
    """:func:`bench_length` on the CPU in a fresh interpreter whose allocator returns large blocks when freed."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "0"}
    code = (
        "import json; import torch; from benchmarks.attnlrp import bench_length; "
        f"print(json.dumps(bench_length({name!r}, {n}, torch.device('cpu'), {ig_batch}, {ig_batch}, "
        f"{documents})))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if run.returncode:
        raise RuntimeError(f"{name} at {n} tokens failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the machine type."""
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else ():
        if line.startswith("model name"):
            return f"{line.split(':', 1)[1].strip()} × {os.cpu_count()} CPUs"
    return platform.machine()


def bench_attnlrp(
    lengths=(2048, 4096),
    names=("longformer",),
    device: str = "cpu",
    ig_steps: int = 4,
    ig_batch: int = 2,
    documents: int = 2,
) -> dict:
    on = torch.device(device)
    rows = []
    for name in names:
        for n in lengths:
            row = bench_length(name, n, on, ig_steps, ig_batch, documents)
            if on.type == "cpu":
                memory = _memory_child(name, n, ig_batch, documents)
                row |= {k: v for k, v in memory.items() if k.endswith("_peak_bytes")}
            rows.append(row)
    return {
        "rows": rows,
        "device": torch.cuda.get_device_name(on) if on.type == "cuda" else cpu_name(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "targets": {"attnlrp_over_forward_backward": 2.0, "ig50_over_attnlrp": 20.0},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--lengths", nargs="+", type=int, default=[2048, 4096])
    parser.add_argument("--architectures", nargs="+", choices=list(BUILDERS), default=["longformer"])
    parser.add_argument("--ig-steps", type=int, default=None, help="default: 4 on the CPU, 50 on a GPU")
    parser.add_argument("--ig-batch", type=int, default=None, help="default: 2 on the CPU, 8 on a GPU")
    parser.add_argument(
        "--documents", type=int, default=None, help="AttnLRP's documents per pass: 2 on the CPU, 8 on a GPU"
    )
    parser.add_argument("--record", metavar="JSON", help="run nothing: record an attnlrp.json written before")
    args = parser.parse_args(argv)
    if args.record:
        record_attnlrp(json.loads(Path(args.record).read_text(encoding="utf-8")))
        return
    gpu = args.device.startswith("cuda")
    steps, batch = args.ig_steps or (50 if gpu else 4), args.ig_batch or (8 if gpu else 2)
    result = bench_attnlrp(
        args.lengths, args.architectures, args.device, steps, batch, args.documents or (8 if gpu else 2)
    )
    name = "attnlrp" if args.device == "cpu" else f"attnlrp_{torch.device(args.device).type}"
    path = Path(args.out) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        measured = provenance("bench/attnlrp", vars(args), 0, measured_paths_changed=measured_paths_changed())
        Path(tmp).write_text(json.dumps({**result, "provenance": measured}, indent=1))
    print(json.dumps(result, indent=1))
    record_attnlrp(json.loads(path.read_text(encoding="utf-8")))


def record_attnlrp(result: dict) -> None:
    """The records ``attnlrp_vs_ig`` and ``documents_per_pass`` (benchmarks.records) of one device's result (its
    provenance says which commit), beside the other device's latest: each device's part keeps what, where and when
    it was measured."""
    kind = torch.device(result["provenance"]["config"]["device"]).type
    commit, date = stamp(result.get("provenance"))
    measured = {"measured": f"{result['device']}, torch {result['torch']}", "commit": commit, "date": date}
    costs = figures_beside("attnlrp_vs_ig", kind, {**_cost(result), **measured})
    write_record("attnlrp_vs_ig", *attnlrp_answer(costs), **_parts(costs), tables={"costs": _costs_table(costs)})
    together = [r["attnlrp_per_document_over_alone"] for r in result["rows"] if "attnlrp_per_document_over_alone" in r]
    if together:
        per_pass = {"documents": result["rows"][0]["attnlrp_documents"], "per_document": [min(together), max(together)]}
        passes = figures_beside("documents_per_pass", kind, {**per_pass, **measured})
        write_record("documents_per_pass", *documents_answer(passes), **_parts(passes))


def _parts(figures: dict) -> dict:
    """``measured_on`` and ``commit`` of a record whose devices' parts were measured apart."""
    on = "; ".join(f"{f['measured']} ({f['commit']}, {f['date']})" for f in figures.values())
    return {"measured_on": on, "commit": ", ".join(dict.fromkeys(f["commit"] for f in figures.values()))}


#: The columns of docs/benchmarks.md's table of AttnLRP's and IG's costs, one row a model, length and device.
COSTS = ["model, tokens", "device", "forward", "forward + backward", "AttnLRP", "AttnLRP ÷ fwd + bwd", "IG, 50 steps",
         "IG ÷ AttnLRP", "peak: fwd + bwd / AttnLRP / IG"]  # fmt: skip


def _costs_table(figures: dict) -> dict:
    return {"header": COSTS, "rows": [row for f in figures.values() for row in f["rows"]]}


def _cost_row(r: dict, device: str) -> list:
    lrp = seconds(r["attnlrp_s"]) + (f" (fp16 {seconds(r['attnlrp_fp16_s'])})" if "attnlrp_fp16_s" in r else "")
    ig = seconds(r["ig50_s"]) + ("" if r["ig50_measured"] else f" (from {r['ig_steps']} steps)")
    peaks = [r.get(k) for k in ("forward_backward_peak_bytes", "attnlrp_peak_bytes", "ig_peak_bytes")]
    peak = " / ".join("–" if b is None else f"{b / 1e9:.2f}" for b in peaks) + " GB"
    return [
        f"{r['architecture']}, {thousands(r['tokens'])}", device, seconds(r["forward_s"]),
        seconds(r["forward_backward_s"]), lrp, f"{r['attnlrp_over_forward_backward']:.2f}", ig,
        f"{r['ig50_over_attnlrp']:.1f} ×", peak,
    ]  # fmt: skip


def _cost(result: dict) -> dict:
    """One device's figures of ``attnlrp_vs_ig``: IG at 50 steps over AttnLRP, AttnLRP over a forward + backward,
    and its rows of the costs table."""
    rows = result["rows"]
    return {
        "device": result["device"],
        "ig50_over_attnlrp": [min(r["ig50_over_attnlrp"] for r in rows), max(r["ig50_over_attnlrp"] for r in rows)],
        "attnlrp_over_forward_backward": [
            min(r["attnlrp_over_forward_backward"] for r in rows),
            max(r["attnlrp_over_forward_backward"] for r in rows),
        ],
        "rows": [_cost_row(r, result["device"]) for r in rows],
    }


def attnlrp_answer(figures: dict) -> tuple:
    """The question, answer, section, bench and figures of ``attnlrp_vs_ig`` (benchmarks.records), every device's."""
    parts = [f"{span(f['ig50_over_attnlrp'])} × on {f['device']}" for f in figures.values()]
    fb = [v for f in figures.values() for v in f["attnlrp_over_forward_backward"]]
    answer = "; ".join(parts) + f"; AttnLRP {span(fb)} × one forward + backward"
    section = "[AttnLRP against IG](#attnlrp-against-integrated-gradients)"
    return "How much cheaper is AttnLRP than IG at 50 steps?", answer, section, "benchmarks.attnlrp", figures


def documents_answer(figures: dict) -> tuple:
    """The question, answer, section, bench and figures of ``documents_per_pass`` (benchmarks.records)."""
    parts = []
    for kind, f in figures.items():
        pays = max(f["per_document"]) < 1
        where = "a CPU" if kind == "cpu" else "a card"
        parts.append(
            f"{'yes' if pays else 'not'} on {where} ({span(f['per_document'])} × per document at {f['documents']})"
        )
    section = "[AttnLRP against IG](#attnlrp-against-integrated-gradients)"
    return (
        "Does explaining several documents in one pass pay?",
        "; ".join(parts),
        section,
        "benchmarks.attnlrp",
        figures,
    )


if __name__ == "__main__":
    main()
