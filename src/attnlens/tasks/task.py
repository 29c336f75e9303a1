"""The task seam: :class:`Task`, the registry and the helpers the tasks share (see :mod:`attnlens.tasks`)."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from attnlens.errors import InputError
from attnlens.registry import Registry

#: The task of a configuration that names none: the paper's.
DEFAULT = "classification"


@dataclass(frozen=True)
class Outcome:
    """One example's outcome as a page shows it (:meth:`Task.outcome`)."""

    label: str | None  # the true label or value, when known
    prediction: str  # the predicted class, or the predicted value
    confidence: float | None  # the predicted class's probability; none for a value
    outputs: dict[str, float]  # every output of F by name (the class probabilities; the value)
    explained: str  # what the explanation is for: the explained class, or the value


class Task(ABC):
    """One task's card and behaviour. A subclass sets the class attributes and implements every abstract method
    (an incomplete one cannot be registered: it cannot be instantiated)."""

    name: ClassVar[str]  # as the config (``task``) and the artifacts name it
    label: ClassVar[str]  # as a page names it
    problem_type: ClassVar[str]  # Hugging Face's ``config.problem_type``: the head's loss
    #: the kind of head (:meth:`attnlens.models.seam.Architecture.head_class`): a sequence classifier's, or a
    #: question-answering head's (a start and an end logit per token)
    head: ClassVar[str] = "sequence_classification"
    #: the columns a split frame keeps beyond ``example_id``, ``text`` and ``label`` (a question)
    extra_columns: ClassVar[tuple[str, ...]] = ()
    #: columns a split frame keeps where the source gives them (a generated context's planted ``structure``)
    kept_if_given: ClassVar[tuple[str, ...]] = ()
    #: columns a file or hub source may give (``data.<name>_column`` set), each with the parser of one cell, which
    #: raises :class:`ValueError` on a cell it cannot read: a generation context's own sources
    optional_columns: ClassVar[dict] = {}
    #: whether :meth:`logits` has a token axis last (``(batch, k, n)``: a start and an end logit per token), which
    #: batched inference pads with ``-inf`` (:func:`attnlens.classifier.prediction.predict_logits`)
    token_logits: ClassVar[bool] = False
    explains: ClassVar[str]  # what the readout F is, as the docs and the report say it
    readout_label: ClassVar[str]  # F on a figure's axis
    #: the predictions table's columns beyond ``example_id``, ``label``, ``pred`` and ``logits``: the readout's
    outputs_column: ClassVar[str]
    #: IG's ``attribution.target`` kinds the task knows
    target_kinds: ClassVar[tuple[str, ...]]
    #: the names of its showcase roles (:meth:`roles`)
    role_pattern: ClassVar[re.Pattern]
    #: the test metrics the findings compare across runs: ``(name, key in metrics.json, higher is better)``
    headline_metrics: ClassVar[tuple[tuple[str, str, bool], ...]]
    #: the column the task's own datasets keep their labels in (SQuAD's ``answers``), read where the column
    #: ``data.label_column`` names is not in the file (:func:`attnlens.data.sources.label_column`); ``None``: no such
    #: name
    dataset_label_column: ClassVar[str | None] = None
    #: whether a dataset may give one 0/1 column per label (``data.label_columns``)
    label_per_column: ClassVar[bool] = False
    #: why a folder per class cannot hold the task's labels (``data.source: folders``); ``None``: it can
    folders_refused: ClassVar[str | None] = None
    #: the studies that can run for the task (``studies``): a classifier's, or the generation study
    studies: ClassVar[tuple[str, ...]] = ("classification", "topology", "pairs")
    #: why the topology study cannot run for the task; ``None``: it can
    topology_refused: ClassVar[str | None] = None
    #: why ``data.classes`` means nothing for the task (its outputs are not classes); ``None``: it names them
    classes_refused: ClassVar[str | None] = None
    #: the key a grid's seed sets (``grid.seeds``): the seed of what a run trains, dotted
    seed_key: ClassVar[str] = "train.seed"

    def trains(self, model: dict) -> bool:
        """Whether a run of ``model`` (its config section) trains a model, so that a grid's seeds give it runs: every
        source but a classifier of the user's own, which runs once per dataset."""
        return model.get("source") != "classifier"

    def check_config(self, config: dict, where: str) -> None:
        """The config's keys that must agree with the task (a validated config, defaults filled in). A subclass
        that checks more calls this first."""
        data = config.get("data", {})
        if data.get("label_columns") and not self.label_per_column:
            raise InputError(
                where,
                "data.label_columns",
                f"expected none for data.task {self.name!r} (one column "
                "per label is a multi-label dataset: data.task 'multilabel')",
            )
        for name in ("sources",):
            if data.get(f"{name}_column") and name not in self.optional_columns:
                raise InputError(
                    where,
                    f"data.{name}_column",
                    f"expected none for data.task {self.name!r} (no task but generation reads a context's sources)",
                )
        if data.get("source") == "folders" and self.folders_refused:
            raise InputError(
                where,
                "data.source",
                f"expected a file, hub or synthetic source for data.task {self.name!r} ({self.folders_refused})",
            )
        if data.get("classes") and self.classes_refused:
            raise InputError(
                where, "data.classes", f"expected none for data.task {self.name!r} ({self.classes_refused})"
            )
        other = [s for s in config.get("studies", ()) if s not in self.studies]
        if other:
            raise InputError(
                where,
                "studies",
                f"expected some of {list(self.studies)} for data.task {self.name!r}, got {other[0]!r}",
            )
        if "topology" in config.get("studies", ()) and self.topology_refused:
            raise InputError(
                where, "studies", f"expected no topology study for data.task {self.name!r} ({self.topology_refused})"
            )
        kind = config.get("attribution", {}).get("target")
        if kind is not None and kind not in self.target_kinds:
            raise InputError(
                where,
                "attribution.target",
                f"expected one of {list(self.target_kinds)} for data.task {self.name!r}, got {kind!r}",
            )

    # --- labels ------------------------------------------------------------------------------------------
    @abstractmethod
    def resolve_labels(
        self, labels: pd.Series, ids: pd.Series, classes: Sequence[str] | None, where: str, field: str
    ) -> tuple[pd.Series, tuple[str, ...]]:
        """A file's or a hub dataset's label column as the task's labels, and the names of the outputs they
        imply (``classes``: ``data.classes``); an empty cell, or a value the task cannot read, names its row."""

    #: a document's label when it is not known (the one-document API without ``label``), as a shard row keeps it
    NO_LABEL: ClassVar = None

    @abstractmethod
    def parse_label(self, value, names: Sequence[str]):
        """One document's true label as a user gives it (a class name or index; a number; a list of labels), in
        the form :meth:`check_labels` returns; :class:`InputError` naming ``label`` otherwise."""

    @abstractmethod
    def check_labels(self, labels: pd.Series, classes: Sequence[str], where: str, field: str) -> np.ndarray:
        """Every source's labels, checked, as the split files keep them (:meth:`label_type`)."""

    def check_rows(self, examples: pd.DataFrame, where: str, fields: dict[str, str]) -> None:
        """What a label needs of the rest of its row (an answer's text in its context), checked after
        :meth:`check_labels`; ``fields`` names each frame column as the source does. Nothing, for a label that
        stands alone."""
        return None

    @abstractmethod
    def strata(self, labels: np.ndarray, where: str, field: str) -> np.ndarray:
        """Integer strata of a stratified train/test split (each is split as a class would be); an
        :class:`InputError` when the labels cannot be split."""

    @abstractmethod
    def check_splits(
        self, labels: np.ndarray, is_train: np.ndarray, classes: Sequence[str], where: str, field: str
    ) -> None:
        """What a training split needs (every class; targets that vary); :class:`InputError` otherwise."""

    @abstractmethod
    def summary(self, labels: np.ndarray, classes: Sequence[str]) -> dict:
        """A split's labels in the manifest (counts per class; the target's range and spread)."""

    @abstractmethod
    def label_type(self) -> pa.DataType:
        """The ``label`` column's Arrow type in the split files and the attribution shards."""

    def label_value(self, cell):
        """A ``label`` cell as JSON keeps it (the manifest, ``selection.json``): a class index, a value."""
        return np.asarray(cell).item()

    @abstractmethod
    def output_names(self, classes: Sequence[str]) -> tuple[str, ...]:
        """The names of the head's outputs (a classifier's class names), as the model's ``id2label`` keeps them."""

    # --- the head ----------------------------------------------------------------------------------------
    @abstractmethod
    def n_outputs(self, n_classes: int) -> int:
        """How many logits the head has."""

    def training_labels(self, labels: np.ndarray) -> np.ndarray:
        """The labels as one array the head's loss takes (class indices; float32 values), for
        :meth:`head_labels`; a task whose head takes labels of another form overrides :meth:`head_labels`."""
        raise NotImplementedError(f"task {self.name!r} gives its head labels through head_labels")

    def head_labels(self, labels: np.ndarray, encoded) -> dict[str, np.ndarray]:
        """The labels as the model's forward takes them, by keyword, one row per example (``labels``; a QA head's
        ``start_positions`` and ``end_positions``): ``encoded`` is the examples' tokenisation
        (:class:`attnlens.classifier.prediction.Encoded`), for labels that are token positions."""
        return {"labels": self.training_labels(labels)}

    @abstractmethod
    def eval_loss(self, logits: np.ndarray, labels: np.ndarray, encoded=None) -> float:
        """The head's loss on held-out float32 logits (:meth:`logits`, batched), as torch computes it in training
        (``encoded``: as :meth:`head_labels`)."""

    # --- the inputs --------------------------------------------------------------------------------------
    def texts(self, examples: pd.DataFrame) -> tuple[list[str], list[str] | None]:
        """What the tokenizer reads of each example of a split frame: its ``text``, and ``None``; a task whose
        examples are pairs returns the first texts and the second ones (a question and its context), and the
        second of a pair is what truncation cuts."""
        return [str(t) for t in examples["text"]], None

    def global_tokens(self, input_ids: Sequence[int], tokenizer) -> list[int] | None:
        """The positions of one tokenised example that attend to every token and are attended by every token
        (:meth:`attnlens.models.seam.Architecture.forward_args`), read from its ids; ``None``: the architecture's
        own choice (CLS), a classifier's."""
        return None

    def query_groups(
        self, label, encoded, index: int, readout: tuple[str, int] = ("[CLS]", 0)
    ) -> dict[str, np.ndarray]:
        """Named sets of query tokens of example ``index`` of ``encoded`` whose attention is summarised apart
        (``(n,)`` bool each; an empty set where the example has none): what the head reads, the token ``readout``
        names and places (:meth:`attnlens.models.seam.Architecture.readout`: ``[CLS]`` for an encoder's sequence
        classifier, the last real token for a decoder's)."""
        name, position = readout
        rows = np.zeros(len(encoded.input_ids[index]), dtype=bool)
        rows[position] = True
        return {name: rows}

    def regions(self, rationales: pd.DataFrame) -> dict[str, pd.DataFrame]:
        """Named kinds of one document's planted phrases (``rationales.parquet`` rows), where the query groups'
        attention and the attribution are measured: the evidence of the document's own class or counted field,
        and the distractors."""
        if not len(rationales):
            return {}
        return {"evidence": rationales[rationales["evidence"]], "distractors": rationales[~rationales["evidence"]]}

    # --- the readout -------------------------------------------------------------------------------------
    def logits(self, output):
        """The logits the readout reads, from a Hugging Face model's ``output``: a sequence classifier's ``logits``
        ``(batch, n_outputs)``; with :attr:`token_logits`, ``(batch, k, n)``. :meth:`explained_logits` of them is
        what AttnLRP explains (:mod:`attnlens.attribution.lrp`)."""
        return output.logits

    def explained_logits(self, logits):
        """The pre-readout scores, one column per column of ``F`` (:meth:`readout`), of which AttnLRP explains the
        target's: the logits themselves, for a head whose outputs are ``F``'s columns."""
        return logits

    @abstractmethod
    def readout(self, logits):
        """``F`` of a torch tensor of logits ``(batch, n_outputs)``: what the methods explain."""

    @abstractmethod
    def outputs(self, logits: np.ndarray) -> np.ndarray:
        """``F`` in float64 NumPy, from ``(n, n_outputs)`` logits."""

    def example_outputs(self, logits: np.ndarray, encoded=None) -> list[np.ndarray]:
        """Each example's ``F`` as the predictions table keeps it (:attr:`outputs_column`), from which its targets are
        chosen (:meth:`targets`): :meth:`outputs` of the batched logits, row by row."""
        return list(self.outputs(logits))

    def parse_target(self, value, names: Sequence[str]) -> int:
        """An output the API is asked to explain (``explain(..., target=...)``): its index or its name."""
        return output_index(value, names, "target", "an output index")

    @abstractmethod
    def targets(self, kind: str, label, outputs: np.ndarray) -> tuple[int, ...]:
        """The columns of ``F`` a document is explained for (``kind``: ``attribution.target``), the headline
        target first: one for a classification or a regression, each explained label of a multi-label document.
        Every stage keys a document's explanations by ``(example_id, target)``."""

    def target_names(self, classes: Sequence[str]) -> tuple[str, ...]:
        """The names the per-target results give the explained outputs, by :meth:`target_group`: the outputs'
        own names."""
        return self.output_names(classes)

    def target_group(self, target: int) -> int:
        """Which of :meth:`target_names` the explained output ``target`` is reported under: itself."""
        return int(target)

    def kept_target(self, target: int, keep: np.ndarray) -> int | None:
        """The explained output ``target`` of a copy of the document that keeps the tokens ``keep`` (``(n,)`` bool:
        the removal curves' copies); ``None`` where the copy has none. A document's outputs do not move with its
        tokens: ``target`` itself."""
        return target

    # --- predictions, metrics, showcase ------------------------------------------------------------------
    @abstractmethod
    def predictions(self, examples: pd.DataFrame, logits: np.ndarray, encoded=None) -> pd.DataFrame:
        """The predictions table: ``example_id, label, pred, logits`` and :attr:`outputs_column` (``encoded``: as
        :meth:`head_labels`, for predictions read from the tokens)."""

    @abstractmethod
    def metrics(self, labels: np.ndarray, logits: np.ndarray, encoded=None, names: Sequence[str] = ()) -> dict:
        """The test metrics of batched logits against the labels (``encoded``: as :meth:`predictions`); a metric
        per output is keyed by its name in ``names`` (the classifier's ``id2label``), by its index without."""

    def metric_notes(self, metrics: dict) -> list[str]:
        """Run notes on what the test metrics (:meth:`metrics`) leave out: none, where they score every example."""
        return []

    @abstractmethod
    def roles(
        self, predictions: pd.DataFrame, seed: int, names: Sequence[str] = ()
    ) -> list[tuple[str, int | None, str]]:
        """``(role, row or None, rule or why no example meets it)`` for every showcase role, in order; a rule names an
        output by its name in ``names`` (the classifier's ``id2label``), by its index without."""

    def showcase_entry(self, predictions: pd.DataFrame, row: int) -> dict:
        """What ``selection.json`` keeps of a showcased example: its id, label, prediction and outputs."""
        outputs = predictions[self.outputs_column].iloc[row]
        return {
            "example_id": str(predictions["example_id"].iloc[row]),
            "label": self.label_value(predictions["label"].iloc[row]),
            "pred": self.label_value(predictions["pred"].iloc[row]),
            self.outputs_column: [round(float(p), 6) for p in outputs],
        }

    @abstractmethod
    def outcome(self, label, outputs: Sequence[float], target: int, names: Sequence[str]) -> Outcome:
        """An example's outcome for a page: ``label`` (``None`` when unknown), ``outputs`` (``F(x)``), the
        explained output ``target`` and the output names (:meth:`output_names`)."""

    def evidence(self, rationales: pd.DataFrame, target: int) -> pd.DataFrame:
        """The planted phrases (``rationales.parquet`` rows) that are evidence for the explained output ``target``:
        those of the document's own class or counted field (``evidence``), whatever output is explained."""
        return rationales[rationales["evidence"]] if len(rationales) else rationales

    def role_missing(self, selection: dict, role: str) -> str | None:
        """Why a role of this task (:attr:`role_pattern`) names no example beyond those the selection lists as
        left out; ``None``: it names one, or could."""
        return None


#: Every registered task by name, in registration order (each task's module registers it).
REGISTRY: Registry[Task] = Registry("tasks", "data.task")
register = REGISTRY.register


def task_names() -> list[str]:
    """The registered tasks' names, in registration order (the config schema's ``task`` enum)."""
    return list(REGISTRY)


def get_task(name: str | None) -> Task:
    """The task named ``name`` (:data:`DEFAULT` for ``None``)."""
    return REGISTRY.get(DEFAULT if name is None else name)


def output_labels(config) -> list[str]:
    """The names of a model's outputs, in order, as its configuration's ``id2label`` keeps them (what metrics and
    notes call a class or a label)."""
    return [str(config.id2label[i]) for i in range(config.num_labels)]


#: How Hugging Face names a question-answering model's class (``LongformerForQuestionAnswering``).
QA_CLASS_SUFFIX = "ForQuestionAnswering"


def task_of(config) -> Task:
    """The task a model's configuration (a ``transformers`` config, or its dict) was trained for, from its
    ``problem_type``: a model saved as a question-answering model (its ``architectures``) without one is read
    by the task of that head, a classifier saved without one is a single-label classifier, as Hugging Face
    reads it."""
    get = config.get if isinstance(config, dict) else lambda key: getattr(config, key, None)
    problem = get("problem_type")
    for task in REGISTRY.values():
        if task.problem_type == problem:
            return task
    if problem is None and any(str(a).endswith(QA_CLASS_SUFFIX) for a in get("architectures") or ()):
        for task in REGISTRY.values():
            if task.head == "question_answering":
                return task
    if problem in (None, "single_label_classification"):
        return REGISTRY[DEFAULT]
    raise InputError(
        "model", "problem_type", f"expected one of {[t.problem_type for t in REGISTRY.values()]}, got {problem!r}"
    )


def output_index(value, names: Sequence[str], field: str, what: str) -> int:
    """The output ``value`` names among ``names``: its index, or its name (``what``: how the error names an
    index, e.g. ``"a class index"``); :class:`InputError` under ``field`` otherwise."""
    names = list(names)
    if isinstance(value, str) and value in names:
        return names.index(value)
    if isinstance(value, int | np.integer) and not isinstance(value, bool) and 0 <= int(value) < len(names):
        return int(value)
    raise InputError(field, str(value), f"expected {what} below {len(names)} or one of {names}")


def first_bad_row(bad: np.ndarray) -> int:
    return int(np.flatnonzero(bad)[0])


def at_least_float32(logits):
    """Half-precision logits (autocast) in float32, so that F and its gradient are computed in float32 at least."""
    return logits.float() if logits.dtype.is_floating_point and logits.dtype.itemsize < 4 else logits


def no_empty_cell(labels: pd.Series, ids: pd.Series, where: str, field: str, what: str) -> None:
    empty = labels.isna() | labels.map(lambda v: isinstance(v, str) and not v.strip())
    if empty.any():
        i = first_bad_row(empty.to_numpy())
        raise InputError(
            where, field, f"expected {what} in every row, row {i + 1} (example {ids.iloc[i]!r}) has an empty cell"
        )


def integer_labels(labels: pd.Series, where: str, field: str) -> np.ndarray:
    """Labels as int64; booleans count as 0/1; anything not integral is an error."""
    if labels.dtype == bool:
        return labels.astype("int64").to_numpy()
    if pd.api.types.is_integer_dtype(labels):
        return labels.astype("int64").to_numpy()
    if pd.api.types.is_float_dtype(labels) and labels.notna().all() and (labels == labels.round()).all():
        return labels.astype("int64").to_numpy()
    bad = next((v for v in labels if not (isinstance(v, int | np.integer) and not isinstance(v, bool))), None)
    raise InputError(where, field, f"expected integer class labels, got {bad!r} ({labels.dtype})")
