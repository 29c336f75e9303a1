"""Extractive question answering: a span of the context answers the question (SQuAD's task, Longformer's
TriviaQA and HotpotQA readers).

The head gives every token a start and an end logit; a span scores its start logit plus its end logit, and the
predicted answer is the best-scoring span inside the context, as Hugging Face's question-answering pipeline and
the SQuAD baselines decode (the span arithmetic: :mod:`attnlens.tasks.spans`). What is explained is that score:
the readout ``F`` lays every span's score out as one vector, so a document's explained output is one index of it,
as a class is one column of a classifier's probabilities, and every method that takes a target takes a span.

The metrics are SQuAD's (:mod:`attnlens.tasks.squad`). An answer cut away by truncation has no token span: it is
counted and left out of the span metrics, never scored as a miss.

:class:`QuestionAnswering` is the task: ``F`` is the **span distribution**, a softmax over every span's score
(:func:`~attnlens.tasks.spans.span_probabilities`), so a span is explained as a class is, by its probability,
and AttnLRP explains its score.
"""

from __future__ import annotations

import re
from typing import ClassVar

import numpy as np
import pandas as pd
import pyarrow as pa

from attnlens.errors import InputError
from attnlens.tasks.spans import (
    MAX_ANSWER_TOKENS,
    best_span,
    gold_span,
    gold_spans,
    span_index,
    span_of,
    span_probabilities,
    span_scores,
    spans_within,
)
from attnlens.tasks.squad import answer_list, check_answers, exact_match, qa_metrics, token_f1
from attnlens.tasks.task import REGISTRY, Outcome, Task, at_least_float32

#: ``phrase_label`` of a question-answering document's planted sentences (``rationales.parquet``): the answer's fact,
#: the supporting sentence, a distractor (a fact about another entity, or another description's supporting sentence),
#: and one of two facts that disagree about the asked entity (a generation context's ``conflicting`` structure).
QA_ANSWER, QA_SUPPORTING, QA_DISTRACTOR, QA_CONFLICTING = 0, 1, 2, 3


class QuestionAnswering(Task):
    """Extractive question answering: the answer is a span of the context, a token's start logit plus another's
    end logit. ``F`` is the distribution over spans (:func:`~attnlens.tasks.spans.span_probabilities`); a document is
    explained for its
    predicted answer span (:meth:`targets`), with global attention on every question token
    (:meth:`global_tokens`, Hugging Face's convention for Longformer)."""

    name = "qa"
    label = "extractive question answering"
    problem_type = "question_answering"
    head = "question_answering"
    explains = (
        f"the probability of the explained answer span: a softmax, over every span of at most "
        f"{MAX_ANSWER_TOKENS} tokens, of its start logit plus its end logit"
    )
    readout_label = "probability of the answer span"
    outputs_column = "span_probs"
    target_kinds = ("predicted",)
    role_pattern = re.compile(r"wrong_span|most_confident_right|least_confident_right|random_right")
    headline_metrics = (("exact match", "exact_match", True), ("token F1", "f1", True))
    extra_columns = ("question",)
    dataset_label_column = "answers"
    token_logits = True
    folders_refused = "a folder per class holds no question"
    classes_refused = "an answer is a span of the context, not a class"
    topology_refused = "it compares the attention of two classes; a question has an answer, not a class"
    #: a document without a known answer (the one-document API without ``label``)
    NO_LABEL: ClassVar[list] = []

    # --- labels
    def resolve_labels(self, labels, ids, classes, where, field):
        cells = [answer_list(cell, i, str(ids.iloc[i]), where, field) for i, cell in enumerate(labels)]
        rows = [[{"text": text, "answer_start": start} for text, start in cell] for cell in cells]
        return pd.Series(rows, index=labels.index, dtype=object), ()

    def parse_label(self, value, names):
        if value is None:
            return []
        cell = value if isinstance(value, list | tuple) else [value]
        return self.resolve_labels(
            pd.Series([list(cell)], dtype=object), pd.Series(["document"]), (), "label", "answers"
        )[0].iloc[0]

    def check_labels(self, labels, classes, where, field):
        out = np.empty(len(labels), dtype=object)
        ids = pd.Series([f"row{i}" for i in range(len(labels))])
        out[:] = list(self.resolve_labels(labels.reset_index(drop=True), ids, classes, where, field)[0])
        return out

    def check_rows(self, examples, where, fields):
        answers = [[(a["text"], a["answer_start"]) for a in cell] for cell in examples["label"]]
        if "question" not in examples.columns:
            raise InputError(where, fields.get("question", "question"), "expected a question column for data.task 'qa'")
        try:
            check_answers(
                list(examples["question"]),
                list(examples["text"]),
                [[{"text": t, "answer_start": s} for t, s in cell] for cell in answers],
                list(examples["example_id"]),
                where,
                fields.get("label", "answers"),
            )
        except InputError as err:
            if err.field == "question":
                raise InputError(where, fields.get("question", "question"), err.expected) from None
            raise

    def strata(self, labels, where, field):
        return np.zeros(len(labels), dtype=np.int64)  # one stratum: a seeded random split

    def check_splits(self, labels, is_train, classes, where, field):
        return None

    def summary(self, labels, classes):
        return {"n": len(labels), "answers": int(sum(len(cell) for cell in labels))}

    def label_type(self):
        return pa.list_(pa.struct([("text", pa.string()), ("answer_start", pa.int64())]))

    def label_value(self, cell):
        return [{"text": str(a["text"]), "answer_start": int(a["answer_start"])} for a in cell]

    def output_names(self, classes):
        return ("start", "end")

    # --- the inputs
    def texts(self, examples):
        return [str(q) for q in examples["question"]], [str(t) for t in examples["text"]]

    def global_tokens(self, input_ids, tokenizer):
        """Every token before the first separator (``[CLS]`` and the question's tokens), as Hugging Face's
        Longformer question answering puts them global."""
        sep = tokenizer.sep_token_id
        ids = list(input_ids)
        return list(range(ids.index(sep) if sep in ids else 1))

    def query_groups(self, label, encoded, index, readout=("[CLS]", 0)):
        """The question's tokens and the gold answer's (none where truncation cut the answer away), whatever token
        a sequence classifier would read."""
        n = len(encoded.input_ids[index])
        question = np.zeros(n, dtype=bool)
        first_sep = next((k for k in range(1, n) if encoded.in_text[index][k]), n) - 1  # the [SEP] before the context
        question[1:first_sep] = True
        answer = np.zeros(n, dtype=bool)
        s, e = gold_span(label, encoded.offsets[index], encoded.in_text[index])
        if s >= 0:
            answer[s : e + 1] = True
        return {"question": question, "answer": answer}

    def regions(self, rationales):
        """The supporting sentence, the answer's sentence and the distractor facts."""
        if not len(rationales):
            return {}
        kind = rationales["phrase_label"]
        names = {"supporting sentence": QA_SUPPORTING, "answer sentence": QA_ANSWER, "distractors": QA_DISTRACTOR}
        return {name: rationales[kind == value] for name, value in names.items()}

    # --- the head
    def n_outputs(self, n_classes):
        return 2

    def head_labels(self, labels, encoded):
        """``start_positions`` and ``end_positions`` of each example's gold span; an answer truncation cut away
        points at ``[CLS]`` (position 0), as Hugging Face's question-answering scripts train on it."""
        spans = np.maximum(gold_spans(labels, encoded), 0)
        return {"start_positions": spans[:, 0].copy(), "end_positions": spans[:, 1].copy()}

    def eval_loss(self, logits, labels, encoded=None):
        import torch  # noqa: PLC0415 (as Classification.eval_loss)

        heads = self.head_labels(labels, encoded)
        x = torch.from_numpy(np.asarray(logits, dtype=np.float32))
        start = torch.nn.functional.cross_entropy(x[:, 0], torch.from_numpy(heads["start_positions"]))
        end = torch.nn.functional.cross_entropy(x[:, 1], torch.from_numpy(heads["end_positions"]))
        return float(((start + end) / 2).item())

    # --- the readout
    def logits(self, output):
        import torch  # noqa: PLC0415 (a light module: only a model's output, so torch is loaded)

        return torch.stack([output.start_logits, output.end_logits], dim=1)

    def explained_logits(self, logits):
        return span_scores(logits[:, 0], logits[:, 1])

    def readout(self, logits):
        return span_probabilities(span_scores(at_least_float32(logits[:, 0]), at_least_float32(logits[:, 1])))

    def outputs(self, logits):
        x = np.asarray(logits, dtype=np.float64)
        return span_probabilities(span_scores(x[:, 0], x[:, 1]))

    def targets(self, kind, label, outputs):
        """The predicted answer span: the most probable span of the context (the predictions table keeps the
        span distribution restricted to the context)."""
        if kind not in self.target_kinds:
            raise InputError(
                "config",
                "attribution.target",
                f"expected one of {list(self.target_kinds)} for data.task 'qa', got {kind!r}",
            )
        return (int(np.argmax(np.asarray(outputs, dtype=np.float64))),)

    def target_names(self, classes):
        return ("answer span",)

    def target_group(self, target):
        """Every answer span is reported as one: the answer span (its index says where it is, not what it is)."""
        return 0

    def kept_target(self, target, keep):
        """The answer span as a copy keeps it: from its first kept token to its last, at their positions in the
        copy; ``None`` (probability 0) where the copy keeps none of its tokens."""
        s, e = span_of(target)
        keep = np.asarray(keep, dtype=bool)
        inside = np.flatnonzero(keep[s : e + 1])
        if not len(inside):
            return None
        position = np.cumsum(keep) - 1  # a kept token's position in the copy
        return span_index(int(position[s + inside[0]]), int(position[s + inside[-1]]))

    # --- predictions, metrics, showcase
    def _decoded(self, logits, encoded):
        """Per example: its length, best context span ``(s, e)``, the answer text and the span distribution over the
        context's spans (0 elsewhere)."""
        out = []
        for i, ids in enumerate(encoded.input_ids):
            n = len(ids)
            start, end = np.asarray(logits[i, 0, :n], np.float64), np.asarray(logits[i, 1, :n], np.float64)
            s, e, _ = best_span(start, end, encoded.in_text[i])
            probs = span_probabilities(span_scores(start[None], end[None]))[0]
            allowed = spans_within(encoded.in_text[i])
            text = encoded.texts[i][encoded.offsets[i][s][0] : encoded.offsets[i][e][1]]
            out.append((n, s, e, text, np.where(allowed.reshape(-1), probs, 0.0)))
        return out

    @staticmethod
    def _index(start: int, end: int) -> int:
        """A gold span's index, or -1 where it is cut away or longer than any span the readout scores."""
        return span_index(int(start), int(end)) if start >= 0 and end - start < MAX_ANSWER_TOKENS else -1

    def example_outputs(self, logits, encoded=None):
        """The span distribution over the context's spans (0 elsewhere), of each example's own length."""
        return [d[4] for d in self._decoded(logits, encoded)]

    def parse_target(self, value, names):
        """A span: ``(start, end)`` token positions, or its index (:func:`~attnlens.tasks.spans.span_index`)."""
        try:
            if isinstance(value, list | tuple) and len(value) == 2:
                return span_index(int(value[0]), int(value[1]))
            if isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 0:
                return int(value)
        except ValueError:
            pass
        raise InputError(
            "target",
            str(value),
            f"expected an answer span: (start, end) token positions, at most {MAX_ANSWER_TOKENS} tokens, or its index",
        )

    def predictions(self, examples, logits, encoded=None):
        decoded = self._decoded(logits, encoded)
        gold = gold_spans(examples["label"], encoded)
        answers = [[a["text"] for a in cell] for cell in examples["label"]]
        return pd.DataFrame(
            {
                "example_id": examples["example_id"].to_numpy(),
                "label": list(examples["label"]),
                "pred": [d[3] for d in decoded],
                "logits": [np.asarray(logits[i, :, : d[0]], np.float32).reshape(-1) for i, d in enumerate(decoded)],
                "span_probs": [d[4].astype(np.float32) for d in decoded],
                "span": [span_index(d[1], d[2]) for d in decoded],
                "span_prob": [float(d[4][span_index(d[1], d[2])]) for d in decoded],
                "gold_span": [self._index(a, b) for a, b in gold],
                "truncated": gold[:, 0] < 0,
                "exact_match": [exact_match(d[3], a) for d, a in zip(decoded, answers, strict=True)],
                "f1": [token_f1(d[3], a) for d, a in zip(decoded, answers, strict=True)],
            }
        )

    def metrics(self, labels, logits, encoded=None, names=()):
        decoded = self._decoded(logits, encoded)
        truncated = gold_spans(labels, encoded)[:, 0] < 0
        return qa_metrics([d[3] for d in decoded], [[a["text"] for a in cell] for cell in labels], truncated)

    def metric_notes(self, metrics):
        cut = metrics.get("n_truncated", 0)
        if not cut:
            return []
        return [
            f"{cut} of {cut + metrics['n_scored']} test answers were cut away by truncation at model.max_length: "
            "left out of exact match and F1 (raise max_length, or shorten the contexts)"
        ]

    def roles(self, predictions, seed, names=()):
        scored = ~predictions["truncated"].to_numpy(dtype=bool)
        right = scored & (predictions["exact_match"].to_numpy() == 1.0)
        wrong = scored & ~right
        p = predictions["span_prob"].to_numpy(dtype=np.float64)
        out: list[tuple[str, int | None, str]] = []
        for role, mask, pick, rule, none in (
            (
                "wrong_span",
                wrong,
                np.argmax,
                "a wrong answer span, the most probable",
                "no test question whose answer the model could read is answered wrong",
            ),
            (
                "most_confident_right",
                right,
                np.argmax,
                "a right answer (exact match), the most probable",
                "no test question is answered right",
            ),
            (
                "least_confident_right",
                right,
                np.argmin,
                "a right answer (exact match), the least probable",
                "no test question is answered right",
            ),
        ):
            idx = np.flatnonzero(mask)
            out.append((role, int(idx[pick(p[idx])]), rule) if len(idx) else (role, None, none))
        idx = np.flatnonzero(right)
        rng = np.random.default_rng(seed)
        out.append(
            ("random_right", int(rng.choice(idx)), f"seeded draw (seed {seed}) of the test questions answered right")
            if len(idx)
            else ("random_right", None, "no test question is answered right")
        )
        if not scored.any():  # every role is left out for one reason: no answer was read
            why = "every test answer was cut away by truncation at model.max_length: no question is right or wrong"
            out = [(role, None, why) for role, _, _ in out]
        return out

    def showcase_entry(self, predictions, row):
        r = predictions.iloc[row]
        return {
            "example_id": str(r["example_id"]),
            "label": self.label_value(r["label"]),
            "pred": str(r["pred"]),
            "span": list(span_of(int(r["span"]))),
            "span_prob": round(float(r["span_prob"]), 6),
        }

    def outcome(self, label, outputs, target, names):
        s, e = span_of(int(target))
        p = float(np.asarray(outputs, dtype=np.float64)[int(target)])
        truth = None if label is None or not len(label) else " | ".join(str(a["text"]) for a in label)
        return Outcome(
            label=truth,
            prediction=f"tokens {s}–{e}",
            confidence=p,
            outputs={"answer span": p},
            explained=f"the answer span, tokens {s}–{e}",
        )


QA = REGISTRY.register(QuestionAnswering())
