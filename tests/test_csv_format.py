"""The results CSV's floats, formatted all at once (`toyrl.results._float_field_bytes`), are Python's
repr of each, byte for byte: checked against this file's own writer, one value at a time (repr of
each float, NaN empty, integers as digits, text quoted where it must be), on the values that make
repr's layout and its shortest digits hard, on millions of random ones and on runs' results."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toyrl.results as results
from toyrl.config import Config
from toyrl.experiment import run_experiment
from toyrl.results import metadata, save_results
from toyrl.variants import article_variants


def oracle_field(value: object) -> str:
    """One field as a straightforward writer makes it: a float's repr (NaN empty), an integer's
    digits, text quoted (quotes doubled) when it holds a comma, a quote or a line break."""
    if isinstance(value, float):
        return "" if value != value else repr(value)
    if isinstance(value, int):
        return str(value)
    text = str(value)
    return f'"{text.replace(chr(34), chr(34) * 2)}"' if any(c in text for c in ',"\r\n') else text


def oracle_csv(table: dict[str, np.ndarray]) -> bytes:
    lines = [",".join(oracle_field(name) for name in table)]
    lines += [
        ",".join(map(oracle_field, row)) for row in zip(*(v.tolist() for v in table.values()), strict=True)
    ]
    return ("\n".join(lines) + "\n").encode("utf-8")


def written(table: dict[str, np.ndarray]) -> bytes:
    pieces: list[bytes] = []
    results._write_csv(table, pieces.append)
    return b"".join(pieces)


def neighbours(values: np.ndarray) -> np.ndarray:
    """Each value, the doubles either side of it, and their negatives."""
    with np.errstate(over="ignore"):  # past the largest double: inf, one of the values anyway
        around = np.concatenate([values, np.nextafter(values, np.inf), np.nextafter(values, -np.inf)])
    return np.concatenate([around, -around])


def hard_values() -> np.ndarray:
    """Where repr's layout changes (1e-5, 1e-4, 1e16, 1e17), powers of two (a rounding interval half
    as wide below them), powers of ten, the fast path's ends (1e-250, 1e250), subnormals, zeros,
    infinities, NaN, whole numbers stored as floats, and decimals of few digits."""
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308]
    special += [0.1, 0.2, 0.30000000000000004, 1 / 3, 2 / 3, 2.5, 1e-250, 1e250, 9999999999999998.0]
    special += [123456789012345678.0, 2.0**53, 2.0**53 + 2, 2.0**63, 2.0**64, 1e22, 1e23]
    powers_of_ten = [float(f"1e{k}") for k in range(-323, 309)]
    powers_of_two = np.ldexp(1.0, np.arange(-1074, 1024)).tolist()
    whole = list(range(-1000, 1001)) + [2**52 + k for k in range(-50, 50)] + [10**15 + 7, 10**16 - 2]
    short = [float(f"{m}e{k}") for m in (1, 5, 25, 125, 999, 1001, 123456789) for k in range(-40, 40)]
    return neighbours(np.array(special + powers_of_ten + powers_of_two + whole + short, dtype=np.float64))


def random_values(size: int) -> np.ndarray:
    """Every finite double as likely as its bits, uniform and log-uniform numbers, small fractions
    (a batch's means) and decimals of up to 17 digits."""
    rng = np.random.default_rng(41)
    bits = rng.integers(0, 2**64, size, dtype=np.uint64).view(np.float64)
    bits = bits[np.isfinite(bits)]
    fractions = rng.integers(0, 100_000, size) / rng.integers(1, 200, size)
    log_uniform = np.exp(rng.uniform(-700, 700, size))
    digits = rng.integers(1, 10**17, size // 10).tolist()
    decimals = [
        float(f"{d}e{e}") for d, e in zip(digits, rng.integers(-40, 40, size // 10).tolist(), strict=True)
    ]
    return np.concatenate([bits, rng.random(size), fractions, log_uniform, decimals])


@pytest.mark.parametrize("values", [hard_values(), random_values(200_000)], ids=["hard", "random"])
def test_float_columns_are_repr_of_each_value(values: np.ndarray) -> None:
    table = {"x": values, "step": np.arange(len(values)), "y": values[::-1].copy()}
    assert written(table) == oracle_csv(table)


def test_the_vectorised_digits_are_repr_s_and_decide_nearly_every_value() -> None:
    """`_shortest_decimal` itself, not repr standing in for it: the values it decides (nearly all)
    have repr's digits and exponent."""
    hard, random = (np.abs(v) for v in (hard_values(), random_values(100_000)))
    hard, random = (v[(v >= 1e-250) & (v < 1e250)] for v in (hard, random))  # its range
    values = np.concatenate([hard, random])
    digits, exponent, decided = results._shortest_decimal(values)
    assert decided[len(hard) :].mean() > 0.995 and decided[: len(hard)].mean() > 0.9
    for value, number, power in zip(
        values[decided].tolist(), digits[decided].tolist(), exponent[decided].tolist(), strict=True
    ):
        _, shown, shown_power = Decimal(repr(value)).normalize().as_tuple()
        assert (int("".join(map(str, shown))), shown_power) == (number, power), value


def test_columns_of_few_values_and_of_whole_numbers_are_repr_of_each_value() -> None:
    """The columns a run writes the quicker ways (`_float_blocks`): few distinct values, each
    formatted once (a batch's fractions; -0.0 is not 0.0, NaN is empty), whole numbers as their
    digits (token counts; up to 1e16, where repr turns to an exponent), long enough to be taken so,
    among columns that are not."""
    rng = np.random.default_rng(5)
    few = np.array([0.0, -0.0, 0.25, 1 / 3, np.nan, np.inf, -np.inf, 1e16, 5e-324, -7.0, 0.1])
    whole = np.concatenate([rng.integers(-(10**6), 10**6, 3000), [10**16 - 2, -(10**16 - 2), 2**53, 10**15]])
    table = {
        "few": rng.choice(few, 3004),
        "whole": whole.astype(np.float64),
        "step": np.arange(3004),
        "random": random_values(1000)[:3004],
        "whole_few": rng.choice([1500.0, 20.0, -3.0, 9999999999999998.0], 3004),
    }
    assert written(table) == oracle_csv(table)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=60))
def test_any_floats_are_repr_of_each_value(values: list[float]) -> None:
    column = np.array(values, dtype=np.float64)
    table = {
        "x": column,
        "n": np.arange(len(values)),
        "text": np.array(["a,b", 'q"', "plain"] * 20)[: len(values)],
    }
    assert written(table) == oracle_csv(table)


@pytest.mark.parametrize("mean_field", [False, True])
def test_results_written_are_the_per_value_writer_s(tmp_path: Path, mean_field: bool) -> None:
    """Runs' results (mean-field ones: NaN in every sampled column), saved to disk in pieces."""
    config = Config(steps=30, prompts=8, batch_prompts=4)
    variants, seeds = article_variants(), [0, 1]
    table = run_experiment(config, variants, seeds, as_columns=True, mean_field=mean_field)
    path = tmp_path / "results.csv"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(results, "CSV_ROWS_PER_WRITE", 17)
        save_results(table, path, metadata(config, variants, seeds, "toyrl run", mean_field=mean_field))
    assert path.read_bytes() == oracle_csv(table)


# Floats pandas 3.0.6's default parser read one bit off (found in results/article.csv).
MISREAD_BEFORE_PANDAS_3_1 = ["0.21706668830561068", "0.003333333333333332", "0.0014285714285714288"]


def test_the_csv_is_read_back_to_the_bits_written(tmp_path: Path) -> None:
    """Every float of a results CSV reads back as Python's float() reads its text, whichever
    pandas parses it (`toyrl.inputs.read_csv`): the values pandas before 3.1 misreads by default,
    and every number column of the committed article's table."""
    import csv

    from toyrl.inputs import read_csv

    path = tmp_path / "values.csv"
    path.write_text("value\n" + "\n".join(MISREAD_BEFORE_PANDAS_3_1) + "\n")
    with path.open("rb") as stream:
        assert read_csv(stream)["value"].tolist() == [float(text) for text in MISREAD_BEFORE_PANDAS_3_1]
    article = Path(__file__).resolve().parent.parent / "results" / "article.csv"
    with article.open("rb") as stream:
        frame = read_csv(stream)
    with article.open(newline="") as stream:
        header, *rows = list(csv.reader(stream))
    numbers = [name for name in header if frame[name].dtype.kind == "f"]
    assert len(numbers) >= 10
    for name in numbers:
        column = header.index(name)
        written = np.array([float(row[column]) if row[column] else np.nan for row in rows])
        assert np.array_equal(frame[name].to_numpy(), written, equal_nan=True), name


@pytest.mark.parametrize(
    ("version", "asked"), [("2.1.4", True), ("3.0.6", True), ("3.1.1", False), ("4.0.0", False)]
)
def test_pandas_before_3_1_is_asked_for_its_exact_float_parser(
    version: str, asked: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pandas before 3.1 parses floats with a fast routine that misses the last bit of some; its
    `round_trip` parser is exact. pandas 3.1 is exact by default and deprecates the option."""
    import io

    import pandas as pd

    from toyrl.inputs import read_csv

    given: dict[str, object] = {}
    monkeypatch.setattr(pd, "__version__", version)
    monkeypatch.setattr(pd, "read_csv", lambda stream, **options: given.update(options) or pd.DataFrame())
    read_csv(io.BytesIO(b"a\n1\n"))
    assert given == ({"float_precision": "round_trip"} if asked else {})
