"""Figures drawn over worker processes (`toyrl.plot.save(..., n_jobs)`, `toyrl reproduce --n-jobs`):
the same files, byte for byte, as drawn in one process, in the caller's matplotlib settings."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import matplotlib
import pandas as pd
import pytest
from matplotlib.figure import Figure
from typer.testing import CliRunner

import toyrl
import toyrl.experiment as experiment
from toyrl import plots
from toyrl.config import InvalidInput
from toyrl.plot import save

from .configs import SMALL, settings
from .figures import assert_shows, committed_summaries

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """The article's four variants, two seeds, a short run, its configuration in attrs (for the
    bias figure's replay)."""
    return toyrl.run("all", seeds=2, **settings(SMALL))


def counted_parallel(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The workers each joblib.Parallel that toyrl starts is asked for, as it starts them."""
    asked: list[int] = []
    real = experiment.Parallel

    def counting(*args: object, n_jobs: int = 1, **kwargs: object) -> object:
        asked.append(n_jobs)
        return real(*args, n_jobs=n_jobs, **kwargs)

    monkeypatch.setattr(experiment, "Parallel", counting)
    return asked


def counted_workers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The figure workers each `toyrl.plots.Drawing` starts (a count a drawing)."""
    started: list[int] = []
    real = plots.Drawing.__init__

    def counting(self: plots.Drawing, workers: int) -> None:
        started.append(workers)
        real(self, workers)

    monkeypatch.setattr(plots.Drawing, "__init__", counting)
    return started


def test_save_over_workers_writes_the_bytes_of_one_process(
    frame: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = counted_workers(monkeypatch)
    monkeypatch.setattr(experiment.os, "cpu_count", lambda: 2)
    serial = save(frame, tmp_path / "serial", n_jobs=1)
    assert started == [0]  # one process: no workers
    parallel = save(frame, tmp_path / "parallel", n_jobs=-1)
    assert started == [0, 1]  # every core, here two: this process and one worker
    names = [path.name for path in serial]
    assert names == [path.name for path in parallel]
    assert {"length_2x2.png", "bias.svg", "token_weights.svg", "difficulty.png"} <= set(names)
    for one, other in zip(serial, parallel, strict=True):
        assert one.read_bytes() == other.read_bytes(), one.name


def taken_by_workers(drawing: plots.Drawing) -> None:
    """Wait until the workers have taken every job added (the timeout only guards against a hang)."""
    deadline = time.monotonic() + 300
    while drawing._untaken and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not drawing._untaken


def test_workers_draw_in_the_caller_s_matplotlib_settings(
    frame: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [job for job in plots.figure_jobs(frame) if job.name == "accuracy"]
    plain = plots.draw(jobs[0])
    with matplotlib.rc_context({"axes.facecolor": "#f2f2f2"}):
        serial = plots.draw(jobs[0])
        with plots.drawing(1) as drawing:
            drawing.add(jobs)
            taken_by_workers(drawing)
            monkeypatch.setattr(plots, "draw", None)  # nothing is drawn in this process
            parallel = next(drawing.files())
    assert serial == parallel != plain


def failing_figure() -> Figure:
    raise ValueError("no figure here")


def test_a_figure_that_fails_in_a_worker_fails_where_it_is_asked_for(frame: pd.DataFrame) -> None:
    jobs = [*plots.figure_jobs(frame)[:1], plots.FigureJob("failing", failing_figure)]
    with plots.drawing(1) as drawing:
        drawing.add(jobs)
        taken_by_workers(drawing)
        drawn = drawing.files()
        assert next(drawn)[0][0] == "length_by_correctness.png"
        with pytest.raises(ValueError, match="no figure here"):
            next(drawn)


def test_this_process_draws_what_no_worker_has_taken(frame: pd.DataFrame) -> None:
    """Two workers, six figures: every figure comes back once, in the order added, the bytes of one
    process, whoever drew each (this process takes the last ones while it waits for the first)."""
    jobs = [*plots.figure_jobs(frame), *plots.teaching_jobs()]
    with plots.drawing(2) as drawing:
        drawing.add(jobs[:2])
        drawing.add(jobs[2:])
        drawn = list(drawing.files())
    assert drawn == [plots.draw(job) for job in jobs]


@pytest.mark.slow
def test_reproduce_starts_the_figure_workers_before_the_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`toyrl reproduce --n-jobs 2` on two cores: one worker besides this process, given the
    teaching figures before the runs are simulated (in this process, while it draws them), and the
    figures it draws are the committed ones: each shows what the committed figure's summary says
    (tests/figures.py: on any matplotlib allowed; under the release that drew them, the same bytes),
    and the results it draws them from are the committed ones to the byte."""
    import toyrl.cli.commands as commands
    from toyrl.cli import app

    started = counted_workers(monkeypatch)
    monkeypatch.setattr(experiment.os, "cpu_count", lambda: 2)
    added: list[plots.FigureJob] = []
    real_add, real_run = plots.Drawing.add, commands.run_experiment

    def add(self: plots.Drawing, jobs: list[plots.FigureJob]) -> None:
        added.extend(jobs)
        real_add(self, jobs)

    seen: list[tuple[list[str], object]] = []

    def run(*args: object, **kwargs: object) -> object:
        seen.append(([job.name for job in added], kwargs.get("n_jobs", 1)))
        return real_run(*args, **kwargs)

    monkeypatch.setattr(plots.Drawing, "add", add)
    monkeypatch.setattr(commands, "run_experiment", run)
    out = ["--results-dir", str(tmp_path / "results"), "--figures-dir", str(tmp_path / "figures")]
    result = CliRunner().invoke(app, ["reproduce", "-q", "--n-jobs", "2", *out])
    assert result.exit_code == 0, result.output
    assert started == [1]
    assert seen == [(["token_weights", "difficulty"], 1)]
    drawn = sorted(path.name for path in (tmp_path / "figures").glob("*.[ps][nv]g"))
    assert drawn == sorted(f"{job.name}.{kind}" for job in added for kind in ("png", "svg"))
    assert len(drawn) == 14
    results = tmp_path / "results"
    assert (results / "article.csv").read_bytes() == (ROOT / "results" / "article.csv").read_bytes()
    fresh = json.loads((results / "article.json").read_text())
    kept = json.loads((ROOT / "results" / "article.json").read_text())
    assert fresh == kept | {"matplotlib": fresh["matplotlib"]}  # the one version the sidecar keeps
    summaries = committed_summaries()
    for job in added:  # as this process or a worker drew it (the same bytes: the tests above)
        assert_shows(summaries["figures"][job.name]["summary"], job.draw(*job.args, **job.kwargs), job.name)
    if matplotlib.__version__ == summaries["matplotlib"]:  # the release that drew them: the bytes too
        for name in drawn:
            assert (tmp_path / "figures" / name).read_bytes() == (ROOT / "figures" / name).read_bytes(), name


@pytest.mark.parametrize("n_jobs", [0, -2, 1.5, True])
def test_save_refuses_a_bad_worker_count_before_drawing(
    frame: pd.DataFrame, tmp_path: Path, n_jobs: object
) -> None:
    with pytest.raises(InvalidInput, match=r"n_jobs must be -1 \(all cores\) or an integer >= 1"):
        save(frame, tmp_path / "out", n_jobs=n_jobs)  # type: ignore[arg-type]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="reads processes with ps --ppid and /proc")
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_reproduce_interrupted_while_workers_draw_ends_as_an_interruption(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """Ctrl-C or SIGTERM while the workers draw: exit 130 with one line, no traceback (loky's own
    thread printed one when a queued task was cancelled), no temporary file left, no worker left
    running; a rerun finishes. The timeouts only guard against a hang."""
    command = [sys.executable, "-c", "from toyrl.cli import main; main()", "reproduce", "-q", "--n-jobs", "2"]
    process = subprocess.Popen(
        command,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # as from a terminal
    )
    results = tmp_path / "results" / "article.csv"
    deadline = time.monotonic() + 600
    while not results.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # the results are written: the figures are next
    time.sleep(random.Random(int(sig)).uniform(0.2, 1.0))
    listed = subprocess.run(["ps", "-o", "pid=", "--ppid", str(process.pid)], capture_output=True, text=True)
    children = [int(pid) for pid in listed.stdout.split()]
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=300)
    assert children  # the workers were there
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "Exception" not in stderr and "interrupted" in stderr, stderr
    assert not list(tmp_path.rglob(".*.tmp"))
    deadline = time.monotonic() + 60  # each worker watches its parent twice a second

    def alive(pid: int) -> bool:  # a zombie (exited, not yet reaped by its new parent) is gone
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False

    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in children)
    rerun = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr


@pytest.mark.slow
def test_the_waits_benchmark_runs() -> None:
    """scripts/bench_waits.py --smoke: every row once (the checks at 2 steps), so that the script
    cannot rot; its figures are not measurements and nothing is asserted of them."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "bench_waits.py"
    done = subprocess.run(
        [sys.executable, str(script), "--smoke"], capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith(("toyrl reproduce", "check:"))]
    assert len(rows) == 7 and "ratio" not in done.stdout
