"""AttnLRP relevances from the method's authors' code, for the parity test (tests/unit/attribution/test_lxt_parity.py).

Runs in the reference environment that ``tests/reference/build_lxt_env.sh`` builds: lxt 2.1 (PyPI ``lxt``, its
``lxt.efficient`` rules, Clear BSD licence) with the transformers it was tested with (4.52), beside the project's
CPU torch. It is not part of the suite; its output is committed:

    tests/reference/build_lxt_env.sh /tmp/lxt-env
    /tmp/lxt-env/bin/python tests/reference/lxt_reference.py tests/reference/lxt

For each decoder family lxt covers (Llama, Qwen 3, Gemma 3) it draws a small seeded random-weight classifier —
the family's base model and a ``score`` head reading the last token, which is what Hugging Face's
``…ForSequenceClassification`` is (transformers 4.52 has no Gemma 3 text classifier, so the head is built here
for every family alike) — patches the family's modelling module with lxt's AttnLRP rules
(``lxt.efficient.monkey_patch``) and writes, per family, ``<family>.safetensors`` (the weights, under the
classifier's names), and ``<family>.json``: the configuration, the token ids, the explained logit, and each
token's relevance ``Σ_d e · ∂f/∂e`` at the embedding output ``e`` (lxt's own recipe: ``inputs_embeds`` with a
gradient, times that gradient). Then the same for the family as a causal language model explaining a generated
answer's log-probability (``<family>_lm.safetensors`` and ``<family>_lm.json``).

lxt imports torchvision for its ViT support when it is imported; PyPI's torchvision does not match the CPU torch
build, and the decoders need none of it, so this script stands in an empty ``torchvision.models.vision_transformer``
before importing lxt. Nothing else of lxt is touched.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file


class _Empty(types.ModuleType):
    """A module whose every attribute is another such module (lxt's ViT patch map only uses them as keys)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Empty(f"{self.__name__}.{name}")


for _name in ("torchvision", "torchvision.models", "torchvision.models.vision_transformer"):
    sys.modules[_name] = _Empty(_name)
sys.modules["torchvision"].models = sys.modules["torchvision.models"]
sys.modules["torchvision.models"].vision_transformer = sys.modules["torchvision.models.vision_transformer"]

from lxt.efficient import monkey_patch  # noqa: E402  (after the stand-in)

#: The shared sizes: 2 layers, 4 query heads sharing 2 key/value heads of 6 dimensions, a window of 5 keys.
SIZES = dict(
    vocab_size=60,
    hidden_size=24,
    intermediate_size=40,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=6,
    max_position_embeddings=64,
    pad_token_id=0,
    attention_dropout=0.0,
)
#: Per family: its base model's module and classes, and what its configuration sets beyond the sizes.
FAMILIES = {
    "llama": ("llama", "LlamaConfig", "LlamaModel", {}),
    "qwen3": ("qwen3", "Qwen3Config", "Qwen3Model", {}),
    "gemma3": (
        "gemma3",
        "Gemma3TextConfig",
        "Gemma3TextModel",
        {"sliding_window": 5, "query_pre_attn_scalar": 5, "sliding_window_pattern": 2},
    ),
}
IDS = [[2, 17, 23, 9, 41, 5, 33, 12, 8, 27, 50, 3]]
LABELS, TARGET, SEED = 3, 1, 0


#: The modelling modules lxt has patched (once each: a second patch would wrap its rules again).
PATCHED: set[str] = set()


def patch(module_name: str) -> None:
    if module_name not in PATCHED:
        monkey_patch(getattr(getattr(transformers.models, module_name), f"modeling_{module_name}"), verbose=False)
        PATCHED.add(module_name)


def drawn(family: str, seed: int, outputs: int | None, **more) -> tuple[dict, torch.nn.Module, torch.nn.Linear]:
    """The family's base model (lxt's rules patched in, a drawn pad row, as attnlens's models drawn from a
    configuration have it) and a bias-free head over ``outputs`` classes (None: the vocabulary), frozen."""
    module_name, config_name, model_name, extra = FAMILIES[family]
    patch(module_name)
    settings = {**SIZES, **extra, **more}
    config = getattr(transformers, config_name)(**settings, attn_implementation="eager")
    torch.manual_seed(seed)
    base = getattr(transformers, model_name)(config).eval()
    with torch.no_grad():
        base.get_input_embeddings().weight[0].normal_(0.0, config.initializer_range)
    head = torch.nn.Linear(config.hidden_size, outputs or config.vocab_size, bias=False)
    torch.nn.init.normal_(head.weight, 0.0, 0.5)
    for p in [*base.parameters(), *head.parameters()]:
        p.requires_grad_(False)
    return settings, base, head


def explained_relevance(base, explain) -> tuple[float, list[float]]:
    """``explain(hidden states of IDS)``, a scalar, and each token's relevance ``e · ∂f/∂e`` at the embedding output
    (lxt's own recipe: ``inputs_embeds`` with a gradient, times that gradient)."""
    ids = torch.tensor(IDS)
    embeds = base.get_input_embeddings()(ids).detach().requires_grad_(True)
    explained = explain(base(inputs_embeds=embeds, attention_mask=torch.ones_like(ids)).last_hidden_state[0])
    explained.backward()
    return float(explained.detach()), [float(r) for r in (embeds * embeds.grad)[0].sum(-1)]


def written(family: str, settings: dict, base, head, head_name: str, **fields) -> tuple[dict, dict[str, torch.Tensor]]:
    weights = {f"model.{k}": v.contiguous() for k, v in base.state_dict().items()}
    weights[f"{head_name}.weight"] = head.weight.detach().contiguous()
    record = {
        "family": family,
        "lxt": "2.1",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "settings": settings,
        "input_ids": IDS,
        **fields,
    }
    return record, weights


def relevance(family: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """The classifier: the logit of class ``TARGET`` read at the last token."""
    settings, base, score = drawn(family, SEED, LABELS)
    logit, relevances = explained_relevance(base, lambda hidden: score(hidden[-1])[TARGET])
    fields = {"num_labels": LABELS, "target": TARGET, "logit": logit, "relevance": relevances}
    return written(family, settings, base, score, "score", **fields)


#: A generated answer: the last tokens of ``IDS``, explained by their log-probability given what precedes them.
ANSWER = 3


def answer_relevance(family: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """The same family's decoder as a causal language model (its base model and an ``lm_head`` over the
    vocabulary, untied), explaining ``F = Σ_t log softmax(lm_head(h_{t−1}))[ids_t]`` over the answer's tokens:
    lxt's rules inside, the log-softmax and the sum plain autograd on top."""
    settings, base, head = drawn(family, SEED + 1, None, tie_word_embeddings=False)
    n = len(IDS[0])
    answer = torch.tensor(IDS)[0, n - ANSWER :, None]

    def explain(hidden):
        return torch.log_softmax(head(hidden[n - ANSWER - 1 : n - 1]), dim=-1).gather(-1, answer).sum()

    value, relevances = explained_relevance(base, explain)
    fields = {"answer_length": ANSWER, "explained": value, "relevance": relevances}
    return written(family, settings, base, head, "lm_head", **fields)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for family in FAMILIES:
        record, weights = relevance(family)
        save_file(weights, str(out / f"{family}.safetensors"))
        (out / f"{family}.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"{family}: logit {record['logit']:.6f}, Σ relevance {sum(record['relevance']):.6f}")
        record, weights = answer_relevance(family)
        save_file(weights, str(out / f"{family}_lm.safetensors"))
        (out / f"{family}_lm.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"{family} (causal LM): F {record['explained']:.6f}, Σ relevance {sum(record['relevance']):.6f}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/reference/lxt"))
