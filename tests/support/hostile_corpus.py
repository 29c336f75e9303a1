"""Hostile strings: text a researcher did not write (scraped pages, user reviews, clinical free text) that would
run, break out or mislead if a renderer passed it through. tests/unit/render/test_hostile.py runs every one
through every renderer; tests/e2e/test_browser.py opens the pages in Chromium. Here too: the pages built from them
(:func:`hostile_pages`) and a parser that splits a page as a browser's tokenizer does (:func:`parse_page`).
"""

from __future__ import annotations

import html.parser
from pathlib import Path

import numpy as np

from attnlens.render.explorer import payload, render_explorer
from attnlens.render.overlays import AttributionRecord, Overlay, render_attribution_html, render_html
from tests.support.dense import explorer_document

#: What each string attacks, then the string. At least 30 (issue 33).
HOSTILE: dict[str, str] = {
    "script tag": "<script>alert('script')</script>",
    "script tag, upper case": "<SCRIPT SRC=//example.invalid/x.js></SCRIPT>",
    "image onerror": "<img src=x onerror=alert('img')>",
    "svg onload": "<svg/onload=alert('svg')>",
    "body onload": "<body onload=alert('body')>",
    "attribute break-out, double quote": '"><script>alert("dq")</script>',
    "attribute break-out, single quote": "'><b onmouseover=alert('sq')>x</b>",
    "javascript: URL": "javascript:alert('url')",
    "anchor with javascript: URL": "<a href=\"javascript:alert('a')\">click</a>",
    "iframe with data: URL": '<iframe src="data:text/html,<script>alert(1)</script>"></iframe>',
    "closing script inside JSON": "</script><script>alert('json')</script>",
    "HTML comment opener": "<!--",
    "CDATA end": "]]>",
    "style injection": "<style>body{display:none}</style>",
    "pre-escaped entity": "&lt;script&gt;alert('entity')&lt;/script&gt;",
    "template expression": "{{7*7}}",
    "template literal": "${7*7}",
    "Jinja statement": "{% raw %}{{ config }}{% endraw %}",
    "LaTeX \\input": "\\input{/etc/passwd}",
    "LaTeX \\write18": "\\immediate\\write18{touch /tmp/attnlens-pwned}",
    "LaTeX end of document": "}\\end{document}",
    "unbalanced braces": "{{{ }} {",
    "LaTeX math and comment": "$\\alpha$ 100% $$ ^_~ # &",
    "backslashes": "\\\\ \\par \\newline C:\\Users\\x",
    "spreadsheet formula": "=cmd|' /C calc'!A0",
    "spreadsheet plus": "+1+1",
    "spreadsheet minus": "-2+3",
    "spreadsheet at": "@SUM(1+1)",
    "spreadsheet tab": "\t=1+1",
    "Markdown table and link": "| a | [link](javascript:alert('md')) |",
    "Markdown emphasis and heading": "# **bold** _it_ `code`",
    "line breaks": "line one\nline two\r\n% not a comment\u2028sep",
    "right-to-left override": "abc\u202eevil\u202cdef",
    "zero-width characters": "a\u200bb\u200dc\ufeffd",
    "control characters": "bell\x07 esc\x1b[31mred",
    "4-byte emoji": "😀🧪👩‍⚕️",
    "SQL": "'; DROP TABLE notes; --",
}

#: A class name, an example id and a document built from them (no "/": they name folders and files too).
HOSTILE_CLASS = "neuro \"><img src=x onerror=alert('class')>{{7*7}}"
HOSTILE_ID = "note 02 <svg onload=alert('id')> =HYPERLINK(\"x\") $\\input{x}$"
HOSTILE_TEXT = " ".join(v.replace("\n", " ").replace("\r", " ") for v in HOSTILE.values())


HOSTILE_TOKENS = ["[CLS]", *HOSTILE.values(), "[SEP]"]


def hostile_pages(folder: Path) -> dict[str, Path]:
    """The three self-contained HTML pages, built from hostile tokens, id, class names and titles."""
    folder.mkdir(parents=True, exist_ok=True)
    n = len(HOSTILE_TOKENS)
    doc = explorer_document(HOSTILE_TOKENS)
    doc = type(doc)(
        **{
            **doc.__dict__,
            "example_id": HOSTILE_ID,
            "title": f"{HOSTILE_ID} ({HOSTILE_CLASS})",
            "info": {
                **doc.info,
                "label": HOSTILE_CLASS,
                "prediction": HOSTILE["script tag"],
                "outputs": {HOSTILE_CLASS: 0.4, HOSTILE["image onerror"]: 0.6},
                "roles": [HOSTILE["javascript: URL"]],
            },
        }
    )
    meta, blob = payload(doc)
    special = np.array([i in (0, n - 1) for i in range(n)])
    overlay = Overlay(
        tokens=HOSTILE_TOKENS,
        starts_word=[True] * n,
        values=np.linspace(0, 1, n),
        special=special,
        title=f"{HOSTILE_ID}: {HOSTILE_CLASS}",
        note=HOSTILE["line breaks"],
    )
    record = AttributionRecord(
        example_id=HOSTILE_ID,
        tokens=HOSTILE_TOKENS,
        starts_word=[True] * n,
        scores=np.linspace(-1, 1, n),
        true_label=HOSTILE_CLASS,
        pred_label=HOSTILE["attribute break-out, double quote"],
        pred_prob=0.5,
        attr_label=HOSTILE["svg onload"],
        delta=0.0,
        n_steps=8,
    )
    pages = {
        "explorer": render_explorer(meta, blob),
        "overlay": render_html(overlay),
        "attribution": render_attribution_html(record),
    }
    out = {}
    for name, text in pages.items():
        out[name] = folder / f"{name}.html"
        out[name].write_text(text, encoding="utf-8")
    return out


class Page(html.parser.HTMLParser):
    """Tags, attributes, script bodies and text of a page, as a browser's tokenizer would split them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in = tag if tag in ("script", "style", "title") else None
        if tag == "script":
            self.scripts.append("")

    def handle_endtag(self, tag):
        self._in = None

    def handle_data(self, data):
        if self._in == "script":
            self.scripts[-1] += data
        elif self._in != "style":
            self.text.append(data)


def parse_page(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page
