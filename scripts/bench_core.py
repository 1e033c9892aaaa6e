"""Benchmark the core against earlier versions of itself: the same workloads, timed in one run.

    python scripts/bench_core.py [--repeats 5] [--tries 3] [--only TASK ...] [--out results/bench_core.txt]
    python scripts/bench_core.py --smoke

`--smoke` runs every workload in every version once at 2 steps (CI runs it, tests/
test_bench_smoke.py, so that the script cannot rot) and prints the rows but no targets: its figures
are not measurements.

The baselines are git revisions of this repository, checked out into temporary worktrees:
`REDESIGN` (567dae0, the last commit before the core was redesigned as one step, top to bottom),
`ARITHMETIC` (cdac3e0, the last commit before toyrl's own kernels and variates made every
number the same bits on every machine) and `STACKED` (733f532, the last commit whose chunks
stacked the sampler, objective, KL term and schedule per run). Each workload runs in a fresh
process of each version,
the versions taking turns, `--repeats` times, and is timed `--tries` times in each process, the
fastest kept (the timing least disturbed by the rest of the machine); the medians over processes
and their ratios are reported. Only wall time of the simulation itself is measured (imports and
set-up excluded).

Workloads and targets:
- the article set: 4 variants x 6 seeds x 400 steps, one chunk: at most 1.25x its time before
  the portable arithmetic, and at most its time before the redesign;
- every variant of `toyrl.variants.VARIANTS` (the article's and the trainers' presets) x 2 seeds
  x 100 steps in one call: at least 1.2x faster than with per-run stacking;
- a 4-epoch PPO preset (DAPO's settings, num_iterations=4): 24 seeds x 200 steps: at least 2x
  faster than before the redesign;
- mean-field runs, 256 x 100 steps, against the same runs sampled: at most 2x.

A control: the article set with numpy's exp, log, logaddexp and power in place of this version's
kernels (monkeypatched in `toyrl.kernels`; other bits, timing only), which measures how much of
the difference from cdac3e0 is the kernels' cost. Every workload runs numpy's kernels
(TOYRL_KERNELS=numpy); a workload named `*_compiled` runs on the compiled path (TOYRL_KERNELS=compiled,
numba: the kernels, the sampled step's loops of `toyrl.policy_compiled` and the mean-field sums, the
same bits), in this version only, warm (the warm-up runs load or compile them, untimed). The issue's
targets on that path: the article set at most its time before the redesign, the 4-epoch PPO preset at
least 2x faster than before the redesign, mean-field runs at most 2x the same runs sampled.

`noise_compiled` draws the article set's variates alone (`toyrl.train.step_noise`, toyrl's own
transforms of PCG64, on the compiled kernels) and nothing else: the part of the floor that any
simulator drawing the same numbers pays, against which the article set's row is compared.
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
REDESIGN = "567dae0"  # the last commit before "one step, top to bottom"
ARITHMETIC = "cdac3e0"  # the last commit before the portable arithmetic
STACKED = "733f532"  # the last commit whose chunks stacked sampler, objective, kl and schedule per run

PPO4 = (
    "advantage=group_std_sample,aggregation=token_mean,num_iterations=4,epsilon_high=0.28,"
    "mask_truncated=True,std_eps=1e-06"
)

# Runs in a fresh interpreter with the version under test first on sys.path; prints seconds as JSON.
WORKLOAD = r"""
import json, os, sys, time
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

name, ppo4 = sys.argv[2], sys.argv[3]
name_given = name
# toyrl.kernels' path (older versions have no switch): the compiled kernels for *_compiled, else numpy's
os.environ["TOYRL_KERNELS"] = "compiled" if name.endswith("_compiled") else "numpy"
if sys.argv[5:] == ["smoke"]:  # every workload at 2 steps: the script runs, nothing is measured
    full_config = Config

    def Config(**fields):
        return full_config(**(fields | {"steps": 2}))
try:
    from toyrl import kernels
except ImportError:  # a version before the kernels: numpy's functions already
    kernels = None
if name.endswith("_numpy") and kernels is not None:  # a control, timing only: numpy's functions
    import numpy as np

    def expit(x):
        return 1 / (1 + np.exp(-np.asarray(x)))

    kernels.exp, kernels.log, kernels.log1p, kernels.expm1 = np.exp, np.log, np.log1p, np.expm1
    kernels.softplus = lambda x: np.logaddexp(0, x)
    kernels.log_expit = lambda x: -np.logaddexp(0, -np.asarray(x))
    kernels.expit = expit
    kernels.expit_pair = lambda x: (expit(x), expit(-np.asarray(x)))
    kernels.expit_pair_softplus = lambda x, n: (*kernels.expit_pair(x), np.logaddexp(0, x[..., -n:]))
    kernels.power = np.power
    import toyrl.policy

    toyrl.policy.expit, toyrl.policy.log_expit = kernels.expit, kernels.log_expit  # bound at import
name = name.removesuffix("_numpy").removesuffix("_compiled")
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
    "presets": lambda: run(Config(steps=100), presets),
    "noise": lambda: draw_noise(Config(), article),
}


def draw_noise(config, runs):  # this version only: every step's variates of the runs, nothing else
    from toyrl.train import run_streams, step_noise

    for _ in step_noise([run_streams(seed) for _, seed in runs], config):
        pass


if name == "presets":
    from toyrl.variants import VARIANTS

    presets = [(variant, s) for variant in VARIANTS.values() for s in range(2)]
run(Config(steps=5), article)  # warm up
if name_given.endswith("_compiled"):  # and load every compiled function the workload calls
    run(Config(steps=2), [(ppo, 0)])
    run(Config(steps=2), [(plain, 0)], True)
seconds = []
for _ in range(int(sys.argv[4])):  # the fastest of a few: the least disturbed by the machine
    start = time.perf_counter()
    tasks[name]()
    seconds.append(time.perf_counter() - start)
print(json.dumps(min(seconds)))
"""
TASKS = [
    "article",
    "article_numpy",
    "article_compiled",
    "noise_compiled",
    "ppo4",
    "ppo4_compiled",
    "mixed",
    "mixed_one_chunk",
    "ppo4_alone",
    "plain23",
    "mean_field256",
    "sampled256",
    "mean_field256_compiled",
    "sampled256_compiled",
    "presets",
]


def time_once(tree: Path, task: str, tries: int, smoke: bool = False) -> float:
    size = ["smoke"] if smoke else []
    command = [sys.executable, "-c", WORKLOAD, str(tree), task, PPO4, str(tries), *size]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{task} failed in {tree}:\n{result.stderr.strip()[-2000:]}")
    return float(json.loads(result.stdout))


# The versions each workload is timed in (every task also in this one).
VERSIONS = {
    "article": ("redesign", "arithmetic"),
    "article_numpy": ("redesign", "arithmetic"),
    "article_compiled": (),  # the compiled path is this version's
    "noise_compiled": (),
    "ppo4": ("redesign", "arithmetic"),
    "ppo4_compiled": (),
    "mixed": ("redesign",),
    "mixed_one_chunk": ("redesign",),
    "ppo4_alone": ("redesign",),
    "plain23": ("redesign",),
    "mean_field256": ("arithmetic",),
    "sampled256": ("arithmetic",),
    "mean_field256_compiled": (),
    "sampled256_compiled": (),
    "presets": ("stacked",),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs per workload and version (default 5)")
    parser.add_argument(
        "--tries", type=int, default=3, help="timings per process, the fastest kept (default 3)"
    )
    parser.add_argument("--only", nargs="+", choices=TASKS, help="time these workloads only")
    parser.add_argument("--out", type=Path, help="also write the table to this file")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="every workload once at 2 steps, no targets (CI: the script runs)",
    )
    args = parser.parse_args()
    if args.repeats < 1 or args.tries < 1:
        parser.error("--repeats and --tries must be at least 1")
    if args.smoke and args.out is not None:
        parser.error("--smoke measures nothing: not with --out")
    if args.smoke:
        args.repeats = args.tries = 1
    tasks = args.only or TASKS
    with tempfile.TemporaryDirectory() as folder:
        trees = {"now": ROOT}
        baselines = {"redesign": REDESIGN, "arithmetic": ARITHMETIC, "stacked": STACKED}
        for name, revision in baselines.items():
            trees[name] = Path(folder) / name
            command = [
                "git",
                "-C",
                str(ROOT),
                "worktree",
                "add",
                "--detach",
                "-q",
                str(trees[name]),
                revision,
            ]
            subprocess.run(command, check=True)
        try:
            times: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
            for task in tasks:
                for _ in range(args.repeats):  # the versions take turns, so drift hits each
                    for version in (*VERSIONS[task], "now"):
                        times[version].setdefault(task, []).append(
                            time_once(trees[version], task, args.tries, args.smoke)
                        )
                print(f"{task}: done", file=sys.stderr, flush=True)
        finally:
            for name in baselines:
                remove = ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(trees[name])]
                subprocess.run(remove, check=False)
    median = {v: {t: statistics.median(times[v][t]) for t in times[v]} for v in times}
    now, redesign, arithmetic = median["now"], median["redesign"], median["arithmetic"]
    stacked = median["stacked"]
    lines = [
        f"medians over {args.repeats} processes each (versions alternating) of the fastest of {args.tries} "
        f"timings in the process; versions: {REDESIGN} (before the redesign), {ARITHMETIC} (before the "
        f"portable arithmetic), {STACKED} (stages stacked per run), this one",
        f"{'workload':40} {REDESIGN:>9} {ARITHMETIC:>9} {STACKED:>9} {'now':>9}",
    ]
    labels = {
        "article": "article set, 4 x 6 x 400",
        "article_numpy": "  with numpy's exp, log, ... (control)",
        "article_compiled": "  on the compiled path (numba)",
        "noise_compiled": "  its noise alone, compiled (the floor's)",
        "ppo4": "4-epoch PPO preset, 24 x 200",
        "ppo4_compiled": "  on the compiled path",
        "mixed": "1 x 4-epoch + 23 plain, as chunked",
        "mixed_one_chunk": "  the same 24 runs in one array",
        "ppo4_alone": "  the 4-epoch run alone",
        "plain23": "  the 23 plain runs alone",
        "mean_field256": "mean-field, 256 x 100",
        "sampled256": "sampled, 256 x 100",
        "mean_field256_compiled": "mean-field, 256 x 100, compiled path",
        "sampled256_compiled": "sampled, 256 x 100, compiled path",
        "presets": "every variant, 2 x 100, one call",
    }

    def cell(version: dict[str, float], task: str) -> str:
        return f"{version[task]:8.3f}s" if task in version else f"{'':>9}"

    for task in tasks:
        cells = " ".join(cell(version, task) for version in (redesign, arithmetic, stacked, now))
        lines.append(f"{labels[task]:40} {cells}")
    if args.smoke:
        print("\n".join(["smoke: every workload once at 2 steps; no measurement, no targets", *lines]))
        return
    lines += ["", "targets:"]
    if "article" in now:
        ratio = now["article"] / arithmetic["article"]
        lines.append(f"  article set, now / {ARITHMETIC}: {ratio:.2f} (<= 1.25)")
        ratio = now["article"] / redesign["article"]
        lines.append(f"  article set, now / {REDESIGN}: {ratio:.2f} (<= 1)")
    if "article_numpy" in now:
        control = "control, numpy's functions in place of the kernels,"
        ratio = now["article_numpy"] / arithmetic["article_numpy"]
        lines.append(f"  {control} / {ARITHMETIC}: {ratio:.2f}")
        ratio = now["article_numpy"] / redesign["article_numpy"]
        lines.append(f"  {control} / {REDESIGN}: {ratio:.2f} (<= 1)")
    if "article_compiled" in now:
        if "article" in now:
            ratio = now["article"] / now["article_compiled"]
            lines.append(f"  article set, numpy path / compiled path: {ratio:.2f}x")
        if "article" in redesign:
            ratio = now["article_compiled"] / redesign["article"]
            lines.append(f"  article set compiled, now / {REDESIGN}: {ratio:.2f} (<= 1)")
    if "noise_compiled" in now and "article_compiled" in now:
        ratio = now["article_compiled"] / now["noise_compiled"]
        lines.append(f"  article set compiled / drawing its noise alone: {ratio:.2f}x")
    if "ppo4" in now:
        lines.append(
            f"  4-epoch PPO speed-up, {REDESIGN} / now: {redesign['ppo4'] / now['ppo4']:.2f}x (>= 2)"
        )
    if "ppo4_compiled" in now and "ppo4" in redesign:
        ratio = redesign["ppo4"] / now["ppo4_compiled"]
        lines.append(f"  4-epoch PPO compiled, {REDESIGN} / now: {ratio:.2f}x (>= 2)")
    if "presets" in now:
        ratio = stacked["presets"] / now["presets"]
        lines.append(f"  every variant in one call, {STACKED} / now: {ratio:.2f}x (>= 1.2)")
    if "mean_field256" in now and "sampled256" in now:
        ratio = now["mean_field256"] / now["sampled256"]
        before = arithmetic["mean_field256"] / arithmetic["sampled256"]
        lines.append(f"  mean-field / sampled, 256 x 100: {ratio:.2f}x (<= 2; {before:.2f}x at {ARITHMETIC})")
    if "mean_field256_compiled" in now and "sampled256_compiled" in now:
        ratio = now["mean_field256_compiled"] / now["sampled256_compiled"]
        lines.append(f"  mean-field / sampled, compiled: {ratio:.2f}x (<= 2)")
    print("\n".join(lines))
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
