"""AT2's attention features from its authors' code, for the parity test (tests/unit/attribution/test_head_weights.py).

Runs in the reference environment that ``tests/reference/build_at2_env.sh`` builds: at2 0.0.1 (PyPI ``at2``, MIT
licence) beside the project's torch and transformers. It is not part of the suite; its output is committed:

    tests/reference/build_at2_env.sh /tmp/at2-env
    /tmp/at2-env/bin/python tests/reference/at2_reference.py tests/reference/at2

For each case it draws a tiny seeded float64 causal language model of a family at2 reads (``llama``, ``qwen2``,
``gemma3``), writes it to ``<case>/`` (its config and weights, so attnlens loads the same model), and computes the
features of an answer — the last tokens of a random sequence — with at2's own ``AttentionFeatureExtractor`` on the
hidden states its tasks give it (``output_hidden_states``, the last token's dropped), aggregated as at2's trainer
aggregates them (the answer's rows averaged, each source's tokens summed). ``cases.json`` holds each case's ids, the
answer's length, the sources' token ranges and the features ``(sources, layers · heads)``.

Transformers 5 renamed Gemma 3's two rotations (one module, called with the layer's type); at2 0.0.1 calls
``rotary_emb_local`` and ``rotary_emb`` without it. The script gives at2 those two names for the model it reads
(the local and the global rotation) and changes nothing of at2's arithmetic. Two Gemma 3 cases: ``gemma3_wide``,
whose window reaches past the whole sequence and whose query scale is ``1/√d`` (there at2's definition is the
model's), and ``gemma3_window``, a window of 8 keys on a sequence of 40 (there at2's full causal mask is not the
model's, and the test says by how much they differ).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import transformers
from at2.attribution.features import AttentionFeatureExtractor

N, ANSWER = 40, 4
SHAPE = {
    "vocab_size": 64,
    "hidden_size": 24,
    "intermediate_size": 40,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 6,
    "max_position_embeddings": 64,
    "pad_token_id": 0,
    "attention_dropout": 0.0,
}
CASES = {
    "llama": ("llama", transformers.LlamaConfig, transformers.LlamaForCausalLM, {}),
    "qwen2": ("qwen2", transformers.Qwen2Config, transformers.Qwen2ForCausalLM, {"use_sliding_window": False}),
    "gemma3_wide": (
        "gemma3",
        transformers.Gemma3TextConfig,
        transformers.Gemma3ForCausalLM,
        {"sliding_window": 64, "query_pre_attn_scalar": 6, "layer_types": ["sliding_attention", "full_attention"]},
    ),
    "gemma3_window": (
        "gemma3",
        transformers.Gemma3TextConfig,
        transformers.Gemma3ForCausalLM,
        {"sliding_window": 8, "query_pre_attn_scalar": 6, "layer_types": ["sliding_attention", "full_attention"]},
    ),
}


class _NamedRotations(torch.nn.Module):
    """Gemma 3's rotation under the name and signature at2 0.0.1 calls: one layer type fixed."""

    def __init__(self, rotary: torch.nn.Module, layer_type: str):
        super().__init__()
        self.rotary, self.layer_type = rotary, layer_type

    def forward(self, x, position_ids):
        return self.rotary(x, position_ids, self.layer_type)


def sources(rng: np.random.Generator) -> list[list[int]]:
    """Token ranges ``[start, end)`` of 3 to 7 tokens from position 2 to the answer, the first and last tokens of
    the prompt outside every source (a template's)."""
    out, start = [], 2
    while start < N - ANSWER - 3:
        end = min(start + int(rng.integers(3, 8)), N - ANSWER - 1)
        out.append([start, end])
        start = end
    return out


def case(name: str, seed: int) -> dict:
    model_type, config_class, model_class, extra = CASES[name]
    torch.manual_seed(seed)
    model = model_class(config_class(**SHAPE, **extra, attn_implementation="eager")).double().eval()
    model.save_pretrained(OUT / name)
    rng = np.random.default_rng(seed)
    ids = torch.as_tensor(rng.integers(5, 60, size=(1, N)))
    with torch.no_grad():
        hidden = [h[:, :-1] for h in model(input_ids=ids, output_hidden_states=True).hidden_states]
    if model_type == "gemma3":
        rotary = model.model.rotary_emb
        model.model.rotary_emb_local = _NamedRotations(rotary, "sliding_attention")
        model.model.rotary_emb = _NamedRotations(rotary, "full_attention")
    layers, heads = SHAPE["num_hidden_layers"], SHAPE["num_attention_heads"]
    extractor = AttentionFeatureExtractor(layers, heads, model_type=model_type)
    per_token = extractor(SimpleNamespace(model=model, hidden_states=hidden), N - ANSWER, N)  # (answer, n − 1, F)
    averaged = per_token.mean(dim=0)  # at2's trainer: one target, its tokens' rows averaged
    spans = sources(rng)
    features = torch.stack([averaged[s:e].sum(dim=0) for s, e in spans])  # each source's tokens summed
    return {
        "case": name,
        "model_type": model_type,
        "input_ids": ids[0].tolist(),
        "answer_length": ANSWER,
        "sources": spans,
        "features": features.double().tolist(),
    }


if __name__ == "__main__":
    OUT = Path(sys.argv[1])
    OUT.mkdir(parents=True, exist_ok=True)
    cases = [case(name, seed) for seed, name in enumerate(CASES)]
    (OUT / "cases.json").write_text(json.dumps({"at2": "0.0.1", "cases": cases}, indent=1) + "\n", encoding="utf-8")
    print(f"{len(cases)} cases written to {OUT}")
