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

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from toyrl import plots

STYLES = ("paper", "slides")  # slides: larger text and lines, for a projector


class Stages(Protocol):
    """What `save` reports its stages to (the commands' progress display)."""

    def begin(self, label: str) -> None: ...

    def end(self) -> None: ...


def _table(frame: Any) -> pd.DataFrame:
    """`frame` if it is a table of `toyrl.run` or `toyrl.load` (the columns the figures read), else
    InvalidInput naming what it lacks."""
    from toyrl.config import ConfigError, InvalidInput
    from toyrl.results import COLUMN_DOCS, LATER_COLUMNS

    if not isinstance(frame, pd.DataFrame):
        raise ConfigError("frame", "must be a pandas DataFrame of toyrl.run or toyrl.load", frame)
    missing = [c for c in COLUMN_DOCS if c not in frame.columns and c not in LATER_COLUMNS]
    if missing:
        raise InvalidInput(f"the frame: missing columns {', '.join(missing)}; is it a table of toyrl.run?")
    return frame


def _mark(name: str, value: Any) -> int | None:
    """A cap or min_length to mark: None (the frame's configuration's) or a Config field's value."""
    from toyrl.config import ConfigError, field_bounds, plain

    value, bounds = plain(value), field_bounds(name)
    if value is None:
        return None
    high = bounds["high"] if bounds["high"] is not None else value
    if isinstance(value, bool) or not isinstance(value, int) or not bounds["low"] <= value <= high:
        raise ConfigError(name, bounds["requirement"] + " or None", value)
    return value


def length_by_correctness(
    frame: pd.DataFrame, cap: int | None = None, min_length: int | None = None, style: str = "paper"
) -> Figure:
    """One panel per variant: E[L | correct] and E[L | incorrect] against step, on shared axes
    that hold every curve, the cap and min_length marked (`toyrl.plots.plot_length_by_correctness`)."""
    cap, min_length = _mark("cap", cap), _mark("min_length", min_length)
    return plots.plot_length_by_correctness(_table(frame), cap=cap, min_length=min_length, style=style)


def length_2x2(
    frame: pd.DataFrame, cap: int | None = None, min_length: int | None = None, style: str = "paper"
) -> Figure:
    """The article's 2 x 2: std scaling (rows) x length normalisation (columns), from a table that
    holds the four variants grpo, std_only, length_only and dr_grpo (`toyrl.run("all")`)."""
    cap, min_length = _mark("cap", cap), _mark("min_length", min_length)
    return plots.plot_length_2x2(_table(frame), cap=cap, min_length=min_length, style=style)


def accuracy(frame: pd.DataFrame, ax: Axes | None = None, style: str = "paper") -> Figure:
    """Exact accuracy P(correct) against step, one line per variant."""
    from toyrl.config import ConfigError

    if ax is not None and not isinstance(ax, Axes):
        raise ConfigError("ax", "must be a matplotlib Axes or None", ax)
    return plots.plot_accuracy(_table(frame), ax=ax, style=style)


def branch_lengths(frame: pd.DataFrame, cap: int | None = None, style: str = "paper") -> Figure:
    """Per approach (right, wrong): the expected length and the per-token stop probability (log
    scale) against step: where the drift happens."""
    return plots.plot_branch_lengths(_table(frame), cap=_mark("cap", cap), style=style)


def save(
    frame: pd.DataFrame,
    folder: str | Path,
    style: str = "paper",
    progress: Stages | None = None,
    warn: Callable[[str], None] | None = None,
    n_jobs: int = 1,
) -> list[Path]:
    """Every figure of the table as NAME.png and NAME.svg in `folder` (created if need be), the two
    teaching figures (token weights, difficulty profile; they need no table) in the same style, and
    its final numbers as final_numbers.md: what `toyrl plot` and `toyrl reproduce` write, the same
    bytes for the same table.

    With a configuration in `frame.attrs["toyrl"]`, the runs are replayed for the bias figure (each
    variant's expected update against the true gradient along training; not for a variant without
    a closed form, which `warn` is told of: by default a Python warning). `progress` is told
    of each stage (`begin(label)`, `end()`). `n_jobs`: processes drawing the figures, this one
    included (1: all here; -1: one a core, at most one a figure); workers draw from the start,
    this process once it has replayed the runs; each figure is drawn on its own, so the files are
    the same bytes whatever it is. Returns the paths written."""
    from toyrl.config import ConfigError
    from toyrl.experiment import check_n_jobs, worker_count

    if not isinstance(folder, str | os.PathLike) or not str(folder):
        raise ConfigError("folder", "must be a folder's path (text or a pathlib.Path)", folder)
    plots.check_style(style)
    check_n_jobs(n_jobs)
    _table(frame)
    teaching = plots.teaching_jobs(style)
    with plots.drawing(worker_count(n_jobs, len(teaching) + len(plots.FIGURE_NAMES) + 2) - 1) as drawing:
        drawing.add(teaching)
        return save_drawn(frame, Path(folder), drawing, style, progress, warn)


def save_drawn(
    frame: pd.DataFrame,
    out: Path,
    drawing: plots.Drawing,
    style: str = "paper",
    progress: Stages | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[Path]:
    """`save`'s work, its arguments checked, the teaching figures already added to `drawing` (first:
    they need no table, so workers can draw them while the table is made, as `toyrl reproduce`
    does); the table's figures are added to them, the bias figure last."""
    from toyrl.bias import bias_over_training
    from toyrl.config import Config, InvalidInput
    from toyrl.files import write_atomic
    from toyrl.results import final_table_markdown

    out.mkdir(parents=True, exist_ok=True)
    meta = frame.attrs.get("toyrl")
    try:
        config = Config.from_dict(meta["config"]) if isinstance(meta, dict) else None
    except (InvalidInput, KeyError, TypeError):
        config = None
    jobs = plots.figure_jobs(
        frame,
        cap=config.cap if config else None,
        min_length=config.min_length if config else None,
        style=style,
    )
    drawing.add(jobs)
    bias: list[plots.FigureJob] = []
    if config is not None and isinstance(meta, dict):
        if progress is not None:
            progress.begin("replaying the runs for the bias figure")
        try:
            table = bias_over_training(frame, config, mean_field=bool(meta.get("mean_field")))
        except InvalidInput as error:
            (warn or _warn)(f"no bias figure: {error}")
        else:
            bias = plots.bias_jobs(table, style)
            drawing.add(bias)
    if progress is not None:
        progress.begin("rendering the figures")
    drawn = list(drawing.files())
    earlier = len(drawn) - len(jobs) - len(bias)  # the teaching figures: written last, as ever
    written = [
        path for files in [*drawn[earlier:], *drawn[:earlier]] for path in plots.write_files(files, out)
    ]
    if progress is not None:
        progress.end()
    numbers = out / "final_numbers.md"
    write_atomic(numbers, final_table_markdown(frame, article=config == Config()))
    return [*written, numbers]


def _warn(message: str) -> None:
    warnings.warn(message, stacklevel=3)
