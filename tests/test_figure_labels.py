"""The curves' end labels of `toyrl plot`'s figures, measured on the drawn figure: every curve named
at its end, no two labels overlapping, none leaving its panel, none on a line or a band; for 1, 4
and 8 variants, on paper and on slides. And what a figure's bands are, said in its legend."""

import itertools
import re
from collections.abc import Iterator
from pathlib import Path

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.transforms import Bbox

import toyrl
import toyrl.plot
from toyrl import plots
from toyrl.bias import bias_over_training
from toyrl.config import Config
from toyrl.examples import difficulty_profiles, token_weight_curves
from toyrl.results import load_results
from toyrl.variants import ARTICLE, display_name

ROOT = Path(__file__).resolve().parent.parent
EIGHT = [*ARTICLE, "trl_default", "verl_default", "oat_grpo", "verl_dr_grpo"]


@pytest.fixture(scope="module")
def article() -> pd.DataFrame:
    frame, meta = load_results(ROOT / "results" / "article.csv")
    frame.attrs["toyrl"] = meta
    return frame


@pytest.fixture(scope="module")
def eight() -> pd.DataFrame:
    return toyrl.run(EIGHT, seeds=2, steps=12)


def frames(article: pd.DataFrame, eight: pd.DataFrame) -> dict[int, pd.DataFrame]:
    return {1: article[article["variant"] == "dr_grpo"], 4: article, 8: eight}


def drawn(frame: pd.DataFrame, style: str) -> dict[str, Figure]:
    figures = {
        "length_by_correctness": plots.plot_length_by_correctness(frame, style=style),
        "accuracy": plots.plot_accuracy(frame, style=style),
        "branch_lengths": plots.plot_branch_lengths(frame, style=style),
    }
    if set(ARTICLE) <= set(frame["variant"]):
        figures["length_2x2"] = plots.plot_length_2x2(frame, style=style)
    for fig in figures.values():
        fig.canvas.draw()
    return figures


@pytest.fixture(scope="module", params=[(n, style) for n in (1, 4, 8) for style in plots.STYLES])
def case(
    request: pytest.FixtureRequest, article: pd.DataFrame, eight: pd.DataFrame
) -> Iterator[tuple[pd.DataFrame, dict[str, Figure]]]:
    count, style = request.param
    frame = frames(article, eight)[count]
    figures = drawn(frame, style)
    yield frame, figures
    for fig in figures.values():
        plt.close(fig)


def labels_of(ax: Axes) -> list[Text]:
    """The texts drawn inside a panel (end labels, the cap's and min_length's names)."""
    return [text for text in ax.texts if text.get_visible() and text.get_text().strip()]


def line_points(ax: Axes, line: plt.Line2D) -> tuple[np.ndarray, float]:
    """A line as drawn: points every pixel or closer along it (display coordinates), and how far
    its ink reaches from them (half its width, or its markers' radius), in pixels."""
    points = line.get_transform().transform(np.asarray(line.get_xydata(), dtype=float))
    points = points[np.isfinite(points).all(axis=1)]
    dense = [points[:1]]
    for start, end in itertools.pairwise(points):
        count = max(2, int(np.hypot(*(end - start))) + 2)
        dense.append(start + np.linspace(0, 1, count)[:, None] * (end - start))
    pixels = ax.figure.dpi / 72
    reach = max(line.get_linewidth(), line.get_markersize() if line.get_marker() not in (None, "None") else 0)
    return np.concatenate(dense), reach / 2 * pixels


def grid(box: Bbox, step: float = 1.0) -> np.ndarray:
    xs = np.arange(box.x0, box.x1 + step, step)
    ys = np.arange(box.y0, box.y1 + step, step)
    return np.array([(x, y) for x in xs for y in ys])


def problems(name: str, fig: Figure) -> list[str]:
    """What is wrong with the labels inside the panels of a drawn figure, as sentences."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    found = []
    for index, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        panel = ax.get_window_extent(renderer)
        texts = labels_of(ax)
        boxes = [text.get_window_extent(renderer) for text in texts]
        for text, box in zip(texts, boxes, strict=True):
            where = f"{name} panel {index} {text.get_text()!r}"
            if not (panel.x0 - 0.5 <= box.x0 and box.x1 <= panel.x1 + 0.5):
                found.append(f"{where} leaves its panel sideways")
            if not (panel.y0 - 0.5 <= box.y0 and box.y1 <= panel.y1 + 0.5):
                found.append(f"{where} leaves its panel vertically")
            for line in ax.lines:
                if not line.get_visible():
                    continue
                points, reach = line_points(ax, line)
                inside = (
                    (points[:, 0] > box.x0 - reach)
                    & (points[:, 0] < box.x1 + reach)
                    & (points[:, 1] > box.y0 - reach)
                    & (points[:, 1] < box.y1 + reach)
                )
                if inside.any():
                    found.append(f"{where} sits on the line {line.get_label()!r}")
            for band in ax.collections:
                if not isinstance(band, PolyCollection) or not band.get_visible():
                    continue
                samples = grid(box)
                for path in band.get_paths():
                    shape = band.get_transform().transform_path(path)
                    if shape.contains_points(samples).any():
                        found.append(f"{where} sits on a band")
                        break
        for i in range(len(texts)):
            for j in range(i):
                if boxes[i].overlaps(boxes[j]):
                    pair = f"{texts[i].get_text()!r} overlaps {texts[j].get_text()!r}"
                    found.append(f"{name} panel {index}: {pair}")
    return found


def test_no_label_overlaps_another_leaves_its_panel_or_sits_on_a_line_or_band(
    case: tuple[pd.DataFrame, dict[str, Figure]],
) -> None:
    _, figures = case
    found = [problem for name, fig in figures.items() for problem in problems(name, fig)]
    assert not found, found


def named(ax: Axes) -> list[str]:
    return [" ".join(text.get_text().split()) for text in labels_of(ax)]


def test_every_curve_is_named_at_its_end(case: tuple[pd.DataFrame, dict[str, Figure]]) -> None:
    """Correct and incorrect in each length panel (solid and dashed lines); every variant's display
    name at its accuracy and length curves' ends and its final stop probability at that curve's,
    except where the labels could not fit a panel's height (eight variants' names on a slide's
    2.5-inch panels of branch lengths): there the legend names them and no panel does."""
    frame, figures = case
    variants = list(dict.fromkeys(frame["variant"]))
    slides = figures["accuracy"].get_figwidth() > 10
    for name in ("length_by_correctness", "length_2x2"):
        for ax in figures[name].axes if name in figures else []:
            if not ax.get_visible():
                continue
            assert {"correct", "incorrect"} <= set(named(ax)), (name, named(ax))
            styles = {line.get_label(): line.get_linestyle() for line in ax.lines}
            assert styles[r"$E[L \mid \mathrm{correct}]$"] == "-"
            assert styles[r"$E[L \mid \mathrm{incorrect}]$"] == "--"
    names = {" ".join(plots.variant_label(v).split()) for v in variants}
    assert names <= set(named(figures["accuracy"].axes[0])), named(figures["accuracy"].axes[0])
    branches = figures["branch_lengths"]
    if len(variants) == 8 and slides:
        legend = {" ".join(text.get_text().split()) for text in branches.legends[0].get_texts()}
        assert legend == names and not any(named(ax) for ax in branches.axes[2:])
        return
    for ax in branches.axes[:2]:
        assert names <= set(named(ax)), named(ax)
    for ax in branches.axes[2:]:  # the final stop probabilities, '1/664'
        assert sum(text.startswith("1/") for text in named(ax)) == len(variants), named(ax)


def test_the_legend_says_what_the_bands_are_and_keys_nothing_named(
    case: tuple[pd.DataFrame, dict[str, Figure]],
) -> None:
    frame, figures = case
    seeds = frame["seed"].nunique()
    for name, fig in figures.items():
        entries = [text.get_text() for legend in fig.legends for text in legend.get_texts()]
        bands = any(isinstance(c, PolyCollection) for ax in fig.axes for c in ax.collections)
        drawn = {text for ax in fig.axes for text in named(ax)}
        if {"correct", *(" ".join(plots.variant_label(v).split()) for v in frame["variant"])} & drawn:
            assert entries == ([f"band: mean ± 1 sd over {seeds} seeds"] if bands else []), (name, entries)


def test_display_names_title_the_panels(article: pd.DataFrame) -> None:
    fig = plots.plot_length_2x2(article)
    for ax, variant in zip(fig.axes, ["grpo", "std_only", "length_only", "dr_grpo"], strict=True):
        assert " ".join(ax.get_title().split()).endswith(display_name(variant))
    assert display_name("length_only") == "GRPO without std division"
    plt.close(fig)


def test_spread_keeps_boxes_apart_and_in_range() -> None:
    """Exact cases of the 1-D placement: boxes already apart stay; two wanting one place share it
    evenly; a stack at the top is pushed down into range; boxes that cannot fit start at the
    bottom."""
    assert plots._spread([10, 30], [5, 5], 0, 100) == [10, 30]
    assert plots._spread([20, 20], [10, 10], 0, 100) == [15, 25]
    assert plots._spread([99, 99, 99], [10, 10, 10], 0, 100) == [75, 85, 95]
    assert plots._spread([50, 50], [60, 60], 0, 100) == [30, 90]


def test_the_check_finds_a_label_on_a_line_on_a_band_overlapping_or_outside() -> None:
    """`problems` on a figure drawn wrong on purpose: it names each fault."""
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 10], [5, 5], label="level")
    ax.fill_between([0, 10], [0, 0], [2, 2])
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    ax.text(2, 5, "on the line", va="center")
    ax.text(2, 1, "on the band", va="center")
    ax.text(6, 8, "first", va="center")
    ax.text(6.2, 8, "second", va="center")
    ax.text(9.5, 9.8, "outside")
    fig.canvas.draw()
    found = " | ".join(problems("wrong", fig))
    assert "'on the line' sits on the line 'level'" in found
    assert "'on the band' sits on a band" in found
    assert "'second' overlaps 'first'" in found
    assert "'outside' leaves its panel sideways" in found and "'outside' leaves its panel vertically" in found
    assert "'first' sits" not in found
    plt.close(fig)


@pytest.mark.parametrize("style", plots.STYLES)
def test_token_weights_annotates_in_its_axis_units(style: str) -> None:
    """Each weight written out is the drawn point's height on the axis it labels (×10⁻³), to the
    digits written."""
    lengths = np.linspace(1, 1500, 300)
    norm = plots.worked_length_norm()
    fig = plots.plot_token_weights(lengths, token_weight_curves(lengths, length_norm=norm), norm, style=style)
    weights = fig.axes[0]
    assert "10^{-3}" in weights.get_ylabel()
    dots = {
        (float(line.get_xdata()[0]), float(line.get_ydata()[0]))
        for line in weights.lines
        if len(line.get_xdata()) == 1
    }
    note = " ".join(text.get_text() for text in weights.texts)
    written = [
        (float(number.replace("−", "-")), len(number.split(".")[1]))
        for number in re.findall(r"[+−]\d+\.\d+", note)
    ]
    assert len(written) == len(dots) == 4, (note, dots)
    for value, digits in written:
        assert any(abs(y - value) <= 0.5 * 10**-digits for _, y in dots), (value, dots)
    plt.close(fig)


def test_save_writes_the_teaching_figures_in_the_style_asked(article: pd.DataFrame, tmp_path: Path) -> None:
    """`toyrl plot --style slides` (toyrl.plot.save) makes every figure a 16:9 slide, the teaching
    figures too (on paper, the default: tests/test_parallel_figures.py's first test)."""
    frame = article[article["step"] <= 20]
    written = {path.name for path in toyrl.plot.save(frame, tmp_path / "slides", style="slides")}
    for name in ("token_weights", "difficulty"):
        assert {f"{name}.png", f"{name}.svg"} <= written
    for png in (tmp_path / "slides").glob("*.png"):
        height, width, _ = matplotlib.image.imread(png).shape
        assert (width, height) == (2000, 1125), png.name


def test_the_bridge_figure_gives_accuracy_in_percent() -> None:
    rows = [
        {
            "label": label,
            "source": source,
            "seed": 0,
            "step": step,
            "accuracy": 0.2 + 0.6 * step / 10,
            "length_incorrect": 10.0,
            "length_correct": 5.0,
        }
        for label in ("grpo", "dr_grpo")
        for source in ("network", "toy")
        for step in range(11)
    ]
    fig = plots.plot_bridge(pd.DataFrame(rows))
    accuracy = fig.axes[2]
    assert "%" in accuracy.get_title()
    drawn = np.concatenate([np.asarray(line.get_ydata(), dtype=float) for line in accuracy.lines])
    assert drawn.min() == pytest.approx(20) and drawn.max() == pytest.approx(80)
    assert "Dr. GRPO" in fig.axes[1].get_title()
    plt.close(fig)


def test_the_stop_probability_panels_hold_every_curve(case: tuple[pd.DataFrame, dict[str, Figure]]) -> None:
    """The log panels of branch lengths, which share their y axis, show both columns' curves whole
    (the right approach's starts at 1/300, above the wrong one's)."""
    _, figures = case
    for ax in figures["branch_lengths"].axes[2:]:
        low, high = ax.get_ylim()
        for line in ax.lines:
            values = np.asarray(line.get_ydata(), dtype=float)
            assert low <= values.min() and values.max() <= high, (ax.get_title(), low, high)


def test_the_committed_figures_are_drawn_this_way() -> None:
    """figures/ holds what `toyrl plot results/article.csv --out figures` now draws: the curves named
    at their ends, the bands' meaning, weights in their axis's units, accuracy in %."""
    svg = {
        name: " ".join((ROOT / "figures" / f"{name}.svg").read_text(encoding="utf-8").split())
        for name in ("length_2x2", "length_by_correctness", "accuracy", "branch_lengths", "token_weights")
    }
    for name in ("length_2x2", "length_by_correctness", "accuracy", "branch_lengths"):
        assert "band: mean ± 1 sd over 6 seeds" in svg[name], name
    assert svg["length_2x2"].count(">incorrect<") == 4
    assert svg["length_by_correctness"].count(">correct<") == 4
    assert ">1/664<" in svg["branch_lengths"] and ">GRPO without<" in svg["accuracy"]
    assert "GRPO +8.66" in svg["token_weights"]
    bridge = " ".join((ROOT / "figures" / "bridge_study.svg").read_text(encoding="utf-8").split())
    assert "Accuracy (%)" in bridge and "Dr. GRPO (loss_type=dr_grpo" in bridge


@pytest.mark.parametrize("style", plots.STYLES)
def test_the_other_figures_texts_sit_on_nothing(style: str) -> None:
    """The teaching figures' notes and the bias figure, at both sizes: no text on a line or band."""
    lengths = np.linspace(1, 1500, 300)
    norm = plots.worked_length_norm()
    frame = toyrl.run("all", seeds=2, steps=12)
    figures = {
        "token_weights": plots.plot_token_weights(
            lengths, token_weight_curves(lengths, length_norm=norm), norm, style=style
        ),
        "difficulty": plots.plot_difficulty(
            difficulty_profiles([8, 16, 64], np.linspace(0, 1, 201)), style=style
        ),
        "bias": plots.plot_bias(bias_over_training(frame, Config(steps=12)), style=style),
    }
    found = []
    for name, fig in figures.items():
        fig.canvas.draw()
        found += problems(name, fig)
        plt.close(fig)
    assert not found, found
