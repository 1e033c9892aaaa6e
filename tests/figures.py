"""What a figure shows, as data: checks of figures that hold on every matplotlib the package allows
(pyproject.toml: matplotlib>=3.8), where a figure's bytes hold only under the release that drew it.

`figure_summary(fig)` reads a Figure as toyrl's plot functions return it (computing is kept apart
from plotting): its size in inches, and for each axes its position, limits, scales, tick labels,
texts, legend entries and what it draws (each line's data, colour, style and marker; each
collection's vertices, offsets and colours; each patch's rectangle), with the figure's own texts and
legends. `differences(expected, actual)` compares two summaries: texts, tick labels, scales, styles,
colours and counts exactly; data to `DATA` (relative: a mean taken by another numpy may differ in
its last bits); positions to `LAYOUT` of the figure, and limits to `LAYOUT` of their span (where a
layout engine puts an axes or a text, and how far toyrl widens an axis for the labels at the curves'
ends, depend on the release's font metrics: by up to 0.031 of the figure between 3.8.4 and 3.11.2).
Long arrays are kept as fingerprints (`_data`), so that the committed summaries stay small.

The committed figures (figures/NAME.png and .svg) are described in tests/figures.json: each one's
summary, rebuilt from the committed data it is drawn from (`COMMITTED`), and the SHA-256 of its files.
`python -m tests.figures` writes it, and only when every figure it rebuilds renders to the committed
bytes (run it under the matplotlib that drew them, after regenerating the figures): so a summary is
that of the committed file, and tests/test_figures.py checks on any matplotlib that the committed
files are those (their hashes) and that the figures rebuilt from the committed data show the same.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colors import to_hex, to_rgba_array
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Text

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "figures"
SUMMARIES = Path(__file__).resolve().with_name("figures.json")
DATA = 1e-9  # relative, for data and sizes
LAYOUT = 0.05  # of the figure's width or height for positions, of the span for limits


def _number(value: Any) -> float | None:
    """A float for JSON: None for NaN (a gap in a line), ±1e308 for an infinity."""
    number = float(value)
    if math.isnan(number):
        return None
    return math.copysign(1e308, number) if math.isinf(number) else number


def _numbers(values: Any) -> list[Any]:
    array = np.asarray(values, dtype=float)
    return [_numbers(row) for row in array] if array.ndim > 1 else [_number(v) for v in array]


def _data(values: Any) -> Any:
    """A drawn array, whole when short, else its fingerprint: its length, gaps, values at nine
    evenly spaced places, sum, extremes and total variation (a change to one value changes the sum
    or the variation); an array of points, a fingerprint a coordinate."""
    array = np.asarray(values, dtype=float)
    if array.ndim == 2:
        return [_data(column) for column in array.T]
    if len(array) <= 12:
        return _numbers(array)
    finite = array[np.isfinite(array)]
    places = np.linspace(0, len(array) - 1, 9).round().astype(int)
    return {
        "count": len(array),
        "gaps": int(len(array) - len(finite)),
        "at": _numbers(array[places]),
        "sum": _number(finite.sum()) if len(finite) else None,
        "extremes": _numbers([finite.min(), finite.max()]) if len(finite) else [],
        "variation": _number(np.abs(np.diff(finite)).sum()) if len(finite) else None,
    }


def _colour(colour: Any) -> str:
    return to_hex(colour, keep_alpha=True)


def _label(artist: Any) -> str:
    """An artist's legend label; '' for matplotlib's own placeholder names ('_child3')."""
    label = str(artist.get_label())
    return "" if label.startswith("_") else label


def _box(fig: Figure, artist: Any) -> list[float | None]:
    """Where an artist is drawn, in fractions of the figure: [x0, y0, x1, y1]."""
    box = artist.get_window_extent().transformed(fig.transFigure.inverted())
    return [_number(box.x0), _number(box.y0), _number(box.x1), _number(box.y1)]


def _texts(fig: Figure, texts: list[Text]) -> list[dict[str, Any]]:
    """The visible, non-empty texts, each with its centre in fractions of the figure."""
    shown = []
    for text in texts:
        if not text.get_visible() or not text.get_text():
            continue
        box = text.get_window_extent().transformed(fig.transFigure.inverted())
        centre = [_number((box.x0 + box.x1) / 2), _number((box.y0 + box.y1) / 2)]
        shown.append({"text": text.get_text(), "centre": centre, "colour": _colour(text.get_color())})
    return shown


def _ticks(axis: Any) -> list[list[Any]]:
    """The labelled ticks inside the axis's view: [location, label], major then minor."""
    low, high = sorted(axis.get_view_interval())
    slack = (high - low) * 1e-9
    labelled = []
    for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
        location = tick.get_loc()
        if low - slack <= location <= high + slack and tick.label1.get_visible() and tick.label1.get_text():
            labelled.append([_number(location), tick.label1.get_text()])
    return labelled


def _legend(fig: Figure, legend: Any) -> dict[str, Any]:
    colours = []
    for handle in legend.legend_handles:
        colour = to_rgba_array(handle.get_color() if hasattr(handle, "get_color") else handle.get_facecolor())
        colours.append(_colour(colour[0]) if len(colour) else "")
    return {
        "entries": [text.get_text() for text in legend.get_texts()],
        "colours": colours,
        "title": legend.get_title().get_text(),
        "box": _box(fig, legend),
    }


def _collection(collection: Any) -> dict[str, Any]:
    faces = to_rgba_array(collection.get_facecolor())
    edges = to_rgba_array(collection.get_edgecolor())
    offsets = np.asarray(collection.get_offsets(), dtype=float).reshape(-1, 2)
    return {
        "label": _label(collection),
        "paths": [_data(path.vertices) for path in collection.get_paths()],
        "offsets": _data(offsets) if len(collection.get_paths()) <= 1 or len(offsets) > 1 else [],
        "faces": [_colour(c) for c in faces],
        "edges": [_colour(c) for c in edges],
    }


def _patch(patch: Any) -> dict[str, Any]:
    shape: dict[str, Any] = {"face": _colour(patch.get_facecolor()), "label": _label(patch)}
    if isinstance(patch, Rectangle):
        shape["rectangle"] = _numbers([patch.get_x(), patch.get_y(), patch.get_width(), patch.get_height()])
    else:
        shape["vertices"] = _data(patch.get_path().vertices)
    return shape


def _axes(fig: Figure, ax: Axes) -> dict[str, Any]:
    texts = [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts]  # type: ignore[attr-defined]
    legend = ax.get_legend()
    return {
        "position": _numbers(ax.get_position().bounds),
        "visible": ax.get_visible() and ax.axison,
        "xlim": _numbers(ax.get_xlim()),
        "ylim": _numbers(ax.get_ylim()),
        "scales": [ax.get_xscale(), ax.get_yscale()],
        "xticks": _ticks(ax.xaxis),
        "yticks": _ticks(ax.yaxis),
        "texts": _texts(fig, texts),
        "lines": [
            {
                "label": _label(line),
                "x": _data(line.get_xdata()),
                "y": _data(line.get_ydata()),
                "colour": _colour(line.get_color()),
                "style": str(line.get_linestyle()),
                "width": _number(line.get_linewidth()),
                "marker": str(line.get_marker()),
            }
            for line in ax.lines
        ],
        "collections": [_collection(collection) for collection in ax.collections],
        "patches": [_patch(patch) for patch in ax.patches],
        "legend": _legend(fig, legend) if legend is not None else None,
    }


def figure_summary(fig: Figure) -> dict[str, Any]:
    """What `fig` shows, as JSON-ready data (after drawing it, so that its layout is done)."""
    fig.canvas.draw()
    return {
        "size_inches": _numbers(fig.get_size_inches()),
        "texts": _texts(fig, [*fig.texts, *([fig._suptitle] if fig._suptitle else [])]),  # type: ignore[attr-defined]
        "legends": [_legend(fig, legend) for legend in fig.legends],
        "axes": [_axes(fig, ax) for ax in fig.axes],
    }


# --- comparing two summaries ----------------------------------------------------------------------------

GEOMETRY = {"position", "centre", "box"}  # numbers placed by the layout, in fractions of the figure
LIMITS = {"xlim", "ylim"}  # widened by toyrl for the labels at the curves' ends: layout too
SETTINGS = {"width"}  # a line's width is set, not computed


def differences(expected: Any, actual: Any, where: str = "figure") -> Iterator[str]:
    """Each place where `actual` does not show what `expected` does: texts, styles, colours and
    counts exactly, data to DATA (relative), positions to LAYOUT (of the figure), limits to LAYOUT
    of the axis's span."""
    yield from _differ(expected, actual, where, lambda a, b: math.isclose(a, b, rel_tol=DATA))


def _within(tolerance: float) -> Callable[[float, float], bool]:
    return lambda a, b: abs(a - b) <= tolerance


def _differ(expected: Any, actual: Any, where: str, close: Callable[[float, float], bool]) -> Iterator[str]:
    if isinstance(expected, dict) and isinstance(actual, dict):
        if expected.keys() != actual.keys():
            yield f"{where}: keys {sorted(expected)} against {sorted(actual)}"
            return
        for key, value in expected.items():
            inner = close
            if key in GEOMETRY:
                inner = _within(LAYOUT)
            elif key in LIMITS and len(value) == 2:
                inner = _within(LAYOUT * abs(value[1] - value[0]))
            elif key in SETTINGS:
                inner = float.__eq__
            yield from _differ(value, actual[key], f"{where}.{key}", inner)
    elif isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            yield f"{where}: {len(expected)} items against {len(actual)}"
            return
        for index, (a, b) in enumerate(zip(expected, actual, strict=True)):
            yield from _differ(a, b, f"{where}[{index}]", close)
    elif isinstance(expected, float) and isinstance(actual, float):
        if not close(expected, actual):
            yield f"{where}: {expected!r} against {actual!r}"
    elif type(expected) is not type(actual) or expected != actual:
        yield f"{where}: {expected!r} against {actual!r}"


def assert_shows(expected: dict[str, Any], fig: Figure, name: str) -> None:
    """`fig` shows what the summary `expected` describes (the first few differences otherwise);
    the figure is closed."""
    found = list(differences(expected, figure_summary(fig), name))
    plt.close(fig)
    assert not found, f"{len(found)} differences: " + "; ".join(found[:5])


# --- the committed figures and the data they are drawn from -------------------------------------------


def article_figures() -> dict[str, Callable[[], Figure]]:
    """`toyrl reproduce`'s figures, as `toyrl.plot.save` draws them from results/article.csv:
    the table's, the bias figure (its runs replayed) and the teaching figures."""
    from toyrl import plots
    from toyrl.bias import bias_over_training
    from toyrl.config import Config
    from toyrl.results import load_results

    frame, _ = load_results(ROOT / "results" / "article.csv")
    meta = frame.attrs["toyrl"]
    config = Config.from_dict(meta["config"])
    jobs = plots.figure_jobs(frame, cap=config.cap, min_length=config.min_length)
    jobs += plots.bias_jobs(bias_over_training(frame, config, mean_field=bool(meta.get("mean_field"))))
    jobs += plots.teaching_jobs()
    return {job.name: functools.partial(job.draw, *job.args, **job.kwargs) for job in jobs}


def study_figures() -> dict[str, Callable[[], Figure]]:
    """The studies' figures, as their scripts' --plot-only draw them from the committed results."""
    from toyrl import plots

    families = json.loads((ROOT / "results" / "families.json").read_text())
    gpg = json.loads((ROOT / "results" / "gpg_scale.json").read_text())
    bridge = load_script("bridge_study")
    table = pd.read_csv(ROOT / "results" / "bridge_study.csv")
    return {
        "families": lambda: plots.plot_families(families),
        "length_power": lambda: plots.plot_length_power(families),
        "gpg_scale": lambda: plots.plot_gpg_scale(gpg),
        "bridge_study": lambda: plots.plot_bridge(
            table, bridge.REFERENCE, bridge.WINDOW, names=bridge.figure_names(bridge.LABELS)
        ),
    }


DRAWN_PER_FILE = {
    "bridge_study"
}  # scripts/bridge_study.py draws a figure for each file, the others one for both
COMMITTED = {"article": article_figures, "studies": study_figures}  # each committed figure, by group


def committed_summaries() -> dict[str, Any]:
    return json.loads(SUMMARIES.read_text())


def file_hashes(name: str, folder: Path | None = None) -> dict[str, str]:
    """The SHA-256 of NAME.png and NAME.svg in `folder` (the committed figures' by default)."""
    return {
        f"{name}.{kind}": hashlib.sha256(((folder or FIGURES) / f"{name}.{kind}").read_bytes()).hexdigest()
        for kind in ("png", "svg")
    }


def write_summaries() -> int:
    """tests/figures.json from every committed figure rebuilt from its data, only if each rebuilt
    figure renders to the committed bytes (else one line per figure that does not, exit 1)."""
    from toyrl.plots import figure_files, save_figure

    figures: dict[str, Any] = {}
    stale = []
    with tempfile.TemporaryDirectory() as folder:
        for group in COMMITTED.values():
            for name, build in group().items():
                if name in DRAWN_PER_FILE:
                    for kind in ("png", "svg"):
                        save_figure(build(), Path(folder) / f"{name}.{kind}")
                else:
                    plots_files = figure_files(name, build())
                    for filename, data in plots_files:
                        path = Path(folder) / filename
                        path.write_bytes(data if isinstance(data, bytes) else data.encode())
                drawn = file_hashes(name, Path(folder))
                if drawn != file_hashes(name):
                    stale.append(name)
                fig = build()
                figures[name] = {"files": drawn, "summary": figure_summary(fig)}
                plt.close(fig)
    if stale:
        print(
            f"tests/figures.py: {', '.join(stale)} not the committed bytes under matplotlib "
            f"{matplotlib.__version__}: regenerate the figures (under the matplotlib that drew them)",
            file=sys.stderr,
        )
        return 1
    lines = [f"{json.dumps(name)}: {json.dumps(figures[name], sort_keys=True)}" for name in sorted(figures)]
    text = f'{{"matplotlib": "{matplotlib.__version__}", "figures": {{\n' + ",\n".join(lines) + "\n}}\n"
    SUMMARIES.write_text(text)  # a figure a line
    print(f"wrote {SUMMARIES}: {len(figures)} figures")
    return 0


if __name__ == "__main__":
    matplotlib.use("Agg")
    sys.exit(write_summaries())
