"""The benchmark scripts still run: `--smoke` runs every row of scripts/bench.py and scripts/
bench_core.py at a tiny size, with the checks each row makes (the token-level baseline ends at the
simulator's parameters, the CSV writers give the same bytes, the commands write their outputs). No
figure is asserted: they are not measurements."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
HANG = 1200  # seconds: a guard against a hang, not a speed limit

# Every row of scripts/bench.py, by the start of its label, in order.
BENCH_ROWS = [
    "article set (4 x 6 x",
    "  per run-step",
    "  peak memory (allocations)",
    "8 runs x",
    "  peak memory, parent (allocations)",
    "  cap 1,500: article set, per step",
    "  cap 10,000: article set, per step",
    "  cap 100,000: article set, per step",
    "cost per step, cap 100,000 / cap 1,500",
    "exact expected update, one policy, per call",
    "  peak memory",
    "token-level baseline, article set",
    "  peak memory",
    "simulator speed-up over the baseline",
    "toyrl run --seeds 2",
    "  on the compiled path (numba)",
    "  numpy's path / the compiled path",
    "  writing its CSV and sidecar, numpy's path",
    "  writing as a share of the whole, numpy's path",
    "  writing its CSV and sidecar, compiled",
    "  writing as a share of the whole, compiled",
    "  before (per-value repr): writing",
    "  before: its share, numpy's path",
    "  writing, before / now",
    "toyrl run --variant dr_grpo --seeds 6",
    "  peak resident memory of that process",
    "toyrl reproduce, wall",
    'python -c "import numpy", wall',
    "toyrl --help, wall",
    "  toyrl --help / import numpy",
    "numpy + toyrl's core, simulate",
    "toyrl run --variant all --seeds 1",
    "  toyrl run / the bare process",
    "  again, its results kept: / the bare process",
]
VALUE = re.compile(r"\s(\d[\d,]*(\.\d+)?( (s|us|ms|MB)|x|%))$")  # a row ends with its figure


def smoke(script: str) -> list[str]:
    """The lines `script --smoke` prints, asserting that it exits 0."""
    result = subprocess.run(
        [sys.executable, str(SCRIPTS / script), "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )
    output = f"{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    assert result.returncode == 0, f"{script} --smoke failed:\n{output}"
    return result.stdout.splitlines()


@pytest.mark.slow
def test_bench_smoke_prints_every_row_with_no_target() -> None:
    lines = smoke("bench.py")
    header = next(i for i, line in enumerate(lines) if line.startswith("measure"))
    assert header == 1 and lines[0].startswith("machine: ")
    assert lines[header].split() == ["measure", "value", "target"]
    rows = lines[header + 1 :]
    assert len(rows) == len(BENCH_ROWS), "\n".join(rows)
    for row, label in zip(rows, BENCH_ROWS, strict=True):
        assert row.startswith(label), (row, label)
        assert VALUE.search(row), f"no figure, or a target stated, in the smoke mode: {row!r}"


def bench_core() -> object:
    """scripts/bench_core.py as a module (its workloads and the versions each is timed in)."""
    return load_script("bench_core")


@pytest.mark.slow
def test_bench_core_smoke_times_every_workload_in_every_version() -> None:
    module = bench_core()
    tasks, versions = module.TASKS, module.VERSIONS  # type: ignore[attr-defined]
    lines = smoke("bench_core.py")
    assert lines[0].startswith("smoke: ")
    header = next(i for i, line in enumerate(lines) if line.startswith("workload"))
    rows = lines[header + 1 :]
    assert len(rows) == len(tasks), "\n".join(rows)
    for row, task in zip(rows, tasks, strict=True):
        timed = re.findall(r"\d+\.\d{3}s", row)
        assert len(timed) == len(versions[task]) + 1, (task, row)  # its baselines, and this version
    assert not any("targets:" in line or "<=" in line or ">=" in line for line in lines)
