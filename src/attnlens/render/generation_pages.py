"""The generation study's explorer pages: one per showcased answer, its context's sources coloured by each method
beside the question, the answer and the reference, and an index.

Each method's scores are scaled by their largest magnitude on the answer, so colours compare sources within a
method, not methods with each other; the colours are the overlays' signed scale
(:func:`attnlens.render.overlays.signed_colour`). Every text the study did not write goes through
:func:`attnlens.render.escape.html_text`, and the pages load nothing (:func:`attnlens.render.escape.csp_meta`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from attnlens.render.escape import csp_meta, html_text
from attnlens.render.overlays import SIGNED_SCALE, signed_colour

#: The planted kinds of the embedded corpus's sentences (``phrase_label``), as a page names them.
KIND_NAMES = {0: "answer's sentence", 1: "supporting sentence", 2: "distractor"}

_STYLE = (
    "body{font-family:sans-serif;max-width:72em;margin:1em auto;padding:0 1em}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .4em;vertical-align:top}"
    "td.s{max-width:34em}span.p{font-weight:bold}.n{text-align:right;font-family:monospace}"
)


def _page(title: str, body: str) -> str:
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>{csp_meta(style_attributes=True)}"
        f"<title>{html_text(title)}</title><style>{_STYLE}</style></head><body>{body}</body></html>\n"
    )


def _cell(value: float, scale: float) -> str:
    h, s, lum = signed_colour(value / scale if scale > 0 else 0.0)
    shown = "–" if not np.isfinite(value) else f"{value:.3g}"
    return f"<td class='n' style='background:hsl({h},{s}%,{lum}%)'>{shown}</td>"


def answer_page(row, methods: Sequence[tuple[str, str, np.ndarray]], why: str) -> str:
    """One answer's page: ``row`` a responses row (``reference`` None: an answer with none, as
    :func:`attnlens.cite` gives), ``methods`` ``(name, label, source scores)``."""
    context = str(row["context"])
    spans = list(zip(row["source_start"], row["source_end"], strict=True))
    head = "".join(f"<th title='{html_text(lab)}'>{html_text(name)}</th>" for name, lab, _ in methods)
    scales = [float(np.nanmax(np.abs(s))) if len(s) and np.isfinite(s).any() else 0.0 for _, _, s in methods]
    body_rows = []
    for k, (a, b) in enumerate(spans):
        kind = KIND_NAMES.get(int(row["source_kind"][k]), "")
        planted = bool(row["planted"][k])
        text = html_text(context[a:b])
        text = f"<span class='p'>{text}</span>" if planted else text
        cells = "".join(_cell(float(s[k]), scale) for (_, _, s), scale in zip(methods, scales, strict=True))
        body_rows.append(f"<tr><td class='n'>{k}</td><td class='s'>{text}</td><td>{html_text(kind)}</td>{cells}</tr>")
    if row["reference"] is None:  # an answer no reference judges (attnlens.cite)
        answered = f"<b>Answer:</b> {html_text(row['answer'])}<br>"
    else:
        verdict = "right" if row["exact_match"] == 1.0 else "wrong"
        answered = (
            f"<b>Answer</b> ({html_text(row['target'])}, {verdict}): {html_text(row['answer'])}<br>"
            f"<b>Reference:</b> {html_text(row['reference'])}<br>"
        )
    body = (
        f"<h1>Answer {html_text(row['example_id'])}</h1><p>{html_text(why)}.</p>"
        f"<p><b>Question:</b> {html_text(row['question'])}<br>{answered}"
        f"log-probability {float(row['log_prob']):.3f}, logit {float(row['logit']):.3f}</p>"
        f"<p>Each method's column is scaled by its largest magnitude on this answer; {html_text(SIGNED_SCALE)}. "
        "Planted evidence is in bold.</p>"
        f"<table><tr><th>#</th><th>source</th><th>planted</th>{head}</tr>{''.join(body_rows)}</table>"
    )
    return _page(f"answer {row['example_id']}", body)


def explorer_index(pages: Sequence[tuple[str, str, str, str, float]], metrics: dict) -> str:
    """The index: ``(file, example id, why, answer, exact match)`` per page, and what the model learned."""
    items = "".join(
        f"<li><a href='{html_text(f)}'>{html_text(eid)}</a>: {html_text(answer)} "
        f"({'right' if em == 1.0 else 'wrong'}; {html_text(why)})</li>"
        for f, eid, why, answer, em in pages
    )
    learned = (
        f"exact match {metrics.get('exact_match', float('nan')):.3f} and mean answer log-probability "
        f"{metrics.get('mean_answer_log_prob', float('nan')):.3f} on {metrics.get('n', 0)} held-out examples"
    )
    body = f"<h1>What the answers rest on</h1><p>The model: {html_text(learned)}.</p><ul>{items}</ul>"
    return _page("generation explorer", body)
