"""Text the study did not write — document text, token strings, example ids, class names, file names —
made inert for each output format, and the Content-Security-Policy of the generated pages.

Every renderer passes such text through one function of this module for its format:

* HTML: :func:`html_text` (``&``, ``<``, ``>``, ``"``, ``'`` escaped; attribute values too). Pages carry
  :func:`csp_meta`, which allows only the page's own inline code, by hash; the text spans isolate their
  direction (``unicode-bidi: isolate``), so a right-to-left override inside a token cannot reorder the text
  around it. JSON inside ``<script>``: :func:`script_json` (``<`` written as ``\\u003c``, so neither
  ``</script>`` nor ``<!--`` can end the block).
* LaTeX: :func:`latex_escape` — every character LaTeX treats specially escaped, line breaks and control
  characters made spaces (no ``\\par``, no way out of a ``%`` comment), and characters ``pdflatex`` cannot set
  (format and control characters, right-to-left overrides, zero-width characters, emoji and other non-BMP
  characters) written visibly as ``[U+XXXX]``; Greek letters and the math signs the tables use (``−``, ``≤``,
  ``≥``, ``≠``, ``≈``, ``±``, ``∞``) are set in math mode (``ρ`` → ``$\\rho$``). ``\\input``, ``\\write18``
  and unbalanced braces become text.
* Markdown: :func:`markdown_cell` — what Markdown would read as markup escaped (no links, no raw HTML, no
  emphasis, no code spans), line breaks made spaces, ``|`` escaped inside table cells.
* CSV: cells a spreadsheet would run as a formula are neutralised where CSV is written
  (:func:`attnlens.io.spreadsheet_safe`).
* Figures: matplotlib's mathtext is off (``text.parse_math``), so ``$…$`` in an id is text, not a formula.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import unicodedata
from typing import Any

_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "$": r"\$",
    "&": r"\&",
    "#": r"\#",
    "^": r"\textasciicircum{}",
    "_": r"\_",
    "~": r"\textasciitilde{}",
    "%": r"\%",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
}
#: Unicode categories that are never drawn as themselves: controls, format characters (zero-width,
#: bidi overrides, BOM), line and paragraph separators, private use, surrogates, unassigned.
_INVISIBLE = {"Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"}
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_MARKDOWN_SPECIAL = set("\\`*[]|~")
#: Math signs the tables' headers and captions use, set in math mode.
_LATEX_MATH = {
    "\u2212": "-",
    "\u2264": r"\leq",
    "\u2265": r"\geq",
    "\u2260": r"\neq",
    "\u2248": r"\approx",
    "\u221e": r"\infty",
    "\u2211": r"\sum",
    "\u2202": r"\partial",
    "\u2207": r"\nabla",
}
#: Greek capitals LaTeX has a command for (the others look like Latin letters).
_GREEK_CAPITALS = {"Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Upsilon", "Phi", "Psi", "Omega"}


def _cjk(ch: str) -> bool:
    code = ord(ch)
    return 0x2E80 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF or 0xF900 <= code <= 0xFAFF or 0xFF00 <= code <= 0xFFEF


def _latex_settable(ch: str, cjk: bool) -> bool:
    """``pdflatex`` (utf8 input, T1 fonts) sets it: Latin scripts, general punctuation, and CJK inside ``CJK*``."""
    code = ord(ch)
    if unicodedata.category(ch) in _INVISIBLE:
        return False
    return code < 0x250 or 0x2010 <= code <= 0x2027 or 0x2030 <= code <= 0x205E or (cjk and _cjk(ch))


def _latex_math(ch: str) -> str | None:
    """``$\\rho$`` for ``ρ``, ``$-$`` for ``−``: a Greek letter or math sign LaTeX sets in math mode, else ``None``."""
    if ch in _LATEX_MATH:
        return f"${_LATEX_MATH[ch]}$"
    name = unicodedata.name(ch, "")
    if not name.startswith(("GREEK SMALL LETTER ", "GREEK CAPITAL LETTER ")) or " WITH " in name:
        return None
    letter = name.rsplit(" ", 1)[-1].capitalize()
    letter = {"Lamda": "Lambda"}.get(letter, letter)  # Unicode's spelling
    if name.startswith("GREEK SMALL") and letter not in ("Omicron", "Final"):
        return f"$\\{letter.lower()}$"
    return f"$\\{letter}$" if letter in _GREEK_CAPITALS else None


def latex_escape(text: str, cjk: bool = False) -> str:
    """``text`` as inert LaTeX body text (see the module docstring); ``cjk``: inside a ``CJK*`` environment."""
    out = []
    for ch in str(text).replace("\r\n", "\n"):
        if ch in _LINE_BREAKS or ch == "\t":
            out.append(" ")
        elif ch in _LATEX_ESCAPES:
            out.append(_LATEX_ESCAPES[ch])
        elif ch == " " or _latex_settable(ch, cjk):
            out.append(ch)
        elif math := _latex_math(ch):
            out.append(math)
        else:
            out.append(f"\\texttt{{[U+{ord(ch):04X}]}}")
    return "".join(out)


def html_text(text: Any) -> str:
    """``text`` escaped for HTML element content and quoted attribute values."""
    return html.escape(str(text), quote=True)


def markdown_cell(text: Any) -> str:
    """``text`` as literal Markdown inline text, safe inside a table cell, and as readable as it can stay.

    Escaped only where Markdown would read it as markup: ``\\``, ``|``, `````, ``*``, ``~``, ``[``, ``]``;
    ``_`` at a word boundary (``false_positive`` stays as it is); ``<`` that could open a tag or an autolink
    and ``&`` that could start a character reference become ``&lt;`` / ``&amp;`` (``ρ < 0`` stays); a leading
    ``#``; line breaks become spaces.
    """
    text = str(text).replace("\r\n", "\n")
    out = []
    for i, ch in enumerate(text):
        after = text[i + 1] if i + 1 < len(text) else ""
        before = text[i - 1] if i else ""
        if ch in _LINE_BREAKS:
            out.append(" ")
        elif ch == "<" and (after.isalpha() or after in "/!?"):
            out.append("&lt;")
        elif ch == "&" and (after.isalnum() or after == "#"):
            out.append("&amp;")
        elif ch in _MARKDOWN_SPECIAL or (ch == "_" and not (before.isalnum() and after.isalnum())):
            out.append("\\" + ch)
        elif ch == "#" and i == 0:
            out.append("\\#")
        else:
            out.append(ch)
    return "".join(out)


def script_json(obj: Any) -> str:
    """JSON that is safe inside ``<script type="application/json">``: no ``</``, no ``<!--``."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def _source_hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode("utf-8")).digest()).decode("ascii") + "'"


def csp_meta(scripts: tuple[str, ...] = (), styles: tuple[str, ...] = (), style_attributes: bool = False) -> str:
    """The ``<meta http-equiv="Content-Security-Policy">`` of a self-contained page.

    Nothing may load (``default-src 'none'``): no network, no frames, no forms sent anywhere. Only the given
    inline ``<script>`` and ``<style>`` bodies run or apply, each allowed by its SHA-256; every other script —
    one a document smuggled in, an event-handler attribute, a ``javascript:`` URL — is refused by the browser.
    ``style_attributes`` allows inline styles and ``style="…"`` attributes (the overlays colour each token with
    one; styles are not code). Images may be ``data:`` URLs (canvas exports).
    """
    script_src = " ".join(_source_hash(s) for s in scripts) or "'none'"
    style_src = "'unsafe-inline'" if style_attributes else " ".join(_source_hash(s) for s in styles) or "'none'"
    policy = (
        f"default-src 'none'; script-src {script_src}; style-src {style_src}; img-src data:; base-uri 'none'; "
        "form-action 'none'"
    )
    return f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
