"""The CPU cost of `toyrl bridge --quick`, against its budget of a minute of CPU.

    python scripts/bench_bridge.py [--python PYTHON] [--repeats 2] [--out results/bench_bridge.txt]

PYTHON is an interpreter with the bridge extra (TRL 1.16.0, transformers, torch's CPU build) and
this checkout importable, e.g. TRL's conformance environment (.trainers/trl/bin/python, built by
scripts/conformance.sh). Each repeat runs the whole command in a fresh process twice: with an
empty fit cache (the starting network fitted, as on a first run) and with the cache the first
left (fitted networks loaded, as on every later run). The CPU time is the child process's user +
system time (every thread; the command itself runs torch on one), imports and writing included;
the command's own record of its training time (the sidecar's cpu_seconds) is printed beside it.
The budget is the issue's: a quick run under a minute of CPU. The medians over repeats are
reported with their ratio to the budget.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 60.0  # CPU seconds


def child_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(python: str, folder: Path, cache: Path) -> tuple[float, float]:
    """(CPU seconds of the command, its training's own CPU seconds)."""
    out = folder / "quick.csv"
    before = child_cpu()
    subprocess.run(
        [
            python,
            "-m",
            "toyrl.cli",
            "bridge",
            "--quick",
            "--quiet",
            "--set",
            "loss_type=grpo",
            "--set",
            "scale_rewards=group",
            "--cache-dir",
            str(cache),
            "--out",
            str(out),
            "--force",
        ],
        check=True,
        cwd=folder,
        stdout=subprocess.DEVNULL,
        env=os.environ | {"PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"},
    )
    spent = child_cpu() - before
    meta = json.loads(out.with_suffix(".json").read_text())
    return spent, sum(meta["cpu_seconds"].values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=str(ROOT / ".trainers" / "trl" / "bin" / "python"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench_bridge.txt")
    args = parser.parse_args()
    if not 1 <= args.repeats <= 20:
        sys.exit("bench_bridge: --repeats must be in 1..20")
    cold, warm, training = [], [], []
    for repeat in range(args.repeats):
        with tempfile.TemporaryDirectory() as scratch:
            folder = Path(scratch)
            for store in (cold, warm):
                spent, trained = one_run(args.python, folder, folder / "cache")
                store.append(spent)
                training.append(trained)
                print(
                    f"repeat {repeat + 1}: {'cold' if store is cold else 'warm'} {spent:.1f} CPU-s",
                    flush=True,
                )
    lines = [
        "toyrl bridge --quick (1 seed x 32 steps, cap 64, 16 x 8 completions a step; the settings and "
        "TRL's Dr. GRPO), whole command, CPU seconds (user + system), median of "
        f"{args.repeats} repeat{'s' if args.repeats > 1 else ''}:",
        f"  with an empty fit cache: {statistics.median(cold):.1f} CPU-s, "
        f"{statistics.median(cold) / BUDGET:.2f}x "
        f"the budget of {BUDGET:.0f}",
        f"  with the fitted start cached: {statistics.median(warm):.1f} CPU-s, "
        f"{statistics.median(warm) / BUDGET:.2f}x the budget",
        f"  of which training (the command's record): {statistics.median(training):.1f} CPU-s",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.write_text(text)


if __name__ == "__main__":
    main()
