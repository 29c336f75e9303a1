"""Overlays (paper Fig 8): LaTeX escaping, colour scale without special tokens, self-contained HTML."""

from __future__ import annotations

import re

import numpy as np
import pytest
from transformers import AutoTokenizer

import attnlens.render.overlays as ov
from attnlens.models.checkpoints import packaged_model_dir
from attnlens.render.escape import latex_escape
from attnlens.render.overlays import (
    AttributionRecord,
    Overlay,
    build_overlay,
    render_attribution_html,
    render_html,
    render_latex,
    signed_colour,
    write_overlay,
)

SPECIALS = "\\{}$&#^_~%<>|"


def test_latex_escape_leaves_no_special_character():
    escaped = latex_escape("a" + SPECIALS + "b")
    stripped = re.sub(r"\\(textbackslash|textasciicircum|textasciitilde|textless|textgreater|textbar)\{\}", "", escaped)
    stripped = re.sub(r"\\[{}$&#_%]", "", stripped)
    assert stripped == "ab"


def _overlay(values, special):
    return Overlay(
        tokens=["[CLS]", "attention", "is", "all", "[SEP]"],
        starts_word=[True] * 5,
        values=np.asarray(values, dtype=float),
        special=np.asarray(special),
        title="t <1> & co",
        note="n",
    )


def test_special_tokens_are_off_the_scale():
    o = _overlay([50.0, 1.0, 3.0, 2.0, 40.0], [True, False, False, False, True])
    scaled = o.scaled
    assert np.isnan(scaled[0]) and np.isnan(scaled[4])
    assert scaled[1] == 0 and scaled[2] == 100 and scaled[3] == 50
    table = o.table()
    assert list(table.columns) == ["position", "token", "value_raw", "value_0_100", "special", "note"]


def test_html_is_self_contained_and_escaped():
    page = render_html(_overlay([5, 1, 3, 2, 4], [True, False, False, False, True]))
    assert "<script" not in page and "http://" not in page and "https://" not in page
    assert "t &lt;1&gt; &amp; co" in page
    assert page.count("<span") == 5


def test_latex_has_the_original_layout():
    o = _overlay([5, 1, 3, 2, 4], [True, False, False, False, True])
    o = Overlay(["50%_{x}", *o.tokens[1:]], o.starts_word, o.values, o.special, o.title, o.note)
    tex = render_latex(o)
    assert "\\documentclass[varwidth]{standalone}" in tex and "\\begin{CJK*}{UTF8}{gbsn}" in tex
    assert "\\colorbox{red!100.000000}{\\strut is}" in tex
    assert "\\colorbox{gray!25}{\\strut 50\\%\\_\\{x\\}}" in tex


def test_wordpiece_pieces_join_into_words(request):

    tok = AutoTokenizer.from_pretrained(str(packaged_model_dir()))
    ids = tok("tokenization works")["input_ids"]
    o = build_overlay(tok, ids, np.arange(len(ids), dtype=float), "t", "n")
    assert o.tokens == ["[CLS]", "token", "ization", "works", "[SEP]"]
    assert o.starts_word == [True, True, False, True, True]
    assert o.special.tolist() == [True, False, False, False, True]
    assert "tokenization" in re.sub(r"<[^>]+>", "", render_html(o))


def test_write_overlay_without_tex(tmp_path, monkeypatch, caplog):

    monkeypatch.setattr(ov, "tex_engine", lambda: None)
    o = _overlay([5, 1, 3, 2, 4], [True, False, False, False, True])
    with caplog.at_level("INFO"):
        written = write_overlay(o, tmp_path / "ex")
    assert sorted(p.suffix for p in written) == [".csv", ".html", ".png", ".tex"]
    assert all(p.stat().st_size > 0 for p in written)
    assert "no TeX engine" in caplog.text


@pytest.mark.skipif(ov.tex_engine() is None, reason=f"no TeX engine with {', '.join(ov.TEX_NEEDS)} on this machine")
def test_latex_compiles(tmp_path):
    o = _overlay([5, 1, 3, 2, 4], [True, False, False, False, True])
    written = write_overlay(o, tmp_path / "ex")
    assert tmp_path / "ex.pdf" in written


def test_signed_colours_and_attribution_page():
    """Captum's lightness ramp (white at 0, 50 % at +1, 60 % at −1) on purple–orange hues, not red–green."""
    assert signed_colour(1.0) == (30, 75, 50) and signed_colour(2.0) == (30, 75, 50)  # clipped
    assert signed_colour(0.5) == (30, 75, 75)
    assert signed_colour(0.0) == (270, 75, 100) and signed_colour(-1.0) == (270, 75, 60)
    rec = AttributionRecord(
        "x1",
        ["#CLS", "deep", "<b>", "#SEP"],
        [True, True, True, True],
        np.array([0.0, 0.8, -0.6, 0.0]),
        "ai",
        "pl",
        0.73,
        "pl",
        0.001,
        32,
    )
    page = render_attribution_html(rec)
    for text in ("True Label", "Predicted Label", "Attribution Label", "Attribution Score", "Word Importance"):
        assert text in page
    assert "<b>pl (0.73)</b>" in page and "<b>0.20</b>" in page  # attribution score = sum of the scores
    assert "&lt;b&gt;" in page and "hsl(30,75%,60%)" in page and "hsl(270,75%,76%)" in page
    assert "purple negative, orange positive" in page  # the legend says which is which
