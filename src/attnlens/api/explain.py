"""The one-document door: a classifier loaded from a folder, a run or the hub (:func:`load`), and one document
explained with the pipeline's per-example steps and settings (:func:`explain`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import transformers

from attnlens.attention.summaries import compute_example_summaries
from attnlens.attribution.engine import explain as explain_one
from attnlens.attribution.engine import explanation_rows
from attnlens.attribution.explanations import Example, occlusion_batch
from attnlens.attribution.ig import (
    attribute_configured,
    attribution_row,
    configured_batch,
    freeze,
    prepare_inputs,
)
from attnlens.classifier.importance import load_importance_modes
from attnlens.classifier.prediction import encode_examples, predict_logits
from attnlens.data.reading import document_reading
from attnlens.device import place, synchronize
from attnlens.errors import InputError
from attnlens.io import provenance
from attnlens.models import architecture, forward_bands
from attnlens.models.checkpoints import from_hub, load_classifier, resolve_pretrained
from attnlens.render.explorer import EXPLORER_SCHEMA, document_for
from attnlens.similarity.metrics import (
    MODES,
    compare_example,
    token_masks,
)
from attnlens.tasks import task_of

try:  # optional: only show() needs it, inside Jupyter
    from IPython.display import HTML
except ImportError:  # pragma: no cover - IPython is a test requirement
    HTML = None
from attnlens.api.document import DocumentExplanation, Settings

#: Where a run's ``results/`` keeps what :func:`load` picks up from it.
RUN_MODEL = "models/finetuned"
RUN_IMPORTANCE = "importance/head_importance.safetensors"


@dataclass
class Classifier:
    """A sequence classifier behind the model seam, its tokenizer and where it runs (:func:`load`)."""

    model: transformers.PreTrainedModel
    tokenizer: transformers.PreTrainedTokenizerBase
    device: torch.device
    source: str
    #: the head importance found beside it (a run's ``results/``), or None
    importance_path: Path | None = None

    @property
    def class_names(self) -> list[str]:
        labels = self.model.config.id2label
        return [str(labels[i]) for i in range(self.model.config.num_labels)]

    @property
    def architecture(self) -> str:
        return architecture(self.model).name


def load(name_or_path: str | Path, device: str = "auto") -> Classifier:
    """A fine-tuned sequence classifier of any architecture behind the seam (Longformer, BigBird, ModernBERT, the
    decoders: Llama, Mistral, Qwen 2 and 3, Gemma 3).

    Args:
        name_or_path: a classifier folder (``results/models/finetuned``, or one saved by ``save_pretrained``),
            a run's ``results/`` folder (its fine-tuned model and head importance), or a Hugging Face Hub id
            (needs the network).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N`` (the pipeline's ``model.device``).

    Raises:
        InputError: no such folder, an incomplete checkpoint, an architecture the seam does not know, or a
            hub id while offline — one line naming what was expected.
    """
    path = Path(name_or_path).expanduser()
    importance = None
    if (path / RUN_MODEL).is_dir():
        importance = path / RUN_IMPORTANCE if (path / RUN_IMPORTANCE).exists() else None
        path = path / RUN_MODEL
    name = resolve_pretrained(str(path), field="model")
    model, tokenizer = from_hub(load_classifier, name, "model")
    model_device = place(freeze(model), device)
    return Classifier(model, tokenizer, model_device, str(name_or_path), importance)


def uniform_importance(n_layers: int, n_heads: int) -> dict[str, np.ndarray]:
    """Head weights of 1 for every mode: the scaled configurations then equal the unscaled ones."""
    return {mode: np.ones((n_layers, n_heads)) for mode in MODES}


def explain(
    text: str,
    classifier: Classifier | str | Path,
    *,
    config: str | Path | Mapping[str, Any] | None = None,
    label: Any = None,
    target: int | str | None = None,
    question: str | None = None,
    importance: str | Path | Mapping[str, np.ndarray] | None = None,
    example_id: str = "document",
    showcased: bool = True,
) -> DocumentExplanation:
    """Explain one document the way the pipeline explains each test example.

    Args:
        text: the document; cut to the model's length as the pipeline cuts it.
        classifier: from :func:`load`, or what :func:`load` takes.
        config: the pipeline config whose ``attention``, ``attribution``, ``explanations``, ``similarity`` and
            ``report.explorer`` sections apply (default: their defaults).
        label: the true label, when known, as the model's task reads it (:meth:`attnlens.tasks.Task.parse_label`):
            a class index or name; a regression's value; a multi-label document's labels (a list of names or
            indices, or ``"a|b"``). Shown, and explained when ``attribution.target`` is ``true``.
        target: the output to explain (an index or an output's name: a class, a label; a question-answering
            model's answer span, ``(start, end)`` token positions), in place of the one ``attribution.target`` picks
            (the headline target: the likeliest predicted label of a multi-label document, the predicted span).
        question: the question a question-answering model answers from ``text`` (its context); none for the
            other tasks. A QA document's ``label`` is its answers, SQuAD's ``[{"text", "answer_start"}]``.
        importance: a ``head_importance.safetensors`` of a run, or ``{"legacy": (L, H), "fixed": (L, H)}``;
            default: the importance of the run :func:`load` read, else uniform weights.
        example_id: the document's name in the artifacts and on the page.
        showcased: IG at ``attribution.showcase_steps`` (when set), as the pipeline treats showcased examples.
    """
    if not isinstance(text, str) or not text.strip():
        raise InputError(example_id, "text", "expected a document with some text, found an empty one")
    clf = classifier if isinstance(classifier, Classifier) else load(classifier)
    s = Settings.of(config)
    task = task_of(clf.model.config)
    true_label = _true_label(task, clf, label, question, example_id)
    return _explained(clf, s, task, text, question, true_label, target, importance, example_id, showcased)


def _explained(
    clf: Classifier, s: Settings, task, text, question, true_label, target, importance, example_id, showcased
):
    """The pipeline's per-example steps on one document, each step's wall seconds kept."""
    clock = _Clock()
    with clock("predict"):
        encoded, ids, reading, notes, probs = _predict(clf, task, text, question, true_label, example_id)
    with clock("attention"):
        layers = forward_bands(clf.model, encoded.batch([0], clf.device, architecture(clf.model)))
        summary = compute_example_summaries(layers, s.attention.top_k)  # where the attention is
        layers = [layer.cpu() for layer in layers]  # the page's views and the stored bands
        received = summary.pop("received").numpy()
    target, kind = _target(task, s, clf, target, true_label, probs, example_id)
    with clock("ig"):
        row, res = _integrated_gradients(clf, s, ids, target, true_label, kind, showcased, example_id, task)
    row["seconds"] = clock.seconds["ig"]
    e = s.explanations
    with clock("explanations"):
        copies, _ = occlusion_batch(e.copies_per_pass, e.methods, clf.model, clf.device, [ids])
        explained = explain_one(
            Example.of_document(clf.model, clf.tokenizer, ids, res.target, e, copies, clf.device), e.methods
        )
    with clock("similarity"):
        weights = _importance(importance if importance is not None else clf.importance_path, *received.shape[:2])
        keep, special = token_masks(clf.tokenizer, ids, s.similarity.legacy_mask)  # the masks compare() uses
        similarity = _compare(s, example_id, row["scores"], received, weights, keep, special, target)
    page = _page(s, clf, task, example_id, true_label, layers, ids, row, weights, explained, notes)
    return DocumentExplanation(
        example_id=example_id,
        text=text,
        input_ids=ids,
        tokens=page.tokens,
        special=special,
        class_names=clf.class_names,
        label=true_label,
        attribution=row,
        received=received,
        partners={k: v.numpy() for k, v in summary.items()},
        methods=dict(explained.scores),
        explanation=explanation_rows(example_id, ids, res.target, explained, e.methods),
        similarity=similarity,
        importance=weights,
        page=page,
        settings=s,
        model=clf.source,
        seconds=clock.seconds,
        reading=reading,
        notes=notes,
        task=task.name,
        _layers=layers,
    )


class _Clock:
    """Wall seconds of each step of :func:`explain` (``with clock("ig"): …``), the device's queued work included."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, step: str):
        t0 = time.perf_counter()
        yield
        self.seconds[step] = time.perf_counter() - t0


def _true_label(task, clf: Classifier, label, question, example_id: str):
    """The true label as the task reads it, once the question is checked against what the model reads."""
    asks = "question" in task.extra_columns
    if asks and (not isinstance(question, str) or not question.strip()):
        raise InputError(example_id, "question", f"expected a question: the model answers questions ({task.label})")
    if not asks and question is not None:
        raise InputError(example_id, "question", f"expected none: the model reads no question ({task.label})")
    return None if label is None else task.parse_label(label, clf.class_names)


def _predict(clf: Classifier, task, text: str, question, true_label, example_id: str):
    """The document encoded as the pipeline encodes it, how it was read (and the notes), and the model's outputs."""
    asks = "question" in task.extra_columns
    frame = pd.DataFrame({"example_id": [example_id], "text": [text], **({"question": [question]} if asks else {})})
    frame["label"] = [task.NO_LABEL if true_label is None else true_label]
    if asks and true_label is not None:
        task.check_rows(frame, example_id, {"label": "label"})  # an answer's text in the context at its start
    encoded = encode_examples(clf.tokenizer, frame, task)
    ids = [int(i) for i in encoded.input_ids[0]]
    tokenizer = clf.tokenizer
    reading, notes = document_reading(tokenizer, text, tokenizer.model_max_length, example_id, task, question)
    probs = task.example_outputs(predict_logits(clf.model, encoded, 1), encoded)[0]
    return encoded, ids, reading, notes, probs


def _target(task, s: Settings, clf: Classifier, target, true_label, probs, example_id: str):
    """The output to explain and why (the row's ``target_kind``): the one given, or ``attribution.target``'s."""
    if target is not None:
        return task.parse_target(target, clf.class_names), "given"
    if s.attribution.target == "true" and true_label is None:
        raise InputError(example_id, "label", "expected the true label: attribution.target is 'true'")
    label = true_label if true_label is not None else task.NO_LABEL
    return task.targets(s.attribution.target, label, probs)[0], s.attribution.target  # the headline target


def _integrated_gradients(clf: Classifier, s: Settings, ids, target, true_label, kind, showcased, example_id, task):
    """IG of the target as the ``attribute`` rule computes it, and its ``attribute`` shard row."""
    inputs = prepare_inputs(clf.model, clf.tokenizer, ids, clf.device)
    batch, _ = configured_batch(s.attribution, clf.model, inputs, target)
    res = attribute_configured(s.attribution, clf.model, inputs, target, batch, showcased)
    synchronize(clf.device)
    label = task.NO_LABEL if true_label is None else true_label
    return attribution_row(example_id, ids, res, label, kind, showcased, float("nan")), res


def _compare(s: Settings, example_id, scores, received, weights, keep, special, target):
    """The ``compare`` rows of the document: attention against IG, both modes, every layer configuration."""
    sim = s.similarity
    return compare_example(
        example_id,
        scores,
        received,
        weights,
        keep,
        special,
        n_permutations=sim.n_permutations,
        top_fraction=sim.top_fraction,
        rbo_p=sim.rbo_p,
        seed=sim.seed,
        legacy_sort=sim.legacy_sort,
        target=target,
    )


def _page(s: Settings, clf: Classifier, task, example_id, true_label, layers, ids, row, weights, explained, notes):
    """The document's explorer page, as rule ``build_explorers`` draws a showcased example's."""
    prov = provenance(EXPLORER_SCHEMA, s.explorer.to_dict(), None)
    prov.pop("created")
    return document_for(
        {"example_id": example_id, "label": true_label},
        ["document"],
        layers,
        ids,
        row,
        torch.from_numpy(weights[s.explorer.importance]),
        clf.tokenizer,
        clf.class_names,
        None,
        s.explorer.top_k,
        prov,
        explained.scores,
        notes=notes,
        task=task,
    )


def _importance(source, n_layers: int, n_heads: int) -> dict[str, np.ndarray]:
    if source is None:
        return uniform_importance(n_layers, n_heads)
    weights = dict(source) if isinstance(source, Mapping) else load_importance_modes(source, MODES)
    for mode in MODES:
        if mode not in weights or np.shape(weights[mode]) != (n_layers, n_heads):
            raise InputError(
                str(source) if not isinstance(source, Mapping) else "importance",
                mode,
                f"expected a ({n_layers}, {n_heads}) head-importance matrix",
            )
        weights[mode] = np.asarray(weights[mode], dtype=np.float64)
    return weights
