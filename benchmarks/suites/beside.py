"""attnlens's half of ``python -m benchmarks.beside``: on the model, tokenizer and prompt that
:mod:`benchmarks.beside_tools` built (``prompt.json``: sources, question, answer), what attnlens's counterparts of
context-cite's and inseq's calls cost, in this process:

* ``surrogate``: the ablation surrogate with ContextCite's masks (the same ``RandomState`` seeds) — every ablated
  prompt's answer scored (:func:`~attnlens.attribution.ablation.ablation_log_probs`: batched, the shared prefix run
  once) and the Lasso fitted — with, where context-cite's half ran first (``context_cite.json``), the largest
  difference of the per-token logit-probabilities ``log p − log(1 − p)`` and of the weights;
* ``attention``: the answer's rows' attention per layer and head
  (:func:`~attnlens.attribution.context.answer_head_attention`), against inseq's ``attention`` (every layer's n × n
  ``output_attentions``, one answer token a step);
* ``gradient_x_input``: gradient × input of the answer's log-probability, one forward and one backward
  (:func:`~attnlens.attribution.context.answer_gradient_x_input`), against inseq's ``input_x_gradient`` (one
  forward and backward an answer token).

Each gives wall seconds, CPU seconds (every thread) and peak extra RSS in bytes, as the tools' half does.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
import transformers

from attnlens.attribution.ablation import ablation_log_probs
from attnlens.attribution.context import answer_gradient_x_input, answer_head_attention
from attnlens.attribution.ig import freeze
from attnlens.attribution.surrogate import ablation_masks, answer_scores, fit_surrogate
from attnlens.data.context import PROMPT_TEMPLATE, Source, build_prompt
from benchmarks.measuring import measured


def timed(fn) -> tuple[object, dict]:
    """``fn()``'s result, and its wall seconds, CPU seconds and peak extra RSS in bytes."""
    cpu = time.process_time()
    result, seconds, peak = measured(fn)
    return result, {"s": round(seconds, 3), "cpu_s": round(time.process_time() - cpu, 2), "peak_bytes": peak}


def given_sources(parts: list[str]) -> tuple[str, list[Source]]:
    """The context of ``parts`` joined by one space (as context-cite's half joins them) and each part's span."""
    sources, start = [], 0
    for part in parts:
        sources.append(Source(start, start + len(part), part))
        start += len(part) + 1
    return " ".join(parts), sources


def bench_attnlens(folder: str, ablations: int) -> dict:
    """The three rows of the module docstring for the prompt in ``folder``, ``ablations`` surrogate masks."""
    folder = Path(folder)
    record = json.loads((folder / "prompt.json").read_text(encoding="utf-8"))
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = freeze(transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation="sdpa").eval())
    context, sources = given_sources(record["sources"])
    answer = tokenizer(record["answer"], add_special_tokens=False)["input_ids"]
    prompt = build_prompt(tokenizer, context, record["question"], PROMPT_TEMPLATE)
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
