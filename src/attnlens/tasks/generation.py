"""Generation: a causal language model answers a question from a context in words of its own, and the generation
study asks which sources of the context (sentences, paragraphs) the answer rests on (docs/tasks.md).

An example is a context (the ``text`` column), an optional question or instruction, and a reference answer (the
label: its text). What is explained is the answer's log-probability given the prompt, summed over its tokens
(:class:`attnlens.attribution.source_scores.AnswerForward`): a generated answer has no head of a fixed number of
outputs, so the classification study's stages (fine-tuning a head, the predictions table, IG of an output) do not run
for it — :meth:`Generation.check_config` refuses them with one line — and the generation study's own rules train,
decode and explain (:mod:`attnlens.stages.generation`). The labels are read, checked, split and counted here as
every task's are.
"""

from __future__ import annotations

import re
from typing import ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from attnlens.errors import InputError
from attnlens.tasks.contexts import given_sources, locate_sources
from attnlens.tasks.qa import QA  # the corpus's kinds of sentences are question answering's
from attnlens.tasks.task import REGISTRY, Task, no_empty_cell

#: Why the classification study's head-side questions have no answer for a generated answer.
_NO_HEAD = (
    "a generated answer is explained by the generation study (studies: [generation]), not through a classifier's head"
)


class Generation(Task):
    """A generated answer: the label is the reference answer's text; the explained ``F`` is the answer's
    log-probability given the prompt."""

    name = "generation"
    label = "generation from a context"
    problem_type = "causal_lm"
    head = "causal_lm"
    explains = "the answer's log-probability given the prompt, summed over its tokens"
    readout_label = "log-probability of the answer"
    outputs_column = "log_prob"
    target_kinds = ("predicted", "true")  # the greedy answer, the reference answer
    role_pattern = re.compile(r"answered_right|answered_wrong")
    headline_metrics = (("exact match", "exact_match", True), ("answer log-probability", "mean_answer_log_prob", True))
    extra_columns = ("question",)
    optional_columns: ClassVar[dict] = {"sources": given_sources}
    kept_if_given = ("structure",)  # the planted structure of a generated context (data.synthetic.structures)
    studies = ("generation", "pairs")
    folders_refused = "a folder per class holds no question or answer"
    classes_refused = "an answer is text, not a class"
    topology_refused = "it compares the attention of two classes; a generated answer has none"
    NO_LABEL = ""

    #: the model sources that give a causal language model: drawn and trained, or pretrained as it is
    MODEL_SOURCES = ("from_config", "pretrained")
    seed_key = "generation.train.seed"  # the drawn decoder's weights and batches

    def trains(self, model):
        # a pretrained model is used as it is: one run per dataset (per seed where the seed draws the data)
        return model.get("source") == "from_config"

    def check_config(self, config, where):
        super().check_config(config, where)
        source = config.get("model", {}).get("source")
        if source is not None and source not in self.MODEL_SOURCES:
            raise InputError(
                where,
                "model.source",
                f"expected one of {list(self.MODEL_SOURCES)} for data.task 'generation' (a causal language model), "
                f"got {source!r}",
            )

    # --- labels
    def resolve_labels(self, labels, ids, classes, where, field):
        no_empty_cell(labels, ids, where, field, "a reference answer")
        return labels.map(lambda v: str(v).strip()), ()

    def parse_label(self, value, names):
        if value is None or not str(value).strip():
            raise InputError("label", str(value), "expected a reference answer's text")
        return str(value).strip()

    def check_labels(self, labels, classes, where, field):
        ids = pd.Series([f"row{i}" for i in range(len(labels))])
        return self.resolve_labels(labels.reset_index(drop=True), ids, classes, where, field)[0].to_numpy(dtype=object)

    def check_rows(self, examples, where, fields):
        if "question" not in examples.columns:
            raise InputError(
                where, fields.get("question", "question"), "expected a question column for data.task 'generation'"
            )
        if "sources" in examples.columns:  # each given source a span of its context, in order
            for eid, text, given in zip(examples["example_id"], examples["text"], examples["sources"], strict=True):
                try:
                    locate_sources(str(text).strip(), list(given))
                except ValueError as err:
                    raise InputError(where, fields.get("sources", "sources"), f"example {eid!r}: {err}") from None

    def strata(self, labels, where, field):
        return np.zeros(len(labels), dtype=np.int64)  # one stratum: a seeded random split

    def check_splits(self, labels, is_train, classes, where, field):
        return None

    def summary(self, labels, classes):
        words = [len(str(a).split()) for a in labels]
        return {"n": len(labels), "answer_words_mean": float(np.mean(words)) if words else 0.0}

    def label_type(self):
        return pa.string()

    def label_value(self, cell):
        return str(cell)

    def output_names(self, classes):
        return ("answer",)

    def texts(self, examples):
        """The question and the context, as the prompt holds both (its template's own words aside)."""
        return [str(q) for q in examples["question"]], [str(t) for t in examples["text"]]

    def regions(self, rationales):
        """The answer's sentence, the supporting sentence and the distractors: the question-answering corpus's."""
        return QA.regions(rationales)

    # --- the head: none (the generation study's rules decode and explain)
    def _no_head(self):
        raise InputError("config", "data.task", f"expected a task with a classifier's head here: {_NO_HEAD}")

    def n_outputs(self, n_classes):
        self._no_head()

    def eval_loss(self, logits, labels, encoded=None):
        self._no_head()

    def readout(self, logits):
        self._no_head()

    def outputs(self, logits):
        self._no_head()

    def targets(self, kind, label, outputs):
        self._no_head()

    def predictions(self, examples, logits, encoded=None):
        self._no_head()

    def metrics(self, labels, logits, encoded=None, names=()):
        self._no_head()

    def roles(self, predictions, seed, names=()):
        self._no_head()

    def outcome(self, label, outputs, target, names):
        self._no_head()


GENERATION = REGISTRY.register(Generation())
