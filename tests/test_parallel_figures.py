"""Figures drawn over worker processes (`toyrl.plot.save(..., n_jobs)`, `toyrl reproduce --n-jobs`):
the same files, byte for byte, as drawn in one process, in the caller's matplotlib settings."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import matplotlib
import pandas as pd
import pytest

import toyrl
import toyrl.experiment as experiment
from toyrl import plots
from toyrl.config import InvalidInput
from toyrl.plot import save


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """The article's four variants, two seeds, a short run, its configuration in attrs (for the
    bias figure's replay)."""
    return toyrl.run("all", seeds=2, steps=30)


def counted_parallel(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The workers each joblib.Parallel that toyrl starts is asked for, as it starts them."""
    asked: list[int] = []
    real = experiment.Parallel

    def counting(*args: object, n_jobs: int = 1, **kwargs: object) -> object:
        asked.append(n_jobs)
        return real(*args, n_jobs=n_jobs, **kwargs)

    monkeypatch.setattr(experiment, "Parallel", counting)
    return asked


def test_save_over_workers_writes_the_bytes_of_one_process(
    frame: pd.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = counted_parallel(monkeypatch)
    monkeypatch.setattr(experiment.os, "cpu_count", lambda: 2)
    serial = save(frame, tmp_path / "serial", n_jobs=1)
    assert asked == []  # one process: no workers
    parallel = save(frame, tmp_path / "parallel", n_jobs=-1)
    assert asked == [2]  # every core, here two
    names = [path.name for path in serial]
    assert names == [path.name for path in parallel]
    assert {"length_2x2.png", "bias.svg", "token_weights.svg", "difficulty.png"} <= set(names)
    for one, other in zip(serial, parallel, strict=True):
        assert one.read_bytes() == other.read_bytes(), one.name


def test_workers_draw_in_the_caller_s_matplotlib_settings(frame: pd.DataFrame, tmp_path: Path) -> None:
    jobs = [job for job in plots.figure_jobs(frame) if job.name == "accuracy"]
    for name in ("plain", "serial", "parallel"):
        (tmp_path / name).mkdir()
    plain = plots.draw_figures(jobs, tmp_path / "plain", workers=2)
    with matplotlib.rc_context({"axes.facecolor": "#f2f2f2"}):
        serial = plots.draw_figures(jobs, tmp_path / "serial", workers=1)
        parallel = plots.draw_figures(jobs, tmp_path / "parallel", workers=2)
    for before, one, other in zip(plain, serial, parallel, strict=True):
        assert one.read_bytes() == other.read_bytes() != before.read_bytes(), one.name


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
