"""Benchmark: toyrl's closed-form simulator against a token-level baseline, and the targets.

    python scripts/bench.py [--repeats 5] [--skip-baseline] [--out results/bench.txt]
    python scripts/bench.py --startup-only [--repeats 9]
    python scripts/bench.py --csv-only [--repeats 5]
    python scripts/bench.py --smoke

`--smoke` runs every row once at a tiny size (a few seconds each; CI runs it, tests/
test_bench_smoke.py) and checks what each row checks, but states no target: its figures are not
measurements.

Every figure is a median over `--repeats` runs on this machine, measured in this process (the
baseline and its ratio in the same run). The token-level baseline, written here, computes the same
model and the same update the way trainers do: per-token log-probabilities, ratios, clipped
objective and gradients in padded [responses, cap + 1] arrays with masks, one run at a time. It
draws the same noise as the simulator, and the script checks that both end at the same parameters
(each variant of the article set, 40 steps) before it reports the ratio.

Every row runs on numpy's path (TOYRL_KERNELS=numpy: the default install's), except the rows that
say "compiled". `toyrl run --seeds 100`'s simulation is timed on numpy's path and, where numba is
installed, on the compiled path (the same bits; warm), taking turns. Writing its results CSV is timed
as a share of the command's work (its simulation, then its CSV and sidecar) on each path, in this
process: with `toyrl.results`' writer, and with the writer before it (`old_write_csv`, per-value
repr), whose bytes it must give.

Start-up is measured against processes that do the least the command could: `toyrl --help`
against `python -c "import numpy"`, and `toyrl run --variant all --seeds 6` (writing its CSV and
sidecar afresh each time) against a process that imports only numpy and toyrl's core and calls
`toyrl.train.simulate` on the same 24 runs, writing nothing. The two of a pair take turns, after
one untimed run of each. Every process the script times runs with its bytecode cached, as after
`pip install` (which compiles it): here in a temporary folder (PYTHONPYCACHEPREFIX), even where
PYTHONDONTWRITEBYTECODE is set.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from toyrl import kernels, results
from toyrl.config import Config
from toyrl.expected import expected_update
from toyrl.experiment import Columns, run_experiment
from toyrl.files import write_atomic
from toyrl.objective import Variant
from toyrl.policy import exact_metrics, expit, log_expit, sample_batch
from toyrl.results import CSV_ROWS_PER_WRITE, _csv_quoted, metadata, save_results, table_rows
from toyrl.stages import weights
from toyrl.train import Adam, Plan, initial_theta, run_streams, simulate, step_noise
from toyrl.variants import VARIANTS, article_variants

ARTICLE = [(variant, seed) for variant in article_variants() for seed in range(6)]


def median_time(task: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        task()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_memory(task: Callable[[], Any]) -> float:
    """Peak bytes allocated while `task` runs (tracemalloc; numpy reports its arrays to it), in MB."""
    tracemalloc.start()
    task()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 1e6


def token_level_step(theta, prompt_index, batch, weight, n, cap, clip=0.2):
    """One run's loss and loss gradient, computed the way trainers compute them: per-token tensors.

    Forward: per-token log-probabilities in padded [N, cap + 1] arrays with a mask, the ratio to the
    sampling policy (1 here: one on-policy update), PPO's clipped per-token objective, the masked
    aggregation. Backward: per-token d log pi / d theta (the approach token's psi_j, each ramble
    token's phi of its branch), weighted by the per-token loss coefficient and summed.
    """
    right, length, stopped = (a.reshape(-1) for a in (batch.right, batch.length, batch.stopped))
    prompt = np.repeat(prompt_index.reshape(-1), batch.right.shape[-1])
    position = np.arange(cap + 1)[None, :]
    mask = position <= length[:, None]  # the approach token, then L ramble tokens
    is_approach = position == 0
    is_stop = stopped[:, None] & (position == length[:, None])
    psi, stop_logit = theta[prompt][:, None], np.where(right, theta[-2], theta[-1])[:, None]
    # Each response has three distinct token log-probabilities; they fill its row of the tensor.
    approach_logp = np.where(right[:, None], log_expit(psi), log_expit(-psi))
    ramble_logp = np.where(is_stop, log_expit(stop_logit), log_expit(-stop_logit))
    logp = np.where(mask, np.where(is_approach, approach_logp, ramble_logp), 0.0)
    old_logp = logp.copy()  # the batch was sampled from this policy
    ratio = np.exp(logp - old_logp)
    advantage = weight.reshape(-1)[:, None]  # A_i / D_i: the aggregation's per-token weight
    objective = np.minimum(ratio * advantage, np.clip(ratio, 1 - clip, 1 + clip) * advantage)
    loss = -np.where(mask, objective, 0.0).sum() / n
    unclipped = (ratio * advantage <= np.clip(ratio, 1 - clip, 1 + clip) * advantage) & mask
    coefficient = np.where(unclipped, -advantage * ratio / n, 0.0)  # d loss / d log pi, per token
    stop_prob = expit(stop_logit)
    score_psi = np.where(is_approach, right[:, None] - expit(psi), 0.0)
    score_phi = np.where(is_approach, 0.0, np.where(is_stop, 1 - stop_prob, -stop_prob))
    grad = np.zeros_like(theta)
    np.add.at(grad, prompt, (coefficient * score_psi).sum(axis=1))
    phi_grad = (coefficient * score_phi).sum(axis=1)
    grad[-2], grad[-1] = phi_grad[right].sum(), phi_grad[~right].sum()
    return loss, grad


def token_level_run(config: Config, variant: Variant, seed: int) -> np.ndarray:
    """One run trained through the token-level baseline; returns its final parameters."""
    streams = run_streams(seed)
    theta = initial_theta(config, streams[0])[None]
    adam = Adam(theta, config)
    plan = Plan.of([variant])
    noise = step_noise([streams], config)  # the simulator's own noise, so both draw the same numbers
    for step in range(config.steps + 1):
        index, uniforms, exponentials = next(noise)
        exact_metrics(theta, config.cap, config.min_length)
        batch = sample_batch(theta, index, uniforms, exponentials, config.cap)
        included = plan.included(batch)
        denominator, n = plan.denominators(batch, included, config)
        weight = weights(plan.advantages(plan.rewards(batch, config), config), denominator, included)
        _, grad = token_level_step(theta[0], index[0], batch, weight, float(n[0]), config.cap)
        if step < config.steps:
            adam.step(theta, grad[None])
    return theta[0]


def check_baseline(config: Config) -> None:
    """SystemExit unless the token-level baseline ends where the simulator does after 40 steps, for
    each variant of the article set (seed 0): the same update from the same noise."""
    short = config.replace(steps=40)
    runs = [(variant, 0) for variant in article_variants()]
    final: list[np.ndarray] = []
    simulate(short, runs, on_step=lambda step, theta: final.append(theta.copy()) if step == 40 else None)
    for (variant, seed), simulated in zip(runs, final[0], strict=True):
        baseline = token_level_run(short, variant, seed)
        if not np.allclose(baseline, simulated, rtol=1e-9, atol=1e-12):
            difference = float(np.max(np.abs(baseline - simulated)))
            raise SystemExit(
                f"the token-level baseline does not reproduce the simulator ({variant.name}: its "
                f"parameters differ by up to {difference:.3g} after 40 steps)"
            )


# The least a process can do to compute the article set: numpy and toyrl's core, no CSV.
# Arguments: steps, seeds.
BARE_ARTICLE_SET = """
import sys
from toyrl.config import Config
from toyrl.train import simulate
from toyrl.variants import article_variants

steps, seeds = int(sys.argv[1]), int(sys.argv[2])
simulate(Config(steps=steps), [(variant, seed) for variant in article_variants() for seed in range(seeds)])
assert not {"pandas", "scipy", "matplotlib", "joblib", "typer"} & set(sys.modules), "not bare"
"""


def side_by_side(
    baseline: list[str], command: list[str], repeats: int, cwd: str, env: dict[str, str], before: Any = None
) -> tuple[float, float]:
    """Median wall times of `baseline` and `command`, each a fresh process, taking turns (so that
    the machine's load falls on both alike), after one untimed run of each; `before()` runs before
    each run of `command` (untimed)."""
    times: dict[int, list[float]] = {0: [], 1: []}
    for turn in range(repeats + 1):
        for which, argv in enumerate((baseline, command)):
            if which == 1 and before is not None:
                before()
            start = time.perf_counter()
            subprocess.run(
                argv, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            if turn:  # the first turn compiles and caches the bytecode
                times[which].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def installed(folder: str) -> dict[str, str]:
    """The environment of the timed processes: bytecode cached in `folder`, as after `pip install`
    (which compiles it), even where PYTHONDONTWRITEBYTECODE is set."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return env | {"PYTHONPYCACHEPREFIX": str(Path(folder) / "bytecode")}


def startup_rows(
    toyrl: list[str], repeats: int, env: dict[str, str], steps: int = 400, seeds: int = 6
) -> list[tuple[str, str, str]]:
    """`toyrl --help` and `toyrl run --variant all --seeds 6` beside the bare processes (`steps` and
    `seeds` smaller in the smoke mode)."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        numpy_only, help_text = side_by_side(
            [sys.executable, "-c", "import numpy"], [*toyrl, "--help"], repeats, folder, env
        )
        rows.append(('python -c "import numpy", wall', f"{numpy_only:.3f} s", ""))
        rows.append(("toyrl --help, wall", f"{help_text:.3f} s", ""))
        rows.append(("  toyrl --help / import numpy", f"{help_text / numpy_only:.2f}x", "<= 1.5x"))
        out = Path(folder) / "article.csv"

        def afresh() -> None:
            out.unlink(missing_ok=True)
            out.with_suffix(".json").unlink(missing_ok=True)

        sized = [] if steps == 400 else ["--steps", str(steps)]
        run = [*toyrl, "run", "--variant", "all", "--seeds", str(seeds), *sized, "-q", "--out", str(out)]
        bare_process = [sys.executable, "-c", BARE_ARTICLE_SET, str(steps), str(seeds)]
        bare, fresh = side_by_side(bare_process, run, repeats, folder, env, afresh)
        written(out)
        rows.append((f"numpy + toyrl's core, simulate 4 x {seeds} x {steps}, wall", f"{bare:.3f} s", ""))
        rows.append((f"{' '.join(['toyrl', *run[len(toyrl) : -3]])}, wall", f"{fresh:.3f} s", ""))
        rows.append(("  toyrl run / the bare process", f"{fresh / bare:.2f}x", "<= 1.5x"))
        bare, again = side_by_side(bare_process, run, repeats, folder, env)
        rows.append(("  again, its results kept: / the bare process", f"{again / bare:.2f}x", ""))
    return rows


def wall(command: list[str], repeats: int, cwd: str, env: dict[str, str], warm: bool = True) -> float:
    def task() -> None:
        subprocess.run(
            command, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    if warm:
        task()  # untimed: compiles and caches the bytecode
    return median_time(task, repeats)


def written(*paths: Path) -> None:
    """SystemExit unless every path is a file that is not empty (a command's outputs)."""
    missing = [str(path) for path in paths if not (path.is_file() and path.stat().st_size)]
    if missing:
        raise SystemExit(f"not written: {', '.join(missing)}")


LAUNCHER = """
import os, subprocess, sys
process = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(os.wait4(process.pid, 0)[2].ru_maxrss)
"""


def child_rss(command: list[str], cwd: str, env: dict[str, str]) -> float:
    """Peak resident memory of one process running `command`, in MB.

    Linux carries a process's high-water mark across exec, so a child forked from this (large)
    process would report this process's memory: a small launcher process starts it instead.
    """
    result = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *command], cwd=cwd, env=env, capture_output=True, text=True
    )
    return int(result.stdout.split()[-1]) / 1e3  # kilobytes on Linux


def old_write_csv(
    table: Columns, write: Callable[[bytes], Any], progress: Callable[[int, int], None] | None = None
) -> None:
    """`toyrl.results._write_csv` before its float columns were formatted at once: each value's
    repr (a column of few distinct values formats each once), kept to time against it."""
    rows = table_rows(table)
    quoted: dict[str, str] = {}
    for start in range(0, max(rows, 1), CSV_ROWS_PER_WRITE):
        stop = min(start + CSV_ROWS_PER_WRITE, rows)
        columns = [old_csv_cells(values[start:stop], quoted) for values in table.values()]
        text = "".join([line + "\n" for line in map(",".join, zip(*columns, strict=True))])
        if start == 0:
            text = ",".join(_csv_quoted(str(name), quoted) for name in table) + "\n" + text
        write(text.encode("utf-8"))
        if progress is not None:
            progress(stop, rows)


def old_csv_cells(values: np.ndarray, quoted: dict[str, str]) -> list[str]:
    if values.dtype == np.float64:
        cells = old_float_cells(values)
    elif values.dtype.kind == "f":
        cells = values.astype(str).tolist()
    elif values.dtype.kind in "iub":
        return list(map(str, values.tolist()))
    else:
        return [
            ""
            if value is None or (isinstance(value, float) and value != value)
            else _csv_quoted(str(value), quoted)
            for value in values.tolist()
        ]
    for row in np.flatnonzero(np.isnan(values)).tolist():
        cells[row] = ""
    return cells


def old_float_cells(values: np.ndarray) -> list[str]:
    if len(values) >= 64:
        distinct, inverse = np.unique(values.view(np.int64), return_inverse=True)
        if 4 * len(distinct) <= len(values):
            text = np.array(list(map(repr, distinct.view(np.float64).tolist())), dtype=object)
            return list(text[inverse.ravel()])
    with np.errstate(invalid="ignore"):
        whole = (values == np.trunc(values)) & (np.abs(values) < 1e16) & ~((values == 0) & np.signbit(values))
    if whole.all():
        return [f"{number}.0" for number in values.astype(np.int64).tolist()]
    return list(map(repr, values.tolist()))


def csv_rows(config: Config, seeds: int, repeats: int, few: int) -> list[tuple[str, str, str]]:
    """`toyrl run --seeds N`'s work, in this process: its simulation (median of `few`), then its CSV
    and sidecar written (`save_results`, median of `repeats`) with toyrl's writer and with the one
    before it (`old_write_csv`, the writers taking turns); SystemExit unless both give the same bytes."""
    variants, seed_list = article_variants(), list(range(seeds))
    meta = metadata(config, variants, seed_list, "toyrl run")
    table: list[Columns] = []

    def simulation() -> None:
        table[:] = [run_experiment(config, variants, seed_list, as_columns=True)]

    # The simulation on numpy's path and on the compiled one (numba, the same bits; warm: its code
    # loaded by an untimed short run first), taking turns; the share below is the default path's.
    paths: dict[str, list[float]] = (
        {"numpy": [], "compiled": []} if importlib.util.find_spec("numba") else {"numpy": []}
    )
    previous = os.environ.get(kernels.SWITCH)
    try:
        if "compiled" in paths:
            os.environ[kernels.SWITCH] = "compiled"
            run_experiment(dataclasses.replace(config, steps=2), variants, seed_list[:2])
        for _ in range(few):
            for kind, seconds in paths.items():
                os.environ[kernels.SWITCH] = kind
                seconds.append(median_time(simulation, 1))
    finally:
        if previous is None:
            os.environ.pop(kernels.SWITCH, None)
        else:
            os.environ[kernels.SWITCH] = previous
    on_path = {kind: statistics.median(seconds) for kind, seconds in paths.items()}
    # Writing, taking turns: the writer before (per-value repr) and toyrl's on each path (the
    # compiled one writes each row's fields in turn: `toyrl.results_compiled`).
    writer = results._write_csv
    writers = [("before", "numpy", old_write_csv)] + [(kind, kind, writer) for kind in paths]
    times: dict[str, list[float]] = {name: [] for name, _, _ in writers}
    outputs: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(repeats):
            for name, kind, write_csv in writers:
                path = Path(folder) / f"{name}.csv"
                path.unlink(missing_ok=True)  # written afresh, not found already there
                results._write_csv = write_csv
                os.environ[kernels.SWITCH] = kind
                try:
                    start = time.perf_counter()
                    save_results(table[0], path, meta)
                    times[name].append(time.perf_counter() - start)
                finally:
                    results._write_csv = writer
                    os.environ[kernels.SWITCH] = "numpy" if previous is None else previous
                written(path, results.sidecar_path(path))
                outputs[name] = path.read_bytes()
    if len(set(outputs.values())) != 1:
        raise SystemExit("the CSV writers (before, now on each path) do not give the same bytes")
    writing = {name: statistics.median(seconds) for name, seconds in times.items()}
    before, now = writing["before"], writing["numpy"]
    label = f"toyrl run --seeds {seeds}" + ("" if config.steps == 400 else f" --steps {config.steps}")
    rows = [(f"{label}: simulation, one core", f"{on_path['numpy']:.2f} s", "")]
    if "compiled" in on_path:
        rows += [
            ("  on the compiled path (numba)", f"{on_path['compiled']:.2f} s", ""),
            ("  numpy's path / the compiled path", f"{on_path['numpy'] / on_path['compiled']:.2f}x", ">= 2x"),
        ]
    shares = []
    for kind, name in (("numpy", "numpy's path"), ("compiled", "compiled")):
        if kind in on_path:
            share = writing[kind] / (on_path[kind] + writing[kind])
            shares += [
                (f"  writing its CSV and sidecar, {name}", f"{writing[kind]:.2f} s", ""),
                (f"  writing as a share of the whole, {name}", f"{share:.0%}", "<= 15%"),
            ]
    return [
        *rows,
        *shares,
        ("  before (per-value repr): writing", f"{before:.2f} s", ""),
        ("  before: its share, numpy's path", f"{before / (on_path['numpy'] + before):.0%}", ""),
        ("  writing, before / now", f"{before / now:.2f}x", ""),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure, median reported (default 5)")
    parser.add_argument(
        "--skip-baseline", action="store_true", help="skip the token-level baseline (three runs of ~30 s)"
    )
    parser.add_argument(
        "--out", type=Path, help="also write the table to this file (docs/performance.md quotes it)"
    )
    parser.add_argument(
        "--startup-only", action="store_true", help="measure start-up only (toyrl --help, toyrl run)"
    )
    parser.add_argument(
        "--csv-only", action="store_true", help="measure writing the CSV of toyrl run --seeds 100 only"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="every row once at a tiny size, its checks made, no targets (CI: the script still runs)",
    )
    args = parser.parse_args()
    # Every row on numpy's path, the default install's (`auto` would turn compiled partway through a
    # measurement), in this process and the commands it times; the compiled rows say so.
    os.environ[kernels.SWITCH] = "numpy"
    if (args.startup_only or args.csv_only) and args.out is not None:
        parser.error("--out writes the whole table: not with --startup-only or --csv-only")
    if args.startup_only and args.csv_only:
        parser.error("--startup-only and --csv-only: one at a time")
    if args.smoke and (args.out is not None or args.startup_only or args.csv_only or args.skip_baseline):
        parser.error(
            "--smoke runs every row and writes no table: "
            "not with --out, --startup-only, --csv-only or --skip-baseline"
        )
    smoke = args.smoke
    repeats = 1 if smoke else args.repeats
    few = 1 if smoke else max(repeats // 2, 2)  # the rows of seconds each
    config = Config(steps=10) if smoke else Config()
    rows: list[tuple[str, str, str]] = []
    machine = (
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"numpy {np.__version__}"
    )
    print(machine, flush=True)
    toyrl = [shutil.which("toyrl") or sys.executable, *([] if shutil.which("toyrl") else ["-m", "toyrl.cli"])]
    bytecode = tempfile.TemporaryDirectory()
    env = installed(bytecode.name)
    if args.startup_only:
        print_table(startup_rows(toyrl, repeats, env))
        return
    if args.csv_only:
        print_table(csv_rows(config, 100, repeats, few))
        return

    simulate(config.replace(steps=min(config.steps, 20)), ARTICLE)  # warm caches and imports
    article = median_time(lambda: simulate(config, ARTICLE), repeats)
    run_steps = len(ARTICLE) * (config.steps + 1)
    rows.append((f"article set (4 x 6 x {config.steps}), one core", f"{article:.3f} s", "<= 0.2 s"))
    rows.append(("  per run-step", f"{article / run_steps * 1e6:.1f} us", ""))
    memory = peak_memory(lambda: simulate(config, ARTICLE))
    rows.append(("  peak memory (allocations)", f"{memory:.1f} MB", "<= 200 MB"))

    many_runs = 8 if smoke else 1000

    def thousand() -> None:
        run_experiment(config, [VARIANTS["dr_grpo"]], list(range(many_runs)), n_jobs=-1)

    many = median_time(thousand, few)
    rows.append(
        (f"{many_runs:,} runs x {config.steps} steps, {os.cpu_count()} cores", f"{many:.2f} s", "<= 3 s")
    )
    rows.append(("  peak memory, parent (allocations)", f"{peak_memory(thousand):.1f} MB", ""))

    per_step = {}
    for cap in (1500, 10_000, 100_000):
        capped = config.replace(cap=cap, steps=min(config.steps, 100))

        def capped_run(capped: Config = capped) -> None:
            simulate(capped, ARTICLE)

        per_step[cap] = median_time(capped_run, repeats) / (capped.steps + 1)
        rows.append((f"  cap {cap:,}: article set, per step", f"{per_step[cap] * 1e3:.3f} ms", ""))
    rows.append(
        ("cost per step, cap 100,000 / cap 1,500", f"{per_step[100_000] / per_step[1500]:.2f}x", "<= 1.5x")
    )

    theta = np.repeat(initial_theta(config, run_streams(0)[0])[None], 1, axis=0)
    dr = [VARIANTS["dr_grpo"]]
    call = median_time(lambda: expected_update(theta, config, dr), repeats * 20)
    rows.append(("exact expected update, one policy, per call", f"{call * 1e3:.2f} ms", ""))
    rows.append(("  peak memory", f"{peak_memory(lambda: expected_update(theta, config, dr)):.1f} MB", ""))

    if not args.skip_baseline:
        check_baseline(config)
        baseline = median_time(lambda: [token_level_run(config, v, s) for v, s in ARTICLE], 1 if smoke else 3)
        simulator = median_time(lambda: simulate(config, ARTICLE), 3 * repeats)
        rows.append((f"token-level baseline, article set (4 x 6 x {config.steps})", f"{baseline:.1f} s", ""))
        rows.append(
            ("  peak memory", f"{peak_memory(lambda: token_level_run(config, *ARTICLE[0])):.1f} MB", "")
        )
        rows.append(("simulator speed-up over the baseline", f"{baseline / simulator:.0f}x", ">= 100x"))

    rows += csv_rows(config, 2 if smoke else 100, repeats, few)

    with tempfile.TemporaryDirectory() as folder:
        sized = ["--steps", str(config.steps)] if smoke else []
        out = Path(folder) / "run.csv"
        run_command = [*toyrl, "run", "--variant", "dr_grpo", "--seeds", "6", *sized, "-q", "--out", str(out)]

        def clear() -> None:  # its results written afresh: a run into them would keep them
            out.unlink(missing_ok=True)
            out.with_suffix(".json").unlink(missing_ok=True)

        def fresh_run() -> None:
            clear()
            subprocess.run(run_command, cwd=folder, env=env, check=True, capture_output=True)

        fresh_run()  # untimed: compiles and caches the bytecode
        run = median_time(fresh_run, repeats)
        written(out, out.with_suffix(".json"))
        label = " ".join(["toyrl", *run_command[len(toyrl) : -3]])
        rows.append((f"{label}, wall", f"{run:.2f} s", "<= 1.5 s"))
        clear()
        rows.append(
            (
                "  peak resident memory of that process",
                f"{child_rss(run_command, folder, env):.0f} MB",
                "<= 200 MB",
            )
        )
        # Its size is fixed (the article set and its figures): the smoke mode runs it once.
        reproduce = wall(
            [*toyrl, "reproduce", "-q"], 1 if smoke else max(repeats // 2, 1), folder, env, warm=not smoke
        )
        written(Path(folder) / "results" / "article.csv", Path(folder) / "figures" / "final_numbers.md")
        rows.append(("toyrl reproduce, wall", f"{reproduce:.2f} s", "<= 10 s"))
    if smoke:
        rows += startup_rows(toyrl, repeats, env, steps=config.steps, seeds=1)
    else:
        rows += startup_rows(toyrl, max(repeats, 5), env)

    lines = print_table([(name, value, "" if smoke else target) for name, value, target in rows])
    if args.out is not None:
        write_atomic(args.out, "\n".join([machine, *lines]) + "\n")


def print_table(rows: list[tuple[str, str, str]]) -> list[str]:
    width = max(len(name) for name, _, _ in rows)
    lines = [f"{'measure'.ljust(width)}  {'value':>10}  target"]
    lines += [f"{name.ljust(width)}  {value:>10}  {target}".rstrip() for name, value, target in rows]
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
