"""attnlens beside context-cite and inseq at long contexts on the CPU: ``python -m benchmarks.beside --context-cite
/tmp/cc-env/bin/python --inseq /tmp/inseq-env/bin/python`` writes ``results/bench/beside.json``.

For each family and length, the contexts bench's decoder (:mod:`benchmarks.suites.contexts`: the ``small`` shape,
random weights, 16 sources, an answer of 8 tokens) is built once, in context-cite's environment, with a word-level
tokenizer and a prompt of that many tokens (:mod:`benchmarks.beside_tools`); then, each in an interpreter of its
own under the strict allocator, one after the other:

* ``context_cite``: ContextCite 0.0.4's ``get_attributions`` at its defaults (64 ablations, batch size 1), in its
  environment (``tests/reference/build_context_cite_env.sh``);
* ``attnlens``: the surrogate on the same masks, the answer's rows' attention and gradient × input
  (:func:`bench_attnlens`, below), with the largest difference of its ablations' scores from context-cite's;
* ``inseq_<method>``: inseq 0.7.1's ``attention`` and ``input_x_gradient``, in its environment
  (``tests/reference/build_inseq_env.sh``), the model loaded as inseq loads one (eager attention).

A tool that fails (out of memory, killed) gets the first line of why; ``dense_bytes`` is the ``layers · heads · n² ·
4`` bytes of the attention that ``output_attentions`` returns, for scale. The ratios ``*_over_attnlens`` are the
tool's seconds over attnlens's for the same answer. The file is rewritten after each row.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import transformers

from attnlens.attribution.datamodels import ablation_masks, answer_scores, fit_surrogate
from attnlens.attribution.ig import freeze
from attnlens.attribution.source_scores import answer_gradient_x_input, answer_head_attention
from attnlens.generation.ablation import ablation_log_probs
from attnlens.models import DECODERS
from attnlens.tasks.contexts import PROMPT_TEMPLATE, PromptFormat, Source
from benchmarks.measuring import ROOT, STRICT_MALLOC, bench_child, timed, write_result
from benchmarks.records import span, thousands, write_record
from benchmarks.suites.contexts import ANSWER, SOURCES
from benchmarks.suites.decoders import FAMILIES, decoder_entries

#: The lengths at which context-cite's 64 whole-prompt forwards fit in minutes on two cores.
LENGTHS = (2048, 8192)
INSEQ_METHODS = ("attention", "input_x_gradient")


def tool(python: str, env: dict, *args: str) -> dict:
    """``python -m benchmarks.beside_tools *args`` in a tool's environment: its JSON line, or why it gave none."""
    run = subprocess.run(
        [python, "-m", "benchmarks.beside_tools", *args], capture_output=True, text=True, env=env, cwd=ROOT, check=False
    )
    if run.returncode == -9:
        gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
        return {"not_run": f"killed (SIGKILL): out of memory on a machine of {gib:.0f} GiB"}
    if run.returncode:
        last = (run.stderr.strip().splitlines() or [""])[-1]
        return {"not_run": f"exit {run.returncode}: {last}"[:300]}
    return json.loads(run.stdout.strip().splitlines()[-1])


def ratio(theirs: dict, ours: dict) -> float | None:
    """The tool's seconds over attnlens's, where both ran."""
    return round(theirs["s"] / ours["s"], 2) if "s" in theirs and "s" in ours else None


# --- attnlens's half, in an interpreter of its own ----------------------------------------------------------------


def given_sources(parts: list[str]) -> tuple[str, list[Source]]:
    """The context of ``parts`` joined by one space (as context-cite's half joins them) and each part's span."""
    sources, start = [], 0
    for part in parts:
        sources.append(Source(start, start + len(part), part))
        start += len(part) + 1
    return " ".join(parts), sources


def bench_attnlens(folder: str, ablations: int) -> dict:
    """attnlens's counterparts on the model, tokenizer and prompt :mod:`benchmarks.beside_tools` built in ``folder``,
    each with wall seconds, CPU seconds and peak extra RSS:

    * ``surrogate``: ContextCite's ``ablations`` masks (the same ``RandomState`` seeds), every ablated prompt's answer
      scored (:func:`~attnlens.generation.ablation.ablation_log_probs`, from the shared prefix) and the Lasso
      fitted; where context-cite's half ran first (``context_cite.json``), the largest difference of the per-token
      logit-probabilities ``log p − log(1 − p)`` and of the weights;
    * ``attention``: the answer's rows' attention per layer and head
      (:func:`~attnlens.attribution.source_scores.answer_head_attention`), beside inseq's ``attention``;
    * ``gradient_x_input``: of the answer's log-probability, one forward and one backward
      (:func:`~attnlens.attribution.source_scores.answer_gradient_x_input`), beside inseq's ``input_x_gradient``."""
    folder = Path(folder)
    record = json.loads((folder / "prompt.json").read_text(encoding="utf-8"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = freeze(transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval())
    context, sources = given_sources(record["sources"])
    answer = tokenizer(record["answer"], add_special_tokens=False)["input_ids"]
    prompt = PromptFormat(PROMPT_TEMPLATE).build(tokenizer, context, record["question"])
    ids = torch.tensor([tokenizer(prompt.text, add_special_tokens=False)["input_ids"] + answer])
    masks = ablation_masks(len(sources), ablations, seed=0)

    def surrogate():
        log_p = ablation_log_probs(model, tokenizer, context, sources, record["question"], answer, masks)
        return log_p, fit_surrogate(masks, answer_scores(log_p)[1].astype(np.float32), len(answer))[0]

    (log_p, weights), row = timed(surrogate)
    row = {"tokens": int(ids.shape[1]), "surrogate": {**row, "ablations": ablations}}
    theirs = folder / "context_cite.json"
    if theirs.exists():
        cc = json.loads(theirs.read_text(encoding="utf-8"))
        np.testing.assert_array_equal(np.array(cc["masks"], dtype=bool), masks)  # the same ablations, or no parity
        logit_probs = log_p - np.log1p(-np.exp(log_p))  # ContextCite's per-token value
        row["surrogate"]["largest_logit_prob_difference"] = float(np.abs(logit_probs - cc["token_logit_probs"]).max())
        row["surrogate"]["largest_weight_difference"] = float(np.abs(weights - cc["weights"]).max())
    with torch.no_grad():
        _, row["attention"] = timed(lambda: answer_head_attention(model, ids, len(answer)))
    _, row["gradient_x_input"] = timed(lambda: answer_gradient_x_input(model, ids, len(answer)))
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context-cite", required=True, help="the python of context-cite's environment")
    parser.add_argument("--inseq", required=True, help="the python of inseq's environment")
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=["llama"])
    parser.add_argument("--shape", default="small")
    parser.add_argument("--lengths", nargs="+", type=int, default=list(LENGTHS))
    parser.add_argument("--ablations", type=int, default=64)
    parser.add_argument("--work", type=Path, default=Path("/tmp/attnlens-beside"))
    parser.add_argument("--out", default="results/bench")
    args = parser.parse_args(argv)
    strict = {**os.environ, **STRICT_MALLOC}
    rows: list[dict] = []
    for n in args.lengths:
        for family in args.families:
            folder = args.work / f"{family}-{n}"
            config = {"class": DECODERS[family][0], "entries": decoder_entries(family, args.shape, n)}
            built = tool(args.context_cite, strict, "build", str(folder), "--config", json.dumps(config),
                         "--tokens", str(n), "--sources", str(SOURCES), "--answer", str(ANSWER))  # fmt: skip
            entries = config["entries"]
            dense = entries["num_hidden_layers"] * entries["num_attention_heads"] * n * n * 4
            row: dict = {"family": family, "shape": args.shape, "tokens": n, "dense_bytes": dense}
            if "not_run" in built:
                rows.append({**row, **built})
                continue
            cc = tool(args.context_cite, strict, "context_cite", str(folder), "--ablations", str(args.ablations))
            if "masks" in cc:
                (folder / "context_cite.json").write_text(json.dumps(cc) + "\n", encoding="utf-8")
            row["context_cite"] = {k: v for k, v in cc.items() if k not in ("masks", "token_logit_probs", "weights")}
            try:
                row["attnlens"] = bench_child(
                    "beside", "bench_attnlens", args.ablations, strict, str(folder), package="benchmarks"
                )
            except RuntimeError as failed:
                row["attnlens"] = {"not_run": str(failed).splitlines()[0]}
            for method in INSEQ_METHODS:
                row[f"inseq_{method}"] = tool(args.inseq, strict, "inseq", str(folder), "--method", method)
            ours = row["attnlens"]
            row["context_cite_over_attnlens"] = ratio(row["context_cite"], ours.get("surrogate", {}))
            row["inseq_attention_over_attnlens"] = ratio(row["inseq_attention"], ours.get("attention", {}))
            row["inseq_input_x_gradient_over_attnlens"] = ratio(
                row["inseq_input_x_gradient"], ours.get("gradient_x_input", {})
            )
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            Path(args.out).mkdir(parents=True, exist_ok=True)
            write_result(args.out, "beside", {"rows": rows})
    record_beside(rows)


def record_beside(rows: list[dict]) -> None:
    """The record ``beside`` (benchmarks.records): each tool's seconds over attnlens's counterpart, over the lengths
    where both ran, and the lengths where the tool did not."""
    parts, figures = [], {}
    for key, name in (
        ("context_cite_over_attnlens", "context-cite's surrogate"),
        ("inseq_attention_over_attnlens", "inseq's attention"),
        ("inseq_input_x_gradient_over_attnlens", "inseq's input × gradient"),
    ):
        ran = [(r["tokens"], r[key]) for r in rows if r.get(key) is not None]
        if not ran:
            continue
        lengths = [n for n, _ in ran]
        parts.append(f"{name} {span([v for _, v in ran])} × attnlens's at {min(lengths)}–{max(lengths)} tokens")
        figures[key] = dict(ran)
    if parts:
        write_record(
            "beside",
            "What do context-cite and inseq cost on the same answer?",
            "; ".join(parts),
            "[context-cite and inseq beside attnlens](#context-cite-and-inseq-beside-attnlens-besidejson)",
            "benchmarks.beside",
            {k: {str(n): v for n, v in d.items()} for k, d in figures.items()},
            tables={"tools": tools_table(rows)},
        )


def _cell(measured: dict) -> str:
    """``38.7 s (75), 0.66 GiB``: wall seconds (CPU seconds, every core), peak memory above the loaded model; or why
    it did not run."""
    if "s" not in measured:
        return "killed for memory" if "out of memory" in measured.get("not_run", "") else "not run"
    peak = measured.get("peak_bytes")
    return f"{measured['s']:.1f} s ({measured['cpu_s']:.0f})" + ("" if peak is None else f", {peak / 2**30:.2f} GiB")


def tools_table(rows: list[dict]) -> dict:
    """One row a family and length: each tool's cell beside attnlens's counterpart and the ratio of their walls."""

    def times(ratio: float | None) -> str:
        return "–" if ratio is None else f"**{ratio:.2f}**"

    table = []
    for r in rows:
        ours = r.get("attnlens", {})
        cells = [r["family"], thousands(r["tokens"])]
        for theirs, mine, ratio in (
            ("context_cite", "surrogate", "context_cite_over_attnlens"),
            ("inseq_attention", "attention", "inseq_attention_over_attnlens"),
            ("inseq_input_x_gradient", "gradient_x_input", "inseq_input_x_gradient_over_attnlens"),
        ):
            cells += [_cell(r.get(theirs, {})), _cell(ours.get(mine, {})), times(r.get(ratio))]
        table.append(cells)
    header = ["family", "tokens", "context-cite, ablations", "attnlens's surrogate, the same masks", "×"]
    header += ["inseq `attention`", "attnlens's answer rows' attention", "×", "inseq `input_x_gradient`"]
    return {"header": [*header, "attnlens's gradient × input", "×"], "rows": table}


if __name__ == "__main__":
    main()
