"""The other tools' half of ``python -m benchmarks.beside``: context-cite's surrogate and inseq's attributions timed
on the contexts bench's decoders, each in the environment of its own that its pins need
(``tests/reference/build_context_cite_env.sh``, ``tests/reference/build_inseq_env.sh``).

It imports neither attnlens nor the suites (the environments hold neither attnlens's pins nor its package):
``python -m benchmarks.beside_tools <part> <folder> [options]`` from the checkout's root, one part an interpreter.

* ``build``: a random-weight causal language model of the configuration class and entries given as JSON, and a
  word-level tokenizer (words ``w0, w1, …`` beside the templates' marks), written to ``folder``; with
  ``prompt.json``: a context of ``S`` sources of equal length (the last takes the remainder), a question and an
  answer of ``A`` words, whose prompt (context-cite's template inside the tokenizer's chat template) and answer
  come to ``n`` tokens.
* ``context_cite``: ContextCite's ``get_attributions`` (its own masks, its batch size, one forward an ablation from
  the whole ablated prompt, its Lasso) for that answer; seconds, CPU seconds, peak extra RSS, and its per-token
  logit-probabilities and weights for attnlens's half to compare with.
* ``inseq``: inseq's attribution of that answer by one method (``--method``), loaded from the folder as inseq loads a
  model (its eager attention); seconds, CPU seconds, peak extra RSS.
* ``gemma_cite``: ContextCite on Gemma 3 270M (``python -m benchmarks.cite_gemma``): the GGUF file, sources, question
  and template of ``folder/prompt.json`` and the tokenizer attnlens saved beside it; its greedy answer up to the
  newline, then ``get_attributions`` at its defaults (64 ablations, one a forward), each timed.

The peak is the process's resident set above what the model and inputs held before the call (``/proc``, reset
before it), read as :mod:`benchmarks.shapes` reads it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers

from benchmarks.shapes import reset_peak_rss, rss_kib

#: The prompt template ContextCite fills by default (``context_cite.context_citer.DEFAULT_PROMPT_TEMPLATE``) and the
#: chat template of its parity test's model (``tests/reference/context_cite_reference.py``).
TEMPLATE = "Context: {context}\n\nQuery: {query}"
CHAT_TEMPLATE = (
    "{% for m in messages %}<user> {{ m['content'] }} </user>{% endfor %}"
    "{% if add_generation_prompt %} <assistant>{% endif %}"
)
QUESTION_WORDS = 8


def build(folder: Path, config_class: str, entries: dict, n: int, sources: int, answer: int, seed: int = 0) -> None:
    """The model, tokenizer and ``prompt.json`` of ``n`` tokens (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    marks = sorted({w for w, _ in pre_tokenizers.Whitespace().pre_tokenize_str(TEMPLATE + " " + CHAT_TEMPLATE)})
    vocab_size = entries["vocab_size"]
    words = [f"w{i}" for i in range(vocab_size - 2 - len(marks))]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[PAD]", "[UNK]", *marks, *words])}, "[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = getattr(transformers, config_class)(**entries)
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    rng = np.random.default_rng(seed)
    question = " ".join(rng.choice(words, QUESTION_WORDS))
    overhead = len(prompt_ids(tokenizer, "", question))
    per_source = (n - overhead - answer) // sources
    if per_source < 1:
        raise SystemExit(f"--tokens: expected room for {sources} sources after {overhead + answer} tokens, got {n}")
    sizes = [per_source] * (sources - 1) + [n - overhead - answer - per_source * (sources - 1)]
    parts = [" ".join(rng.choice(words, size)) for size in sizes]
    record = {"sources": parts, "question": question, "answer": " ".join(rng.choice(words, answer))}
    record["prompt_tokens"] = len(prompt_ids(tokenizer, " ".join(parts), question))
    record["tokens"] = record["prompt_tokens"] + answer
    (folder / "prompt.json").write_text(json.dumps(record) + "\n", encoding="utf-8")


def prompt_ids(tokenizer, context: str, question: str) -> list[int]:
    """The prompt's token ids as ContextCite forms them (``ContextCiter._get_prompt_ids``)."""
    messages = [{"role": "user", "content": TEMPLATE.format(context=context, query=question)}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer.encode(text, add_special_tokens=False)


def measured(fn) -> tuple[object, dict]:
    """``fn()``'s result, and its wall seconds, CPU seconds (every thread) and peak extra RSS in bytes."""
    before = rss_kib("VmRSS")
    resettable = reset_peak_rss()
    cpu, t0 = time.process_time(), time.perf_counter()
    result = fn()
    row = {"s": round(time.perf_counter() - t0, 3), "cpu_s": round(time.process_time() - cpu, 2)}
    row["peak_bytes"] = (rss_kib("VmHWM") - before) * 1024 if resettable else None
    return result, row


def context_cite(folder: Path, ablations: int, batch_size: int) -> dict:
    """ContextCite's attributions of the prompt's answer (see the module docstring)."""
    from context_cite import ContextCiter  # noqa: PLC0415 (the context-cite environment only)

    from tests.reference.context_cite_reference import GivenSources  # noqa: PLC0415 (imports context-cite)

    record = json.loads((folder / "prompt.json").read_text(encoding="utf-8"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"  # ContextCite batches with left padding
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    citer = ContextCiter(
        model,
        tokenizer,
        " ".join(record["sources"]),
        record["question"],
        partitioner=GivenSources(record["sources"]),
        num_ablations=ablations,
        batch_size=batch_size,
        prompt_template=TEMPLATE,
    )
    _, prompt = citer._get_prompt_ids(return_prompt=True)
    citer._cache["output"] = prompt + " " + record["answer"]  # the answer as given, not generated
    with torch.no_grad():
        weights, row = measured(lambda: citer.get_attributions(verbose=False))
    return {
        **row,
        "ablations": ablations,
        "batch_size": batch_size,
        "masks": citer._masks.astype(int).tolist(),
        "token_logit_probs": np.asarray(citer._logit_probs, dtype=np.float64).tolist(),
        "weights": np.asarray(weights, dtype=np.float64).tolist(),
    }


def inseq(folder: Path, method: str) -> dict:
    """inseq's ``method`` attribution of the prompt's answer, the model loaded from ``folder`` (see the module
    docstring)."""
    import inseq as tool  # noqa: PLC0415 (the inseq environment only)

    record = json.loads((folder / "prompt.json").read_text(encoding="utf-8"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": TEMPLATE.format(context=" ".join(record["sources"]), query=record["question"])}],
        tokenize=False,
        add_generation_prompt=True,
    )
    attributing = tool.load_model(str(folder), method, tokenizer=str(folder))
    out, row = measured(lambda: attributing.attribute(prompt, prompt + " " + record["answer"], show_progress=False))
    steps = out.sequence_attributions[0]
    implementation = attributing.model.config._attn_implementation
    answer_steps = len(steps.target) - len(steps.source)
    return {**row, "method": method, "attention_implementation": implementation, "answer_steps": answer_steps}


def gemma_cite(folder: Path, ablations: int) -> dict:
    """ContextCite's answer and attributions on Gemma 3 270M (see the module docstring)."""
    from tests.reference.context_cite_reference import answer_to_newline, gemma_citer  # noqa: PLC0415 (context-cite)

    record = json.loads((folder / "prompt.json").read_text(encoding="utf-8"))
    torch.manual_seed(0)
    citer, model, tokenizer = gemma_citer(
        Path(record["gguf"]), folder / "tokenizer.json", record["sources"], record["question"],
        record["template"].replace("{question}", "{query}"), ablations,
    )  # fmt: skip
    answer, generated = measured(lambda: answer_to_newline(citer, model, tokenizer, record["max_new_tokens"]))
    with torch.no_grad():
        weights, attributed = measured(lambda: citer.get_attributions(verbose=False))
    return {
        "tokens": len(citer._get_prompt_ids()) + len(answer),
        "answer": tokenizer.decode(answer),
        "generate": generated,
        "attributions": attributed,
        "ablations": ablations,
        "s": round(generated["s"] + attributed["s"], 3),
        "cpu_s": round(generated["cpu_s"] + attributed["cpu_s"], 2),
        "weights": np.asarray(weights, dtype=np.float64).tolist(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["build", "context_cite", "inseq", "gemma_cite"])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--config", help="build: {'class': …, 'entries': {…}} as JSON")
    parser.add_argument("--tokens", type=int)
    parser.add_argument("--sources", type=int, default=16)
    parser.add_argument("--answer", type=int, default=8)
    parser.add_argument("--ablations", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--method", default="input_x_gradient")
    args = parser.parse_args(argv)
    if args.part == "build":
        config = json.loads(args.config)
        build(args.folder, config["class"], config["entries"], args.tokens, args.sources, args.answer)
        print(json.dumps({"tokens": json.loads((args.folder / "prompt.json").read_text(encoding="utf-8"))["tokens"]}))
    elif args.part == "context_cite":
        print(json.dumps(context_cite(args.folder, args.ablations, args.batch_size)))
    elif args.part == "gemma_cite":
        print(json.dumps(gemma_cite(args.folder, args.ablations)))
    else:
        print(json.dumps(inseq(args.folder, args.method)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
