"""An example's prompt, the model's answer to it and the answer's scores with sources removed, as the generation
study explains it: the responses (:data:`~attnlens.generation.answer_artifacts.RESPONSE_COLUMNS`) that rule
``generate_answers`` writes, learned attention fits on and the ``cite`` door explains one of, and their ablations
(rules ``ablate_contexts``, ``judge_answers``, ``fit_learned_attention``, ``answer_sanity`` and the ``cite`` door).
``cfg`` is the ``generation`` section (any object with its keys).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from attnlens.attribution.answer_example import Ablated
from attnlens.attribution.datamodels import answer_masks, answer_orders, answer_scores, leave_one_out_masks, score_of
from attnlens.attribution.exact import every_mask
from attnlens.attribution.hierarchy import group_masks, refined_masks, source_groups
from attnlens.errors import InputError
from attnlens.generation.ablation import ablation_log_probs, answer_token_log_probs
from attnlens.generation.answer_artifacts import answer_of, response_sources
from attnlens.generation.decoding import greedy_answers, normalized
from attnlens.generation.prompts import (
    AnswerPrompt,
    answer_ids,
    completion_notes,
    encode_prompt,
    end_token,
    stop_strings,
)
from attnlens.tasks.contexts import SPLITTERS, PromptFormat, Source, paragraph_spans
from attnlens.tasks.qa import QA_CONFLICTING
from attnlens.tasks.squad import normalize_answer


def example_prompt(tokenizer, row, cfg, positions: int, reserve: int) -> AnswerPrompt:
    """An example's prompt (:func:`~attnlens.generation.prompts.encode_prompt`), ``reserve`` positions left."""
    return encode_prompt(
        tokenizer,
        str(row.example_id),
        str(row.text),
        str(row.question),
        sources=cfg.sources,
        form=PromptFormat.of(cfg),
        max_positions=positions,
        reserve=reserve,
        given=getattr(row, "sources", None),
    )


def prompts_and_answers(model, tokenizer, frame: pd.DataFrame, cfg, positions: int):
    """Each example's prompt (room left for ``generation.max_new_tokens``) and the model's greedy answer to it."""
    prompts = [example_prompt(tokenizer, r, cfg, positions, cfg.max_new_tokens) for r in frame.itertuples(index=False)]
    return prompts, greedy(model, tokenizer, [p.input_ids for p in prompts], cfg)


def greedy(model, tokenizer, prompts: Sequence[Sequence[int]], cfg, batch_size: int | None = None) -> list:
    """The model's greedy answers to ``prompts`` (ids) as the ``generation`` section says: up to
    ``max_new_tokens``, ended by the end token or a stop string, ``batch_size`` prompts a batch (default the
    section's)."""
    return greedy_answers(
        model,
        prompts,
        max_new_tokens=cfg.max_new_tokens,
        end=end_token(tokenizer),
        pad=tokenizer.pad_token_id,
        batch_size=batch_size or cfg.batch_size,
        stop=stop_strings(cfg.stop, tokenizer),
        tokenizer=tokenizer,
    )


def responses(
    model,
    tokenizer,
    chosen: pd.DataFrame,
    cfg,
    target: str,
    rationales: pd.DataFrame | None,
    where: str,
    closed_book: bool = False,
) -> tuple[pd.DataFrame, list[str]]:
    """The responses (:data:`~attnlens.generation.answer_artifacts.RESPONSE_COLUMNS`) of the examples ``chosen``: each
    prompt, the greedy answer (``target`` = ``predicted``) or the reference (``true``), the sources (flagged
    planted from ``rationales``; none flagged without them), the answer's scores, the context's planted
    ``structure`` (where the examples have one), whether the answer names a value the context states for the
    question (:func:`_planted`; NaN without rationales); with ``closed_book``, the model's greedy answer to the
    question alone (no context) and whether the answer is that one; and the run notes on the answers left out and
    the prompts cut."""
    positions = int(model.config.max_position_embeddings)
    prompts, greedy = prompts_and_answers(model, tokenizer, chosen, cfg, positions)
    alone = closed_book_answers(model, tokenizer, chosen, cfg) if closed_book else [None] * len(chosen)
    rows, unfinished, empty = [], [], []
    for r, prompt, g, book in zip(chosen.itertuples(index=False), prompts, greedy, alone, strict=True):
        reference = str(r.label)
        if target == "true":
            ids, end = answer_ids(tokenizer, reference), end_token(tokenizer)
        elif not g.finished:
            unfinished.append(str(r.example_id))
            continue
        else:
            ids, end = list(g.ids), g.end
        if not ids:
            empty.append(str(r.example_id))
            continue
        mine = None if rationales is None else rationales[rationales["example_id"] == r.example_id]
        text = normalized(tokenizer, ids)
        kinds, planted, follows = _planted(mine, prompt.sources, prompt.offset, text, normalize_answer(reference))
        exact = normalized(tokenizer, g.ids) == normalized(tokenizer, answer_ids(tokenizer, reference))
        row = _row(tokenizer, str(r.example_id), prompt, ids, end, reference, target, float(exact), kinds, planted)
        structure = getattr(r, "structure", None)
        row |= {
            "structure": structure if isinstance(structure, str) else "",
            "follows_context": follows,
            "closed_book": "" if book is None else tokenizer.decode(list(book.ids), skip_special_tokens=True).strip(),
            "same_as_closed_book": np.nan if book is None else float(normalized(tokenizer, book.ids) == text),
        }
        rows.append(row)
    if not rows:
        raise InputError(
            where,
            "answers",
            f"expected an answer to explain, got none of {len(chosen)}: {len(unfinished)} not finished within "
            f"generation.max_new_tokens {cfg.max_new_tokens}, {len(empty)} empty",
        )
    _score(model, rows, cfg.batch_size)
    frame = pd.DataFrame(rows)
    return frame, _response_notes(frame, unfinished, empty, cfg, positions)


def one_response(
    model, tokenizer, context: str, question: str, answer: str | None, cfg, given: Sequence[str] | None = None
) -> tuple[pd.Series, bool, list[str]]:
    """One response, as the ``cite`` door explains it: the model's greedy answer to ``question`` from ``context``
    (explained as it stands where it did not finish within ``generation.max_new_tokens``) or the ``answer`` given;
    whether it finished, and the notes on what was cut or left unfinished. ``given``: the context's own sources
    (strings found in it in order), in place of ``generation.sources``' splitter."""
    positions = int(model.config.max_position_embeddings)
    prompt = encode_prompt(
        tokenizer,
        "answer",
        context,
        question,
        sources=cfg.sources,
        form=PromptFormat.of(cfg),
        max_positions=positions,
        reserve=cfg.max_new_tokens,
        given=given,
    )
    notes = []
    if prompt.cut_sources:
        notes.append(
            f"{prompt.cut_sources} sources ({prompt.cut_tokens} tokens) were left out of the context: the prompt "
            f"was cut to the model's {positions} positions"
        )
    notes += completion_notes(tokenizer, cfg.stop)
    if answer is None:
        (g,) = greedy(model, tokenizer, [prompt.input_ids], cfg, batch_size=1)
        ids, finished, end = list(g.ids), g.finished, g.end  # without the end token
        if not finished:
            notes.append(
                f"the answer did not finish within generation.max_new_tokens {cfg.max_new_tokens}: explained as it "
                "stands"
            )
    else:
        ids, finished, end = answer_ids(tokenizer, answer), True, end_token(tokenizer)
    if not ids:
        raise InputError(
            "answer",
            "(text)",
            "expected the model to answer, got an empty greedy answer: give the answer to explain (answer=, or "
            "--answer on the command line)",
        )
    n = len(prompt.sources)
    target = "predicted" if answer is None else "true"
    given = (answer or "").strip()
    row = _row(tokenizer, "answer", prompt, ids, end, given, target, float("nan"), [-1] * n, [False] * n)
    row |= {"structure": "", "follows_context": np.nan, "closed_book": "", "same_as_closed_book": np.nan}
    _score(model, [row], cfg.batch_size)
    return pd.Series(row), finished, notes


def answer_part(tokenizer, row: pd.Series, span: tuple[int, int]) -> pd.Series:
    """The response row ``row`` (a whole answer) explaining only the answer's characters ``span`` = ``(start, end)``
    of its text: the tokens that hold them are the explained answer (``answer_length``), the answer's tokens before
    them are read but not explained (``prefix_length``), those after are dropped (what follows cannot change them),
    and the end token counts only where the part reaches the answer's end. As ContextCite attributes a selected
    part of a response (its ``start_idx``, ``end_idx``)."""
    text, ids = str(row.answer), answer_of(row)
    start, end = (int(v) for v in span)
    if not 0 <= start < end <= len(text):
        raise InputError(
            "span",
            f"({start}, {end})",
            f"expected characters of the answer, 0 <= start < end <= {len(text)}: {text!r}",
        )
    chars = _answer_characters(tokenizer, ids, text, row.target == "true")
    held = [j for j, (a, b) in enumerate(chars) if a < end and start < b]
    if not held:
        raise InputError("span", f"({start}, {end})", f"expected characters a token of the answer holds: {text!r}")
    first, stop = held[0], held[-1] + 1
    n, whole = len(row.input_ids) - len(ids), len(ids)
    part = row.copy()
    part["input_ids"] = list(row.input_ids[: n + stop])
    part["owner"] = list(row.owner[: n + stop])
    part["answer_length"], part["prefix_length"] = stop - first, first
    part["end_id"] = int(row.end_id) if stop == whole else -1
    lp = np.asarray(row.token_log_probs, dtype=np.float64)[first:stop]
    part["token_log_probs"] = lp.tolist()
    part["log_prob"], part["logit"] = (float(v) for v in answer_scores(lp))
    return part


def answer_parts(tokenizer, frame: pd.DataFrame, by: str | None) -> tuple[pd.DataFrame, list[str]]:
    """Each response of ``frame`` cut by the splitter ``by`` (``generation.targets``; None: as it is) into parts of its
    answer, each a row of its own (:func:`answer_part`; example id ``<id>/<k>``): an answer of one part stays whole;
    and the run note on how many were cut."""
    if by is None:
        return frame, []
    rows, cut = [], 0
    for _, row in frame.iterrows():
        spans = SPLITTERS.get(by)(str(row.answer))
        if len(spans) < 2:
            rows.append(row)
            continue
        cut += 1
        for k, span in enumerate(spans):
            part = answer_part(tokenizer, row, span)
            part["example_id"] = f"{row.example_id}/{k}"
            rows.append(part)
    note = f"{cut} of {len(frame)} answers cut into their {by}s (generation.targets): {len(rows)} targets explained"
    return pd.DataFrame(rows).reset_index(drop=True), [note] if cut else []


def _answer_characters(tokenizer, ids: list[int], text: str, given: bool) -> list[tuple[int, int]]:
    """Each answer token's characters in ``text``: a given answer's from the tokenizer's offsets (it was tokenized
    as ``" " + text``, :func:`~attnlens.generation.prompts.answer_ids`), a generated one's from decoding it a token
    more at a time (its text is that decoding, stripped)."""
    if given:
        offsets = tokenizer(" " + text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        return [(max(a - 1, 0), max(b - 1, 0)) for a, b in offsets]
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    lead = len(decoded) - len(decoded.lstrip())
    ends = [len(tokenizer.decode(ids[: j + 1], skip_special_tokens=True)) - lead for j in range(len(ids))]
    return list(zip([0, *ends[:-1]], ends, strict=True))


def _row(
    tokenizer, example_id: str, prompt: AnswerPrompt, ids, end, reference: str, target: str, exact, kinds, planted
):
    """A response row (:data:`~attnlens.generation.answer_artifacts.RESPONSE_COLUMNS`) before its scores
    (:func:`_score`); ``end``: the token that ended the answer (−1 for none)."""
    return {
        "example_id": example_id,
        "context": prompt.context,
        "question": prompt.question,
        "reference": reference,
        "answer": reference if target == "true" else tokenizer.decode(ids, skip_special_tokens=True).strip(),
        "target": target,
        "exact_match": exact,
        "input_ids": prompt.input_ids + ids,
        "answer_length": len(ids),
        "prefix_length": 0,
        "end_id": -1 if end is None else int(end),
        "owner": [*prompt.owner.tolist(), *([-1] * len(ids))],
        "source_start": [s.start for s in prompt.sources],
        "source_end": [s.end for s in prompt.sources],
        "source_kind": kinds,
        "planted": planted,
        "cut_sources": prompt.cut_sources,
        "cut_tokens": prompt.cut_tokens,
    }


def _score(model, rows: list[dict], batch_size: int) -> None:
    """Each row's answer token log-probabilities, its log-probability and its logit."""
    token_lp = answer_token_log_probs(
        model, [row["input_ids"] for row in rows], [row["answer_length"] for row in rows], batch_size=batch_size
    )
    for row, lp in zip(rows, token_lp, strict=True):
        log_p, logit = answer_scores(lp)
        row.update(token_log_probs=lp.tolist(), log_prob=float(log_p), logit=float(logit))


def closed_book_answers(model, tokenizer, chosen: pd.DataFrame, cfg) -> list:
    """The model's greedy answer to each question with no context (:meth:`PromptFormat.closed_book`): what it
    answers from its own knowledge, against which an answer that follows the context is told apart."""
    form = PromptFormat.of(cfg)
    prompts = [
        form.closed_book(tokenizer, str(r.question)).encode(tokenizer)[0] for r in chosen.itertuples(index=False)
    ]
    return greedy(model, tokenizer, prompts, cfg)


def _planted(
    rationales: pd.DataFrame | None, sources: Sequence[Source], offset: int, answer: str, reference: str
) -> tuple[list[int], list[bool], float]:
    """Each source's planted kind (the ``phrase_label`` of a planted sentence inside it; −1 for none), whether it
    holds planted evidence (the answer's sentence; the supporting sentence of a two-hop question), and whether the
    ``answer`` (normalised, as exact match compares) names a value the context states for the question: the
    ``reference``, or one of two conflicting sentences' values (NaN without rationales). Of two sentences that
    disagree (:data:`~attnlens.tasks.qa.QA_CONFLICTING`), the planted one is the one whose value the answer names:
    what it followed (both where it names neither or both)."""
    if rationales is None:
        return [-1] * len(sources), [False] * len(sources), float("nan")
    values = _conflicting_values(rationales[rationales["phrase_label"] == QA_CONFLICTING]["phrase"].tolist())
    named = {phrase: value in answer for phrase, value in values.items()}
    followed = sum(named.values()) == 1
    kinds, planted = [], []
    for s in sources:
        a, b = s.start + offset, s.end + offset
        inside = rationales[(rationales["char_start"] < b) & (rationales["char_end"] > a)]
        kinds.append(int(inside["phrase_label"].iloc[0]) if len(inside) else -1)
        evidence = [
            bool(e) and (not followed or named.get(phrase, True))
            for e, phrase in zip(inside["evidence"], inside["phrase"], strict=True)
        ]
        planted.append(any(evidence))
    follows = bool(reference and reference in answer) or any(named.values())
    return kinds, planted, float(follows)


def _conflicting_values(phrases: list[str]) -> dict[str, str]:
    """Each of two sentences that disagree, and its value: what is left of its normalised text without the words
    the two share at either end ("Falcon was designed by Ada Byrne" → "ada byrne")."""
    if len(phrases) != 2:
        return {}
    words = [normalize_answer(p).split() for p in phrases]
    head = 0
    while head < min(map(len, words)) and words[0][head] == words[1][head]:
        head += 1
    tail = 0
    while tail < min(map(len, words)) - head and words[0][-1 - tail] == words[1][-1 - tail]:
        tail += 1
    return {p: " ".join(w[head : len(w) - tail]) for p, w in zip(phrases, words, strict=True)}


def _response_notes(frame: pd.DataFrame, unfinished: list[str], empty: list[str], cfg, positions: int) -> list[str]:
    notes = []
    if unfinished:
        notes.append(
            f"{len(unfinished)} greedy answers not finished within generation.max_new_tokens {cfg.max_new_tokens} "
            f"were left out (first: {unfinished[0]})"
        )
    if empty:
        notes.append(f"{len(empty)} empty answers were left out (first: {empty[0]})")
    cut = frame[frame["cut_sources"] > 0]
    if len(cut):
        notes.append(
            f"{len(cut)} of {len(frame)} prompts were cut to the model's {positions} positions: "
            f"{int(cut['cut_sources'].sum())} sources ({int(cut['cut_tokens'].sum())} tokens) left out of their "
            "contexts"
        )
    return notes


def ablate(
    model, tokenizer, row, masks: np.ndarray, cfg, tree: bool = False, end: bool = False, divergence: bool = False
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """``(masks, answer tokens)``: a response row's answer token log-probabilities on its context with each mask's
    removed sources taken out (``generation.removal``), from the shared prefix (with ``tree``, from the tree of the
    ablated prompts' shared prefixes: :func:`~attnlens.generation.ablation.ablation_log_probs`); with ``end``, the
    answer's end token too where it has one (a last column, :func:`split_scores`); with ``divergence``, each answer
    token's Jensen–Shannon divergence from the whole context's too (ARC-JSD's, from the same forwards)."""
    got = ablation_log_probs(
        model,
        tokenizer,
        row.context,
        response_sources(row),
        row.question,
        answer_of(row, end),
        masks,
        cfg.removal,
        PromptFormat.of(cfg),
        cfg.batch_size,
        tree,
        divergence,
    )
    prefix = int(row.prefix_length)  # the answer's tokens before an explained part: read, not scored
    return tuple(a[:, prefix:] for a in got) if divergence else got[:, prefix:]


def timed_ablations(
    model, tokenizer, row, kinds: Mapping[str, np.ndarray], cfg, every: bool = False
) -> dict[str, tuple[np.ndarray, np.ndarray, float, np.ndarray | None]]:
    """``{kind: (masks, token log-probabilities, seconds, token divergences)}``: :func:`ablate` of each kind's masks
    (the surrogate's random ones, the held-out ones, permutation Shapley's chains, each distinct mask once from the
    tree of their shared prefixes, Gemma 3 270M's 64 in 40 % of the seconds the whole prompt's prefix takes; and
    leave-one-out's, from the whole prompt's), the answer's end token scored too (the
    surrogate's target holds it, :func:`split_scores`), the wall seconds its forwards took, and for leave-one-out
    each answer token's Jensen–Shannon divergence from the whole context (ARC-JSD's, read from its forwards; None
    for the other kinds); with ``every``, kind ``every`` first: all ``2ⁿ`` ablations (from the tree of their shared
    prefixes), from which the held-out ones are read, no forward of their own (they judge, they cost no method
    anything). The methods' own kinds are always run as the methods run them, so their seconds are their cost."""
    out = {}
    if every:
        t0 = time.perf_counter()
        masks = every_mask(len(row.source_start))
        out["every"] = (masks, ablate(model, tokenizer, row, masks, cfg, True, True), time.perf_counter() - t0, None)
        at = {m.tobytes(): i for i, m in enumerate(masks)}
    for kind, masks in kinds.items():
        t0 = time.perf_counter()
        jsd = None
        if every and kind == "heldout":
            lp = out["every"][1][[at[m.tobytes()] for m in np.asarray(masks, dtype=bool)]]
        elif kind == "leave_one_out":
            lp, jsd = ablate(model, tokenizer, row, masks, cfg, end=True, divergence=True)
        elif kind == "hierarchical":  # masks: the groups'; the sources of the groups that matter follow
            masks, lp = hierarchical_search(model, tokenizer, row, masks, cfg, float(getattr(row, cfg.score)))
        else:  # random masks share prefixes with each other more than with the whole prompt: from their tree
            distinct, back = np.unique(np.asarray(masks, dtype=bool), axis=0, return_inverse=True)
            lp = ablate(model, tokenizer, row, distinct, cfg, tree=True, end=True)[back.ravel()]
        out[kind] = (masks, lp, time.perf_counter() - t0, jsd)
    return out


def method_masks(row, cfg, index: int, kinds) -> dict[str, np.ndarray]:
    """The masks of each kind of ablation of ``kinds`` that a response row's methods read (``generation``'s settings;
    ``index``: the row's place, which seeds its random masks): leave-one-out's, the surrogate's random ones,
    permutation Shapley's chains (where ``generation.shapley_orders``), the hierarchical search's groups."""
    n_sources = len(row.source_start)
    masks = {}
    if "leave_one_out" in kinds:
        masks["leave_one_out"] = leave_one_out_masks(n_sources)
    if "random" in kinds:
        masks["random"] = answer_masks(cfg.seed, index, n_sources, cfg.n_ablations, 0, cfg.keep)[0]
    if "permutation" in kinds and cfg.shapley_orders:
        masks["permutation"] = answer_orders(cfg.seed, index, n_sources, cfg.shapley_orders)
    if "hierarchical" in kinds:
        masks["hierarchical"] = hierarchy_masks(row, cfg)
    return masks


def hierarchy_masks(row, cfg) -> np.ndarray:
    """The first level of a response row's hierarchical search: each group of its sources removed (the paragraphs
    of its context that hold them where there are several, else blocks: ``generation.hierarchy_group``)."""
    starts = [a for a, _ in paragraph_spans(str(row.context))] or [0]
    paragraph_of = [int(np.searchsorted(starts, s, side="right")) - 1 for s in row.source_start]
    return group_masks(source_groups(paragraph_of, cfg.hierarchy_group), len(row.source_start))


def hierarchical_search(model, tokenizer, row, masks: np.ndarray, cfg, full: float) -> tuple[np.ndarray, np.ndarray]:
    """The ablations a hierarchical search scores: the groups' (``masks``), then leave-one-out inside the
    ``generation.hierarchy_keep`` groups whose removal lowers ``F`` from ``full`` most; their masks and token
    log-probabilities with the end token (:func:`ablate`)."""
    lp = ablate(model, tokenizer, row, masks, cfg, end=True)
    drops = full - split_scores(row, lp, cfg, fit=False)[0]
    inside = refined_masks(masks, drops, cfg.hierarchy_keep)
    if not len(inside):
        return masks, lp
    return np.vstack([masks, inside]), np.vstack([lp, ablate(model, tokenizer, row, inside, cfg, end=True)])


def ablated(row, masks, token_log_probs, seconds: float, cfg, token_jsd=None, fit: bool = True) -> Ablated:
    """A response row's ablations as the scorers read them: ``F`` on each mask, with ``fit`` the surrogate's target
    (:func:`split_scores`), and where ``token_jsd`` is given each mask's divergences summed over the answer's own
    tokens (ARC-JSD's)."""
    scores, target, tokens = split_scores(row, token_log_probs, cfg, fit)
    jsd = None if token_jsd is None else np.asarray(token_jsd, dtype=np.float64)[:, : int(row.answer_length)]
    return Ablated(
        np.asarray(masks, dtype=bool), scores, float(seconds), target, tokens, None if jsd is None else jsd.sum(axis=1)
    )


def split_scores(row, token_log_probs: np.ndarray, cfg, fit: bool = True) -> tuple[np.ndarray, np.ndarray | None, int]:
    """From a response row's ablations scored with its end token (:func:`ablate` with ``end``; ``(masks, tokens)``):
    the answer's score ``F`` on each (``generation.score``, over the answer's own tokens: what every method is
    judged on), and with ``fit`` the target the surrogate fits and its tokens (:func:`fit_target`; None and 0
    without)."""
    lp = np.asarray(token_log_probs, dtype=np.float64).reshape(len(token_log_probs), -1)
    scores = score_of(lp[:, : int(row.answer_length)], cfg.score)
    return (scores, *fit_target(row, lp, cfg)) if fit else (scores, None, 0)


def fit_target(row, token_log_probs: np.ndarray, cfg) -> tuple[np.ndarray, int]:
    """The target the surrogate and learned attention fit on a response row's ablations scored with its end token
    (``(masks, tokens)``), and that target's tokens: ``generation.fit_score`` over the answer and its end token where
    ``generation.fit_end_token`` (as ContextCite scores an answer), over the answer's own tokens otherwise."""
    lp = np.asarray(token_log_probs, dtype=np.float64).reshape(len(token_log_probs), -1)
    fitted = lp if cfg.fit_end_token else lp[:, : int(row.answer_length)]
    return score_of(fitted, cfg.fit_score), fitted.shape[1]
