"""Per-token explanations of a classifier beyond raw attention, computed on the band.

Every method gives one score per token of one example, for the class IG explains (its ``target``).
``F`` is that class's softmax probability, ``e`` the output of the embedding module (IG's layer), ``A``
a head's attention with rows = attending queries, ``o_i = Σ_j A_ij v_j`` its output at query ``i``
(before the output projection ``W_O``):

* ``attention_last`` / ``attention_all`` — raw received attention ``Σ_h Σ_i A_ij`` over the heads of
  the last layer / of every layer (the attention vector of the similarity tables, unscaled).
* ``value_norm`` — Kobayashi et al. (EMNLP 2020), "Attention is not only a weight": ``Σ_h Σ_i
  ‖A_ij f_h(x_j)‖`` with ``f_h(x) = (x W_V^h + b_V^h) W_O^h`` the value vector transformed by the
  head's slice of the output projection. The norm only depends on the key, so it multiplies the
  attention a key receives; global rows with a value projection of their own (the architecture's
  ``value_projections()["global"]``) are weighted with its norm. Summed over the heads of
  ``explanations.layers`` (the per-head norms, the upper bound of the norm of their sum).
* ``rollout`` — Abnar & Zuidema (ACL 2020): the CLS row of ``Ã_L ⋯ Ã_1`` with ``Ã = ½ mean_h A + ½ I``.
  The full product widens the band by the window at every layer (``min(n, 1 + l·w)`` keys per row
  after ``l`` layers) and, through the global token's row and column, is dense from the second layer
  on, so it is never formed: the CLS row is
  carried down as a vector, ``r ← ½ r + ½ rᵀ Ā_l``, and ``rᵀ Ā_l`` is the attention each key receives
  from queries weighted by ``r`` — :func:`attnlens.attention.band.received_attention` of a weighted band.
  Time ``O(L · n · w)``, memory ``O(n)`` beyond one head-averaged band, whatever the depth.
* ``grad_attention`` — ``Σ_h Σ_i A_ij · ∂F/∂A_ij`` (signed). ``A`` enters the network only through
  ``o_i``, so ``∂F/∂A_ij = ⟨∂F/∂o_i, v_j⟩``: the gradient band is the band of products of the output
  gradients with the value vectors (global rows with their own value projection's), computed block by
  block like the attention scores themselves (:func:`band_products`).
* ``saliency`` — ``Σ_d |∂F/∂e_jd|``; ``grad_input`` — ``Σ_d e_jd · ∂F/∂e_jd`` (signed): Captum's ``Saliency``
  and ``InputXGradient`` of :class:`EmbeddingForward`, ``F`` as a function of the embedding output.
* ``attnlrp`` — AttnLRP (Achtibat et al., ICML 2024): the relevance of the target class's *logit* (not its
  probability) from one forward and one backward pass with AttnLRP's modified gradients
  (:mod:`attnlens.attribution.attnlrp`), ``Σ_d e_jd · ∂̃f/∂e_jd`` (signed); the row keeps the explained logit and
  ``δ = f − Σ_j R_j``, what the biases and the softmax absorbed.
* ``occlusion`` — sentence groups (whole sentences, each ending with a ``.``, ``!`` or ``?`` token,
  packed into spans of at most ``occlusion_max_tokens``; a longer sentence is cut) replaced on the token
  ids by the pad token, IG's baseline token, with positions and masks kept: every token of a span
  scores ``F(x) − F(x with the span occluded)``: Captum's ``FeatureAblation`` with one feature group per
  span. Special tokens are never occluded and score 0.

Signed methods (``grad_attention``, ``grad_input``, ``attnlrp``, ``occlusion`` and IG) rank by signed score for
faithfulness and plausibility; agreement with IG compares magnitudes (the similarity tables' fixed mode).

Every method is checked in ``tests/test_explanations.py``: the attention methods against a dense
re-implementation of the model's self-attention whose ``n × n`` matrices are leaves of the graph, the
gradient methods against plain Captum calls set up by the test itself and a finite difference, occlusion
against a plain ``FeatureAblation`` and a brute-force loop, each also on a toy whose answer is known in
closed form.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from captum.attr import FeatureAblation, InputXGradient, LayerActivation, Saliency

from attnlens.attention.band import Band, layer_configuration, received_attention
from attnlens.attention.weighted import grad_attention_received, rollout, value_norm_received, value_norms
from attnlens.attribution.artifacts import METHODS
from attnlens.attribution.attnlrp import attnlrp
from attnlens.attribution.ig import Inputs
from attnlens.device import synchronize
from attnlens.models import architecture

#: Methods read from the no-gradient forward pass with attention outputs.
ATTENTION_PASS = ("attention_last", "attention_all", "value_norm", "rollout")
#: Methods Captum computes from the gradient at the embedding output (``Saliency``, ``InputXGradient``).
EMBEDDING_GRADIENT = ("saliency", "grad_input")
#: Sentence ends for occlusion spans (the token's text without word-start markers).
SENTENCE_ENDS = frozenset({".", "!", "?"})


def explanation_rows(example_id: str, input_ids: Sequence[int], target: int, res: Explanation,
                     methods: Sequence[str]) -> list[dict]:  # fmt: skip
    """The rows of an ``explain`` shard (:data:`EXPLANATION_TYPES`) for one explained example, one per method."""
    ids = np.asarray(input_ids, dtype=np.int32)
    return [
        {"example_id": example_id, "method": m, "input_ids": ids, "scores": res.scores[m], "target": int(target),
         "seconds": res.seconds[m], "forward_seconds": res.forward_seconds, "n_forwards": res.n_forwards[m],
         "explained": res.explained.get(m, np.nan), "delta": res.delta.get(m, np.nan)}
        for m in methods
    ]  # fmt: skip


# --- occlusion ----------------------------------------------------------------------------------------


def sentence_spans(tokens: Sequence[str], special: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Positions of sentence groups: consecutive whole sentences packed into spans of at most ``max_tokens``.

    A sentence ends with a ``.``, ``!`` or ``?`` token (or at the last non-special token); one longer than
    ``max_tokens`` is cut into pieces of ``max_tokens``. Special tokens belong to no span.
    """
    sentences, current = [], []
    for i, token in enumerate(tokens):
        if special[i]:
            continue
        current.append(i)
        if token.lstrip("Ġ▁#").strip() in SENTENCE_ENDS:
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    spans, group = [], []
    for sentence in sentences:
        for a in range(0, len(sentence), max_tokens):
            piece = sentence[a : a + max_tokens]
            if group and len(group) + len(piece) > max_tokens:
                spans.append(np.asarray(group))
                group = []
            group += piece
    if group:
        spans.append(np.asarray(group))
    return spans


def occlusion_scores(
    prob_fn: Callable[[torch.Tensor], torch.Tensor],
    input_ids: torch.Tensor,
    spans: Sequence[np.ndarray],
    fill_id: int,
    target: int,
    batch_size: int,
) -> np.ndarray:
    """``(n,)`` ``F_t(x) − F_t(x with the span's ids set to fill_id)`` for every token of every span: Captum's
    ``FeatureAblation`` with one feature group per span, ``batch_size`` spans per forward.

    ``prob_fn`` maps ``(b, n)`` ids to ``(b, classes)`` probabilities. Only the spans' tokens are the ablation's
    input (the rest are put back around them), so a token outside every span is never occluded and scores 0.
    """
    ids = input_ids.reshape(1, -1)
    scores = np.zeros(ids.shape[1])
    if not len(spans):
        return scores
    where = torch.as_tensor(np.concatenate(spans), dtype=torch.long, device=ids.device)
    groups = torch.cat([torch.full((len(span),), g, dtype=torch.long) for g, span in enumerate(spans)])

    def forward(content: torch.Tensor) -> torch.Tensor:
        full = ids.repeat(content.shape[0], 1)
        full[:, where] = content
        return prob_fn(full).double()  # float64 differences of the float32 probabilities

    with torch.no_grad():
        attr = FeatureAblation(forward).attribute(
            ids[:, where], baselines=fill_id, target=target, feature_mask=groups[None].to(ids.device),
            perturbations_per_eval=max(1, batch_size),
        )  # fmt: skip
    scores[where.cpu().numpy()] = attr[0].cpu().numpy()
    return scores


# --- one example --------------------------------------------------------------------------------------


class _Capture:
    """Hooks on the embedding module, on every attention module (its input) and on every output projection (its
    input ``o``), through the model seam."""

    def __init__(self, model, grad: bool):
        self.grad = grad
        self.hidden: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        arch = architecture(model)
        self.handles = [arch.embeddings(model).register_forward_hook(self._embed)]
        for layer in arch.layers(model):
            self.handles.append(arch.self_attention(layer).register_forward_pre_hook(self._hidden))
            self.handles.append(arch.output_projection(layer).register_forward_pre_hook(self._attn))

    def _embed(self, module, args, output):
        if self.grad and not output.requires_grad:  # frozen parameters: the gradient starts at the embedding output
            output.requires_grad_(True)

    def _hidden(self, module, args):
        self.hidden.append(args[0].detach())

    def _attn(self, module, args):  # the output projection's input: o, the heads concatenated
        if self.grad:
            args[0].retain_grad()
        self.outputs.append(args[0])

    def __enter__(self) -> _Capture:
        return self

    def __exit__(self, *exc) -> None:
        for h in self.handles:
            h.remove()


def _sync(device: torch.device) -> float:
    synchronize(device)
    return time.perf_counter()


def _probabilities(logits: torch.Tensor) -> torch.Tensor:
    """Softmax in the logits' precision, float32 at least (as IG's forward)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    return torch.softmax(logits, dim=-1)


def _heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """``(n, d)`` → ``(heads, n, d / heads)``."""
    return t.reshape(t.shape[0], heads, -1).transpose(0, 1)


class EmbeddingForward(torch.nn.Module):
    """``F(e) = softmax(logits)``: the classifier with the output of its embedding ``layer`` replaced by ``e``.

    What Captum's ``Saliency`` and ``InputXGradient`` differentiate: ``e`` is the output IG attributes to
    (``(b, n_pad, d)``: a model may pad inside before the embeddings), every other
    argument (``args``: masks, position ids) is the example's, repeated over the batch.
    """

    def __init__(self, model, layer: torch.nn.Module, args: dict[str, torch.Tensor]):
        super().__init__()
        self.model, self.layer, self.args = model, layer, args

    def from_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``F`` of the token ids themselves (no replacement)."""
        return _probabilities(self.model(**{**self.args, "input_ids": input_ids}).logits)

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        b = embeddings.shape[0]
        handle = self.layer.register_forward_hook(lambda module, hook_args, output: embeddings)
        try:
            logits = self.model(**{k: v.expand(b, *v.shape[1:]) for k, v in self.args.items()}).logits
        finally:
            handle.remove()
        return _probabilities(logits)


def attention_pass(model, args: dict[str, torch.Tensor]) -> tuple[list[Band], list[torch.Tensor]]:
    """One forward without gradient: every layer's :class:`Band` and the hidden states entering it."""
    with torch.no_grad(), _Capture(model, grad=False) as cap:
        bands = architecture(model).run(model, args, attentions=True)[1][0]
    return bands, [h[0] for h in cap.hidden]


@torch.no_grad()
def attention_score(method: str, model, bands: Sequence[Band], hidden: Sequence[torch.Tensor], layers: str):
    """``(n,)`` scores of one :data:`ATTENTION_PASS` method from :func:`attention_pass`'s outputs."""
    if method.startswith("attention_"):
        received = torch.stack([received_attention(b) for b in bands])
        return layer_configuration(received, method.removeprefix("attention_"))
    if method == "rollout":
        return rollout(bands, start=0)
    if method != "value_norm":
        raise ValueError(f"{method!r} is not computed from the attention pass")
    heads = model.config.num_attention_heads
    arch = architecture(model)
    per_layer = []
    for layer, band, h in zip(arch.layers(model), bands, hidden, strict=True):
        values, proj = arch.value_projections(layer), arch.output_projection(layer)
        norm_global = value_norms(h, values.get("global", values["local"]), proj, heads) if band.n_global else None
        per_layer.append(value_norm_received(band, value_norms(h, values["local"], proj, heads), norm_global))
    return layer_configuration(torch.stack(per_layer), layers)


@dataclass
class Gradients:
    """What one forward + backward of ``F`` leaves for the gradient methods."""

    bands: list[Band] | None  # attention of every layer (when asked for)
    hidden: list[torch.Tensor]  # (n_pad, d) input of every self-attention module
    output_grads: list[torch.Tensor]  # (n_pad, d) ∂F/∂o of every self-attention module (heads concatenated)


def gradient_pass(model, args: dict[str, torch.Tensor], target: int, attentions: bool) -> Gradients:
    """One forward + backward of ``F = softmax(logits)[target]`` with hooks on every attention module's output.

    The model's parameters should be frozen (:func:`attnlens.attribution.ig.freeze`): the gradient starts at
    the embedding output.
    """
    with _Capture(model, grad=True) as cap:
        res, bands = architecture(model).run(model, args, attentions=attentions)
        _probabilities(res.logits)[0, target].backward()
    return Gradients(
        bands=None if bands is None else bands[0],
        hidden=[h[0] for h in cap.hidden],
        output_grads=[o.grad[0] for o in cap.outputs],
    )


@torch.no_grad()
def grad_attention_score(model, grads: Gradients, layers: str) -> torch.Tensor:
    """``(n,)`` gradient-weighted attention from :func:`gradient_pass`'s outputs (with ``attentions``)."""
    heads = model.config.num_attention_heads
    arch = architecture(model)
    per_layer = []
    for layer, band, h, g in zip(arch.layers(model), grads.bands, grads.hidden, grads.output_grads, strict=True):
        values = arch.value_projections(layer)
        value = _heads(values["local"](h), heads)
        value_global = _heads(values.get("global", values["local"])(h), heads)
        per_layer.append(grad_attention_received(band, _heads(g, heads), value, value_global))
    return layer_configuration(torch.stack(per_layer), layers)


@dataclass
class Explanation:
    """Every requested method's scores for one example, and what each cost."""

    scores: dict[str, np.ndarray] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    n_forwards: dict[str, int] = field(default_factory=dict)
    forward_seconds: float = float("nan")
    explained: dict[str, float] = field(default_factory=dict)  # the quantity a conserving method explains
    delta: dict[str, float] = field(default_factory=dict)  # explained − Σ scores


def explain_example(
    model,
    inputs: Inputs,
    target: int,
    methods: Sequence[str],
    *,
    layers: str = "all",
    tokens: Sequence[str] = (),
    special: np.ndarray | None = None,
    pad_id: int | None = None,
    occlusion_max_tokens: int = 48,
    batch_size: int = 8,
) -> Explanation:
    """Scores of every method in ``methods`` for one example (``inputs`` as IG prepares them).

    The cost of a method is the wall time of the passes it needs (the forward with attention
    outputs, the forward + backward, or its occluded forwards) plus its own computation; each pass
    runs once and is counted for every method that uses it. ``forward_seconds`` is one plain
    forward, the unit of the leaderboard's cost ratio.
    """
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        raise ValueError(f"unknown explanation methods {unknown}; expected some of {METHODS}")
    device = inputs.input_ids.device
    n = inputs.input_ids.shape[1]
    args = {"input_ids": inputs.input_ids, **inputs.forward_kwargs()}
    out = Explanation()
    with torch.no_grad():
        model(**args)  # warm-up: the first call of a shape pays for allocations
        t0 = _sync(device)
        model(**args)
        out.forward_seconds = _sync(device) - t0

    wanted = [m for m in ATTENTION_PASS if m in methods]
    if wanted:
        t0 = _sync(device)
        bands, hidden = attention_pass(model, args)
        shared = _sync(device) - t0
        for method in wanted:
            t0 = _sync(device)
            out.scores[method] = attention_score(method, model, bands, hidden, layers).double().cpu().numpy()[:n]
            out.seconds[method] = shared + _sync(device) - t0
            out.n_forwards[method] = 1
        del bands, hidden

    wanted = [m for m in EMBEDDING_GRADIENT if m in methods]
    if wanted:
        t0 = _sync(device)
        forward = EmbeddingForward(model, architecture(model).embeddings(model), args)
        embeddings = LayerActivation(forward.from_ids, forward.layer).attribute(inputs.input_ids).requires_grad_()
        shared = _sync(device) - t0
        for method in wanted:
            t0 = _sync(device)
            if method == "saliency":
                grad = Saliency(forward).attribute(embeddings, target=target, abs=True)
            else:
                grad = InputXGradient(forward).attribute(embeddings, target=target)
            out.scores[method] = grad[0].detach().sum(-1).double().cpu().numpy()[:n]
            out.seconds[method] = shared + _sync(device) - t0
            out.n_forwards[method] = 1
        del embeddings

    if "grad_attention" in methods:
        t0 = _sync(device)
        grads = gradient_pass(model, args, target, attentions=True)
        out.scores["grad_attention"] = grad_attention_score(model, grads, layers).double().cpu().numpy()[:n]
        out.seconds["grad_attention"] = _sync(device) - t0
        out.n_forwards["grad_attention"] = 1
        del grads

    if "attnlrp" in methods:
        t0 = _sync(device)
        relevance = attnlrp(model, inputs, target)
        out.scores["attnlrp"] = relevance.scores
        out.seconds["attnlrp"] = _sync(device) - t0
        out.n_forwards["attnlrp"] = 1
        out.explained["attnlrp"], out.delta["attnlrp"] = relevance.explained, relevance.delta

    if "occlusion" in methods:
        if special is None or pad_id is None:
            raise ValueError("occlusion needs the example's tokens, special-token mask and pad id")
        t0 = _sync(device)
        spans = sentence_spans(tokens, special, occlusion_max_tokens)

        def prob_fn(ids: torch.Tensor) -> torch.Tensor:
            b = ids.shape[0]
            return _probabilities(model(input_ids=ids, **inputs.forward_kwargs(b)).logits)

        out.scores["occlusion"] = occlusion_scores(prob_fn, inputs.input_ids, spans, pad_id, target, batch_size)
        out.seconds["occlusion"] = _sync(device) - t0
        out.n_forwards["occlusion"] = len(spans) + 1
    return out


# --- artifacts ----------------------------------------------------------------------------------------
