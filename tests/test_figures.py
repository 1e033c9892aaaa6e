"""Figures, `toyrl plot` and `toyrl reproduce`: rendered files, what a reader needs of them (editable
SVG text, one look per variant, legends off the data, contrast, slide sizes), bad results files,
committed results."""

import itertools
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex, to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.transforms import Bbox
from typer.testing import CliRunner

from toyrl import plots
from toyrl.bias import bias_over_training
from toyrl.cli import app
from toyrl.config import Config
from toyrl.examples import difficulty_profiles, length_example, token_weight_curves
from toyrl.experiment import run_experiment
from toyrl.plots import (
    BIAS_FIGURE_NAME,
    FIGURE_NAMES,
    HEADLINE_FIGURE_NAME,
    STYLES,
    TEACHING_FIGURE_NAMES,
    figure_size_pixels,
    render_all,
    render_bias,
    render_teaching,
)
from toyrl.results import load_results
from toyrl.variants import ARTICLE, VARIANTS

from . import figures as figures_module
from .configs import SMALL
from .figures import (
    COMMITTED,
    FIGURES,
    assert_shows,
    committed_summaries,
    differences,
    figure_summary,
    file_hashes,
)
from .files import assert_identical_files
from .output import error_line

ROOT = Path(__file__).resolve().parent.parent
SVG = "{http://www.w3.org/2000/svg}"
# Presets beyond the article's, and a spec whose name is long: what `toyrl plot` meets.
PRESETS = [name for name in VARIANTS if name not in ARTICLE][:12]
LONG_SPEC = "advantage=rloo,aggregation=seq_mean_token_sum_norm,num_iterations=2,epsilon=0.1"
WORKED = plots.worked_length_norm()  # the article's worked example's L_norm


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def check_figures(folder: Path, variants: list[str], names: list[str], style: str = "paper") -> None:
    for name in names:
        png = folder / f"{name}.png"
        height, width, _ = matplotlib.image.imread(png).shape
        inches = plots.figure_size(name, variants, style)
        # 4.56 in x 150 dpi is 683.999... in floats: 684 pixels under matplotlib 3.11, which rounds
        # it, 683 under 3.8, which truncates it.
        truncated = tuple(int(size * plots.DPI) for size in inches)
        assert (width, height) in {figure_size_pixels(name, variants, style), truncated}, name
        svg = (folder / f"{name}.svg").read_text()
        assert svg.startswith("<?xml") and "<svg" in svg and len(svg) > 10_000


@pytest.fixture(scope="module")
def article() -> pd.DataFrame:
    return run_experiment(SMALL, list(ARTICLE), [0, 1])


@pytest.fixture(scope="module")
def many() -> pd.DataFrame:
    return run_experiment(Config(steps=10), [*ARTICLE, *PRESETS, LONG_SPEC], [0, 1])


@pytest.fixture(scope="module")
def bias_table(article: pd.DataFrame) -> pd.DataFrame:
    return bias_over_training(article, SMALL)


def every_figure(
    article: pd.DataFrame, many: pd.DataFrame, bias_table: pd.DataFrame, style: str
) -> dict[str, Figure]:
    """Each figure the package draws, for the article's four and for many presets, drawn."""
    lengths = np.linspace(1, 1500, 300)
    figures = {
        HEADLINE_FIGURE_NAME: plots.plot_length_2x2(article, cap=1500, min_length=100, style=style),
        "length_by_correctness": plots.plot_length_by_correctness(
            article, cap=1500, min_length=100, style=style
        ),
        "accuracy": plots.plot_accuracy(article, style=style),
        "branch_lengths": plots.plot_branch_lengths(article, cap=1500, style=style),
        "bias": plots.plot_bias(bias_table, style=style),
        "token_weights": plots.plot_token_weights(
            lengths, token_weight_curves(lengths, length_norm=WORKED), WORKED, style=style
        ),
        "difficulty": plots.plot_difficulty(
            difficulty_profiles([8, 16, 64], np.linspace(0, 1, 101)), style=style
        ),
        "many/length_by_correctness": plots.plot_length_by_correctness(many, cap=1500, style=style),
        "many/accuracy": plots.plot_accuracy(many, style=style),
        "many/branch_lengths": plots.plot_branch_lengths(many, cap=1500, style=style),
        "many/sweep": plots.plot_sweep(many, [], style=style),
    }
    for fig in figures.values():
        fig.canvas.draw()
    return figures


@pytest.fixture(scope="module", params=STYLES)
def drawn(
    request: pytest.FixtureRequest, article: pd.DataFrame, many: pd.DataFrame, bias_table: pd.DataFrame
) -> Iterator[tuple[str, dict[str, Figure]]]:
    figures = every_figure(article, many, bias_table, request.param)
    # The module's tests read these figures while they stay open: matplotlib's warning of figures
    # left open counts the others only.
    limit = plt.rcParams["figure.max_open_warning"] + len(figures)
    with plt.rc_context({"figure.max_open_warning": limit}):
        yield request.param, figures
    for fig in figures.values():
        plt.close(fig)


def shown_texts(fig: Figure) -> list[Text]:
    """Every text drawn: visible, not empty, and (tick labels) at a tick inside the view."""
    hidden = set()
    for ax in fig.axes:
        for axis, (low, high) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            low, high = min(low, high), max(low, high)
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
                if not low - 1e-9 * abs(low) <= tick.get_loc() <= high + 1e-9 * abs(high):
                    hidden.update({id(tick.label1), id(tick.label2)})
    return [
        text
        for text in fig.findobj(Text)
        if text.get_visible()
        and text.get_text().strip()
        and id(text) not in hidden
        and all(parent.get_visible() for parent in [text.axes] if parent is not None)
    ]


def look(line: Line2D) -> tuple[str, object, str]:
    """What tells a line apart: colour, dash pattern (matplotlib's, as drawn) and marker."""
    return to_hex(line.get_color()), line._unscaled_dash_pattern, str(line.get_marker())  # type: ignore[attr-defined]


def labelled_lines(fig: Figure) -> Iterator[tuple[int, Line2D]]:
    for index, ax in enumerate(fig.axes):
        for line in ax.lines:
            if not line.get_label().startswith("_"):
                yield index, line


@pytest.fixture(scope="module")
def written(
    tmp_path_factory: pytest.TempPathFactory, article: pd.DataFrame, bias_table: pd.DataFrame
) -> tuple[Path, list[Path]]:
    """Every figure file of the article's four, as `toyrl reproduce` writes them."""
    folder = tmp_path_factory.mktemp("figures")
    paths = render_all(article, folder, cap=1500, min_length=100)
    return folder, paths + render_bias(bias_table, folder) + render_teaching(folder)


def test_every_figure_renders_at_its_size(written: tuple[Path, list[Path]], tmp_path: Path) -> None:
    folder, paths = written
    names = [*FIGURE_NAMES, HEADLINE_FIGURE_NAME, BIAS_FIGURE_NAME, *TEACHING_FIGURE_NAMES]
    assert sorted(path.name for path in paths) == sorted(f"{n}.{k}" for n in names for k in ("png", "svg"))
    check_figures(folder, list(ARTICLE), names)
    # One variant, one seed: no 2 x 2, no bands.
    frame = run_experiment(Config(steps=20), ["dr_grpo"], [3])
    assert sorted(path.name for path in render_all(frame, tmp_path, cap=1500)) == sorted(
        f"{n}.{k}" for n in FIGURE_NAMES for k in ("png", "svg")
    )
    check_figures(tmp_path, ["dr_grpo"], FIGURE_NAMES)


def test_the_slides_are_16_9_and_named_as_on_paper(article: pd.DataFrame, tmp_path: Path) -> None:
    names = [path.name for path in render_all(article, tmp_path, cap=1500, style="slides")]
    assert sorted(names) == sorted(
        f"{n}.{k}" for n in [*FIGURE_NAMES, HEADLINE_FIGURE_NAME] for k in ("png", "svg")
    )
    for png in tmp_path.glob("*.png"):
        height, width, _ = matplotlib.image.imread(png).shape
        assert (width, height) == (2000, 1125), png.name  # 13.33 x 7.5 in at 150 dpi
    with pytest.raises(ValueError, match="style must be paper or slides"):
        render_all(article, tmp_path, style="poster")


def test_mathtext_written_a_tspan_a_font_run_reads_as_written() -> None:
    """matplotlib before 3.10 writes a mathtext label in SVG as a <tspan> a run of one font, its
    glyphs' x in one attribute (3.8.4's, abridged); toyrl's SVG has a <tspan> a glyph, in reading
    order, each at its own x and height, as later releases write them."""
    svg = (
        "<text>\n"
        '<tspan style="font: 10px \'DejaVu Sans\'" x="0 2.7 9.3 40.1" y="-0.4">p(&amp;)</tspan>'
        '<tspan style="font: oblique 10px \'DejaVu Sans\'" x="12.6 22.8" y="-0.4">σφ</tspan>'
        '<tspan style="font: 7px \'DejaVu Sans\'" x="29.4 35.1" y="1.2">wr</tspan>\n'
        "      </text>"
    )
    readable = plots._readable_svg(svg)
    glyphs = re.findall(r'<tspan style="([^"]*)" x="([^"]*)" y="([^"]*)">([^<]*)</tspan>', readable)
    assert "".join(glyph for *_, glyph in glyphs) == "p(&amp;σφwr)"
    assert [float(x) for _, x, _, _ in glyphs] == sorted([0, 2.7, 12.6, 22.8, 29.4, 35.1, 9.3, 40.1])
    assert [(style, y) for style, _, y, glyph in glyphs if glyph in "wr"] == [
        ("font: 7px 'DejaVu Sans'", "1.2")
    ] * 2
    assert plots._readable_svg(readable) == readable  # a <tspan> a glyph, as 3.10 on writes it: kept


def test_svg_text_is_text_carrying_the_labels(written: tuple[Path, list[Path]]) -> None:
    """Text as <text> (editable in a slide tool), not glyph outlines; mathtext in reading order."""
    folder, _ = written
    expected = {
        HEADLINE_FIGURE_NAME: [
            "correct",
            "incorrect",
            "cap 1,500",
            "min_length 100",
            "Dr. GRPO",
            "band: mean ± 1 sd over 2 seeds",
        ],
        "length_by_correctness": [
            "GRPO without length division",
            "GRPO without std division",
            "training step",
            "length (tokens)",
        ],
        "accuracy": [
            "GRPO",
            "GRPO without length division",
            "GRPO without std division",
            "Dr. GRPO",
            "accuracy (%)",
        ],
        "branch_lengths": [
            "its stop probability σ(φwrong), from 1/700",
            "1/1,000",
            "wrong approach: earns nothing",
            "band: mean ± 1 sd over 2 seeds",
        ],
        "bias": ["cos(E[", "],∇J)", "],φwrong axis)", "below 0: wrong answers lengthen"],
        "token_weights": [
            "per-token weight (×10−3)",
            "GRPO −0.577 → −0.577 (the same)",
            "Dr. GRPO +0.375",
            "Dr. GRPO −0.125",
            "Lnorm = 2,000, as in the article's worked example",
        ],
        "difficulty": ["update mass ∑i|Ai| / mass at p=1/2", "G = 8", "exact gradient ∝p(1−p)"],
    }
    for name, labels in expected.items():
        svg = (folder / f"{name}.svg").read_text()
        assert "DejaVuSans-" not in svg, f"{name}: glyphs drawn as outlines"
        assert not re.search("[\ue000-\uf8ff]", svg), f"{name}: a private-use glyph no other font has"
        texts = [
            " ".join("".join(element.itertext()).replace("\xa0", " ").split())
            for element in ET.fromstring(svg).iter(f"{SVG}text")
        ]
        assert len(texts) > 10, name
        for label in labels:  # a label wrapped onto lines is a <text> a line
            assert label in " ".join(texts), (name, label, texts)


def test_every_variant_has_its_own_look_the_same_in_every_figure(
    drawn: tuple[str, dict[str, Figure]],
) -> None:
    style, figures = drawn
    across: dict[str, set[tuple[str, object, str]]] = {}
    for name, fig in figures.items():
        for index in range(len(fig.axes)):
            looks = {line.get_label(): look(line) for i, line in labelled_lines(fig) if i == index}
            assert len(set(looks.values())) == len(looks), (name, index, looks)
        if name in ("accuracy", "branch_lengths", "bias") or name.startswith("many/a"):
            for _, line in labelled_lines(fig):
                across.setdefault(line.get_label(), set()).add(look(line))
    assert len(across) == len(ARTICLE) + len(PRESETS) + 1
    assert all(len(looks) == 1 for looks in across.values()), across
    assert len({next(iter(looks)) for looks in across.values()}) == len(across)
    # The article's two switches: dashed exactly where std scaling is off, circles on 1/|o_i|.
    grpo, std, length, dr = (next(iter(across[plots.variant_label(v, style)])) for v in ARTICLE)
    assert grpo[1] == std[1] != length[1] == dr[1] and grpo[2] == length[2] != std[2] == dr[2]


def test_no_legend_covers_data_and_all_text_is_on_the_figure(drawn: tuple[str, dict[str, Figure]]) -> None:
    _, figures = drawn
    for name, fig in figures.items():
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        page = fig.bbox.padded(1)
        legends = [legend.get_window_extent(renderer) for legend in fig.legends]
        legends += [ax.get_legend().get_window_extent(renderer) for ax in fig.axes if ax.get_legend()]
        assert legends, name
        for ax in fig.axes:
            if not ax.get_visible():
                continue
            for artist in [*ax.lines, *ax.collections]:
                shown = Bbox.intersection(artist.get_window_extent(renderer), ax.bbox)
                if shown is None or (shown.width <= 0 and shown.height <= 0):
                    continue
                for box in legends:
                    assert not box.overlaps(shown), (name, artist)
        for legend in legends:
            assert page.contains(legend.x0, legend.y0) and page.contains(legend.x1, legend.y1), name
        for text in shown_texts(fig):
            box = text.get_window_extent(renderer)
            assert page.contains(box.x0, box.y0) and page.contains(box.x1, box.y1), (name, text.get_text())


def contrast(foreground: tuple[float, ...], background: tuple[float, ...] = (1, 1, 1, 1)) -> float:
    """WCAG 2 contrast ratio of two sRGB colours (the foreground's alpha blended on the background)."""

    def luminance(rgb: np.ndarray) -> float:
        linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
        return float(linear @ [0.2126, 0.7152, 0.0722])

    alpha = foreground[3]
    blended = np.array(foreground[:3]) * alpha + np.array(background[:3]) * (1 - alpha)
    high, low = sorted((luminance(blended), luminance(np.array(background[:3]))), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_contrast_helper_on_known_pairs() -> None:
    assert contrast((0, 0, 0, 1)) == pytest.approx(21.0)
    assert contrast(to_rgba("#767676")) == pytest.approx(4.54, abs=0.01)  # the WCAG AA grey
    assert contrast(to_rgba(plots.VARIANT_COLOURS["std_only"])) < 4.5  # why text is never in it


def test_every_text_has_contrast_on_a_white_figure(drawn: tuple[str, dict[str, Figure]]) -> None:
    _, figures = drawn
    for name, fig in figures.items():
        assert to_hex(fig.get_facecolor()) == "#ffffff"
        assert all(to_hex(ax.get_facecolor()) == "#ffffff" for ax in fig.axes)
        for text in shown_texts(fig):
            rgba = to_rgba(text.get_color(), text.get_alpha())
            assert contrast(rgba) >= 4.5, (name, text.get_text(), text.get_color())


def test_slides_are_16_9_with_large_type(drawn: tuple[str, dict[str, Figure]]) -> None:
    style, figures = drawn
    for name, fig in figures.items():
        sizes = [text.get_fontsize() for text in shown_texts(fig)]
        if style == "slides":
            if not name.startswith("many/"):  # a long legend or many panels may make a slide taller
                assert tuple(fig.get_size_inches()) == pytest.approx((40 / 3, 7.5)), name
            assert min(sizes) >= 18, name
        else:
            assert fig.get_size_inches()[0] <= 9.0 and min(sizes) >= 8, name


def test_the_2x2_puts_each_variant_where_its_switches_are(article: pd.DataFrame) -> None:
    fig = plots.plot_length_2x2(article, cap=1500, min_length=100)
    means = article.groupby(["variant", "step"])[["length_correct", "length_incorrect"]].mean()
    # Rows: std scaling on, off; columns: per-response mean 1/|o_i|, constant L_norm.
    for ax, variant in zip(fig.axes, ["grpo", "std_only", "length_only", "dr_grpo"], strict=True):
        assert ax.get_title().endswith(plots.VARIANT_LABELS[variant])
        drawn = {
            line.get_label(): line.get_ydata() for line in ax.lines if not line.get_label().startswith("_")
        }
        assert np.array_equal(drawn["$E[L \\mid \\mathrm{correct}]$"], means.loc[variant, "length_correct"])
        assert np.array_equal(
            drawn["$E[L \\mid \\mathrm{incorrect}]$"], means.loc[variant, "length_incorrect"]
        )
        levels = {float(line.get_ydata()[0]) for line in ax.lines if line.get_label().startswith("_")}
        assert {1500.0, 100.0} <= levels  # the cap and min_length
    assert "with std" in fig.axes[0].get_ylabel() and "without std" in fig.axes[2].get_ylabel()
    assert "|o_i|" in fig.axes[0].get_title() and "L_{\\mathrm{norm}}" in fig.axes[1].get_title()
    assert fig.axes[0].get_shared_y_axes().joined(fig.axes[0], fig.axes[3])
    plt.close(fig)


def test_the_bias_figure_plots_a_cosine_named_as_one(bias_table: pd.DataFrame) -> None:
    """E[g]'s component along phi_wrong is drawn as the signed cosine it is, not as a share."""
    fig = plots.plot_bias(bias_table)
    right = fig.axes[2]
    assert "cos" in right.get_ylabel() and "share" not in right.get_ylabel()
    grpo = next(line for line in right.lines if line.get_label() == "GRPO")
    expected = bias_table[bias_table["variant"] == "grpo"].groupby("step")["phi_wrong_cosine"].mean()
    assert np.array_equal(grpo.get_ydata(), expected.to_numpy()) and (expected < 0).all()
    assert right.get_ylim()[0] < -0.99  # negative values are in view
    plt.close(fig)


def test_token_weights_are_the_worked_example_s_and_show_the_total_push() -> None:
    """The figure illustrates the article's worked example, L_norm as `toyrl examples length` takes it
    (2,000, not the runs' cap), with the weights that command prints."""
    example = length_example()
    assert WORKED == 2000.0 and "Dr. GRPO (L_norm = 2000)" in " ".join(example.conclusions)
    lengths = np.linspace(1, 1500, 300)
    curves = token_weight_curves(lengths, length_norm=WORKED)
    fig = plots.plot_token_weights(lengths, curves, WORKED)
    weights, pushes = fig.axes
    assert (
        weights.get_xscale() == pushes.get_xscale() == weights.get_yscale() == pushes.get_yscale() == "linear"
    )
    line = {line.get_label(): line for line in pushes.lines}
    np.testing.assert_allclose(line["GRPO, wrong (pushed down)"].get_ydata(), -np.sqrt(3) / 3, rtol=1e-12)
    np.testing.assert_allclose(line["Dr. GRPO, wrong (pushed down)"].get_ydata(), -0.25 * lengths / WORKED)
    notes = " ".join(text.get_text() for ax in fig.axes for text in ax.texts)
    numbers = example.numbers
    for name, key, digits in [
        ("GRPO", "grpo_weight_correct", 5),
        ("GRPO", "grpo_weight_wrong_800", 5),
        ("Dr. GRPO", "dr_weight_correct", 6),
        ("Dr. GRPO", "dr_weight_wrong", 6),
    ]:
        # in the axis's units, x 10^-3: the digits `toyrl examples length` prints, moved 3 places
        assert f"{name} {numbers[key] * 1e3:+.{digits - 3}f}".replace("-", "−") in notes, (key, notes)
    assert "GRPO +8.66" in notes and "Dr. GRPO +0.375" in notes and "Dr. GRPO −0.125" in notes
    assert "GRPO −0.577 → −0.577" in notes and "Dr. GRPO −0.025 → −0.100 (4×)" in notes
    assert "as in the article's worked example" in fig.get_suptitle()
    plt.close(fig)
    other = plots.plot_token_weights(lengths, token_weight_curves(lengths, length_norm=1500.0), 1500.0)
    assert "= 1,500)" in other.get_suptitle() and "worked example" not in other.get_suptitle()
    plt.close(other)


def test_labels_are_short_and_looks_distinct_for_any_number_of_variants() -> None:
    label = plots.variant_label(LONG_SPEC)
    assert "advantage=" not in label and "rloo" in label and "epsilon=0.1" in label
    assert max(len(line) for line in label.split("\n")) <= plots.THEMES["paper"].wrap
    assert plots.variant_label(LONG_SPEC, "slides").count("\n") >= label.count("\n")
    names = [*ARTICLE, *(f"variant_{i}" for i in range(220))]
    looks = plots.variant_looks(names)
    assert len(set(looks.values())) == len(names)
    assert [looks[v].colour for v in ARTICLE] == [plots.VARIANT_COLOURS[v] for v in ARTICLE]
    assert len(plots.variant_looks([f"v{i}" for i in range(500)])) == 500  # past 224 they repeat


def test_plot_command_on_a_run_with_one_variant_and_one_seed(tmp_path: Path) -> None:
    csv = tmp_path / "one.csv"
    assert (
        invoke("run", "--variant", "length_only", "--seeds", "1", "--steps", "10", "--out", str(csv))[0] == 0
    )
    code, stdout, _ = invoke("plot", str(csv), "--out", str(tmp_path / "figs"))
    assert code == 0 and "final_numbers.md" in stdout
    check_figures(tmp_path / "figs", ["length_only"], [*FIGURE_NAMES, BIAS_FIGURE_NAME])
    table = (tmp_path / "figs" / "final_numbers.md").read_text()
    assert "`length_only` | 1 |" in table and "article" not in table  # not the article's settings


def write_bad(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not a readable CSV (No columns to parse from file)"),
        (b'variant,seed\n"grpo,1\n', "not a readable CSV"),
        (b"\xff\xfe\x00garbage\x00", "not a readable CSV"),
        (b"variant,seed,step\ngrpo,0,0\n", "missing columns accuracy, length_mean"),
    ],
)
def test_plot_refuses_a_bad_results_file(content: bytes, message: str, tmp_path: Path) -> None:
    path = write_bad(tmp_path, "bad.csv", content)
    code, stdout, stderr = invoke("plot", str(path), "--out", str(tmp_path / "figs"))
    assert code == 2 and stdout == ""
    error = error_line(stderr)  # after "reading bad.csv..." lines on a slow machine
    assert error.startswith(f"toyrl: error: {path}: ") and message in error
    assert not (tmp_path / "figs").exists()


def test_plot_refuses_a_missing_file_and_non_numeric_columns(tmp_path: Path) -> None:
    code, _, stderr = invoke("plot", str(tmp_path / "nope.csv"))
    assert code == 2 and error_line(stderr) == f"toyrl: error: {tmp_path / 'nope.csv'}: no such results file"
    frame = run_experiment(Config(steps=3), ["grpo"], [0])
    frame["accuracy"] = "high"
    frame.to_csv(tmp_path / "text.csv", index=False)
    code, _, stderr = invoke("plot", str(tmp_path / "text.csv"))
    assert code == 2 and "columns accuracy must hold numbers" in stderr


@pytest.mark.slow
def test_reproduce_writes_every_figure_and_the_committed_final_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, stdout, _ = invoke("reproduce")
    assert code == 0
    assert_identical_files(ROOT / "results" / "article.csv", tmp_path / "results" / "article.csv")
    fresh = json.loads((tmp_path / "results" / "article.json").read_text())
    committed = json.loads((ROOT / "results" / "article.json").read_text())
    assert fresh == committed | {"matplotlib": fresh["matplotlib"]}  # the one version the sidecar keeps
    check_figures(
        tmp_path / "figures", list(ARTICLE), [*FIGURE_NAMES, HEADLINE_FIGURE_NAME, BIAS_FIGURE_NAME]
    )
    check_figures(tmp_path / "figures", [], TEACHING_FIGURE_NAMES)
    assert "Content-Security-Policy" in (tmp_path / "figures" / "explorer.html").read_text()
    assert (tmp_path / "figures" / "final_numbers.md").read_text() == (
        ROOT / "figures" / "final_numbers.md"
    ).read_text()
    assert "results: wrote results/article.csv" in stdout and "dr_grpo" in stdout


def test_committed_results_were_made_by_the_current_defaults() -> None:
    meta = json.loads((ROOT / "results" / "article.json").read_text())
    assert Config.from_dict(meta["config"]) == Config()
    assert meta["seeds"] == list(range(6)) and list(meta["variants"]) == list(ARTICLE)
    for name in [*FIGURE_NAMES, HEADLINE_FIGURE_NAME, *TEACHING_FIGURE_NAMES, BIAS_FIGURE_NAME]:
        assert (ROOT / "figures" / f"{name}.png").stat().st_size > 10_000
        assert (ROOT / "figures" / f"{name}.svg").stat().st_size > 10_000


# --- what the frame carries, and what a panel holds ---------------------------------------------------


def drawn_values(ax: plt.Axes) -> np.ndarray:
    """Every y value an axes draws: its lines' data and its bands' vertices (in data coordinates)."""
    values = [np.asarray(line.get_ydata(), dtype=float) for line in ax.lines]
    values += [np.asarray(path.vertices)[:, 1] for band in ax.collections for path in band.get_paths()]
    joined = np.concatenate(values) if values else np.array([])
    return joined[np.isfinite(joined)]


def assert_nothing_clipped(fig: Figure) -> None:
    for ax in fig.axes:
        if ax.get_visible() and ax.get_yscale() == "linear":
            low, high = ax.get_ylim()
            values = drawn_values(ax)
            assert values.size and low <= values.min() and values.max() <= high, (ax.get_title(), low, high)


@pytest.fixture(scope="module")
def lopsided(article: pd.DataFrame) -> pd.DataFrame:
    """The article's runs with GRPO's lengths tripled: its panels hold the longest curves, and
    Dr. GRPO's, drawn last, much shorter ones."""
    frame = article.copy()
    grpo = frame["variant"] == "grpo"
    for column in ("length_correct", "length_incorrect", "length_right_approach", "length_wrong_approach"):
        frame.loc[grpo, column] *= 3
    return frame


@pytest.mark.parametrize("cap", [None, 1500])
def test_shared_length_axes_hold_every_panel_s_curves(lopsided: pd.DataFrame, cap: int | None) -> None:
    """No panel's limit is another's: GRPO's curves (first) stay in view beside Dr. GRPO's (last)."""
    figures = [
        plots.plot_length_by_correctness(lopsided, cap=cap),
        plots.plot_length_2x2(lopsided, cap=cap),
        plots.plot_branch_lengths(lopsided, cap=cap),
    ]
    grpo = lopsided[lopsided["variant"] == "grpo"].groupby("step")["length_incorrect"].mean()
    for fig in figures:
        assert_nothing_clipped(fig)
        assert fig.axes[0].get_ylim()[1] >= max(grpo.max(), cap or 0)
        plt.close(fig)


def test_every_drawn_value_is_in_view_in_every_figure(drawn: tuple[str, dict[str, Figure]]) -> None:
    _, figures = drawn
    for name in (
        HEADLINE_FIGURE_NAME,
        "length_by_correctness",
        "branch_lengths",
        "many/length_by_correctness",
    ):
        assert_nothing_clipped(figures[name])


def reference_levels(fig: Figure) -> set[float]:
    """The levels of the dotted reference lines (cap, min_length) of a figure's panels."""
    return {
        float(np.asarray(line.get_ydata())[0])
        for ax in fig.axes
        for line in ax.lines
        if str(line.get_label()).startswith("_") and to_hex(line.get_color()) == plots.MUTED.lower()
    }


def test_plots_read_the_cap_and_min_length_from_the_frame_and_given_ones_win(
    article: pd.DataFrame, tmp_path: Path
) -> None:
    frame = article.copy()
    frame.attrs["toyrl"] = {"config": {"cap": 1234, "min_length": 77}}
    for draw in (plots.plot_length_by_correctness, plots.plot_length_2x2):
        fig = draw(frame)
        assert reference_levels(fig) == {1234.0, 77.0}, draw.__name__
        plt.close(fig)
        fig = draw(frame, cap=1500, min_length=100)
        assert reference_levels(fig) == {1500.0, 100.0}, draw.__name__
        plt.close(fig)
        fig = draw(frame, min_length=5)
        assert reference_levels(fig) == {1234.0, 5.0}, draw.__name__
        plt.close(fig)
    fig = plots.plot_branch_lengths(frame)
    assert reference_levels(fig) == {1234.0}
    plt.close(fig)
    fig = plots.plot_branch_lengths(frame, cap=1500)
    assert reference_levels(fig) == {1500.0}
    plt.close(fig)
    assert reference_levels(plots.plot_length_by_correctness(article)) == set()  # nothing carried
    plt.close("all")
    render_all(frame, tmp_path)
    for name in ("length_by_correctness", HEADLINE_FIGURE_NAME):
        svg = (tmp_path / f"{name}.svg").read_text()
        assert "cap 1,234" in svg and "min_length 77" in svg and "cap 1,500" not in svg, name
    render_all(frame, tmp_path, cap=1500)
    assert "cap 1,500" in (tmp_path / "length_by_correctness.svg").read_text()


def test_load_results_hands_the_sidecar_to_the_frame(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    args = ["run", "--variant", "grpo", "--seeds", "1", "--steps", "3", "--cap", "900", "--out", str(out)]
    assert invoke(*args)[0] == 0
    frame, meta = load_results(out)
    assert meta is not None and frame.attrs["toyrl"] == meta
    assert frame.attrs["toyrl"]["config"]["cap"] == 900 and "min_length" in frame.attrs["toyrl"]["config"]
    assert frame[frame["step"] > 0].attrs["toyrl"] == meta  # carried through selections
    fig = plots.plot_length_by_correctness(frame)
    assert reference_levels(fig) == {900.0, float(Config().min_length)}
    plt.close(fig)
    out.with_suffix(".json").unlink()
    bare, none = load_results(out)
    assert none is None and "toyrl" not in bare.attrs


def test_the_2x2_refuses_a_frame_without_the_article_s_four(article: pd.DataFrame) -> None:
    part = article[article["variant"].isin(["grpo", "dr_grpo"])]
    before = plt.get_fignums()
    with pytest.raises(ValueError, match="lacks std_only, length_only") as error:
        plots.plot_length_2x2(part)
    assert "grpo, std_only, length_only, dr_grpo" in str(error.value)
    assert plt.get_fignums() == before  # refused before drawing anything


# --- text and legends a reader can use ------------------------------------------------------------


def breaks_between_phrases(text: str) -> bool:
    """Whether every line break of a title falls between phrases: after a comma, colon or
    semicolon, before a parenthesis or a "×", inside an identifier after an underscore, or before a
    variant's name (the 2 x 2's headers are the column's, then the panel's). A title that is a
    variant's display name alone may break between its words (a slide's four panels to a row are
    narrower than "GRPO without length division")."""
    lines = text.split("\n")
    if " ".join(lines) in plots.VARIANT_LABELS.values():
        return True
    return all(
        before.endswith((",", ":", ";", "_"))
        or after.startswith(("(", "×"))
        or after in plots.VARIANT_LABELS.values()
        for before, after in itertools.pairwise(lines)
    )


def titles(fig: Figure) -> list[str]:
    return [fig.get_suptitle(), *(ax.get_title() for ax in fig.axes if ax.get_visible())]


def test_titles_break_only_between_phrases(drawn: tuple[str, dict[str, Figure]]) -> None:
    style, figures = drawn
    if style == "paper":
        data = json.loads((ROOT / "results" / "families.json").read_text())
        figures = figures | {
            "families": plots.plot_families(data),
            "length_power": plots.plot_length_power(data),
        }
    for name, fig in figures.items():
        for title in titles(fig):
            assert breaks_between_phrases(title), (style, name, title)
    assert not breaks_between_phrases("its stop probability, from\n1/300")  # the check can fail
    assert plots._fit(r"its stop probability $\sigma(\varphi_{\mathrm{right}})$, from 1/300", 2.0, 9.0) == (
        "its stop probability $\\sigma(\\varphi_{\\mathrm{right}})$,\nfrom 1/300"
    )
    assert plots._fit(
        "Length by correctness: std scaling (rows) × length normalisation (columns)", 4.5, 11
    ) == ("Length by correctness: std scaling (rows)\n× length normalisation (columns)")


@pytest.fixture(scope="module")
def study_figures() -> Iterator[dict[str, Figure]]:
    data = json.loads((ROOT / "results" / "families.json").read_text())
    figures = {"families": plots.plot_families(data), "length_power": plots.plot_length_power(data)}
    for fig in figures.values():
        fig.canvas.draw()
    yield figures
    for fig in figures.values():
        plt.close(fig)


def test_each_legend_is_under_its_own_panel(study_figures: dict[str, Figure]) -> None:
    """A legend that keys one panel sits under that panel, not under the figure's middle."""
    owners = {  # (figure, legend's first label) -> what the panel it keys plots
        ("families", plots._outcome_label("correct")): ("xlabel", "$E[L]$"),
        ("length_power", plots._outcome_label("correct")): ("ylabel", "$E[L]$"),
        ("length_power", "cosine at the initial policy"): ("ylabel", "cos"),
    }
    seen = set()
    for name, fig in study_figures.items():
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        assert not fig.legends, name
        for box in fig.axes:
            legend = box.get_legend()
            if legend is None:
                continue
            label = legend.get_texts()[0].get_text()
            axis, plotted = owners[name, label]
            (panel,) = [
                ax
                for ax in fig.axes
                if ax.axison and plotted in (ax.get_xlabel() if axis == "xlabel" else ax.get_ylabel())
            ]
            key, under = legend.get_window_extent(renderer), panel.get_window_extent(renderer)
            assert under.x0 <= key.x0 and key.x1 <= under.x1, (name, label, key, under)
            assert key.y1 <= under.y0 and fig.bbox.contains(key.x0, key.y0), (name, label)
            seen.add((name, label))
        for text in shown_texts(fig):
            extent = text.get_window_extent(renderer)
            assert fig.bbox.padded(1).contains(extent.x0, extent.y0), (name, text.get_text())
            assert fig.bbox.padded(1).contains(extent.x1, extent.y1), (name, text.get_text())
    assert seen == set(owners)


def ticks_in_view(ax: plt.Axes) -> list[float]:
    low, high = sorted(ax.get_ylim())
    return [tick for tick in ax.get_yticks() if low <= tick <= high]


def test_length_axes_have_readable_ticks_on_slides_too(drawn: tuple[str, dict[str, Figure]]) -> None:
    style, figures = drawn
    for name in (HEADLINE_FIGURE_NAME, "length_by_correctness", "branch_lengths"):
        fig = figures[name]
        panels = fig.axes[:2] if name == "branch_lengths" else [ax for ax in fig.axes if ax.get_visible()]
        for ax in panels:
            ticks = ticks_in_view(ax)
            assert len(ticks) >= 4, (style, name, ticks)
            labels = [label.get_text() for label in ax.get_yticklabels() if label.get_text()]
            assert len(labels) >= 4 or ax is not panels[0], (style, name, labels)


# --- the committed figures, on any matplotlib allowed (tests/figures.py) ---------------------------------


def test_the_committed_figures_are_the_files_summarised() -> None:
    """Each committed figure (figures/NAME.png and .svg) is the file its summary in tests/figures.json
    was written with (`python -m tests.figures` writes it only when the figures rebuilt from the
    committed data render to those bytes), and every one is summarised."""
    kept = committed_summaries()["figures"]
    for name, entry in kept.items():
        assert file_hashes(name) == entry["files"], f"{name}: not the file summarised"
    assert {path.stem for path in FIGURES.glob("*.[ps][nv]g")} == set(kept)


def test_the_studies_figures_show_what_their_data_draw() -> None:
    """The studies' figures rebuilt from their committed results show what the committed figures do,
    on any matplotlib >= 3.8 (the article's are checked as `toyrl reproduce` draws them: the slow
    tests of tests/test_parallel_figures.py and tests/test_portability.py)."""
    kept = committed_summaries()["figures"]
    for name, build in COMMITTED["studies"]().items():
        assert_shows(kept[name]["summary"], build(), name)


def small_figure() -> Figure:
    """A figure as toyrl draws them, small: two curves, a band, a legend, labelled axes."""
    fig, ax = plt.subplots(figsize=(4, 3), layout="constrained")
    steps = np.arange(50.0)
    ax.plot(steps, np.sqrt(steps), color="#0072B2", label="GRPO")
    ax.plot(steps, steps / 7, color="#D55E00", linestyle="--", label="Dr. GRPO")
    ax.fill_between(steps, np.sqrt(steps) - 0.5, np.sqrt(steps) + 0.5, color="#0072B2", alpha=0.2)
    ax.set_xlabel("step")
    ax.set_ylabel("length")
    ax.legend()
    return fig


def test_a_summary_tells_a_figure_apart_by_its_data_texts_looks_and_layout() -> None:
    """A figure differs from its summary when one value of its data moves by a millionth, a tick
    label or a legend entry reads otherwise, a line changes colour, an axes moves by a tenth of the
    figure or a limit by a tenth of its span; not when an axes moves by a hundredth (another
    release's layout)."""
    kept = figure_summary(small_figure())

    def data_moved(ax: plt.Axes) -> None:
        y = np.array(ax.lines[0].get_ydata(), dtype=float)
        y[25] *= 1 + 1e-6
        ax.lines[0].set_ydata(y)

    def moved(by: float) -> Callable[[plt.Axes], None]:
        def move(ax: plt.Axes) -> None:
            fig = ax.get_figure()
            assert fig is not None
            fig.canvas.draw()  # where the layout puts it, then held there
            fig.set_layout_engine("none")
            x0, y0, width, height = ax.get_position().bounds
            ax.set_position((x0 + by, y0, width, height))

        return move

    def widened(ax: plt.Axes) -> None:
        low, high = ax.get_xlim()
        ax.set_xlim(low, high + (high - low) / 10)

    changes: dict[str, Callable[[plt.Axes], Any]] = {
        "data": data_moved,
        "tick label": lambda ax: ax.xaxis.set_major_formatter(lambda value, _: f"{value:g} steps"),
        "legend entry": lambda ax: ax.get_legend().get_texts()[0].set_text("GRPO, again"),
        "colour": lambda ax: ax.lines[0].set_color("#000000"),
        "band": lambda ax: ax.collections[0].set_facecolor("#000000"),
        "position": moved(0.1),
        "limit": widened,
    }
    for change, make in changes.items():
        fig = small_figure()
        make(fig.axes[0])
        assert list(differences(kept, figure_summary(fig))), change
        plt.close(fig)
    fig = small_figure()
    moved(0.01)(fig.axes[0])
    found = list(differences(kept, figure_summary(fig)))
    assert found == [], found
    plt.close(fig)


def test_the_summaries_are_written_only_from_the_committed_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python -m tests.figures` refuses (exit 1, nothing written) when a figure rebuilt from the
    committed data does not render to the committed files (here one drawn in another colour), and
    writes each figure's files' hashes and summary when it does."""
    committed = tmp_path / "figures"
    committed.mkdir()
    for filename, data in plots.figure_files("small", small_figure()):
        (committed / filename).write_bytes(data if isinstance(data, bytes) else data.encode())

    def other() -> Figure:
        fig = small_figure()
        fig.axes[0].lines[0].set_color("#000000")
        return fig

    monkeypatch.setattr(figures_module, "FIGURES", committed)
    monkeypatch.setattr(figures_module, "SUMMARIES", tmp_path / "figures.json")
    monkeypatch.setattr(figures_module, "COMMITTED", {"one": lambda: {"small": other}})
    assert figures_module.write_summaries() == 1
    assert not (tmp_path / "figures.json").exists()
    monkeypatch.setattr(figures_module, "COMMITTED", {"one": lambda: {"small": small_figure}})
    assert figures_module.write_summaries() == 0
    written = json.loads((tmp_path / "figures.json").read_text())
    assert written["figures"]["small"]["files"] == file_hashes("small", committed)
    assert written["figures"]["small"]["summary"] == json.loads(json.dumps(figure_summary(small_figure())))
