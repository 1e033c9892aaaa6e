"""Render the article figures from a saved results CSV with the plotting API (what `toyrl plot` does).

    python scripts/make_figures.py results/article.csv figures/

A starting point for custom figures: every plot function takes the tidy frame and an optional
`ax`/`axes`, and returns the figure, so panels can be combined or restyled here.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from toyrl.plots import render_all
from toyrl.results import load_results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="results CSV of toyrl run or reproduce")
    parser.add_argument("out", type=Path, help="folder for the figures (made if missing)")
    args = parser.parse_args()
    frame, meta = load_results(args.results)
    args.out.mkdir(parents=True, exist_ok=True)
    cap = meta["config"]["cap"] if meta else None
    for path in render_all(frame, args.out, cap=cap):
        print(path)


if __name__ == "__main__":
    main()
