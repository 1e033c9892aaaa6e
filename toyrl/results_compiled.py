"""The results CSV's floats formatted by numba: `toyrl.results._float_field_bytes`, a value at a time.

`toyrl.results._float_field_bytes` finds Python's repr of every float64 of a column with numpy passes
over the whole column (the shortest digits by `_shortest_decimal`, then each layout of repr for all
its values at once). Here each value is taken through the same steps in turn: a whole number below
1e16 is its own digits; otherwise S = x 10^(16 - e) as N + f by the same IEEE-754 operations in the
same order as `toyrl.results._scaled` (Dekker's product with the same table of powers of ten), then
the same comparisons for j = 1, 2, ... with the same margin, and the digits laid out as repr lays
them out. A value `_shortest_decimal` leaves undecided, zero, inf and magnitudes beyond 1e+-250 are
left to Python's repr, as there. Compiled with fastmath off (`toyrl.kernels_compiled.OPTIONS`): no
fused multiply-add, no reassociation, so every intermediate is numpy's double
(tests/test_csv_format.py compares the bytes with repr's and with the numpy writer's, and reads the
assembly). Not imported by ``import toyrl``: `toyrl.results` imports it through
`toyrl.kernels.compiled_module` when the compiled path is on.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

from toyrl.kernels_compiled import OPTIONS
from toyrl.results import _DECIMAL_EXPONENTS, _MARGIN, _POWERS_OF_TEN, _SPLIT, PAD, _powers_of_ten

jit = numba.njit(**OPTIONS)


WIDTH = 32  # bytes a field may take: repr of a double takes at most 24
_FIRST_EXPONENT = int(_DECIMAL_EXPONENTS[0])


@jit
def _scaled(x: float, exponent: int, high_table: Any, low_table: Any) -> tuple[Any, float]:
    """`toyrl.results._scaled` of one value: x 10^exponent as N + f."""
    high = high_table[exponent - _FIRST_EXPONENT]
    low = low_table[exponent - _FIRST_EXPONENT]
    product = x * high
    split_x = _SPLIT * x
    split_high = _SPLIT * high
    x1 = split_x - (split_x - x)
    h1 = split_high - (split_high - high)
    x2 = x - x1
    h2 = high - h1
    rest = (((x1 * h1 - product) + x1 * h2 + x2 * h1) + x2 * h2) + x * low
    whole = np.rint(rest)
    return np.int64(product) + np.int64(whole), rest - whole


@jit
def _shortest(x: float, high_table: Any, low_table: Any, powers: Any) -> tuple[int, int, bool]:
    """`toyrl.results._shortest_decimal` of one value x > 0 in [1e-250, 1e250): (digits, exponent,
    decided)."""
    mantissa, binary = math.frexp(x)
    power = ((binary - 1) * 78913) >> 18
    n, f = _scaled(x, 16 - power, high_table, low_table)
    if n >= powers[17]:
        power += 1
        n, f = _scaled(x, 16 - power, high_table, low_table)
    half_ulp = math.ldexp(high_table[16 - power - _FIRST_EXPONENT], binary - 54)
    below_half_ulp = half_ulp / 2 if mantissa == 0.5 else half_ulp
    tie = abs(abs(f) - 0.5) < _MARGIN
    decided = True
    digits, dropped = n, 0
    q, step = n, 1
    for j in range(1, 18):
        q //= 10  # n // 10^j
        step *= 10
        remainder = n - q * step
        down = remainder + f
        up = (step - remainder) - f
        fits_down, fits_up = down <= below_half_ulp, up <= half_ulp
        both = fits_down and fits_up
        close = abs(down - below_half_ulp) < _MARGIN or abs(up - half_ulp) < _MARGIN
        if close or (both and abs(down - up) < _MARGIN):
            decided = False
        if not (fits_down or fits_up):
            break
        digits = q + (1 if fits_up and not (both and down < up) else 0)
        dropped = j
    return digits, dropped + power - 16, decided and not (tie and dropped == 0)


@jit
def _repr_into(x: float, out: Any, at: int, text: Any, high: Any, low: Any, powers: Any) -> int:
    """Write repr of x (finite, 1e-250 <= |x| < 1e250) to out[at:] and return the position after
    it, or -1 where `_shortest` leaves x undecided (then nothing is written). `text` is scratch
    space for 20 digits."""
    magnitude = abs(x)
    if magnitude < 1e16 and magnitude == np.floor(magnitude):
        digits, exponent = np.int64(magnitude), 0
    else:
        digits, exponent, decided = _shortest(magnitude, high, low, powers)
        if not decided:
            return -1
    count = 0
    rest, ten = np.uint64(digits), np.uint64(10)  # unsigned: a division by 10 is a multiplication
    while rest > 0 or count == 0:  # the digits, last first
        quotient = rest // ten
        text[count] = np.uint8(rest - quotient * ten) + np.uint8(48)
        rest = quotient
        count += 1
    point = exponent + count  # |x| = 0.d1...dn 10^point, laid out as repr lays it out
    if x < 0:
        out[at] = 45  # "-"
        at += 1
    if point <= -4 or point > 16:  # d.ddde+XX
        at = _digits_into(text, count, 0, 1, out, at)
        if count > 1:
            out[at] = 46
            at = _digits_into(text, count, 1, count, out, at + 1)
        power = point - 1
        out[at] = 101  # "e"
        out[at + 1] = 45 if power < 0 else 43
        shown = abs(power)
        at += 2
        if shown >= 100:
            out[at] = 48 + shown // 100
            at += 1
        out[at] = 48 + shown // 10 % 10
        out[at + 1] = 48 + shown % 10
        return at + 2
    if point <= 0:  # 0.000ddd
        out[at] = 48
        out[at + 1] = 46
        at += 2
        for _ in range(-point):
            out[at] = 48
            at += 1
        return _digits_into(text, count, 0, count, out, at)
    if point >= count:  # ddd000.0
        at = _digits_into(text, count, 0, count, out, at)
        for _ in range(point - count):
            out[at] = 48
            at += 1
        out[at] = 46
        out[at + 1] = 48
        return at + 2
    at = _digits_into(text, count, 0, point, out, at)  # ddd.ddd
    out[at] = 46
    return _digits_into(text, count, point, count, out, at + 1)


@jit
def _digits_into(text: Any, count: int, first: int, last: int, out: Any, at: int) -> int:
    """Digits first..last - 1 (0: the leading one) of a number whose `count` digits text holds last
    first, to out[at:]; the position after them."""
    for k in range(first, last):
        out[at + k - first] = text[count - 1 - k]
    return at + last - first


@jit
def _lines(
    floats: Any,
    float_bits: Any,
    blocks: Any,
    is_float: Any,
    column_of: Any,
    block_start: Any,
    block_width: Any,
    known_bits: Any,
    known_start: Any,
    known_text: Any,
    high: Any,
    low: Any,
    powers: Any,
    out: Any,
    missing: Any,
) -> tuple[int, int]:
    """The rows of CSV into out: column c is floats[column_of[c]] (repr; NaN empty; `float_bits`
    the same as int64) or the bytes of
    blocks[:, block_start[c]:][:block_width[c]] up to the first PAD; fields joined by commas, rows
    ended by newlines. A float repr here leaves to Python (beyond 1e+-250, zero, inf, undecided)
    is copied from known_text by its bits (known_bits sorted; text i at known_start[i]:[i + 1]),
    or, not known, recorded in `missing` (as many as it holds). (bytes written, values missing)."""
    text = np.empty(20, np.uint8)
    at, lost = 0, 0
    columns = is_float.shape[0]
    for row in range(blocks.shape[0]):
        for c in range(columns):
            if is_float[c]:
                x = floats[column_of[c], row]
                if x == x:
                    magnitude = abs(x)
                    end = -1
                    if 1e-250 <= magnitude < 1e250:
                        end = _repr_into(x, out, at, text, high, low, powers)
                    if end >= 0:
                        at = end
                    else:
                        bits = float_bits[column_of[c], row]
                        i = np.searchsorted(known_bits, bits)
                        if i < known_bits.shape[0] and known_bits[i] == bits:
                            for k in range(known_start[i], known_start[i + 1]):
                                out[at] = known_text[k]
                                at += 1
                        else:
                            if lost < missing.shape[0]:
                                missing[lost] = bits
                            lost += 1
            else:
                first = block_start[c]
                for k in range(first, first + block_width[c]):
                    byte = blocks[row, k]
                    if byte == PAD:
                        break
                    out[at] = byte
                    at += 1
            out[at] = 44 if c < columns - 1 else 10  # "," or "\n"
            at += 1
    return at, lost


MISSING = 65536  # undecided values recorded a pass; another pass takes the rest (none in toyrl's runs)


def csv_lines(parts: list[np.ndarray], quoted: dict[str, str]) -> bytes:
    """`toyrl.results._csv_lines`: rows of CSV (UTF-8) from columns of equal length."""
    from toyrl.results import _csv_field_bytes

    rows = len(parts[0]) if parts else 0
    is_float = np.array([values.dtype == np.float64 for values in parts], dtype=np.bool_)
    floats = np.stack([parts[c] for c in np.flatnonzero(is_float)]) if is_float.any() else np.empty((0, rows))
    others = [_csv_field_bytes(parts[c], quoted) for c in np.flatnonzero(~is_float)]
    blocks = np.concatenate(others, axis=1) if others else np.empty((rows, 0), np.uint8)
    column_of = np.cumsum(is_float) - 1
    widths = np.zeros(len(parts), np.intp)
    widths[~is_float] = [block.shape[1] for block in others]
    block_start = np.cumsum(widths) - widths
    # The values repr formats here (Python's, as `_float_field_bytes` leaves them): outside the
    # range, zero and inf, then any that `_shortest` leaves undecided, recorded by a pass.
    magnitude = np.abs(floats)
    with np.errstate(invalid="ignore"):
        known = np.unique(
            floats[~((magnitude >= 1e-250) & (magnitude < 1e250)) & ~np.isnan(floats)].view(np.int64)
        )
    high, low = _powers_of_ten()
    bound = rows * (int(widths.sum()) + 24 * len(floats) + len(parts))
    missing = np.empty(MISSING, np.int64)
    while True:
        texts = [repr(value).encode() for value in known.view(np.float64).tolist()]
        start = np.cumsum([0] + [len(text) for text in texts])
        known_text = np.frombuffer(b"".join(texts), np.uint8)
        out = np.empty(bound, np.uint8)
        written, lost = _lines(
            floats, floats.view(np.int64), blocks, is_float, column_of, block_start, widths,
            known, start, known_text, high, low, _POWERS_OF_TEN, out, missing,
        )  # fmt: skip
        if not lost:
            return out[:written].tobytes()
        known = np.union1d(known, missing[: min(lost, MISSING)])
