"""Figures of a results table: lengths by correctness, accuracy, and where the drift happens.

Plot functions take the tidy frame of `toyrl.train` (any subset of variants and seeds), an optional
`axes`, and return the figure; they compute nothing but means and spreads over seeds. Lines are the
exact expectations (mean over seeds, band +- 1 sd where there are several seeds); the sampled batch
values may be drawn faintly behind them. One colour per variant everywhere, from the Okabe-Ito
palette, which stays distinct under the common colour-vision deficiencies.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from toyrl.results import write_atomic

VARIANT_COLOURS = {
    "grpo": "#D55E00",  # vermillion
    "std_only": "#E69F00",  # orange
    "length_only": "#CC79A7",  # reddish purple
    "dr_grpo": "#0072B2",  # blue
}
# Variants that share a colour family would hide each other where their curves agree (GRPO and
# length-only do, as do std-only and Dr. GRPO): the un-scaled ones are dashed, drawn on top.
VARIANT_STYLES = {"grpo": "-", "std_only": "-", "length_only": (0, (4, 2)), "dr_grpo": (0, (4, 2))}
VARIANT_LABELS = {"grpo": "GRPO", "std_only": "std only", "length_only": "length only", "dr_grpo": "Dr. GRPO"}
FIGURE_NAMES = ["length_by_correctness", "accuracy", "branch_lengths"]
DPI = 150
WIDTH = 9.0  # inches: 1,350 px at DPI, sharp at README width

plt.rcParams.update(
    {
        "svg.hashsalt": "toyrl",  # stable element ids, so a re-rendered SVG is byte-identical
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "font.size": 10,
    }
)


def _figure(ax: Axes) -> Figure:
    """The top-level figure an axes belongs to (where layout and saving happen)."""
    return cast(Figure, ax.get_figure(root=True))


def _variants(frame: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(frame["variant"]))


def _band(ax: Axes, frame: pd.DataFrame, column: str, colour: str, label: str | None, **line: object) -> None:
    """Mean over seeds against step, with a +-1 sd band when there is more than one seed."""
    by_step = frame.groupby("step")[column]
    mean, sd = by_step.mean(), by_step.std()
    ax.plot(mean.index, mean.to_numpy(), color=colour, label=label, linewidth=1.8, **line)  # type: ignore[arg-type]
    if frame["seed"].nunique() > 1:
        ax.fill_between(mean.index, mean - sd, mean + sd, color=colour, alpha=0.18, linewidth=0)


def _batch(ax: Axes, frame: pd.DataFrame, column: str, colour: str) -> None:
    """The sampled batches' own values, mean over seeds, faint, behind the exact line."""
    values = frame.groupby("step")[column].mean()
    ax.plot(values.index, values.to_numpy(), color=colour, alpha=0.2, linewidth=0.6)


def _cap(frame_cap: int | None, ax: Axes) -> None:
    if frame_cap is not None:
        ax.axhline(frame_cap, color="0.4", linewidth=0.8, linestyle=":")
        ax.annotate(
            "cap", (0, frame_cap), xytext=(2, -10), textcoords="offset points", fontsize=8, color="0.4"
        )


def plot_length_by_correctness(
    frame: pd.DataFrame, axes: Sequence[Axes] | None = None, cap: int | None = None
) -> Figure:
    """One panel per variant: E[L | correct] (solid) and E[L | incorrect] (dashed) against step.

    The article's central picture: under GRPO and length-only the incorrect curve climbs toward the
    cap; under Dr. GRPO it does not outgrow the correct one.
    """
    variants = _variants(frame)
    if axes is None:
        columns = min(len(variants), 4)
        rows = -(-len(variants) // columns)
        fig, grid = plt.subplots(rows, columns, figsize=(WIDTH, 3.2 * rows), sharey=True, squeeze=False)
        axes = list(grid.ravel())
    fig = _figure(axes[0])
    for ax, variant in zip(axes, variants, strict=False):
        runs = frame[frame["variant"] == variant]
        colour = VARIANT_COLOURS.get(variant, "0.2")
        for column, style, label in [("correct", "-", "correct"), ("incorrect", "--", "incorrect")]:
            _batch(ax, runs, f"batch_length_{column}", colour)
            _band(ax, runs, f"length_{column}", colour, label, linestyle=style)
        _cap(cap, ax)
        ax.set_title(VARIANT_LABELS.get(variant, variant), color=colour, fontweight="bold")
        ax.set_xlabel("training step")
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("mean response length (tokens)")
    axes[0].legend(loc="lower right", frameon=False)
    fig.suptitle("Response length by correctness (exact expectation; faint: sampled batches)")
    fig.tight_layout()
    return fig


def plot_accuracy(frame: pd.DataFrame, ax: Axes | None = None) -> Figure:
    """Exact accuracy P(correct) against step, one line per variant (faint: batch accuracy)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(WIDTH * 0.6, 3.6))
    for variant in _variants(frame):
        runs = frame[frame["variant"] == variant]
        colour = VARIANT_COLOURS.get(variant, "0.2")
        _batch(ax, runs.assign(batch_accuracy=runs["batch_accuracy"] * 100), "batch_accuracy", colour)
        _band(
            ax,
            runs.assign(accuracy=runs["accuracy"] * 100),
            "accuracy",
            colour,
            VARIANT_LABELS.get(variant, variant),
        )
    ax.set_xlabel("training step")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend(frameon=False, loc="upper left")
    ax.set_title("Accuracy (exact; faint: sampled batches)")
    fig = _figure(ax)
    fig.tight_layout()
    return fig


def plot_branch_lengths(
    frame: pd.DataFrame, axes: Sequence[Axes] | None = None, cap: int | None = None
) -> Figure:
    """Where the drift happens: E[L | right approach] and E[L | wrong approach] against step.

    Each is set by one stop logit alone (phi_right, phi_wrong): E[min(K, cap)] = (1 - (1 - s)^cap) / s.
    The right panel is the length bias made visible: a wrong approach earns nothing at any length, so
    the true gradient never moves phi_wrong, yet length-normalised losses drive it down.
    """
    if axes is None:
        _, grid = plt.subplots(1, 2, figsize=(WIDTH, 3.6), sharey=True)
        axes = list(grid)
    fig = _figure(axes[0])
    titles = ["right approach (set by phi_right)", "wrong approach (set by phi_wrong): earns nothing"]
    for ax, branch, title in zip(axes, ["right", "wrong"], titles, strict=True):
        for variant in _variants(frame):
            runs = frame[frame["variant"] == variant]
            colour = VARIANT_COLOURS.get(variant, "0.2")
            label = VARIANT_LABELS.get(variant, variant)
            style = VARIANT_STYLES.get(variant, "-")
            _band(ax, runs, f"length_{branch}_approach", colour, label, linestyle=style)
        _cap(cap, ax)
        ax.set_title(title)
        ax.set_xlabel("training step")
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("expected length E[L | approach] (tokens)")
    fig.suptitle("Where the drift happens: each approach's expected length (exact)")
    axes[0].legend(frameon=False, loc="lower right")
    fig.tight_layout()
    return fig


def render_all(frame: pd.DataFrame, folder: Path, cap: int | None = None) -> list[Path]:
    """Every figure as PNG and SVG in `folder`; returns the paths written."""
    figures = {
        "length_by_correctness": plot_length_by_correctness(frame, cap=cap),
        "accuracy": plot_accuracy(frame),
        "branch_lengths": plot_branch_lengths(frame, cap=cap),
    }
    written = []
    for name, fig in figures.items():
        for kind, metadata in [("png", {"Software": None}), ("svg", {"Date": None})]:
            buffer = io.BytesIO()
            fig.savefig(buffer, format=kind, dpi=DPI, metadata=metadata)
            path = folder / f"{name}.{kind}"
            write_atomic(path, buffer.getvalue())
            written.append(path)
        plt.close(fig)
    return written


def figure_size_pixels(name: str, variants: int) -> tuple[int, int]:
    """(width, height) in pixels of a rendered PNG, for checks."""
    heights = {
        "length_by_correctness": 3.2 * -(-variants // min(variants, 4)),
        "accuracy": 3.6,
        "branch_lengths": 3.6,
    }
    width = WIDTH * 0.6 if name == "accuracy" else WIDTH
    return round(width * DPI), round(heights[name] * DPI)
