"""Many runs: chunks of runs spread over worker processes, and the tidy results table they make.

`run_experiment` runs every (variant, seed) pair, `RUNS_PER_CHUNK` runs at a time in one array,
over joblib workers; `simulate_runs` turns one chunk's trajectories (`toyrl.train.simulate`, or
`toyrl.expected.simulate_mean_field`) into a frame of `COLUMNS`, (steps + 1) rows a run. The
numbers of a run depend on neither the chunking nor the workers (`toyrl.train`).

The table is built as `Columns` (one numpy array per column) and becomes a pandas DataFrame only
when asked: `toyrl run` writes its CSV from the arrays, so neither pandas nor joblib (needed only
for several workers) is imported by it.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from toyrl.config import MAX_SEED, Config, ConfigError, InvalidInput
from toyrl.objective import Variant
from toyrl.policy import FloatArray
from toyrl.refusals import Refusal, refused_by, values
from toyrl.stages import KIND
from toyrl.train import COLUMNS, Diverged, Trajectory, check_variant, layout_seconds, train_runs
from toyrl.variants import parse_variant

if TYPE_CHECKING:
    import pandas as pd

Columns = dict[str, np.ndarray]
"""A results table as arrays: `COLUMNS` in order, one row per run and step (variant-major)."""

RUNS_PER_CHUNK = 256  # runs simulated together as one array, at most ...
VALUES_PER_CHUNK = 2**16  # ... and so many sampled responses (or exact-sum terms) per step
MAX_ROWS = 20_000_000  # rows of one results table (about 4 GB in memory): beyond, refuse up front
MAX_UPDATES = 100_000_000  # optimiser updates of one run (steps x epochs x mini-batches): beyond, refuse


def to_columns(trajectory: Trajectory, steps: int) -> Columns:
    """The tidy table of a trajectory as arrays: one row per run and step, `COLUMNS`."""
    n_runs = len(trajectory.names)
    columns: Columns = {
        "variant": np.repeat(trajectory.names, steps + 1),
        "seed": np.repeat(trajectory.seeds, steps + 1),
        "step": np.tile(np.arange(steps + 1), n_runs),
    }
    return columns | {name: values.ravel() for name, values in trajectory.columns.items()}


def frame_of(columns: Columns) -> pd.DataFrame:
    """A table's arrays as a pandas DataFrame (the variant column becomes pandas' string dtype)."""
    import pandas as pd

    return pd.DataFrame(columns)


def simulate_columns(
    config: Config,
    runs: Sequence[tuple[Variant, int]],
    mean_field: bool = False,
    on_step: Callable[[int, FloatArray], None] | None = None,
) -> Columns:
    """One chunk of runs, checked already (`check_runs`), trained together (sampled, or
    `mean_field`), as the arrays of `COLUMNS`; `on_step` as in `toyrl.train.simulate`."""
    if mean_field:
        from toyrl.expected import simulate_mean_field  # only for mean-field runs

        return to_columns(simulate_mean_field(config, runs, on_step), config.steps)
    return to_columns(train_runs(config, runs, on_step), config.steps)


def simulate_runs(
    config: Config,
    runs: Sequence[tuple[Variant, int]],
    mean_field: bool = False,
    on_step: Callable[[int, FloatArray], None] | None = None,
) -> pd.DataFrame:
    """One chunk of runs, trained together (sampled, or `mean_field`), as a frame of `COLUMNS`;
    `on_step` as in `toyrl.train.simulate`; InvalidInput first unless the runs fit `config`."""
    check_runs(config, list(dict.fromkeys(variant for variant, _ in runs)))
    return frame_of(simulate_columns(config, runs, mean_field, on_step))


def runs_per_chunk(config: Config, mean_field: bool = False) -> int:
    """Runs simulated together: RUNS_PER_CHUNK, or fewer when a run's step is large (its sampled
    responses, or for mean-field runs its exact sums over the cap's lengths), so that a chunk's
    arrays stay near VALUES_PER_CHUNK values per step. Chunking changes no number."""
    per_run = config.cap if mean_field else config.batch_prompts * config.group_size
    return max(1, min(RUNS_PER_CHUNK, VALUES_PER_CHUNK // per_run))


def estimated_cost(
    config: Config, variants: Sequence[Variant], seeds: int, mean_field: bool = False
) -> tuple[float, float, float]:
    """A rough (core-seconds of simulation, seconds to write the CSV, bytes of the results table) of
    running every variant with `seeds` seeds. Per run-step costs measured on a 2-core x86-64
    machine: a sampled update about 5 us plus 0.15 us a response, each later PPO epoch about three
    updates, a sampler's own draws and rounds at worst (`sampler_cost`), verl's layout with one
    count of its token budget tried an update (`toyrl.train.layout_seconds`), a mean-field step 100 us
    plus 0.1 us per cap token; writing about 20 us a row (floats formatted to round-trip, in one
    process); the table's float64 columns twice over (the chunks and their join)."""
    run_steps = seeds * (config.steps + 1)
    if mean_field:
        per_run_step = len(variants) * (100e-6 + 0.1e-6 * config.cap)
    else:
        update = 5e-6 + 0.15e-6 * config.batch_prompts * config.group_size
        per_run_step = sum(
            update * (1 + 3 * (v.updates - 1)) + sampler_cost(v, config) + layout_seconds(v, config)[0]
            for v in variants
        )
    rows = run_steps * len(variants)
    return run_steps * per_run_step, 20e-6 * rows, 2.0 * 8 * len(COLUMNS) * rows


def sampler_cost(variant: Variant, config: Config) -> float:
    """Rough core-seconds a step of one run spends in its sampler beyond the B x G responses, at
    worst (a batch that never fills): 0.15 us a further draw (`Sampler.worst_draws`) and, for
    a sampler that refills run by run, 200 us a round (measured as `estimated_cost`'s)."""
    settings = KIND["sampler"].settings_of(config)  # what a sampler sees of the configuration
    extra = variant.sampler.worst_draws(settings) - config.batch_prompts * config.group_size
    refills = variant.sampler.refills(settings)
    rounds = 200e-6 * (1 + refills) if refills else 0.0
    return 0.15e-6 * extra + rounds


_watched_parent: int | None = None


def die_with_parent(parent: int | None = None) -> None:
    """In a worker process: exit as soon as the process that started it (pid `parent`; by default
    the current parent) is gone.

    A parent killed by SIGKILL cannot stop its workers; without this they would compute on (and
    hold the terminal's output open) for minutes. A daemon thread polls the parent's pid twice a
    second; started once per process. The pid is best passed from the parent itself: a worker that
    starts after its parent died would otherwise watch the process it was handed to.
    """
    global _watched_parent
    parent = os.getppid() if parent is None else parent
    if _watched_parent == parent:
        return
    _watched_parent = parent

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="toyrl-parent-watch", daemon=True).start()


# loky's resource tracker (a process of its own, started by joblib with the first workers) cleans up
# what workers leave behind when toyrl is killed, and warns of each leak on the terminal, several
# lines at once; it reads its warnings filter from the environment it inherits.
QUIET_TRACKER = "ignore::UserWarning:joblib.externals.loky.backend.resource_tracker"


@contextlib.contextmanager
def quiet_resource_tracker() -> Iterator[None]:
    """Within: PYTHONWARNINGS (the user's, if set, kept) also tells a resource tracker that starts
    to clean up without its warnings; the environment as it was afterwards."""
    before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [before, QUIET_TRACKER]))
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONWARNINGS"]
        else:
            os.environ["PYTHONWARNINGS"] = before


def simulate_in_worker(
    config: Config, runs: Sequence[tuple[Variant, int]], mean_field: bool = False
) -> pd.DataFrame:
    """One chunk of runs checked by the caller (`check_runs`), as `simulate_runs` returns it, in a
    worker process that ends with its parent (see `die_with_parent`)."""
    die_with_parent()
    return frame_of(simulate_columns(config, runs, mean_field))


def check_experiment(config: Config, variants: Sequence[Variant], seeds: Sequence[int], n_jobs: int) -> int:
    """InvalidInput unless the experiment fits its bounds (seeds, workers, rows of the table, updates
    of a run), checked before any work; returns the worker processes it will use (`worker_count`)."""
    check_seeds(seeds)
    check_n_jobs(n_jobs)
    n_runs = len(variants) * len(seeds)
    if n_runs * (config.steps + 1) > MAX_ROWS:
        raise InvalidInput(
            f"{n_runs:,} runs x {config.steps + 1:,} steps would be {n_runs * (config.steps + 1):,} rows; "
            f"the limit is {MAX_ROWS:,}: use fewer variants, seeds or steps (or toyrl sweep)"
        )
    check_runs(config, variants)
    return worker_count(n_jobs, n_runs)


def check_runs(config: Config, variants: Sequence[Variant]) -> None:
    """InvalidInput unless every variant's runs fit `config`: each stage's check (a sampler's worst
    case draws among them) and the updates of a run."""
    for variant in variants:
        check_variant(variant, config)
    updates = config.steps * max(variant.updates for variant in variants)
    message = refused_by(RUN_REFUSALS, values(config, {}, {"updates": updates}))
    if message:
        raise InvalidInput(message)


# `check_runs`' own, on the most updates a run of its variants takes (`updates`), declared once as
# data (`toyrl.refusals`; the page evaluates it too)
RUN_REFUSALS = (
    Refusal(
        f"updates > {MAX_UPDATES}",
        "{steps:,} steps x num_iterations x mini_batches would be {updates:,} updates per run; the "
        f"limit is {MAX_UPDATES:,}",
    ),
)


def check_seeds(seeds: Sequence[int]) -> None:
    """ConfigError unless `seeds` is a non-empty list of integers that fit the results' int64 column."""
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int | np.integer) for s in seeds):
        raise ConfigError("seeds", f"must be a non-empty list of integers in 0..{MAX_SEED:,}", list(seeds))
    if min(seeds) < 0 or max(seeds) > MAX_SEED:
        raise ConfigError("seeds", f"must be integers in 0..{MAX_SEED:,} (int64)", [min(seeds), max(seeds)])


def check_n_jobs(n_jobs: int) -> None:
    """ConfigError unless `n_jobs` is -1 (every core) or a positive number of workers."""
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0 or n_jobs < -1:
        raise ConfigError("n_jobs", "must be -1 (all cores) or an integer >= 1", n_jobs)


def worker_count(n_jobs: int, tasks: int) -> int:
    """Worker processes for `tasks` pieces of work asked to run on `n_jobs` (-1: every core): never
    more than the cores or the tasks, which would only add start-up time and memory."""
    if n_jobs > 0:
        asked = n_jobs
    else:  # joblib counts the cores this process may use (affinity, container quotas)
        from joblib import effective_n_jobs

        asked = effective_n_jobs(n_jobs)
    return max(1, min(asked, os.cpu_count() or 1, tasks))


def Parallel(*args: Any, **kwargs: Any) -> Any:  # joblib's name: the tests count its workers
    """joblib.Parallel, imported only when runs are spread over several workers."""
    from joblib import Parallel

    return Parallel(*args, **kwargs)


Progress = Callable[[int, int], None]
"""progress(done, total): run-steps done (a run of `steps` steps has steps + 1) of `total`."""


@overload
def run_experiment(
    config: Config,
    variants: Sequence[Variant | str],
    seeds: Sequence[int],
    n_jobs: int = 1,
    progress: Progress | None = None,
    mean_field: bool = False,
    as_columns: Literal[False] = False,
    workers: int | None = None,
) -> pd.DataFrame: ...


@overload
def run_experiment(
    config: Config,
    variants: Sequence[Variant | str],
    seeds: Sequence[int],
    n_jobs: int = 1,
    progress: Progress | None = None,
    mean_field: bool = False,
    *,
    as_columns: Literal[True],
    workers: int | None = None,
) -> Columns: ...


def run_experiment(
    config: Config,
    variants: Sequence[Variant | str],
    seeds: Sequence[int],
    n_jobs: int = 1,
    progress: Progress | None = None,
    mean_field: bool = False,
    as_columns: bool = False,
    workers: int | None = None,
) -> pd.DataFrame | Columns:
    """Every (variant, seed) pair, variant-major, spread over `n_jobs` joblib workers (-1: all cores;
    never more than the cores or the runs).

    The numbers of a run do not depend on `n_jobs` or on the chunking (see the module docstring).
    `mean_field`: the mean-field trajectories (`toyrl.expected.simulate_mean_field`).
    `progress(done, total)`, in run-steps (runs x (steps + 1)), is called as runs advance: at every
    step of a chunk trained in this process, and as each chunk of a worker process finishes.
    `as_columns`: return the table's arrays (`Columns`) instead of a DataFrame. InvalidInput
    before any work unless the arguments are valid (`check_experiment`), unless `workers`, what
    `check_experiment` returned for them, says they were checked at the edge already.
    """
    resolved = [v if isinstance(v, Variant) else parse_variant(v) for v in variants]
    if workers is None:
        workers = check_experiment(config, resolved, seeds, n_jobs)
    runs = [(variant, seed) for variant in resolved for seed in seeds]
    chunks = chunk_runs(runs, runs_per_chunk(config, mean_field), workers)
    parts: dict[int, Columns] = {}  # by chunk, as they finish
    done, total = 0, len(runs) * (config.steps + 1)
    if workers == 1:
        for index, chunk in enumerate(chunks):
            on_step = None if progress is None else _steps_done(progress, done, len(chunk), total)
            parts[index] = simulate_columns(config, [runs[i] for i in chunk], mean_field, on_step)
            done += len(chunk) * (config.steps + 1)
            if progress is not None:
                progress(done, total)
    else:
        from joblib import delayed, parallel_config

        # Each worker watches its parent from the moment it starts, idle or busy.
        with (
            quiet_resource_tracker(),
            parallel_config(backend="loky", initializer=die_with_parent, initargs=(os.getpid(),)),
        ):
            finishing = Parallel(n_jobs=workers, return_as="generator_unordered")(
                delayed(_simulate_chunk)(config, index, [runs[i] for i in chunk], mean_field)
                for index, chunk in enumerate(chunks)
            )
            with warnings.catch_warnings(), contextlib.closing(finishing):  # a failure stops the workers
                warnings.filterwarnings("ignore", ".* tasks .* (cancelled|not used)", UserWarning)
                diverged: dict[int, Diverged] = {}
                for index, part in finishing:
                    if isinstance(part, Diverged):
                        diverged[index] = part
                    else:
                        parts[index] = part
                        done += len(chunks[index]) * (config.steps + 1)
                        if progress is not None:
                            progress(done, total)
                    # The failure one worker would have met first, whichever worker failed first.
                    if diverged and all(earlier in parts for earlier in range(min(diverged))):
                        raise diverged[min(diverged)]
    order = np.concatenate(chunks)
    # Chunks that grouped runs out of order (by schedule) go back to variant-major.
    rows = (
        np.argsort(np.repeat(order, config.steps + 1), kind="stable") if (np.diff(order) < 0).any() else None
    )
    if not as_columns:  # each chunk a frame (its arrays then freed), then one copy: twice the table
        import pandas as pd

        frame = pd.concat([frame_of(parts.pop(index)) for index in range(len(chunks))], ignore_index=True)
        return frame if rows is None else frame.iloc[rows].reset_index(drop=True)
    table = {name: np.concatenate([parts[index][name] for index in range(len(chunks))]) for name in COLUMNS}
    return table if rows is None else {name: values[rows] for name, values in table.items()}


def _steps_done(progress: Progress, before: int, runs: int, total: int) -> Callable[[int, FloatArray], None]:
    """An `on_step` that reports a chunk of `runs` runs, after `before` run-steps done, step by step."""

    def on_step(step: int, theta: FloatArray) -> None:
        progress(before + runs * step, total)

    return on_step


def _simulate_chunk(
    config: Config, index: int, runs: Sequence[tuple[Variant, int]], mean_field: bool
) -> tuple[int, Columns | Diverged]:
    """A worker's chunk of runs, returned with its index (chunks come back as they finish), or the
    divergence that stopped it: the parent tells the one the chunks in order meet first."""
    try:
        return index, simulate_columns(config, runs, mean_field)
    except Diverged as error:
        return index, error


def chunk_runs(runs: Sequence[tuple[Variant, int]], per_chunk: int, workers: int) -> list[list[int]]:
    """The runs' indices cut into chunks of at most `per_chunk` runs, at least `workers` chunks (when
    there are as many runs), each chunk holding runs of one schedule: a run with PPO epochs costs
    several updates a step, and a chunk is only as fast as its slowest runs' extra updates allow."""
    groups: dict[int, list[int]] = {}
    for index, (variant, _) in enumerate(runs):
        groups.setdefault(variant.updates, []).append(index)
    pieces = {key: math.ceil(len(rows) / per_chunk) for key, rows in groups.items()}
    while sum(pieces.values()) < min(workers, len(runs)):  # enough chunks to keep every worker busy
        key = max(pieces, key=lambda k: len(groups[k]) / pieces[k])
        pieces[key] += 1
    return [
        [int(i) for i in chunk]
        for key, rows in groups.items()
        for chunk in np.array_split(np.array(rows), pieces[key])
    ]
