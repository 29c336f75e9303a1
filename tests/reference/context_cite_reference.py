"""The ablation surrogate from its authors' code, for the parity test (tests/unit/attribution/test_surrogate.py).

Runs in the reference environment that ``tests/reference/build_context_cite_env.sh`` builds: context-cite 0.0.4
(PyPI ``context-cite``, MIT licence) with the libraries it declares, at the project's scikit-learn. It is not part
of the suite; its output is committed:

    tests/reference/build_context_cite_env.sh /tmp/cc-env
    /tmp/cc-env/bin/python tests/reference/context_cite_reference.py tests/reference/context_cite

For a few contexts (sources, ablations, keep probability, seed, answer tokens) it draws the ablation masks with
ContextCite's own loop (``_create_regression_dataset``, the masks of ``num_masks`` seeds from ``base_seed``),
makes each answer token's logit-probability ``log p − log(1 − p)`` a seeded linear function of the mask plus noise
(what a model would give; no model is needed to compare the arithmetic), and writes ``cases.json``: the masks,
those token values, ContextCite's two sequence scores (``aggregate_logit_probs``: ``logit_prob``, its default,
and ``log_prob``) and its surrogate's weights and bias (``LassoRegression().fit`` on the logit scores, as
``ContextCiter`` calls it).

Then the whole method on a model: a tiny seeded random ``LlamaForCausalLM`` and a word-level tokenizer with a chat
template, written to ``model/`` (the weights and the tokenizer, so that attnlens loads the same ones), a context of
eight sentences, a question and a fixed answer. ``ContextCiter`` (its sources given as those sentences, its prompt
template and chat template, 32 ablations of its own masks, one sequence a forward) scores the answer on each
ablated prompt and fits its surrogate; ``model.json`` holds the sources, query and answer, the full prompt's and the
answer's token ids, the masks, each ablation's per-token logit-probabilities and the attributions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import sklearn
import torch
import transformers
from context_cite import ContextCiter
from context_cite.context_partitioner import BaseContextPartitioner
from context_cite.solver import LassoRegression
from context_cite.utils import _create_regression_dataset, aggregate_logit_probs
from tokenizers import Tokenizer, models, pre_tokenizers

#: (sources, ablations, keep probability, base seed, answer tokens): ContextCite's defaults (64 ablations, ½) and
#: the ends of the issue's range (16 … 256), with more and fewer sources than ablations.
CASES = [(12, 64, 0.5, 0, 5), (40, 16, 0.5, 7, 3), (8, 256, 0.5, 1234, 9), (25, 128, 0.3, 42, 1)]


def case(n_sources: int, n_masks: int, keep: float, seed: int, n_tokens: int) -> dict:
    masks, _ = _create_regression_dataset(n_masks, n_sources, lambda mask: [1], [2] * n_tokens, keep, base_seed=seed)
    rng = np.random.default_rng(seed)
    truth = np.zeros(n_sources)
    truth[rng.choice(n_sources, size=min(3, n_sources), replace=False)] = rng.uniform(0.5, 2.0, size=min(3, n_sources))
    per_token = rng.uniform(-1.0, 1.0, size=n_tokens)
    logit_probs = (
        per_token[None, :]
        + (masks.astype(np.float64) @ truth)[:, None] / n_tokens
        - 1.0
        + rng.normal(0, 0.05, size=(n_masks, n_tokens))
    ).astype(np.float32)
    outputs = aggregate_logit_probs(logit_probs)
    weights, bias = LassoRegression().fit(masks, outputs, n_tokens)
    return {
        "n_sources": n_sources,
        "n_masks": n_masks,
        "keep": keep,
        "seed": seed,
        "n_tokens": n_tokens,
        "masks": masks.astype(int).tolist(),
        "token_logit_probs": logit_probs.tolist(),
        "logit_prob": aggregate_logit_probs(logit_probs, "logit_prob").tolist(),
        "log_prob": aggregate_logit_probs(logit_probs, "log_prob").tolist(),
        "weights": np.asarray(weights, dtype=np.float64).tolist(),
        "bias": float(bias),
    }


SOURCES = [
    "The Falcon compiler was written in Lund.",
    "Its first release came in a wet spring.",
    "Falcon was designed by Ada Byrne.",
    "The Heron scheduler runs in Delft.",
    "Heron was designed by Tomas Vik.",
    "Every build of Falcon is checked twice.",
    "The Lund lab keeps its tools in one room.",
    "Nobody there drinks tea before noon.",
]
QUERY = "Who designed the compiler used at the Lund lab?"
ANSWER = "Ada Byrne designed it."
#: A plain chat template: the user's message between markers, then the assistant's turn.
CHAT_TEMPLATE = (
    "{% for m in messages %}<user> {{ m['content'] }} </user>{% endfor %}"
    "{% if add_generation_prompt %} <assistant>{% endif %}"
)


class GivenSources(BaseContextPartitioner):
    """ContextCite's partitioner for sources given as a list, joined by one space (as attnlens joins them)."""

    def __init__(self, sources: list[str]) -> None:
        super().__init__(" ".join(sources))
        self.parts = sources

    @property
    def num_sources(self) -> int:
        return len(self.parts)

    def split_context(self) -> None:
        pass

    def get_source(self, index: int) -> str:
        return self.parts[index]

    def get_context(self, mask=None) -> str:
        mask = np.ones(len(self.parts), dtype=bool) if mask is None else mask
        return " ".join(p for p, keep in zip(self.parts, mask, strict=True) if keep)


def tokenizer_and_model(out: Path) -> tuple:
    words = sorted(
        {
            w
            for text in [*SOURCES, QUERY, ANSWER, "Context: Query: <user> </user> <assistant>"]
            for w in pre_tokenizers.Whitespace().pre_tokenize_str(text)
            for w in [w[0]]
        }
    )
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", *words])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=core, pad_token="[PAD]", unk_token="[UNK]")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    config = transformers.LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
        initializer_range=0.5,  # weights large enough that the answer's probability turns on its context
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(out)
    return tokenizer, model


def model_case(out: Path) -> dict:
    tokenizer, model = tokenizer_and_model(out / "model")
    citer = ContextCiter(
        model, tokenizer, " ".join(SOURCES), QUERY, partitioner=GivenSources(SOURCES), num_ablations=32, batch_size=1
    )
    prompt_ids, prompt = citer._get_prompt_ids(return_prompt=True)
    citer._cache["output"] = prompt + " " + ANSWER  # the answer as given, not generated
    with torch.no_grad():
        weights = citer.get_attributions(verbose=False)
    return {
        "sources": SOURCES,
        "query": QUERY,
        "answer": ANSWER,
        "prompt": prompt,
        "prompt_ids": list(prompt_ids),
        "answer_ids": list(citer._response_ids),
        "masks": citer._masks.astype(int).tolist(),
        "token_logit_probs": np.asarray(citer._logit_probs, dtype=np.float64).tolist(),
        "weights": np.asarray(weights, dtype=np.float64).tolist(),
    }


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "context_cite": "0.0.4",
        "scikit_learn": sklearn.__version__,
        "numpy": np.__version__,
        "cases": [case(*c) for c in CASES],
    }
    (out / "cases.json").write_text(json.dumps(record) + "\n", encoding="utf-8")
    print(f"wrote {out / 'cases.json'}: {len(CASES)} cases")
    record = {"context_cite": "0.0.4", "transformers": transformers.__version__, **model_case(out)}
    (out / "model.json").write_text(json.dumps(record) + "\n", encoding="utf-8")
    print(f"wrote {out / 'model.json'} and {out / 'model'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
