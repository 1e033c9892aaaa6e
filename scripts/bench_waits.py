"""Benchmark the waits people notice: `toyrl reproduce`'s figures and verl's layout, whole commands timed.

    python scripts/bench_waits.py [--repeats 5] [--against 40f6235] [--out results/bench_waits.txt]
    python scripts/bench_waits.py --smoke

Each row is one command line, run in a fresh process `--repeats` times, the rows (and versions)
taking turns so that drift hits each alike; the median wall time is reported (what a user waits
for, the import included). Every process runs with its bytecode cached, as after `pip install`
(which compiles it): here in a temporary folder (PYTHONPYCACHEPREFIX), even where
PYTHONDONTWRITEBYTECODE is set, each row and version run once untimed first. The ratios compare
rows of the same run:

- `toyrl reproduce` with --n-jobs 1 (the default: every figure drawn in one process) against
  --n-jobs 2 (a worker drawing the figures from the start, while this process simulates the runs
  and replays them for the bias figure, then draws too), into a fresh folder each time. Target
  (issue 41): at most 4 s on 2 cores.
- a verl check whose layout depends on the lengths (seq-mean-token-sum-norm taken on each
  micro-batch, ppo_micro_batch_size_per_gpu=2: eight data-parallel ranks, the batch dealt to them
  by workload every step) against a TRL check of the same budget: the same seeds, steps and
  optimiser updates a step (one: ppo_mini_batch_size = train_batch_size; four: verl's default
  mini-batches against TRL's steps_per_generation=4), and with use_dynamic_bsz (micro-batches cut
  by a token budget). Target: at most 1.5x.

`--against REV` also runs every row in a worktree of that revision (e.g. the one before these
changes) for a before/after column. `--smoke` runs each row once, the checks at 2 steps, and
prints no ratios: its figures are not measurements.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ACTOR = "actor_rollout_ref.actor."
VERL = ["check", "--trainer", "verl", "--set", "algorithm.adv_estimator=grpo"]
SUM_NORM = [*VERL, "--set", ACTOR + "loss_agg_mode=seq-mean-token-sum-norm"]
ONE_UPDATE = ["--set", ACTOR + "ppo_mini_batch_size=1024"]  # = data.train_batch_size: one mini-batch

# name: (label, toyrl's arguments); "{out}" is a fresh folder for each run.
ROWS = {
    "reproduce_serial": ("toyrl reproduce --n-jobs 1", ["reproduce", "-q", "--n-jobs", "1"]),
    "reproduce_parallel": ("toyrl reproduce --n-jobs 2", ["reproduce", "-q", "--n-jobs", "2"]),
    "trl_1": ("check: TRL, 1 update a step", ["check", "--trainer", "trl"]),
    "verl_micro_1": (
        "check: verl micro-batches, 1 update a step",
        [*SUM_NORM, "--set", ACTOR + "ppo_micro_batch_size_per_gpu=2", *ONE_UPDATE],
    ),
    "trl_4": (
        "check: TRL, 4 updates a step",
        ["check", "--trainer", "trl", "--set", "steps_per_generation=4"],
    ),
    "verl_micro_4": (
        "check: verl micro-batches, 4 updates a step",
        [*SUM_NORM, "--set", ACTOR + "ppo_micro_batch_size_per_gpu=2"],
    ),
    "verl_dynamic_4": (
        "check: verl use_dynamic_bsz, 4 updates a step",
        [*SUM_NORM, "--set", ACTOR + "use_dynamic_bsz=true"],
    ),
}
RATIOS = [
    ("reproduce, --n-jobs 1 / --n-jobs 2", "reproduce_serial", "reproduce_parallel", None),
    ("reproduce --n-jobs 2, seconds (target <= 4)", "reproduce_parallel", None, 4.0),
    ("verl micro-batches / TRL, 1 update a step", "verl_micro_1", "trl_1", 1.5),
    ("verl micro-batches / TRL, 4 updates a step", "verl_micro_4", "trl_4", 1.5),
    ("verl use_dynamic_bsz / TRL, 4 updates a step", "verl_dynamic_4", "trl_4", 1.5),
]


def time_once(tree: Path, args: list[str], smoke: bool, bytecode: str) -> tuple[float, float]:
    """Wall and CPU seconds (its worker processes' too) of `toyrl ARGS` run from `tree` (its toyrl
    first on the path), in a fresh folder, its bytecode cached in `bytecode`."""
    with tempfile.TemporaryDirectory() as folder:
        extra = ["--results-dir", f"{folder}/results", "--figures-dir", f"{folder}/figures"]
        command = [sys.executable, "-m", "toyrl.cli", *args]
        if args[0] == "reproduce":
            command += extra
        else:
            command += ["-q", *(["--steps", "2"] if smoke else [])]
        env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPATH"] = os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])
        env["PYTHONPYCACHEPREFIX"] = str(Path(bytecode) / tree.name)
        before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        result = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, check=False)
        took = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed in {tree}:\n{result.stderr.strip()[-2000:]}")
    return took, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per row and version (default 5)")
    parser.add_argument("--against", metavar="REV", help="also time every row at this git revision")
    parser.add_argument("--only", nargs="+", choices=list(ROWS), help="time these rows only")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument("--smoke", action="store_true", help="every row once, checks at 2 steps, no ratios")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.smoke and args.out is not None:
        parser.error("--smoke measures nothing: not with --out")
    repeats = 1 if args.smoke else args.repeats
    rows = args.only or list(ROWS)
    with tempfile.TemporaryDirectory() as folder:
        trees = {"now": ROOT}
        if args.against:
            trees["before"] = Path(folder) / "before"
            add = [
                "git",
                "-C",
                str(ROOT),
                "worktree",
                "add",
                "--detach",
                "-q",
                str(trees["before"]),
                args.against,
            ]
            subprocess.run(add, check=True)
        try:
            times: dict[str, dict[str, list[float]]] = {version: {} for version in trees}
            cpus: dict[str, dict[str, list[float]]] = {version: {} for version in trees}
            if not args.smoke:
                for row in rows:
                    for tree in trees.values():
                        time_once(tree, ROWS[row][1], True, folder)  # untimed: compiles the bytecode
            for turn in range(repeats):
                for row in rows:
                    for version, tree in trees.items():
                        wall, cpu_seconds = time_once(tree, ROWS[row][1], args.smoke, folder)
                        times[version].setdefault(row, []).append(wall)
                        cpus[version].setdefault(row, []).append(cpu_seconds)
                print(f"round {turn + 1} of {repeats}: done", file=sys.stderr, flush=True)
        finally:
            if args.against:
                remove = ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees["before"])]
                subprocess.run(remove, check=False)
    median = {
        version: {row: statistics.median(t) for row, t in timed.items()} for version, timed in times.items()
    }
    cpu = {
        version: {row: statistics.median(t) for row, t in timed.items()} for version, timed in cpus.items()
    }
    versions = list(trees)
    names = [args.against if v == "before" else v for v in versions]
    header = "".join(f"{name:>10}{name + ' CPU':>12}" for name in names)
    lines = [
        f"median wall seconds (and CPU seconds, worker processes included) over {repeats} runs each "
        f"(rows and versions taking turns), {os.cpu_count()} cores",
        f"{'command':48}{header}",
        *(
            f"{ROWS[row][0]:48}" + "".join(f"{median[v][row]:9.2f}s{cpu[v][row]:11.2f}s" for v in versions)
            for row in rows
        ),
    ]
    if not args.smoke:
        lines += ["", f"{'ratio (wall)':48}{''.join(f'{name:>10}' for name in names)}   target"]
        for label, top, bottom, target in RATIOS:
            if top not in rows or (bottom is not None and bottom not in rows):
                continue
            cells = "".join(
                f"{median[v][top] / (median[v][bottom] if bottom else 1.0):9.2f}{'x' if bottom else 's'}"
                for v in versions
            )
            lines.append(f"{label:48}{cells}   {'' if target is None else f'<= {target}'}")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
