"""The explorer in a real browser: Debian's Chromium driven by Playwright, on an explorer of the .test run.

Expectations come from the pipeline's other artifacts and from a dense reference, never from the
page's own data: the IG score from the attribution shards, the received attention from the
attention summaries, the top-k partners from the dense attention rebuilt from the stored bands.

Chromium is installed from Debian by tests/browser/install_chromium.sh when missing (root and
apt-get needed; otherwise the test is skipped with the reason, unless ATTNLENS_REQUIRE_BROWSER=1,
as in CI, turns the skip into a failure). Playwright never downloads a browser.
"""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnlens.attention.band import layer_configuration
from attnlens.attention.summaries import load_bands, load_summaries
from attnlens.attribution.artifacts import load_attributions, load_explanations, scores_by_example
from attnlens.attribution.methods import method_names, signed
from attnlens.render.explorer import combine_bands, configuration_weights, read_explorer
from tests.support.dense import dense_reference
from tests.support.helpers import GUARD, SNAKEMAKE, local_env, run_guarded, unavailable
from tests.support.hostile_corpus import HOSTILE_CLASS, HOSTILE_ID, HOSTILE_TOKENS, hostile_pages

pytestmark = [pytest.mark.browser, pytest.mark.workflow]

CHROMIUM = Path("/usr/bin/chromium")


def _unavailable(reason: str):
    unavailable("browser", reason)


@pytest.fixture(scope="module")
def browser(root):
    if not CHROMIUM.exists():
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            _unavailable("Chromium is not installed and installing it needs root and apt-get")
        done = run_guarded(["bash", root / "tests/browser/install_chromium.sh"], timeout=GUARD["stage"])  # apt-get
        if done.returncode != 0:
            _unavailable(f"could not install Chromium: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    try:
        from playwright.sync_api import sync_playwright  # noqa: PLC0415 (optional: the test skips without it)
    except ImportError:
        _unavailable("the playwright package is not installed (envs/requirements-test.txt)")
    with sync_playwright() as p:
        # --no-sandbox: Chromium's sandbox refuses to run as root, which CI machines are
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield chromium
        chromium.close()


def _float(text: str) -> float:
    return float(text.strip())


def _colours(page) -> list[str]:
    return page.eval_on_selector_all(".tok", "els => els.map(e => getComputedStyle(e).backgroundColor)")


def _partners(page, which: str) -> list[int]:
    return [int(p) for p in page.eval_on_selector_all(f"#d-{which} li[data-pos]", "els => els.map(e => e.dataset.pos)")]


def _highlighted(page, cls: str) -> set[int]:
    return {int(i) for i in page.eval_on_selector_all(f".tok.{cls}", "els => els.map(e => e.dataset.i)")}


def _check_partners(listed, dense_line, k, length):
    """The listed partners are k positions whose dense attention is among the k largest (ties allowed)."""
    line = dense_line[:length]
    positive = np.sort(line[line > 0])[::-1]
    assert len(listed) == min(k, len(positive))
    if not listed:
        return
    kth = positive[len(listed) - 1]
    assert all(line[j] >= kth - 1e-5 for j in listed), (listed, line[listed], kth)
    values = np.array([line[j] for j in listed], dtype=np.float64)
    # Listed in descending order, up to ties the page cannot tell apart. The page sorts the values it decodes,
    # scale · (level / 255)² with level = round(255 · √(value / scale)) (render.explorer.encode_partners), so a
    # pair it lists out of order has one level: |√a − √b| ≤ √scale / 255, hence b − a ≤ (√a + √b) · √scale / 255,
    # and scale, the view's largest attention probability, is at most 1. (The dense reference and the page's
    # values differ by float32 rounding, 2⁻²⁴ relative: far below that.)
    first, then = values[:-1], values[1:]
    swapped = then > first
    assert np.all(then[swapped] - first[swapped] <= (np.sqrt(first) + np.sqrt(then))[swapped] / 255), values


def test_explorer_in_a_real_browser(browser, tiny_run, root):
    res = tiny_run / "results"
    pages = sorted((res / "explorer").glob("*.html"))
    assert pages, "build_explorers wrote no page"
    path = pages[0]
    meta, _ = read_explorer(path)
    eid = meta["example_id"]
    n, k = meta["n_tokens"], meta["top_k"]
    # independent expectations: the attribution shards, the attention summaries, dense attention from the bands
    ig = np.asarray(
        load_attributions(sorted(res.glob("attributions/shard*.parquet"))).set_index("example_id").loc[eid, "scores"],
        dtype=np.float64,
    )
    received = load_summaries(sorted(res.glob("attention/shard*.safetensors"))).examples[eid].received
    explained = scores_by_example(load_explanations(sorted(res.glob("explanations/shard*.parquet"))), method_names())[
        eid
    ]
    bands, ids = load_bands(sorted(res.glob("attention/bands/shard*.safetensors")), eid)
    dense_all = dense_reference(combine_bands(bands, configuration_weights(len(bands), bands[0].heads, "all", None)))
    dense_all = dense_all[0].numpy()
    special = np.array([t.startswith("[") and t.endswith("]") for t in meta["tokens"]])
    i = int(np.argmax(np.where(special, -np.inf, np.abs(ig))))  # the most attributed real token

    page = browser.new_page(viewport={"width": 1400, "height": 850})
    errors, fetched = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.route("**/*", lambda route: (fetched.append(route.request.url), route.continue_())[-1])
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert page.locator(".tok").count() == n == len(ids)

    # click a token: the panel shows its position, token and scores, and its partners are highlighted
    page.click(f".tok[data-i='{i}']")
    assert page.inner_text("#d-position") == str(i)
    assert page.inner_text("#d-token") == meta["tokens"][i]
    # the page prints 4 significant digits and stores received attention as float16 (3 digits): rel 1e-3 / 2e-3
    assert _float(page.inner_text("#d-attribution")) == pytest.approx(ig[i], rel=1e-3, abs=1e-7)
    assert _float(page.inner_text("#d-attribution-l2")) == pytest.approx(ig[i] / np.linalg.norm(ig), rel=1e-3)
    expected = float(layer_configuration(received, "all")[i])  # the default view: all layers, unscaled
    assert _float(page.inner_text("#d-received")) == pytest.approx(expected, rel=2e-3)
    attended, attending = _partners(page, "attended"), _partners(page, "attending")
    _check_partners(attended, dense_all[i], k, len(ids))
    _check_partners(attending, dense_all[:, i], k, len(ids))
    assert _highlighted(page, "selected") == {i}
    assert _highlighted(page, "attended") == set(attended)
    assert _highlighted(page, "attending") == set(attending)

    # switch the overlay: IG colours → attention colours
    before = _colours(page)
    page.select_option("#overlay", "attention")
    after = _colours(page)
    assert sum(a != b for a, b in zip(before, after, strict=True)) > n // 2
    assert "Received attention" in page.inner_text("#legend-text")

    # one layer and head, scaled: the panel follows the view
    layer, head = len(bands), 2
    page.check("input[name='kind'][value='head']")
    page.select_option("#layer", str(layer))
    page.select_option("#head", str(head))
    head_colours = _colours(page)
    assert head_colours != after
    assert _float(page.inner_text("#d-received")) == pytest.approx(float(received[layer - 1, head - 1, i]), rel=2e-3)
    dense_head = dense_reference(bands[layer - 1])[head - 1].numpy()
    _check_partners(_partners(page, "attended"), dense_head[i], k, len(ids))
    page.check("#scaled")
    importance = page.evaluate(f"window.attnlens.data.importance[{(layer - 1) * bands[0].heads + head - 1}]")
    scaled = _float(page.inner_text("#d-received"))
    assert scaled == pytest.approx(float(received[layer - 1, head - 1, i]) * importance, rel=2e-3, abs=1e-6)

    # planted evidence of the synthetic corpus
    page.select_option("#overlay", "evidence")
    lit = page.eval_on_selector_all(".tok", "els => els.filter(e => e.style.backgroundColor !== 'transparent').length")
    assert lit > 0

    # one overlay per explanation method: signed ones on IG's scale, the others on attention's
    options = page.eval_on_selector_all("#overlay option", "els => els.map(e => e.value)")
    assert [o for o in options if o.startswith("explanation:")] == [f"explanation:{m}" for m in method_names()]
    for method in ("grad_input", "rollout"):
        page.select_option("#overlay", f"explanation:{method}")
        values = np.array(page.eval_on_selector_all(".tok", "els => els.map(e => Number(e.dataset.value))"))
        np.testing.assert_allclose(values, explained[method], rtol=1e-6, atol=1e-9)  # float32 in JSON, read back
        legend = page.inner_text("#legend-text")
        assert ("purple negative, orange positive" in legend) == signed(method) and method.split("_")[
            0
        ] in legend.lower()

    # a click on a partner in the list moves the selection there
    page.select_option("#overlay", "attribution")
    page.check("input[name='kind'][value='configuration']")
    page.uncheck("#scaled")
    page.click(f".tok[data-i='{i}']")
    if attended:
        page.click(f"#d-attended li[data-pos='{attended[-1]}']")
        assert page.inner_text("#d-position") == str(attended[-1])

    # the minimap scrolls the text (a narrow window, so that even the tiny document overflows)
    page.set_viewport_size({"width": 640, "height": 420})
    page.evaluate("document.getElementById('text').scrollTop = 0")
    box = page.locator("#minimap").bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] - 2)
    page.wait_for_function("document.getElementById('text').scrollTop > 0", timeout=5_000)

    shots = root / "results" / "browser"
    shots.mkdir(parents=True, exist_ok=True)
    page.set_viewport_size({"width": 1400, "height": 850})
    page.click(f".tok[data-i='{i}']")
    shot = shots / f"explorer_{path.stem}.png"
    page.screenshot(path=str(shot))
    assert shot.stat().st_size > 10_000
    assert errors == []
    assert all(url.startswith("file://") for url in fetched), fetched  # opens from disk: nothing else is fetched
    page.close()


def test_a_multilabel_page_shows_the_label_chosen(browser, multilabel_run):
    """The target selector: each explained label's IG scores, legend and planted evidence, from the run's shards."""
    res = multilabel_run / "results"
    path = next((res / "explorer").glob("*.html"))
    meta, arrays = read_explorer(path)
    rows = load_attributions(sorted(res.glob("attributions/shard*.parquet")), every_target=True)
    rows = rows[rows["example_id"] == meta["example_id"]]
    names = [t["name"] for t in meta["targets"]]
    assert len(rows) == len(names) > 1
    page = browser.new_page(viewport={"width": 1400, "height": 850})
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    assert (
        page.is_visible("#target")
        and page.eval_on_selector_all("#target option", "els => els.map(e => e.text)") == names
    )
    special = np.array([t.startswith("[") and t.endswith("]") for t in meta["tokens"]])
    for k, row in enumerate(rows.itertuples()):
        page.select_option("#target", str(k))
        page.select_option("#overlay", "attribution")
        ig = np.asarray(row.scores, dtype=np.float64)  # the shard's row, not the page's data
        i = int(np.argmax(np.where(special, -np.inf, np.abs(ig))))
        page.click(f".tok[data-i='{i}']")
        # the page prints 4 significant digits of a float32 copy
        assert _float(page.inner_text("#d-attribution")) == pytest.approx(ig[i], rel=1e-3, abs=1e-7)
        assert f"toward “{names[k]}”" in page.inner_text("#legend-text")
        page.select_option("#overlay", "evidence")
        lit = page.eval_on_selector_all(
            ".tok", "els => els.filter(e => e.style.backgroundColor !== 'transparent').length"
        )
        assert lit == int(arrays["evidence" if k == 0 else f"evidence_t{k}"].sum())
    assert errors == []
    page.close()


#: Registered before any page script: collects what the page's Content-Security-Policy refused.
WATCH_CSP = (
    "window.__refused = []; document.addEventListener('securitypolicyviolation', "
    "e => window.__refused.push(e.violatedDirective + ' ' + e.blockedURI));"
)


def _open_inert(context, path: Path) -> tuple[object, dict[str, list]]:
    """Open ``path``; record dialogs (dismissed), page errors, refused code and any request beyond the file."""
    page = context.new_page()
    seen: dict[str, list] = {"dialogs": [], "errors": [], "requests": []}
    page.on("dialog", lambda d: (seen["dialogs"].append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.route("**/*", lambda route: (seen["requests"].append(route.request.url), route.continue_())[-1])
    page.add_init_script(WATCH_CSP)
    page.goto(path.as_uri())
    if page.locator("body[data-ready]").count():
        page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    page.wait_for_timeout(300)  # an injected onerror / onload would have fired by now
    seen["refused"] = page.evaluate("window.__refused")
    seen["requests"] = [u for u in seen["requests"] if u != path.as_uri()]
    return page, seen


@pytest.mark.parametrize("csp", ["enforced", "bypassed"])
def test_hostile_pages_run_nothing_they_did_not_ship(browser, tmp_path, csp):
    """Every hostile string of tests/support/hostile_corpus.py as tokens, id, class names and titles: no dialog, no
    script beyond the page's own, nothing fetched, and the text shown literally. With the CSP bypassed, the escaping
    alone must hold; with it enforced, nothing may even be refused (nothing tried to run)."""
    pages = hostile_pages(tmp_path)
    context = browser.new_context(bypass_csp=csp == "bypassed")
    try:
        for name, path in pages.items():
            page, seen = _open_inert(context, path)
            assert seen == {"dialogs": [], "errors": [], "requests": [], "refused": []}, (name, seen)
            scripts = page.evaluate("Array.from(document.scripts).map(s => s.id || 'own code')")
            assert scripts == (["attnlens-meta", "attnlens-data", "own code"] if name == "explorer" else [])
            selector = {"explorer": ".tok", "overlay": "p span", "attribution": "mark"}[name]
            shown = page.eval_on_selector_all(selector, "els => els.map(e => e.textContent)")
            assert shown == [t.replace("\r\n", "\n") for t in HOSTILE_TOKENS] or shown == [*HOSTILE_TOKENS], name
            if name == "explorer":
                assert page.inner_text("#title") == f"{HOSTILE_ID} ({HOSTILE_CLASS})"
                assert HOSTILE_CLASS in page.inner_text("#info")
            page.close()
    finally:
        context.close()


def test_the_notes_run_pages_and_report_run_nothing_they_did_not_ship(browser, notes_run, root, tmp_path):
    """The notes run carries a hostile class name, note id and text through the pipeline: its explorer pages, its
    overlays and the Snakemake report built from it fire no dialog and show the hostile id as text."""
    report = tmp_path / "report.html"
    out = run_guarded(
        [
            *SNAKEMAKE,
            "--snakefile",
            str(root / "workflow" / "Snakefile"),
            "--directory",
            str(notes_run),
            "--report",
            str(report),
        ],
        timeout=GUARD["plan"],
        env=local_env(),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    res = notes_run / "results"
    pages = sorted(p for p in res.rglob("*.html") if "logs" not in p.parts)
    context = browser.new_context()
    try:
        hostile_shown = 0
        for path in [*pages, report]:
            page, seen = _open_inert(context, path)
            assert not seen["dialogs"] and not seen["errors"], (path.name, seen)
            if path != report:
                assert seen == {"dialogs": [], "errors": [], "requests": [], "refused": []}, (path.name, seen)
                hostile_shown += HOSTILE_ID in page.evaluate("document.body.textContent")
            page.close()
        assert hostile_shown >= 1  # the explorer and the overlays of the hostile note
    finally:
        context.close()
