"""Screenshot of an explorer page in Debian's Chromium (the README's picture).

    python tests/browser/screenshot.py results/explorer/<id>.html docs/explorer.png [--overlay attention]

Clicks the real token with the largest |IG| score so that the details panel and the partner
highlights show, then saves a 1400 × 850 screenshot.
"""

import argparse
from pathlib import Path

from playwright.sync_api import sync_playwright


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--overlay", default="attribution", choices=["attribution", "attention", "evidence"])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 850})
        page.goto(args.page.resolve().as_uri())
        page.wait_for_selector("body[data-ready='1']", timeout=60_000)
        i = page.evaluate(
            """() => { const d = window.attnlens.data; let best = 0, at = 0;
                for (let i = 0; i < d.attribution.length; i++)
                  if (!d.special[i] && Math.abs(d.attribution[i]) > best) { best = Math.abs(d.attribution[i]); at = i; }
                return at; }"""
        )
        page.select_option("#overlay", args.overlay)
        page.click(f".tok[data-i='{i}']")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(args.out))
        browser.close()
    print(f"{args.out}: token {i}")


if __name__ == "__main__":
    main()
