"""`toyrl sweep`: grids, resume after a kill, refusal to mix sweeps, and the Dask backend."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.config import Config, InvalidInput
from toyrl.experiment import simulate_runs
from toyrl.sweep import parse_grid, run_sweep
from toyrl.variants import VARIANTS

from .files import assert_identical_files

SMALL = ["--steps", "40", "--prompts", "8", "--batch-prompts", "4"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_parse_grid_converts_and_checks_values() -> None:
    grid = parse_grid(["group_size=4,8,4", "lr=0.01, 0.02", "prompt-logit-std=0"], Config())
    assert grid == {"group_size": [4, 8], "lr": [0.01, 0.02], "prompt_logit_std": [0.0]}
    for axis, message in [
        ("colour=1,2", "unknown field 'colour'"),
        ("group_size=4,eight", "group_size must be an integer (got 'eight')"),
        ("group_size=1,4", "group_size must be an integer in 2..10,000 (got 1)"),
        ("lr=", "give at least one value"),
    ]:
        with pytest.raises(InvalidInput, match=re.escape(message)):
            parse_grid([axis], Config())


def test_sweep_results_equal_independent_runs(tmp_path: Path) -> None:
    result = invoke(
        "sweep",
        "--out-dir",
        str(tmp_path / "s"),
        "--variant",
        "dr_grpo",
        "--variant",
        "trl_default",
        "--grid",
        "group_size=4,8",
        "--seeds",
        "2",
        *SMALL,
    )
    assert result.exit_code == 0, result.output
    table = pd.read_csv(tmp_path / "s" / "results.csv")
    assert len(table) == 2 * 2 * 2 * 41 and set(table.group_size) == {4, 8}
    assert "toyrl sweep: 0 runs reused, 8 to run\n" in result.stderr
    assert "toyrl sweep: 0 runs reused, 8 run in " in result.stderr
    heading = " ".join(result.stdout.split("Final step, ", 1)[1].split())
    assert heading.startswith(
        "exact expectations, mean ± sd over 2 seeds; vs Dr. GRPO: the paired difference"
    )
    assert "too few seeds for an interval (at least 3):" in heading
    config = Config(steps=40, prompts=8, batch_prompts=4, group_size=8)
    alone = simulate_runs(config, [(VARIANTS["dr_grpo"], 1)])
    mine = table[(table.variant == "dr_grpo") & (table.seed == 1) & (table.group_size == 8)]
    pd.testing.assert_frame_equal(
        mine.drop(columns=["group_size"]).reset_index(drop=True), alone, check_exact=True, check_dtype=False
    )
    final = pd.read_csv(tmp_path / "s" / "final.csv")
    assert len(final) == 4 and {"accuracy_mean", "length_incorrect_sd"} - set(final.columns) == {
        "length_incorrect_sd"
    }
    assert (tmp_path / "s" / "sweep.png").stat().st_size > 10_000


@pytest.mark.slow
def test_a_killed_sweep_resumes_to_the_same_numbers(tmp_path: Path) -> None:
    args = [
        "--variant",
        "dr_grpo",
        "--grid",
        "lr=0.01,0.012,0.014,0.016,0.018,0.02",
        "--seeds",
        "1",
        "--steps",
        "2500",
        "-q",
    ]
    folder = tmp_path / "killed"
    command = [
        sys.executable,
        "-c",
        "from toyrl.cli import main; main()",
        "sweep",
        "--out-dir",
        str(folder),
        *args,
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list((folder / "runs").glob("*.csv")) if (folder / "runs").exists() else True:
        assert time.monotonic() < deadline and process.poll() is None, (
            "the sweep ended before it could be killed"
        )
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    finished = list((folder / "runs").glob("*.csv"))
    assert 0 < len(finished) < 6
    assert not (folder / "results.csv").exists()
    before = {path: path.read_bytes() for path in finished}
    for path in finished:  # every file on disk is complete: atomic writes
        assert len(pd.read_csv(path)) == 2501
    resumed = invoke("sweep", "--out-dir", str(folder), *args)
    assert resumed.exit_code == 0, resumed.output
    assert all(path.read_bytes() == data for path, data in before.items())  # kept, not redone
    assert len(list((folder / "runs").glob("*.csv"))) == 6
    whole = invoke("sweep", "--out-dir", str(tmp_path / "whole"), *args)
    assert whole.exit_code == 0
    assert_identical_files(folder / "results.csv", tmp_path / "whole" / "results.csv")


def test_a_sweep_with_another_base_setting_in_the_same_folder_needs_force(tmp_path: Path) -> None:
    """A setting of its finished runs that differs is refused, named; --force replaces the sweep."""
    folder = tmp_path / "s"
    assert (
        invoke("sweep", "--out-dir", str(folder), "--variant", "grpo", "--seeds", "1", *SMALL).exit_code == 0
    )
    manifest = (folder / "sweep.json").read_text()
    args = ["--variant", "dr_grpo", "--seeds", "1", *SMALL, "--lr", "0.03"]
    other = invoke("sweep", "--out-dir", str(folder), *args)
    assert other.exit_code == 2
    assert other.stderr == (
        f"toyrl: error: --lr is 0.03 here but 0.02 in the sweep in {folder}; grid it (--grid lr=...) to "
        "add values, or use another --out-dir, or --force to replace it\n"
    )
    assert (folder / "sweep.json").read_text() == manifest
    forced = invoke("sweep", "--out-dir", str(folder), *args, "--force")
    assert forced.exit_code == 0
    assert json.loads((folder / "sweep.json").read_text())["variants"] == {
        "dr_grpo": "advantage=none,aggregation=seq_mean_token_sum_norm"
    }
    assert set(pd.read_csv(folder / "results.csv").variant) == {"dr_grpo"}
    assert len(list((folder / "runs").glob("*.csv"))) == 1  # the replaced sweep's run is gone


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--backend", "spark"], "--backend must be loky or dask"),
        (["--scheduler", "tcp://127.0.0.1:1"], "--scheduler needs --backend dask"),
        (["--grid", "cap=50"], "--cap must be at least min_length = 100 (got 50)"),
        (["--seeds", "0"], "--seeds must be an integer in 1..1,000,000"),
        (["--seeds", "100000"], "would be 160,400,000 rows; the limit is 20,000,000"),
    ],
)
def test_bad_sweeps_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke("sweep", "--out-dir", str(tmp_path / "s"), *args)
    assert result.exit_code == 2 and message in result.stderr
    assert not (tmp_path / "s").exists()


def test_the_dask_backend_gives_identical_numbers(tmp_path: Path) -> None:
    """On a cluster and on a local one (closed afterwards), the same bytes as on loky."""
    if not os.environ.get("CI"):
        pytest.importorskip("dask.distributed", reason="the dask backend needs: the dask extra")
    import psutil
    from dask.distributed import LocalCluster

    config = Config(steps=30, prompts=8, batch_prompts=4)
    variants = [VARIANTS["grpo"], VARIANTS["dr_grpo"]]
    arguments = (variants, {"group_size": [4, 8]}, [0, 1], config)
    local = run_sweep(tmp_path / "local", *arguments, n_jobs=2)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        distributed = run_sweep(
            tmp_path / "dask", *arguments, backend="dask", scheduler=cluster.scheduler_address
        )
    children = set(psutil.Process().children(recursive=True))
    run_sweep(tmp_path / "own", *arguments, backend="dask", n_jobs=2)
    assert set(psutil.Process().children(recursive=True)) <= children  # its local cluster is gone
    pd.testing.assert_frame_equal(local, distributed, check_exact=True)
    for folder in ("dask", "own"):
        for name in ("results.csv", "final.csv"):
            assert_identical_files(tmp_path / folder / name, tmp_path / "local" / name)


def test_run_sweep_returns_every_runs_last_step_and_reports_progress(tmp_path: Path) -> None:
    """One row per run: the last step of results.csv, all that final.csv and plot_sweep need."""
    import matplotlib.pyplot as plt

    from toyrl.plots import plot_sweep

    calls = []
    grid = {"steps": [10, 20], "group_size": [4, 8]}
    arguments = ([VARIANTS["grpo"], VARIANTS["dr_grpo"]], grid, [0, 1], Config(prompts=8, batch_prompts=4))
    table = run_sweep(tmp_path / "s", *arguments, progress=lambda *call: calls.append(call))
    assert calls == [(0, 16, 0), (4, 16, 4), (8, 16, 4), (12, 16, 4), (16, 16, 4)]
    results = pd.read_csv(tmp_path / "s" / "results.csv")
    runs = ["variant", "steps", "group_size", "seed"]
    last = results[results.step == results.groupby(runs).step.transform("max")].reset_index(drop=True)
    pd.testing.assert_frame_equal(table, last, check_exact=True)
    assert len(table) == 16 and set(table.step) == {10, 20}
    final = pd.read_csv(tmp_path / "s" / "final.csv")
    means = table.groupby(["variant", "steps", "group_size"], sort=False).accuracy.mean()
    assert final.accuracy_mean.tolist() == means.tolist()

    def drawn(frame: pd.DataFrame) -> list[list[float]]:
        figure = plot_sweep(frame, list(grid))
        lines = [line.get_ydata().tolist() for ax in figure.axes for line in ax.lines]
        plt.close(figure)
        return lines

    assert drawn(table) == drawn(results) != []
    calls.clear()
    sorted((tmp_path / "s" / "runs").glob("*.csv"))[0].unlink()
    pd.testing.assert_frame_equal(
        run_sweep(tmp_path / "s", *arguments, progress=lambda *c: calls.append(c)), table
    )
    assert calls == [(15, 16, 0), (16, 16, 1)]  # a rerun does only what is missing
