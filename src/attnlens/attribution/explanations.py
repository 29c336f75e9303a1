"""Per-token explanations of a classifier beyond raw attention, computed on the band.

Every method gives one score per token of one example, for the output IG explains (its ``target``).
``F`` is the task's readout of that output (:mod:`attnlens.tasks`: the class's softmax probability for a
classifier, the value for a regression), ``e`` the output of the embedding module (IG's layer), ``A``
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
  and ``InputXGradient`` of :class:`EmbeddingForward`, ``F`` as a function of the embedding output, both read
  from one gradient (Captum's ``Saliency`` without the absolute value, taken once by the shared pass: the two
  classes each ran their own backward of the same function).
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
from typing import Any

import numpy as np
import torch
from captum.attr import FeatureAblation, LayerActivation, Saliency

from attnlens.attention.band import Band, layer_configuration, received_attention
from attnlens.attention.weighted import grad_attention_received, rollout, value_norm_received, value_norms
from attnlens.attribution.attnlrp import attnlrp_batch
from attnlens.attribution.ig import Inputs, stack_inputs
from attnlens.attribution.methods import PASSES, REGISTRY, get_method
from attnlens.attribution.removal import copies_probe
from attnlens.device import batch_size, synchronize
from attnlens.models import architecture
from attnlens.models.base import hidden_state
from attnlens.registry import Registry
from attnlens.tasks import task_of

#: Sentence ends for occlusion spans (the token's text without word-start markers).
SENTENCE_ENDS = frozenset({".", "!", "?"})


def explanation_rows(example_id: str, input_ids: Sequence[int], target: int, res: Explanation,
                     methods: Sequence[str], target_rank: int = 0) -> list[dict]:  # fmt: skip
    """The rows of an ``explain`` shard (:data:`EXPLANATION_TYPES`) for one explained example and target (its place
    ``target_rank`` among the document's explained targets), one per method."""
    ids = np.asarray(input_ids, dtype=np.int32)
    return [
        {"example_id": example_id, "method": m, "input_ids": ids, "scores": res.scores[m], "target": int(target),
         "target_rank": int(target_rank),
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


def occlusion_batch(requested: int | str, methods: Sequence[str], model, on,
                    documents: Sequence[Sequence[int]]) -> tuple[int, dict]:  # fmt: skip
    """Occluded copies per forward for a job (:func:`attnlens.device.batch_size`): ``requested``
    (``explanations.batch_size``), or with ``auto`` the most copies of the job's longest document the card holds;
    probed only where ``methods`` ask for occlusion."""
    longest = max(documents, key=len, default=None)
    if longest is None or "occlusion" not in methods:
        return (1 if requested == "auto" else int(requested)), {"how": "no occlusion in the job"}
    return batch_size(requested, on, copies_probe(model, longest), len(longest), "occlusion's batch")


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
            self.handles.append(arch.self_attention(layer).register_forward_pre_hook(self._hidden, with_kwargs=True))
            self.handles.append(arch.output_projection(layer).register_forward_pre_hook(self._attn))

    def _embed(self, module, args, output):
        if self.grad and not output.requires_grad:  # frozen parameters: the gradient starts at the embedding output
            output.requires_grad_(True)

    def _hidden(self, module, args, kwargs):  # a decoder's attention takes its hidden state by keyword
        self.hidden.append(hidden_state(args, kwargs).detach())

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


def _heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """``(n, d)`` → ``(heads, n, d / heads)``."""
    return t.reshape(t.shape[0], heads, -1).transpose(0, 1)


class EmbeddingForward(torch.nn.Module):
    """``F(e)``, the task's readout (``softmax(logits)`` for a classifier): the model with the output of its
    embedding ``layer`` replaced by ``e``.

    What Captum's ``Saliency`` and ``InputXGradient`` differentiate: ``e`` is the output IG attributes to
    (``(b, n_pad, d)``: a model may pad inside before the embeddings), every other
    argument (``args``: masks, position ids) is the example's, repeated over the batch.
    """

    def __init__(self, model, layer: torch.nn.Module, args: dict[str, torch.Tensor]):
        super().__init__()
        self.model, self.layer, self.args = model, layer, args
        self.task = task_of(model.config)

    def from_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``F`` of the token ids themselves (no replacement)."""
        return self.task.readout(self.task.logits(self.model(**{**self.args, "input_ids": input_ids})))

    def forward(self, embeddings: torch.Tensor) -> torch.Tensor:
        b = embeddings.shape[0]
        handle = self.layer.register_forward_hook(lambda module, hook_args, output: embeddings)
        try:
            out = self.model(**{k: v.expand(b, *v.shape[1:]) for k, v in self.args.items()})
        finally:
            handle.remove()
        return self.task.readout(self.task.logits(out))


def attention_pass(model, args: dict[str, torch.Tensor]) -> tuple[list[Band], list[torch.Tensor]]:
    """One forward without gradient: every layer's :class:`Band` and the hidden states entering it."""
    with torch.no_grad(), _Capture(model, grad=False) as cap:
        bands = architecture(model).run(model, args, attentions=True)[1][0]
    return bands, [h[0] for h in cap.hidden]


@dataclass
class Gradients:
    """What one forward + backward of ``F`` leaves for the gradient methods."""

    bands: list[Band] | None  # attention of every layer (when asked for)
    hidden: list[torch.Tensor]  # (n_pad, d) input of every self-attention module
    output_grads: list[torch.Tensor]  # (n_pad, d) ∂F/∂o of every self-attention module (heads concatenated)


def gradient_pass(model, args: dict[str, torch.Tensor], target: int, attentions: bool) -> Gradients:
    """One forward + backward of ``F[target]`` (the task's readout: ``softmax(logits)`` for a classifier) with hooks
    on every attention module's output.

    The model's parameters should be frozen (:func:`attnlens.attribution.ig.freeze`): the gradient starts at
    the embedding output.
    """
    with _Capture(model, grad=True) as cap:
        res, bands = architecture(model).run(model, args, attentions=attentions)
        task = task_of(model.config)
        task.readout(task.logits(res))[0, target].backward()
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


# --- the registry's passes and scorers ----------------------------------------------------------------


@dataclass
class Example:
    """One example as every scorer sees it: the model, IG's inputs and target, and the run's options."""

    model: Any
    inputs: Inputs
    target: int
    layers: str = "all"  # the layer configuration value_norm and grad_attention sum over
    tokens: Sequence[str] = ()
    special: np.ndarray | None = None
    pad_id: int | None = None
    occlusion_max_tokens: int = 48
    batch_size: int = 8

    @property
    def n(self) -> int:
        """The example's tokens (a model may pad inside; scores are cut back to them)."""
        return self.inputs.input_ids.shape[1]

    @property
    def args(self) -> dict[str, torch.Tensor]:
        """The forward's keyword arguments: the ids and the masks and positions IG prepared."""
        return {"input_ids": self.inputs.input_ids, **self.inputs.forward_kwargs()}


@dataclass
class Scored:
    """What a scorer returns: ``(n,)`` float64 scores, the forwards it took, and what a conserving method explains."""

    scores: np.ndarray
    n_forwards: int = 1
    explained: float | None = None
    delta: float | None = None


#: ``{pass name: run(example) -> shared}`` for every pass of :data:`attnlens.attribution.methods.PASSES`.
PASS_RUNNERS: Registry[Callable[[Example], Any]] = Registry("shared passes", "methods.PASSES")
#: ``{method name: scores(example, shared) -> Scored}``, one per registered method.
SCORERS: Registry[Callable[[Example, Any], Scored]] = Registry("methods' scorers", "explanations.methods")
#: ``{method name: scores(examples) -> [Scored]}``: methods whose one pass explains several documents together (its
#: rules act per example); each also has its :data:`SCORERS` entry, the batch of one.
BATCH_SCORERS: Registry[Callable[[Sequence[Example]], list[Scored]]] = Registry(
    "methods' batch scorers", "explanations.methods"
)


def runs_pass(name: str):
    """Register the function that runs the shared pass ``name`` for one example."""
    if name not in PASSES:
        raise ValueError(f"no pass {name!r} in attnlens.attribution.methods.PASSES")
    return PASS_RUNNERS.register(name)


def scorer(name: str):
    """Register the computation of the method ``name`` (its card registered in :mod:`attnlens.attribution.methods`):
    ``scores(example, shared) -> Scored``, ``shared`` the output of the pass the card needs."""
    get_method(name)
    return SCORERS.register(name)


def batch_scorer(name: str):
    """Register the computation of the method ``name`` over several documents in one pass:
    ``scores(examples) -> [Scored]``, one per example, each what the method's :func:`scorer` gives it alone (to
    rounding). :func:`explain_examples` runs it on documents grouped by length."""
    get_method(name)
    return BATCH_SCORERS.register(name)


def _numpy(scores: torch.Tensor, n: int) -> np.ndarray:
    return scores.double().cpu().numpy()[:n]


@runs_pass("attention")
def _attention(x: Example) -> tuple[list[Band], list[torch.Tensor]]:
    return attention_pass(x.model, x.args)


@dataclass
class EmbeddingGradient:
    """What the ``embedding_gradient`` pass leaves: ``F`` of the embedding output, that output ``e``
    ``(1, n_pad, d)`` and ``∂F_target/∂e`` (Captum's ``Saliency`` without its absolute value: one backward, read by
    every method of the pass)."""

    forward: EmbeddingForward
    embeddings: torch.Tensor
    gradient: torch.Tensor


@runs_pass("embedding_gradient")
def _embedding_gradient(x: Example) -> EmbeddingGradient:
    forward = EmbeddingForward(x.model, architecture(x.model).embeddings(x.model), x.args)
    embeddings = LayerActivation(forward.from_ids, forward.layer).attribute(x.inputs.input_ids).requires_grad_()
    gradient = Saliency(forward).attribute(embeddings, target=x.target, abs=False).detach()
    return EmbeddingGradient(forward, embeddings.detach(), gradient)


@runs_pass("gradient")
def _gradient(x: Example) -> Gradients:
    return gradient_pass(x.model, x.args, x.target, attentions=True)


@runs_pass("own")
def _own(x: Example) -> None:
    return None


def _received(bands: Sequence[Band], layers: str) -> torch.Tensor:
    return layer_configuration(torch.stack([received_attention(b) for b in bands]), layers)


@scorer("attention_last")
@torch.no_grad()
def _attention_last(x: Example, shared) -> Scored:
    return Scored(_numpy(_received(shared[0], "last"), x.n))


@scorer("attention_all")
@torch.no_grad()
def _attention_all(x: Example, shared) -> Scored:
    return Scored(_numpy(_received(shared[0], "all"), x.n))


@scorer("rollout")
@torch.no_grad()
def _rollout(x: Example, shared) -> Scored:
    start = architecture(x.model).readout(x.n)[1]  # the token the head reads: [CLS], a decoder's last token
    return Scored(_numpy(rollout(shared[0], start=start), x.n))


@scorer("value_norm")
@torch.no_grad()
def _value_norm(x: Example, shared) -> Scored:
    bands, hidden = shared
    model = x.model
    heads = model.config.num_attention_heads
    arch = architecture(model)
    per_layer = []
    for layer, band, h in zip(arch.layers(model), bands, hidden, strict=True):
        values, proj = arch.value_projections(layer), arch.output_projection(layer)
        norm_global = value_norms(h, values.get("global", values["local"]), proj, heads) if band.n_global else None
        per_layer.append(value_norm_received(band, value_norms(h, values["local"], proj, heads), norm_global))
    return Scored(_numpy(layer_configuration(torch.stack(per_layer), x.layers), x.n))


@scorer("saliency")
def _saliency(x: Example, shared: EmbeddingGradient) -> Scored:
    return Scored(_numpy(shared.gradient[0].abs().sum(-1), x.n))  # Captum's Saliency(abs=True)


@scorer("grad_input")
def _grad_input(x: Example, shared: EmbeddingGradient) -> Scored:
    return Scored(_numpy((shared.gradient[0] * shared.embeddings[0]).sum(-1), x.n))  # Captum's InputXGradient


@scorer("grad_attention")
def _grad_attention(x: Example, shared: Gradients) -> Scored:
    return Scored(_numpy(grad_attention_score(x.model, shared, x.layers), x.n))


@batch_scorer("attnlrp")
def _attnlrp_documents(xs: Sequence[Example]) -> list[Scored]:
    model = xs[0].model
    inputs = stack_inputs([x.inputs for x in xs], model.config.pad_token_id)
    relevance = attnlrp_batch(model, inputs, [x.target for x in xs], [x.n for x in xs])
    return [Scored(r.scores, n_forwards=1, explained=r.explained, delta=r.delta) for r in relevance]


@scorer("attnlrp")
def _attnlrp(x: Example, shared) -> Scored:
    return _attnlrp_documents([x])[0]


@scorer("occlusion")
def _occlusion(x: Example, shared) -> Scored:
    if x.special is None or x.pad_id is None:
        raise ValueError("occlusion needs the example's tokens, special-token mask and pad id")
    spans = sentence_spans(x.tokens, x.special, x.occlusion_max_tokens)

    task = task_of(x.model.config)

    def prob_fn(ids: torch.Tensor) -> torch.Tensor:
        return task.readout(task.logits(x.model(input_ids=ids, **x.inputs.forward_kwargs(ids.shape[0]))))

    scores = occlusion_scores(prob_fn, x.inputs.input_ids, spans, x.pad_id, x.target, x.batch_size)
    return Scored(scores, n_forwards=len(spans) + 1)


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
    """Scores of every method in ``methods`` (names of :data:`attnlens.attribution.methods.REGISTRY`) for one
    example (``inputs`` as IG prepares them).

    Each shared pass a requested method needs runs once, in the order of
    :data:`~attnlens.attribution.methods.PASSES`, and its methods are scored from it in registry order. The
    cost of a method is the wall time of its pass plus its own computation (a shared pass is counted for every
    method that uses it). ``forward_seconds`` is one plain forward, the unit of the leaderboard's cost ratio.
    """
    x = Example(model, inputs, target, layers, tokens, special, pad_id, occlusion_max_tokens, batch_size)
    return _explain(x, _checked(methods))


def _checked(methods: Sequence[str]) -> list[str]:
    cards = [get_method(m) for m in methods]
    missing = [c.name for c in cards if c.name not in SCORERS]
    if missing:
        raise ValueError(f"explanation methods {missing} are registered without a scorer (@scorer in this module)")
    return list(methods)


def _record(out: Explanation, method: str, res: Scored, seconds: float) -> None:
    out.scores[method] = res.scores
    out.seconds[method] = seconds
    out.n_forwards[method] = res.n_forwards
    if res.explained is not None:
        out.explained[method], out.delta[method] = res.explained, res.delta


def _explain(x: Example, methods: Sequence[str]) -> Explanation:
    device = x.inputs.input_ids.device
    args = x.args
    out = Explanation()
    with torch.no_grad():
        x.model(**args)  # warm-up: the first call of a shape pays for allocations
        t0 = _sync(device)
        x.model(**args)
        out.forward_seconds = _sync(device) - t0

    for needs in PASSES:
        wanted = [name for name, card in REGISTRY.items() if card.needs == needs and name in methods]
        if not wanted:
            continue
        t0 = _sync(device)
        shared = PASS_RUNNERS[needs](x)
        shared_seconds = _sync(device) - t0
        for method in wanted:
            t0 = _sync(device)
            res = SCORERS[method](x, shared)
            _record(out, method, res, shared_seconds + _sync(device) - t0)
        del shared
    return out


def document_groups(examples: Sequence[Example], documents: int) -> list[list[int]]:
    """Indices of ``examples`` in groups of at most ``documents`` that one pass of a batched method explains together:
    longest first, so that a group's documents are of about one length and its padding is small; only documents of
    one length share a group where the architecture's padded batch is not each document alone
    (:attr:`attnlens.models.base.Architecture.pads_freely`)."""
    order = sorted(range(len(examples)), key=lambda i: -examples[i].n)
    if not examples or architecture(examples[0].model).pads_freely:
        runs = [order]
    else:
        runs = [[i for i in order if examples[i].n == n] for n in dict.fromkeys(examples[i].n for i in order)]
    size = max(1, documents)
    return [run[a : a + size] for run in runs for a in range(0, len(run), size)]


def explain_examples(examples: Sequence[Example], methods: Sequence[str], documents: int = 1) -> list[Explanation]:
    """:func:`explain_example` for each of ``examples`` (one model), with every method that has a
    :func:`batch_scorer` run on groups of up to ``documents`` documents per pass (:func:`document_groups`). A batched
    method's cost on a document is its group's wall time shared equally among the group's documents."""
    methods = _checked(methods)
    together = [m for m in methods if m in BATCH_SCORERS] if documents > 1 else []
    outs = [_explain(x, [m for m in methods if m not in together]) for x in examples]
    if not together:
        return outs
    device = examples[0].inputs.input_ids.device
    for group in document_groups(examples, documents):
        for method in together:
            t0 = _sync(device)
            results = BATCH_SCORERS[method]([examples[i] for i in group])
            seconds = (_sync(device) - t0) / len(group)
            for i, res in zip(group, results, strict=True):
                _record(outs[i], method, res, seconds)
    return outs


def documents_batch(requested: int | str, methods: Sequence[str], examples: Sequence[Example]) -> tuple[int, dict]:
    """Documents per pass of the batched methods (:data:`BATCH_SCORERS`) for a job (:func:`attnlens.device.batch_size`):
    ``requested`` (``explanations.documents_per_pass``), or with ``auto`` one off a card (a CPU is slower per document
    in a pass over several, docs/benchmarks.md) and on a card the most copies of the job's longest document that one
    pass of each batched method in ``methods`` fits."""
    together = [m for m in methods if m in BATCH_SCORERS]
    if not together or not examples:
        return (1 if requested == "auto" else int(requested)), {"how": "no method that batches documents in the job"}
    longest = max(examples, key=lambda x: x.n)

    def probe(copies: int) -> None:
        for method in together:
            BATCH_SCORERS[method]([longest] * copies)

    return batch_size(requested, longest.inputs.input_ids.device, probe, len(examples), "documents per pass", cpu=1)


# --- artifacts ----------------------------------------------------------------------------------------
