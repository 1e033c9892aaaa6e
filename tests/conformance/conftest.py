"""The trainer conformance suite: each trainer's installed code against toyrl's presets.

Run it with `bash scripts/conformance.sh`, which builds the pinned trainer environment and runs
these tests there with TOYRL_CONFORMANCE=1. Without that variable a test whose trainer is not
installed is skipped with a message; with it, a missing trainer fails the run (so CI cannot pass
on a suite that ran nothing). At the end the run prints one row per comparison: trainer,
version, setting, toyrl preset, max relative difference (`toy.relative_difference`), status.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from dataclasses import dataclass
from types import ModuleType

import pytest

from toyrl.bridge import pin_kernels

# The bridge's runs (test_trl_bridge.py) are the same bits on every x86-64 CPU with AVX2 only with
# torch's and MKL's kernels pinned before torch is first imported; the trainers' comparisons, at a
# tolerance, do not mind which kernels run.
pin_kernels()

TOLERANCE = 1e-10
ENFORCED = os.environ.get("TOYRL_CONFORMANCE") == "1"


@dataclass
class Row:
    trainer: str
    version: str
    setting: str
    preset: str
    difference: float
    status: str


ROWS: list[Row] = []


def trainer_module(name: str, distribution: str) -> ModuleType:
    """Import a trainer's module; skip the test if it is not installed (fail under the suite's
    own command, TOYRL_CONFORMANCE=1)."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        if ENFORCED:
            raise
        pytest.skip(
            f"{distribution} is not installed: `bash scripts/conformance.sh` builds its environment ({error})"
        )


def version_of(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


@pytest.fixture
def conform():
    """conform(trainer, setting, preset, difference, expected=True, tolerance=TOLERANCE): record a
    comparison and assert it. `trainer` is the distribution name (its installed version is
    recorded); `expected=False` records a known mismatch (the preset is knowingly not the trainer's
    behaviour, e.g. an older release's), asserting that it *does* differ; a `tolerance` above the
    suite's is for a trainer that rounds its results to float32 (the row shows it)."""

    def check(
        trainer: str,
        setting: str,
        preset: str,
        difference: float,
        expected: bool = True,
        tolerance: float = TOLERANCE,
    ) -> None:
        agrees = difference <= tolerance
        if expected:
            status = "ok" if agrees else "FAIL"
            if tolerance != TOLERANCE:
                status += f" (float32: <= {tolerance:.2g})"
        else:
            status = "differs (known)" if not agrees else "FAIL: agrees"
        ROWS.append(Row(trainer, version_of(trainer), setting, preset, difference, status))
        assert agrees == expected, (
            f"{trainer} {setting} vs {preset}: max relative difference {difference:.3g}"
        )

    return check


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if not ROWS:
        return
    header = ("trainer", "version", "setting", "preset", "max rel. diff", "status")
    cells = [header] + [
        (r.trainer, r.version, r.setting, r.preset, f"{r.difference:.2e}", r.status) for r in ROWS
    ]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    terminalreporter.section(f"trainer conformance (tolerance {TOLERANCE:g} relative)")
    for row in cells:
        terminalreporter.write_line(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
