"""``decoders.json``: the decoder families behind the model seam (Llama, Mistral, Qwen 3, Gemma 3) read at
8 192, 16 384 and 32 768 tokens, random weights, in two shapes:

* ``small``: the sizes ``model.source: from_config`` draws from the packaged MiniLM (6 layers, hidden 384, 12 query
  heads sharing 4 key/value heads, feed-forward 1 536, its 30 522-token vocabulary);
* ``0.5b``: Qwen2.5-0.5B's sizes (24 layers, hidden 896, 14 query heads sharing 2 key/value heads, feed-forward
  4 864, a 32 000-token vocabulary: about 0.4 B parameters).

Mistral slides a window of 4 096 keys in every layer (Mistral 7B v0.1's), Gemma 3 one of 1 024 in five layers of
every six (the released models'), Llama and Qwen 3 attend to every earlier token. Per family, shape and length:

* ``forward_s``: Hugging Face's own forward (sdpa) without attention outputs;
* ``forward_with_bands_s``: attnlens's forward returning every layer's queries and keys (:func:`forward_bands`);
* ``summaries_s`` and ``summaries_over_forward`` (target ≤ 0.5): received attention and the top-k both ways, every
  layer reduced by query blocks over only the keys a block can reach;
* ``probabilities_s`` and ``probabilities_over_forward``: forming every block's probabilities alone (scores over
  the reachable keys, mask, softmax; :meth:`~attnlens.attention.full.FullLayer.reachable_blocks`), no reduction:
  the least any exact reading of the layers costs, the floor under ``summaries_s``;
* ``peak_extra_over_dense`` (target ≤ 2 %): the summaries' peak extra memory (every layer's queries and keys already
  held) over the dense ``layers · heads · n² · 4`` bytes that ``output_attentions`` would return;
* ``attnlrp_s``, ``forward_backward_s`` and ``attnlrp_over_forward_backward`` (target ≤ 2): AttnLRP's relevance of
  one logit against a plain forward and backward to the embeddings;
* ``huggingface_attentions_s``: Hugging Face's eager ``output_attentions`` forward where its outputs fit (8 GiB on a
  CPU, half the free memory on a card), else why it was not run.

On a CUDA device (``--device cuda``) every time is synchronised and memory is the card's peak allocated bytes;
the summaries run where :func:`forward_bands` leaves the layers, on the card (:mod:`attnlens.attention.topk`). On
the CPU each family, shape and length runs in an interpreter of its own under the strict allocator
(:data:`measuring.STRICT_MALLOC`), as ``architectures.json``.
"""

from __future__ import annotations

import os
from functools import partial

import torch

from attnlens.attention.summaries import compute_example_summaries
from attnlens.attribution.explanations import gradient_pass
from attnlens.attribution.ig import Inputs, freeze
from attnlens.attribution.lrp import attnlrp
from attnlens.models import architecture, draw_decoder, forward_bands
from benchmarks.measuring import STRICT_MALLOC, Clock, bench_child, over
from benchmarks.records import seconds, span, thousands, write_record

#: The two shapes (see the module docstring), and a tiny one the test suite runs.
SHAPES = {
    "small": {"layers": 6, "hidden": 384, "heads": 12, "key_heads": 4, "ffn": 1536, "vocab": 30522},
    "0.5b": {"layers": 24, "hidden": 896, "heads": 14, "key_heads": 2, "ffn": 4864, "vocab": 32000},
    "tiny": {"layers": 2, "hidden": 48, "heads": 6, "key_heads": 2, "ffn": 96, "vocab": 1000},
}
#: Each family's windows, as its released models have them.
WINDOWS = {
    "llama": {},
    "mistral": {"sliding_window": 4096},
    "qwen3": {},
    "gemma3": {"sliding_window": 1024},  # five local layers to every global one (the config's default pattern)
}
FAMILIES = tuple(WINDOWS)
LENGTHS = (8192, 16384, 32768)
#: Hugging Face's ``output_attentions`` forward runs on a CPU where its outputs fit in this many bytes.
HF_ATTENTIONS_LIMIT = 8 * 2**30


def decoder_entries(family: str, shape: str, n: int, implementation: str = "sdpa") -> dict:
    """The configuration entries of a random-weight decoder of ``family`` and ``shape`` taking ``n`` tokens (also
    what :mod:`benchmarks.beside` hands the other tools' environments, to build the same model there)."""
    s = SHAPES[shape]
    head_dim = s["hidden"] // s["heads"]
    extra = dict(WINDOWS[family])
    if family == "gemma3":
        extra["query_pre_attn_scalar"] = head_dim
    return {
        "vocab_size": s["vocab"],
        "hidden_size": s["hidden"],
        "intermediate_size": s["ffn"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "num_key_value_heads": s["key_heads"],
        "head_dim": head_dim,
        "max_position_embeddings": n,
        "pad_token_id": 0,
        "num_labels": 2,
        "tie_word_embeddings": False,
        "attn_implementation": implementation,
        **extra,
    }


def decoder(
    family: str, shape: str, n: int, implementation: str = "sdpa", seed: int = 0, head: str = "sequence_classification"
):
    """A random-weight float32 decoder of ``family`` and ``shape`` taking ``n`` tokens, in eval mode: a classifier,
    or another ``head`` (``causal_lm``: :mod:`benchmarks.suites.contexts`)."""
    return draw_decoder(family, seed, head, **decoder_entries(family, shape, n, implementation))


def probabilities_only(bands) -> None:
    """Form every block of every layer's probabilities and drop it (the summaries' work before any reduction)."""
    for band in bands:
        for _ in band.reachable_blocks():
            pass


def bench_decoder_length(family: str, shape: str, n: int, device_name: str = "cpu", k: int = 10) -> dict:
    """One family, shape and length, in this process (see the module docstring)."""
    device = torch.device(device_name)
    clock = Clock(device)
    model = decoder(family, shape, n).to(device)
    freeze(model)
    arch = architecture(model)
    arch.prepare(model)
    config = model.config
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, config.vocab_size, (1, n), generator=g).to(device)
    mask = torch.ones_like(ids)
    batch = {"input_ids": ids, "attention_mask": mask}
    dense = config.num_hidden_layers * config.num_attention_heads * n * n * 4
    row = {
        "family": family,
        "shape": shape,
        "tokens": n,
        "device": str(device),
        "describe": arch.describe(config),
        "parameters": sum(p.numel() for p in model.parameters()),
        "dense_bytes": dense,
    }
    with torch.no_grad():
        model(**batch)  # warm-up
        _, seconds, peak = clock(lambda: model(**batch))
        row["forward_s"] = round(seconds, 3)
        row["forward_peak_extra_over_dense"] = over(peak, dense)
        bands, seconds, _ = clock(lambda: forward_bands(model, batch))
        row["forward_with_bands_s"] = round(seconds, 3)
        compute_example_summaries(bands[:1], k)  # the kernels' first call
        summary, seconds, peak = clock(partial(compute_example_summaries, bands, k))  # where the bands are
        del summary
        row["summaries_s"] = round(seconds, 3)
        row["summaries_peak_extra_over_dense"] = over(peak, dense)
        _, seconds, _ = clock(partial(probabilities_only, bands))
        row["probabilities_s"] = round(seconds, 3)
        del bands
    row["summaries_over_forward"] = round(row["summaries_s"] / row["forward_s"], 3)
    row["summaries_over_forward_target"] = 0.5
    row["probabilities_over_forward"] = round(row["probabilities_s"] / row["forward_s"], 3)
    row["peak_extra_over_dense"] = row["summaries_peak_extra_over_dense"]
    row["peak_extra_over_dense_target"] = 0.02
    _, seconds, peak = clock(lambda: gradient_pass(model, batch, target=1, attentions=False))
    row["forward_backward_s"] = round(seconds, 3)
    row["forward_backward_peak_extra_over_dense"] = over(peak, dense)
    inputs = Inputs(ids, ids, mask, arch.position_ids(config, n).to(device), {})
    relevance, seconds, peak = clock(lambda: attnlrp(model, inputs, 1))
    row["attnlrp_s"] = round(seconds, 3)
    row["attnlrp_peak_extra_over_dense"] = over(peak, dense)
    row["attnlrp_over_forward_backward"] = round(row["attnlrp_s"] / row["forward_backward_s"], 3)
    row["attnlrp_over_forward_backward_target"] = 2.0
    row["attnlrp_conservation_delta"] = float(relevance.delta)
    limit = torch.cuda.mem_get_info(device)[0] // 2 if device.type == "cuda" else HF_ATTENTIONS_LIMIT
    if dense <= limit:
        model.set_attn_implementation("eager")
        with torch.no_grad():
            _, seconds, peak = clock(lambda: model(**batch, output_attentions=True))
        row["huggingface_attentions_s"] = round(seconds, 3)
        row["huggingface_attentions_peak_extra_over_dense"] = over(peak, dense)
    else:
        row["huggingface_attentions_s"] = (
            f"not run: its dense outputs ({dense / 2**30:.0f} GiB) do not fit in {limit / 2**30:.0f} GiB"
        )
    row["memory_method"] = (
        "peak extra over the memory before the step: RSS (VmHWM reset) on a CPU, the card's peak allocated bytes on "
        "CUDA; the summaries' with every layer's queries and keys already held, where the forward left them"
    )
    return row


#: What ``make bench`` runs on the CPU: the small shape at every length, the 0.5 B one at 8 192 tokens (at 32 768
#: tokens its AttnLRP alone is tens of minutes on two cores; ``-m benchmarks.decoders --device cuda`` runs it all).
#: The 0.5 B rows need more than 24 GiB of host memory for the float32 gradient passes: on a machine with less, the
#: row says it was killed (measured: a Qwen 3 at 8 192 tokens reached 24 GiB and was killed after 481 s).
CPU_PLAN = (*(("small", n) for n in LENGTHS), ("0.5b", 8192))


def bench_decoders(families=FAMILIES, plan=CPU_PLAN) -> list[dict]:
    """Every family at every ``(shape, length)`` of ``plan`` on the CPU, each in a fresh interpreter with strict
    memory accounting."""
    strict = {**os.environ, **STRICT_MALLOC}
    rows = []
    for shape, n in plan:
        for family in families:
            try:
                rows.append(bench_child("decoders", "bench_decoder_length", n, strict, family, shape))
            except RuntimeError as failed:  # a row that does not fit this machine says so; the rest still run
                rows.append({"family": family, "shape": shape, "tokens": n, "not_run": str(failed).splitlines()[0]})
    return rows


def record(result: dict) -> None:
    """The record ``decoders`` (benchmarks.records): at the longest length run, the summaries over the forward of the
    families with a sliding window and of the full causal ones, and AttnLRP over a forward + backward."""
    rows = [r for r in result["rows"] if "summaries_over_forward" in r]
    n = max(r["tokens"] for r in rows)
    at = [r for r in rows if r["tokens"] == n]
    windowed = [r["summaries_over_forward"] for r in at if WINDOWS[r["family"]].get("sliding_window")]
    full = [r["summaries_over_forward"] for r in at if not WINDOWS[r["family"]].get("sliding_window")]
    lrp = [r["attnlrp_over_forward_backward"] for r in rows]
    shares = [f"the windowed families' summaries {span(windowed, 2)} × the forward"] if windowed else []
    shares += [f"the full causal ones {span(full, 2)} ×"] if full else []
    answer = f"at {n} tokens " + ", ".join(shares) + f"; AttnLRP {span(lrp, 2)} × a forward + backward"
    write_record(
        "decoders",
        "What do the decoders' summaries and AttnLRP cost on a CPU?",
        answer,
        "[`decoders.json`](#decodersjson-the-cpu-plan)",
        "benchmarks.suites.decoders",
        {"tokens": n, "windowed": windowed, "full": full, "attnlrp_over_forward_backward": lrp},
        tables={"rows": rows_table(rows)},
        provenance=result.get("provenance"),
    )


def rows_table(rows: list[dict]) -> dict:
    """One row a family, shape and length: the forward, with queries and keys, the probabilities alone, the
    summaries (and over the forward), forward + backward, AttnLRP (and over it), the summaries' peak over dense."""

    def share(value: float | None) -> str:
        return "–" if value is None else "< 0.01 %" if value < 1e-4 else f"{100 * value:.2f} %"

    table = [
        [r["family"], r.get("shape", "small"), thousands(r["tokens"]), seconds(r["forward_s"]),
         seconds(r["forward_with_bands_s"]), seconds(r["probabilities_s"]), seconds(r["summaries_s"]),
         f"{r['summaries_over_forward']:.2f}", seconds(r["forward_backward_s"]), seconds(r["attnlrp_s"]),
         f"{r['attnlrp_over_forward_backward']:.2f}", share(r.get("summaries_peak_extra_over_dense"))]
        for r in rows
    ]  # fmt: skip
    header = ["family", "shape", "tokens", "forward", "with q, k", "probabilities alone", "summaries", "÷ forward"]
    return {
        "header": [*header, "forward + backward", "AttnLRP", "÷ fwd + bwd", "summaries' peak / dense"],
        "rows": table,
    }
