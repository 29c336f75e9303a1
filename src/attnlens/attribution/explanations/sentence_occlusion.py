"""Sentence occlusion's numerics: sentence spans, Captum's ``FeatureAblation`` with one feature group per span, and
one document occluded (what :mod:`attnlens.attribution.methods.occlusion` scores)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from captum.attr import FeatureAblation

from attnlens.attribution.explanations.document_example import Example
from attnlens.attribution.removal import copies_probe
from attnlens.device import batch_size
from attnlens.tasks import task_of

#: Sentence ends for occlusion spans (the token's text without word-start markers).
SENTENCE_ENDS = frozenset({".", "!", "?"})


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
            ids[:, where],
            baselines=fill_id,
            target=target,
            feature_mask=groups[None].to(ids.device),
            perturbations_per_eval=max(1, batch_size),
        )
    scores[where.cpu().numpy()] = attr[0].cpu().numpy()
    return scores


def occlusion_batch(
    requested: int | str, methods: Sequence[str], model, model_device, documents: Sequence[Sequence[int]]
) -> tuple[int, dict]:
    """Occluded copies per forward for a job (:func:`attnlens.device.batch_size`): ``requested``
    (``explanations.batch_size``), or with ``auto`` the most copies of the job's longest document the card holds;
    probed only where ``methods`` ask for occlusion."""
    longest = max(documents, key=len, default=None)
    if longest is None or "occlusion" not in methods:
        return (1 if requested == "auto" else int(requested)), {"how": "no occlusion in the job"}
    return batch_size(requested, model_device, copies_probe(model, longest), len(longest), "occlusion's batch")


def occlude_sentences(x: Example) -> tuple[np.ndarray, int]:
    """``(n,)`` occlusion scores of one document's sentence spans and the forwards they took."""
    if x.special is None or x.pad_id is None:
        raise ValueError("occlusion needs the example's tokens, special-token mask and pad id")
    spans = sentence_spans(x.tokens, x.special, x.occlusion_max_tokens)

    task = task_of(x.model.config)

    def prob_fn(ids: torch.Tensor) -> torch.Tensor:
        return task.readout(task.logits(x.model(input_ids=ids, **x.inputs.forward_kwargs(ids.shape[0]))))

    scores = occlusion_scores(prob_fn, x.inputs.input_ids, spans, x.pad_id, x.target, x.batch_size)
    return scores, len(spans) + 1
