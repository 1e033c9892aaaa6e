"""Time the README's test command and the slow tests it leaves out, on this machine.

    python scripts/time_tests.py [--out results/test_times.txt]

Runs `python -m pytest` (the README's test command, without the tests marked slow) and then
`python -m pytest -m slow` (what .ci/run adds), each once, from the repository root, and prints
their wall times with the machine's core count and pytest's summary line; with `--out`, writes the
same lines to that file, which the README quotes (tests/test_docs.py ties the two). A failing run
is reported and nothing is written.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (["python", "-m", "pytest"], ["python", "-m", "pytest", "-m", "slow"])


def timed(command: list[str]) -> tuple[float, str]:
    """(wall seconds, pytest's summary line) of one run of `command` from the repository root."""
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, *command[1:], "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    summary = next(
        (line for line in reversed(result.stdout.splitlines()) if re.search(r"\d+ passed", line)), ""
    )
    if result.returncode != 0:
        failed = [line for line in result.stdout.splitlines() if line.startswith(("FAILED", "ERROR", "E "))]
        detail = "\n".join(failed) or result.stderr[-500:]
        raise SystemExit(f"{' '.join(command)} failed (exit {result.returncode}): {summary}\n{detail}")
    counts = re.sub(r"^=+ | in [\d.]+s.*$|=+$", "", summary).strip()
    return seconds, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="also write the lines to this file (the README quotes it)")
    args = parser.parse_args()
    lines = []
    for command in COMMANDS:
        seconds, counts = timed(command)
        lines.append(
            f"{' '.join(command):28} {seconds / 60:4.1f} minutes on {os.cpu_count()} cores ({counts})"
        )
        print(lines[-1], flush=True)
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
