"""toyrl.results_compiled: the CSV written on the compiled path is the bytes of repr, field by field.

The oracle is tests/test_csv_format.py's own writer (repr of each float, one value at a time), not
the numpy writer: the compiled writer is checked against what a CSV of repr holds, on the values
that make repr's layout and its shortest digits hard, on random ones, on any floats hypothesis
finds and on a run's results; and it holds no fused multiply-add."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toyrl import kernels
from toyrl import results as results_module
from toyrl.config import Config
from toyrl.experiment import run_experiment
from toyrl.variants import article_variants

from .test_csv_format import hard_values, oracle_csv, random_values
from .test_kernels_compiled import READ_CODE, _numba_or_skip, assert_no_fused_multiply_add, compiled_code


@pytest.fixture(scope="module")
def compiled() -> types.ModuleType:
    _numba_or_skip()
    from toyrl import results_compiled

    return results_compiled


@pytest.fixture
def on_compiled_path(compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    monkeypatch.setenv(kernels.SWITCH, "compiled")
    return compiled


def written(table: dict[str, np.ndarray]) -> bytes:
    pieces: list[bytes] = []
    results_module._write_csv(table, pieces.append)
    return b"".join(pieces)


def column_table(values: np.ndarray) -> dict[str, np.ndarray]:
    texts = np.array(["a,b", 'q"', "plain", "é"] * (len(values) // 4 + 1))[: len(values)]
    return {"x": values, "step": np.arange(len(values)), "text": texts, "y": values[::-1].copy()}


@pytest.mark.parametrize("values", [hard_values(), random_values(100_000)], ids=["hard", "random"])
def test_the_compiled_csv_is_repr_of_each_value(
    values: np.ndarray, on_compiled_path: types.ModuleType
) -> None:
    table = column_table(values)
    assert written(table) == oracle_csv(table)


def test_values_left_undecided_are_taken_in_more_passes(
    on_compiled_path: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hard values hold 76 that the shortest-digits pass leaves undecided (repr decides them):
    recorded 8 a pass, every one is found, in as many passes as it takes."""
    calls: list[int] = []
    lines = on_compiled_path._lines

    def counted(*args: object) -> tuple[int, int]:
        calls.append(1)
        return lines(*args)  # type: ignore[no-any-return]

    monkeypatch.setattr(on_compiled_path, "MISSING", 8)
    monkeypatch.setattr(on_compiled_path, "_lines", counted)
    table = column_table(hard_values())
    assert written(table) == oracle_csv(table)
    assert len(calls) > 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=60))
def test_any_floats_are_repr_of_each_value(values: list[float]) -> None:
    _numba_or_skip()
    table = column_table(np.array(values, dtype=np.float64))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(kernels.SWITCH, "compiled")
        assert written(table) == oracle_csv(table)


def test_a_run_s_results_are_the_same_bytes_on_either_path(
    on_compiled_path: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's columns (fractions, token counts, zeros, text), written by each path, are repr's."""
    config = Config(prompts=16, batch_prompts=4, group_size=4, steps=40, cap=300)
    table = run_experiment(config, article_variants(), [0, 1], as_columns=True)
    compiled_bytes = written(table)
    monkeypatch.setenv(kernels.SWITCH, "numpy")
    assert compiled_bytes == written(table) == oracle_csv(table)


_ASSEMBLY_SCRIPT = (
    r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from toyrl import results_compiled as compiled
from toyrl.results import _POWERS_OF_TEN, _powers_of_ten
values = np.array([0.1, -2.5e-7, 3e20, 12345.678, 7.0, 0.0, np.nan, 5e-324])
compiled.csv_lines([values, np.arange(8), np.array(["a"] * 8)], {})
high, low = _powers_of_ten()
compiled._repr_into(0.1, np.empty(32, np.uint8), 0, np.empty(20, np.uint8), high, low, _POWERS_OF_TEN)
compiled._shortest(0.1, high, low, _POWERS_OF_TEN)
compiled._scaled(0.1, 17, high, low)
compiled._digits_into(np.arange(48, 58, dtype=np.uint8), 10, 0, 10, np.empty(10, np.uint8), 0)
"""
    + READ_CODE
)


def test_the_compiled_writer_holds_no_fused_multiply_add(tmp_path: Path, compiled: types.ModuleType) -> None:
    """Dekker's product in `_scaled` is exact only unfused: every function of the module, compiled
    afresh, has no FMA instruction in its assembly and no `contract` flag in its IR."""
    found = compiled_code(_ASSEMBLY_SCRIPT, tmp_path)
    assert {"_lines", "_repr_into", "_shortest", "_scaled", "_digits_into"} <= set(found), sorted(found)
    assert_no_fused_multiply_add(found)
