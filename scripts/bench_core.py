"""Benchmark the core against an earlier version of itself: the same workloads, timed in one run.

    python scripts/bench_core.py [--baseline REV] [--repeats 5] [--tries 3] [--only TASK ...]
                                 [--out results/bench_core.txt]

The baseline is a git revision of this repository (by default the last commit before the core was
redesigned), checked out into a temporary worktree. Each workload runs in a fresh process of each
version, the two versions taking turns, `--repeats` times, and is timed `--tries` times in each
process, the fastest kept (the timing least disturbed by the rest of the machine); the medians
over processes and their ratios are reported. Only wall time of the simulation itself is
measured (imports and set-up excluded).

Workloads (the targets of the redesign):
- the article set: 4 variants x 6 seeds x 400 steps, one chunk;
- a 4-epoch PPO preset (DAPO's settings, num_iterations=4): 24 seeds x 200 steps;
- one num_iterations=4 run with 23 plain Dr. GRPO runs, chunked as `run_experiment` chunks them
  (by schedule), and all 24 in one array, against the 4-epoch run alone plus the 23 plain runs
  alone (200 steps);
- mean-field runs, 256 x 100 steps, against the same runs sampled; and, as a floor, the time of
  the exponentials alone that a mean-field run's numbers are made of: P(K = k) = exp(log s +
  (k - 1) log q) for every length k <= cap, run, branch and step, one libm exp each. Computing
  q^(k - 1) any other way (by powers, a recurrence or a closed form) gives other last bits.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = "567dae0"  # the last commit before "one step, top to bottom"

PPO4 = (
    "advantage=group_std_sample,aggregation=token_mean,num_iterations=4,epsilon_high=0.28,"
    "mask_truncated=True,std_eps=1e-06"
)

# Runs in a fresh interpreter with the version under test first on sys.path; prints seconds as JSON.
WORKLOAD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import toyrl
assert toyrl.__file__.startswith(sys.argv[1]), toyrl.__file__
from toyrl.config import Config
try:  # this version
    from toyrl.experiment import chunk_runs, simulate_runs
    from toyrl.variants import parse_variant

    def run(config, runs, mean_field=False):
        simulate_runs(config, runs, mean_field)

    def chunked(config, runs):  # as run_experiment cuts runs into chunks
        for chunk in chunk_runs(runs, 256, 1):
            simulate_runs(config, [runs[i] for i in chunk])
except ImportError:  # toyrl 0.2
    from toyrl.objective import parse_variant as parse
    from toyrl.presets import ALL_VARIANTS
    from toyrl.train import simulate

    def parse_variant(text):
        return parse(text.replace("std_eps=", "eps="), ALL_VARIANTS)

    def run(config, runs, mean_field=False):
        simulate(config, runs, exact=mean_field)

    def chunked(config, runs):  # its run_experiment kept up to 256 runs in one chunk
        run(config, runs)

def exps(config, runs):  # the exps of a mean-field run: one per length, run and branch, each step
    import numpy as np

    arguments = np.linspace(-1, -30, config.cap)[None] * np.linspace(0.5, 1.5, runs)[:, None]
    out = np.empty_like(arguments)
    for _ in range(2 * (config.steps + 1)):  # two branches, steps + 1 evaluations
        np.exp(arguments, out=out)


name, ppo4 = sys.argv[2], sys.argv[3]
plain = parse_variant("dr_grpo")
article = [(parse_variant(v), s) for v in ("grpo", "std_only", "length_only", "dr_grpo") for s in range(6)]
ppo = parse_variant(ppo4)
tasks = {
    "article": lambda: run(Config(), article),
    "ppo4": lambda: run(Config(steps=200), [(ppo, s) for s in range(24)]),
    "mixed": lambda: chunked(Config(steps=200), [(ppo, 0)] + [(plain, s) for s in range(1, 24)]),
    "mixed_one_chunk": lambda: run(Config(steps=200), [(ppo, 0)] + [(plain, s) for s in range(1, 24)]),
    "ppo4_alone": lambda: run(Config(steps=200), [(ppo, 0)]),
    "plain23": lambda: run(Config(steps=200), [(plain, s) for s in range(1, 24)]),
    "mean_field256": lambda: run(Config(steps=100), [(plain, s) for s in range(256)], True),
    "sampled256": lambda: run(Config(steps=100), [(plain, s) for s in range(256)]),
    "mean_field_exps": lambda: exps(Config(steps=100), 256),
}
run(Config(steps=5), article)  # warm up
seconds = []
for _ in range(int(sys.argv[4])):  # the fastest of a few: the least disturbed by the machine
    start = time.perf_counter()
    tasks[name]()
    seconds.append(time.perf_counter() - start)
print(json.dumps(min(seconds)))
"""
TASKS = [
    "article",
    "ppo4",
    "mixed",
    "mixed_one_chunk",
    "ppo4_alone",
    "plain23",
    "mean_field256",
    "sampled256",
    "mean_field_exps",
]


def time_once(tree: Path, task: str, tries: int) -> float:
    command = [sys.executable, "-c", WORKLOAD, str(tree), task, PPO4, str(tries)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{task} failed in {tree}:\n{result.stderr.strip()[-2000:]}")
    return float(json.loads(result.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline", default=BASELINE, help=f"git revision to compare with (default {BASELINE})"
    )
    parser.add_argument("--repeats", type=int, default=5, help="runs per workload and version (default 5)")
    parser.add_argument(
        "--tries", type=int, default=3, help="timings per process, the fastest kept (default 3)"
    )
    parser.add_argument("--only", nargs="+", choices=TASKS, help="time these workloads only (no table)")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        baseline = Path(folder) / "baseline"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(baseline), args.baseline],
            check=True,
        )
        try:
            times: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
            for task in args.only or TASKS:
                for _ in range(args.repeats):  # the versions take turns, so drift hits both
                    for version, tree in (("before", baseline), ("after", ROOT)):
                        times[version].setdefault(task, []).append(time_once(tree, task, args.tries))
                print(f"{task}: done", file=sys.stderr, flush=True)
        finally:
            remove = ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(baseline)]
            subprocess.run(remove, check=False)
    median = {v: {t: statistics.median(times[v][t]) for t in times[v]} for v in times}
    if args.only:
        for task in args.only:
            b, a = median["before"][task], median["after"][task]
            print(f"{task}: before {b:.3f}s, after {a:.3f}s, before / after {b / a:.2f}")
        return
    before, after = median["before"], median["after"]
    rows = [
        ("article set, 4 x 6 x 400", "article", "after / before <= 1"),
        ("4-epoch PPO preset, 24 x 200", "ppo4", "before / after >= 2"),
        ("1 x 4-epoch + 23 plain, as chunked", "mixed", ""),
        ("  the same 24 runs in one array", "mixed_one_chunk", ""),
        ("  the 4-epoch run alone", "ppo4_alone", ""),
        ("  the 23 plain runs alone", "plain23", ""),
        ("mean-field, 256 x 100", "mean_field256", ""),
        ("sampled, 256 x 100", "sampled256", ""),
    ]
    lines = [
        f"baseline {args.baseline}; medians over {args.repeats} processes each (versions alternating) "
        f"of the fastest of {args.tries} timings in the process",
        f"{'workload':40} {'before':>9} {'after':>9}  {'after/before':>12}",
    ]
    for label, task, _ in rows:
        ratio = after[task] / before[task]
        lines.append(f"{label:40} {before[task]:8.3f}s {after[task]:8.3f}s  {ratio:11.2f}x")
    alone = after["ppo4_alone"] + after["plain23"]
    lines += [
        "",
        "targets, after:",
        f"  article set after / before: {after['article'] / before['article']:.2f} (<= 1)",
        f"  4-epoch PPO speed-up before / after: {before['ppo4'] / after['ppo4']:.2f}x (>= 2)",
        f"  1 x 4-epoch + 23 plain / (4-epoch alone + plain alone): {after['mixed'] / alone:.2f} (<= 1)",
        f"    (in one array: {after['mixed_one_chunk'] / alone:.2f})",
        f"  mean-field / sampled, 256 x 100: {after['mean_field256'] / after['sampled256']:.2f}x (<= 2)",
        f"    (its exps alone, which bit-identical numbers need: "
        f"{after['mean_field_exps']:.3f}s, {after['mean_field_exps'] / after['sampled256']:.2f}x sampled)",
        f"  (before: mixed / alone {before['mixed'] / (before['ppo4_alone'] + before['plain23']):.2f}, "
        f"mean-field / sampled {before['mean_field256'] / before['sampled256']:.2f}x)",
    ]
    print("\n".join(lines))
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
