"""Figures, `toyrl plot` and `toyrl reproduce`: rendered files, bad results files, committed results."""

import json
from pathlib import Path

import matplotlib.image
import pytest
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.config import Config
from toyrl.experiment import run_experiment
from toyrl.plots import (
    BIAS_FIGURE_NAME,
    FIGURE_NAMES,
    TEACHING_FIGURE_NAMES,
    figure_size_pixels,
    render_all,
    render_teaching,
)
from toyrl.results import final_table_markdown, load_results
from toyrl.variants import ARTICLE

from .files import assert_equivalent_results

ROOT = Path(__file__).resolve().parent.parent


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def check_figures(folder: Path, variants: int, names: list[str] = FIGURE_NAMES) -> None:
    for name in names:
        png = folder / f"{name}.png"
        height, width, _ = matplotlib.image.imread(png).shape
        assert (width, height) == figure_size_pixels(name, variants), name
        svg = (folder / f"{name}.svg").read_text()
        assert svg.startswith("<?xml") and "<svg" in svg and len(svg) > 10_000


@pytest.mark.parametrize(("variants", "seeds"), [(list(ARTICLE), [0, 1]), (["dr_grpo"], [3])])
def test_every_figure_renders_at_its_size(variants: list[str], seeds: list[int], tmp_path: Path) -> None:
    frame = run_experiment(Config(steps=20), variants, seeds)
    written = render_all(frame, tmp_path, cap=1500)
    assert sorted(path.name for path in written) == sorted(
        f"{n}.{k}" for n in FIGURE_NAMES for k in ("png", "svg")
    )
    check_figures(tmp_path, len(variants))


def test_teaching_figures_render_at_their_size(tmp_path: Path) -> None:
    written = render_teaching(tmp_path)
    assert len(written) == 2 * len(TEACHING_FIGURE_NAMES)
    check_figures(tmp_path, 0, TEACHING_FIGURE_NAMES)


def test_plot_command_on_a_run_with_one_variant_and_one_seed(tmp_path: Path) -> None:
    csv = tmp_path / "one.csv"
    assert (
        invoke("run", "--variant", "length_only", "--seeds", "1", "--steps", "10", "--out", str(csv))[0] == 0
    )
    code, stdout, _ = invoke("plot", str(csv), "--out", str(tmp_path / "figs"))
    assert code == 0 and "final_numbers.md" in stdout
    check_figures(tmp_path / "figs", 1, [*FIGURE_NAMES, BIAS_FIGURE_NAME])
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
    assert stderr.startswith(f"toyrl: error: {path}: ") and stderr.count("\n") == 1
    assert message in stderr
    assert not (tmp_path / "figs").exists()


def test_plot_refuses_a_missing_file_and_non_numeric_columns(tmp_path: Path) -> None:
    code, _, stderr = invoke("plot", str(tmp_path / "nope.csv"))
    assert code == 2 and stderr == f"toyrl: error: {tmp_path / 'nope.csv'}: no such results file\n"
    frame = run_experiment(Config(steps=3), ["grpo"], [0])
    frame["accuracy"] = "high"
    frame.to_csv(tmp_path / "text.csv", index=False)
    code, _, stderr = invoke("plot", str(tmp_path / "text.csv"))
    assert code == 2 and "columns accuracy must hold numbers" in stderr


def test_reproduce_writes_every_figure_and_the_committed_final_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, stdout, _ = invoke("reproduce")
    assert code == 0
    assert_equivalent_results(ROOT / "results" / "article.csv", tmp_path / "results" / "article.csv")
    fresh = json.loads((tmp_path / "results" / "article.json").read_text())
    committed = json.loads((ROOT / "results" / "article.json").read_text())
    machine = ("csv_sha256", "python", "numpy", "matplotlib")  # what another machine may change
    assert fresh == committed | {key: fresh[key] for key in machine}
    check_figures(tmp_path / "figures", len(ARTICLE))
    check_figures(tmp_path / "figures", 0, [*TEACHING_FIGURE_NAMES, BIAS_FIGURE_NAME])
    assert "Content-Security-Policy" in (tmp_path / "figures" / "explorer.html").read_text()
    assert (tmp_path / "figures" / "final_numbers.md").read_text() == (
        ROOT / "figures" / "final_numbers.md"
    ).read_text()
    assert "results: wrote results/article.csv" in stdout and "dr_grpo" in stdout


def test_committed_results_were_made_by_the_current_defaults() -> None:
    meta = json.loads((ROOT / "results" / "article.json").read_text())
    assert Config.from_dict(meta["config"]) == Config()
    assert meta["seeds"] == list(range(6)) and list(meta["variants"]) == list(ARTICLE)
    for name in [*FIGURE_NAMES, *TEACHING_FIGURE_NAMES, BIAS_FIGURE_NAME]:
        assert (ROOT / "figures" / f"{name}.png").stat().st_size > 10_000
        assert (ROOT / "figures" / f"{name}.svg").stat().st_size > 10_000


def test_readme_shows_the_committed_final_numbers() -> None:
    frame, _ = load_results(ROOT / "results" / "article.csv")
    assert final_table_markdown(frame, article=True) in (ROOT / "README.md").read_text()
