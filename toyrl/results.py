"""Results on disk: a tidy CSV with a JSON sidecar that says how it was made, and the summary table.

Both files are first written whole to temporary files in the same folder, then renamed into place
(`toyrl.files.write_together`), so a reader never sees a half-written file and a failed write
leaves the old pair. toyrl's numbers are the same bits on every machine (docs/reproducibility.md),
so a regeneration is compared with saved results cell for cell (`compare_results`), and the sidecar
records the arithmetic that made them (`ARITHMETIC`): a file of an older toyrl, whose numbers
depended on the CPU, is refused with one line.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, cast, overload

import numpy as np

from toyrl import kernels
from toyrl.config import MAX_SEED, Config, InvalidInput, shown
from toyrl.files import write_together
from toyrl.inputs import RESULTS, SIDECAR, Unreadable, json_problem, open_regular, read_bytes, read_csv
from toyrl.objective import Variant, from_spec
from toyrl.policy import FloatArray
from toyrl.version import __version__

if TYPE_CHECKING:
    import pandas as pd

    from toyrl.experiment import Columns
    from toyrl.spread import Difference

COLUMN_DOCS = {
    "variant": "loss variant (toyrl.objective.VARIANTS)",
    "seed": "the run's seed; variants with the same seed share initial logits and noise",
    "step": "optimiser steps taken; 0 is the initial policy",
    "accuracy": "exact P(correct) under the policy, prompts weighted uniformly",
    "length_mean": "exact E[L], ramble tokens after truncation",
    "length_correct": "exact E[L | correct]",
    "length_incorrect": "exact E[L | incorrect]",
    "length_right_approach": "exact E[L | right approach]",
    "length_wrong_approach": "exact E[L | wrong approach]",
    "p_right_approach": "exact P(right approach), mean of sigma(psi_j)",
    "stop_prob_right": "sigma(phi_right), per-token stop probability on the right approach",
    "stop_prob_wrong": "sigma(phi_wrong), per-token stop probability on a wrong approach",
    "batch_accuracy": "fraction of correct responses in the batch sampled at this step",
    "batch_length_mean": "mean L of that batch",
    "batch_length_correct": "mean L of its correct responses (NaN if none)",
    "batch_length_incorrect": "mean L of its incorrect responses (NaN if none)",
    "zero_variance_fraction": "fraction of its groups whose rewards are all equal",
    "tokens_sampled": "tokens generated to make that batch, every draw counted (refills, over-draws)",
    "grad_norm": "L2 norm of the loss gradient that batch gives (all P + 2 parameters), first update",
    "clip_fraction": "share of tokens whose PPO clip was active, mean over the step's updates (0 on-policy)",
}

# Columns added since the first results of toyrl 0.3.0: a file written before them reads them as NaN.
LATER_COLUMNS = ("tokens_sampled",)

# Article, "Toy run": final accuracy and tokens of GRPO and length-only (6 seeds). The token figure
# is E[L | wrong approach] (README, "Which length is the article's 1,410 tokens?").
ARTICLE_FINAL = {"grpo": (27.4, 1410), "length_only": (27.3, 1405)}

SUMMARY_COLUMNS = [
    "accuracy",
    "length_mean",
    "length_correct",
    "length_incorrect",
    "length_wrong_approach",
]


def sidecar_path(csv_path: Path) -> Path:
    """The JSON file that describes a results CSV: same name, `.json`."""
    return csv_path.with_suffix(".json")


def metadata(
    config: Config, variants: Sequence[Variant], seeds: Sequence[int], command: str, mean_field: bool = False
) -> dict[str, Any]:
    """Everything needed to remake a results file: version, configuration, variants (each by its
    canonical spec), seeds, whether the runs are mean-field ones, and the plugins whose stages
    the variants use (`toyrl.plugins`: name, version, SHA-256 of the source, path as given), if any."""
    # No plugin is loaded unless toyrl.plugins was imported (which most runs do not need).
    plugins = sys.modules["toyrl.plugins"].plugins_used(variants) if "toyrl.plugins" in sys.modules else []
    return {
        "toyrl_version": __version__,
        "command": command,
        "mean_field": mean_field,
        "config": config.to_dict(),
        "length_norm_used": config.length_norm_value,
        "variants": {
            variant.name: {
                "spec": variant.spec(),
                "summary": variant.summary,
                "stands_for": variant.stands_for,
            }
            for variant in variants
        },
        "seeds": [int(seed) for seed in seeds],
        **({"plugins": [plugin.record() for plugin in plugins]} if plugins else {}),
        "arithmetic": ARITHMETIC,
        "matplotlib": _installed_version("matplotlib"),  # the figures' bytes depend on it
        "columns": COLUMN_DOCS,
    }


def _installed_version(package: str) -> str | None:
    """A package's installed version, read without importing it (None if it is not installed):
    from the name of its `NAME-VERSION.dist-info` folder on sys.path, the first one Python would
    import, as importlib.metadata finds it (which is asked when there is no such folder; importing
    it takes longer than a short run's CSV)."""
    prefix = f"{package}-"
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith(prefix) and name.endswith(".dist-info"):
                return name[len(prefix) : -len(".dist-info")]
        if package in names:  # imported from here, yet without a dist-info: ask importlib.metadata
            break
    import importlib.metadata

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


# The arithmetic results are made with: every number a function of IEEE-754 basic operations and
# the PCG64 stream alone (`toyrl.kernels`, `toyrl.noise`), the same bits on every machine. Recorded
# in every sidecar; a new value whenever a kernel, a transform or an order of operations changes.
ARITHMETIC = "ieee754-basic/1"
IDENTITY_COLUMNS = ("variant", "seed", "step")


@dataclass(frozen=True)
class Comparison:
    """How two results tables differ: cells compared, cells that differ, and the first difference
    (a cell, or the structural difference)."""

    cells: int
    differing: int
    first: str = ""

    @property
    def same(self) -> bool:
        return self.differing == 0 and not self.first

    def describe(self) -> str:
        """One line: equal, or what differs first and how many cells do."""
        if self.same:
            return f"equal: all {self.cells:,} cells"
        differing = f"; {self.differing:,} of {self.cells:,} cells differ" if self.differing else ""
        return f"{self.first}{differing}"


def compare_results(saved: pd.DataFrame, fresh: pd.DataFrame) -> Comparison:
    """Compare a results table with a regeneration of it: the same columns and rows, every cell
    equal to the bit (NaN where NaN). toyrl's numbers are the same on every machine (docs/
    reproducibility.md), so nothing else is allowed. Reports the first differing cell and how many
    differ; never the tables."""
    if list(saved.columns) != list(fresh.columns):
        missing = [c for c in saved.columns if c not in fresh.columns]
        extra = [c for c in fresh.columns if c not in saved.columns]
        return Comparison(0, 0, f"different columns (missing {missing}, extra {extra})")
    if len(saved) != len(fresh):
        return Comparison(0, 0, f"{len(saved):,} rows against {len(fresh):,}")
    keys = [c for c in IDENTITY_COLUMNS if c in saved.columns]
    for key in keys:
        unequal = np.flatnonzero(saved[key].to_numpy() != fresh[key].to_numpy())
        if len(unequal):
            row = int(unequal[0])
            return Comparison(
                0,
                0,
                f"different runs: row {row} is {key} {saved[key].iloc[row]} against {fresh[key].iloc[row]}",
            )
    cells = differing = 0
    first = ""
    for column in [c for c in saved.columns if c not in keys]:
        try:
            a = saved[column].to_numpy(dtype=np.float64)
            b = fresh[column].to_numpy(dtype=np.float64)
        except (TypeError, ValueError):
            return Comparison(0, 0, f"column {column} does not hold numbers")
        unequal = ~((a == b) | (np.isnan(a) & np.isnan(b)))
        cells += len(a)
        differing += int(np.count_nonzero(unequal))
        if unequal.any() and not first:
            row = int(np.flatnonzero(unequal)[0])
            where = ", ".join(f"{key} {saved[key].iloc[row]}" for key in keys) or f"row {row}"
            first = f"{column} at {where}: {float(a[row])!r} against {float(b[row])!r}"
    return Comparison(cells, differing, first)


def _results_on_disk_are(
    path: Path, table: Columns, meta: dict[str, Any], progress: WriteProgress | None
) -> bool:
    """Whether `path` already holds `table`, made by this version with the same settings: its
    sidecar records the SHA-256 of the CSV on disk, and `table` written out has the same one (the
    CSV is neither read nor parsed)."""
    sidecar = sidecar_path(path)
    if not (path.is_file() and sidecar.is_file()):
        return False
    try:
        existing = _read_json(sidecar)
        if not _same_settings(existing, meta) or existing.get("toyrl_version") != meta.get("toyrl_version"):
            return False
        recorded = existing.get("csv_sha256")
        if not recorded or recorded != _file_sha256(path):
            return False
    except InvalidInput:
        return False
    digest = hashlib.sha256()
    _write_csv(table, digest.update, _checking(progress))
    return digest.hexdigest() == recorded


WriteProgress = Callable[[str, int, int], None]
"""progress(stage, rows done, rows in all) while results are saved: stage "comparing with" (the
results already on disk, when they may be kept) or "writing"."""


def _checking(progress: WriteProgress | None) -> Callable[[int, int], None] | None:
    return None if progress is None else lambda done, total: progress("comparing with", done, total)


def _file_sha256(path: Path) -> str:
    with open_regular(path, RESULTS) as stream:
        return _stream_sha256(stream, path)


def _stream_sha256(stream: BinaryIO, path: Path) -> str:
    """The SHA-256 of what is left in `stream` (of the file `path`), read 1 MB at a time."""
    digest = hashlib.sha256()
    try:
        while block := stream.read(1 << 20):
            digest.update(block)
    except OSError as error:
        raise InvalidInput(f"{path}: {error.strerror or error}") from None
    return digest.hexdigest()


@overload
def save_results(
    frame: pd.DataFrame, path: Path, meta: dict[str, Any], progress: WriteProgress | None = None
) -> tuple[pd.DataFrame, bool]: ...


@overload
def save_results(
    frame: Columns, path: Path, meta: dict[str, Any], progress: WriteProgress | None = None
) -> tuple[Columns, bool]: ...


def save_results(
    frame: pd.DataFrame | Columns,
    path: Path,
    meta: dict[str, Any],
    progress: WriteProgress | None = None,
) -> tuple[pd.DataFrame | Columns, bool]:
    """Write `frame` (a DataFrame, or `toyrl.experiment.Columns`) to `path` (CSV, floats written to
    round-trip exactly) and `meta` beside it.

    If `path` already holds these results (the same bytes, made by this version with these
    settings), they are left as they are, untouched. Returns (`frame`, whether they were kept).
    Both files are written together (`write_together`), and the sidecar records the CSV's SHA-256:
    a pair left mismatched by a kill between the two renames is detected on loading.
    The CSV's bytes are those of pandas' `to_csv(index=False, lineterminator="\\n")`.
    """
    table = csv_columns(frame)
    if _results_on_disk_are(path, table, meta, progress):
        return frame, True
    digest = hashlib.sha256()

    def write_csv(stream: BinaryIO) -> None:
        def write(data: bytes) -> None:
            digest.update(data)
            stream.write(data)

        writing = None if progress is None else lambda done, total: progress("writing", done, total)
        _write_csv(table, write, writing)

    def write_sidecar(stream: BinaryIO) -> None:  # after the CSV: its digest is known by then
        stream.write((json.dumps(meta | {"csv_sha256": digest.hexdigest()}, indent=2) + "\n").encode())

    write_together([(path, write_csv), (sidecar_path(path), write_sidecar)])
    return frame, False


CSV_ROWS_PER_WRITE = 20_000  # rows formatted at a time: a large table never becomes one string


def csv_columns(frame: pd.DataFrame | Columns) -> Columns:
    """A table's columns as numpy arrays, in order: a DataFrame's, or `Columns` as they are."""
    if isinstance(frame, dict):
        return frame
    return {str(name): frame[name].to_numpy() for name in frame.columns}


def table_rows(table: Columns) -> int:
    return len(next(iter(table.values()))) if table else 0


def _write_csv(
    table: Columns, write: Callable[[bytes], Any], progress: Callable[[int, int], None] | None = None
) -> None:
    """The table as CSV, CSV_ROWS_PER_WRITE rows at a time, each piece passed to `write`.

    The bytes are pandas' `to_csv(index=False, lineterminator="\\n")`: floats as their shortest
    round-trip repr (which is numpy's `astype(str)`, pandas' way), NaN as an empty field, integers
    as digits, text quoted by the csv module's minimal rule (pandas' writer), joined by commas.
    """
    rows = table_rows(table)
    quoted: dict[str, str] = {}
    if progress is not None:
        progress(0, rows)
    for start in range(0, max(rows, 1), CSV_ROWS_PER_WRITE):
        stop = min(start + CSV_ROWS_PER_WRITE, rows)
        lines = _csv_lines([values[start:stop] for values in table.values()], quoted)
        if start == 0:
            lines = (",".join(_csv_quoted(str(name), quoted) for name in table) + "\n").encode() + lines
        write(lines)
        if progress is not None:
            progress(stop, rows)


def _csv_lines(parts: list[np.ndarray], quoted: dict[str, str]) -> bytes:
    """Rows of CSV (UTF-8) from columns of equal length, joined by commas: each column's fields as
    a block of bytes [rows, width] padded with PAD (a byte UTF-8 never holds), the blocks side by
    side with the commas and newlines, the padding then dropped. On the compiled path,
    `toyrl.results_compiled`'s twin writes each row's fields in turn: the same bytes."""
    compiled = kernels.compiled_module("toyrl.results_compiled")
    if compiled is not None and parts:
        return cast(bytes, compiled.csv_lines(parts, quoted))
    floats = [index for index, values in enumerate(parts) if values.dtype == np.float64]
    formatted = dict(zip(floats, _float_blocks([parts[index] for index in floats]), strict=True))
    blocks = [
        formatted[index] if index in formatted else _csv_field_bytes(values, quoted)
        for index, values in enumerate(parts)
    ]
    rows = len(parts[0]) if parts else 0
    lines = np.empty((rows, sum(block.shape[1] + 1 for block in blocks)), np.uint8)
    column = 0
    for block in blocks:
        lines[:, column : column + block.shape[1]] = block
        column += block.shape[1] + 1
        lines[:, column - 1] = ord(",")
    if blocks:
        lines[:, -1] = ord("\n")
    return lines.tobytes().replace(bytes([PAD]), b"")


PAD = 0xFF  # pads a field's bytes to its block's width


def _float_blocks(columns: list[np.ndarray]) -> list[np.ndarray]:
    """Float64 columns' fields as UTF-8 bytes [rows, width] each, padded with PAD: formatted together
    (`_float_field_bytes`, one pass over all of them); a column whose first values repeat (a
    batch's fractions, counts) has each distinct value (by its bits) formatted once."""
    blocks = []
    for values in columns:
        if len(values) >= 1024 and 2 * len(np.unique(values[:256])) <= 256:
            distinct, inverse = np.unique(values.view(np.int64), return_inverse=True)
            blocks.append(_float_field_bytes(distinct.view(np.float64))[inverse.ravel()])
        else:
            blocks.append(_float_field_bytes(values))
    return blocks


def _csv_field_bytes(values: np.ndarray, quoted: dict[str, str]) -> np.ndarray:
    """A column's fields other than float64 (`_float_blocks`) as UTF-8 bytes [rows, width], each
    padded with PAD: as `_fields` makes them, each distinct field encoded once."""
    if values.dtype.kind in "iubUS":  # each distinct value formatted once (found by numpy)
        distinct, inverse = np.unique(values, return_inverse=True)
        return _padded([field.encode("utf-8") for field in _fields(distinct, quoted)])[inverse.ravel()]
    index: dict[str, int] = {}
    inverse = np.array([index.setdefault(field, len(index)) for field in _fields(values, quoted)], np.intp)
    return _padded([field.encode("utf-8") for field in index])[inverse]


def _fields(values: np.ndarray, quoted: dict[str, str]) -> list[str]:
    """The fields of a column other than float64: floats as `astype(str)` (NaN empty), integers as
    digits, anything else as quoted text (None and NaN empty)."""
    if values.dtype.kind == "f":
        fields = values.astype(str).tolist()
        for row in np.flatnonzero(np.isnan(values)).tolist():
            fields[row] = ""
        return fields
    if values.dtype.kind in "iub":
        return list(map(str, values.tolist()))
    return [
        ""
        if value is None or (isinstance(value, float) and value != value)
        else _csv_quoted(str(value), quoted)
        for value in values.tolist()
    ]


def _padded(fields: list[bytes]) -> np.ndarray:
    """Fields of bytes as a block [len(fields), the longest] padded with PAD."""
    width = max(map(len, fields), default=0)
    block = np.frombuffer(b"".join(field.ljust(width, bytes([PAD])) for field in fields), np.uint8)
    return block.reshape(len(fields), width)


def _float_field_bytes(values: np.ndarray) -> np.ndarray:
    """repr of each float64 as bytes [rows, width] padded with PAD, NaN empty: Python's shortest
    round-trip text, found for all values at once (`_shortest_decimal`; a whole number below 1e16
    is its own digits), laid out as repr lays it out (positional for exponents -4 to 15, else
    d.ddde+XX), each layout for all its values at once. Zero, inf,
    magnitudes beyond 1e+-250 and the rare values `_shortest_decimal` leaves undecided take
    Python's repr itself."""
    magnitude = np.abs(values)
    with np.errstate(invalid="ignore"):
        fast = (magnitude >= 1e-250) & (magnitude < 1e250)
        whole = fast & (magnitude < 1e16) & (magnitude == np.floor(magnitude))
    where = np.flatnonzero(fast & ~whole)
    digits, exponent, decided = _shortest_decimal(magnitude[where])
    whole_rows = np.flatnonzero(whole)
    where = np.concatenate([where[decided], whole_rows])
    digits = np.concatenate([digits[decided], magnitude[whole_rows].astype(np.int64)])
    exponent = np.concatenate([exponent[decided], np.zeros(len(whole_rows), np.int64)])
    count = np.searchsorted(_POWERS_OF_TEN, digits, side="right")  # of digits, 1 to 17
    point = exponent + count  # |x| = 0.d1...dn * 10^point
    # Each (point, count, sign) is one layout, its values taken together (sorted by a key that
    # fits 16 bits, which numpy sorts by radix).
    key = ((point + 256) * 32 + count) * 2 + (values[where] < 0)
    order = np.argsort(key.astype(np.int16), kind="stable")
    bounds = [*np.flatnonzero(np.diff(key[order], prepend=-1)).tolist(), len(order)]
    digit_bytes = _digit_bytes(digits)
    pieces = []
    for first, last in pairwise(bounds):
        members = order[first:last]
        group = int(key[members[0]])
        negative, count_, point_ = group % 2, group // 2 % 32, group // 64 - 256
        pieces.append((where[members], _laid_out(digit_bytes[members, 18 - count_ :], point_, negative)))
    left = ~np.isnan(values)
    left[where] = False
    other = np.flatnonzero(left)
    if len(other):  # each distinct value (by its bits: -0.0 is not 0.0) formatted once
        distinct, inverse = np.unique(values[other].view(np.int64), return_inverse=True)
        texts = [repr(value).encode() for value in distinct.view(np.float64).tolist()]
        pieces.append((other, _padded(texts)[inverse.ravel()]))
    block = np.full((len(values), max((b.shape[1] for _, b in pieces), default=0)), PAD, np.uint8)
    for rows, laid in pieces:
        block[rows, : laid.shape[1]] = laid
    return block


def _laid_out(digits: np.ndarray, point: int, negative: int) -> np.ndarray:
    """repr's text [rows, width] of numbers +-0.d1...dn * 10^point, the digits' bytes [rows, n]."""
    rows, n = digits.shape

    def text(code: bytes) -> np.ndarray:
        return np.broadcast_to(np.frombuffer(code, np.uint8), (rows, len(code)))

    if point <= -4 or point > 16:
        power = point - 1
        parts = [digits[:, :1], *([text(b"."), digits[:, 1:]] if n > 1 else [])]
        parts.append(text(b"e%c%02d" % (b"-" if power < 0 else b"+", abs(power))))
    elif point <= 0:
        parts = [text(b"0." + b"0" * -point), digits]
    elif point >= n:
        parts = [digits, text(b"0" * (point - n) + b".0")]
    else:
        parts = [digits[:, :point], text(b"."), digits[:, point:]]
    return np.concatenate([*([text(b"-")] if negative else []), *parts], axis=1)


def _digit_bytes(numbers: np.ndarray) -> np.ndarray:
    """The 18 decimal digits of each whole number below 10^18 [rows] as ASCII [rows, 18], leading
    zeros included: two halves below 10^9, each a digit and two pieces of four digits (in float64,
    exact: floor(h / 10^k) of a whole h < 10^9 is at least 10^-k from the next integer before
    rounding, its rounding error below 1e-7 10^-k), each piece's digits read from a table."""
    high, low = np.divmod(numbers, 10**9)
    halves = np.stack([high, low], axis=1).astype(np.float64)  # [rows, 2]
    first = np.floor(halves / 1e8)
    rest = halves - first * 1e8
    second = np.floor(rest / 1e4)
    pieces = np.stack([second, rest - second * 1e4], axis=2).astype(np.intp)  # [rows, 2, 2]
    digits = np.empty((len(numbers), 2, 9), np.uint8)
    digits[:, :, 0] = first + ord("0")
    digits[:, :, 1:] = np.take(_FOUR_DIGITS, pieces).view(np.uint8).reshape(-1, 2, 8)
    return digits.reshape(len(numbers), 18)


_POWERS_OF_TEN = np.cumprod([1] + [10] * 18, dtype=np.int64)  # 10^0 .. 10^18, integer products
# The ASCII digits of 0 .. 9999, four bytes each ("0000", "0001", ...) read as one uint32.
_FOUR_DIGITS = (
    (np.arange(10_000)[:, None] // _POWERS_OF_TEN[3::-1] % 10 + ord("0"))
    .astype(np.uint8)
    .view(np.uint32)
    .ravel()
)
_SPLIT = 134217729.0  # 2^27 + 1: Veltkamp's split of a double into two halves of 26 bits
_DECIMAL_EXPONENTS = np.arange(16 - 250 - 1, 16 + 250 + 2)  # those _shortest_decimal scales by


@cache
def _powers_of_ten() -> tuple[np.ndarray, np.ndarray]:
    """10^k for each k of _DECIMAL_EXPONENTS as a double-double: (high, low), high correctly
    rounded and low the rest of 10^k, rounded (exact rational arithmetic; made on first use)."""
    from fractions import Fraction

    exact = [Fraction(f"1e{k}") for k in _DECIMAL_EXPONENTS]  # exact rationals, read from their text
    high = [float(power) for power in exact]
    low = [float(power - Fraction(h)) for power, h in zip(exact, high, strict=True)]
    return np.array(high), np.array(low)


def _scaled(x: np.ndarray, exponent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x 10^exponent as a whole number N [int64] and the rest f in [-0.5, 0.5], to about 1e-14,
    for x 10^exponent below 2^62: Dekker's exact product of x and 10^k's high part, plus x times
    its low part."""
    index = exponent - _DECIMAL_EXPONENTS[0]
    high, low = (table[index] for table in _powers_of_ten())
    product = x * high
    split_x, split_high = _SPLIT * x, _SPLIT * high
    x1, h1 = split_x - (split_x - x), split_high - (split_high - high)
    x2, h2 = x - x1, high - h1
    rest = (((x1 * h1 - product) + x1 * h2 + x2 * h1) + x2 * h2) + x * low
    whole = np.rint(rest)
    return product.astype(np.int64) + whole.astype(np.int64), rest - whole


_MARGIN = 1e-9  # a comparison this close (in units of the 17th digit) is left undecided


def _shortest_decimal(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Python's repr of each x > 0 in [1e-250, 1e250) [n] as (digits, exponent, decided): x's repr
    is digits * 10^exponent, unless `decided` is False (a comparison within _MARGIN of its
    boundary: a decimal halfway between two, or at the end of x's interval, as for large whole
    numbers and powers of two; under 0.1% of random doubles, none of 2.7 M numbers of toyrl
    runs: then repr decides).

    repr gives the fewest significant digits that read back as x (David Gay's shortest mode), of
    those the nearest to x. Here: S = x 10^(16 - e) in [10^16, 10^17) (e = floor(log10 x)) as
    N + f (`_scaled`, error below 1e-14); x reads back from any number within half an ulp of it,
    h in S's units (a quarter below a power of two). 17 digits always suffice (h > 0.55): N, the
    integer nearest S. Then for j = 1, 2, ...: the multiples of 10^j either side of S, q 10^j and
    (q + 1) 10^j, the nearer of those within the interval; the last j that has one gives the digits.
    """
    mantissa, binary = np.frexp(x)  # x = mantissa 2^binary, mantissa in [0.5, 1)
    power = ((binary - 1) * 78913) >> 18  # floor(log10(2^(binary - 1))): e or e - 1
    n, f = _scaled(x, 16 - power)
    over = n >= _POWERS_OF_TEN[17]
    power[over] += 1
    n[over], f[over] = _scaled(x[over], 16 - power[over])
    half_ulp = np.ldexp(_powers_of_ten()[0][16 - power - _DECIMAL_EXPONENTS[0]], binary - 54)
    below_half_ulp = np.where(mantissa == 0.5, half_ulp / 2, half_ulp)
    tie = np.abs(np.abs(f) - 0.5) < _MARGIN  # N and N +- 1 as near: undecided if 17 digits it is
    decided = np.ones(len(x), bool)
    digits, dropped = n.copy(), np.zeros(len(x), np.int64)
    alive = np.arange(len(x))  # those whose last j had a multiple within the interval
    for j in range(1, 18):
        step = _POWERS_OF_TEN[j]
        q, remainder = np.divmod(n[alive], step)
        down = remainder + f[alive]  # S - q 10^j: exact where it is compared (remainder < 2^53)
        up = (step - remainder) - f[alive]  # (q + 1) 10^j - S
        lower, upper = below_half_ulp[alive], half_ulp[alive]
        fits_down, fits_up = down <= lower, up <= upper
        both = fits_down & fits_up
        close = (np.abs(down - lower) < _MARGIN) | (np.abs(up - upper) < _MARGIN)
        decided[alive[close | (both & (np.abs(down - up) < _MARGIN))]] = False
        fits = fits_down | fits_up
        alive, q = alive[fits], q[fits]
        digits[alive] = q + (fits_up & ~(both & (down < up)))[fits]
        dropped[alive] = j
        if not len(alive):
            break
    return digits, dropped + power - 16, decided & ~(tie & (dropped == 0))


def _csv_quoted(text: str, quoted: dict[str, str]) -> str:
    """A text field as the csv module writes it among others (quoted only where it must be)."""
    if text not in quoted:
        line = io.StringIO()
        csv.writer(line, lineterminator="\n").writerow([text, ""])
        quoted[text] = line.getvalue()[: -len(",\n")]
    return quoted[text]


def _same_settings(existing: Any, meta: dict[str, Any]) -> bool:
    """Whether a sidecar read from disk records the settings of `meta` (`changed_setting`)."""
    return not changed_setting(existing, meta)


def changed_setting(existing: Any, meta: dict[str, Any], every: bool = True) -> str:
    """The first setting a sidecar read from disk records otherwise than `meta`, as "steps: 400 in
    the file, 200 asked" ("" if none): a field of the configuration (one the sidecar lacks counts at
    its default), the kind of run (mean-field or not), the spec of a variant both name, the source
    (SHA-256) of a plugin both use; with `every`, also which variants, seeds and plugins. Without
    `every`, what differs changes the runs the file holds, not only which runs it holds."""
    if not isinstance(existing, dict):
        return "its sidecar: not a toyrl sidecar"
    try:
        saved = Config.from_dict(existing["config"])
    except (InvalidInput, KeyError, TypeError):
        return "configuration: not readable in the file"
    asked = Config.from_dict(meta["config"])
    for field in dataclasses.fields(Config):
        before, now = getattr(saved, field.name), getattr(asked, field.name)
        if before != now:
            return _differs(field.name, before, now)
    mean_field = existing.get("mean_field", existing.get("exact"))  # toyrl 0.2 called it "exact"
    if mean_field != meta.get("mean_field"):
        return _differs("mean-field runs", _yes(mean_field), _yes(meta.get("mean_field")))
    specs, asked_specs = _recorded_specs(existing.get("variants")), _recorded_specs(meta.get("variants"))
    if specs is None or asked_specs is None:
        return "variants: not readable in the file"
    for name in [name for name in asked_specs if name in specs]:
        if specs[name] != asked_specs[name]:
            return _differs(f"variant {name}", _spec_text(specs[name]), _spec_text(asked_specs[name]))
    plugins = _plugin_sources(existing.get("plugins", []))
    asked_plugins = _plugin_sources(meta.get("plugins", []))
    for name in [name for name in asked_plugins if name in plugins]:
        if plugins[name] != asked_plugins[name]:
            return _differs(f"plugin {name}'s source sha256", plugins[name][:12], asked_plugins[name][:12])
    if not every:
        return ""
    if specs.keys() != asked_specs.keys():
        return _differs("variants", ", ".join(specs), ", ".join(asked_specs))
    if existing.get("seeds") != meta.get("seeds"):
        return _differs("seeds", _seeds_text(existing.get("seeds")), _seeds_text(meta.get("seeds")))
    if existing.get("plugins", []) != meta.get("plugins", []):
        return _differs("plugins", ", ".join(plugins) or "none", ", ".join(asked_plugins) or "none")
    return ""


def _differs(setting: str, before: Any, now: Any) -> str:
    return f"{setting}: {before} in the file, {now} asked"


def _yes(value: Any) -> str:
    return "yes" if value else "no"


def _spec_text(spec: dict[str, Any]) -> str:
    return ",".join(f"{key}={value}" for key, value in spec.items())


def _seeds_text(seeds: Any) -> str:
    """Seeds as people read them: 0..5 when consecutive, else listed."""
    if not isinstance(seeds, list) or not seeds:
        return shown(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}..{seeds[-1]}"
    return ", ".join(map(str, seeds))


def _plugin_sources(plugins: Any) -> dict[str, str]:
    """A sidecar's plugins as name: SHA-256 of the source."""
    if not isinstance(plugins, list):
        return {}
    return {str(p.get("name")): str(p.get("sha256")) for p in plugins if isinstance(p, dict)}


def _recorded_specs(variants: Any) -> dict[str, Any] | None:
    """Each variant's canonical spec as a sidecar records it, by name (toyrl 0.2 recorded its
    Variant's fields, read here into the same spec); None if an entry cannot be read."""
    if not isinstance(variants, dict):
        return None
    specs: dict[str, Any] = {}
    for name, entry in variants.items():
        if not isinstance(entry, dict):
            return None
        if "spec" in entry:
            specs[name] = json.loads(json.dumps(entry["spec"]))
            continue
        old = {key: entry[key] for key in _OLD_VARIANT_FIELDS if entry.get(key) is not None}
        if "eps" in old:  # 0.2's name of std_eps, which it also kept where no std is taken
            eps = old.pop("eps")
            if old.get("advantage") not in ("none", "rloo"):
                old["std_eps"] = eps
        try:
            specs[name] = from_spec(str(name), old).spec()
        except (InvalidInput, TypeError, ValueError):
            return None
    return specs


# A toyrl 0.2 sidecar's variant fields that are spec keys (the others are at their defaults there).
_OLD_VARIANT_FIELDS = (
    "advantage",
    "aggregation",
    "num_iterations",
    "epsilon",
    "epsilon_high",
    "beta",
    "mask_truncated",
    "eps",
)


def _read_json(path: Path) -> Any:
    """A sidecar's content, or InvalidInput naming the file: not a regular file or too large
    (`Unreadable`), or not readable JSON (not UTF-8, malformed, too deeply nested, an integer of
    more digits than Python converts)."""
    text = read_bytes(path, SIDECAR)
    try:
        return json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise InvalidInput(f"{path}: not readable JSON ({json_problem(error)})") from None


def check_overwrite(path: Path, meta: dict[str, Any], force: bool, option: str = "--out") -> None:
    """Refuse to replace results made with another configuration, variants or seeds, unless `force`.

    Results of the same settings are simply replaced (the run is deterministic, so they are the same
    numbers, or the remedy for an interrupted write).
    """
    sidecar = sidecar_path(path)
    if force or not (path.exists() or sidecar.exists()):
        return
    try:
        existing = _read_json(sidecar) if os.path.lexists(sidecar) else {}
    except Unreadable as error:  # a folder, FIFO or device, or too large: say so
        raise InvalidInput(f"{option}: {error}; choose another path, or add --force") from None
    except InvalidInput:
        existing = {}
    changed = changed_setting(existing, meta)
    if changed:
        raise InvalidInput(
            f"{option}: {path} holds results made with other settings ({changed}); choose another path, "
            "or add --force"
        )


DEFAULT_RESULTS = Path("toyrl-run.csv")  # the article's four at the defaults
NAME_LENGTH = 80  # characters of a default results name before ".csv"; longer ones end in a digest


def default_results_path(config: Config, variants: Sequence[Variant], mean_field: bool = False) -> Path:
    """Where `toyrl run` writes when --out is not given: DEFAULT_RESULTS for the article's four at
    the default configuration; else `toyrl-run_` then the variants' names joined by `+` (`all` for
    the article's four; a name that is a spec as `spec-` and 8 hex digits of its SHA-256), then
    `,key=value` for each configuration field not at its default and `,mean_field` for mean-field
    runs: toyrl-run_dr_grpo.csv, toyrl-run_grpo+mine,steps=200.csv. No name has `+` or `,`, nor a
    field's value, so different requests are different files; one longer than NAME_LENGTH is cut
    and ends in `~` and 12 hex digits of the SHA-256 of the whole. The seeds are not in it: more
    seeds grow the same file (`saved_runs`)."""
    from toyrl.variants import ARTICLE, LABEL_CHARACTERS

    names = [variant.name for variant in variants]
    default = Config().to_dict()
    settings = [
        f"{key}={json.dumps(value)}" for key, value in config.to_dict().items() if value != default[key]
    ]
    settings += ["mean_field"] if mean_field else []
    if names == list(ARTICLE) and not settings:
        return DEFAULT_RESULTS

    def short(name: str) -> str:
        if set(name) <= LABEL_CHARACTERS | {"@"}:
            return name
        return f"spec-{hashlib.sha256(name.encode()).hexdigest()[:8]}"

    stem = ",".join(["all" if names == list(ARTICLE) else "+".join(map(short, names)), *settings])
    if len(stem) > NAME_LENGTH:
        stem = f"{stem[: NAME_LENGTH - 13]}~{hashlib.sha256(stem.encode()).hexdigest()[:12]}"
    return Path(f"toyrl-run_{stem}.csv")


@dataclass(frozen=True)
class SavedRuns:
    """The runs a results file of the same settings holds (`saved_runs`), which `toyrl run` keeps
    as they are while it adds the runs asked that it lacks. `remake` says why its runs cannot be
    kept and are made again (another toyrl made them, a write was interrupted), "" if they are."""

    meta: dict[str, Any]
    variants: list[str]
    seeds: list[int]
    rows: dict[tuple[str, int], list[bytes]]  # each run's CSV lines, as the file has them
    remake: str = ""


def saved_runs(path: Path, meta: dict[str, Any], option: str = "--out") -> SavedRuns | None:
    """The runs already at `path`, None if there are none. InvalidInput naming the setting unless
    they were made with the settings of `meta` that decide a run's numbers (`changed_setting`
    without `every`: another seed or variant only adds runs)."""
    sidecar = sidecar_path(path)
    if not (path.exists() or sidecar.exists()):
        return None
    refused = f"{option}: {path} holds results made with other settings"
    try:
        existing = _read_json(sidecar) if os.path.lexists(sidecar) else None
    except Unreadable as error:  # a folder, FIFO or device, or too large: say so
        raise InvalidInput(f"{option}: {error}; choose another path, or add --force") from None
    except InvalidInput:
        existing = None
    if existing is None:
        raise InvalidInput(f"{refused} (no readable {sidecar.name}); choose another path, or add --force")
    changed = changed_setting(existing, meta, every=False)
    if changed:
        raise InvalidInput(f"{refused} ({changed}); choose another path, or add --force")
    variants = list(existing["variants"])
    seeds = existing.get("seeds")
    if not (isinstance(seeds, list) and all(isinstance(seed, int) for seed in seeds)):
        raise InvalidInput(
            f"{refused} (seeds: not readable in the file); choose another path, or add --force"
        )
    if existing.get("toyrl_version") != __version__ or existing.get("arithmetic") != ARITHMETIC:
        made = f"toyrl {existing.get('toyrl_version', '(unknown)')} made them"
        return SavedRuns(existing, variants, seeds, {}, made)
    try:
        data = read_bytes(path, RESULTS)
    except InvalidInput:
        return SavedRuns(existing, variants, seeds, {}, f"{path.name} cannot be read")
    if hashlib.sha256(data).hexdigest() != existing.get("csv_sha256"):
        return SavedRuns(existing, variants, seeds, {}, f"{path.name} does not match {sidecar.name}")
    lines = data.split(b"\n")
    rows: dict[tuple[str, int], list[bytes]] = {}
    for line in lines[1:-1]:
        variant, seed, *_ = next(csv.reader([line.decode()]))
        rows.setdefault((variant, int(seed)), []).append(line + b"\n")
    steps = Config.from_dict(existing["config"]).steps
    whole = lines[0].decode() == ",".join(COLUMN_DOCS) and lines[-1] == b""
    whole &= set(rows) == {(variant, seed) for variant in variants for seed in seeds}
    if not whole or any(len(run) != steps + 1 for run in rows.values()):
        return SavedRuns(
            existing, variants, seeds, {}, f"{path.name} does not hold the runs its sidecar lists"
        )
    return SavedRuns(existing, variants, seeds, rows)


def write_grown(
    path: Path,
    saved: SavedRuns,
    meta: dict[str, Any],
    made: Sequence[Columns],
    progress: WriteProgress | None = None,
) -> Columns:
    """Write `path` and its sidecar `meta`: every run of meta's variants x seeds (variant-major,
    as `toyrl.experiment.run_experiment` orders them), each run's rows as the file already has
    them (`saved`) or as the tables `made` give them, which holds the rest. The bytes are those
    `save_results` would write for a table of all those runs (the same runs are the same numbers,
    to the bit). Returns the last step of every run, as columns (for the summary tables)."""
    rows = dict(saved.rows)
    for table in made:
        lines: list[bytes] = []
        _write_csv(table, lines.append)
        text = b"".join(lines).split(b"\n")[1:-1]
        for variant, seed, line in zip(table["variant"].tolist(), table["seed"].tolist(), text, strict=True):
            rows.setdefault((str(variant), int(seed)), []).append(line + b"\n")
    runs = [(variant, seed) for variant in meta["variants"] for seed in meta["seeds"]]
    data = (",".join(COLUMN_DOCS) + "\n").encode() + b"".join(line for run in runs for line in rows[run])
    total = sum(len(rows[run]) for run in runs)
    if progress is not None:
        progress("writing", 0, total)
    write_together([(path, data), (sidecar_path(path), _sidecar_bytes(meta, data))])
    if progress is not None:
        progress("writing", total, total)
    return last_steps([rows[run][-1] for run in runs])


def _sidecar_bytes(meta: dict[str, Any], data: bytes) -> bytes:
    return (json.dumps(meta | {"csv_sha256": hashlib.sha256(data).hexdigest()}, indent=2) + "\n").encode()


def last_steps(lines: Sequence[bytes]) -> Columns:
    """Rows of a results CSV (one line each) as the columns the summary tables read: variant, seed,
    step and SUMMARY_COLUMNS (the numbers read back exactly: the CSV holds their shortest repr)."""
    fields = [next(csv.reader([line.decode()])) for line in lines]
    columns = list(COLUMN_DOCS)
    table: Columns = {"variant": np.array([row[0] for row in fields], dtype=object)}
    table["seed"] = np.array([int(row[1]) for row in fields], dtype=np.int64)
    table["step"] = np.array([int(row[2]) for row in fields], dtype=np.int64)
    for column in SUMMARY_COLUMNS:
        index = columns.index(column)
        table[column] = np.array([float(row[index] or "nan") for row in fields], dtype=np.float64)
    return table


def load_results(path: Path) -> tuple[pd.DataFrame, dict[str, Any] | None]:
    """A results CSV of `toyrl run` and its sidecar (None if absent), or InvalidInput naming the file.

    Checked before use: the sidecar's digest (a mismatched pair is the first thing to name), the
    columns, that every run has each of its steps once, and that the sidecar's configuration is the
    one that made the CSV (`check_table`). With a sidecar, the frame carries it as
    `frame.attrs["toyrl"]` (the dict of `metadata`), where the plot functions read the cap and
    min_length.
    """
    if not os.path.exists(path):
        raise InvalidInput(f"{path}: no such results file")
    with open_regular(path, RESULTS) as stream:
        meta = _load_sidecar(path, stream)
        stream.seek(0)
        frame = _read_csv(path, stream)
    for column in LATER_COLUMNS:
        if column not in frame.columns and set(COLUMN_DOCS) - set(LATER_COLUMNS) <= set(frame.columns):
            before = list(COLUMN_DOCS)[list(COLUMN_DOCS).index(column) - 1]
            frame.insert(list(frame.columns).index(before) + 1, column, np.nan)  # not measured then
    check_table(frame, meta, str(path))
    version = meta.get("toyrl_version") if meta else None
    if version and version != __version__:
        warnings.warn(f"{path} was made by toyrl {version}; this is toyrl {__version__}", stacklevel=2)
    if meta is not None:
        frame.attrs["toyrl"] = meta
    return frame, meta


def check_saved(frame: pd.DataFrame, meta: dict[str, Any]) -> None:
    """InvalidInput naming the problem unless `load_results` would read `frame` and `meta` back once
    written (`toyrl.save` asks before it writes anything): the sidecar's checks but its digest, then
    `check_table` (on a copy: the frame is left as it is)."""
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidInput(f"the frame's configuration (frame.attrs['toyrl']) is not JSON: {error}") from None
    if meta.get("arithmetic") != ARITHMETIC:
        raise InvalidInput(
            "the frame's configuration (frame.attrs['toyrl']) is not one of this toyrl's (its arithmetic "
            "is not recorded as toyrl.run records it); make the frame with toyrl.run or toyrl.load"
        )
    check_table(frame.copy(deep=False), meta, "the frame")


def check_table(frame: pd.DataFrame, meta: dict[str, Any] | None, where: str) -> None:
    """InvalidInput, naming `where`, unless `frame` holds every column of COLUMN_DOCS, numbers where
    numbers belong, and whole runs (`_check_runs`), and unless the configuration in `meta` (if it has
    one) is a valid one that made the frame's first run (`_check_configuration`). Makes the variant
    column text and seed and step int64."""
    import pandas as pd

    missing = [column for column in COLUMN_DOCS if column not in frame.columns]
    if missing:
        raise InvalidInput(f"{where}: missing columns {', '.join(missing)}; is it a toyrl results CSV?")
    if frame.empty:
        raise InvalidInput(f"{where}: has no rows")
    numeric = [c for c in COLUMN_DOCS if c != "variant" and not pd.api.types.is_numeric_dtype(frame[c])]
    if numeric:
        raise InvalidInput(f"{where}: columns {', '.join(numeric)} must hold numbers")
    frame["variant"] = frame["variant"].astype(str)
    _check_runs(frame, where)
    if meta is not None and "config" in meta:
        _check_configuration(frame, meta["config"], where)


def _check_configuration(frame: pd.DataFrame, recorded: Any, where: str) -> None:
    """InvalidInput unless `recorded` is a valid configuration whose initial policy, at the seed of
    the frame's first run, has that run's step-0 row: a sidecar edited by hand (a cap, a min_length,
    the initial stop probabilities) would otherwise mark the figures wrongly. The row is the exact
    expectations of `toyrl.policy.exact_metrics`, the same bits on every machine; a tolerance of
    1e-12 of each value leaves room for nothing else (a cap one token off moves E[L] by about its
    truncated share, 1e-4 of it)."""
    from toyrl.policy import exact_metrics
    from toyrl.train import EXACT_COLUMNS, initial_theta, run_streams

    try:
        if not isinstance(recorded, dict):
            raise InvalidInput(f"config must be a JSON object (got {shown(recorded)})")
        config = Config.from_dict(recorded)
    except (InvalidInput, TypeError) as error:
        raise InvalidInput(f"{where}: the sidecar's configuration is not a valid one ({error})") from None
    first = frame.iloc[0]
    seed = int(first["seed"])
    start = frame[(frame["variant"] == first["variant"]) & (frame["seed"] == seed) & (frame["step"] == 0)]
    theta = initial_theta(config, run_streams(seed)[0])
    expected = exact_metrics(theta[None], config.cap, config.min_length)
    for column in EXACT_COLUMNS:  # step 0's, which the configuration alone decides (with the seed)
        saved, made = float(start[column].iloc[0]), float(expected[column][0])
        if not abs(saved - made) <= 1e-12 * abs(made):
            raise InvalidInput(
                f"{where}: the sidecar's configuration did not make these results ({column} at step 0 of "
                f"variant {first['variant']}, seed {seed} is {saved!r}; that configuration starts at "
                f"{made!r}); was the sidecar edited? Run the command that made them again"
            )


def _load_sidecar(path: Path, stream: BinaryIO) -> dict[str, Any] | None:
    """The sidecar of the results CSV `path` (open as `stream`), None if there is none; refused if
    it is not a JSON object, does not match the CSV's bytes, or comes from a toyrl whose numbers
    depend on the CPU."""
    sidecar = sidecar_path(path)
    if not os.path.lexists(sidecar):
        return None
    meta = _read_json(sidecar)
    if not isinstance(meta, dict):
        raise InvalidInput(f"{sidecar}: not a toyrl sidecar (a JSON object was expected)")
    recorded = meta.get("csv_sha256")
    if recorded and recorded != _stream_sha256(stream, path):
        raise InvalidInput(
            f"{path}: does not match {sidecar.name} (a write was interrupted?); "
            "run the command that made it again"
        )
    if meta.get("arithmetic") != ARITHMETIC:  # refused before its CSV is read
        raise InvalidInput(
            f"{path}: made by toyrl {meta.get('toyrl_version', '(unknown)')}, whose numbers depend on "
            f"the CPU's exp and log; regenerate it with this toyrl ({meta.get('command') or 'toyrl run'})"
        )
    return meta


def _read_csv(path: Path, stream: BinaryIO) -> pd.DataFrame:
    import pandas as pd

    try:
        return read_csv(stream)
    except (
        OSError,
        UnicodeDecodeError,
        OverflowError,
        pd.errors.ParserError,
        pd.errors.EmptyDataError,
    ) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise InvalidInput(f"{path}: not a readable CSV ({reason})") from None


def _check_runs(frame: pd.DataFrame, where: str) -> None:
    """InvalidInput unless every run (variant, seed) has whole steps 0, 1, ..., its last, once each,
    seeds and steps in 0..MAX_SEED (the int64 column they become: 2**63 would wrap to -2**63)."""
    for column in ("seed", "step"):
        values = frame[column].to_numpy()
        if values.dtype.kind in "iu":  # compared as integers: as floats, 2**63 - 1 and 2**63 are one
            bad = (values < 0) | (values > MAX_SEED)
        else:
            values = values.astype(np.float64)
            bad = ~np.isfinite(values) | (values < 0) | (values != np.floor(values)) | (values >= 2.0**63)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InvalidInput(
                f"{where}: column {column} must hold whole numbers in 0..{MAX_SEED:,} "
                f"(row {row + 2} has {shown(values[row])})"
            )
    frame["seed"] = frame["seed"].astype(np.int64)
    frame["step"] = frame["step"].astype(np.int64)
    keys = ["variant", "seed", "step"]
    repeated = frame.duplicated(keys)
    if repeated.any():
        row = int(np.flatnonzero(repeated.to_numpy())[0])
        variant, seed, step = (frame[key].iloc[row] for key in keys)
        raise InvalidInput(f"{where}: variant {variant}, seed {seed}, step {step} appears more than once")
    runs = frame.groupby(["variant", "seed"], sort=False)["step"].agg(["min", "max", "size"]).reset_index()
    gaps = runs[(runs["min"] != 0) | (runs["size"] != runs["max"] + 1)]
    if len(gaps):
        first = gaps.iloc[0]
        raise InvalidInput(
            f"{where}: variant {first['variant']}, seed {first['seed']} has steps "
            f"{first['min']}..{first['max']} with {first['size']} rows; each run needs every step from 0 "
            "to its last"
        )


def final_runs(frame: pd.DataFrame | Columns) -> dict[str, tuple[np.ndarray, FloatArray]]:
    """Per variant (in the table's order) at the last step: its seeds [seeds] and the values of
    SUMMARY_COLUMNS at each [seeds, columns]."""
    table = csv_columns(frame)
    last = table["step"] == table["step"].max()
    variants = np.asarray(table["variant"])[last].astype(str)
    seeds = np.asarray(table["seed"])[last]
    values = np.stack([np.asarray(table[column], dtype=np.float64)[last] for column in SUMMARY_COLUMNS], 1)
    names = dict.fromkeys(variants.tolist())
    return {name: (seeds[variants == name], values[variants == name]) for name in names}


SUMMARY_HEADER = [
    "variant",
    "seeds",
    "accuracy %",
    "E[L]",
    "E[L | correct]",
    "E[L | incorrect]",
    "E[L | wrong approach]",
]
# Accuracy in percent with 1 decimal, lengths in whole tokens.
_SCALES = [(100.0, 1)] + [(1.0, 0)] * (len(SUMMARY_COLUMNS) - 1)


def seed_counts(frame: pd.DataFrame | Columns) -> list[int]:
    """The number of seeds of each variant at the last step, in the table's order."""
    return [len(seeds) for seeds, _ in final_runs(frame).values()]


def summary_rows(frame: pd.DataFrame | Columns) -> list[list[str]]:
    """Cells of the summary, one row a variant under its display name (`toyrl.variants.display_name`):
    accuracy in percent (1 decimal), lengths in tokens, mean ± sd over seeds (`toyrl.spread`)."""
    from toyrl.spread import format_mean_sd
    from toyrl.variants import display_name

    rows = []
    for name, (seeds, values) in final_runs(frame).items():
        cells = [display_name(name), str(len(seeds))]
        cells += [format_mean_sd(values[:, j], scale, digits) for j, (scale, digits) in enumerate(_SCALES)]
        rows.append(cells)
    return rows


def command_names(frame: pd.DataFrame | Columns) -> str:
    """The names to type in a command for the variants a table shows under another name:
    "names in commands: GRPO = grpo, Dr. GRPO = dr_grpo" ("" if every name is its own)."""
    from toyrl.variants import display_name

    pairs = [f"{display_name(name)} = {name}" for name in final_runs(frame) if display_name(name) != name]
    return f"names in commands: {', '.join(pairs)}" if pairs else ""


# The paired differences reported: (column, header, scale, digits, unit in words).
DIFFERENCE_COLUMNS = [
    ("accuracy", "accuracy, points", 100.0, 1, "points"),
    ("length_incorrect", "E[L | incorrect]", 1.0, 0, "tokens"),
    ("length_correct", "E[L | correct]", 1.0, 0, "tokens"),
]


def difference_reference(names: Sequence[str]) -> str:
    """The variant differences are taken from: Dr. GRPO when it is in the table (the article's fix,
    so each difference says how far a variant is from it), else the first variant."""
    return "dr_grpo" if "dr_grpo" in names else names[0]


def paired_differences(frame: pd.DataFrame | Columns) -> tuple[str, dict[str, list[Difference]]]:
    """The reference (`difference_reference`) and, for every other variant, its paired difference
    from it at the last step for each of DIFFERENCE_COLUMNS (`toyrl.spread.paired_difference`)."""
    from toyrl.spread import paired_difference

    runs = final_runs(frame)
    reference = difference_reference(list(runs))
    reference_seeds, reference_values = runs[reference]
    differences = {}
    for name, (seeds, values) in runs.items():
        if name != reference:
            differences[name] = [
                paired_difference(
                    values[:, SUMMARY_COLUMNS.index(column)],
                    reference_values[:, SUMMARY_COLUMNS.index(column)],
                    seeds,
                    reference_seeds,
                )
                for column, *_ in DIFFERENCE_COLUMNS
            ]
    return reference, differences


def differences_heading(frame: pd.DataFrame | Columns) -> str:
    """The line above the differences' table, or, with one variant or fewer than 3 seeds, the line
    that says why there is none ("" for one variant)."""
    from toyrl.spread import MIN_SEEDS
    from toyrl.variants import display_name

    runs = final_runs(frame)
    if len(runs) < 2:
        return ""
    reference = display_name(difference_reference(list(runs)))
    seeds = min(len(seeds) for seeds, _ in runs.values())
    if seeds < MIN_SEEDS:
        return (
            f"Paired differences from {reference}: too few seeds for an interval ({seeds}; at least "
            f"{MIN_SEEDS})"
        )
    why = "the article's fix" if reference == display_name("dr_grpo") else "the first variant"
    return (
        f"Paired differences from {reference} ({why}; a seed's variants share its noise), the 95% CI "
        f"in parentheses (percentile bootstrap over {seeds} seeds):"
    )


DIFFERENCE_HEADER = ["variant", *(title for _, title, *_ in DIFFERENCE_COLUMNS)]


def difference_rows(frame: pd.DataFrame | Columns) -> dict[str, list[str]]:
    """The rows of the differences' table under DIFFERENCE_HEADER, by variant name: its display
    name, then each of DIFFERENCE_COLUMNS as '+904 (+849 to +943)'; none when `differences_heading`
    says there is none."""
    from toyrl.spread import MIN_SEEDS
    from toyrl.variants import display_name

    counts = seed_counts(frame)
    if len(counts) < 2 or min(counts) < MIN_SEEDS:
        return {}
    _, differences = paired_differences(frame)
    return {
        name: [display_name(name)]
        + [d.cell(scale, digits) for d, (_, _, scale, digits, _) in zip(row, DIFFERENCE_COLUMNS, strict=True)]
        for name, row in differences.items()
    }


def _markdown_table(header: list[str], rows: dict[str, list[str]], extra: str | None = None) -> str:
    """A markdown table: `header`'s first cell, a column "name" (the name commands take), the rest;
    one row per entry of `rows` (name: cells), a last left-aligned column `extra` if given."""
    title = [header[0], "name", *(cell.replace("|", "\\|") for cell in header[1:])]
    title += [extra] if extra else []
    rule = ["---", "---"] + ["---:"] * (len(header) - 1) + (["---"] if extra else [])
    body = [[cells[0], f"`{name}`", *cells[1:]] for name, cells in rows.items()]
    return "".join("| " + " | ".join(cells) + " |\n" for cells in [title, rule, *body])


def final_table_markdown(frame: pd.DataFrame, article: bool) -> str:
    """The last step's exact numbers per variant as markdown: a table of mean ± sd over seeds, each
    variant under its display name with the name commands take, then the paired differences from
    the reference variant with their 95% intervals (`differences_heading`).

    With `article`, a last column gives the article's figures for the variants it reports.
    """
    from toyrl.spread import over_seeds

    rows = dict(zip(final_runs(frame), summary_rows(frame), strict=True))
    if article:
        for name, row in rows.items():
            figures = ARTICLE_FINAL.get(name)
            row.append(f"{figures[0]}, {figures[1]:,}" if figures else "–")
    steps = int(np.max(csv_columns(frame)["step"]))
    text = f"Final step ({steps}), exact expectations, {over_seeds(seed_counts(frame))}:\n\n"
    text += _markdown_table(SUMMARY_HEADER, rows, "article: accuracy %, tokens" if article else None)
    heading = differences_heading(frame)
    differences = difference_rows(frame)
    if heading:
        text += f"\n{heading}\n"
    if differences:
        text += "\n" + _markdown_table(DIFFERENCE_HEADER, differences)
    return text
