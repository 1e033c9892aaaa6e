"""The quick paths of `toyrl run` give the same results as the pandas ones: the CSV writer's bytes
are pandas' `to_csv` to the byte, the arrays are the DataFrame, and results kept by their digest
are the ones a cell-by-cell comparison keeps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from typer.testing import CliRunner

import toyrl.results as results
from toyrl.cli import app
from toyrl.experiment import frame_of, run_experiment
from toyrl.results import csv_columns, load_results, save_results

from .configs import SMALL

NAMES = ["grpo", "dr_grpo", "advantage=rloo,aggregation=token_mean,num_iterations=2"]


def written(table: object) -> bytes:
    pieces: list[bytes] = []
    results._write_csv(csv_columns(table), pieces.append)  # type: ignore[arg-type]
    return b"".join(pieces)


def pandas_bytes(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False, lineterminator="\n").encode("utf-8")


FLOATS = hnp.arrays(
    np.float64,
    st.integers(0, 40),
    elements=st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(min_value=-1e-300, max_value=1e-300),
        st.sampled_from([0.0, -0.0, 1e16, 1e15, 1e-5, 1e-4, 0.1, 1 / 3, 5e-324, 2.0**60]),
    ),
)
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


@settings(max_examples=200, deadline=None)
@given(values=FLOATS, data=st.data())
def test_csv_bytes_are_pandas_to_csv(values: np.ndarray, data: st.DataObject) -> None:
    rows = len(values)
    names = data.draw(st.lists(TEXT, min_size=rows, max_size=rows))
    integers = data.draw(hnp.arrays(np.int64, rows, elements=st.integers(-(2**62), 2**62)))
    frame = pd.DataFrame({"variant": names, "seed": integers, 'x, "quoted"': values, "y": values[::-1]})
    assert written(frame) == pandas_bytes(frame)


COLUMNS_OF_KINDS = st.one_of(
    hnp.arrays(np.float64, st.integers(60, 300), elements=st.integers(-(2**60), 2**60).map(float)),
    hnp.arrays(
        np.float64, st.integers(60, 300), elements=st.sampled_from([0.0, -0.0, 0.25, 1e16, np.nan, -3.0])
    ),
    hnp.arrays(np.float64, st.integers(60, 300), elements=st.floats(-1e17, 1e17).map(round).map(float)),
)


@settings(max_examples=100, deadline=None)
@given(values=COLUMNS_OF_KINDS)
def test_csv_bytes_of_whole_numbers_and_few_values_are_pandas_to_csv(values: np.ndarray) -> None:
    """The columns formatted the quicker ways (`toyrl.results._float_cells`)."""
    frame = pd.DataFrame({"x": values, "y": np.arange(len(values))})
    assert written(frame) == pandas_bytes(frame)


def test_csv_of_runs_is_pandas_to_csv_sampled_mean_field_and_in_pieces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for mean_field in (False, True):
        frame = run_experiment(SMALL, NAMES[:2], [0, 3], mean_field=mean_field)
        if mean_field:  # NaN in every sampled-batch column: an empty field each
            assert frame["batch_accuracy"].isna().all()
        assert written(frame) == pandas_bytes(frame)
    monkeypatch.setattr(results, "CSV_ROWS_PER_WRITE", 5)
    assert written(frame) == pandas_bytes(frame)
    committed = Path(__file__).resolve().parent.parent / "results" / "article.csv"
    assert written(pd.read_csv(committed)) == committed.read_bytes()


def test_the_arrays_are_the_dataframe() -> None:
    for n_jobs in (1, 2):
        columns = run_experiment(SMALL, NAMES, [0, 3, 5], n_jobs=n_jobs, as_columns=True)
        frame = run_experiment(SMALL, NAMES, [0, 3, 5], n_jobs=n_jobs)
        pd.testing.assert_frame_equal(frame_of(columns), frame, check_exact=True)
        assert written(columns) == pandas_bytes(frame)


def test_progress_counts_every_run_step() -> None:
    calls: list[tuple[int, int]] = []
    run_experiment(SMALL, NAMES[:2], [0, 1], progress=lambda done, total: calls.append((done, total)))
    total = 4 * (SMALL.steps + 1)
    assert calls[-1] == (total, total) and all(t == total for _, t in calls)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls) and len(calls) > SMALL.steps


def test_results_equal_to_the_byte_are_kept_without_reading_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "r.csv"
    args = [
        "run",
        "--steps",
        "12",
        "--prompts",
        "8",
        "--batch-prompts",
        "4",
        "--seeds",
        "2",
        "--out",
        str(out),
    ]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0 and first.stdout.rstrip().endswith(
        f"wrote {out} and {out.with_suffix('.json')}"
    )
    before = {path: path.stat().st_mtime_ns for path in (out, out.with_suffix(".json"))}

    def unread(*_: object, **__: object) -> None:
        raise AssertionError("the saved results were parsed")

    with pytest.MonkeyPatch.context() as patch:  # only this invocation: the test's own patches stay
        patch.setattr(results, "load_results", unread)
        again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and f"kept {out} and" in again.stdout
    assert {path: path.stat().st_mtime_ns for path in before} == before
    # Saved results that differ in one last bit are not these results: written afresh, to the bit.
    original = out.read_bytes()
    frame, meta = load_results(out)
    frame.loc[3, "accuracy"] = np.nextafter(frame.loc[3, "accuracy"], 1)
    sidecar = json.loads(out.with_suffix(".json").read_text())
    out.unlink()
    save_results(frame, out, {key: value for key, value in sidecar.items() if key != "csv_sha256"})
    moved = out.read_bytes()
    assert (
        meta is not None
        and json.loads(out.with_suffix(".json").read_text())["csv_sha256"] != meta["csv_sha256"]
    )
    rewritten = CliRunner().invoke(app, [*args, "--force"])  # without it, its runs are kept as finished
    assert rewritten.exit_code == 0 and rewritten.stdout.rstrip().endswith(
        f"wrote {out} and {out.with_suffix('.json')}"
    )
    assert out.read_bytes() != moved and out.read_bytes() == original
