"""What attnlens computes for one document (:class:`DocumentExplanation`): its tables, its agreement, its page
and its artifacts in the pipeline's formats.
"""

from __future__ import annotations

import copy
import html
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from attnlens.attention.band import layer_configuration
from attnlens.attention.layers import LAYER_CONFIGURATIONS
from attnlens.attention.summaries import BANDS_SCHEMA, band_tensors
from attnlens.attribution.artifacts import (
    ATTRIBUTION_SCHEMA,
    ATTRIBUTION_TYPES,
    EXPLANATION_TYPES,
    EXPLANATIONS_SCHEMA,
    attribution_types,
)
from attnlens.attribution.methods import DOCUMENT, get_method
from attnlens.data.reading import UNKNOWN_WARN_SHARE
from attnlens.errors import InputError
from attnlens.io import file_stem, provenance, save_json, save_parquet, save_tensors
from attnlens.pipeline.config import (
    AttentionConfig,
    AttributionConfig,
    ExplanationsConfig,
    ExplorerConfig,
    SimilarityConfig,
    read_config_file,
    validate_config,
)
from attnlens.render.explorer import ExplorerDocument, payload, render_explorer
from attnlens.similarity.metrics import (
    SIMILARITY_SCHEMA,
    SIMILARITY_TYPES,
    attention_vectors,
)
from attnlens.tasks import Outcome, get_task

try:  # optional: only show() needs it, inside Jupyter
    from IPython.display import HTML
except ImportError:  # pragma: no cover - IPython is a test requirement
    HTML = None


#: The JSON :meth:`DocumentExplanation.save` writes beside the artifacts (``python -m attnlens explain``'s output).
SCORES_SCHEMA = "document_scores/v1"


def raw_config(config: str | Path | Mapping[str, Any] | None) -> tuple[dict, str]:
    """A pipeline config for one call as given, a copy to change, and what names it in an error: ``None`` (the
    defaults), a YAML file, or a mapping."""
    if config is None:
        return {}, "config"
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config)), "config"
    return copy.deepcopy(read_config_file(config)), str(config)


def full_config(config: str | Path | Mapping[str, Any] | None) -> dict:
    """A pipeline config for one call (:func:`raw_config`), validated (defaults filled; bad input one line naming the
    file or ``config``)."""
    return validate_config(*raw_config(config))


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
        full = full_config(config)
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
        return get_task(self.task).outcome(
            self.label, self.attribution["probs"], int(self.attribution["target"]), self.class_names
        )

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
        frame = (
            f'<iframe srcdoc="{srcdoc}" style="width:100%;height:{int(height)}px;border:0" '
            f'sandbox="allow-scripts" title="{file_stem(self.example_id)}"></iframe>'
        )
        with warnings.catch_warnings():  # IPython suggests IFrame, which takes a URL: the page is inline here
            warnings.filterwarnings("ignore", "Consider using IPython.display.IFrame", UserWarning)
            return HTML(frame)

    def scores(self) -> dict[str, Any]:
        """The document's numbers as plain JSON types (what ``python -m attnlens explain`` writes)."""
        fixed = self.similarity[(self.similarity["mode"] == "fixed") & (self.similarity["mask"] == "fixed")]
        return {
            "example_id": self.example_id,
            "model": self.model,
            "classes": self.class_names,
            "prediction": self.prediction,
            "probabilities": self.probabilities,
            "target": self.target,
            "ig": {
                "delta": float(self.attribution["delta"]),
                "gap": float(self.attribution["gap"]),
                "n_steps": int(self.attribution["n_steps"]),
                "converged": bool(self.attribution["converged"]),
            },
            "tokens": self.to_frame().reset_index().to_dict(orient="list"),
            "similarity": fixed.drop(columns=["example_id"]).to_dict(orient="records"),
            "input": self.reading,
            "notes": self.notes,
            "seconds": self.seconds,
        }

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
        save_parquet(
            self.similarity,
            paths["similarity"],
            provenance(SIMILARITY_SCHEMA, s.similarity.to_dict(), s.similarity.seed, **common),
            SIMILARITY_TYPES,
        )
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
            conserves = get_method(row["method"]).conserves.get(DOCUMENT)
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
        return (
            f"<b>{html.escape(self.summary())}</b><br><code>.to_frame()</code> <code>.agreement()</code> "
            "<code>.show()</code> <code>.save(dir)</code>"
        )


def check_out_folder(out: Path) -> None:
    """An output folder that is a file is bad input (one line), not a ``FileExistsError``."""
    if out.exists() and not out.is_dir():
        raise InputError(str(out), "(folder)", "expected a folder to write the document's files into, found a file")
