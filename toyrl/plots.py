"""Figures of a results table: lengths by correctness, accuracy, and where the drift happens.

Plot functions take the tidy frame of `toyrl.train` (any subset of variants and seeds), an optional
`axes`, and return the figure; they compute nothing but means and spreads over seeds. Lines are the
exact expectations (mean over seeds, band +- 1 sd where there are several seeds); the sampled batch
values may be drawn faintly behind them. One colour per variant everywhere, from the Okabe-Ito
palette, which stays distinct under the common colour-vision deficiencies.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import numpy as np
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
TEACHING_FIGURE_NAMES = ["token_weights", "difficulty"]
BIAS_FIGURE_NAME = "bias"
GROUP_STYLES = {8: ("o", "-"), 16: ("s", "--"), 64: ("^", ":")}
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


def plot_sweep(table: pd.DataFrame, axes_keys: list[str]) -> Figure:
    """Final accuracy and final E[L | incorrect] across a sweep's grid, one line per variant.

    x is the first grid axis (or the variant alone); one row of panels per combination of the other
    axes. Points are means over seeds with +-1 sd error bars.
    """
    last = table[table["step"] == table.groupby(["variant", *axes_keys])["step"].transform("max")]
    x_key = axes_keys[0] if axes_keys else None
    facets = axes_keys[1:]
    groups = list(last.groupby(facets, sort=False)) if facets else [((), last)]
    fig, grid = plt.subplots(len(groups), 2, figsize=(WIDTH, 3.2 * len(groups)), squeeze=False)
    for row, (facet, part) in zip(grid, groups, strict=True):
        for ax, column, label in (
            (row[0], "accuracy", "final accuracy (%)"),
            (row[1], "length_incorrect", "final E[L | incorrect] (tokens)"),
        ):
            scale = 100 if column == "accuracy" else 1
            for position, variant in enumerate(_variants(part)):
                runs = part[part["variant"] == variant]
                stats = runs.groupby(x_key if x_key else "variant", sort=False)[column].agg(["mean", "std"])
                xs = stats.index.to_numpy() if x_key else [position]
                ax.errorbar(
                    xs,
                    stats["mean"] * scale,
                    yerr=stats["std"].fillna(0) * scale,
                    marker="o",
                    capsize=3,
                    color=VARIANT_COLOURS.get(variant, None),
                    label=VARIANT_LABELS.get(variant, variant),
                )
            ax.set_ylabel(label)
            ax.set_xlabel(x_key or "variant")
            if (
                x_key
                and pd.api.types.is_numeric_dtype(part[x_key])
                and (part[x_key] > 0).all()
                and part[x_key].nunique() > 2
            ):
                ax.set_xscale("log")
                values = sorted(part[x_key].unique())
                ax.set_xticks(values, [f"{v:g}" for v in values])
                ax.minorticks_off()
            if facets:
                names = facet if isinstance(facet, tuple) else (facet,)
                ax.set_title(", ".join(f"{k} = {v}" for k, v in zip(facets, names, strict=True)), fontsize=9)
    grid[0][0].legend(frameon=False, fontsize=7)
    fig.suptitle("Sweep: final step, mean ± sd over seeds")
    fig.tight_layout()
    return fig


def plot_bias(table: pd.DataFrame, axes: Sequence[Axes] | None = None) -> Figure:
    """The bias over training: cosine of E[g] to grad J, and E[g]'s squared-norm share on phi_wrong.

    `table` is `toyrl.bias.bias_over_training` (one row per variant, seed and step); lines are
    means over seeds with a +-1 sd band. grad J has no phi_wrong component, so any share there is
    the length bias: the expected update making wrong answers longer (share u_w^2 / |u|^2, from 0
    to 1; its sign, always the lengthening one here, is in `toyrl bias`'s phi_wrong cosine).
    """
    if axes is None:
        _, grid = plt.subplots(1, 2, figsize=(WIDTH, 3.6))
        axes = list(grid)
    fig = _figure(axes[0])
    for variant in _variants(table):
        runs = table[table["variant"] == variant]
        colour, style = VARIANT_COLOURS.get(variant, "0.2"), VARIANT_STYLES.get(variant, "-")
        label = VARIANT_LABELS.get(variant, variant)
        _band(axes[0], runs, "cosine", colour, label, linestyle=style)
        _band(
            axes[1], runs.assign(share=runs["phi_wrong_share"] * 100), "share", colour, label, linestyle=style
        )
    axes[0].set_ylabel("cosine(E[g], grad J)")
    axes[0].set_ylim(-1.05, 1.05)
    axes[0].axhline(0, color="0.4", linewidth=0.8)
    axes[0].set_title("direction: 1 = the true gradient's", fontsize=10)
    axes[1].set_ylabel("share of |E[g]|² along phi_wrong (%)")
    axes[1].set_ylim(0, 100)
    axes[1].set_title("squared-norm share lengthening wrong answers", fontsize=10)
    for ax in axes:
        ax.set_xlabel("training step")
    # Between the zero line of the unbiased variants and the biased ones' band: over no data.
    axes[1].legend(frameon=False, fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 0.05), ncol=2)
    fig.suptitle("Exact expected update against the true gradient of expected accuracy")
    fig.tight_layout()
    return fig


def plot_token_weights(lengths: np.ndarray, curves: dict[str, np.ndarray], ax: Axes | None = None) -> Figure:
    """|per-token weight| against response length, correct and wrong, GRPO and Dr. GRPO (log-log).

    `curves` is `toyrl.examples.token_weight_curves(lengths)`. GRPO's weights fall as 1/|o|, so a
    long wrong answer is pushed down gently per token; Dr. GRPO's are flat in length.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(WIDTH * 0.6, 3.8))
    for name in ("grpo", "dr_grpo"):
        colour = VARIANT_COLOURS[name]
        for outcome, style, push in (("correct", "-", "pushed up"), ("wrong", "--", "pushed down")):
            label = f"{VARIANT_LABELS[name]}, {outcome} ({push})"
            ax.plot(lengths, np.abs(curves[f"{name}_{outcome}"]), color=colour, linestyle=style, label=label)
    for length, outcome in ((200, "correct"), (800, "wrong")):
        weight = abs(float(np.interp(length, lengths, curves[f"grpo_{outcome}"])))
        ax.plot([length], [weight], "o", color=VARIANT_COLOURS["grpo"])
        ax.annotate(
            f"{outcome}, {length} tokens:\n{weight:.5f}",
            (length, weight),
            xytext=(6, 4),
            textcoords="offset points",
            fontsize=8,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("response length |o| (tokens)")
    ax.set_ylabel("|per-token weight|")
    ax.set_title("Per-token weight: G = 8, two correct; Dr. GRPO L_norm = 2000", fontsize=10)
    ax.legend(frameon=False, fontsize=8, loc="upper right")
    fig = _figure(ax)
    fig.tight_layout()
    return fig


def plot_difficulty(profiles: dict[str, Any], axes: Sequence[Axes] | None = None) -> Figure:
    """A group's total update mass sum |A_i| against pass rate, relative to a 50/50 group.

    Left: at the observed pass rate k/G (the article's table, for each G). Right: in expectation
    over the group's draw, against the prompt's true pass rate p. The dotted line is the exact
    expected-gradient profile p(1 - p), which Dr. GRPO follows for every G and GRPO flattens.
    `profiles` is `toyrl.examples.difficulty_profiles`.
    """
    if axes is None:
        _, grid = plt.subplots(1, 2, figsize=(WIDTH, 3.8), sharey=True)
        axes = list(grid)
    fig = _figure(axes[0])
    pass_rates = profiles["pass_rates"]
    for ax in axes:
        ax.plot(pass_rates, profiles["gradient"], color="black", linestyle=":", label="exact gradient p(1-p)")
    for group, (marker, style) in GROUP_STYLES.items():
        for name in ("grpo", "dr_grpo"):
            colour, label = VARIANT_COLOURS[name], f"{VARIANT_LABELS[name]}, G = {group}"
            observed = profiles["observed"][group]
            axes[0].plot(
                observed["p"],
                observed[name],
                marker=marker,
                linestyle="none",
                color=colour,
                markersize=4,
                alpha=0.8,
                label=label,
            )
            axes[1].plot(
                pass_rates, profiles["expected"][group][name], linestyle=style, color=colour, label=label
            )
    axes[0].set_title("at the group's observed pass rate k/G", fontsize=10)
    axes[1].set_title("expected over the draw, at true pass rate p", fontsize=10)
    for ax in axes:
        ax.set_xlabel("pass rate")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.05)
    axes[0].set_ylabel("update mass / mass at 50%")
    axes[1].legend(frameon=False, fontsize=7, loc="lower center", ncol=2)
    fig.suptitle("Difficulty bias: GRPO's std division flattens the p(1 - p) profile, more so as G grows")
    fig.tight_layout()
    return fig


def render_bias(table: pd.DataFrame, folder: Path) -> list[Path]:
    """The bias-over-training figure as PNG and SVG in `folder`."""
    return save_figures({BIAS_FIGURE_NAME: plot_bias(table)}, folder)


def render_teaching(folder: Path) -> list[Path]:
    """The teaching figures (token weights, difficulty profile) as PNG and SVG in `folder`."""
    from toyrl.examples import difficulty_profiles, token_weight_curves

    lengths = np.geomspace(10, 2000, 200)
    figures = {
        "token_weights": plot_token_weights(lengths, token_weight_curves(lengths)),
        "difficulty": plot_difficulty(difficulty_profiles(list(GROUP_STYLES), np.linspace(0, 1, 201))),
    }
    return save_figures(figures, folder)


def render_all(frame: pd.DataFrame, folder: Path, cap: int | None = None) -> list[Path]:
    """Every figure as PNG and SVG in `folder`; returns the paths written."""
    figures = {
        "length_by_correctness": plot_length_by_correctness(frame, cap=cap),
        "accuracy": plot_accuracy(frame),
        "branch_lengths": plot_branch_lengths(frame, cap=cap),
    }
    return save_figures(figures, folder)


def save_figures(figures: dict[str, Figure], folder: Path) -> list[Path]:
    """Each figure as NAME.png and NAME.svg in `folder` (atomically, without dates: re-rendering
    gives the same bytes); the figures are closed. Returns the paths written."""
    written = []
    for name, fig in figures.items():
        for kind, metadata in [("png", {"Software": None}), ("svg", {"Date": None})]:
            buffer = io.BytesIO()
            fig.savefig(buffer, format=kind, dpi=DPI, metadata=metadata)
            path = folder / f"{name}.{kind}"
            data = buffer.getvalue()
            write_atomic(path, _numbered_ids(data.decode("utf-8")) if kind == "svg" else data)
            written.append(path)
        plt.close(fig)
    return written


# matplotlib names an SVG's markers and clip paths by a hash of their path and transform, whose
# floats carry the data limits to the last bit: a last-bit difference in the data (another CPU's
# exp) renames them all. Numbered in order of appearance instead, they depend on the drawing alone.
_SVG_ID = re.compile(r'(?<=id=")[mp][0-9a-f]{10}(?=")|(?<=#)[mp][0-9a-f]{10}\b')


def _numbered_ids(svg: str) -> str:
    """The SVG with its hashed marker and clip-path ids renamed m1, m2, ... and p1, p2, ..."""
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        old = match.group(0)
        if old not in names:
            names[old] = f"{old[0]}{sum(1 for n in names if n[0] == old[0]) + 1}"
        return names[old]

    return _SVG_ID.sub(rename, svg)


def figure_size_pixels(name: str, variants: int) -> tuple[int, int]:
    """(width, height) in pixels of a rendered PNG, for checks; `variants` matters for the panel grid."""
    if name == "length_by_correctness":
        height = 3.2 * -(-variants // min(variants, 4))
    else:
        height = {
            "token_weights": 3.8,
            "difficulty": 3.8,
            "accuracy": 3.6,
            "branch_lengths": 3.6,
            "bias": 3.6,
        }[name]
    width = WIDTH * 0.6 if name in ("accuracy", "token_weights") else WIDTH
    return round(width * DPI), round(height * DPI)


def plot_families(data: dict[str, Any]) -> Figure:
    """The families study (`scripts/families_study.py`, its results/families.json): per variant,
    the final accuracy, E[L | correct] and E[L | incorrect], and the tokens generated per step,
    mean +- SE over seeds."""
    entries = {row: e for row, e in data["variants"].items() if not row.startswith("alpha_")}
    rows = list(entries)[::-1]  # the first row on top
    y = np.arange(len(rows))
    fig, axes = plt.subplots(1, 3, figsize=(WIDTH, 0.26 * len(rows) + 1.4), sharey=True)

    def bars(ax: Axes, key: str, scale: float, **style: Any) -> None:
        mean = np.array([entries[r][key]["mean"] for r in rows]) * scale
        se = np.array([entries[r][key]["se"] for r in rows]) * scale
        ax.errorbar(mean, y, xerr=se, fmt="o", markersize=4, capsize=2, linewidth=1, **style)

    bars(axes[0], "accuracy_pct", 1.0, color="0.2")
    axes[0].set_xlabel("final accuracy (%)")
    bars(axes[1], "length_incorrect", 1.0, color=VARIANT_COLOURS["grpo"], label="incorrect")
    bars(axes[1], "length_correct", 1.0, color=VARIANT_COLOURS["dr_grpo"], label="correct")
    axes[1].set_xlabel("final E[L] (ramble tokens)")
    axes[1].legend(loc="lower right", fontsize=8)
    bars(axes[2], "tokens_per_step", 1e-3, color="0.2")
    axes[2].set_xlabel("tokens per step (1000s)")
    axes[0].set_yticks(y, [entries[r]["label"] for r in rows], fontsize=8)
    seeds = len(data["meta"]["seeds"])
    fig.suptitle(f"The families at the article's settings: mean ± SE over {seeds} seeds", fontsize=10)
    fig.tight_layout()
    return fig


def plot_length_power(data: dict[str, Any]) -> Figure:
    """The power family D_i = |o_i|^(1 - alpha) L^alpha against alpha (results/families.json):
    the final E[L | incorrect] and E[L | correct], and the exact cosine of E[g] to grad J at the
    initial policies and along training (each seed's mean over the checkpoints), mean +- SE over
    seeds."""
    alphas = np.array(data["meta"]["alphas"])
    entries = [data["variants"][f"alpha_{a:.1f}"] for a in alphas]
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 3.6))

    def curve(ax: Axes, values: list[dict[str, float]], colour: str, label: str, **style: Any) -> None:
        mean, se = np.array([v["mean"] for v in values]), np.array([v["se"] for v in values])
        ax.errorbar(
            alphas, mean, yerr=se, color=colour, label=label, marker="o", markersize=3, capsize=2, **style
        )

    curve(axes[0], [e["length_incorrect"] for e in entries], VARIANT_COLOURS["grpo"], "incorrect")
    curve(axes[0], [e["length_correct"] for e in entries], VARIANT_COLOURS["dr_grpo"], "correct")
    axes[0].set_xlabel("alpha (0: per-response mean, 1: Dr. GRPO's constant)")
    axes[0].set_ylabel("final E[L | ...] (ramble tokens)")
    axes[0].legend(fontsize=8)
    curve(axes[1], [e["cosine_initial"] for e in entries], "0.2", "at the initial policy")
    curve(
        axes[1],
        [e["cosine_along_mean"] for e in entries],
        "#009E73",
        "along training (mean of checkpoints)",
        linestyle="--",
    )
    axes[1].set_xlabel("alpha")
    axes[1].set_ylabel("cos(E[g], grad J), exact")
    axes[1].legend(fontsize=8)
    seeds = len(data["meta"]["seeds"])
    fig.suptitle(
        f"The power family: the drift of wrong answers against the bias ({seeds} seeds)", fontsize=10
    )
    fig.tight_layout()
    return fig
