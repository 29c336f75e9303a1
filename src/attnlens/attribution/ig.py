"""Integrated-Gradients attributions of a classifier (recipes §9).

The main attribution (§9.1) is layer integrated gradients — Captum's ``LayerIntegratedGradients``
(:func:`layer_ig`) — on the output of the whole embedding module (word + position + token type, after
LayerNorm): the path runs from the embeddings of a baseline — pad tokens, with every special token (CLS,
SEP) kept in place — to the embeddings of the input, with the same position ids and attention mask for
both, CLS global, and the forward ``F``, the task's readout of the logits (:meth:`attnlens.tasks.Task.readout`:
``softmax(logits)`` for a classifier, the value for a regression). The integral is Gauss–Legendre quadrature;
steps go through the model in batches of ``internal_batch_size``. A token's score is the signed sum of its
attribution over the hidden dimension; completeness says the scores add up to
``F_t(x) − F_t(x′)``, and the difference is the convergence delta ``δ`` we report.

Adaptive steps (:func:`integrate`) double the step count until
``|δ| ≤ tolerance · |F_t(x) − F_t(x′)|`` or ``max_steps`` is reached. Gauss–Legendre nodes of ``n``
and ``2n`` points do not coincide, so no gradient evaluation is reused between rounds: only the two
end-point forwards ``F(x)``, ``F(x′)`` are, which are the same for every rule. The total cost is
below twice that of the final step count.

The per-embedding variant (§9.2) attributes to the word, position (and, in legacy mode, token-type)
embedding layers at once, returned **by name** (bug B-14 read a list by the wrong index).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from captum.attr import LayerIntegratedGradients

from attnlens.attribution.artifacts import EMBEDDING_LAYERS
from attnlens.classifier.selection import PREDICTIONS_SCHEMA
from attnlens.data.tokens import structural_ids
from attnlens.device import autocast_dtype, batch_size
from attnlens.io import load_parquet
from attnlens.models import architecture
from attnlens.tasks import Task, task_of


class ReadoutForward(torch.nn.Module):
    """``F(input_ids, attention_mask, position_ids, *model_args)``: the task's readout of the logits
    (:meth:`attnlens.tasks.Task.readout`, the task the model was trained for: ``softmax(logits)`` for a
    classifier, in float32 at least under autocast).

    ``model_args`` are the architecture's own forward arguments (:attr:`Inputs.model_args`, by ``names``),
    passed positionally after the common ones, as Captum passes ``additional_forward_args``.
    """

    def __init__(self, model, names: Sequence[str] = ()):
        super().__init__()
        self.model = model
        self.names = tuple(names)
        self.task = task_of(model.config)

    def forward(self, input_ids, attention_mask, position_ids, *model_args, token_type_ids=None):
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            token_type_ids=token_type_ids,
            **dict(zip(self.names, model_args, strict=True)),
        )
        return self.task.readout(self.task.logits(out))


def baseline_ids(input_ids: torch.Tensor, special: set[int], pad_id: int) -> torch.Tensor:
    """Pad tokens everywhere except at the structural tokens (CLS, SEP …), which are kept (recipes §9.1).

    ``[UNK]`` is content and becomes pad like any word. For a text read as text the kept tokens are its
    first and last, the original's ``[CLS] + [PAD] * n + [SEP]`` (docs/deviations.md, D-STRUCT).
    """
    keep = torch.zeros_like(input_ids, dtype=torch.bool)
    for sid in special - {pad_id}:
        keep |= input_ids == sid
    return torch.where(keep, input_ids, torch.full_like(input_ids, pad_id))


@dataclass(frozen=True)
class Inputs:
    """One example ready for IG: ids, baseline and the forward arguments both share."""

    input_ids: torch.Tensor  # (1, n)
    baseline: torch.Tensor  # (1, n)
    attention_mask: torch.Tensor
    position_ids: torch.Tensor | None  # explicit, for input and baseline alike (None: the model has none)
    model_args: dict[str, torch.Tensor] = field(default_factory=dict)  # the architecture's own (global mask …)

    @property
    def forward_args(self) -> tuple[torch.Tensor, ...]:
        """``(attention_mask, position_ids, *model_args)``: :class:`ReadoutForward`'s arguments after the ids."""
        return (self.attention_mask, self.position_ids, *self.model_args.values())

    def forward_kwargs(self, batch: int | None = None) -> dict[str, torch.Tensor]:
        """Every forward argument but ``input_ids``, by name: one example's repeated over a batch of ``batch``, or
        (``None``) as they are."""
        named = {"attention_mask": self.attention_mask, "position_ids": self.position_ids, **self.model_args}
        if batch is None:
            return named
        return {k: v if v is None else v.expand(batch, *v.shape[1:]) for k, v in named.items()}

    def readout_forward(self, model) -> ReadoutForward:
        """``F`` of ``model`` taking these inputs' :attr:`forward_args`."""
        return ReadoutForward(model, tuple(self.model_args))


def prepare_inputs(model, tokenizer, ids: Sequence[int], device="cpu") -> Inputs:
    """Build :class:`Inputs` for one tokenised example (special tokens included), as its architecture wants, with
    the global tokens its task chooses (:meth:`attnlens.tasks.Task.global_tokens`: a question's; read from the ids,
    so the baseline, which keeps the structural tokens in place, has the same)."""
    arch = architecture(model)
    input_ids = torch.tensor([list(ids)], dtype=torch.long, device=device)
    mask = torch.ones_like(input_ids)
    positions = arch.position_ids(model.config, input_ids.shape[1])
    chosen = task_of(model.config).global_tokens(list(ids), tokenizer)
    if chosen is not None:
        chosen = torch.zeros_like(mask).index_fill_(1, torch.tensor(chosen, dtype=torch.long, device=device), 1)
    return Inputs(
        input_ids=input_ids,
        baseline=baseline_ids(input_ids, structural_ids(tokenizer), tokenizer.pad_token_id),
        attention_mask=mask,
        position_ids=None if positions is None else positions.to(device),
        model_args=arch.forward_args(mask, chosen),
    )


def stack_inputs(inputs: Sequence[Inputs], pad_id: int) -> Inputs:
    """Several examples' :class:`Inputs` as one right-padded batch ``(b, n_max)``, as the predictions are batched
    (:meth:`attnlens.classifier.prediction.Encoded.batch`): ids and baselines padded with ``pad_id``, the attention
    mask with 0,
    the architecture's per-token arguments (a global-attention mask) with 0, and the position ids of the longest
    example for every row (each example's are a prefix of them: positions count from the first token)."""
    width = max(x.input_ids.shape[1] for x in inputs)
    longest = max(inputs, key=lambda x: x.input_ids.shape[1])

    def padded(rows: Sequence[torch.Tensor], fill: int = 0) -> torch.Tensor:
        return torch.cat([torch.nn.functional.pad(r, (0, width - r.shape[1]), value=fill) for r in rows])

    positions = None
    if longest.position_ids is not None:
        for x in inputs:
            n = x.input_ids.shape[1]
            if not torch.equal(x.position_ids, longest.position_ids[:, :n]):
                raise ValueError("examples whose position ids are not a prefix of the longest's cannot share a batch")
        positions = longest.position_ids.expand(len(inputs), width)
    model_args = {}
    for name in longest.model_args:
        rows = [x.model_args[name] for x in inputs]
        if any(r.dim() != 2 for r in rows):
            raise ValueError(f"forward argument {name!r} is not one value per token: examples cannot share a batch")
        model_args[name] = padded(rows)
    return Inputs(
        input_ids=padded([x.input_ids for x in inputs], pad_id),
        baseline=padded([x.baseline for x in inputs], pad_id),
        attention_mask=padded([x.attention_mask for x in inputs]),
        position_ids=positions,
        model_args=model_args,
    )


@dataclass(frozen=True)
class Attribution:
    """IG result for one example."""

    scores: np.ndarray  # (n,) signed sum over the hidden dimension, float64
    delta: float  # Σ scores − (F_t(x) − F_t(x′))
    n_steps: int
    converged: bool
    target: int
    probs: np.ndarray  # F(x), every output (the class probabilities; a regression's value)
    probs_baseline: np.ndarray  # F(x′)
    rounds: tuple[tuple[int, float], ...]  # (steps, delta) of every round tried

    @property
    def gap(self) -> float:
        """``F_t(x) − F_t(x′)``, the total the scores should add up to."""
        return float(self.probs[self.target] - self.probs_baseline[self.target])


def endpoint_probs(forward, inputs: torch.Tensor, baselines: torch.Tensor, forward_args=()) -> tuple:
    """``F(x)`` and ``F(x′)`` (float64 NumPy) in one batch of two."""
    with torch.no_grad():
        args = [a.expand(2, *a.shape[1:]) for a in forward_args]
        probs = forward(torch.cat([inputs, baselines]), *args).double().cpu().numpy()
    return probs[0], probs[1]


def freeze(model):
    """Parameters need no gradient for IG (only the attributed layer's output does): a cheaper backward."""
    for p in model.parameters():
        p.requires_grad_(False)
    return model


def layer_ig(
    forward, layer, inputs, baselines, forward_args, target: int, n_steps: int, internal_batch_size: int
) -> tuple[torch.Tensor, ...]:
    """Captum's ``LayerIntegratedGradients`` of ``layer``'s output (a module or a list of sibling modules), one example.

    The path runs, in the layer's output space, from its output at ``baselines`` to its output at
    ``inputs`` (a tuple of tensors feeds ``forward``'s leading arguments, ``forward_args`` follow); the
    integral is the ``n_steps``-point Gauss–Legendre rule (``method="gausslegendre"``), its steps batched
    ``internal_batch_size`` at a time. Returns one ``(1, …)`` attribution per layer.
    """
    layers = list(layer) if isinstance(layer, (list, tuple)) else [layer]
    inputs = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)
    baselines = tuple(baselines) if isinstance(baselines, (list, tuple)) else (baselines,)
    with warnings.catch_warnings():  # sibling embedding layers, none fed by another: Captum's caveat does not apply
        warnings.filterwarnings("ignore", message="Multiple layers provided", category=UserWarning)
        lig = LayerIntegratedGradients(forward, layers if len(layers) > 1 else layers[0])
    attrs = lig.attribute(
        inputs,
        baselines,
        target=target,
        additional_forward_args=tuple(forward_args),
        n_steps=n_steps,
        method="gausslegendre",
        internal_batch_size=max(1, internal_batch_size),
    )
    return tuple(a.detach() for a in attrs) if len(layers) > 1 else (attrs.detach(),)


def integrate(
    forward,
    layer,
    inputs: torch.Tensor,
    baselines: torch.Tensor,
    forward_args: Sequence[torch.Tensor],
    target: int,
    *,
    min_steps: int,
    max_steps: int,
    tolerance: float | None,
    internal_batch_size: int,
    autocast: bool | str = False,
) -> Attribution:
    """Layer IG with steps doubled from ``min_steps`` until ``|δ| ≤ tolerance · |F_t(x) − F_t(x′)|``.

    ``layer``'s output is ``(1, tokens, hidden)``; a token's score is its sum over ``hidden``. With
    ``min_steps == max_steps`` it is one fixed-step run whose tolerance only flags; with
    ``tolerance=None`` it is one run counted as converged. When the last round (the largest
    doubling ``≤ max_steps``) still misses the tolerance, the result has ``converged=False``. ``autocast``: the steps'
    precision on a card (:func:`attnlens.device.autocast_dtype`: ``true``/``fp16``, ``bf16``, ``auto``); the end
    points ``F(x)``, ``F(x′)`` are float32 whatever it is, so the δ check weighs the steps' rounding too.
    """
    probs, probs_base = endpoint_probs(forward, inputs, baselines, forward_args)
    gap = float(probs[target] - probs_base[target])
    half = autocast_dtype(inputs.device, autocast)  # float16 or bfloat16 on CUDA only (attnlens.device)
    rounds: list[tuple[int, float]] = []
    steps = min_steps
    while True:
        with torch.autocast(inputs.device.type, dtype=half or torch.float16, enabled=half is not None):
            (attr,) = layer_ig(forward, layer, inputs, baselines, forward_args, target, steps, internal_batch_size)
        scores = attr[0].double().sum(-1).cpu().numpy()
        delta = float(scores.sum() - gap)
        rounds.append((steps, delta))
        converged = tolerance is None or abs(delta) <= tolerance * abs(gap)
        if converged or steps * 2 > max_steps:
            break
        steps *= 2
    return Attribution(scores, delta, steps, converged, target, probs, probs_base, tuple(rounds))


def attribute_example(
    model,
    inputs: Inputs,
    target: int,
    *,
    min_steps: int,
    max_steps: int,
    tolerance: float | None,
    internal_batch_size: int,
    autocast: bool | str = False,
) -> Attribution:
    """:func:`integrate` on the output of the model's embedding module (recipes §9.1); the arguments are
    :func:`integrate`'s (:func:`step_range` gives the steps of one example)."""
    forward = inputs.readout_forward(freeze(model))
    res = integrate(
        forward,
        architecture(model).embeddings(model),
        inputs.input_ids,
        inputs.baseline,
        inputs.forward_args,
        target,
        min_steps=min_steps,
        max_steps=max_steps,
        tolerance=tolerance,
        internal_batch_size=internal_batch_size,
        autocast=autocast,
    )
    n = inputs.input_ids.shape[1]  # a model may pad inside (to a multiple of a window): drop that tail
    return dataclasses.replace(res, scores=res.scores[:n])


def steps_probe(model, inputs: Inputs, target: int, autocast: bool | str):
    """``probe(k)``: one pass of ``k`` interpolation steps of IG on ``inputs`` — what an ``auto`` internal batch is
    measured with (:func:`attnlens.device.batch_size`)."""

    def probe(steps: int) -> None:
        attribute_example(
            model,
            inputs,
            target,
            min_steps=steps,
            max_steps=steps,
            tolerance=None,
            internal_batch_size=steps,
            autocast=autocast,
        )

    return probe


def predicted_outputs(predictions_path, task: Task) -> dict[str, np.ndarray]:
    """``{example_id: F(x)}`` from the ``predict`` rule's parquet: the task's outputs column (the softmax
    probabilities of a classifier, the value of a regression)."""
    preds, _ = load_parquet(predictions_path, PREDICTIONS_SCHEMA)
    column = preds[task.outputs_column]
    return {str(e): np.asarray(p) for e, p in zip(preds["example_id"], column, strict=True)}


# --- per-embedding attributions (§9.2) --------------------------------------------------------------


def embedding_ig(
    model, inputs: Inputs, target: int, n_steps: int, internal_batch_size: int, mode: str = "fixed"
) -> dict[str, np.ndarray | float]:
    """Per-embedding IG, bound by layer name.

    ``legacy``: word, token-type and position embeddings; baseline ``(pad ids, token types 0,
    position ids 0)`` — position id 0 is the original's choice. ``fixed``: word and position
    embeddings only (the token-type input never changes, so its attribution is identically 0 and
    its L2 normalisation 0/0), baseline positions = the model's padding index, whose row is the
    neutral zero vector in a converted model (and the one the model itself uses for padding).

    An architecture attributes only the embeddings it has (:meth:`~attnlens.models.seam.Architecture.embedding_layers`):
    a model with rotary positions (ModernBERT) has no position embedding, and its baseline keeps the input's
    positions.

    Returns:
        ``{name: (n,) scores}`` for each attributed layer, plus ``"delta"``: Σ over all layers and
        tokens − (F_t(x) − F_t(x′)) — only the sum obeys completeness, not each layer.
    """
    modules = architecture(model).embedding_layers(model)
    names = [name for name in (EMBEDDING_LAYERS if mode == "legacy" else ("word", "position")) if name in modules]
    forward = inputs.readout_forward(freeze(model))

    def f(ids, pos, types, mask, *model_args):
        return forward(ids, mask, pos, *model_args, token_type_ids=types)

    types = torch.zeros_like(inputs.input_ids)
    base_pos = torch.full_like(inputs.position_ids, 0 if mode == "legacy" else model.config.pad_token_id)
    if "position" not in names:  # no position embedding to attribute to (rotary positions): the baseline keeps them
        base_pos = inputs.position_ids
    attrs = layer_ig(
        f,
        [modules[name] for name in names],
        (inputs.input_ids, inputs.position_ids, types),
        (inputs.baseline, base_pos, types),
        (inputs.attention_mask, *inputs.model_args.values()),
        target,
        n_steps,
        internal_batch_size,
    )
    n = inputs.input_ids.shape[1]
    out: dict[str, np.ndarray | float] = {
        name: a[0, :n].double().sum(-1).cpu().numpy() for name, a in zip(names, attrs, strict=True)
    }
    with torch.no_grad():
        both = f(
            torch.cat([inputs.input_ids, inputs.baseline]),
            torch.cat([inputs.position_ids, base_pos]),
            torch.cat([types, types]),
            inputs.attention_mask.expand(2, -1),
            *(a.expand(2, -1) for a in inputs.model_args.values()),
        )
    gap = float(both[0, target] - both[1, target])
    out["delta"] = float(sum(float(np.sum(out[name])) for name in names) - gap)
    out["gap"] = gap
    return out


# --- the attribute rule: sharded, resumable --------------------------------------------------------


def step_range(
    showcased: bool, *, showcase_steps: int | None, adaptive: bool, min_steps: int, max_steps: int, n_steps: int
) -> tuple[int, int]:
    """``(min_steps, max_steps)`` of :func:`integrate` for one example (recipes §9.1).

    A showcased example gets ``showcase_steps`` when set; otherwise the adaptive range, or ``n_steps`` for
    every example. Fixed steps are one round (min = max), whose tolerance then only flags.
    """
    if showcased and showcase_steps:
        return showcase_steps, showcase_steps
    if adaptive:
        return min_steps, max_steps
    return n_steps, n_steps


def most_steps(**steps) -> int:
    """The most steps any example takes under ``steps`` (:func:`step_range`'s keywords): the cap of an ``auto``
    internal batch, the same for a rule's job and for the one-document API (so both pick one batch on a CPU)."""
    return max(step_range(showcased, **steps)[1] for showcased in (False, True))


def internal_batch(
    requested: int | str, model, inputs: Inputs, target: int, autocast: bool | str, **steps
) -> tuple[int, dict]:
    """IG's internal batch for a job (:func:`attnlens.device.batch_size`): ``requested``
    (``attribution.steps_per_pass``), or with ``auto`` the most steps of ``inputs`` (the job's longest example)
    the card holds, at most :func:`most_steps` of ``steps`` (:func:`step_range`'s keywords)."""
    probe = steps_probe(model, inputs, target, autocast)
    return batch_size(requested, inputs.input_ids.device, probe, most_steps(**steps), "IG's internal batch")


def steps_of(cfg) -> dict:
    """The ``attribution`` section's step settings, as :func:`step_range` and :func:`most_steps` take them."""
    return {
        "showcase_steps": cfg.showcase_steps,
        "adaptive": cfg.adaptive,
        "min_steps": cfg.min_steps,
        "max_steps": cfg.max_steps,
        "n_steps": cfg.n_steps,
    }


def configured_batch(cfg, model, inputs: Inputs, target: int) -> tuple[int, dict]:
    """IG's internal batch as the ``attribution`` section sets it (:func:`internal_batch`), for a job whose longest
    example is ``inputs``: the ``attribute`` rule's and the one-document API's, from one call."""
    return internal_batch(cfg.steps_per_pass, model, inputs, target, cfg.autocast, **steps_of(cfg))


def attribute_configured(cfg, model, inputs: Inputs, target: int, batch: int, showcased: bool) -> Attribution:
    """IG of one example and target as the ``attribution`` section sets it: its steps (:func:`step_range`, a
    showcased example's own), tolerance and precision, ``batch`` steps a pass (:func:`configured_batch`). The
    ``attribute`` rule and the one-document API both explain an example through this one step."""
    lo, hi = step_range(showcased, **steps_of(cfg))
    return attribute_example(
        model,
        inputs,
        target,
        min_steps=lo,
        max_steps=hi,
        tolerance=cfg.tolerance,
        internal_batch_size=batch,
        autocast=cfg.autocast,
    )


def attribution_row(
    eid: str,
    ids: Sequence[int],
    res: Attribution,
    label,
    kind: str,
    is_showcase: bool,
    seconds: float,
    rank: int = 0,
) -> dict:
    """One row of an ``attribute`` shard (:data:`ATTRIBUTION_TYPES`) for example ``eid`` and its ``rank``-th
    target (``res.target``)."""
    return {
        "example_id": eid,
        "input_ids": np.asarray(ids, dtype=np.int32),
        "scores": res.scores.astype(np.float64),
        "delta": res.delta,
        "gap": res.gap,
        "relative_delta": abs(res.delta) / abs(res.gap) if res.gap else float("inf"),
        "n_steps": res.n_steps,
        "converged": res.converged,
        "rounds_steps": np.asarray([r[0] for r in res.rounds], dtype=np.int32),
        "rounds_delta": np.asarray([r[1] for r in res.rounds], dtype=np.float64),
        "target": res.target,
        "target_rank": rank,
        "target_kind": kind,
        "label": label,
        "probs": res.probs.astype(np.float64),
        "probs_baseline": res.probs_baseline.astype(np.float64),
        "showcased": is_showcase,
        "seconds": seconds,
    }
