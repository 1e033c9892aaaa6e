"""Results that are the same bits on every machine, and compared as such.

toyrl's numbers are functions of IEEE-754 basic operations and the PCG64 stream alone
(`toyrl.kernels`, `toyrl.noise`; docs/reproducibility.md), so a regeneration must equal saved
results cell for cell: one ulp anywhere is a difference. A file written by an older toyrl, whose
numbers depended on the CPU's exp and log, is refused with one line. tests/test_arithmetic.py
checks the package's own numbers under every SIMD setting numpy offers here.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.config import Config
from toyrl.experiment import run_experiment
from toyrl.plots import Drawing, FigureJob, render_all
from toyrl.results import ARITHMETIC, compare_results, load_results, save_results
from toyrl.train import BATCH_COLUMNS, EXACT_COLUMNS
from toyrl.variants import ARTICLE

from .figures import assert_shows, committed_summaries
from .files import assert_identical_files, first_difference
from .output import error_line

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--steps", "30", "--prompts", "8", "--batch-prompts", "4", "--seeds", "2", "-q"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def shifted(frame: pd.DataFrame, columns: list[str], ulps: int, seed: int = 0) -> pd.DataFrame:
    """A copy with every value of `columns` moved by 1..`ulps` ulp up or down, at random."""
    rng = np.random.default_rng(seed)
    out = frame.copy()
    for column in columns:
        values = out[column].to_numpy(dtype=np.float64).copy()
        steps = rng.integers(1, ulps + 1, size=len(values))
        direction = np.where(rng.random(len(values)) < 0.5, -np.inf, np.inf)
        for _ in range(ulps):
            move = steps > 0
            values[move] = np.nextafter(values[move], direction[move])
            steps -= 1
        out[column] = values
    return out


def rewrite(path: Path, frame: pd.DataFrame, **meta_changes: object) -> None:
    """Replace the results at `path` by `frame`, with a matching sidecar (changed by `meta_changes`)."""
    meta = json.loads(path.with_suffix(".json").read_text())
    path.unlink()
    path.with_suffix(".json").unlink()
    save_results(frame, path, {k: v for k, v in meta.items() if k != "csv_sha256"} | meta_changes)


def test_one_ulp_in_any_column_is_a_difference() -> None:
    frame, _ = load_results(ROOT / "results" / "article.csv")
    assert compare_results(frame, frame.copy()).same
    for column in [*EXACT_COLUMNS, *BATCH_COLUMNS]:
        moved = shifted(frame, [column], ulps=1)
        comparison = compare_results(frame, moved)
        assert not comparison.same, column
        assert comparison.first.startswith(f"{column} at variant grpo, seed 0, step 0"), comparison.first
        assert comparison.differing == int(np.count_nonzero(~np.isnan(frame[column].to_numpy()))), column
    one = frame.copy()
    one.loc[1234, "length_incorrect"] = np.nextafter(one.loc[1234, "length_incorrect"], np.inf)
    comparison = compare_results(frame, one)
    cells = len(frame) * (len(frame.columns) - 3)  # every numeric cell but the identity columns
    assert f"1 of {cells:,} cells differ" in comparison.describe()
    assert comparison.first.startswith("length_incorrect at variant grpo, seed 3, step 31")


def test_tables_of_other_runs_or_shapes_are_named_as_such() -> None:
    frame = run_experiment(Config(steps=5, prompts=8, batch_prompts=4), ["grpo"], [0, 1])
    assert compare_results(frame, frame.iloc[:-1]).first == "12 rows against 11"
    other = frame.assign(seed=frame["seed"] + 1)
    assert compare_results(frame, other).first.startswith("different runs: row 0 is seed 0 against 1")
    assert "different columns" in compare_results(frame, frame.drop(columns="grad_norm")).first


def test_the_sidecar_records_the_arithmetic_and_no_platform() -> None:
    meta = json.loads((ROOT / "results" / "article.json").read_text())
    assert meta["arithmetic"] == ARITHMETIC
    assert not {"python", "numpy"} & set(meta)  # the numbers depend on neither


def test_results_that_differ_in_one_ulp_are_rewritten_and_refused_for_replay(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    assert invoke("run", *SMALL, "--out", str(out)).exit_code == 0
    reference = tmp_path / "reference.csv"
    shutil.copy(out, reference)
    frame, _ = load_results(out)
    for column in ("accuracy", "grad_norm"):
        moved = frame.copy()
        moved.loc[3, column] = np.nextafter(moved.loc[3, column], np.inf)
        rewrite(out, moved)
        rewritten = out.read_bytes()
        refused = invoke("bias", "--results", str(out), "--step", "10")
        assert refused.exit_code == 2  # the error after "replaying..." lines, on a slow machine
        assert f"{column} at variant grpo, seed 0, step 3" in error_line(refused.stderr)
        kept = invoke("run", *SMALL, "--out", str(out))  # the same runs: kept as they are
        assert kept.exit_code == 0 and not first_difference(rewritten, out.read_bytes())
        rerun = invoke("run", *SMALL, "--out", str(out), "--force")
        assert rerun.exit_code == 0
        assert_identical_files(out, reference)  # rewritten with the right numbers


def test_a_file_of_an_older_toyrl_is_refused_with_one_line(tmp_path: Path) -> None:
    """Its numbers depended on the CPU: never compared, never replayed; `run` makes it anew."""
    out = tmp_path / "r.csv"
    assert invoke("run", *SMALL, "--out", str(out)).exit_code == 0
    reference = out.read_bytes()
    frame, _ = load_results(out)
    rewrite(out, frame, arithmetic=None, toyrl_version="0.3.0")
    for command in (
        ["bias", "--results", str(out), "--step", "10"],
        ["plot", str(out), "--out", str(tmp_path)],
    ):
        refused = invoke(*command)
        assert refused.exit_code == 2, refused.output
        error = error_line(refused.stderr)  # after progress lines, on a slow machine
        assert "made by toyrl 0.3.0" in error and "regenerate it" in error
    assert invoke("run", *SMALL, "--out", str(out)).exit_code == 0
    assert not first_difference(reference, out.read_bytes())


def test_a_replay_of_a_step_the_file_does_not_have_names_the_missing_row(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    assert invoke("run", *SMALL, "--out", str(out)).exit_code == 0
    frame, _ = load_results(out)
    rewrite(out, frame[~((frame["seed"] == 1) & (frame["step"] > 10))].reset_index(drop=True))
    refused = invoke("bias", "--results", str(out), "--step", "20")
    assert refused.exit_code == 2
    assert "--step 20: in " in refused.stderr and "variant grpo, seed 1 ends at step 10" in refused.stderr


@pytest.mark.slow
def test_svg_figures_do_not_depend_on_the_last_bits_of_the_data(tmp_path: Path) -> None:
    """matplotlib names markers and clip paths by hashes of floats; toyrl.plots renumbers them."""
    frame = run_experiment(Config(steps=40), list(ARTICLE), [0, 1])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    render_all(frame, tmp_path / "a", cap=1500)
    render_all(shifted(frame, EXACT_COLUMNS, ulps=4, seed=2), tmp_path / "b", cap=1500)
    for svg in sorted((tmp_path / "a").glob("*.svg")):
        assert_identical_files(svg, tmp_path / "b" / svg.name)


@pytest.mark.slow
def test_the_main_job_leaves_a_clean_clone_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`toyrl reproduce` over the committed results and figures rewrites nothing (git status stays
    clean) under the matplotlib that drew the figures; under another, it rewrites only the figures,
    and each shows what the committed one does (tests/figures.py)."""
    import matplotlib

    for folder in ("results", "figures"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    # The rest of a clone that the page looks for: its links to the docs are relative only inside one.
    for folder in ("docs", "toyrl"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("README.md", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    clone = {path for path in tmp_path.rglob("*") if path.is_file()} - set(before)
    added: list[FigureJob] = []
    real_add = Drawing.add

    def add(self: Drawing, jobs: list[FigureJob]) -> None:
        added.extend(jobs)
        real_add(self, jobs)

    monkeypatch.setattr(Drawing, "add", add)
    outcome = invoke(
        "reproduce", "--results-dir", str(tmp_path / "results"), "--figures-dir", str(tmp_path / "figures")
    )
    assert outcome.exit_code == 0, outcome.output
    summaries = committed_summaries()
    same_drawing = matplotlib.__version__ == summaries["matplotlib"]
    for path, data in before.items():
        if path.suffix in (".png", ".svg") and not same_drawing:
            continue  # another release's bytes: what they show is compared below
        assert not first_difference(data, path.read_bytes()), (
            f"{path.name}: {first_difference(data, path.read_bytes())}"
        )
    assert sorted(p for p in tmp_path.rglob("*") if p.is_file() and p not in clone) == sorted(before)
    for job in added:
        assert_shows(summaries["figures"][job.name]["summary"], job.draw(*job.args, **job.kwargs), job.name)
