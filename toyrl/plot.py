"""The figures of a results table, for notebooks and scripts: `toyrl plot`'s, by short names.

Each takes the table of `toyrl.run` or `toyrl.load` and reads what it needs from it: the variants
from its rows, the cap and min_length from the configuration it carries (`frame.attrs["toyrl"]`),
unless given. Each returns the matplotlib Figure (in a notebook it shows itself); `save` writes
every figure as `toyrl plot` does, the same bytes for the same table.

    frame = toyrl.run("all", seeds=4)
    toyrl.plot.length_2x2(frame)                 # the article's figure: std x length normalisation
    toyrl.plot.save(frame, "figures")            # PNG and SVG of each, as `toyrl plot`
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from toyrl import plots

STYLES = ("paper", "slides")  # slides: larger text and lines, for a projector


class Stages(Protocol):
    """What `save` reports its stages to (the commands' progress display)."""

    def begin(self, label: str) -> None: ...

    def end(self) -> None: ...


def length_by_correctness(
    frame: pd.DataFrame, cap: int | None = None, min_length: int | None = None, style: str = "paper"
) -> Figure:
    """One panel per variant: E[L | correct] and E[L | incorrect] against step, on shared axes
    that hold every curve, the cap and min_length marked (`toyrl.plots.plot_length_by_correctness`)."""
    return plots.plot_length_by_correctness(frame, cap=cap, min_length=min_length, style=style)


def length_2x2(
    frame: pd.DataFrame, cap: int | None = None, min_length: int | None = None, style: str = "paper"
) -> Figure:
    """The article's 2 x 2: std scaling (rows) x length normalisation (columns), from a table that
    holds the four variants grpo, std_only, length_only and dr_grpo (`toyrl.run("all")`)."""
    return plots.plot_length_2x2(frame, cap=cap, min_length=min_length, style=style)


def accuracy(frame: pd.DataFrame, ax: Axes | None = None, style: str = "paper") -> Figure:
    """Exact accuracy P(correct) against step, one line per variant."""
    return plots.plot_accuracy(frame, ax=ax, style=style)


def branch_lengths(frame: pd.DataFrame, cap: int | None = None, style: str = "paper") -> Figure:
    """Per approach (right, wrong): the expected length and the per-token stop probability (log
    scale) against step: where the drift happens."""
    return plots.plot_branch_lengths(frame, cap=cap, style=style)


def save(
    frame: pd.DataFrame,
    folder: str | Path,
    style: str = "paper",
    progress: Stages | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[Path]:
    """Every figure of the table as NAME.png and NAME.svg in `folder` (created if need be), and its
    final numbers as final_numbers.md: what `toyrl plot` writes, the same bytes for the same table.

    With a configuration in `frame.attrs["toyrl"]`, the runs are replayed for the bias figure (each
    variant's expected update against the true gradient along training; not for a variant without
    a closed form, which `warn` is told of: by default a Python warning). `progress` is told
    of each stage (`begin(label)`, `end()`). Returns the paths written."""
    from toyrl.bias import bias_over_training
    from toyrl.config import Config, InvalidInput
    from toyrl.files import write_atomic
    from toyrl.results import final_table_markdown

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    meta = frame.attrs.get("toyrl")
    try:
        config = Config.from_dict(meta["config"]) if isinstance(meta, dict) else None
    except (InvalidInput, KeyError, TypeError):
        config = None
    if progress is not None:
        progress.begin("rendering the figures")
    written = plots.render_all(
        frame,
        out,
        cap=config.cap if config else None,
        min_length=config.min_length if config else None,
        style=style,
    )
    if config is not None and isinstance(meta, dict):
        if progress is not None:
            progress.begin("replaying the runs for the bias figure")
        try:
            table = bias_over_training(frame, config, mean_field=bool(meta.get("mean_field")))
        except InvalidInput as error:
            (warn or _warn)(f"no bias figure: {error}")
        else:
            if progress is not None:
                progress.begin("rendering the bias figure")
            written += plots.render_bias(table, out, style=style)
    if progress is not None:
        progress.end()
    numbers = out / "final_numbers.md"
    write_atomic(numbers, final_table_markdown(frame, article=config == Config()))
    return [*written, numbers]


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)
