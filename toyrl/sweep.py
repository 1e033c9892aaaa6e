"""Sweeps: every variant x configuration grid point x seed, resumable, on joblib or a Dask cluster.

A sweep lives in one folder:

- `sweep.json`, the manifest: the grid, the seeds, the base configuration and the toyrl version
  (and the plugins the variants use, by source hash: `toyrl.plugins`). Running the same command
  again resumes; a different grid (or a changed plugin) in the same folder is refused unless
  `force`, which starts it afresh.
- `runs/`, one CSV per finished run, written atomically the moment its chunk finishes: a sweep
  stopped at any moment loses no finished run, and a resumed one does only what is missing.
- `results.csv`, every run's rows with the grid's columns, and `final.csv`, the last step's
  mean and sd over seeds per grid point, written when nothing is missing. They are written run file
  by run file, so collecting a sweep holds one run in memory (and every run's last row), whatever
  the sweep's size.

One sweep at a time writes a folder (`toyrl.files.claim`), and whatever can be checked (the size,
the folder, its manifest, the Dask cluster) is checked before anything is written.

Runs that share a grid point (same configuration) advance together as one array, as in
`toyrl.train`; a run's numbers depend only on its variant, configuration and seed, so they are the
same whatever the backend, the number of workers or the order in which chunks finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import itertools
import json
import logging
import math
import os
import shutil
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import pandas as pd
from joblib import Parallel, delayed

from toyrl import __version__, install
from toyrl.config import Config, InvalidInput
from toyrl.experiment import (
    MAX_ROWS,
    check_n_jobs,
    check_runs,
    check_seeds,
    die_with_parent,
    frame_of,
    quiet_resource_tracker,
    runs_per_chunk,
    simulate_columns,
    simulate_in_worker,
    worker_count,
)
from toyrl.files import check_writable, claim, write_atomic
from toyrl.inputs import MANIFEST, RESULTS, Unreadable, json_problem, open_regular, read_bytes
from toyrl.objective import Variant
from toyrl.plugins import plugins_used
from toyrl.train import COLUMNS
from toyrl.values import parse_as

if TYPE_CHECKING:
    from dask.distributed import Client

GRIDDABLE = [f.name for f in fields(Config)]
# Seconds to reach a Dask scheduler (and 1 more for its answer), then for its first worker:
# distributed alone waits forever for the answer of a server that is not a Dask scheduler, and for
# workers that never come.
CONNECT_TIMEOUT = 5.0
# What a sweep folder may already hold, and whether each is a folder: anything else there is refused.
LAYOUT = {"sweep.json": False, "runs": True, "results.csv": False, "final.csv": False}
# What a sweep writes beside its manifest (the figure by `toyrl sweep`): a folder that holds any of
# them, or runs in runs/, but no sweep.json is another tool's, and toyrl would overwrite its files.
OUTPUTS = ("results.csv", "final.csv", "sweep.png", "sweep.svg")
MANIFEST_TYPES = {"toyrl_version": str, "variants": dict, "grid": dict, "seeds": list, "base_config": dict}
JSON_NAMES = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"} | {
    bool: "true or false",
    type(None): "null",
}


def parse_grid(axes: Sequence[str], base: Config) -> dict[str, list[Any]]:
    """`KEY=V1,V2,...` axes over Config fields, values converted to the field's type and checked."""
    grid: dict[str, list[Any]] = {}
    for axis in axes:
        key, _, raw = axis.partition("=")
        key = key.strip().replace("-", "_")
        if key not in GRIDDABLE:
            raise InvalidInput(f"--grid {axis!r}: unknown field {key!r}; valid: {', '.join(GRIDDABLE)}")
        if key in grid:
            raise InvalidInput(f"--grid {axis!r}: {key} is given twice")
        if not raw.strip():
            raise InvalidInput(f"--grid {axis!r}: give at least one value, as {key}=V1,V2,...")
        try:
            values = [parse_as(key, part.strip(), getattr(base, key)) for part in raw.split(",")]
        except InvalidInput as error:
            raise InvalidInput(f"--grid {axis!r}: {error}") from None
        for value in values:
            base.replace(**{key: value})  # raises ConfigError naming the field and its range
        grid[key] = list(dict.fromkeys(values))
    return grid


@dataclass(frozen=True)
class Point:
    """One grid point: a configuration and the values that made it."""

    values: tuple[tuple[str, Any], ...]
    config: Config


def points(grid: dict[str, list[Any]], base: Config) -> list[Point]:
    keys = list(grid)
    return [
        Point(
            tuple(zip(keys, combination, strict=True)),
            base.replace(**dict(zip(keys, combination, strict=True))),
        )
        for combination in itertools.product(*grid.values())
    ]


def run_id(variant: Variant, point: Point, seed: int) -> str:
    """A file name for one run, stable across sessions: a digest of what defines it (with the
    source hashes of the plugins whose stages it uses, if any)."""
    defined = [variant.name, variant.spec_text(), point.config.to_dict(), seed]
    plugins = [plugin.sha256 for plugin in plugins_used([variant])]
    key = json.dumps([*defined, plugins] if plugins else defined, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:20]


Chunk = tuple[Point, list[tuple[Variant, int]]]  # runs of one grid point, simulated together


def run_sweep(
    folder: Path,
    variants: Sequence[Variant],
    grid: dict[str, list[Any]],
    seeds: Sequence[int],
    base: Config,
    n_jobs: int = 1,
    backend: str = "loky",
    scheduler: str | None = None,
    force: bool = False,
    progress: Callable[[int, int, int], None] | None = None,
) -> pd.DataFrame:
    """Run what is missing of the sweep in `folder`, write its tables, and return every run's last step.

    The returned table has one row per run (its last step, with the grid's columns): what
    `toyrl.plots.plot_sweep` draws; the whole trajectories are in results.csv.
    `progress(done, total, just_finished)` is called as chunks finish. `backend` is "loky"
    (joblib's processes, `n_jobs` of them, -1: every core) or "dask" (the Dask distributed cluster
    at `scheduler`, or a local one of `n_jobs` processes); never more workers than cores or chunks.
    """
    _check_backend(n_jobs, backend, scheduler)
    _check_size(len(variants) * len(seeds), grid, base)
    check_seeds(seeds)
    grid_points = points(grid, base)
    for point in grid_points:  # every grid point, before anything is written
        try:
            check_runs(point.config, variants)
        except InvalidInput as error:
            where = ", ".join(f"{key}={value}" for key, value in point.values)
            raise InvalidInput(f"grid point {where}: {error}") from None
    _check_folder(folder)
    manifest = {
        "toyrl_version": __version__,
        "variants": {v.name: v.spec_text() for v in variants},
        "grid": grid,
        "seeds": [int(s) for s in seeds],
        "base_config": base.to_dict(),
    }
    plugins = plugins_used(variants)
    if plugins:  # by name, version and source hash: a path spelled otherwise resumes the same sweep
        manifest["plugins"] = [{k: v for k, v in p.record().items() if k != "path"} for p in plugins]
    runs_folder = folder / "runs"
    with claim(folder.resolve(), "the sweep"):
        replace = _replaces(folder, manifest, force)
        finished = set() if replace else {path.name for path in runs_folder.glob("*.csv")}
        todo = _chunks(grid_points, variants, seeds, finished)
        total = len(grid_points) * len(variants) * len(seeds)
        done = total - sum(len(runs) for _, runs in todo)
        with _running(todo, n_jobs, backend, scheduler or None) as finishing:
            _prepare(folder, manifest, replace)
            if progress is not None:
                progress(done, total, 0)
            for index, frame in finishing:
                point, runs = todo[index]
                for (variant, seed), (_, rows) in zip(
                    runs, frame.groupby(["variant", "seed"], sort=False), strict=True
                ):
                    path = runs_folder / f"{run_id(variant, point, seed)}.csv"
                    write_atomic(path, rows.to_csv(index=False, lineterminator="\n"))
                done += len(runs)
                if progress is not None:
                    progress(done, total, len(runs))
        return _collect(folder, variants, grid_points, seeds)


def _chunks(
    grid_points: list[Point], variants: Sequence[Variant], seeds: Sequence[int], finished: set[str]
) -> list[Chunk]:
    """The runs whose file is not in `finished`, in chunks of one grid point, as large as
    `toyrl.train.runs_per_chunk` allows for its configuration."""
    todo: list[Chunk] = []
    for point in grid_points:
        missing = [
            (variant, seed)
            for variant in variants
            for seed in seeds
            if f"{run_id(variant, point, seed)}.csv" not in finished
        ]
        size = runs_per_chunk(point.config)
        todo += [(point, missing[i : i + size]) for i in range(0, len(missing), size)]
    return todo


def _check_backend(n_jobs: int, backend: str, scheduler: str | None) -> None:
    """The options' own ranges, and the optional extra that the Dask backend needs."""
    check_n_jobs(n_jobs)
    if backend not in ("loky", "dask"):
        raise InvalidInput(f"--backend must be loky or dask (got {backend!r})")
    if scheduler and backend != "dask":
        raise InvalidInput("--scheduler needs --backend dask")
    if backend == "dask":
        try:
            import dask.distributed  # noqa: F401
        except ImportError:
            raise InvalidInput(
                f"--backend dask needs the optional extra dask: {install.hint('dask')}"
            ) from None


def _check_size(runs_per_point: int, grid: dict[str, list[Any]], base: Config) -> None:
    """Refuse a sweep of more than `MAX_ROWS` rows (runs x (steps + 1) over the grid), from the grid
    alone: nothing is built or written first.

    `toyrl run`'s limit serves here too: results.csv takes about 270 bytes a row (and runs/ as much
    again), so that is about 5 GB, a table pandas can still read back in the memory `run` allows.
    """
    steps = grid.get("steps", [base.steps])
    runs_per_steps = runs_per_point * math.prod(len(values) for key, values in grid.items() if key != "steps")
    rows = runs_per_steps * sum(value + 1 for value in steps)
    if rows > MAX_ROWS:
        raise InvalidInput(
            f"the sweep's {runs_per_steps * len(steps):,} runs x (steps + 1) would be {rows:,} rows; "
            f"the limit is {MAX_ROWS:,}: use fewer variants, seeds, grid values or steps"
        )


def _check_folder(folder: Path) -> None:
    """InvalidInput naming the cause unless `folder` is, or can be made as, a writable sweep folder.

    It only looks (and probes writability with a file it removes): nothing is made or removed. The
    folder's parent must be writable too: the sweep's claim (a lock file) is made there.
    """
    try:
        existing = next(path for path in (folder, *folder.parents) if os.path.lexists(path))
        if not existing.is_dir():
            raise InvalidInput(f"--out-dir: '{existing}' is not a folder")
        if existing not in (folder, folder.parent):
            raise InvalidInput(f"--out-dir: parent folder '{folder.parent}' does not exist")
        for name, is_folder in LAYOUT.items():
            path = folder / name
            if os.path.lexists(path) and path.is_dir() != is_folder:
                kind = "a file, not a folder" if is_folder else "a folder, not a file"
                raise InvalidInput(f"--out-dir: '{path}' is {kind}; is '{folder}' a toyrl sweep?")
    except OSError as error:
        raise InvalidInput(f"--out-dir: cannot look into '{folder}' ({error.strerror or error})") from None
    if existing == folder:
        check_writable(folder, "--out-dir")
    check_writable(folder.resolve().parent, "--out-dir")


def _replaces(folder: Path, manifest: dict[str, Any], force: bool) -> bool:
    """Whether `folder` holds another sweep, which `force` lets this one replace.

    InvalidInput if it does and `force` is not given, or if its sweep.json is not a sweep manifest:
    even `force` does not remove files from a folder that toyrl may not have made.
    """
    path = folder / "sweep.json"
    if not os.path.lexists(path):
        _check_not_foreign(folder)
        return False
    remedy = "remove it, or choose another --out-dir"
    try:
        existing = json.loads(read_bytes(path, MANIFEST).decode("utf-8"))
    except Unreadable as error:
        raise InvalidInput(f"{path}: {error.reason}; {remedy}") from None
    except RecursionError:
        raise InvalidInput(f"{path}: not a sweep manifest (JSON nested too deeply); {remedy}") from None
    except ValueError as error:
        reason = json_problem(error)
        raise InvalidInput(f"{path}: not a readable sweep manifest ({reason}); {remedy}") from None
    if not isinstance(existing, dict):
        found = JSON_NAMES[type(existing)]
        raise InvalidInput(f"{path}: not a sweep manifest (a JSON object is needed, not {found}); {remedy}")
    for key, kind in MANIFEST_TYPES.items():
        if not isinstance(existing.get(key), kind):
            raise InvalidInput(f"{path}: not a sweep manifest ({key!r} must be {JSON_NAMES[kind]}); {remedy}")
    ignore = "toyrl_version"  # a sweep begun with another version resumes
    same = {k: v for k, v in existing.items() if k != ignore} == {
        k: v for k, v in json.loads(json.dumps(manifest)).items() if k != ignore
    }
    if not same and not force:
        raise InvalidInput(
            f"{folder} holds a different sweep (see {path.name}); "
            "use another --out-dir, or --force to replace it"
        )
    return not same


def _check_not_foreign(folder: Path) -> None:
    """InvalidInput if `folder`, which has no sweep.json, holds files a sweep would write (or runs):
    they are not a toyrl sweep's, and even --force leaves them alone."""
    try:
        found = [name for name in OUTPUTS if os.path.lexists(folder / name)]
        runs = folder / "runs"
        if runs.is_dir() and any(runs.iterdir()):
            found.append("runs/")
    except OSError as error:
        raise InvalidInput(f"--out-dir: cannot look into '{folder}' ({error.strerror or error})") from None
    if found:
        raise InvalidInput(
            f"--out-dir: '{folder}' holds {', '.join(found)} but no sweep.json: not a toyrl sweep, and "
            "toyrl would overwrite them; choose a new or empty --out-dir"
        )


def _prepare(folder: Path, manifest: dict[str, Any], replace: bool) -> None:
    """Make the folder and write the manifest; when replacing another sweep, first remove its tables,
    then its runs: a kill midway leaves the old sweep (resumable), never tables of one grid beside
    the manifest of another."""
    runs = folder / "runs"
    try:
        if replace:
            for name in ("results.csv", "final.csv"):
                (folder / name).unlink(missing_ok=True)
            if runs.exists():
                shutil.rmtree(runs)
        folder.mkdir(exist_ok=True)
        runs.mkdir(exist_ok=True)
    except OSError as error:
        raise InvalidInput(f"cannot prepare the sweep folder {folder}: {error.strerror or error}") from None
    write_atomic(folder / "sweep.json", json.dumps(manifest, indent=2) + "\n")


@contextlib.contextmanager
def _running(
    todo: list[Chunk], n_jobs: int, backend: str, scheduler: str | None
) -> Iterator[Iterator[tuple[int, pd.DataFrame]]]:
    """(index in `todo`, frame) pairs as chunks finish, in any order; the work starts when the first
    is asked for. A Dask cluster is reached on entry, so that one that cannot work is refused
    before anything is written, and closed on exit. Never more workers than cores or chunks."""
    if not todo:
        yield iter(())
        return
    workers = worker_count(n_jobs, len(todo))
    if backend == "dask":
        with _dask_client(scheduler, workers) as client:
            yield _on_dask(client, todo, scheduler)
    elif workers == 1:
        yield ((i, frame_of(simulate_columns(point.config, runs))) for i, (point, runs) in enumerate(todo))
    else:
        with (
            quiet_resource_tracker(),
            contextlib.closing(_on_loky(todo, workers)) as finishing,
        ):  # a failure stops the workers at once
            yield finishing


def _tagged(index: int, config: Config, runs: list[tuple[Variant, int]]) -> tuple[int, pd.DataFrame]:
    """A chunk in a worker process, which ends with its parent; tagged, as chunks finish in any order."""
    return index, simulate_in_worker(config, runs)


def _on_loky(todo: list[Chunk], workers: int) -> Generator[tuple[int, pd.DataFrame]]:
    """The chunks on `workers` loky processes, each of which ends with the sweep from its start on."""
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    parallel = Parallel(
        n_jobs=workers, return_as="generator_unordered", initializer=die_with_parent, initargs=(os.getpid(),)
    )
    try:
        yield from parallel(delayed(_tagged)(i, point.config, runs) for i, (point, runs) in enumerate(todo))
    except TerminatedWorkerError:
        raise InvalidInput(
            "a worker process was killed (out of memory?); the runs finished so far are kept: "
            "run the same command again to resume, with fewer --n-jobs if memory is short"
        ) from None


@contextlib.contextmanager
def _dask_client(scheduler: str | None, workers: int) -> Iterator[Client]:
    """A client of the cluster at `scheduler`, or of a local cluster of `workers` processes; both
    are closed on the way out.

    distributed's own logs are silenced meanwhile: what goes wrong is told in one line (a lost
    scheduler, say, would add a traceback of distributed's reconnection), and a Ctrl-C is not
    followed by warnings about workers being stopped.
    """
    from dask.distributed import Client, LocalCluster
    from distributed.utils import silence_logging_cmgr

    with contextlib.ExitStack() as stack:
        stack.enter_context(silence_logging_cmgr(logging.CRITICAL))
        if scheduler:
            client = _connect(scheduler)
        else:
            cluster = stack.enter_context(
                LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=logging.CRITICAL,
                )
            )
            client = Client(cluster, set_as_default=False)
        with client:
            yield client


def _connect(scheduler: str) -> Client:
    """A client of the scheduler at `scheduler`, with a worker; or InvalidInput naming the address
    and the problem within about 2 x CONNECT_TIMEOUT."""
    from dask.distributed import Client
    from distributed.comm import connect
    from distributed.security import Security

    async def handshake() -> None:
        arguments = Security().get_connection_args("client")
        # distributed's timeout bounds reaching the address, not the wait for its answer: 1 s more here
        comm = await asyncio.wait_for(connect(scheduler, CONNECT_TIMEOUT, **arguments), CONNECT_TIMEOUT + 1)
        await comm.close()

    try:
        with ThreadPoolExecutor(1) as thread:  # its own event loop, whether or not this thread has one
            thread.submit(asyncio.run, handshake()).result()
        client = Client(scheduler, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except ValueError as error:
        raise InvalidInput(
            f"--scheduler {scheduler!r} is not a Dask scheduler address ({error}); give one as tcp://HOST:PORT"
        ) from None
    except (OSError, TypeError) as error:
        reason = str(error) or "it took the connection but gave no Dask answer: is it a Dask scheduler?"
        raise InvalidInput(f"--scheduler {scheduler}: cannot reach a Dask scheduler ({reason})") from None
    try:
        client.wait_for_workers(1, timeout=CONNECT_TIMEOUT)
    except TimeoutError:
        client.close()
        raise InvalidInput(
            f"--scheduler {scheduler}: the cluster has no worker (none came within {CONNECT_TIMEOUT:g} s); "
            f"start one with: dask worker {scheduler}"
        ) from None
    return client


def _on_dask(client: Client, todo: list[Chunk], scheduler: str | None) -> Iterator[tuple[int, pd.DataFrame]]:
    """The chunks on the cluster's workers, never in this process, whatever the cluster's threads.

    Only `as_completed` holds the futures: a chunk's frame is released on the cluster once handed over.
    """
    from dask.distributed import CancelledError, KilledWorker, as_completed

    for future in as_completed(
        [client.submit(_tagged, i, point.config, runs, pure=False) for i, (point, runs) in enumerate(todo)],
        loop=client.loop,
    ):
        try:
            index, frame = future.result()
        except (KilledWorker, CancelledError, OSError) as error:  # a lost scheduler cancels every future
            where = f"at {scheduler}" if scheduler else "(local)"
            raise InvalidInput(
                f"the Dask cluster {where} failed ({type(error).__name__}); the runs finished so far "
                "are kept: run the same command again to resume"
            ) from None
        yield index, frame


def _collect(
    folder: Path, variants: Sequence[Variant], grid_points: list[Point], seeds: Sequence[int]
) -> pd.DataFrame:
    """Write results.csv (every run's rows with the grid's columns, in grid order) one run at a time,
    and final.csv from every run's last row; return those last rows."""
    last_rows: list[list[Any]] = []
    shape = pd.DataFrame()  # a run's columns and their types, with no rows

    def write_results(stream: BinaryIO) -> None:
        nonlocal shape
        text = io.TextIOWrapper(stream, encoding="utf-8", newline="")
        for point, variant, seed in itertools.product(grid_points, variants, seeds):
            path = folder / "runs" / f"{run_id(variant, point, seed)}.csv"
            rows = _read_run(path, point.config.steps)
            for position, (key, value) in enumerate(point.values, start=1):
                rows.insert(position, key, value)
            rows.to_csv(text, index=False, header=not last_rows, lineterminator="\n")
            last_rows.append(rows.iloc[-1].tolist())
            shape = rows.iloc[:0]
        text.flush()
        text.detach()

    write_atomic(folder / "results.csv", write_results)
    last = pd.DataFrame(last_rows, columns=shape.columns).astype(shape.dtypes.to_dict())
    keys = [key for key, _ in grid_points[0].values]
    final = last.groupby(["variant", *keys], sort=False)[
        ["accuracy", "length_incorrect", "length_correct"]
    ].agg(["mean", "std"])
    final.columns = ["_".join(map(str, column)) for column in final.columns.to_flat_index()]
    write_atomic(folder / "final.csv", final.reset_index().to_csv(index=False, lineterminator="\n"))
    return last


def _read_run(path: Path, steps: int) -> pd.DataFrame:
    """One run's rows, or InvalidInput naming its file if it is not a whole run of `steps` steps."""
    remedy = "delete it and run the same command again to redo that run"
    try:
        with open_regular(path, RESULTS) as stream:
            rows = pd.read_csv(stream)
    except Unreadable as error:
        raise InvalidInput(f"{path}: {error.reason}; {remedy}") from None
    except (OSError, ValueError, OverflowError) as error:
        raise InvalidInput(f"{path}: not a readable run ({' '.join(str(error).split())}); {remedy}") from None
    if list(rows.columns) != COLUMNS or len(rows) != steps + 1:
        raise InvalidInput(f"{path}: not a run of {steps + 1} rows of toyrl's columns; {remedy}")
    return rows


def final_table(last: pd.DataFrame, keys: Sequence[str]) -> tuple[str, list[list[str]]]:
    """What `toyrl sweep` prints of its runs' last steps (`run_sweep`'s table): a heading that says
    what ± and the intervals are, and rows (the header first), one a grid point and variant, in the
    sweep's order: the grid's values, the variant's display name, accuracy % and E[L | incorrect]
    as mean ± sd over seeds, and with two or more variants, each variant's paired difference from
    the reference (`toyrl.results.difference_reference`) at the same grid point with its 95%
    interval (`toyrl.spread.paired_difference`; none below 3 seeds)."""
    from toyrl.results import difference_reference
    from toyrl.spread import MIN_SEEDS, format_mean_sd, over_seeds, paired_difference
    from toyrl.variants import display_name

    names = list(dict.fromkeys(last["variant"].astype(str)))
    reference = difference_reference(names)
    groups = list(last.groupby(list(keys), sort=False)) if keys else [((), last)]
    counts = [int((group["variant"] == name).sum()) for _, group in groups for name in names]
    header = [*keys, "variant", "accuracy %", "E[L | incorrect]"]
    heading = f"Final step, exact expectations, {over_seeds(counts)}"
    if len(names) > 1:
        versus = f"vs {display_name(reference)}"
        header += [f"{versus}: accuracy, points", f"{versus}: E[L | incorrect]"]
        interval = (
            "the 95% CI in parentheses (percentile bootstrap over seeds)"
            if min(counts) >= MIN_SEEDS
            else f"too few seeds for an interval (at least {MIN_SEEDS})"
        )
        heading += (
            f"; {versus}: the paired difference from it at the same grid point (a seed's variants "
            f"share its noise), {interval}"
        )
    rows = [header]
    for values, group in groups:
        point = [str(value) for value in (values if isinstance(values, tuple) else (values,))]
        base = group[group["variant"] == reference]
        for name in names:
            runs = group[group["variant"] == name]
            row = [*point, display_name(name)]
            row += [format_mean_sd(runs["accuracy"], 100, 1), format_mean_sd(runs["length_incorrect"])]
            if len(names) > 1:
                for column, scale, digits in (("accuracy", 100, 1), ("length_incorrect", 1, 0)):
                    d = paired_difference(runs[column], base[column], runs["seed"], base["seed"])
                    row.append("reference" if name == reference else d.cell(scale, digits))
            rows.append(row)
    return heading + ":", rows
