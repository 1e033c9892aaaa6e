"""Figures of a results table: lengths by correctness, accuracy, where the drift happens, the bias.

Plot functions take the tidy frame of `toyrl.train` (any subset of variants and seeds), an optional
`ax`/`axes`, and a `style` from STYLES ("paper": README and papers, 9 in wide; "slides": 16:9 at
13.33 x 7.5 in, every text 18 pt or more), and return the figure; they compute nothing but means
and spreads over seeds, and need nothing beyond the frame: the cap and min_length they mark come
from the configuration it carries in `frame.attrs["toyrl"]` (the results sidecar's dict, which
`toyrl.results.load_results` sets) unless given. Lines are the exact expectations, mean over
seeds, with a band of +- 1 sd where there are several seeds; a panel's axes hold all of them.

One look per variant in every figure (`variant_looks`). The article's four keep its two switches
visible: a colour each (Okabe-Ito, distinct under the common colour-vision deficiencies; the
explorer page uses the same four), a dashed line without std scaling, circles on the line for
GRPO's per-response length mean 1/|o_i|. Where two of them coincide (GRPO and length-only,
std-only and Dr. GRPO) the dashed one is drawn on top and its band hatched, not filled, so neither
hides the other and no two bands mix into a colour the legend does not show. Any other variant
takes the next Okabe-Ito colour, then the next line style and marker: no two variants share
(colour, style, marker). Correct and incorrect answers have colours of their own
(OUTCOME_COLOURS), never a variant's, and in the length panels, which draw no variant's look, line
styles of their own (solid and dashed, OUTCOME_STYLES); elsewhere dashes mean "no std scaling".

Curves are named at their ends, in their colour (darkened to 4.5:1 where it is lighter), in a margin
right of the data that nothing else is drawn in, moved apart as the renderer measures them so that
none overlaps another or leaves its panel (`_label_ends`); where they would not fit, a legend names
the variants instead. Legends key only what is not named in the panels (what the bands are), below
the axes, outside them: under the panel they key, where only one panel needs one.
Text is near-black on white (contrast above 4.5:1), wrapped to what it labels by the font's own
widths, a title only between its phrases (`_phrases`); Greek and formulas are matplotlib mathtext.
SVG text stays text (`svg.fonttype = "none"`), editable in a slide tool, and an SVG renders to the
same bytes from the same drawing (`save_figures`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import io
import itertools
import math
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NamedTuple, cast

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.textpath import TextToPath
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

from toyrl.files import write_atomic
from toyrl.looks import EXTRA_COLOURS, VARIANT_COLOURS
from toyrl.variants import ARTICLE, display_name

STYLES = ("paper", "slides")

DASHED: Any = (0, (4, 2))
# The two switches: dashed = no std scaling (drawn over its solid twin, which it matches where
# the std term makes no difference); circles = GRPO's per-response length mean 1/|o_i|.
VARIANT_STYLES = {"grpo": "-", "std_only": "-", "length_only": DASHED, "dr_grpo": DASHED}
VARIANT_MARKERS = {"grpo": "o", "std_only": None, "length_only": "o", "dr_grpo": None}
VARIANT_LABELS = {name: display_name(name) for name in ARTICLE}  # "GRPO without std division", ...
# Every other variant, in order: the colours of `toyrl.looks` (the page's too), then other line
# styles, then markers.
EXTRA_STYLES: list[Any] = ["-", DASHED, (0, (1, 1.2)), (0, (6, 2, 1, 2))]
EXTRA_MARKERS = [None, "s", "^", "D", "v", "P", "X", "o"]
OUTCOME_COLOURS = {"correct": "#009E73", "incorrect": "#000000"}  # bluish green, black
OUTCOME_MARKERS = {"correct": "o", "incorrect": "s"}
OUTCOME_STYLES: dict[str, Any] = {"correct": "-", "incorrect": DASHED}  # told apart without colour
TEXT = "#1A1A1A"  # every text: 17:1 on white
MUTED = "#595959"  # reference lines and their labels: 7:1 on white

FIGURE_NAMES = ["length_by_correctness", "accuracy", "branch_lengths"]
HEADLINE_FIGURE_NAME = "length_2x2"  # also written by render_all when the article's four are there
TEACHING_FIGURE_NAMES = ["token_weights", "difficulty"]
BIAS_FIGURE_NAME = "bias"
GROUP_MARKERS = {8: "o", 16: "s", 64: "^"}  # the article's G = 8 drawn open
DPI = 150
MAX_BANDS = 6  # with more variants in one panel, bands would bury the lines: lines only
MAX_END_LABELS = 8  # with more variants in one panel, a legend names them (`_named_at_ends`)
LENGTH_COLUMNS = ("length_correct", "length_incorrect")  # the length panels' curves


@dataclass(frozen=True)
class Theme:
    """Sizes of a style: figure width (inches), text (points), lines and markers (points)."""

    width: float
    text: float  # every tick label, axis label, panel title, legend entry and annotation
    title: float
    line: float
    marker: float
    wrap: int  # characters per line of a variant's label
    end_label: float  # inches: the widest line of a label at a curve's end


THEMES = {
    "paper": Theme(width=9.0, text=9.0, title=10.5, line=1.7, marker=3.5, wrap=30, end_label=1.1),
    "slides": Theme(width=40 / 3, text=18.0, title=22.0, line=3.0, marker=7.0, wrap=22, end_label=2.1),
}
SLIDE_HEIGHT = 7.5  # inches: 16:9 at 13.33 in wide

plt.rcParams.update(
    {
        "svg.hashsalt": "toyrl",  # stable element ids, so a re-rendered SVG is byte-identical
        "svg.fonttype": "none",  # text as <text>, not outlines
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "text.color": TEXT,
        "axes.labelcolor": TEXT,
        "axes.titlecolor": TEXT,
        "xtick.labelcolor": TEXT,
        "ytick.labelcolor": TEXT,
        "legend.frameon": False,
    }
)


class Look(NamedTuple):
    colour: str
    linestyle: Any
    marker: str | None


ARTICLE_LOOKS = {
    name: Look(VARIANT_COLOURS[name], VARIANT_STYLES[name], VARIANT_MARKERS[name]) for name in VARIANT_COLOURS
}


def variant_looks(names: Sequence[str]) -> dict[str, Look]:
    """A (colour, line style, marker) per variant, no two alike: the article's four as fixed, the
    others in order from EXTRA_COLOURS x EXTRA_STYLES x EXTRA_MARKERS (224 looks; past those,
    they repeat)."""
    looks = {name: ARTICLE_LOOKS[name] for name in names if name in ARTICLE_LOOKS}
    taken = set(looks.values())
    pool = [
        look
        for marker, style, colour in itertools.product(EXTRA_MARKERS, EXTRA_STYLES, EXTRA_COLOURS)
        if (look := Look(colour, style, marker)) not in taken
    ]
    others = [name for name in dict.fromkeys(names) if name not in looks]
    looks.update({name: pool[i % len(pool)] for i, name in enumerate(others)})
    return {name: looks[name] for name in dict.fromkeys(names)}


def variant_label(name: str, style: str = "paper") -> str:
    """A variant's name for a legend: the article's in words; a spec `key=value,...` without the
    keys of its advantage and aggregation; wrapped to the style's width."""
    return _wrap(_variant_name(name), THEMES[style].wrap)


def _variant_name(name: str) -> str:
    """`variant_label` on one line (a panel title, which `_finish` wraps between its phrases)."""
    if display_name(name) != name:
        return display_name(name)
    if "=" in name:
        items = [item.partition("=") for item in name.split(",")]
        name = ", ".join(v if k in ("advantage", "aggregation") else f"{k}={v}" for k, _, v in items)
    return name


def _outcome_label(outcome: str) -> str:
    return rf"$E[L \mid \mathrm{{{outcome}}}]$"


def check_style(style: str) -> Theme:
    from toyrl.config import ConfigError

    if not isinstance(style, str) or style not in THEMES:
        raise ConfigError("style", f"must be {' or '.join(STYLES)}", style)  # toyrl plot --style's words
    return THEMES[style]


# --- sizes: a legend below the axes gets the rows its entries need ---------------------------------

# Height in inches of the axes, titles and tick labels without the legend: on paper, and the least
# a slide keeps for them (a slide is SLIDE_HEIGHT tall unless a long legend needs more).
_HEIGHTS = {
    "length_by_correctness": (2.7, 4.6),  # per row of panels
    HEADLINE_FIGURE_NAME: (6.2, 5.6),
    "accuracy": (3.9, 5.4),
    "branch_lengths": (6.4, 5.6),
    "bias": (3.7, 5.4),
    "token_weights": (4.0, 5.4),
    "difficulty": (3.9, 5.4),
}
_WIDTHS = {"accuracy": 6.4}  # on paper; the others are the theme's width, every slide 13.33
_COMMAND, _MARKUP = re.compile(r"\\[a-zA-Z]+"), re.compile(r"[{}_^]")


def _visible(text: str) -> int:
    """Characters `text` shows on one line, about: in a $...$ formula a command is one, the
    markup none."""
    parts = text.split("$")
    return sum(len(_MARKUP.sub("", _COMMAND.sub("x", p)) if i % 2 else p) for i, p in enumerate(parts))


def _legend_shape(labels: Sequence[str], theme: Theme, width: float) -> tuple[int, float]:
    """(columns, height in inches) of a legend of `labels` below a figure `width` inches wide.

    An entry is estimated at 0.62 em a visible character (DejaVu Sans averages about 0.55), 2.6 em
    of handle and 2.8 em of gaps, so that the columns chosen fit the figure.
    """
    if not labels:
        return 1, 0.0
    lines = [label.split("\n") for label in labels]
    entry = theme.text * (2.6 + 2.8 + 0.62 * max(_visible(line) for label in lines for line in label))
    columns = max(1, min(len(labels), int((width - 0.2) * 72 // entry)))
    rows = math.ceil(len(labels) / columns)
    row_lines = sum(max(len(label) for label in lines[r * columns : (r + 1) * columns]) for r in range(rows))
    return columns, (row_lines * 1.25 * theme.text + rows * 0.5 * theme.text + theme.text) / 72


_PUSHES = (("correct", "up"), ("wrong", "down"))
_DIFFICULTY_LABELS = ["GRPO", "Dr. GRPO", r"exact gradient $\propto p(1-p)$"]


def _legend_labels(name: str, variants: Sequence[str], style: str) -> list[str]:
    """The legend entries of figure `name`, as drawn."""
    if name in ("length_by_correctness", HEADLINE_FIGURE_NAME):
        return [band_meaning(10)]  # the curves are named at their ends
    if name == "token_weights":
        return [f"{VARIANT_LABELS[m]}, {o} (pushed {d})" for m in ("grpo", "dr_grpo") for o, d in _PUSHES]
    if name == "difficulty":
        return [*_DIFFICULTY_LABELS, *(f"G = {group}" for group in GROUP_MARKERS)]
    if name in ("accuracy", "branch_lengths") and _named_at_ends(name, variants, style):
        return [band_meaning(10)] if len(variants) <= MAX_BANDS else []
    return [variant_label(v, style) for v in variants]


# Inches of a panel's height that end labels may fill in figures that name their variants there
# (paper, slides): a little less than the panels get.
_END_LABEL_ROOM = {"accuracy": (3.0, 5.4), "branch_lengths": (2.4, 2.35)}


def _named_at_ends(name: str, variants: Sequence[str], style: str) -> bool:
    """Whether figure `name` names its variants at their curves' ends (else a legend names them):
    up to MAX_END_LABELS of them, if their labels, stacked, fit a panel's height (a line of a label
    is 1.1 em tall, labels 0.15 em apart: `_label_ends`)."""
    theme = THEMES[style]
    if len(variants) > MAX_END_LABELS:
        return False
    lines = sum(_fit(_variant_name(v), theme.end_label, theme.text).count("\n") + 1 for v in variants)
    height = (1.1 * lines + 0.15 * len(variants)) * theme.text / 72
    return height <= _END_LABEL_ROOM[name][style == "slides"]


def band_meaning(seeds: int) -> str:
    """What a figure's bands are, for its legend or title."""
    return f"band: mean ± 1 sd over {seeds} seeds"


def figure_size(name: str, variants: Sequence[str] = (), style: str = "paper") -> tuple[float, float]:
    """(width, height) in inches of figure `name` drawn for `variants` in `style`."""
    theme = check_style(style)
    width = theme.width if style == "slides" else _WIDTHS.get(name, theme.width)
    paper, slides = _HEIGHTS[name]
    if name == "length_by_correctness":
        rows = max(1, math.ceil(len(variants) / 4))
        paper, slides = paper * rows + 0.6, max(slides, 3.4 * rows) + 0.6
    _, legend = _legend_shape(_legend_labels(name, variants, style), theme, width)
    height = max(SLIDE_HEIGHT, slides + legend) if style == "slides" else paper + legend
    return width, round(height, 2)


def figure_size_pixels(name: str, variants: Sequence[str] = (), style: str = "paper") -> tuple[int, int]:
    """(width, height) in pixels of a rendered PNG, for checks (matplotlib truncates)."""
    width, height = figure_size(name, variants, style)
    return int(width * DPI + 1e-8), int(height * DPI + 1e-8)


def _new_figure(
    name: str, variants: Sequence[str], style: str, rows: int = 1, columns: int = 1, **shared: Any
) -> tuple[Figure, list[Axes]]:
    fig, grid = plt.subplots(
        rows,
        columns,
        figsize=figure_size(name, variants, style),
        layout="constrained",
        squeeze=False,
        **shared,
    )
    return fig, list(grid.ravel())


def _figure(ax: Axes) -> Figure:
    """The top-level figure an axes belongs to (where layout and saving happen): a subfigure's
    `figure` is its root, a figure's itself, on every matplotlib allowed (`get_figure(root=True)`
    is 3.10's)."""
    return cast(Figure, cast(Any, ax.figure).figure)


def _wrap(text: str, chars: int) -> str:
    """`text` in lines of at most `chars` visible characters (a formula's markup takes no room)
    where it can be: broken at spaces, a longer word after its underscores, never inside a $...$
    formula."""

    parts = text.split("$")
    kept = "$".join(
        part.replace(" ", "\0").replace("_", "\1") if i % 2 else part for i, part in enumerate(parts)
    )
    lines = []
    for line in kept.split("\n"):
        current = ""
        for word in line.split(" "):
            pieces = re.findall(r"[^_]+_?|_", word) if _visible(word) > chars else [word]
            for index, piece in enumerate(pieces):
                joined = f"{current} {piece}" if current and index == 0 else current + piece
                if current and _visible(joined) > chars:
                    lines.append(current)
                    current = piece
                else:
                    current = joined
        lines.append(current)
    return "\n".join(lines).replace("\0", " ").replace("\1", "_")


_MEASURE = TextToPath()


@functools.lru_cache(maxsize=4096)
def _inches(text: str, points: float) -> float:
    """Width in inches of one line of `text` at `points`, by the font's own metrics (mathtext where
    it has a $...$ formula)."""
    font = FontProperties(size=points)
    width, _, _ = _MEASURE.get_text_width_height_descent(text, font, ismath="$" in text)
    return float(width) / 72


def _closes_last(text: str) -> bool:
    """Whether the parenthesis `text` opens with closes at its last character ($...$ aside)."""
    depth, formula = 0, False
    for index, char in enumerate(text):
        formula ^= char == "$"
        if not formula:
            depth += (char == "(") - (char == ")")
            if depth == 0:
                return index == len(text) - 1
    return False


def _phrases(line: str) -> list[str]:
    """`line` cut where a line of a title or label may break: after a comma, colon or semicolon,
    before "×" and before a parenthetical that ends the line; never inside parentheses or a $...$
    formula. The spaces at the cuts are dropped."""
    pieces, start, depth, formula = [], 0, 0, False
    for index, char in enumerate(line):
        formula ^= char == "$"
        if formula or char == "$":
            continue
        depth += (char == "(") - (char == ")")
        rest = line[index + 1 :]
        if (
            char == " "
            and depth == 0
            and index > start
            and (
                line[index - 1] in ",:;" or rest.startswith("× ") or (rest[:1] == "(" and _closes_last(rest))
            )
        ):
            pieces.append(line[start:index])
            start = index + 1
    return [*pieces, line[start:]]


def _units(phrase: str, inches: float, points: float) -> list[tuple[str, str]]:
    """`phrase` as (glue, piece) pairs to lay out: whole if it fits `inches`; else cut at its spaces
    (a $...$ formula kept whole), and a word still too wide after its underscores (an identifier),
    each piece glued by what joins it to the one before on a line."""
    if _inches(phrase, points) <= inches:
        return [(" ", phrase)]
    parts = phrase.split("$")
    kept = "$".join(part.replace(" ", "\0") if i % 2 else part for i, part in enumerate(parts))
    units = []
    for word in (word.replace("\0", " ") for word in kept.split(" ")):
        pieces = (
            re.findall(r"[^_]+_?|_", word) if "$" not in word and _inches(word, points) > inches else [word]
        )
        units += [(" " if index == 0 else "", piece) for index, piece in enumerate(pieces)]
    return units


def _greedy(units: Sequence[tuple[str, str]], inches: float, points: float) -> list[str]:
    """`units` (glue, piece) joined into lines of at most `inches`, each as full as it can be (a
    piece wider than that alone on its line)."""
    lines, current = [], ""
    for glue, piece in units:
        joined = current + glue + piece if current else piece
        if current and _inches(joined, points) > inches:
            lines.append(current)
            current = piece
        else:
            current = joined
    return [*lines, current]


def _fit(text: str, inches: float, points: float) -> str:
    """`text` in lines that fit `inches` at `points`, broken only between its phrases (`_phrases`):
    the fewest lines, as even as they can be. A phrase too wide for a line alone (a label in a
    narrow room) is broken between its words, an identifier too wide after its underscores; titles
    are worded so that their phrases fit."""
    lines = []
    for line in text.split("\n"):
        units = [unit for phrase in _phrases(line) for unit in _units(phrase, inches, points)]
        fewest = _greedy(units, inches, points)
        if len(fewest) > 1:  # the narrowest width that needs no more lines: as even as they can be
            spans = {
                "".join(_greedy(units[i:j], math.inf, points))
                for i in range(len(units))
                for j in range(i + 1, len(units) + 1)
            }
            for width in sorted(_inches(span, points) for span in spans):
                even = _greedy(units, width, points)
                if len(even) <= len(fewest):
                    fewest = even
                    break
        lines += fewest
    return "\n".join(lines)


def _finish(fig: Figure, theme: Theme, title: str) -> Figure:
    """The title, and every label at the style's text size, wrapped to what it labels: to the room
    the layout leaves it, found by laying the figure out with the labels as they will be drawn."""
    width, height = fig.get_size_inches()
    fig.suptitle(_fit(title, width - 0.3, theme.title), fontsize=theme.title)
    labels = []
    for ax in fig.axes:
        ax.tick_params(labelsize=theme.text)
        for label, across in ((ax.title, True), (ax.xaxis.label, True), (ax.yaxis.label, False)):
            label.set_fontsize(theme.text)
            labels.append((ax, label, label.get_text(), across))
    engine = fig.get_layout_engine()
    if engine is not None:  # the axes where the layout puts them, not where the grid starts them
        engine.execute(fig)
    for ax, label, text, across in labels:
        box = ax.get_position()
        label.set_text(_fit(text, box.width * width if across else box.height * height, theme.text))
    return fig


def _legend(fig: Figure, handles: Sequence[Any], labels: Sequence[str], theme: Theme) -> None:
    """One legend below the axes (outside them: it covers no data), in as many columns as fit;
    none without entries."""
    if not labels:
        return
    columns, _ = _legend_shape(labels, theme, fig.get_figwidth())
    fig.legend(
        handles,
        labels,
        loc="outside lower center",
        ncol=columns,
        fontsize=theme.text,
        handlelength=2.6,
        handler_map={tuple: HandlerTuple(ndivide=1)},
    )


def _band_key(frame: pd.DataFrame, bands: bool = True) -> tuple[list[Any], list[str]]:
    """The legend entry that says what the bands are (N from the frame), if any are drawn."""
    seeds = frame["seed"].nunique()
    if not bands or seeds < 2:
        return [], []
    return [Patch(facecolor=MUTED, alpha=0.3, linewidth=0)], [band_meaning(seeds)]


def _luminance(colour: Any) -> float:
    """WCAG 2 relative luminance of an sRGB colour."""
    rgb = np.array(to_rgb(colour))
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    return float(linear @ [0.2126, 0.7152, 0.0722])


def _legible(colour: str) -> str:
    """`colour` darkened just enough for text in it to have 4.5:1 contrast on white (WCAG AA): a
    curve's label in its curve's hue."""
    for darkness in np.linspace(1, 0, 41):
        shade = tuple(float(c) * darkness for c in to_rgb(colour))
        if 1.05 / (_luminance(shade) + 0.05) >= 4.5:
            return to_hex(shade)
    return TEXT


class EndLabel(NamedTuple):
    """A label for the curve of `ax` that ends at (x, y), data coordinates, in its colour."""

    ax: Axes
    text: str
    colour: str
    x: float
    y: float


def _end(steps: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """A curve's last finite point (NaN, NaN if it has none)."""
    finite = np.flatnonzero(np.isfinite(values))
    return (float(steps[finite[-1]]), float(values[finite[-1]])) if finite.size else (math.nan, math.nan)


def _spread(wanted: Sequence[float], sizes: Sequence[float], low: float, high: float) -> list[float]:
    """Centres of boxes `sizes` tall, as near their `wanted` centres as they can be (least squares)
    with no two overlapping and all within [low, high] (bottom to top; if they cannot all fit, they
    start at `low`). Sorted by wanted centre, neighbours that would overlap are merged into blocks
    laid out edge to edge, each block centred on its members' wishes, until none overlap."""
    order = sorted(range(len(wanted)), key=lambda i: wanted[i])
    blocks: list[list[int]] = []  # members, bottom to top
    bottoms: list[float] = []

    def bottom(members: list[int]) -> float:
        offsets = np.cumsum([0.0, *(sizes[i] for i in members[:-1])]) + [sizes[i] / 2 for i in members]
        ideal = float(np.mean([wanted[i] for i in members] - offsets))
        return max(low, min(ideal, high - sum(sizes[i] for i in members)))

    for index in order:
        blocks.append([index])
        bottoms.append(bottom([index]))
        while len(blocks) > 1 and bottoms[-2] + sum(sizes[i] for i in blocks[-2]) > bottoms[-1]:
            merged = blocks[-2] + blocks.pop()
            bottoms.pop()
            blocks[-1], bottoms[-1] = merged, bottom(merged)
    centres = [0.0] * len(wanted)
    for members, start in zip(blocks, bottoms, strict=True):
        for index in members:
            centres[index] = start + sizes[index] / 2
            start += sizes[index]
    return centres


def _on_grid(point: Any) -> tuple[float, float]:
    """A display point (pixels) rounded to 1/8 of a pixel."""
    return round(float(point[0]) * 8) / 8, round(float(point[1]) * 8) / 8


def _label_ends(fig: Figure, labels: Sequence[EndLabel], theme: Theme) -> None:
    """Each label at the end of its curve, in a margin right of the curves that nothing else is
    drawn in: the x axis is extended by the widest label (its ticks kept to the data), so that no
    label sits on a line or a band. The labels of a panel are measured by the renderer and moved
    apart vertically as little as keeps them from overlapping and inside the panel; one moved off
    its curve's end is joined to it by a thin leader line. Call it last: the layout must be final."""
    labels = [label for label in labels if math.isfinite(label.y)]
    if not labels:
        return
    renderer = cast(Any, fig.canvas).get_renderer()
    points = fig.dpi / 72  # pixels a point
    pad, gap = 0.6 * theme.text * points, 0.15 * theme.text * points
    texts = [
        label.ax.text(
            label.x,
            label.y,
            _fit(label.text, theme.end_label, theme.text),
            color=_legible(label.colour),
            fontsize=theme.text,
            ha="left",
            va="center",
            linespacing=1.1,
            zorder=6,
        )
        for label in labels
    ]
    boxes = [text.get_window_extent(renderer) for text in texts]
    panels = list(dict.fromkeys(label.ax for label in labels))
    wide = max(box.width for box in boxes) + pad + gap
    for ax in panels:  # the panels that carry end labels share their x axis
        first, last = ax.get_xlim()[0], max(label.x for label in labels)
        ticks = [tick for tick in ax.get_xticks() if first <= tick <= last]
        share = wide / ax.bbox.width * 1.05  # the layout may narrow a panel a little
        ax.set_xlim(first, (last - first * share) / (1 - share))
        ax.xaxis.set_major_locator(FixedLocator(ticks))
    engine = fig.get_layout_engine()
    if engine is not None:
        engine.execute(fig)
    for ax in panels:
        mine = [i for i, label in enumerate(labels) if label.ax is ax]
        # Pixels on a grid of 1/8: a log axis's transform is numpy's log10, whose last bit differs
        # between numpy releases and CPUs; on the grid those differences cannot move a label or
        # reorder two that coincide, and the labels are placed in axes fractions (no log on the
        # way back), so the figure is the same pixels everywhere.
        anchors = [_on_grid(ax.transData.transform((labels[i].x, labels[i].y))) for i in mine]
        sizes = [boxes[i].height + gap for i in mine]
        centres = _spread([y for _, y in anchors], sizes, ax.bbox.y0 + 1, ax.bbox.y1 - 1)
        box = ax.bbox

        def fraction(x: float, y: float, box: Any = box) -> tuple[float, float]:
            return (x - box.x0) / box.width, (round(y * 8) / 8 - box.y0) / box.height

        for i, (x, y), centre, size in zip(mine, anchors, centres, sizes, strict=True):
            texts[i].set_transform(ax.transAxes)
            texts[i].set_position(fraction(x + pad, centre))
            if abs(centre - y) > (size - gap) / 2:
                ax.annotate(
                    "",
                    xy=fraction(x + gap, y),
                    xytext=fraction(x + pad - gap, centre),
                    xycoords="axes fraction",
                    textcoords="axes fraction",
                    arrowprops={
                        "arrowstyle": "-",
                        "color": _legible(labels[i].colour),
                        "linewidth": theme.line * 0.4,
                        "shrinkA": 0,
                        "shrinkB": 0,
                    },
                )


# --- curves ---------------------------------------------------------------------------------------


def _variants(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["variant"]))


def _markevery(points: int, index: int, count: int) -> tuple[int, int]:
    """Markers about every eighth of a curve, staggered across curves so that twins show both."""
    every = max(1, points // 8)
    return (index * every // max(count, 1)) % every, every


def _curve(
    ax: Axes,
    frame: pd.DataFrame,
    column: str,
    look: Look,
    theme: Theme,
    label: str,
    stagger: tuple[int, int] = (0, 1),
    scale: float = 1.0,
    band: bool = True,
    hatched: bool | None = None,
) -> Any:
    """Mean over seeds against step, with a +-1 sd band when there are several seeds (and `band`):
    filled, or hatched (by default under any but a solid line), so that coinciding bands stay
    apart. Returns the legend handle: the line, or the band and the line."""
    by_step = frame.groupby("step")[column]
    mean, sd = by_step.mean() * scale, by_step.std() * scale
    steps = mean.index.to_numpy()
    (line,) = ax.plot(
        steps,
        mean.to_numpy(),
        color=look.colour,
        linestyle=look.linestyle,
        marker=look.marker,
        markevery=_markevery(len(steps), *stagger),
        markersize=theme.marker,
        linewidth=theme.line,
        label=label,
        zorder=3 if look.linestyle == "-" else 4,
    )
    if not band or frame["seed"].nunique() < 2:
        return line
    low, high = (mean - sd).to_numpy(), (mean + sd).to_numpy()
    if not (look.linestyle != "-" if hatched is None else hatched):
        patch = ax.fill_between(steps, low, high, color=look.colour, alpha=0.16, linewidth=0, zorder=1)
    else:
        patch = ax.fill_between(
            steps, low, high, facecolor="none", edgecolor=look.colour, hatch="////", linewidth=0, alpha=0.5
        )
    return (patch, line)


def _reference_lines(
    ax: Axes, theme: Theme, cap: int | None, min_length: int | None, steps: tuple[float, float]
) -> None:
    """The cap and min_length as dotted lines over the `steps` (first, last) the curves span, so
    that the curves' end labels beyond them sit on nothing; each named at the left, where lengths
    start low."""
    for value, name, below in ((cap, "cap", True), (min_length, "min_length", False)):
        if value is None:
            continue
        ax.plot(
            steps,
            (value, value),
            color=MUTED,
            linewidth=theme.line * 0.6,
            linestyle=(0, (1, 2)),
            zorder=2,
            label="_reference",
        )
        ax.annotate(
            f"{name} {value:,}",
            (0, value),
            xycoords=("axes fraction", "data"),
            xytext=(4, -2 if below else 2),
            textcoords="offset points",
            va="top" if below else "bottom",
            fontsize=theme.text,
            color=MUTED,
        )


def _configured(
    frame: pd.DataFrame, cap: int | None, min_length: int | None
) -> tuple[int | None, int | None]:
    """The cap and min_length to mark: as given, else the frame's configuration's
    (`frame.attrs["toyrl"]["config"]`, the sidecar's that `toyrl.results.load_results` sets),
    else None (not marked)."""
    meta = frame.attrs.get("toyrl")
    config = meta.get("config") if isinstance(meta, dict) else None
    saved = config if isinstance(config, dict) else {}

    def number(value: Any) -> int | None:
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    return (
        cap if cap is not None else number(saved.get("cap")),
        min_length if min_length is not None else number(saved.get("min_length")),
    )


def _drawn_range(
    frame: pd.DataFrame, columns: Sequence[str], marks: Sequence[int | None] = (), bands: bool = True
) -> np.ndarray:
    """Every value `_curve` draws of `columns` (each variant's mean over seeds at each step, and, with
    `bands`, its +-1 sd band where it has several seeds), and the reference lines `marks`: finite
    ones only."""
    values = [float(mark) for mark in marks if mark is not None]
    for _, runs in frame.groupby("variant", sort=False):
        by_step = runs.groupby("step")[list(columns)]
        mean = by_step.mean().to_numpy()
        values += list(mean.ravel())
        if bands and runs["seed"].nunique() >= 2:
            sd = by_step.std().to_numpy()
            values += [*(mean - sd).ravel(), *(mean + sd).ravel()]
    drawn = np.array(values, dtype=float)
    return drawn[np.isfinite(drawn)]


def _length_limits(
    frame: pd.DataFrame, columns: Sequence[str], marks: Sequence[int | None] = (), bands: bool = True
) -> tuple[float, float]:
    """y limits of length panels that share an axis: from 0 (or below, if a band dips under it) to
    5% above everything drawn in any of them, so that no curve, band or reference line is cut."""
    drawn = _drawn_range(frame, columns, marks, bands)
    if not drawn.size:
        return 0.0, 1.0
    low, high = min(0.0, float(drawn.min())), max(float(drawn.max()), 1e-9)
    return low * 1.05, high * 1.05


def _readable_ticks(ax: Axes) -> None:
    """At least four labelled ticks on the y axis, at round steps (slides' large text would leave two)."""
    ax.yaxis.set_major_locator(MaxNLocator(nbins="auto", steps=[1, 2, 2.5, 5, 10], min_n_ticks=4))


def _steps(frame: pd.DataFrame) -> tuple[float, float]:
    return float(frame["step"].min()), float(frame["step"].max())


def _length_panel(
    ax: Axes, runs: pd.DataFrame, theme: Theme, cap: int | None, min_length: int | None
) -> list[EndLabel]:
    """E[L | correct] (solid) and E[L | incorrect] (dashed) of one variant's runs, the cap and
    min_length marked. Returns the curves' end labels, for `_label_ends` once the figure is laid
    out. The y limits are the caller's (`_length_limits`), which knows every panel on the shared
    axis."""
    ends = []
    for index, outcome in enumerate(OUTCOME_COLOURS):
        look = Look(OUTCOME_COLOURS[outcome], OUTCOME_STYLES[outcome], OUTCOME_MARKERS[outcome])
        column = f"length_{outcome}"
        _curve(ax, runs, column, look, theme, _outcome_label(outcome), (index, 2), hatched=index == 1)
        means = runs.groupby("step")[column].mean()
        ends.append(EndLabel(ax, outcome, look.colour, *_end(means.index.to_numpy(), means.to_numpy())))
    _reference_lines(ax, theme, cap, min_length, _steps(runs))
    _readable_ticks(ax)
    return ends


def plot_length_2x2(
    frame: pd.DataFrame, cap: int | None = None, min_length: int | None = None, style: str = "paper"
) -> Figure:
    """The article's 2 x 2 design, E[L | correct] (solid) and E[L | incorrect] (dashed) against
    step, each named at its end: rows with and without std scaling, columns GRPO's per-response
    length mean 1/|o_i| and a constant 1/L_norm (GRPO, GRPO without length division; GRPO without
    std division, Dr. GRPO). Shared axes that hold every curve; the cap and min_length marked (by
    default the frame's configuration's, `frame.attrs["toyrl"]`).

    The article's central picture: in the left column the incorrect curve climbs toward the cap,
    whatever the std term does; in the right column it stays with the correct one. Its four panels
    are its design, so the frame must hold all four variants (ValueError naming the missing ones
    otherwise); `plot_length_by_correctness` draws any subset.
    """
    theme = check_style(style)
    names = ["grpo", "std_only", "length_only", "dr_grpo"]
    missing = [name for name in names if name not in set(frame["variant"])]
    if missing:
        from toyrl.config import InvalidInput

        raise InvalidInput(
            f"the 2 x 2 needs the article's four variants {', '.join(names)}; the frame lacks "
            f"{', '.join(missing)} (plot_length_by_correctness draws any subset)"
        )
    cap, min_length = _configured(frame, cap, min_length)
    frame = frame[frame["variant"].isin(names)]
    fig, axes = _new_figure(HEADLINE_FIGURE_NAME, names, style, 2, 2, sharex=True, sharey=True)
    headers = [r"normalised by $|o_i|$ (per-response mean)", r"normalised by a constant $L_{\mathrm{norm}}$"]
    ends: list[EndLabel] = []
    for index, (ax, name) in enumerate(zip(axes, names, strict=True)):
        ends += _length_panel(ax, frame[frame["variant"] == name], theme, cap, min_length)
        ax.set_title(f"{headers[index]}\n{VARIANT_LABELS[name]}" if index < 2 else VARIANT_LABELS[name])
    for ax, scaled in ((axes[0], "with"), (axes[2], "without")):
        ax.set_ylabel(f"{scaled} std scaling\nlength (tokens)")
    axes[0].set_ylim(_length_limits(frame, LENGTH_COLUMNS, (cap, min_length)))
    for ax in axes[2:]:
        ax.set_xlabel("training step")
    _legend(fig, *_band_key(frame), theme)
    _finish(fig, theme, "Length by correctness: std scaling (rows) × length normalisation (columns)")
    _label_ends(fig, ends, theme)
    return fig


def plot_length_by_correctness(
    frame: pd.DataFrame,
    axes: Sequence[Axes] | None = None,
    cap: int | None = None,
    min_length: int | None = None,
    style: str = "paper",
) -> Figure:
    """One panel per variant, four to a row, titled with its name: E[L | correct] (solid) and
    E[L | incorrect] (dashed) against step, each named at its end, on shared axes that hold every
    panel's curves, the cap and min_length marked (by default the frame's configuration's,
    `frame.attrs["toyrl"]`). `toyrl plot`'s view of any set of variants; the article's four are
    also drawn as their 2 x 2 design (`plot_length_2x2`)."""
    theme = check_style(style)
    cap, min_length = _configured(frame, cap, min_length)
    variants = _variants(frame)
    columns = min(len(variants), 4)
    if axes is None:
        rows = -(-len(variants) // columns)
        _, axes = _new_figure(
            "length_by_correctness", variants, style, rows, columns, sharex=True, sharey=True
        )
        for ax in axes[len(variants) :]:
            ax.set_visible(False)
    fig = _figure(axes[0])
    ends: list[EndLabel] = []
    for index, (ax, variant) in enumerate(zip(axes, variants, strict=False)):
        ends += _length_panel(ax, frame[frame["variant"] == variant], theme, cap, min_length)
        ax.set_title(_variant_name(variant))
        if index % columns == 0:
            ax.set_ylabel("length (tokens)")
        if index >= len(variants) - columns:
            ax.set_xlabel("training step")
            ax.xaxis.set_tick_params(labelbottom=True)
    limits = _length_limits(frame, LENGTH_COLUMNS, (cap, min_length))
    for ax in axes[: len(variants)]:  # shared, unless the caller's axes are not
        ax.set_ylim(limits)
    _legend(fig, *_band_key(frame), theme)
    _finish(fig, theme, "Response length by correctness (exact expectations)")
    _label_ends(fig, ends, theme)
    return fig


def _variant_ends(
    ax: Axes, frame: pd.DataFrame, column: str, looks: Mapping[str, Look], value: Any = None
) -> list[EndLabel]:
    """Each variant's end label for its curve of `column` (mean over seeds): its name, or
    `value(end)` (a curve's final value as text) where given."""
    ends = []
    for variant, runs in frame.groupby("variant", sort=False):
        means = runs.groupby("step")[column].mean()
        x, y = _end(means.index.to_numpy(), means.to_numpy())
        text = value(y) if value is not None else _variant_name(str(variant))
        ends.append(EndLabel(ax, text, looks[str(variant)].colour, x, y))
    return ends


def plot_accuracy(frame: pd.DataFrame, ax: Axes | None = None, style: str = "paper") -> Figure:
    """Exact accuracy P(correct) in % against step, one line per variant, named at its end (a legend
    names them where their labels would not fit: `_named_at_ends`)."""
    theme = check_style(style)
    variants = _variants(frame)
    fig, (ax,) = _new_figure("accuracy", variants, style) if ax is None else (_figure(ax), [ax])
    looks = variant_looks(variants)
    labels = [variant_label(v, style) for v in variants]
    bands = len(variants) <= MAX_BANDS
    handles = [
        _curve(
            ax,
            frame[frame["variant"] == v],
            "accuracy",
            looks[v],
            theme,
            label,
            (i, len(variants)),
            100,
            bands,
        )
        for i, (v, label) in enumerate(zip(variants, labels, strict=True))
    ]
    ax.set_xlabel("training step")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    named = _named_at_ends("accuracy", variants, style)
    _legend(fig, *(_band_key(frame, bands) if named else (handles, labels)), theme)
    _finish(fig, theme, "Accuracy (exact expectation)")
    if named:
        percent = frame.assign(accuracy=frame["accuracy"] * 100)
        _label_ends(fig, _variant_ends(ax, percent, "accuracy", looks), theme)
    return fig


def _one_in(value: float, _: object = None) -> str:
    """A stop probability as '1/N', N with thousands separators."""
    return f"1/{1 / value:,.0f}" if value > 0 else ""


def plot_branch_lengths(
    frame: pd.DataFrame, axes: Sequence[Axes] | None = None, cap: int | None = None, style: str = "paper"
) -> Figure:
    """Where the drift happens, per approach (columns: right, wrong): the expected length
    E[L | approach] (top) and the per-token stop probability s = sigma(phi) that alone sets it
    (bottom, log scale), E[min(K, cap)] = (1 - (1 - s)^cap) / s.

    The right column is the length bias made visible: a wrong approach earns nothing at any length,
    so the true gradient never moves phi_wrong, yet length-normalised losses drive it down.

    Each length curve is named at its end and each stop probability labelled with its final value
    ('1/664', the numbers the README quotes), unless the labels would not fit (`_named_at_ends`):
    then a legend names the variants.
    The cap is marked (by default the frame's configuration's, `frame.attrs["toyrl"]`), and the
    length panels' shared y axis holds every curve of both.
    """
    theme = check_style(style)
    cap, _ = _configured(frame, cap, None)
    variants = _variants(frame)
    bands = len(variants) <= MAX_BANDS
    named = _named_at_ends("branch_lengths", variants, style)
    if axes is None:
        _, axes = _new_figure("branch_lengths", variants, style, 2, 2, sharex=True)
        axes[0].sharey(axes[1])
        axes[2].sharey(axes[3])
    fig = _figure(axes[0])
    looks = variant_looks(variants)
    labels = [variant_label(v, style) for v in variants]
    handles: list[Any] = []
    ends: list[EndLabel] = []
    for column, (branch, title) in enumerate(
        (("right", "right approach"), ("wrong", "wrong approach: earns nothing"))
    ):
        top, bottom = axes[column], axes[column + 2]
        handles = []
        for i, (variant, label) in enumerate(zip(variants, labels, strict=True)):
            runs, look, stagger = frame[frame["variant"] == variant], looks[variant], (i, len(variants))
            handles.append(
                _curve(top, runs, f"length_{branch}_approach", look, theme, label, stagger, band=bands)
            )
            _curve(bottom, runs, f"stop_prob_{branch}", look, theme, label, stagger, band=bands)
        _reference_lines(top, theme, cap, None, _steps(frame))
        top.set_title(title)
        _readable_ticks(top)
        start = frame.loc[frame["step"] == frame["step"].min(), f"stop_prob_{branch}"].mean()
        bottom.set_title(
            rf"its stop probability $\sigma(\varphi_{{\mathrm{{{branch}}}}})$, from {_one_in(start)}"
        )
        bottom.set_yscale("log")
        bottom.yaxis.set_major_locator(FixedLocator([1 / n for n in (30, 100, 300, 1e3, 3e3, 1e4, 3e4, 1e5)]))
        bottom.yaxis.set_major_formatter(FuncFormatter(_one_in))
        bottom.yaxis.set_minor_formatter(NullFormatter())
        bottom.set_xlabel("training step")
        if named:
            ends += _variant_ends(top, frame, f"length_{branch}_approach", looks)
            ends += _variant_ends(bottom, frame, f"stop_prob_{branch}", looks, _one_in)
    lengths = _length_limits(frame, ["length_right_approach", "length_wrong_approach"], (cap,), bands)
    for top in axes[:2]:
        top.set_ylim(lengths)
    stops = _drawn_range(frame, ["stop_prob_right", "stop_prob_wrong"], bands=bands)
    stops = stops[stops > 0]  # a log axis: a band reaching 0 or below is cut
    for bottom in axes[2:]:  # shared: the limits of both
        bottom.set_ylim(float(stops.min()) / 1.5, float(stops.max()) * 1.5)
    axes[0].set_ylabel("expected length (tokens)")
    axes[2].set_ylabel("stop probability (per token)")
    _legend(fig, *(_band_key(frame, bands) if named else (handles, labels)), theme)
    _finish(fig, theme, "Where the drift happens: each approach's length and its stop probability")
    _label_ends(fig, ends, theme)
    return fig


def plot_sweep(table: pd.DataFrame, axes_keys: list[str], style: str = "paper") -> Figure:
    """Final accuracy and final E[L | incorrect] across a sweep's grid, one line per variant.

    x is the first grid axis (or the variant alone); one row of panels per combination of the other
    axes. Points are means over seeds with +-1 sd error bars, each variant's nudged sideways a
    little so that equal ones stay visible.
    """
    theme = check_style(style)
    last = table[table["step"] == table.groupby(["variant", *axes_keys])["step"].transform("max")]
    x_key = axes_keys[0] if axes_keys else None
    facets = axes_keys[1:]
    groups = list(last.groupby(facets, sort=False)) if facets else [((), last)]
    variants = _variants(last)
    looks = variant_looks(variants)
    labels = [variant_label(v, style) for v in variants]
    _, legend_height = _legend_shape(labels, theme, theme.width)
    fig, grid = plt.subplots(
        len(groups),
        2,
        figsize=(theme.width, 3.2 * len(groups) + 0.6 + legend_height),
        squeeze=False,
        layout="constrained",
    )
    handles: dict[str, Any] = {}
    for row, (facet, part) in zip(grid, groups, strict=True):
        # a true/false axis is two categories, not the numbers 0 and 1
        boolean = bool(x_key) and pd.api.types.is_bool_dtype(part[x_key])
        numeric = bool(x_key) and pd.api.types.is_numeric_dtype(part[x_key]) and not boolean
        log_x = numeric and (part[x_key] > 0).all() and part[x_key].nunique() > 2
        for ax, column, label in (
            (row[0], "accuracy", "final accuracy (%)"),
            (row[1], "length_incorrect", r"final $E[L \mid \mathrm{incorrect}]$ (tokens)"),
        ):
            scale = 100 if column == "accuracy" else 1
            for position, variant in enumerate(variants):
                runs = part[part["variant"] == variant]
                if runs.empty:
                    continue
                stats = runs.groupby(x_key if x_key else "variant", sort=False)[column].agg(["mean", "std"])
                xs = stats.index.to_numpy() if x_key else np.array([position])
                if boolean:
                    xs = np.array([str(x).lower() for x in xs])
                if numeric:  # nudged sideways, at most 8% of the range across all, so equal points show
                    shift = (position - (len(variants) - 1) / 2) * min(0.015, 0.08 / len(variants))
                    values = np.log10(part[x_key]) if log_x else part[x_key]
                    span = float(values.max() - values.min()) or 1.0
                    xs = xs * 10 ** (shift * span) if log_x else xs + shift * span
                look = looks[variant]
                handles[variant] = ax.errorbar(
                    xs,
                    stats["mean"] * scale,
                    yerr=stats["std"].fillna(0) * scale,
                    marker=look.marker or "o",
                    markersize=theme.marker,
                    linestyle=look.linestyle,
                    linewidth=theme.line,
                    capsize=3,
                    color=look.colour,
                    label=variant_label(variant, style),
                    zorder=3 if look.linestyle == "-" else 4,
                )
            ax.set_ylabel(label)
            ax.set_xlabel(x_key or "variant (see the legend)")
            if not x_key:
                ax.set_xticks([])
            if log_x:
                ax.set_xscale("log")
                ticks = sorted(part[x_key].unique())
                ax.set_xticks(ticks, [f"{v:g}" for v in ticks])
                ax.minorticks_off()
            if facets:
                names = facet if isinstance(facet, tuple) else (facet,)
                ax.set_title(", ".join(f"{k} = {v}" for k, v in zip(facets, names, strict=True)))
    drawn = [v for v in variants if v in handles]
    _legend(fig, [handles[v] for v in drawn], [variant_label(v, style) for v in drawn], theme)
    return _finish(fig, theme, "Sweep: final step, mean ± sd over seeds")


def plot_bias(table: pd.DataFrame, axes: Sequence[Axes] | None = None, style: str = "paper") -> Figure:
    """The bias over training, exact: the cosine of E[g] to grad J (left; near 1 in the middle),
    and E[g]'s cosine with the phi_wrong axis, u_w / |u| (right).

    `table` is `toyrl.bias.bias_over_training` (one row per variant, seed and step). With up to
    twelve seeds each is drawn thin behind the mean, as their spread is no band around it (seeds
    part ways); with more, the band is +- 1 sd. grad J has no phi_wrong component, so whatever E[g]
    has there is the length bias: negative, it lowers the wrong approach's stop logit, which makes
    wrong answers longer. Its square is that axis's share of |E[g]|^2 (`phi_wrong_share`).
    """
    theme = check_style(style)
    variants = _variants(table)
    if axes is None:
        _, axes = _new_figure(BIAS_FIGURE_NAME, variants, style, 1, 3, sharex=True)
    fig = _figure(axes[0])
    looks = variant_looks(variants)
    labels = [variant_label(v, style) for v in variants]
    thin = table["seed"].nunique() <= 12
    handles = []
    for i, (variant, label) in enumerate(zip(variants, labels, strict=True)):
        runs = table[table["variant"] == variant]
        look = looks[variant]
        for ax, column in zip(axes, ("cosine", "cosine", "phi_wrong_cosine"), strict=True):
            if thin:
                for _, seed in runs.groupby("seed"):
                    ax.plot(
                        seed["step"],
                        seed[column],
                        color=look.colour,
                        linestyle=look.linestyle,
                        linewidth=theme.line * 0.35,
                        alpha=0.45,
                        zorder=2,
                    )
            handle = _curve(ax, runs, column, look, theme, label, (i, len(variants)), band=not thin)
        handles.append(handle)
    axes[0].set_ylim(-1.05, 1.05)
    axes[0].set_ylabel(r"$\cos(E[\hat g], \nabla J)$")
    axes[0].set_title("direction: 1 = the true gradient's")
    axes[1].set_ylim(0.995, 1.0005)
    axes[1].set_title("the same, near 1")
    axes[2].set_ylim(-1.05, 1.05)
    axes[2].set_ylabel(r"$\cos(E[\hat g], \varphi_{\mathrm{wrong}}$ axis)")
    axes[2].set_title("below 0: wrong answers lengthen")
    for ax in axes:
        ax.axhline(0, color=MUTED, linewidth=theme.line * 0.4, zorder=1)
        ax.set_xlabel("training step")
    _legend(fig, handles, labels, theme)
    count = table["seed"].nunique()
    seeds = f"thin lines: each of {count} seeds" if thin else band_meaning(count)
    title = rf"The exact expected update $E[\hat g]$ against the true gradient $\nabla J$ ({seeds})"
    return _finish(fig, theme, title)


def plot_token_weights(
    lengths: np.ndarray,
    curves: dict[str, np.ndarray],
    length_norm: float,
    axes: Sequence[Axes] | None = None,
    style: str = "paper",
) -> Figure:
    """Per-token weight (left) and total push, weight x |o| (right), of a correct and a wrong
    response against its length |o|, GRPO and Dr. GRPO, on linear axes.

    `curves` is `toyrl.examples.token_weight_curves(lengths, length_norm=length_norm)`. GRPO's
    weights fall as 1/|o|, so its total push is the advantage at any length: a long wrong answer
    costs no more than a short one. Dr. GRPO's weights are flat, so its push grows with length.
    The values at the article's 200-token correct and 800-token wrong answers are written out, in
    their axis's units (the weights x 10^-3).
    """
    theme = check_style(style)
    if axes is None:
        _, axes = _new_figure("token_weights", [], style, 1, 2, sharex=True)
    fig = _figure(axes[0])
    handles, labels = [], []
    for index, name in enumerate(("grpo", "dr_grpo")):
        look = ARTICLE_LOOKS[name]
        for outcome, direction in _PUSHES:
            weight = curves[f"{name}_{outcome}"]
            label = f"{VARIANT_LABELS[name]}, {outcome} (pushed {direction})"
            for ax, values in ((axes[0], weight * 1e3), (axes[1], weight * lengths)):
                (line,) = ax.plot(
                    lengths,
                    values,
                    color=look.colour,
                    linestyle=look.linestyle,
                    marker="^" if direction == "up" else "v",
                    markevery=_markevery(len(lengths), index, 2),
                    markersize=theme.marker * 1.2,
                    linewidth=theme.line,
                    label=label,
                )
            handles.append(line)
            labels.append(label)

    def curve_at(name: str, length: float, outcome: str = "wrong") -> float:
        return float(np.interp(length, lengths, curves[f"{name}_{outcome}"]))

    at = {
        name: {o: float(np.interp(n, lengths, curves[f"{name}_{o}"])) for o, n in _SHOWN}
        for name in ("grpo", "dr_grpo")
    }
    for name in at:
        for outcome, length in _SHOWN:
            for ax, value in ((axes[0], at[name][outcome] * 1e3), (axes[1], at[name][outcome] * length)):
                ax.plot(
                    [length],
                    [value],
                    "o",
                    color=ARTICLE_LOOKS[name].colour,
                    markersize=theme.marker * 1.5,
                    zorder=5,
                )
    weights = "\n".join(
        f"{'a 200-token correct' if outcome == 'correct' else 'an 800-token wrong'} answer:\n"
        + "\n".join(
            f"   {VARIANT_LABELS[name]} {_signed(at[name][outcome] * 1e3, n - 3)}" for name, n in _DIGITS
        )
        for outcome, _ in _SHOWN
    )
    pushes = "a wrong answer, 200 → 800 tokens:\n" + "\n".join(
        f"   {VARIANT_LABELS[name]} {_signed(curve_at(name, 200) * 200, 3)} → "
        f"{_signed(curve_at(name, 800) * 800, 3)} ({note})"
        for name, note in (("grpo", "the same"), ("dr_grpo", "4×"))
    )
    for ax, text in ((axes[0], weights), (axes[1], pushes)):
        ax.text(
            0.98,
            0.97,
            text,
            transform=ax.transAxes,
            ha="right",
            va="top",
            fontsize=theme.text,
            linespacing=1.3,
        )
        ax.axhline(0, color=MUTED, linewidth=theme.line * 0.4, zorder=1)
        ax.set_xlabel(r"response length $|o|$ (tokens)")
        ax.set_xlim(0, lengths.max())
    axes[0].set_ylim(-4, 16)
    axes[0].set_ylabel(r"per-token weight ($\times 10^{-3}$)")
    axes[0].set_title("each token's weight")
    axes[1].set_ylim(-0.8, 3.0)
    axes[1].set_ylabel(r"total push: weight $\times$ $|o|$")
    axes[1].set_title("the whole response's push")
    _legend(fig, handles, labels, theme)
    norm = rf"$L_{{\mathrm{{norm}}}}$ = {length_norm:,.0f}"
    if length_norm == worked_length_norm():
        norm += ", as in the article's worked example"
    title = f"A response in a G = 8 group, two correct (Dr. GRPO's {norm})"
    return _finish(fig, theme, title)


_SHOWN = (("correct", 200), ("wrong", 800))  # article, "Worked example by hand"
# The weights' decimals as `toyrl examples length` prints them; the figure writes them in the
# axis's units, x 10^-3, three decimals fewer.
_DIGITS = (("grpo", 5), ("dr_grpo", 6))


def worked_length_norm() -> float:
    """Dr. GRPO's L_norm in the article's worked example, which `toyrl examples length` computes
    (`toyrl.examples.length_example`'s default): the token-weights figure's."""
    from toyrl.examples import length_example

    return float(inspect.signature(length_example).parameters["length_norm"].default)


def _signed(value: float, decimals: int) -> str:
    """`value` with its sign, a true minus."""
    return f"{value:+.{decimals}f}".replace("-", "\u2212")


def plot_difficulty(
    profiles: dict[str, Any], axes: Sequence[Axes] | None = None, style: str = "paper"
) -> Figure:
    """A group's update mass, the sum of its |A_i|, against pass rate, relative to a 50/50 group.

    Left: at the observed pass rate k/G (the article's table is G = 8, drawn open; a larger G adds
    points on the same curves). Right: in expectation over the group's draw, against the prompt's
    true pass rate p. The grey line is the exact expected-gradient profile p(1 - p), which Dr. GRPO
    follows for every G and GRPO flattens, more as G grows. Markers tell the group sizes apart.
    `profiles` is `toyrl.examples.difficulty_profiles`.
    """
    theme = check_style(style)
    if axes is None:
        fig, axes = _new_figure("difficulty", [], style, 1, 2, sharey=True)
        cast(Any, fig.get_layout_engine()).set(wspace=0.06)  # the panels' 1.0 and 0.0 apart
    fig = _figure(axes[0])
    pass_rates = profiles["pass_rates"]
    exact: dict[str, Any] = {
        "color": "#BBBBBB",
        "linewidth": theme.line * 3,
        "solid_capstyle": "butt",
        "zorder": 1,
    }
    for ax in axes:
        ax.plot(pass_rates, profiles["gradient"], label=_DIFFICULTY_LABELS[2], **exact)
    groups = list(GROUP_MARKERS)

    def group_marker(group: int, colour: str) -> dict[str, Any]:
        return {
            "marker": GROUP_MARKERS[group],
            "markersize": theme.marker * (1.6 if group == 8 else 1.0),
            "markerfacecolor": "white" if group == 8 else colour,
            "markeredgewidth": theme.line * 0.7,
        }

    for group in reversed(groups):  # G = 8 last: on top
        for name in ("grpo", "dr_grpo"):
            look = ARTICLE_LOOKS[name]
            label = f"{VARIANT_LABELS[name]}, G = {group}"
            observed = profiles["observed"][group]
            axes[0].plot(
                observed["p"],
                observed[name],
                linestyle="none",
                color=look.colour,
                label=label,
                zorder=6 - groups.index(group),
                **group_marker(group, look.colour),
            )
            axes[1].plot(
                pass_rates,
                profiles["expected"][group][name],
                color=look.colour,
                linestyle=look.linestyle,
                markevery=_markevery(len(pass_rates), groups.index(group), len(groups)),
                linewidth=theme.line,
                label=label,
                zorder=3,
                **group_marker(group, look.colour),
            )
    axes[0].set_title("at the group's observed pass rate k/G")
    axes[1].set_title("expected over the group's draw, at true pass rate p")
    for ax in axes:
        ax.set_xlabel("pass rate")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.08)
    axes[0].set_ylabel(r"update mass $\sum_i |A_i|$ / mass at $p = 1/2$")
    handles = [
        Line2D([], [], color=VARIANT_COLOURS["grpo"], linestyle=VARIANT_STYLES["grpo"], linewidth=theme.line),
        Line2D(
            [],
            [],
            color=VARIANT_COLOURS["dr_grpo"],
            linestyle=VARIANT_STYLES["dr_grpo"],
            linewidth=theme.line,
        ),
        Line2D([], [], **exact),
        *(Line2D([], [], color=TEXT, linestyle="none", **group_marker(group, TEXT)) for group in groups),
    ]
    _legend(fig, handles, _legend_labels("difficulty", [], style), theme)
    title = r"Difficulty bias: GRPO's std division flattens the $p(1-p)$ profile, more so as G grows"
    return _finish(fig, theme, title)


# --- files ----------------------------------------------------------------------------------------


class FigureJob(NamedTuple):
    """A figure to draw: `draw(*args, **kwargs)` returns it; saved as NAME.png and NAME.svg. Data
    only (module-level functions and their arguments), so that a worker process can draw it."""

    name: str
    draw: Callable[..., Figure]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = {}


def bias_jobs(table: pd.DataFrame, style: str = "paper") -> list[FigureJob]:
    """The bias-over-training figure of a bias table (`toyrl.bias.bias_over_training`)."""
    return [FigureJob(BIAS_FIGURE_NAME, plot_bias, (table,), {"style": style})]


def render_bias(table: pd.DataFrame, folder: Path, style: str = "paper") -> list[Path]:
    """The bias-over-training figure as PNG and SVG in `folder`."""
    return draw_figures(bias_jobs(table, style), folder)


def teaching_jobs(style: str = "paper") -> list[FigureJob]:
    """The teaching figures (token weights, difficulty profile). The token weights are the
    article's worked example's, Dr. GRPO's L_norm its 2,000 (`worked_length_norm`, as `toyrl
    examples length` and the explorer page take it; the runs divide by the cap), over lengths up to
    the toy's cap."""
    from toyrl.config import Config
    from toyrl.examples import difficulty_profiles, token_weight_curves

    check_style(style)
    lengths = np.linspace(1, Config().cap, 300)
    length_norm = worked_length_norm()
    curves = token_weight_curves(lengths, length_norm=length_norm)
    profiles = difficulty_profiles(list(GROUP_MARKERS), np.linspace(0, 1, 201))
    return [
        FigureJob("token_weights", plot_token_weights, (lengths, curves, length_norm), {"style": style}),
        FigureJob("difficulty", plot_difficulty, (profiles,), {"style": style}),
    ]


def render_teaching(folder: Path, style: str = "paper") -> list[Path]:
    """The teaching figures (`teaching_jobs`) as PNG and SVG in `folder`."""
    return draw_figures(teaching_jobs(style), folder)


def figure_jobs(
    frame: pd.DataFrame,
    cap: int | None = None,
    min_length: int | None = None,
    style: str = "paper",
) -> list[FigureJob]:
    """Every figure of a results table (FIGURE_NAMES, and the 2 x 2 headline when the article's
    four variants are there). The cap and min_length are marked as given, else as the frame's
    configuration says (`frame.attrs["toyrl"]`, which `toyrl.results.load_results` sets from the
    sidecar), else not at all."""
    check_style(style)
    cap, min_length = _configured(frame, cap, min_length)
    marks = {"cap": cap, "min_length": min_length, "style": style}
    jobs = [
        FigureJob("length_by_correctness", plot_length_by_correctness, (frame,), marks),
        FigureJob("accuracy", plot_accuracy, (frame,), {"style": style}),
        FigureJob("branch_lengths", plot_branch_lengths, (frame,), {"cap": cap, "style": style}),
    ]
    if set(VARIANT_COLOURS) <= set(frame["variant"]):
        jobs.append(FigureJob(HEADLINE_FIGURE_NAME, plot_length_2x2, (frame,), marks))
    return jobs


def render_all(
    frame: pd.DataFrame,
    folder: Path,
    cap: int | None = None,
    min_length: int | None = None,
    style: str = "paper",
) -> list[Path]:
    """Every figure of a results table (`figure_jobs`) as PNG and SVG in `folder`; returns the
    paths written."""
    return draw_figures(figure_jobs(frame, cap, min_length, style), folder)


Drawn = list[tuple[str, str | bytes]]  # a figure's files: (NAME.png, bytes), (NAME.svg, text)


def figure_files(name: str, fig: Figure) -> Drawn:
    """A figure as NAME.png and NAME.svg, without dates: the same drawing gives the same bytes
    (`_readable_svg`); the figure is closed."""
    files: Drawn = []
    for kind, metadata in [("png", {"Software": None}), ("svg", {"Date": None})]:
        buffer = io.BytesIO()
        fig.savefig(buffer, format=kind, dpi=DPI, metadata=metadata)
        data = buffer.getvalue()
        files.append((f"{name}.{kind}", _readable_svg(data.decode("utf-8")) if kind == "svg" else data))
    plt.close(fig)
    return files


def draw(job: FigureJob, rc: dict[Any, Any] | None = None) -> Drawn:
    """A job's figure drawn and rendered to its files (`figure_files`), under matplotlib settings
    `rc` if given (a worker process draws under its caller's)."""
    with matplotlib.rc_context(rc):
        return figure_files(job.name, job.draw(*job.args, **job.kwargs))


class Drawing:
    """Figures drawn by worker processes and this one together (`drawing`). Jobs are added as they
    come (`add`): a free worker takes the first one no one has taken, and this process, asked for
    a figure no one has drawn yet (`files`), draws it itself if no one has taken it, else the last
    one no one has taken meanwhile. Each figure is drawn on its own from its job, in the matplotlib
    settings this process had when it was added: the same bytes whoever draws it.

    A thread of this process hands the jobs to the workers, one at a time each, as they come free.
    Workers are forked, so they start at once with what this process imported, matplotlib included;
    where forking is not the platform's safe default (anything but Linux) every figure is drawn in
    this process instead: a spawned worker would import matplotlib before drawing anything, and a
    caller's script without a `__main__` guard would start again in it."""

    def __init__(self, workers: int) -> None:
        self._jobs: list[tuple[FigureJob, dict[Any, Any]]] = []
        self._untaken: collections.deque[int] = collections.deque()
        self._done: dict[int, Drawn | BaseException] = {}
        self._given = 0  # figures handed out by `files`, in the jobs' order
        self._changed = threading.Condition()
        self._closed = False
        self._processes: list[Any] = []
        self._connections: list[Connection] = []
        self._woken, self._wake = multiprocessing.Pipe(duplex=False)
        self._thread: threading.Thread | None = None
        if workers and sys.platform == "linux":
            for stream in (sys.stdout, sys.stderr):  # a forked worker must not write their buffers again
                stream.flush()
            for _ in range(workers):
                process, connection = _start_worker(multiprocessing.get_context("fork"), os.getpid())
                self._processes.append(process)
                self._connections.append(connection)
            self._thread = threading.Thread(target=self._hand_out, name="toyrl-figures", daemon=True)
            self._thread.start()

    def add(self, jobs: Sequence[FigureJob]) -> None:
        """Jobs to draw, after those added before."""
        rc = {key: value for key, value in plt.rcParams.items() if key != "backend"}  # each process its own
        with self._changed:
            for job in jobs:
                self._untaken.append(len(self._jobs))
                self._jobs.append((job, rc))
        if self._processes:
            self._wake.send(None)

    def files(self) -> Iterator[Drawn]:
        """Each added job's files (`figure_files`), in the order added, as each is drawn."""
        while self._given < len(self._jobs):
            index = self._given
            with self._changed:
                while index not in self._done and not self._untaken:
                    self._changed.wait()
                mine = None
                if index not in self._done:
                    mine = index if index in self._untaken else self._untaken[-1]
                    self._untaken.remove(mine)
            if mine is not None:
                drawn = draw(*self._jobs[mine])
                with self._changed:
                    self._done[mine] = drawn
                continue
            outcome = self._done.pop(index)
            if isinstance(outcome, BaseException):
                raise outcome
            self._given += 1
            yield outcome

    def close(self) -> None:
        """Stop the workers (drawing or not) and the thread that hands them jobs."""
        with self._changed:
            self._closed = True
        for process in self._processes:
            process.terminate()
        if self._thread is not None:
            self._wake.send(None)
            self._thread.join()
        for process in self._processes:
            process.join()
        for connection in [*self._connections, self._woken, self._wake]:
            connection.close()

    def _hand_out(self) -> None:
        idle, busy = list(self._connections), {}
        while True:
            with self._changed:
                if self._closed:
                    return
                given = [
                    (idle.pop(), self._untaken.popleft()) for _ in range(min(len(idle), len(self._untaken)))
                ]
            stopped = RuntimeError("a worker process drawing the figures stopped")
            for connection, index in given:
                try:
                    connection.send(self._jobs[index])
                except OSError:  # stopped (by `close`, or killed)
                    self._settle(index, stopped)
                else:
                    busy[connection] = index
            for ready in multiprocessing.connection.wait([*busy, self._woken]):
                if ready is self._woken:
                    self._woken.recv()
                    continue
                index = busy.pop(cast(Connection, ready))
                try:
                    outcome = cast(Connection, ready).recv()
                except (EOFError, OSError):
                    outcome = stopped
                else:
                    idle.append(cast(Connection, ready))
                self._settle(index, outcome)

    def _settle(self, index: int, outcome: Drawn | BaseException) -> None:
        with self._changed:
            self._done[index] = outcome
            self._changed.notify_all()


def _start_worker(context: Any, parent: int) -> tuple[Any, Connection]:
    """A worker process drawing the jobs sent to it (`_draw_sent`), and this process's end of its pipe."""
    mine, theirs = context.Pipe()
    process = context.Process(
        target=_draw_sent, args=(theirs, mine, parent), name="toyrl-figures", daemon=True
    )
    process.start()
    theirs.close()
    return process, mine


def _draw_sent(connection: Connection, parents_end: Connection, parent: int) -> None:
    """A worker: draw each (job, rc) received, send back (files or the exception), until the
    pipe closes. Ctrl-C is the parent's to handle (it stops the workers); SIGTERM ends the worker."""
    from toyrl.experiment import die_with_parent

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parents_end.close()  # so that the pipe ends when the parent does
    die_with_parent(parent)
    while True:
        try:
            job, rc = connection.recv()
        except (EOFError, OSError):
            return
        try:
            outcome: Drawn | BaseException = draw(job, rc)
        except Exception as error:  # the parent raises it where it asks for the figure
            outcome = error
        try:
            connection.send(outcome)
        except (EOFError, OSError):
            return
        except Exception:  # an exception that does not pickle: its text
            connection.send(RuntimeError(f"{type(outcome).__name__}: {outcome}"))


@contextlib.contextmanager
def drawing(workers: int = 0) -> Iterator[Drawing]:
    """Within: a `Drawing` over `workers` worker processes (0: every figure drawn in this process,
    as it is asked for). Leaving (a failure, Ctrl-C) stops the workers."""
    drawing = Drawing(workers)
    try:
        yield drawing
    finally:
        drawing.close()


def draw_figures(jobs: Sequence[FigureJob], folder: Path, workers: int = 0) -> list[Path]:
    """Each job's figure as NAME.png and NAME.svg in `folder` (atomically), drawn in this process or
    with `workers` worker processes besides it (`drawing`): the same bytes. Returns the paths
    written, in the jobs' order."""
    with drawing(workers) as figures:
        figures.add(jobs)
        return [path for files in figures.files() for path in write_files(files, folder)]


def write_files(files: Drawn, folder: Path) -> list[Path]:
    """Figures' files (`figure_files`) written atomically into `folder`; the paths written."""
    for filename, data in files:
        write_atomic(folder / filename, data)
    return [folder / filename for filename, _ in files]


def save_figures(figures: dict[str, Figure], folder: Path) -> list[Path]:
    """Each figure as NAME.png and NAME.svg in `folder` (atomically, without dates: re-rendering
    gives the same bytes); the figures are closed. Returns the paths written."""
    return [path for name, fig in figures.items() for path in write_files(figure_files(name, fig), folder)]


BRIDGE_MARKERS = ("o", "s", "^", "D", "v")  # a bridge figure's labels'
SEED_MARKERS = ("X", "P", "*", "h", "<", ">", "p", "d")  # its seeds', in the gaps' panel


def plot_bridge(
    frame: pd.DataFrame,
    reference: str | None = "dr_grpo",
    window: int = 10,
    style: str = "paper",
    names: Mapping[str, str] | None = None,
) -> Figure:
    """A bridge's table (`toyrl.bridge.Bridge.frame`) in four panels: incorrect length, each label's
    gap against `reference` per seed, accuracy (%) and correct length, by step. The network's curves
    (solid) are means over the `window` steps up to each step, the toy's (dashed) its exact
    expectations; the panels but the gaps' average the seeds. `names`: each label's legend entry
    (default the label). Each label has its colour and a marker of its own."""
    theme = check_style(style)
    labels = list(dict.fromkeys(frame["label"]))
    looks = {
        label: Look(look.colour, "-", BRIDGE_MARKERS[i % len(BRIDGE_MARKERS)])
        for i, (label, look) in enumerate(variant_looks(labels).items())
    }
    seeds = sorted(set(frame["seed"]))
    width = theme.width
    height = 6.4 if style == "paper" else SLIDE_HEIGHT
    fig, axes = plt.subplots(2, 2, figsize=(width, height), layout="constrained", squeeze=False)
    panels = list(axes.ravel())

    def series(label: str, source: str, metric: str, seed: int | None = None) -> pd.Series:
        rows = frame[(frame["label"] == label) & (frame["source"] == source)]
        if seed is not None:
            rows = rows[rows["seed"] == seed]
        values = rows.groupby("step")[metric].mean()
        return values.rolling(window, min_periods=1).mean() if source == "network" else values

    for ax, metric, title, scale in (
        (panels[0], "length_incorrect", "Incorrect length (tokens)", 1),
        (panels[2], "accuracy", "Accuracy (%)", 100),
        (panels[3], "length_correct", "Correct length (tokens)", 1),
    ):
        for label in labels:
            look = looks[label]
            for source, linestyle in (("network", "-"), ("toy", DASHED)):
                values = series(label, source, metric) * scale
                ax.plot(
                    values.index,
                    values.to_numpy(),
                    color=look.colour,
                    linestyle=linestyle,
                    linewidth=theme.line,
                    marker=look.marker,
                    markevery=_markevery(len(values), labels.index(label), len(labels)),
                    markersize=theme.marker,
                )
        ax.set_title(title)
        ax.set_xlabel("step")
    ax = panels[1]
    others = [label for label in labels if label != reference]
    if reference is not None and others:
        for label in others:
            look = looks[label]
            for seed in seeds:
                for source, linestyle in (("network", "-"), ("toy", DASHED)):
                    gap = series(label, source, "length_incorrect", seed) - series(
                        reference, source, "length_incorrect", seed
                    )
                    ax.plot(
                        gap.index,
                        gap.to_numpy(),
                        color=look.colour,
                        linestyle=linestyle,
                        linewidth=theme.line * 0.7,
                        marker=SEED_MARKERS[seeds.index(seed) % len(SEED_MARKERS)],
                        markevery=_markevery(len(gap), seeds.index(seed), len(seeds)),
                        markersize=theme.marker,
                    )
        ax.axhline(0, color=MUTED, linewidth=theme.line * 0.6)
        ax.set_title(f"Incorrect length less {_variant_name(reference)}'s, per seed (tokens)")
    else:
        ax.set_axis_off()
    ax.set_xlabel("step")
    handles: list[Any] = [
        Line2D([], [], color=looks[label].colour, linewidth=theme.line, marker=looks[label].marker)
        for label in labels
    ]
    entries = [(names or {}).get(label, label) for label in labels]
    handles += [
        Line2D([], [], color=TEXT, linestyle="-", linewidth=theme.line),
        Line2D([], [], color=TEXT, linestyle=DASHED, linewidth=theme.line),
    ]
    entries += [f"network (TRL, mean of {window} steps)", "toy (exact)"]
    if len(seeds) > 1:
        handles += [
            Line2D(
                [],
                [],
                color=MUTED,
                marker=SEED_MARKERS[i % len(SEED_MARKERS)],
                linestyle="none",
                markersize=theme.marker,
            )
            for i in range(len(seeds))
        ]
        entries += [f"seed {seed}" for seed in seeds]
    _legend(fig, handles, entries, theme)
    steps = int(frame["step"].max())
    return _finish(
        fig,
        theme,
        f"TRL's GRPOTrainer on a tiny network beside the toy: {len(seeds)} seed"
        f"{'s' if len(seeds) > 1 else ''}, {steps} steps",
    )


def save_figure(fig: Figure, path: Path) -> Path:
    """One figure to `path` in the format its suffix names (.png, .svg or .pdf), atomically and
    without dates; the figure is closed."""
    kind = path.suffix.lstrip(".").lower()
    metadata = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None}}[kind]
    buffer = io.BytesIO()
    fig.savefig(buffer, format=kind, dpi=DPI, metadata=metadata)
    data = buffer.getvalue()
    write_atomic(path, _readable_svg(data.decode("utf-8")) if kind == "svg" else data)
    plt.close(fig)
    return path


# matplotlib names an SVG's markers, clip paths and hatches by a hash of their path and transform,
# whose floats carry the data limits to the last bit: a last-bit difference in the data (another
# CPU's exp) renames them all. Numbered in order of appearance instead, they depend on the drawing
# alone.
_SVG_ID = re.compile(r'(?<=id=")[hmp][0-9a-f]{10}(?=")|(?<=#)[hmp][0-9a-f]{10}\b')
# matplotlib writes a mathtext label as one <text> of one <tspan> per glyph, grouped by font, on
# lines of their own (before 3.10: one <tspan> per run of a font, its glyphs' x listed in one
# attribute, on one line); in reading order (by x), a <tspan> a glyph, without the whitespace between
# them, the text reads as written, for search, editing and translation. Each glyph keeps its position.
_MATH_TEXT = re.compile(r"(<text>\n)((?:[ \t]*<tspan [^\n]*</tspan>\n)+)")
_TSPAN = re.compile(r"<tspan ([^>]*)>([^<]*)</tspan>")
_TSPAN_X = re.compile(r'\bx="([^"]*)"')
_GLYPH = re.compile(r"&[^;]+;|.", re.DOTALL)  # a character, or one written as an XML entity


def _glyphs(tspan: re.Match[str]) -> list[tuple[float, str]]:
    """A <tspan>'s glyphs, each with its x, as <tspan>s of one glyph (the <tspan> itself if it is one)."""
    attributes, text = tspan.groups()
    found = _TSPAN_X.search(attributes)
    xs = found.group(1).split() if found else []
    glyphs = _GLYPH.findall(text)
    if found is None or len(xs) < 2 or len(xs) != len(glyphs):
        return [(float(xs[0]) if xs else 0.0, tspan.group(0))]
    before, after = attributes[: found.start(1)], attributes[found.end(1) :]
    return [
        (float(x), f"<tspan {before}{x}{after}>{glyph}</tspan>") for x, glyph in zip(xs, glyphs, strict=True)
    ]


def _readable_svg(svg: str) -> str:
    """The SVG with its hashed ids renamed m1, p1, h1, ... and its mathtext in reading order."""
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        old = match.group(0)
        if old not in names:
            names[old] = f"{old[0]}{sum(1 for n in names if n[0] == old[0]) + 1}"
        return names[old]

    def in_order(match: re.Match[str]) -> str:
        glyphs = [glyph for tspan in _TSPAN.finditer(match.group(2)) for glyph in _glyphs(tspan)]
        return match.group(1) + "".join(text for _, text in sorted(glyphs, key=lambda glyph: glyph[0])) + "\n"

    return _MATH_TEXT.sub(in_order, _SVG_ID.sub(rename, svg))


def _keyed_row(
    size: tuple[float, float],
    columns: int,
    keys: Mapping[int, Sequence[str]],
    theme: Theme,
    sharey: bool = False,
) -> tuple[Figure, list[Axes], dict[int, Axes]]:
    """A figure of `size` inches: a row of `columns` panels and, under panel i of `keys`, a frameless
    box as tall as the tallest of the legends `keys[i]` (their labels) needs, for `_key`: each
    legend under its own panel, where a figure-wide one would sit under whichever column is
    central."""
    width, height = size
    legend = max(_legend_shape(labels, theme, width / columns)[1] for labels in keys.values())
    fig = plt.figure(figsize=size, layout="constrained")
    grid = fig.add_gridspec(2, columns, height_ratios=[height - legend, legend])
    first = fig.add_subplot(grid[0, 0])
    others = [fig.add_subplot(grid[0, i], sharey=first if sharey else None) for i in range(1, columns)]
    axes = [first, *others]
    for ax in axes[1:] if sharey else []:
        ax.tick_params(labelleft=False)
    boxes = {}
    for index in keys:
        boxes[index] = fig.add_subplot(grid[1, index])
        boxes[index].axis("off")
    return fig, axes, boxes


def _key(box: Axes, handles: Sequence[Any], labels: Sequence[str], theme: Theme) -> None:
    """A legend at the top of `box` (`_keyed_row`), in as many columns as fit its panel."""
    width = box.get_position().width * _figure(box).get_figwidth()
    columns, _ = _legend_shape(labels, theme, width)
    box.legend(
        handles,
        labels,
        loc="upper center",
        ncol=columns,
        fontsize=theme.text,
        handlelength=2.6,
        borderaxespad=0,
        handler_map={tuple: HandlerTuple(ndivide=1)},
    )


def plot_families(data: dict[str, Any]) -> Figure:
    """The families study (`scripts/families_study.py`, its results/families.json): per variant,
    the final accuracy, E[L | correct] and E[L | incorrect], and the tokens generated per step,
    mean +- SE over seeds."""
    theme = THEMES["paper"]
    entries = {row: e for row, e in data["variants"].items() if not row.startswith("alpha_")}
    rows = list(entries)[::-1]  # the first row on top
    y = np.arange(len(rows))
    size = (theme.width, 0.26 * len(rows) + 1.9)
    outcomes = [_outcome_label(o) for o in OUTCOME_COLOURS]
    fig, axes, boxes = _keyed_row(size, 3, {1: outcomes}, theme, sharey=True)

    def bars(ax: Axes, key: str, scale: float, **style: Any) -> Any:
        mean = np.array([entries[r][key]["mean"] for r in rows]) * scale
        se = np.array([entries[r][key]["se"] for r in rows]) * scale
        return ax.errorbar(mean, y, xerr=se, linestyle="none", markersize=4, capsize=2, linewidth=1, **style)

    bars(axes[0], "accuracy_pct", 1.0, color=TEXT, marker="o")
    axes[0].set_xlabel("final accuracy (%)")
    handles = [
        bars(axes[1], f"length_{o}", 1.0, color=OUTCOME_COLOURS[o], marker=OUTCOME_MARKERS[o])
        for o in OUTCOME_COLOURS
    ]
    axes[1].set_xlabel(r"final $E[L]$ (ramble tokens)")
    bars(axes[2], "tokens_per_step", 1e-3, color=TEXT, marker="o")
    axes[2].set_xlabel("tokens per step (1000s)")
    axes[0].set_yticks(y, [entries[r]["label"] for r in rows])
    _key(boxes[1], handles, outcomes, theme)
    seeds = len(data["meta"]["seeds"])
    return _finish(fig, theme, f"The families at the article's settings: mean ± SE over {seeds} seeds")


def plot_length_power(data: dict[str, Any]) -> Figure:
    """The power family D_i = |o_i|^(1 - alpha) L^alpha against alpha (results/families.json):
    the final E[L | incorrect] and E[L | correct], and the exact cosine of E[g] to grad J at the
    initial policies and along training (each seed's mean over the checkpoints), mean +- SE over
    seeds."""
    theme = THEMES["paper"]
    alphas = np.array(data["meta"]["alphas"])
    entries = [data["variants"][f"alpha_{a:.1f}"] for a in alphas]
    keys = {
        0: [_outcome_label(o) for o in OUTCOME_COLOURS],
        1: ["cosine at the initial policy", "cosine along training (mean of checkpoints)"],
    }
    fig, axes, boxes = _keyed_row((theme.width, 4.3), 2, keys, theme)

    def curve(ax: Axes, values: list[dict[str, float]], colour: str, **style: Any) -> Any:
        mean, se = np.array([v["mean"] for v in values]), np.array([v["se"] for v in values])
        return ax.errorbar(
            alphas, mean, yerr=se, color=colour, markersize=4, capsize=2, linewidth=theme.line, **style
        )

    lengths = [
        curve(axes[0], [e[f"length_{o}"] for e in entries], OUTCOME_COLOURS[o], marker=OUTCOME_MARKERS[o])
        for o in OUTCOME_COLOURS
    ]
    axes[0].set_xlabel(r"$\alpha$ (0: per-response mean, 1: Dr. GRPO's constant)")
    axes[0].set_ylabel(r"final $E[L]$ (ramble tokens)")
    cosines = [
        curve(axes[1], [e["cosine_initial"] for e in entries], TEXT, marker="o"),
        curve(axes[1], [e["cosine_along_mean"] for e in entries], "#56B4E9", marker="s"),
    ]
    axes[1].set_xlabel(r"$\alpha$")
    axes[1].set_ylabel(r"$\cos(E[\hat g], \nabla J)$, exact")
    for index, handles in enumerate((lengths, cosines)):
        _key(boxes[index], handles, keys[index], theme)
    seeds = len(data["meta"]["seeds"])
    family = r"$D_i = |o_i|^{1-\alpha} L^{\alpha}$"
    title = f"The power family {family}: wrong answers' drift against the bias (mean ± SE over {seeds} seeds)"
    return _finish(fig, theme, title)


def plot_gpg_scale(data: dict[str, Any]) -> Figure:
    """The GPG study (`scripts/gpg_study.py`, its results/gpg_scale.json): GPG's scale N / M of each
    step's sampled batch against step (left), and the exact accuracy of GPG and of the same loss
    without N / M (right), mean +- 1 sd over seeds."""
    theme = THEMES["paper"]
    arms = data["arms"]
    names = [arms[arm]["variant"] for arm in ("gpg", "without_scale")]
    looks = variant_looks(names)
    labels = [arms[arm]["label"] for arm in ("gpg", "without_scale")]
    scale_label = "N / M of the step's batch in GPG's runs"
    fig, axes, boxes = _keyed_row((theme.width, 4.3), 2, {0: [scale_label], 1: labels}, theme)

    def band(ax: Axes, values: dict[str, list[float]], look: Look, label: str) -> Any:
        mean, sd = np.array(values["mean"]), np.array(values["sd"])
        steps = np.arange(len(mean))
        (line,) = ax.plot(
            steps, mean, color=look.colour, linestyle=look.linestyle, linewidth=theme.line, label=label
        )
        patch = ax.fill_between(steps, mean - sd, mean + sd, color=look.colour, alpha=0.16, linewidth=0)
        return (patch, line)

    scale = band(axes[0], data["scale"]["by_step"], Look(TEXT, "-", None), scale_label)
    axes[0].set_ylabel("N / M (responses / correct ones)")
    axes[0].set_ylim(bottom=0)
    curves = [
        band(axes[1], arms[arm]["accuracy_pct_by_step"], looks[name], label)
        for arm, name, label in zip(("gpg", "without_scale"), names, labels, strict=True)
    ]
    axes[1].set_ylabel("accuracy (%)")
    axes[1].set_ylim(0, 100)
    for ax in axes:
        ax.set_xlabel("training step")
    _key(boxes[0], [scale], [scale_label], theme)
    _key(boxes[1], curves, labels, theme)
    seeds = len(data["meta"]["seeds"])
    title = f"GPG's scale N / M over training, and accuracy with and without it ({band_meaning(seeds)})"
    return _finish(fig, theme, title)
