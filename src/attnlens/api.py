"""One document in a few lines: the pipeline's per-example steps behind one call, for a notebook or a script.

::

    import attnlens
    classifier = attnlens.load("results/models/finetuned")   # a classifier folder, a run's results/, or a hub id
    doc = attnlens.explain(open("paper.txt").read(), classifier)
    doc.to_frame()                                            # one row per token: IG, attention, every method
    doc.show()                                                # the explorer page, inline in Jupyter

Every number comes from the functions the pipeline's rules call for each test example — the prediction of
``predict``, the band attention and top-k partners of ``extract_attention``, IG of ``attribute``, the methods of
``explain``, the metrics of ``compare`` and the page of ``build_explorers`` — with the settings of a pipeline
config: the defaults, or ``config=`` (a YAML path or a mapping, validated as the pipeline validates it). What a
dataset-wide run adds is the dataset: head importance is estimated on the training split, so a document
explained alone is scaled by the importance of the run it came from (:func:`load` of a run's ``results/``
finds it, or ``importance=``) and, without one, by uniform weights (scaled and unscaled agree).
"""

from __future__ import annotations

import copy
import html
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import transformers

from attnlens.attention.band import layer_configuration
from attnlens.attention.layers import LAYER_CONFIGURATIONS
from attnlens.attention.summaries import BANDS_SCHEMA, band_tensors, compute_example_summaries
from attnlens.attribution.artifacts import (
    ATTRIBUTION_SCHEMA,
    ATTRIBUTION_TYPES,
    EXPLANATION_TYPES,
    EXPLANATIONS_SCHEMA,
    attribution_types,
)
from attnlens.attribution.explanations import explain_example, explanation_rows, occlusion_batch
from attnlens.attribution.ig import (
    attribute_example,
    attribution_row,
    freeze,
    internal_batch,
    prepare_inputs,
    step_range,
)
from attnlens.attribution.methods import get_method
from attnlens.classifier.importance import load_importance_modes
from attnlens.classifier.prediction import encode_examples, predict_logits
from attnlens.data.sources import UNKNOWN_WARN_SHARE, document_reading
from attnlens.device import place, synchronize
from attnlens.errors import InputError
from attnlens.io import file_stem, provenance, save_json, save_parquet, save_tensors
from attnlens.models import architecture, forward_bands
from attnlens.models.loading import from_hub, load_classifier, resolve_pretrained
from attnlens.pipeline.config import (
    AttentionConfig,
    AttributionConfig,
    ExplanationsConfig,
    ExplorerConfig,
    SimilarityConfig,
    read_config_file,
    validate_config,
)
from attnlens.render.explorer import EXPLORER_SCHEMA, ExplorerDocument, document_for, payload, render_explorer
from attnlens.similarity.metrics import (
    MODES,
    SIMILARITY_SCHEMA,
    SIMILARITY_TYPES,
    attention_vectors,
    compare_example,
    token_masks,
)
from attnlens.tasks import Outcome, get_task, task_of

try:  # optional: only show() needs it, inside Jupyter
    from IPython.display import HTML
except ImportError:  # pragma: no cover - IPython is a test requirement
    HTML = None

#: Where a run's ``results/`` keeps what :func:`load` picks up from it.
RUN_MODEL = "models/finetuned"
RUN_IMPORTANCE = "importance/head_importance.safetensors"
#: The JSON :meth:`DocumentExplanation.save` writes beside the artifacts (``python -m attnlens explain``'s output).
SCORES_SCHEMA = "document_scores/v1"


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
    """A fine-tuned classifier of any architecture behind the seam (Longformer, BigBird, ModernBERT).

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
    on = place(freeze(model), device)
    return Classifier(model, tokenizer, on, str(name_or_path), importance)


@dataclass(frozen=True)
class Settings:
    """The config sections one document is explained with (the pipeline's, key for key)."""

    attention: AttentionConfig
    attribution: AttributionConfig
    explanations: ExplanationsConfig
    similarity: SimilarityConfig
    explorer: ExplorerConfig

    @classmethod
    def of(cls, config: str | Path | Mapping[str, Any] | None) -> Settings:
        """From a pipeline config: ``None`` (the defaults), a YAML file, or a mapping (validated, defaults filled)."""
        if config is None:
            raw, where = {}, "config"
        elif isinstance(config, Mapping):
            raw, where = copy.deepcopy(dict(config)), "config"
        else:
            raw, where = copy.deepcopy(read_config_file(config)), str(config)
        full = validate_config(raw, where)
        return cls(
            attention=AttentionConfig.from_dict(full["attention"]),
            attribution=AttributionConfig.from_dict(full["attribution"]),
            explanations=ExplanationsConfig.from_dict(full["explanations"]),
            similarity=SimilarityConfig.from_dict(full["similarity"]),
            explorer=ExplorerConfig.from_dict(full["report"]["explorer"], path="report.explorer"),
        )


@dataclass
class DocumentExplanation:
    """Everything attnlens computes for one document (:func:`explain`).

    ``received`` is the attention each token receives, ``(layers, heads, n)``, summed over the band (never an
    ``n × n`` matrix); ``partners`` the top-k attended / attending tokens of every token, layer and head
    (``attended_idx`` ``(L, H, n, k)``, −1 where fewer exist, and their scores); ``attribution`` the ``attribute``
    shard row (IG scores, δ, gap, steps, convergence rounds, probabilities); ``methods`` every explanation
    method's scores; ``similarity`` the ``compare`` rows (both modes, every layer configuration, scaled or not,
    every mask, with chance levels from permutations).
    """

    example_id: str
    text: str
    input_ids: list[int]
    tokens: list[str]
    special: np.ndarray
    class_names: list[str]
    label: Any  # the true label as the task keeps it (Task.parse_label), or None
    attribution: dict[str, Any]
    received: np.ndarray
    partners: dict[str, np.ndarray]
    methods: dict[str, np.ndarray]
    explanation: list[dict[str, Any]]
    similarity: pd.DataFrame
    importance: dict[str, np.ndarray]
    page: ExplorerDocument
    settings: Settings
    model: str
    seconds: dict[str, float] = field(default_factory=dict)
    #: what the model read of the text (tokens, kept, truncated, unknown tokens: data.document_reading)
    reading: dict[str, Any] = field(default_factory=dict)
    #: the pipeline's run-note lines a reader must see: the cut, and a high share of unknown tokens
    notes: list[str] = field(default_factory=list)
    #: the task the model was trained for (:mod:`attnlens.tasks`): what its outputs mean
    task: str = "classification"
    _layers: list = field(default_factory=list, repr=False)

    @property
    def outcome(self) -> Outcome:
        """The document's outcome as its task reads it (:meth:`attnlens.tasks.Task.outcome`)."""
        return get_task(self.task).outcome(self.label, self.attribution["probs"], int(self.attribution["target"]),
                                           self.class_names)  # fmt: skip

    @property
    def probabilities(self) -> dict[str, float]:
        """``F(x)`` by output name: the class probabilities (a regression: its one value)."""
        return self.outcome.outputs

    @property
    def prediction(self) -> str:
        """The predicted class (a regression: the predicted value, as text)."""
        return self.outcome.prediction

    @property
    def target(self) -> str:
        """The class IG and every method explain (``attribution.target`` of the config: the prediction by default;
        a regression: its value)."""
        return self.outcome.explained

    @property
    def ig(self) -> np.ndarray:
        return np.asarray(self.attribution["scores"], dtype=np.float64)

    def attention(self, layers: str = "all", scaled: bool = False, mode: str = "fixed") -> np.ndarray:
        """``(n,)`` attention each token receives, summed over the heads of a layer configuration (``last``, the
        paper's layer 12; ``all``; ``lower``; ``upper``), each head weighted by its importance when ``scaled`` —
        the vectors the similarity metrics compare with IG (recipes §11)."""
        return attention_vectors(self.received, self.importance)[(mode, layers, scaled)]

    def to_frame(self) -> pd.DataFrame:
        """One row per token: its text, whether it is special, IG, received attention of every layer
        configuration (unscaled, heads summed) and every explanation method's score."""
        frame = pd.DataFrame({"token": self.tokens, "special": self.special, "ig": self.ig})
        received = torch.from_numpy(self.received)
        for layers in LAYER_CONFIGURATIONS:
            frame[f"attention_{layers}"] = layer_configuration(received, layers).double().numpy()
        for method, scores in self.methods.items():
            if method not in frame:
                frame[method] = scores
        frame.index.name = "position"
        return frame

    def agreement(self, mode: str = "fixed", mask: str = "fixed") -> pd.DataFrame:
        """The similarity metrics of one mode and mask as a table: one row per layer configuration and scaling,
        each metric's value and its chance level (the mean over permuted attributions)."""
        rows = self.similarity[(self.similarity["mode"] == mode) & (self.similarity["mask"] == mask)]
        table = rows.pivot_table(index=["configuration", "scaled"], columns="metric", values=["value", "chance"])
        return table.swaplevel(axis=1).sort_index(axis=1)

    def html(self) -> str:
        """The explorer page (the HTML ``build_explorers`` writes), self-contained."""
        return render_explorer(*payload(self.page))

    def show(self, height: int = 720):
        """The explorer page inline in Jupyter (an isolated frame); returns the IPython object to display."""
        if HTML is None:
            raise InputError("IPython", "show()", "expected Jupyter (IPython) for an inline page; use save() instead")
        srcdoc = self.html().replace("&", "&amp;").replace('"', "&quot;")
        frame = (f'<iframe srcdoc="{srcdoc}" style="width:100%;height:{int(height)}px;border:0" '
                 f'sandbox="allow-scripts" title="{file_stem(self.example_id)}"></iframe>')  # fmt: skip
        with warnings.catch_warnings():  # IPython suggests IFrame, which takes a URL: the page is inline here
            warnings.filterwarnings("ignore", "Consider using IPython.display.IFrame", UserWarning)
            return HTML(frame)

    def scores(self) -> dict[str, Any]:
        """The document's numbers as plain JSON types (what ``python -m attnlens explain`` writes)."""
        fixed = self.similarity[(self.similarity["mode"] == "fixed") & (self.similarity["mask"] == "fixed")]
        return {
            "example_id": self.example_id, "model": self.model, "classes": self.class_names,
            "prediction": self.prediction, "probabilities": self.probabilities, "target": self.target,
            "ig": {"delta": float(self.attribution["delta"]), "gap": float(self.attribution["gap"]),
                   "n_steps": int(self.attribution["n_steps"]), "converged": bool(self.attribution["converged"])},
            "tokens": self.to_frame().reset_index().to_dict(orient="list"),
            "similarity": fixed.drop(columns=["example_id"]).to_dict(orient="records"),
            "input": self.reading, "notes": self.notes,
            "seconds": self.seconds,
        }  # fmt: skip

    def save(self, out_dir: str | Path) -> dict[str, Path]:
        """Write the document's artifacts in the pipeline's formats into ``out_dir``: ``attributions.parquet``
        (an ``attribute`` shard), ``explanations.parquet`` (an ``explain`` shard), ``similarity.parquet`` (a
        ``compare`` shard), ``bands.safetensors`` (an ``extract_attention`` bands file), the explorer page and
        ``scores.json``; returns their paths by name."""
        out = Path(out_dir)
        check_out_folder(out)
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as err:  # a file on the way, no permission, a read-only disk
            raise InputError(str(out), "(folder)", f"expected a folder this user can create, {err.strerror}") from None
        s = self.settings
        paths = {
            "attributions": out / "attributions.parquet",
            "explanations": out / "explanations.parquet",
            "similarity": out / "similarity.parquet",
            "bands": out / "bands.safetensors",
            "explorer": out / f"{file_stem(self.example_id)}.html",
            "scores": out / "scores.json",
        }
        common = {"model": self.model, "document": self.example_id}
        save_parquet(
            pd.DataFrame([self.attribution], columns=list(ATTRIBUTION_TYPES.names)),
            paths["attributions"],
            provenance(ATTRIBUTION_SCHEMA, s.attribution.to_dict(), None, **common),
            attribution_types(get_task(self.task)),
        )
        save_parquet(
            pd.DataFrame(self.explanation, columns=list(EXPLANATION_TYPES.names)),
            paths["explanations"],
            provenance(EXPLANATIONS_SCHEMA, s.explanations.to_dict(), None, **common),
            EXPLANATION_TYPES,
        )
        save_parquet(self.similarity, paths["similarity"],
                     provenance(SIMILARITY_SCHEMA, s.similarity.to_dict(), s.similarity.seed, **common),
                     SIMILARITY_TYPES)  # fmt: skip
        ids = torch.tensor(self.input_ids, dtype=torch.int32)
        save_tensors(
            band_tensors(self.example_id, ids, self._layers),
            paths["bands"],
            provenance(BANDS_SCHEMA, s.attention.to_dict(), None, example_ids=[self.example_id], **common),
        )
        paths["explorer"].write_text(self.html(), encoding="utf-8")
        save_json(self.scores(), paths["scores"], provenance(SCORES_SCHEMA, None, None, **common))
        return paths

    def summary(self) -> str:
        """One line: the prediction, IG's steps and δ, and every conserving method's δ against what it explains
        (AttnLRP's logit), where it was computed."""
        probs = ", ".join(f"{c} {p:.3f}" for c, p in self.probabilities.items())
        line = (
            f"{self.example_id}: {self.read()}, predicted {self.prediction} ({probs}); IG toward "
            f"{self.target}, {int(self.attribution['n_steps'])} steps, δ {float(self.attribution['delta']):.2g}"
        )
        for row in self.explanation:
            conserves = get_method(row["method"]).conserves
            if conserves:
                line += f"; {row['method']} {conserves} {row['explained']:.3g}, δ {row['delta']:.2g}"
        return line

    def read(self) -> str:
        """How much of the text the model read: ``"256 tokens"``, or ``"256 of 400000 tokens (cut at the model's
        length)"``, and the share of unknown tokens where the pipeline would warn of it."""
        n = len(self.tokens)
        text = f"{n} tokens"
        if self.reading.get("truncated"):
            text = f"{n} of {self.reading['tokens']} tokens (cut at the model's length)"
        if self.reading.get("unknown_share", 0.0) > UNKNOWN_WARN_SHARE:
            text += f", {self.reading['unknown_share']:.0%} of them unknown to the vocabulary"
        return text

    def __repr__(self) -> str:
        return f"<DocumentExplanation {self.summary()}>"

    def _repr_html_(self) -> str:
        return (f"<b>{html.escape(self.summary())}</b><br><code>.to_frame()</code> <code>.agreement()</code> "
                "<code>.show()</code> <code>.save(dir)</code>")  # fmt: skip


def check_out_folder(out: Path) -> None:
    """An output folder that is a file is bad input (one line), not a ``FileExistsError``."""
    if out.exists() and not out.is_dir():
        raise InputError(str(out), "(folder)", "expected a folder to write the document's files into, found a file")


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
    model, tokenizer, on = clf.model, clf.tokenizer, clf.device
    task = task_of(model.config)
    asks = "question" in task.extra_columns
    if asks and (not isinstance(question, str) or not question.strip()):
        raise InputError(example_id, "question", f"expected a question: the model answers questions ({task.label})")
    if not asks and question is not None:
        raise InputError(example_id, "question", f"expected none: the model reads no question ({task.label})")
    true_label = None if label is None else task.parse_label(label, clf.class_names)
    seconds: dict[str, float] = {}

    t0 = time.perf_counter()
    frame = pd.DataFrame({"example_id": [example_id], "text": [text], **({"question": [question]} if asks else {})})
    frame["label"] = [task.NO_LABEL if true_label is None else true_label]
    if asks and true_label is not None:
        task.check_rows(frame, example_id, {"label": "label"})  # an answer's text in the context at its start
    encoded = encode_examples(tokenizer, frame, task)
    ids = [int(i) for i in encoded.input_ids[0]]
    reading, notes = document_reading(tokenizer, text, tokenizer.model_max_length, example_id, task, question)
    probs = task.example_outputs(predict_logits(model, encoded, 1), encoded)[0]
    seconds["predict"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    layers = forward_bands(model, encoded.batch([0], on, architecture(model)))
    summary = compute_example_summaries(layers, s.attention.top_k)  # where the attention is
    layers = [layer.cpu() for layer in layers]  # the page's views and the stored bands
    received = summary.pop("received").numpy()
    seconds["attention"] = time.perf_counter() - t0

    kind = s.attribution.target if target is None else "given"  # the row's target_kind: why this output
    if target is not None:
        target = task.parse_target(target, clf.class_names)
    elif s.attribution.target == "true" and true_label is None:
        raise InputError(example_id, "label", "expected the true label: attribution.target is 'true'")
    else:
        target = task.targets(s.attribution.target, true_label if true_label is not None else task.NO_LABEL,
                              probs)[0]  # the headline target  # fmt: skip
    t0 = time.perf_counter()
    inputs = prepare_inputs(model, tokenizer, ids, on)
    a = s.attribution
    lo, hi = step_range(showcased, showcase_steps=a.showcase_steps, adaptive=a.adaptive, min_steps=a.min_steps,
                        max_steps=a.max_steps, n_steps=a.n_steps)  # fmt: skip
    internal, _ = internal_batch(a.internal_batch_size, model, inputs, target, a.autocast,
                                 showcase_steps=a.showcase_steps, adaptive=a.adaptive, min_steps=a.min_steps,
                                 max_steps=a.max_steps, n_steps=a.n_steps)  # fmt: skip
    res = attribute_example(model, inputs, target, min_steps=lo, max_steps=hi, tolerance=a.tolerance,
                            internal_batch_size=internal, autocast=a.autocast)  # fmt: skip
    synchronize(on)
    seconds["ig"] = time.perf_counter() - t0
    row = attribution_row(example_id, ids, res, task.NO_LABEL if true_label is None else true_label,
                          kind, showcased, seconds["ig"])  # fmt: skip

    t0 = time.perf_counter()
    e = s.explanations
    keep, special = token_masks(tokenizer, ids, s.similarity.legacy_mask)  # the masks compare() uses, too
    explained = explain_example(model, inputs, res.target, e.methods, layers=e.layers,
                                tokens=tokenizer.convert_ids_to_tokens(ids), special=special,
                                pad_id=tokenizer.pad_token_id, occlusion_max_tokens=e.occlusion_max_tokens,
                                batch_size=occlusion_batch(e.batch_size, e.methods, model, on, [ids])[0])  # fmt: skip
    seconds["explanations"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    n_layers, n_heads = received.shape[:2]
    weights = _importance(importance if importance is not None else clf.importance_path, n_layers, n_heads)
    sim = s.similarity
    similarity = compare_example(example_id, row["scores"], received, weights, keep, special,
                                 n_permutations=sim.n_permutations, top_fraction=sim.top_fraction, rbo_p=sim.rbo_p,
                                 seed=sim.seed, legacy_sort=sim.legacy_sort, target=target)  # fmt: skip
    seconds["similarity"] = time.perf_counter() - t0

    prov = provenance(EXPLORER_SCHEMA, s.explorer.to_dict(), None)
    prov.pop("created")
    example = {"example_id": example_id, "label": true_label}
    page = document_for(example, ["document"], layers, ids, row, torch.from_numpy(weights[s.explorer.importance]),
                        tokenizer, clf.class_names, None, s.explorer.top_k, prov, explained.scores,
                        notes=notes, task=task)  # fmt: skip
    return DocumentExplanation(
        example_id=example_id, text=text, input_ids=ids, tokens=page.tokens, special=special,
        class_names=clf.class_names, label=true_label, attribution=row, received=received,
        partners={k: v.numpy() for k, v in summary.items()}, methods=dict(explained.scores),
        explanation=explanation_rows(example_id, ids, res.target, explained, e.methods), similarity=similarity,
        importance=weights, page=page, settings=s, model=clf.source, seconds=seconds, reading=reading, notes=notes,
        task=task.name,
        _layers=layers,
    )  # fmt: skip


def _importance(source, n_layers: int, n_heads: int) -> dict[str, np.ndarray]:
    if source is None:
        return uniform_importance(n_layers, n_heads)
    weights = dict(source) if isinstance(source, Mapping) else load_importance_modes(source, MODES)
    for mode in MODES:
        if mode not in weights or np.shape(weights[mode]) != (n_layers, n_heads):
            raise InputError(str(source) if not isinstance(source, Mapping) else "importance", mode,
                             f"expected a ({n_layers}, {n_heads}) head-importance matrix")  # fmt: skip
        weights[mode] = np.asarray(weights[mode], dtype=np.float64)
    return weights


__all__ = ["Classifier", "DocumentExplanation", "Settings", "explain", "load"]
