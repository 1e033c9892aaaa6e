"""Sweeps: every variant x grid point x seed, resumable, growable, on joblib or a Dask cluster.

A grid axis is a configuration field (`group_size=4,8`) or a stage parameter, by its spec key
(`alpha=0,0.5,1`, as a spec spells it) or as KIND.PARAM (`normaliser.alpha=...`, `advantage.std_eps=...`;
the kind by its name or its spec key, `aggregation.alpha`). A name that is both a configuration field
and a stage parameter (`std_eps`) is the configuration field; KIND.PARAM names the stage's. At each
grid point a variant runs with the parameter set on its stage that has it; a variant none of whose
chosen stages has it is left unchanged (`unchanged`), its runs shared by the axis's values.

A sweep lives in one folder:

- `sweep.json`, the manifest: the grid, the seeds, the base configuration and the toyrl version
  (and the plugins the variants use, by source hash: `toyrl.plugins`). Running the same command
  again resumes; a command that adds seeds, variants or values of an axis grows the sweep (`_grow`):
  only the missing runs are run, and the manifest records the grown sweep, the command's seeds,
  variants and values first, then the ones only the folder's sweep had. What would change its
  finished runs (a base setting, a variant's spec under the same name, a plugin's source, a new axis
  without the value of the finished runs) is refused, naming it, unless `force`, which starts
  afresh.
- `runs/`, one CSV per finished run, named by a digest of what defines it (`run_id`), written
  atomically the moment its chunk finishes: a sweep stopped at any moment loses no finished run, and
  a resumed or grown one does only what is missing, never rewriting a finished run's file.
- `results.csv`, every run's rows with the grid's columns, and `final.csv`, the last step's
  mean and sd over seeds per grid point, written when nothing is missing. They are written run file
  by run file, so collecting a sweep holds one run in memory (and every run's last row), whatever
  the sweep's size.

One sweep at a time writes a folder (`toyrl.files.claim`), and whatever can be checked (the size,
the folder, its manifest, the Dask cluster) is checked before anything is written.

Runs that share a grid point (same configuration) advance together as one array, as in
`toyrl.train`; a run's numbers depend only on its variant, configuration and seed, so they are the
same whatever the backend, the number of workers, the order in which chunks finish, or the sweep
the run was first made in.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
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
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import pandas as pd
from joblib import Parallel, delayed

from toyrl import install
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
from toyrl.inputs import MANIFEST, RESULTS, Unreadable, json_problem, open_regular, read_bytes, read_csv
from toyrl.objective import Variant, kind_keys, parse_spec, spec_keys, typed_value
from toyrl.plugins import plugins_used
from toyrl.stages import KIND, REGISTRY, check_declared, parameters
from toyrl.train import COLUMNS
from toyrl.values import parse_as
from toyrl.variants import VARIANTS
from toyrl.version import __version__

if TYPE_CHECKING:
    from dask.distributed import Client

CONFIG_FIELDS = [f.name for f in fields(Config)]
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


def parse_grid(axes: Sequence[str], base: Config, variants: Sequence[Variant] = ()) -> dict[str, list[Any]]:
    """`KEY=V1,V2,...` axes over Config fields and the `variants`' stage parameters (the module
    docstring), values converted to the field's or parameter's type and checked (`check_axes`)."""
    grid: dict[str, list[Any]] = {}
    for axis in axes:
        key, _, raw = axis.partition("=")
        key = _axis_key(axis, key.strip().replace("-", "_"))
        if key in grid:
            raise InvalidInput(f"--grid {axis!r}: {key} is given twice")
        if not raw.strip():
            raise InvalidInput(f"--grid {axis!r}: give at least one value, as {key}=V1,V2,...")
        field = stage_axis(key) is None
        try:
            if field:
                values = [parse_as(key, part.strip(), getattr(base, key)) for part in raw.split(",")]
            else:
                values = [_stage_value(key, part.strip(), variants) for part in raw.split(",")]
        except InvalidInput as error:
            raise InvalidInput(f"--grid {axis!r}: {error}") from None
        for value in values if field else ():
            base.replace(**{key: value})  # raises ConfigError naming the field and its range
        grid[key] = list(dict.fromkeys(values))
    check_axes(grid, variants)
    return grid


def _axis_key(axis: str, key: str) -> str:
    """An axis's canonical name: a Config field, a stage parameter's spec key, or KIND.PARAM with
    the kind's own name; InvalidInput listing the valid names, with a close match."""
    kind, dot, parameter = key.rpartition(".")
    keys = kind_keys()
    if dot and keys.get(kind, kind) in REGISTRY:
        kind = keys.get(kind, kind)
        if any(parameter in parameters(stage) for stage in REGISTRY[kind].values()):
            return f"{kind}.{parameter}"
    elif key in CONFIG_FIELDS or key in stage_parameters():
        return key
    names = [*CONFIG_FIELDS, *stage_parameters()]
    close = difflib.get_close_matches(parameter if dot else key, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    if key in keys or key == "mask_truncated":
        hint = " (a stage is chosen by --variant, not --grid)"
    raise InvalidInput(
        f"--grid {axis!r}: unknown field {key!r}{hint}; valid: a configuration field "
        f"({', '.join(CONFIG_FIELDS)}), a stage parameter ({', '.join(stage_parameters())}), or "
        f"KIND.PARAM with KIND one of {', '.join(sorted({*keys, *REGISTRY}))}"
    )


def stage_parameters() -> list[str]:
    """Every registered stage's parameters, as a spec names them, but those that are Config fields
    too (`std_eps`: the field; KIND.PARAM names the stage's)."""
    return [key for key in spec_keys() if key not in [*kind_keys(), "mask_truncated", *CONFIG_FIELDS]]


def stage_axis(key: str) -> tuple[str | None, str] | None:
    """(kind, or None for a bare spec key; parameter) of an axis over a stage parameter, None for an
    axis over a Config field."""
    if key in CONFIG_FIELDS:
        return None
    kind, dot, parameter = key.rpartition(".")
    return (kind if dot else None, parameter)


def _owner(variant: Variant, key: str) -> str | None:
    """The kind of the variant's stage that an axis over a stage parameter sets: the axis's kind, or
    for a bare spec key the first that has it, as a spec's key goes (`toyrl.objective`); None if
    none has it."""
    place = stage_axis(key)
    assert place is not None, key
    kind, parameter = place
    return next((k for k in ([kind] if kind else KIND) if parameter in parameters(variant.stage(k))), None)


def _stage_value(key: str, raw: str, variants: Sequence[Variant]) -> Any:
    """A stage parameter's value from text, typed as the first variant's stage that has it types it."""
    place = stage_axis(key)
    assert place is not None, key
    owners = [(variant, kind) for variant in variants if (kind := _owner(variant, key)) is not None]
    if not owners:
        names = ", ".join(variant.name for variant in variants) or "none"
        raise InvalidInput(f"no variant's stages have {place[1]} (variants: {names})")
    variant, kind = owners[0]
    value = typed_value(place[1], raw, parameters(variant.stage(kind))[place[1]])
    if value is None:  # a table's column would read it as missing, and its groups would drop it
        raise InvalidInput(f"{place[1]}: {raw!r} (no value) cannot be a grid value; leave it out of the axis")
    return 0.0 if isinstance(value, float) and value == 0 else value  # -0.0 is 0.0, as in a spec


def check_axes(grid: dict[str, list[Any]], variants: Sequence[Variant]) -> None:
    """InvalidInput unless every axis over a stage parameter sets one of the variants' stages, no
    two set the same parameter of a variant, and each value is valid for each stage it sets (the
    stage's declared bounds and refusals, as a spec's value)."""
    for variant in variants:
        taken: dict[tuple[str, str], str] = {}
        for key, values in grid.items():
            kind = _owner(variant, key) if stage_axis(key) is not None else None
            if kind is None:
                continue
            parameter = key.rpartition(".")[2]
            if (kind, parameter) in taken:
                raise InvalidInput(
                    f"--grid {taken[kind, parameter]} and --grid {key} both set {variant.name}'s "
                    f"{kind} {parameter}: give one"
                )
            taken[kind, parameter] = key
            for value in values:
                try:
                    check_declared(replace(variant.stage(kind), **{parameter: value}))
                except (InvalidInput, TypeError) as error:
                    raise InvalidInput(f"--grid {key}: {variant.name}: {error}") from None
    for key in grid:
        if stage_axis(key) is not None and not any(_owner(variant, key) for variant in variants):
            names = ", ".join(variant.name for variant in variants) or "none"
            raise InvalidInput(f"--grid {key}: no variant's stages have it (variants: {names})")


def unchanged(grid: dict[str, list[Any]], variants: Sequence[Variant]) -> dict[str, list[str]]:
    """The variants each axis over a stage parameter leaves unchanged (none of their chosen stages
    has it): their runs are the same at every value of the axis."""
    return {
        key: names
        for key in grid
        if stage_axis(key) is not None
        and (names := [variant.name for variant in variants if _owner(variant, key) is None])
    }


@dataclass(frozen=True)
class Point:
    """One grid point: a configuration and the values that made it (stage parameters' among them)."""

    values: tuple[tuple[str, Any], ...]
    config: Config


def points(grid: dict[str, list[Any]], base: Config) -> list[Point]:
    keys = list(grid)
    grid_points = []
    for combination in itertools.product(*grid.values()):
        values = tuple(zip(keys, combination, strict=True))
        fields_set = {key: value for key, value in values if stage_axis(key) is None}
        grid_points.append(Point(values, base.replace(**fields_set)))
    return grid_points


def at(variant: Variant, point: Point) -> Variant:
    """The variant as it runs at a grid point: the point's stage parameters set on its stages that
    have them (its name kept: the results' variant column)."""
    for key, value in point.values:
        kind = _owner(variant, key) if stage_axis(key) is not None else None
        if kind is not None:
            variant = replace(
                variant, **{kind: replace(variant.stage(kind), **{key.rpartition(".")[2]: value})}
            )
    return variant


def run_id(variant: Variant, point: Point, seed: int) -> str:
    """A file name for one run of `variant` as it runs at `point` (`at`), stable across sessions: a
    digest of what defines it (with the source hashes of the plugins whose stages it uses, if any).
    A run a grid axis does not change has one id at every value of it."""
    variant = at(variant, point)
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

    The sweep is the one given, grown by what the sweep already in `folder` has beyond it (`_grow`;
    with `force`, the one given, replacing a different one). The returned table has one row per
    run and grid point (its last step, with the grid's columns, whose keys are in its
    `attrs["grid"]`): what `toyrl.plots.plot_sweep` draws; the whole trajectories are in
    results.csv. `progress(done, total, just_finished)` is called before any run (`done`: the runs
    already finished, reused) and as chunks finish; a run counts once however many grid points
    share it (`unchanged`). `backend` is "loky" (joblib's processes, `n_jobs` of them, -1: every
    core) or "dask" (the Dask distributed cluster at `scheduler`, or a local one of `n_jobs`
    processes); never more workers than cores or chunks.
    """
    _check_backend(n_jobs, backend, scheduler)
    check_seeds(seeds)
    _check_sweep(variants, grid, seeds, base)
    _check_folder(folder)
    manifest = _manifest(variants, grid, seeds, base)
    runs_folder = folder / "runs"
    with claim(folder.resolve(), "the sweep"):
        existing = _existing(folder)
        replace_old = force and existing is not None and not _same(existing, manifest)
        if existing is not None and not force:
            variants, grid, seeds = _grow(folder, existing, variants, grid, seeds, base)
            _check_sweep(variants, grid, seeds, base)
            manifest = _manifest(variants, grid, seeds, base)
        grid_points = points(grid, base)
        finished = set() if replace_old else {path.name for path in runs_folder.glob("*.csv")}
        todo, total = _chunks(grid_points, variants, seeds, finished)
        done = total - sum(len(runs) for _, runs in todo)
        with _running(todo, n_jobs, backend, scheduler or None) as finishing:
            _prepare(folder, manifest, replace_old)
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


def _check_sweep(
    variants: Sequence[Variant], grid: dict[str, list[Any]], seeds: Sequence[int], base: Config
) -> None:
    """The sweep's size, its stage axes (`check_axes`) and every variant at every grid point, before
    anything is written."""
    _check_size(len(variants) * len(seeds), grid, base)
    check_axes(grid, variants)
    for point in points(grid, base):
        try:
            check_runs(point.config, [at(variant, point) for variant in variants])
        except InvalidInput as error:
            where = ", ".join(f"{key}={value}" for key, value in point.values)
            raise InvalidInput(f"grid point {where}: {error}") from None


def _manifest(
    variants: Sequence[Variant], grid: dict[str, list[Any]], seeds: Sequence[int], base: Config
) -> dict[str, Any]:
    """What sweep.json records of a sweep, as JSON reads it back."""
    manifest: dict[str, Any] = {
        "toyrl_version": __version__,
        "variants": {v.name: v.spec_text() for v in variants},
        "grid": grid,
        "seeds": [int(s) for s in seeds],
        "base_config": base.to_dict(),
    }
    plugins = plugins_used(variants)
    if plugins:  # by name, version and source hash: a path spelled otherwise resumes the same sweep
        manifest["plugins"] = [{k: v for k, v in p.record().items() if k != "path"} for p in plugins]
    return dict(json.loads(json.dumps(manifest)))


def _chunks(
    grid_points: list[Point], variants: Sequence[Variant], seeds: Sequence[int], finished: set[str]
) -> tuple[list[Chunk], int]:
    """The runs whose file is not in `finished`, each once (variants as they run at the point, `at`),
    in chunks of one grid point, as large as `toyrl.train.runs_per_chunk` allows for its
    configuration; and the number of the sweep's runs, each counted once."""
    todo: list[Chunk] = []
    seen: set[str] = set()
    for point in grid_points:
        missing = []
        for variant in variants:
            for seed in seeds:
                name = f"{run_id(variant, point, seed)}.csv"
                if name not in seen and name not in finished:
                    missing.append((at(variant, point), seed))
                seen.add(name)
        size = runs_per_chunk(point.config)
        todo += [(point, missing[i : i + size]) for i in range(0, len(missing), size)]
    return todo, len(seen)


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


def _existing(folder: Path) -> dict[str, Any] | None:
    """The manifest of the sweep in `folder`, or None if it holds none.

    InvalidInput if its sweep.json is not a sweep manifest, or if it has no sweep.json but files a
    sweep writes: even `force` does not remove files from a folder that toyrl may not have made.
    """
    path = folder / "sweep.json"
    if not os.path.lexists(path):
        _check_not_foreign(folder)
        return None
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
    return existing


def _same(existing: dict[str, Any], manifest: dict[str, Any]) -> bool:
    """Whether two manifests are of one sweep (a sweep begun with another toyrl version resumes)."""
    ignore = "toyrl_version"
    return {k: v for k, v in existing.items() if k != ignore} == {
        k: v for k, v in manifest.items() if k != ignore
    }


def _grow(
    folder: Path,
    existing: dict[str, Any],
    variants: Sequence[Variant],
    grid: dict[str, list[Any]],
    seeds: Sequence[int],
    base: Config,
) -> tuple[list[Variant], dict[str, list[Any]], list[int]]:
    """The sweep given, grown by what the sweep in `folder` (its manifest `existing`) has beyond it:
    the given variants, seeds and axis values first, then the folder's others.

    InvalidInput naming the setting when one would change the folder's finished runs: a base
    configuration field that neither grids, a variant's spec under the same name, a plugin's
    source, an axis only one of the sweeps has without the other's value among its values (a new
    axis must hold the value the finished runs were made at), or a run the folder's sweep has that
    toyrl cannot rebuild.
    """
    remedy = "use another --out-dir, or --force to replace it"
    there = f"the sweep in {folder}"
    given = {variant.name: variant for variant in variants}
    grown = list(variants)
    for name, spec in existing["variants"].items():
        if name in given:
            if given[name].spec_text() != spec:
                raise InvalidInput(
                    f"variant {name!r} is {given[name].spec_text()} here but {spec} in {there}; "
                    f"give it another name, or {remedy}"
                )
            continue
        try:
            old = VARIANTS[name] if name in VARIANTS and VARIANTS[name].spec_text() == spec else None
            grown.append(old or replace(parse_spec(str(spec)), name=name))
        except InvalidInput as error:
            raise InvalidInput(
                f"{there} has variant {name!r}, which cannot be rebuilt ({error}); {remedy}"
            ) from None
    recorded = {p["name"]: p.get("sha256") for p in existing.get("plugins", []) if isinstance(p, dict)}
    for plugin in plugins_used(grown):
        if plugin.name in recorded and recorded[plugin.name] != plugin.sha256:
            raise InvalidInput(
                f"plugin {plugin.name}'s source is not the one {there} was made with (sha256 "
                f"{str(recorded[plugin.name])[:12]} there, {plugin.sha256[:12]} here); {remedy}"
            )
    old_grid: dict[str, list[Any]] = existing["grid"]
    old_base = existing["base_config"]
    new_base = json.loads(json.dumps(base.to_dict()))
    merged: dict[str, list[Any]] = {}
    for key in [*grid, *(key for key in old_grid if key not in grid)]:
        new_values, old_values = grid.get(key), old_grid.get(key)
        if new_values is not None and old_values is not None:
            merged[key] = [*new_values, *(value for value in old_values if value not in new_values)]
            continue
        ours = new_values if new_values is not None else old_values
        assert ours is not None
        over = f"{key} over {', '.join(map(str, ours))}"
        if new_values is not None:  # a new axis: the finished runs are at one value of it
            shown = f"--grid {key} is a new axis; {there} has"
            advice = f"give --grid {key} with {{}} among its values, or {remedy}"
        else:  # an axis the command leaves out: its runs are at one value of it
            shown = f"{there} grids {over}; this command has"
            advice = f"give --grid {key} with {{}} to add it, or {remedy}"
        if stage_axis(key) is None:
            value = old_base.get(key) if new_values is not None else new_base[key]
            if value not in ours:
                raise InvalidInput(f"{shown} its runs at {key}={value}; {advice.format(value)}")
        else:
            others = variants if new_values is None else [v for v in grown if v.name in existing["variants"]]
            for variant in others:
                kind = _owner(variant, key)
                value = parameters(variant.stage(kind))[key.rpartition(".")[2]] if kind else None
                if kind is not None and value not in ours:
                    way = advice.format(value) if value is not None else f"no grid holds None; {remedy}"
                    raise InvalidInput(f"{shown} {variant.name}'s runs at {key}={value}; {way}")
        merged[key] = list(ours)
    for key in CONFIG_FIELDS:
        if key not in merged and old_base.get(key) != new_base[key]:
            raise InvalidInput(
                f"--{key.replace('_', '-')} is {new_base[key]} here but {old_base.get(key)} in {there}; "
                f"grid it (--grid {key}=...) to add values, or {remedy}"
            )
    old_seeds = [seed for seed in existing["seeds"] if seed not in seeds]
    return grown, merged, [*seeds, *old_seeds]


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
    and final.csv from every run's last row; return those last rows (the grid's keys in their
    `attrs["grid"]`)."""
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
    last.attrs["grid"] = keys  # the grown sweep's axes, which may be more than those given
    return last


def _read_run(path: Path, steps: int) -> pd.DataFrame:
    """One run's rows, or InvalidInput naming its file if it is not a whole run of `steps` steps."""
    remedy = "delete it and run the same command again to redo that run"
    try:
        with open_regular(path, RESULTS) as stream:
            rows = read_csv(stream)
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
