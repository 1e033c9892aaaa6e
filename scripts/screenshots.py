"""Screenshots of the explorer page, and every figure at slide size, for docs/screenshots/.

    python scripts/screenshots.py [--out-dir docs/screenshots] [--step 400] [--no-slides]

Builds the page `toyrl reproduce` writes (figures/explorer.html: the page with the committed
results' mean curves as an overlay, from results/article.csv) into a temporary folder and opens it
in Debian's headless Chromium (tests/browser.py's DevTools client), scale 1:
- the first screen, no scrolling, at 360 x 800, 1280 x 800 and 1920 x 1080 CSS pixels, once the
  page has trained the article's run to --step (the page's own link field `t`, so every screenshot
  shows the same run and the lesson worded from it): `explorer-{width}x{height}.png`;
- the length chart after play (the play button pressed, the run trained to its end), scrolled to
  the top of the screen, at 360 x 800 and 1280 x 800, with the article's four variants and with
  eight (`EIGHT`): `explorer-played-{four,eight}-{width}x{height}.png`;
each a 256-colour PNG under --out-dir. Then every figure of `toyrl reproduce` at slide size
(`--style slides`: toyrl.plots' render_all on results/article.csv, render_bias on the bias table
the command replays from it, render_teaching) as PNG under --out-dir/slides/. Under a minute in
all; docs/explorer.md shows the page's screenshots.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.browser, the page tests' DevTools client

from tests.browser import Browser, find_chromium  # noqa: E402
from toyrl import plots  # noqa: E402
from toyrl.bias import bias_over_training  # noqa: E402
from toyrl.config import Config  # noqa: E402
from toyrl.explore import build_explorer, run_data  # noqa: E402
from toyrl.results import load_results  # noqa: E402
from toyrl.variants import ARTICLE  # noqa: E402

SIZES = [(360, 800), (1280, 800), (1920, 1080)]
PLAYED_SIZES = [(360, 800), (1280, 800)]
EIGHT = [*ARTICLE, "trl_default", "verl_default", "trl_grpo", "oat_grpo"]
PLAYED = {"four": list(ARTICLE), "eight": EIGHT}
# Two animation frames after the page is ready: the charts are drawn at the emulated width.
SETTLED = "new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"
RESULTS = ROOT / "results" / "article.csv"


def reproduce_page() -> str:
    """The page as `toyrl reproduce` writes it from the committed results."""
    frame, _ = load_results(RESULTS)
    description = f"the article's toy run, {len(ARTICLE)} variants x {frame['seed'].nunique()} seeds"
    return build_explorer(run_data(frame, Config().cap, description))


def save_palette(browser: Browser, out: Path) -> None:
    """What the screen shows, as a 256-colour PNG: a flat page needs no more, a third of the bytes."""
    browser.screenshot(out)
    with Image.open(out) as shot:
        palette = shot.convert("RGB").quantize(256, dither=Image.Dither.NONE)
    palette.save(out, optimize=True)
    wrote(out)


def wrote(path: Path) -> None:
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


def page_screenshots(out_dir: Path, step: int) -> None:
    chromium = find_chromium()
    if chromium is None:
        sys.exit("screenshots.py needs Debian's chromium (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="toyrl-screenshots-") as folder:
        page = Path(folder) / "explorer.html"
        page.write_text(reproduce_page(), encoding="utf-8")
        browser = Browser(chromium, timeout=300.0)
        try:
            for width, height in SIZES:
                browser.viewport(width, height)
                browser.open(page, f"t={step}")
                browser.evaluate(SETTLED, await_promise=True)
                save_palette(browser, out_dir / f"explorer-{width}x{height}.png")
            for name, variants in PLAYED.items():
                for width, height in PLAYED_SIZES:
                    browser.viewport(width, height)
                    browser.open(page, f"variants={','.join(variants)}")
                    browser.evaluate("document.getElementById('play').click()")
                    browser.wait_for("toyrl.ui.run.done")
                    browser.evaluate("document.getElementById('fig-length').scrollIntoView()")
                    browser.evaluate(SETTLED, await_promise=True)
                    save_palette(browser, out_dir / f"explorer-played-{name}-{width}x{height}.png")
        finally:
            browser.close()


def slide_figures(out_dir: Path) -> None:
    """Every figure `toyrl reproduce` draws, in `--style slides`, as PNG in out_dir."""
    frame, meta = load_results(RESULTS)
    if meta is None:
        sys.exit(f"{RESULTS} has no sidecar: its configuration is needed for the bias figure")
    config = Config.from_dict(meta["config"])
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="toyrl-slides-") as folder:
        drawn = Path(folder)
        written = plots.render_all(frame, drawn, cap=config.cap, min_length=config.min_length, style="slides")
        table = bias_over_training(frame, config, mean_field=bool(meta.get("mean_field")))
        written += plots.render_bias(table, drawn, style="slides")
        written += plots.render_teaching(drawn, style="slides")
        for path in sorted(p for p in written if p.suffix == ".png"):
            shutil.copyfile(path, out_dir / path.name)
            wrote(out_dir / path.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--step", type=int, default=Config().steps, help="the step the page trains to")
    parser.add_argument("--no-slides", action="store_true", help="the page's screenshots only")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    page_screenshots(args.out_dir, args.step)
    if not args.no_slides:
        slide_figures(args.out_dir / "slides")


if __name__ == "__main__":
    main()
