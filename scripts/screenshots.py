"""Screenshots of the explorer page at a phone's, a laptop's and a projector's size.

    python scripts/screenshots.py [--out-dir docs/screenshots] [--step 400]

Builds the page `toyrl reproduce` writes (figures/explorer.html: the page with the committed
results' mean curves as an overlay, from results/article.csv) into a temporary folder, opens it in
Debian's headless Chromium (tests/browser.py's DevTools client) at 360 x 800, 1280 x 800 and
1920 x 1080 CSS pixels (scale 1), lets it train the article's run to --step (the page's own link
field `t`, so every screenshot shows the same run and the lesson worded from it) and saves what the
first screen shows, no scrolling, as `explorer-{width}x{height}.png` (a 256-colour PNG) under
--out-dir. Some seconds in all; docs/explorer.md shows the three.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.browser, the page tests' DevTools client

from tests.browser import Browser, find_chromium  # noqa: E402
from toyrl.config import Config  # noqa: E402
from toyrl.explore import build_explorer, run_data  # noqa: E402
from toyrl.results import load_results  # noqa: E402
from toyrl.variants import ARTICLE  # noqa: E402

SIZES = [(360, 800), (1280, 800), (1920, 1080)]
# Two animation frames after the page is ready: the charts are drawn at the emulated width.
SETTLED = "new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"


def reproduce_page() -> str:
    """The page as `toyrl reproduce` writes it from the committed results."""
    frame, _ = load_results(ROOT / "results" / "article.csv")
    description = f"the article's toy run, {len(ARTICLE)} variants x {frame['seed'].nunique()} seeds"
    return build_explorer(run_data(frame, Config().cap, description))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--step", type=int, default=Config().steps, help="the step the page trains to")
    args = parser.parse_args()
    chromium = find_chromium()
    if chromium is None:
        sys.exit("screenshots.py needs Debian's chromium (apt-get install chromium)")
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="toyrl-screenshots-") as folder:
        page = Path(folder) / "explorer.html"
        page.write_text(reproduce_page(), encoding="utf-8")
        browser = Browser(chromium, timeout=300.0)
        try:
            for width, height in SIZES:
                browser.viewport(width, height)
                browser.open(page, f"t={args.step}")
                browser.evaluate(SETTLED, await_promise=True)
                out = args.out_dir / f"explorer-{width}x{height}.png"
                browser.screenshot(out)
                # A flat page needs no more than 256 colours: a palette PNG is a third of the bytes.
                with Image.open(out) as shot:
                    palette = shot.convert("RGB").quantize(256, dither=Image.Dither.NONE)
                palette.save(out, optimize=True)
                print(f"wrote {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
        finally:
            browser.close()


if __name__ == "__main__":
    main()
