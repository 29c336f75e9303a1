"""Summed-attention overlays of one example's text (paper Fig 8; recipes §8).

Each token is coloured by the attention it receives, summed over the heads of a layer configuration
(``last`` = the paper's "layer 12", ``all``, ``lower``, ``upper``), optionally scaled by head
importance. Special and pad tokens are excluded from the colour scale (the CLS token receives the
largest sum by construction and would compress every other colour, §15 B-19) and drawn grey.
Tokens are shown as text: sub-word markers removed, pieces of one word joined.

Formats: a self-contained HTML page; LaTeX in the original ``standalone`` + ``\\colorbox`` layout with
every LaTeX-special character escaped, compiled to PDF when a TeX engine is on the PATH; PNG; and a
CSV of ``position, token, value_raw, value_0_100, special, note``.
"""

from __future__ import annotations

import colorsys
import functools
import logging
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from attnlens.data.tokens import structural_mask, surface_pieces
from attnlens.io import atomic_path, write_csv, write_sidecar
from attnlens.render.escape import csp_meta, html_text, latex_escape
from attnlens.render.figures import figure_metadata

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Overlay:
    """One example's tokens and their values, ready to render."""

    tokens: list[str]  # surface strings
    starts_word: list[bool]
    values: np.ndarray  # raw summed attention per token
    special: np.ndarray  # bool: excluded from the colour scale
    title: str
    note: str  # provenance line (configuration, scaling source)

    @property
    def scaled(self) -> np.ndarray:
        """Values rescaled to 0–100 over the non-special tokens (special ones: NaN)."""
        out = np.full(len(self.values), np.nan)
        ok = ~self.special
        if ok.any():
            v = self.values[ok].astype(np.float64)
            span = v.max() - v.min()
            out[ok] = 100 * (v - v.min()) / span if span > 0 else 0.0
        return out

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "position": np.arange(len(self.tokens)),
                "token": self.tokens,
                "value_raw": self.values.astype(np.float64),
                "value_0_100": self.scaled,
                "special": self.special,
                "note": np.where(self.special, "special token: left out of the 0-100 scale", ""),
            }
        )


def build_overlay(tokenizer, input_ids, values, title: str, note: str) -> Overlay:
    """Tokens as text with their values; special and pad tokens flagged."""
    ids = [int(i) for i in input_ids]
    pieces = surface_pieces(tokenizer, tokenizer.convert_ids_to_tokens(ids))
    special = structural_mask(tokenizer, ids)
    return Overlay(
        tokens=[p[0] for p in pieces],
        starts_word=[p[1] or s for p, s in zip(pieces, special, strict=True)],
        values=np.asarray(values, dtype=np.float64),
        special=special,
        title=title,
        note=note,
    )


def render_html(overlay: Overlay) -> str:
    """A self-contained HTML page (inline styles, no scripts or external files)."""
    parts = []
    for i, (tok, start, value) in enumerate(zip(overlay.tokens, overlay.starts_word, overlay.scaled, strict=True)):
        if i and start:
            parts.append(" ")
        raw = overlay.values[i]
        style = "background:#d9d9d9;color:#555" if np.isnan(value) else f"background:rgba(215,25,28,{value / 100:.3f})"
        parts.append(f'<span style="{style}" title="{i}: {raw:.4g}">{html_text(tok) or "&#9251;"}</span>')
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{csp_meta(style_attributes=True)}'
        f"<title>{html_text(overlay.title)}</title>"
        "<style>body{font-family:Georgia,serif;max-width:60em;margin:2em auto;line-height:1.9}"
        "span{padding:0 1px;border-radius:2px;unicode-bidi:isolate}p.note{font:0.85em sans-serif;color:#555}"
        "</style></head>\n"
        f'<body><h1 style="font-size:1.2em">{html_text(overlay.title)}</h1>\n'
        f'<p class="note">{html_text(overlay.note)}. Colour: received attention rescaled to 0–100 over '
        "non-special tokens; grey = special token (not on the scale). Hover a token for its raw value.</p>\n"
        f"<p>{''.join(parts)}</p>\n</body></html>\n"
    )


def render_latex(overlay: Overlay) -> str:
    """The original's ``standalone`` + ``\\colorbox`` document, every special character escaped."""
    boxes = []
    for i, (tok, start, value) in enumerate(zip(overlay.tokens, overlay.starts_word, overlay.scaled, strict=True)):
        sep = " " if i and start else ""
        colour = "gray!25" if np.isnan(value) else f"red!{value:.6f}"
        boxes.append(f"{sep}\\colorbox{{{colour}}}{{\\strut {latex_escape(tok, cjk=True)}}}")
    return (  # the comment lines are escaped too: no line break can end a comment and start a command
        f"% attnlens overlay: {latex_escape(overlay.title)}\n% {latex_escape(overlay.note)}\n"
        "\\documentclass[varwidth]{standalone}\n"
        "\\special{papersize=210mm,297mm}\n"
        "\\usepackage{color}\n\\usepackage{tcolorbox}\n\\usepackage{CJK}\n\\usepackage{adjustbox}\n"
        "\\tcbset{width=0.9\\textwidth,boxrule=0pt,colback=red,arc=0pt,auto outer arc,left=0pt,right=0pt,"
        "boxsep=5pt}\n"
        "\\begin{document}\n\\begin{CJK*}{UTF8}{gbsn}\n"
        "{\\setlength{\\fboxsep}{0pt}\\colorbox{white!0}{\\parbox{0.9\\textwidth}{\n"
        + "".join(boxes)
        + "\n}}}\n\\end{CJK*}\n\\end{document}\n"
    )


#: The LaTeX packages and class the overlay document loads.
TEX_NEEDS = ("standalone.cls", "tcolorbox.sty", "CJK.sty", "adjustbox.sty")


@functools.cache
def tex_engine() -> str | None:
    """The first of pdflatex / xelatex / lualatex on the PATH whose TeX tree has :data:`TEX_NEEDS`, or None."""
    for engine in ("pdflatex", "xelatex", "lualatex"):
        if shutil.which(engine):
            if shutil.which("kpsewhich") is None:
                return None
            found = subprocess.run(["kpsewhich", *TEX_NEEDS], capture_output=True, text=True).stdout.split()
            return engine if len(found) == len(TEX_NEEDS) else None
    return None


def compile_pdf(tex_path: Path, pdf_path: Path) -> bool:
    """Compile with the available TeX engine; False (and a notice) when there is none or it fails."""
    engine = tex_engine()
    if engine is None:
        log.info(
            "no TeX engine with %s on the PATH: %s not compiled (install TeX Live for the PDF)",
            ", ".join(TEX_NEEDS),
            tex_path.name,
        )
        return False
    with tempfile.TemporaryDirectory() as tmp:
        run = subprocess.run(
            [engine, "-interaction=nonstopmode", "-halt-on-error", f"-output-directory={tmp}", str(tex_path)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        produced = Path(tmp) / (tex_path.stem + ".pdf")
        if run.returncode != 0 or not produced.exists():
            log.warning("%s failed on %s; last lines:\n%s", engine, tex_path.name, run.stdout[-800:])
            return False
        with atomic_path(pdf_path) as out:
            shutil.copyfile(produced, out)
    return True


def render_png(
    overlay: Overlay,
    path: Path,
    dpi: int = 150,
    width_in: float = 11.0,
    colours: list | None = None,
    subtitle: str | None = None,
) -> None:
    """Tokens laid out as wrapped text with coloured backgrounds (matplotlib).

    ``colours`` (one per token) overrides the default red scale of :attr:`Overlay.scaled`;
    ``subtitle`` is a line under the title.
    """
    cmap = plt.get_cmap("Reds")
    fontsize = 9
    line_h = fontsize * 1.9 / 72  # inches
    fig = plt.figure(figsize=(width_in, 2.0))
    renderer = fig.canvas.get_renderer()
    margin, space = 0.2, 0.05
    widths = []
    for tok in overlay.tokens:
        probe = fig.text(0, 0, tok or "␣", fontsize=fontsize)
        widths.append(probe.get_window_extent(renderer).width / fig.dpi)
        probe.remove()
    # words = runs of pieces; a line breaks before a word, never inside one
    starts = [i for i, s in enumerate(overlay.starts_word) if s or i == 0]
    bounds = list(zip(starts, [*starts[1:], len(overlay.tokens)], strict=True))
    x, y = margin, 0.0
    placed = []
    for a, b in bounds:
        word_w = sum(widths[a:b])
        if x > margin and x + space + word_w > width_in - margin:
            x, y = margin, y + line_h
        elif x > margin:
            x += space
        for i in range(a, b):
            if colours is not None:
                colour = colours[i]
            else:
                value = overlay.scaled[i]
                colour = "#d9d9d9" if np.isnan(value) else cmap(0.85 * value / 100)
            placed.append((x, y, overlay.tokens[i] or "␣", colour))
            x += widths[i]
    top = 0.75 + (0.3 if subtitle else 0.0)
    height = y + line_h + top + 0.15
    fig.set_size_inches(width_in, height)
    fig.text(margin / width_in, 1 - 0.25 / height, overlay.title, fontsize=11, weight="bold", va="top")
    if subtitle:
        fig.text(margin / width_in, 1 - 0.58 / height, subtitle, fontsize=8.5, va="top", color="#333")
    for x, y, text, colour in placed:
        fig.text(
            x / width_in,
            1 - (top + y) / height,
            text,
            fontsize=fontsize,
            va="top",
            bbox={"facecolor": colour, "edgecolor": "none", "pad": 0.6},
        )
    _save_png(fig, path, dpi)


def _save_png(fig, path: Path, dpi: int) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=dpi, format="png", metadata=figure_metadata(".png"))
    plt.close(fig)


def write_overlay(overlay: Overlay, stem: Path, dpi: int = 150) -> list[Path]:
    """``<stem>.html``, ``.tex``, ``.png``, ``.csv`` and, with a TeX engine, ``.pdf``."""
    written = []
    for suffix, text in ((".html", render_html(overlay)), (".tex", render_latex(overlay))):
        path = stem.with_suffix(suffix)
        with atomic_path(path) as tmp:
            tmp.write_text(text, encoding="utf-8")
        written.append(path)
    csv = stem.with_suffix(".csv")
    with atomic_path(csv) as tmp:
        write_csv(overlay.table(), tmp)
    written.append(csv)
    png = stem.with_suffix(".png")
    render_png(overlay, png, dpi)
    written.append(png)
    if compile_pdf(stem.with_suffix(".tex"), stem.with_suffix(".pdf")):
        written.append(stem.with_suffix(".pdf"))
    write_sidecar(stem, [p.name for p in written])
    return written


# --- Captum-style attribution overlay (recipes §10, Figs 9 and 16) -------------------------------

#: The hues of the signed scale (attributions and every signed explanation; the explorer's page has the same):
#: ColorBrewer's purple–orange (PuOr) where Captum has red–green, which the commonest colour-vision deficiencies
#: cannot tell apart (docs/deviations.md, D-COLOUR).
POSITIVE_HUE, NEGATIVE_HUE = 30, 270
#: What a legend says of the signed scale.
SIGNED_SCALE = "purple negative, orange positive (a scale readable with red–green colour blindness)"


def signed_colour(a: float) -> tuple[int, int, int]:
    """The colour of a signed score as HSL: Captum's ``visualize_text`` lightness (a clipped to [−1, 1]; white at
    0, 50 % at +1, 60 % at −1) on the purple–orange hues: orange for a > 0, purple otherwise."""
    a = float(np.clip(a, -1, 1))
    if a > 0:
        return POSITIVE_HUE, 75, 100 - int(50 * a)
    return NEGATIVE_HUE, 75, 100 - int(40 * abs(a))


def hsl_to_rgb(h: int, s: int, lum: int) -> tuple[float, float, float]:
    return colorsys.hls_to_rgb(h / 360, lum / 100, s / 100)


@dataclass(frozen=True)
class AttributionRecord:
    """The fields of Captum's ``VisualizationDataRecord`` for one example."""

    example_id: str
    tokens: list[str]
    starts_word: list[bool]
    scores: np.ndarray  # L2-normalised
    true_label: str
    pred_label: str
    pred_prob: float | None  # the predicted class's probability (none for a regression's value)
    attr_label: str
    delta: float
    n_steps: int

    @property
    def attr_score(self) -> float:
        return float(self.scores.sum())

    @property
    def predicted(self) -> str:
        """The predicted label with its probability, ``cs.AI (0.93)``; a predicted value alone."""
        return self.pred_label if self.pred_prob is None else f"{self.pred_label} ({self.pred_prob:.2f})"


def render_attribution_html(rec: AttributionRecord) -> str:
    """Captum's table (True Label · Predicted Label · Attribution Label · Attribution Score · Word
    Importance, with the Negative / Neutral / Positive legend, on the signed scale), as one self-contained page."""
    words = []
    for i, (tok, start, a) in enumerate(zip(rec.tokens, rec.starts_word, rec.scores, strict=True)):
        h, s, lum = signed_colour(a)
        sep = " " if i and start else ""
        words.append(
            f'{sep}<mark style="background-color:hsl({h},{s}%,{lum}%);padding:0 1px;border-radius:2px" '
            f'title="{i}: {a:.4f}">{html_text(tok) or "&#9251;"}</mark>'
        )
    legend = "".join(
        f'<span style="display:inline-block;width:10px;height:10px;border:1px solid;'
        f'background-color:hsl({h},{s}%,{lum}%)"></span> {name} &nbsp;'
        for name, (h, s, lum) in (
            ("Negative", signed_colour(-1)),
            ("Neutral", signed_colour(0)),
            ("Positive", signed_colour(1)),
        )
    )
    head = "".join(
        f"<th>{c}</th>"
        for c in ("True Label", "Predicted Label", "Attribution Label", "Attribution Score", "Word Importance")
    )
    cells = (
        f"<td><b>{html_text(rec.true_label)}</b></td>"
        f"<td><b>{html_text(rec.predicted)}</b></td>"
        f"<td><b>{html_text(rec.attr_label)}</b></td>"
        f"<td><b>{rec.attr_score:.2f}</b></td>"
        f"<td style='text-align:left;line-height:1.9'>{''.join(words)}</td>"
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">{csp_meta(style_attributes=True)}'
        f"<title>IG attributions: {html_text(rec.example_id)}</title>"
        "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}mark,b{unicode-bidi:isolate}"
        "th,td{border:1px solid #ccc;padding:4px 8px;vertical-align:top}</style></head>\n"
        f"<body><p><b>Legend:</b> {legend} ({SIGNED_SCALE})</p>\n<table><tr>{head}</tr><tr>{cells}</tr></table>\n"
        f'<p style="font-size:0.85em;color:#555">Integrated gradients on the embedding output, '
        f"{rec.n_steps} Gauss-Legendre steps, convergence delta {rec.delta:.3g}; scores L2-normalised; "
        "hover a token for its position and score.</p>\n</body></html>\n"
    )
