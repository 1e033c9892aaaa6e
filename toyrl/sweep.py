"""Sweeps: every variant x configuration grid point x seed, resumable, on joblib or a Dask cluster.

A sweep lives in one folder:

- `sweep.json`, the manifest: the grid, the seeds, the base configuration and the toyrl version.
  Running the same command again resumes; a different grid in the same folder is refused unless
  `force`, which starts it afresh.
- `runs/`, one CSV per finished run, written atomically the moment its chunk finishes: a sweep
  stopped at any moment loses no finished run, and a resumed one does only what is missing.
- `results.csv`, every run's rows with the grid's columns, and `final.csv`, the last step's
  mean and sd over seeds per grid point, written when nothing is missing.

Runs that share a grid point (same configuration) advance together as one array, as in
`toyrl.train`; a run's numbers depend only on its variant, configuration and seed, so they are the
same whatever the backend, the number of workers or the order in which chunks finish.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd
from joblib import Parallel, delayed, parallel_config

from toyrl import __version__
from toyrl.config import Config, InvalidInput
from toyrl.objective import Variant
from toyrl.results import write_atomic
from toyrl.train import RUNS_PER_CHUNK, simulate

GRIDDABLE = [f.name for f in fields(Config)]


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
        kind = type(getattr(base, key))
        if not raw.strip():
            raise InvalidInput(f"--grid {axis!r}: give at least one value, as {key}=V1,V2,...")
        values = []
        for text in (part.strip() for part in raw.split(",")):
            try:
                values.append(kind(text))
            except ValueError:
                raise InvalidInput(
                    f"--grid {axis!r}: {key} takes {kind.__name__} values (got {text!r})"
                ) from None
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
    """A file name for one run, stable across sessions: a digest of what defines it."""
    key = json.dumps([variant.name, variant.describe(), point.config.to_dict(), seed], sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:20]


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
    """Run what is missing of the sweep in `folder`, then write and return its tidy results.

    `progress(done, total, just_finished)` is called as chunks finish. `backend` is "loky"
    (joblib's processes, the default) or "dask" (joblib's Dask backend: a Dask distributed client
    on `scheduler`, or a local cluster).
    """
    manifest = {
        "toyrl_version": __version__,
        "variants": {v.name: v.describe() for v in variants},
        "grid": grid,
        "seeds": [int(s) for s in seeds],
        "base_config": base.to_dict(),
    }
    _prepare(folder, manifest, force)
    runs_folder = folder / "runs"
    grid_points = points(grid, base)
    todo: list[tuple[Config, list[tuple[Variant, int]]]] = []
    total = 0
    for point in grid_points:
        missing = [
            (variant, seed)
            for variant in variants
            for seed in seeds
            if not (runs_folder / f"{run_id(variant, point, seed)}.csv").exists()
        ]
        total += len(variants) * len(seeds)
        for start in range(0, len(missing), RUNS_PER_CHUNK):
            todo.append((point.config, missing[start : start + RUNS_PER_CHUNK]))
    done = total - sum(len(runs) for _, runs in todo)
    by_config = {point.config: point for point in grid_points}
    if progress is not None:
        progress(done, total, 0)
    for frame, (config, runs) in _execute(todo, n_jobs, backend, scheduler):
        point = by_config[config]
        for (variant, seed), (_, rows) in zip(
            runs, frame.groupby(["variant", "seed"], sort=False), strict=True
        ):
            path = runs_folder / f"{run_id(variant, point, seed)}.csv"
            write_atomic(path, rows.to_csv(index=False, lineterminator="\n"))
        done += len(runs)
        if progress is not None:
            progress(done, total, len(runs))
    return _collect(folder, variants, grid_points, seeds)


def _prepare(folder: Path, manifest: dict[str, Any], force: bool) -> None:
    path = folder / "sweep.json"
    if path.exists():
        try:
            existing = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise InvalidInput(f"{path}: not a readable sweep manifest ({error})") from None
        same = {k: v for k, v in existing.items() if k != "toyrl_version"} == {
            k: v for k, v in json.loads(json.dumps(manifest)).items() if k != "toyrl_version"
        }
        if not same and not force:
            raise InvalidInput(
                f"{folder} holds a different sweep (see {path.name}); "
                "use another --out-dir, or --force to replace it"
            )
        if not same:
            shutil.rmtree(folder / "runs", ignore_errors=True)
    folder.mkdir(exist_ok=True)
    (folder / "runs").mkdir(exist_ok=True)
    write_atomic(path, json.dumps(manifest, indent=2) + "\n")


def _execute(
    todo: list[tuple[Config, list[tuple[Variant, int]]]], n_jobs: int, backend: str, scheduler: str | None
) -> Any:
    """(frame, job) pairs as jobs finish, in any order."""
    if not todo:
        return iter(())
    if backend == "dask":
        from dask.distributed import Client, LocalCluster

        workers = (os.cpu_count() or 1) if n_jobs == -1 else n_jobs
        local = (
            None
            if scheduler
            else LocalCluster(n_workers=workers, threads_per_worker=1, dashboard_address=None)
        )
        client = Client(scheduler or local)

        def run_on_dask() -> Any:
            try:
                with parallel_config(backend="dask"):
                    results = Parallel(n_jobs=-1, return_as="generator_unordered")(
                        delayed(_tagged)(i, config, runs) for i, (config, runs) in enumerate(todo)
                    )
                    for i, frame in results:
                        yield frame, todo[i]
            finally:
                client.close()
                if local is not None:
                    local.close()

        return run_on_dask()
    if n_jobs == 1 or len(todo) == 1:
        return ((simulate(config, runs), (config, runs)) for config, runs in todo)
    results = Parallel(n_jobs=n_jobs, return_as="generator_unordered")(
        delayed(_tagged)(i, config, runs) for i, (config, runs) in enumerate(todo)
    )
    return ((frame, todo[i]) for i, frame in results)


def _tagged(index: int, config: Config, runs: list[tuple[Variant, int]]) -> tuple[int, pd.DataFrame]:
    return index, simulate(config, runs)


def _collect(
    folder: Path, variants: Sequence[Variant], grid_points: list[Point], seeds: Sequence[int]
) -> pd.DataFrame:
    """Every run's rows with the grid columns, in grid order; results.csv and final.csv."""
    frames = []
    for point in grid_points:
        for variant in variants:
            for seed in seeds:
                rows = pd.read_csv(folder / "runs" / f"{run_id(variant, point, seed)}.csv")
                for key, value in point.values:
                    rows[key] = value
                frames.append(rows)
    table = pd.concat(frames, ignore_index=True)
    keys = [key for key, _ in grid_points[0].values]
    table = table[["variant", *keys, *[c for c in table.columns if c not in ("variant", *keys)]]]
    write_atomic(folder / "results.csv", table.to_csv(index=False, lineterminator="\n"))
    last = (
        table[table["step"] == table["step"].max()]
        if not keys
        else table[table["step"] == table.groupby(keys)["step"].transform("max")]
    )
    final = last.groupby(["variant", *keys], sort=False)[
        ["accuracy", "length_incorrect", "length_correct"]
    ].agg(["mean", "std"])
    final.columns = ["_".join(map(str, column)) for column in final.columns.to_flat_index()]
    write_atomic(folder / "final.csv", final.reset_index().to_csv(index=False, lineterminator="\n"))
    return table


def estimate_left(done: int, total: int, elapsed: float, finished_now: int) -> float:
    """Seconds left at the rate of the runs done in this session (inf before any)."""
    return math.inf if finished_now == 0 else elapsed / finished_now * (total - done)
