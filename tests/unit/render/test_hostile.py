"""Hostile content is inert in every output: each string of tests/support/hostile_corpus.py (as a token, an example id,
a class name, a title, a caption and a table cell) through every renderer — the explorer page and its embedded
JSON, the attention and attribution HTML overlays, the LaTeX overlay and tables, the Markdown tables, CSV and
figures. Each format is checked by a parser of that format, never by searching the output for the input.

tests/e2e/test_browser.py opens the same pages in Chromium (:func:`hostile_pages`); the notes run
(tests/conftest.py) carries a hostile class name, example id and text through the whole pipeline.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnlens.render.escape import latex_escape, markdown_cell
from attnlens.render.explorer import read_explorer
from attnlens.render.figures import plot_skipped
from attnlens.render.overlays import (
    Overlay,
    render_latex,
    tex_engine,
)
from attnlens.render.tables import markdown_table, write_table
from tests.support.helpers import GUARD, run_guarded, unavailable
from tests.support.hostile_corpus import (
    HOSTILE,
    HOSTILE_CLASS,
    HOSTILE_ID,
    HOSTILE_TOKENS,
    Page,
    hostile_pages,
    parse_page,
)

STRINGS = [*HOSTILE.values(), HOSTILE_CLASS, HOSTILE_ID]
#: The only commands a LaTeX output may hold where data was: the escapes of attnlens.render.escape.
OWN_COMMANDS = {"textbackslash", "textasciicircum", "textasciitilde", "textless", "textgreater", "textbar", "texttt"}


def _visible(text: str) -> str:
    """What a reader sees of ``text`` once line breaks are spaces (every renderer makes them spaces)."""
    return re.sub(r"[\n\r\u2028\u2029]", " ", text.replace("\r\n", "\n"))


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    return hostile_pages(tmp_path_factory.mktemp("hostile"))


#: Tags each page is made of: anything else came from data.
PAGE_TAGS = {
    "explorer": {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "header",
        "h1",
        "p",
        "form",
        "label",
        "select",
        "option",
        "fieldset",
        "legend",
        "input",
        "div",
        "canvas",
        "main",
        "aside",
        "h2",
        "dl",
        "dt",
        "dd",
        "h3",
        "span",
        "ol",
        "footer",
        "details",
        "summary",
        "pre",
        "script",
    },
    "overlay": {"html", "head", "meta", "title", "style", "body", "h1", "p", "span"},
    "attribution": {
        "html",
        "head",
        "meta",
        "title",
        "style",
        "body",
        "p",
        "b",
        "span",
        "table",
        "tr",
        "th",
        "td",
        "mark",
    },
}


@pytest.mark.parametrize("name", list(PAGE_TAGS))
def test_html_pages_hold_only_their_own_markup_and_code(pages, name):
    page = parse_page(pages[name])
    assert {tag for tag, _ in page.tags} <= PAGE_TAGS[name]
    for tag, attrs in page.tags:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        assert not [v for v in attrs.values() if v and "javascript:" in v.lower() and tag != "meta"], (tag, attrs)
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert len(csp) == 1 and csp[0].startswith("default-src 'none'; script-src ")
    if name == "explorer":
        # three scripts: the metadata and the data (not run: JSON and base64) and the page's own code, by hash
        ids = [a.get("id") for t, a in page.tags if t == "script"]
        assert ids == ["attnlens-meta", "attnlens-data", None]
        assert "script-src 'sha256-" in csp[0] and "'unsafe-inline'" not in csp[0].split("style-src")[0]
    else:
        assert page.scripts == [] and "script-src 'none'" in csp[0]
        shown = _visible("".join(page.text))
        for s in STRINGS if name == "overlay" else HOSTILE_TOKENS:
            assert _visible(s) in shown, s  # literally, after the parser decoded the escapes


def test_explorer_json_round_trips_every_string(pages):
    meta, _ = read_explorer(pages["explorer"])
    assert meta["tokens"] == HOSTILE_TOKENS and meta["example_id"] == HOSTILE_ID
    assert meta["info"]["label"] == HOSTILE_CLASS and HOSTILE["image onerror"] in meta["info"]["outputs"]


def _latex_problems(tex: str) -> list[str]:
    """Commands other than attnlens' own escapes, unbalanced braces, and data that ends a ``%`` comment."""
    problems = []
    body = re.sub(r"\\[{}$&#_%]", "", tex)  # escaped characters are text
    body = re.sub(
        r"\$(?:-|\\(?:[a-z]+|Gamma|Delta|Theta|Lambda|Xi|Pi|Sigma|Upsilon|Phi|Psi|Omega))\$", "", body
    )  # math signs
    for cmd in re.findall(r"\\([A-Za-z]+)", body):
        if cmd not in OWN_COMMANDS:
            problems.append(f"command \\{cmd}")
    depth = 0
    for ch in body:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            problems.append("a closing brace without its opening one")
            break
    if depth > 0:
        problems.append(f"{depth} unclosed braces")
    for ch in ("$", "#", "^", "_", "~", "%", "&"):
        if ch in body:
            problems.append(f"unescaped {ch!r}")
    if re.search(r"[\n\r\x0b\x0c\u2028\u2029]", tex):
        problems.append("a line break")
    return problems


@pytest.mark.parametrize("kind", list(HOSTILE))
def test_latex_escape_leaves_data_inert(kind):
    for cjk in (False, True):
        assert _latex_problems(latex_escape(HOSTILE[kind], cjk=cjk)) == []


def test_latex_outputs_escape_every_string(tmp_path):
    n = len(HOSTILE_TOKENS)
    overlay = Overlay(
        tokens=HOSTILE_TOKENS,
        starts_word=[True] * n,
        values=np.linspace(0, 1, n),
        special=np.zeros(n, dtype=bool),
        title=HOSTILE_ID,
        note=HOSTILE["line breaks"],
    )
    tex = render_latex(overlay)
    comments = [line for line in tex.splitlines() if line.startswith("%")]
    assert len(comments) == 2 and tex.splitlines()[2] == "\\documentclass[varwidth]{standalone}"
    body = tex[tex.index("\\parbox{0.9\\textwidth}{") + len("\\parbox{0.9\\textwidth}{") : tex.index("\n}}}")]
    boxes = re.findall(r"\\colorbox\{[^}]*\}\{\\strut (.*?)\}(?=\s?\\colorbox|\s*$)", body.strip(), re.S)
    assert len(boxes) == n and all(_latex_problems(b) == [] for b in boxes)
    frame = pd.DataFrame({HOSTILE_CLASS: STRINGS, "value": np.arange(len(STRINGS), dtype=float)})
    write_table(frame, tmp_path / "table", caption=HOSTILE_ID)
    table = (tmp_path / "table.tex").read_text(encoding="utf-8")
    rows = table[table.index("\\toprule\n") + 9 : table.index("\n\\bottomrule")].replace("\\midrule\n", "")
    cells = [c.strip().removesuffix(r"\\").strip() for line in rows.splitlines() for c in line.split(" & ")]
    assert len(cells) == 2 * (len(STRINGS) + 1) and all(_latex_problems(c) == [] for c in cells)
    caption = re.search(r"\\caption\{(.*)\}\n", table)[1]
    assert _latex_problems(caption) == []


def _markdown_html(md: str) -> str:
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable("table").render(md)


def test_markdown_tables_show_every_string_as_text(tmp_path):
    frame = pd.DataFrame({HOSTILE_CLASS: STRINGS, "n": range(len(STRINGS))})
    rendered = _markdown_html(markdown_table(frame, HOSTILE_ID))
    page = Page()
    page.feed(rendered)
    assert {t for t, _ in page.tags} <= {"p", "strong", "table", "thead", "tbody", "tr", "th", "td"}
    cells = [c for c in page.text if c.strip()]
    for s in STRINGS:
        assert any(_visible(s).strip() == c.strip() for c in cells), s
    for s in STRINGS:
        assert "\n" not in markdown_cell(s) and "|" not in markdown_cell(s).replace("\\|", "")


def test_csv_cells_cannot_run_as_formulas(tmp_path):
    frame = pd.DataFrame(
        {HOSTILE["spreadsheet formula"]: STRINGS, "number": [-1.5] * len(STRINGS), "token": ["-"] * len(STRINGS)}
    )
    write_table(frame, tmp_path / "t", caption="c")
    with open(tmp_path / "t.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][0] == "'" + HOSTILE["spreadsheet formula"]
    for row in rows:
        for cell in row:
            if cell not in ("-", "+", "@") and not re.fullmatch(r"-?\d+(\.\d+)?", cell):
                assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
    # only the first character is added: the text itself is kept
    assert [r[0] for r in rows[1:]] == [("'" + s if s[0] in "=+-@\t\r" else s) for s in STRINGS]
    assert {r[1] for r in rows[1:]} == {"-1.5"} and {r[2] for r in rows[1:]} == {"-"}


def test_figures_draw_hostile_titles_as_text(tmp_path):
    """matplotlib would parse ``$…$`` as mathtext (and fail on ``\\input``): it is off."""
    written = plot_skipped(tmp_path / "f", HOSTILE["LaTeX math and comment"] + HOSTILE_ID, HOSTILE["LaTeX \\input"])
    assert all(p.stat().st_size > 0 for p in written)


@pytest.fixture(scope="module")
def pdflatex(root):
    """pdflatex, installed from Debian for this module when missing and purged after (tests/latex/pdflatex.sh);
    skipped with the reason where that cannot be done, unless ATTNLENS_REQUIRE_LATEX=1 (CI) makes it a failure."""
    if shutil.which("pdflatex"):
        yield shutil.which("pdflatex")
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        unavailable("latex", "pdflatex is not installed and installing it needs root and apt-get")
    script = root / "tests/latex/pdflatex.sh"
    up = run_guarded(["bash", script, "up"], timeout=GUARD["stage"])
    try:
        if up.returncode != 0 or not shutil.which("pdflatex"):
            unavailable("latex", f"could not install pdflatex: {(up.stderr.strip().splitlines() or ['?'])[-1]}")
        yield shutil.which("pdflatex")
    finally:
        run_guarded(["bash", script, "clean"], timeout=GUARD["stage"])


def test_latex_outputs_compile_with_hostile_text(pdflatex, tmp_path):
    """Compiled with shell escape off, as TeX Live's default: ``\\write18`` could not run, but it must not even be a
    command. The table needs booktabs; the overlay needs CJK and tcolorbox, and is compiled where they are."""
    pwned = Path("/tmp/attnlens-pwned")
    pwned.unlink(missing_ok=True)
    frame = pd.DataFrame({HOSTILE_CLASS: STRINGS, "n": range(len(STRINGS))})
    write_table(frame, tmp_path / "table", caption=HOSTILE_ID)
    doc = tmp_path / "doc.tex"
    doc.write_text(
        "\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n\\input{table.tex}\n\\end{document}\n",
        encoding="utf-8",
    )
    run = subprocess.run(
        [pdflatex, "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", doc.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:]
    assert (tmp_path / "doc.pdf").exists() and not pwned.exists()
    if tex_engine() == "pdflatex":  # the overlay's packages are there too
        n = len(HOSTILE_TOKENS)
        overlay = Overlay(
            tokens=HOSTILE_TOKENS,
            starts_word=[True] * n,
            values=np.linspace(0, 1, n),
            special=np.zeros(n, dtype=bool),
            title=HOSTILE_ID,
            note=HOSTILE_CLASS,
        )
        (tmp_path / "overlay.tex").write_text(render_latex(overlay), encoding="utf-8")
        run = subprocess.run(
            ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape", "overlay.tex"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stdout[-2000:]
    assert not pwned.exists()


def test_greek_and_math_signs_are_set_in_math_mode():
    """Table headers and captions (``Spearman ρ``, ``ΣA − s``) read as written in LaTeX, not as code points."""
    assert (
        latex_escape("Spearman ρ, Kendall τ-b, ΣA − s ≤ 1")
        == r"Spearman $\rho$, Kendall $\tau$-b, $\Sigma$A $-$ s $\leq$ 1"
    )
    visible = r"\texttt{[U+0391]} \texttt{[U+202E]} \texttt{[U+1F600]}"  # no LaTeX command for them: code points
    assert latex_escape("\u0391 \u202e \U0001f600") == visible
    assert _latex_problems(latex_escape("ρ τ Σ Ω − ≤ ≥")) == []


def test_the_corpus_is_large_enough():
    assert len(HOSTILE) >= 30 and len(set(HOSTILE.values())) == len(HOSTILE) and all(STRINGS)
