"""Render the article figures from a saved results CSV with the plotting API (what `toyrl plot` does).

    python scripts/make_figures.py results/article.csv figures/
    python scripts/make_figures.py results/article.csv slides/ --style slides

A starting point for custom figures: every plot function takes the tidy frame, an optional
`ax`/`axes` and a `style`, and returns the figure, so panels can be combined or restyled here.
The cap and min_length come from the results' sidecar, which `load_results` hands to the frame
(`frame.attrs["toyrl"]`) for the plot functions to read; the bias figure, which replays the runs,
is `toyrl plot`'s.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from toyrl.plots import STYLES, render_all
from toyrl.results import load_results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="results CSV of toyrl run or reproduce")
    parser.add_argument("out", type=Path, help="folder for the figures (made if missing)")
    parser.add_argument("--style", choices=STYLES, default="paper", help="paper (9 in wide) or slides (16:9)")
    args = parser.parse_args()
    frame, _ = load_results(args.results)
    args.out.mkdir(parents=True, exist_ok=True)
    written = render_all(frame, args.out, style=args.style)
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
