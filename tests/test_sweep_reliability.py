"""`toyrl sweep` under stress: workers and their parent, two sweeps on one folder, file-system
errors, sizes, and Dask clusters that cannot be used. Every failure is one line, within seconds,
and leaves what was on disk as it was."""

import contextlib
import errno
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from toyrl import experiment, sweep, train
from toyrl.config import Config, InvalidInput
from toyrl.experiment import MAX_ROWS
from toyrl.sweep import run_sweep
from toyrl.variants import VARIANTS

from .configs import SMALL as SMALL_CONFIG
from .configs import options
from .files import assert_identical_files, first_difference

CLI = [sys.executable, "-c", "from toyrl.cli import main; main()"]
SMALL = options(SMALL_CONFIG)  # the same runs from the command line


def needs(module: str):
    """The optional module, or a skip outside CI (CI installs the dask extra, which brings psutil)."""
    if os.environ.get("CI"):
        return __import__(module)
    return pytest.importorskip(module, reason="needs the dask extra")


def snapshot(root: Path) -> dict[Path, bytes | None]:
    """Every path under `root` and its bytes (None for a folder)."""
    return {path: None if path.is_dir() else path.read_bytes() for path in sorted(root.rglob("*"))}


def worker_processes(parent) -> list:
    """`parent`'s worker processes: loky's, or those a Dask nanny spawns (not the resource trackers)."""
    psutil = needs("psutil")
    workers = []
    for child in parent.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            line = " ".join(child.cmdline())
            if "popen_loky_posix" in line or "spawn_main" in line:
                workers.append(child)
    return workers


def still_running(processes: list) -> list:
    """Those of `processes` still alive (a zombie waits only for its new parent to reap it)."""
    psutil = needs("psutil")
    running = []
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            if process.status() != psutil.STATUS_ZOMBIE:
                running.append(process)
    return running


@pytest.mark.parametrize("backend", ["loky", "dask"])
def test_a_killed_sweep_leaves_no_worker_and_never_starts_more_than_its_chunks(
    tmp_path: Path, backend: str
) -> None:
    """--n-jobs 1000 with two chunks starts two workers; after SIGKILL of the sweep, every process it
    started is gone within seconds and nothing holds its output open."""
    psutil = needs("psutil")
    if backend == "dask":
        needs("dask.distributed")
    command = [*CLI, "sweep", "--out-dir", str(tmp_path / "s"), "--variant", "grpo", "--seeds", "1"]
    command += ["--grid", "group_size=4,8", "--steps", "100000", "--n-jobs", "1000", "--backend", backend]
    process = subprocess.Popen([*command, "-q"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    parent = psutil.Process(process.pid)
    deadline = time.monotonic() + 240  # a hang guard
    while len(worker_processes(parent)) < 2:
        assert time.monotonic() < deadline and process.poll() is None, "no workers appeared"
        time.sleep(0.05)
    time.sleep(1.0)  # more workers, if any were to come, would be starting by now
    assert len(worker_processes(parent)) == 2
    children = parent.children(recursive=True)
    process.kill()
    process.wait()
    deadline = time.monotonic() + 60  # a hang guard: on a loaded machine ending takes a while
    while still_running(children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not still_running(children)
    assert select.select([process.stdout], [], [], 60)[0], "something still holds the sweep's output open"
    assert os.read(process.stdout.fileno(), 1) == b""


def test_a_worker_killed_midway_is_one_line(tmp_path: Path) -> None:
    """A worker killed (as by the out-of-memory killer) ends the sweep with one line, exit 2."""
    psutil = needs("psutil")
    command = [*CLI, "sweep", "--out-dir", str(tmp_path / "s"), "--variant", "grpo", "--seeds", "1", "-q"]
    command += ["--grid", "group_size=4,8", "--steps", "100000", "--n-jobs", "2"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    parent = psutil.Process(process.pid)
    deadline = time.monotonic() + 240  # a hang guard
    while not (workers := worker_processes(parent)):
        assert time.monotonic() < deadline and process.poll() is None, "no workers appeared"
        time.sleep(0.05)
    workers[0].send_signal(signal.SIGKILL)
    _, stderr = process.communicate(timeout=240)
    assert process.returncode == 2
    assert stderr.startswith("toyrl: error: a worker process was killed") and stderr.count("\n") == 1


@pytest.mark.slow
def test_two_sweeps_cannot_write_one_folder_at_once(tmp_path: Path) -> None:
    """The second one, even with --force and another grid, fails at once; the first one's folder
    describes the first one's grid throughout."""
    folder = tmp_path / "s"
    first_args = ["sweep", "--out-dir", str(folder), "--variant", "grpo", "--seeds", "1", "-q"]
    first_args += ["--grid", "group_size=4,8", "--steps", "10000"]
    first = subprocess.Popen(
        [*CLI, *first_args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 240  # a hang guard
    while not (folder / "sweep.json").exists():
        assert time.monotonic() < deadline and first.poll() is None, (
            first.stderr.read() if first.stderr else ""
        )
        time.sleep(0.02)
    manifest = (folder / "sweep.json").read_bytes()
    second = subprocess.run(
        [*CLI, "sweep", "--out-dir", str(folder), "--variant", "dr_grpo", "--seeds", "1", *SMALL, "--force"],
        capture_output=True,
        text=True,
        timeout=240,  # a hang guard: on a loaded machine the imports alone take a while
    )
    assert first.poll() is None, "the first sweep ended too soon for this test"
    assert second.returncode == 2
    assert second.stderr == (
        f"toyrl: error: another toyrl command is writing the sweep {folder.resolve()}; "
        "wait for it to finish, or choose another path\n"
    )
    assert (folder / "sweep.json").read_bytes() == manifest
    _, stderr = first.communicate(timeout=240)
    assert first.returncode == 0, stderr
    assert json.loads((folder / "sweep.json").read_text())["grid"] == {"group_size": [4, 8]}
    results = pd.read_csv(folder / "results.csv")
    assert set(results.variant) == {"grpo"} and set(results.group_size) == {4, 8}


def _unwritable(tmp_path: Path) -> Path:
    """A folder in which no file can be made: read-only bits, or /proc for root (whom bits do not bind)."""
    if os.geteuid() == 0:
        return Path("/proc")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


def _sweep_folder(tmp_path: Path, manifest: bytes | None = None) -> Path:
    """A folder with a finished run and tables, and the given sweep.json: what --force might remove."""
    folder = tmp_path / "s"
    (folder / "runs").mkdir(parents=True)
    (folder / "runs" / "0123456789abcdef0123.csv").write_text("variant,seed\n")
    (folder / "results.csv").write_text("old results\n")
    if manifest is not None:
        (folder / "sweep.json").write_bytes(manifest)
    return folder


def _file(tmp_path: Path) -> Path:
    (tmp_path / "f").write_text("not a folder\n")
    return tmp_path / "f"


def _runs_file(tmp: Path) -> Path:
    folder = tmp / "s"
    folder.mkdir()
    (folder / "runs").write_text("a file\n")
    return folder


def _folder_named(name: str) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        folder = _sweep_folder(tmp)
        (folder / name).unlink(missing_ok=True)
        (folder / name).mkdir()
        return folder

    return make


def _manifest(content: bytes) -> Callable[[Path], Path]:
    return lambda tmp: _sweep_folder(tmp, content)


WRONG_TYPES = {"toyrl_version": "0", "variants": ["grpo"], "grid": {}, "seeds": [0], "base_config": {}}
CASES: dict[str, tuple[Callable[[Path], Path], str]] = {
    "an existing file": (_file, "--out-dir: '{tmp}/f' is not a folder"),
    "a folder inside a file": (lambda tmp: _file(tmp) / "s", "--out-dir: '{tmp}/f' is not a folder"),
    "a missing parent": (lambda tmp: tmp / "a" / "b", "--out-dir: parent folder '{tmp}/a' does not exist"),
    "a read-only folder": (_unwritable, "is not writable"),
    "a read-only parent": (lambda tmp: _unwritable(tmp) / "s", "is not writable"),
    "runs is a file": (_runs_file, "--out-dir: '{tmp}/s/runs' is a file, not a folder"),
    "sweep.json is a folder": (_folder_named("sweep.json"), "'{tmp}/s/sweep.json' is a folder, not a file"),
    "results.csv is a folder": (
        _folder_named("results.csv"),
        "'{tmp}/s/results.csv' is a folder, not a file",
    ),
    "a manifest not JSON": (_manifest(b"{oops"), "not a readable sweep manifest (Expecting property name"),
    "a manifest not UTF-8": (_manifest(b"\xff\xfe{}"), "not a readable sweep manifest ('utf-8' codec"),
    "a manifest not an object": (
        _manifest(b"[1, 2]"),
        "not a sweep manifest (a JSON object is needed, not an array)",
    ),
    "a manifest of null": (_manifest(b"null"), "not a sweep manifest (a JSON object is needed, not null)"),
    "a manifest nested deeply": (
        _manifest(b"[" * 100_000 + b"]" * 100_000),
        "not a sweep manifest (JSON nested too deeply)",
    ),
    "a manifest of wrong types": (
        _manifest(json.dumps(WRONG_TYPES).encode()),
        "not a sweep manifest ('variants' must be an object)",
    ),
}


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
@pytest.mark.parametrize("case", list(CASES))
def test_an_unusable_out_dir_is_one_line_naming_the_cause_and_nothing_changes(
    tmp_path: Path, case: str, force: bool
) -> None:
    make, message = CASES[case]
    folder = make(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(InvalidInput) as refused:
        run_sweep(folder, [VARIANTS["grpo"]], {}, [0], SMALL_CONFIG, force=force)
    assert message.format(tmp=tmp_path) in str(refused.value) and "\n" not in str(refused.value)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
@pytest.mark.parametrize(
    "foreign", [("results.csv", "final.csv", "sweep.png"), ("sweep.svg",), ("runs/a.csv",)], ids=str
)
def test_a_folder_of_another_tool_is_refused_and_keeps_its_bytes(
    tmp_path: Path, foreign: tuple[str, ...], force: list[str]
) -> None:
    """No sweep.json but files a sweep writes: not a toyrl sweep, refused in one line, every byte kept."""
    from typer.testing import CliRunner

    from toyrl.cli import app

    project = tmp_path / "proj"
    for name in foreign:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_bytes(f"another tool's {name}\n".encode())
    before = snapshot(tmp_path)
    result = CliRunner().invoke(app, ["sweep", "--out-dir", str(project), "--seeds", "1", *SMALL, *force])
    assert result.exit_code == 2, result.output
    listed = ", ".join(name.replace("a.csv", "") for name in foreign)
    assert result.stderr == (
        f"toyrl: error: --out-dir: '{project}' holds {listed} but no sweep.json: not a toyrl sweep, "
        "and toyrl would overwrite them; choose a new or empty --out-dir\n"
    )
    assert snapshot(tmp_path) == before


def test_a_new_an_empty_or_an_unrelated_folder_takes_a_sweep(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes" / "runs").mkdir(parents=True)  # an empty runs/ (a sweep killed as it began) too
    (tmp_path / "notes" / "notes.txt").write_text("mine\n")
    for folder in (tmp_path / "new", tmp_path / "empty", tmp_path / "notes"):
        run_sweep(folder, [VARIANTS["grpo"]], {}, [0], SMALL_CONFIG)
        assert (folder / "sweep.json").is_file() and (folder / "final.csv").is_file()
        run_sweep(folder, [VARIANTS["grpo"]], {}, [0], SMALL_CONFIG)  # and resumes it
    assert (tmp_path / "notes" / "notes.txt").read_text() == "mine\n"


def test_a_sweep_beyond_the_row_limit_is_refused_before_anything(tmp_path: Path) -> None:
    """runs x (steps + 1) summed over the grid: 2 seeds x (10,000,000 + 2) rows here."""
    message = f"the sweep's 4 runs x (steps + 1) would be 20,000,004 rows; the limit is {MAX_ROWS:,}"
    with pytest.raises(InvalidInput, match=re.escape(message)):
        run_sweep(tmp_path / "s", [VARIANTS["grpo"]], {"steps": [9_999_999, 1]}, [0, 1], Config())
    sweep._check_size(2, {"steps": [9_999_999]}, Config())  # exactly the limit: allowed
    assert not list(tmp_path.iterdir())


def test_collecting_a_sweep_holds_one_run_at_a_time(tmp_path: Path) -> None:
    """results.csv is streamed run by run: collecting 60 runs takes far less memory than the table."""
    config = SMALL_CONFIG.replace(steps=200)  # 60 runs of 201 rows: a table far larger than a run
    arguments = (tmp_path / "s", [VARIANTS["grpo"]], {}, list(range(60)), config)
    run_sweep(*arguments)
    results = tmp_path / "s" / "results.csv"
    whole = results.read_bytes()
    results.unlink()
    tracemalloc.start()
    try:
        last = run_sweep(*arguments)  # every run is done: only the collection
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not first_difference(results.read_bytes(), whole)
    assert len(last) == 60 and set(last.step) == {200}
    assert peak < len(whole) / 2, f"{peak:,} bytes at the peak for a {len(whole):,}-byte table"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"variant,seed\ngrpo,0\n", f"not a run of {SMALL_CONFIG.steps + 1} rows of toyrl's columns"),
        (b"\x00\xff\xfe garbage", "not a"),
        (None, f"not a run of {SMALL_CONFIG.steps + 1} rows of toyrl's columns"),  # the run cut short
    ],
    ids=["wrong columns", "garbage", "truncated"],
)
def test_a_broken_run_file_is_named_and_the_old_tables_stay(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    folder = tmp_path / "s"
    arguments = (folder, [VARIANTS["grpo"]], {}, [0, 1], SMALL_CONFIG)
    run_sweep(*arguments)
    broken = sorted((folder / "runs").glob("*.csv"))[1]
    lines = broken.read_bytes().splitlines(keepends=True)
    broken.write_bytes(b"".join(lines[:-3]) if content is None else content)
    before = snapshot(tmp_path)
    with pytest.raises(InvalidInput) as refused:
        run_sweep(*arguments)
    assert str(refused.value).startswith(f"{broken}: {message}") and "delete it" in str(refused.value)
    assert snapshot(tmp_path) == before  # results.csv kept, no temporary file left


def test_a_full_disk_at_the_collection_keeps_the_old_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "s"
    arguments = (folder, [VARIANTS["grpo"]], {}, [0, 1], SMALL_CONFIG)
    run_sweep(*arguments)
    before = snapshot(tmp_path)

    fsync = os.fsync

    def full(handle: int) -> None:  # only results.csv's temporary file meets a full disk
        if ".results.csv." in os.readlink(f"/proc/self/fd/{handle}"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fsync(handle)

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(
        InvalidInput, match=re.escape(f"cannot write {folder / 'results.csv'}: No space left")
    ):
        run_sweep(*arguments)
    assert snapshot(tmp_path) == before  # the old results.csv, and no temporary file


def test_a_refused_cluster_changes_nothing_even_with_force(tmp_path: Path) -> None:
    """The scheduler is checked before --force removes the other sweep."""
    needs("dask.distributed")
    folder = tmp_path / "s"
    run_sweep(folder, [VARIANTS["grpo"]], {}, [0], SMALL_CONFIG)
    before = snapshot(tmp_path)
    with pytest.raises(InvalidInput, match="is not a Dask scheduler address"):
        run_sweep(
            folder,
            [VARIANTS["dr_grpo"]],
            {},
            [0],
            SMALL_CONFIG,
            backend="dask",
            scheduler="nonsense",
            force=True,
        )
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("nonsense", "is not a Dask scheduler address (missing port number"),
        ("foo://x:1", "is not a Dask scheduler address (unknown address scheme 'foo'"),
        ("unreachable", "cannot reach a Dask scheduler (Timed out trying to connect"),
        ("silent", "cannot reach a Dask scheduler (it took the connection but gave no Dask answer"),
        ("no worker", "the cluster has no worker (none came within 5 s); start one with: dask worker"),
    ],
)
def test_an_unusable_dask_cluster_is_one_line_not_a_hang(tmp_path: Path, case: str, message: str) -> None:
    needs("dask.distributed")
    from dask.distributed import LocalCluster

    with contextlib.ExitStack() as stack:
        if case == "unreachable":
            with socket.create_server(("127.0.0.1", 0)) as closed:  # a port nobody listens on
                address = f"tcp://127.0.0.1:{closed.getsockname()[1]}"
        elif case == "silent":  # accepts connections, never answers
            server = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
            address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
        elif case == "no worker":
            address = stack.enter_context(LocalCluster(n_workers=0, dashboard_address=None)).scheduler_address
        else:
            address = case
        command = [*CLI, "sweep", "--out-dir", str(tmp_path / "s"), "--variant", "grpo", "--seeds", "1"]
        result = subprocess.run(  # the timeout only guards against a hang: toyrl gives up by itself
            [*command, *SMALL, "--backend", "dask", "--scheduler", address],
            capture_output=True,
            text=True,
            timeout=240,
        )
    assert result.returncode == 2
    assert result.stderr.startswith("toyrl: error: --scheduler ") and result.stderr.count("\n") == 1
    assert address in result.stderr and message in result.stderr
    assert not (tmp_path / "s").exists()


def test_a_cluster_lost_midway_is_one_line(tmp_path: Path) -> None:
    needs("dask.distributed")
    from dask.distributed import LocalCluster

    folder = tmp_path / "s"
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        command = [*CLI, "sweep", "--out-dir", str(folder), "--variant", "grpo", "--seeds", "1", "-q"]
        command += [
            "--grid",
            "group_size=4,8",
            "--steps",
            "100000",
            "--backend",
            "dask",
            "--scheduler",
            address,
        ]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240  # a hang guard
        while not (folder / "sweep.json").exists():
            assert time.monotonic() < deadline and process.poll() is None, "the sweep did not start"
            time.sleep(0.05)
    _, stderr = process.communicate(timeout=240)
    assert process.returncode == 2
    assert (
        stderr.startswith(f"toyrl: error: the Dask cluster at {address} failed") and stderr.count("\n") == 1
    )


def test_a_cluster_of_one_thread_computes_on_its_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing is simulated in this process, however few threads the cluster has."""
    needs("dask.distributed")
    from dask.distributed import LocalCluster

    arguments = ([VARIANTS["grpo"], VARIANTS["dr_grpo"]], {"group_size": [4, 8]}, [0, 1], SMALL_CONFIG)
    run_sweep(tmp_path / "here", *arguments)

    def nowhere(*_: object, **__: object) -> None:
        raise AssertionError("simulated in the client")

    monkeypatch.setattr(train, "simulate", nowhere)
    monkeypatch.setattr(train, "train_runs", nowhere)
    monkeypatch.setattr(experiment, "train_runs", nowhere)
    monkeypatch.setattr(experiment, "simulate_runs", nowhere)
    monkeypatch.setattr(experiment, "simulate_columns", nowhere)
    monkeypatch.setattr(sweep, "simulate_columns", nowhere)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        run_sweep(tmp_path / "there", *arguments, backend="dask", scheduler=cluster.scheduler_address)
    for name in ("results.csv", "final.csv"):
        assert_identical_files(tmp_path / "there" / name, tmp_path / "here" / name)


def test_a_diverging_run_on_dask_workers_is_one_line_without_their_warnings(tmp_path: Path) -> None:
    """A run that diverges in a Dask worker (the k3 term at lr 1000) ends the sweep with toyrl's one
    line, exit 2: no numpy RuntimeWarning printed by the workers, no traceback."""
    needs("dask.distributed")
    command = [*CLI, "sweep", "--out-dir", str(tmp_path / "s"), "--backend", "dask", "--seeds", "2", "-q"]
    command += ["--variant", "advantage=none,aggregation=seq_mean_token_sum_norm,beta=0.1"]
    command += ["--grid", "lr=1000", "--steps", "5"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 2, result.stderr
    assert "diverged at step 1" in result.stderr
    assert "Warning" not in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert [line for line in result.stderr.splitlines() if line.strip()] == [result.stderr.strip()]


def test_a_killed_sweep_leaves_the_terminal_quiet() -> None:
    """After a SIGKILL of the sweep, loky's resource tracker still cleans up what its workers
    left, without printing its leak warnings (several lines each) on the terminal."""
    psutil = needs("psutil")
    with tempfile.TemporaryDirectory() as folder:
        command = [*CLI, "sweep", "--out-dir", str(Path(folder) / "s"), "--variant", "grpo", "--seeds", "1"]
        command += ["--grid", "group_size=4,8", "--steps", "100000", "--n-jobs", "2", "-q"]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        parent = psutil.Process(process.pid)
        deadline = time.monotonic() + 240  # a hang guard
        while len(worker_processes(parent)) < 2:
            assert time.monotonic() < deadline and process.poll() is None, "no workers appeared"
            time.sleep(0.05)
        time.sleep(1.0)
        process.kill()
        process.wait()
        printed, deadline = b"", time.monotonic() + 30
        while time.monotonic() < deadline:  # until every process holding the pipe has ended
            if select.select([process.stderr], [], [], 1)[0]:
                chunk = os.read(process.stderr.fileno(), 4096)
                if not chunk:
                    break
                printed += chunk
        assert printed == b"", printed.decode(errors="replace")
