"""toyrl.kernels compiled by numba: the same operations in the same order, one element at a time.

Each ``_name`` below is the per-element form of the numpy kernel of the same name in `toyrl.kernels`
(read that module for what each computes and why): the same IEEE-754 basic operations in the same order
with the same constants, imported from there. A numpy select (``np.where``) is an ``if``, ``np.fmax``
and ``np.fmin`` are comparisons that keep the constant for a nan (as numpy's do), ``np.floor`` is
``np.floor``; ``np.frexp`` reads the exponent's bits (a subnormal first scaled by 2^54, exactly) and
``np.ldexp`` multiplies by powers of two built from their bits, in two exact steps where one power
would not be a normal double: exact results, as numpy's, and no library call, so LLVM can vectorise
the loops (4-6x faster for exp and log than with the C library's frexp and ldexp). Compiled with
fastmath off, LLVM may not contract a multiply and an add into a fused multiply-add nor reassociate
anything, so every result is the double numpy's sequence gives (tests/test_kernels_compiled.py
compares the bits and reads the assembly). Not imported by ``import toyrl``: `toyrl.kernels` imports
this module on the first call that uses it (see its docstring for the switch).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numpy.typing import ArrayLike

from toyrl.kernels import (
    _AS241_A,
    _AS241_B,
    _AS241_C,
    _AS241_D,
    _AS241_E,
    _AS241_F,
    _EXP_MAX,
    _EXP_MIN,
    _EXPM1_MIN,
    _INVLN2,
    _LG1,
    _LG2,
    _LG3,
    _LG4,
    _LG5,
    _LG6,
    _LG7,
    _LN2_HI,
    _LN2_LO,
    _LOG1P_MID_NEG,
    _LOG1P_MID_POS,
    _LOGC_FIRST,
    _LOGC_HI,
    _LOGC_LO,
    _P1,
    _P2,
    _P3,
    _P4,
    _P5,
    _POW_Y_MAX,
    _Q1,
    _Q2,
    _Q3,
    _Q4,
    _Q5,
    _SOFTPLUS_LINEAR,
    _SPLIT,
    _SQRT_HALF,
    _TINY,
    _TWO_M1000,
)

# fastmath off (no contraction into FMA, no reassociation); a division by zero or a domain error gives
# inf or nan as numpy does instead of raising; compiled code is cached next to this file.
OPTIONS: dict[str, Any] = {"fastmath": False, "error_model": "numpy", "cache": True}
jit = numba.njit(**OPTIONS)

_LOGC_LAST = _LOGC_FIRST + len(_LOGC_HI) - 1


# --------------------------------------------------------------------------------------------------------
# Shared pieces, per element (toyrl.kernels' functions of the same names).


@jit
def _fmax(a: float, c: float) -> float:
    """np.fmax(a, c) for a constant c that is not nan: c when a is nan."""
    return a if a > c else c


@jit
def _fmin(a: float, c: float) -> float:
    """np.fmin(a, c) for a constant c that is not nan: c when a is nan."""
    return a if a < c else c


@jit
def _pow2(k: int) -> float:
    """2^k for integer -1022 <= k <= 1023, from its bits."""
    return np.int64((k + 1023) << 52).view(np.float64)


@jit
def _scale(y: float, k: float) -> float:
    """ldexp(y, k) for y in [0.35, 2] and integer-valued k in [-1100, 1024]: above 2^-1020, y 2^(k>>1)
    is exact and normal, and the second power rounds only on overflow (to inf, as ldexp)."""
    ki = int(k)
    if ki < -1020:
        return (y * _pow2(ki + 1000)) * _TWO_M1000
    ka = ki >> 1
    return (y * _pow2(ka)) * _pow2(ki - ka)


@jit
def _scale_split(y: float, k: float) -> float:
    ki = int(k)
    ka = ki >> 1
    return (y * _pow2(ka)) * _pow2(ki - ka)


@jit
def _reduce(x: float) -> tuple[float, float, float]:
    k = np.floor(x * _INVLN2 + 0.5)
    hi = x - k * _LN2_HI
    lo = k * _LN2_LO
    return k, hi, lo


@jit
def _exp_c(r: float) -> float:
    t = r * r
    return r - t * (_P1 + t * (_P2 + t * (_P3 + t * (_P4 + t * _P5))))


@jit
def _exp_sum(hi: float, lo: float) -> tuple[float, float]:
    r = hi - lo
    rl = (hi - r) - lo
    c = _exp_c(r)
    q = (r * c) / (2.0 - c)
    s = 1.0 + r
    s_err = (1.0 - s) + r
    tail = q + (s_err + (rl + r * rl))
    eh = s + tail
    return eh, (s - eh) + tail


@jit
def _exp_dd(x: float) -> tuple[float, float, float]:
    k, hi, lo = _reduce(x)
    eh, el = _exp_sum(hi, lo)
    return eh, el, k


@jit
def _two_prod(a: float, b: float) -> tuple[float, float]:
    ca = _SPLIT * a
    ah = ca - (ca - a)
    al = a - ah
    cb = _SPLIT * b
    bh = cb - (cb - b)
    bl = b - bh
    p = a * b
    e = (((ah * bh - p) + ah * bl) + al * bh) + al * bl
    return p, e


@jit
def _two_sum(a: float, b: float) -> tuple[float, float]:
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


@jit
def _frexp_normalised(x: float) -> tuple[float, float]:
    """m, k with x = 2^k m and sqrt(2)/2 <= m < sqrt(2) (k a float) for finite x > 0: frexp's mantissa
    in [1/2, 1) (the exponent field set to 2^-1), doubled below sqrt(1/2). Other x give some m, k."""
    bits = np.float64(x).view(np.int64)
    biased = (bits >> 52) & 0x7FF
    if biased == 0:  # zero or subnormal: scaled into the normal range first
        bits = np.float64(x * 18014398509481984.0).view(np.int64)  # 2^54
        biased = ((bits >> 52) & 0x7FF) - 54
    m = np.int64((bits & 0x800FFFFFFFFFFFFF) | 0x3FE0000000000000).view(np.float64)
    ex = biased - 1022
    if m < _SQRT_HALF:
        return m + m, float(ex - 1)
    return m, float(ex)


@jit
def _log_poly(f: float, k: float, c: float) -> float:
    """s_log1p.c's k ln2_hi - ((hfsq - (s (hfsq + R) + (k ln2_lo + c))) - f) (see _log1p_core)."""
    hfsq = (0.5 * f) * f
    s = f / (2.0 + f)
    z = s * s
    big_r = z * (_LG1 + z * (_LG2 + z * (_LG3 + z * (_LG4 + z * (_LG5 + z * (_LG6 + z * _LG7))))))
    return k * _LN2_HI - ((hfsq - (s * (hfsq + big_r) + (k * _LN2_LO + c))) - f)


@jit
def _log1p_core(x: float, xl: float, has_low: bool) -> float:
    u = 1.0 + x
    m, k = _frexp_normalised(u)
    mid = (x > _LOG1P_MID_NEG) and (x < _LOG1P_MID_POS)
    c_round = (1.0 - (u - x)) if u >= 2.0 else (x - (u - 1.0))
    if has_low:
        c = (xl if mid else c_round + xl) / u
    else:
        c = 0.0 if mid else c_round / u
    if mid:
        return _log_poly(x, 0.0, c)
    return _log_poly(m - 1.0, k, c)


@jit
def _log1p_finish(x: float, out: float) -> float:
    if abs(x) < _TINY:
        out = x
    if not ((x > -1.0) and (x < np.inf)):
        out = -np.inf if x == -1.0 else (np.inf if x == np.inf else np.nan)
    return out


@jit
def _softplus_argument(x: float) -> float:
    return _fmax(_fmin(x, _SOFTPLUS_LINEAR), _EXP_MIN)


@jit
def _softplus_finish(x: float, th: float, tl: float) -> float:
    out = _log1p_core(th, tl, True)
    if th < _TINY:
        out = th
    return x if x > _SOFTPLUS_LINEAR else out


@jit
def _softplus(x: float) -> float:
    eh, el, k = _exp_dd(_softplus_argument(x))
    return _softplus_finish(x, _scale(eh, k), _scale_split(el, k))


@jit
def _nan_to_canonical(x: float, out: float) -> float:
    return np.nan if x != x else out


@jit
def _quotient(nh: float, nl: float, dh: float, dl: float) -> float:
    q = nh / dh
    p, pe = _two_prod(q, dh)
    return q + ((((nh - p) - pe) + nl) - q * dl) / dh


@jit
def _expit_both(x: float) -> tuple[float, float]:
    eh, el, k = _exp_dd(_fmax(-abs(x), _EXP_MIN))
    th = _scale(eh, k)
    tl = _scale_split(el, k)
    dh = 1.0 + th
    dl = ((1.0 - dh) + th) + tl
    large = _quotient(1.0, 0.0, dh, dl)
    small = _scale(_quotient(eh, el, dh, dl), k)
    if x != x:
        return np.nan, np.nan
    if x < 0.0:
        return small, large
    return large, small


@jit
def _log_dd(x: float) -> tuple[float, float]:
    m, k = _frexp_normalised(x)
    fi = np.floor(m * 128.0 + 0.5)
    c = fi * 0.0078125
    # np.take(..., mode="clip"): out of range only for x = 0, inf, nan or x < 0 (patched by power)
    if fi >= _LOGC_LAST:
        idx = _LOGC_LAST - _LOGC_FIRST
    elif fi >= _LOGC_FIRST:
        idx = int(fi) - _LOGC_FIRST
    else:
        idx = 0
    f = m - c
    c2 = c + c
    dh = c2 + f
    dl = f - (dh - c2)
    sh = f / dh
    p, pe = _two_prod(sh, dh)
    sl = (((f - p) - pe) - sh * dl) / dh
    z = sh * sh
    uh = sh + sh
    tail = (uh * z) * (1.0 / 3.0 + z * (0.2 + z * (1.0 / 7.0 + z * (1.0 / 9.0))))
    s1, e1 = _two_sum(k * _LN2_HI, _LOGC_HI[idx])
    s2, e2 = _two_sum(s1, uh)
    lo = ((((e1 + e2) + k * _LN2_LO) + _LOGC_LO[idx]) + (sl + sl)) + tail
    lh = s2 + lo
    ll = (s2 - lh) + lo
    return lh, ll


@jit
def _horner(coefs: tuple[float, ...], r: float) -> float:
    acc = coefs[0] * r + coefs[1]
    for i in range(2, len(coefs)):
        acc = acc * r + coefs[i]
    return acc


# --------------------------------------------------------------------------------------------------------
# The kernels, per element.


@jit
def _exp(x: float) -> float:
    xc = _fmin(_fmax(x, _EXP_MIN), _EXP_MAX)
    eh, _, k = _exp_dd(xc)
    return _nan_to_canonical(x, _scale(eh, k))


@jit
def _expm1(x: float) -> float:
    xc = _fmin(_fmax(x, _EXPM1_MIN), _EXP_MAX)
    k, hi, lo = _reduce(xc)
    r = hi - lo
    c = (hi - r) - lo
    hfx = 0.5 * r
    hxs = r * hfx
    r1 = 1.0 + hxs * (_Q1 + hxs * (_Q2 + hxs * (_Q3 + hxs * (_Q4 + hxs * _Q5))))
    t = 3.0 - r1 * hfx
    e = hxs * ((r1 - t) / (6.0 - r * t))
    e = (r * (e - c) - c) - hxs
    ki = int(k)
    if ki >= 20:
        if ki <= 56:
            out = ((r - (e + _pow2(-ki))) + 1.0) * _pow2(ki)
        else:
            out = _scale(1.0 - (e - r), k) - 1.0
    elif ki == 1 and r < -0.25:
        out = ((r + 0.5) - e) * 2.0
    else:
        u = _pow2(ki)
        out = (r - e) * u + (u - 1.0)
    if abs(x) < _TINY:
        out = x
    return _nan_to_canonical(x, out)


@jit
def _log(x: float) -> float:
    if not ((x > 0.0) and (x < np.inf)):
        return -np.inf if x == 0.0 else (np.inf if x == np.inf else np.nan)
    m, k = _frexp_normalised(x)
    f = m - 1.0
    hfsq = (0.5 * f) * f
    s = f / (2.0 + f)
    z = s * s
    big_r = z * (_LG1 + z * (_LG2 + z * (_LG3 + z * (_LG4 + z * (_LG5 + z * (_LG6 + z * _LG7))))))
    return k * _LN2_HI - ((hfsq - (s * (hfsq + big_r) + k * _LN2_LO)) - f)


@jit
def _log1p(x: float) -> float:
    return _log1p_finish(x, _log1p_core(x, 0.0, False))


@jit
def _softplus_canonical(x: float) -> float:
    return _nan_to_canonical(x, _softplus(x))


@jit
def _log_expit(x: float) -> float:
    return _nan_to_canonical(x, -_softplus(-x))


@jit
def _expit(x: float) -> float:
    return _expit_both(x)[0]


@jit
def _power(x: float, y: float) -> float:
    if y == 0.0 or x == 1.0:
        return 1.0
    if x != x or y != y or x < 0.0:
        return np.nan
    if y == 1.0:
        return x
    if x == 0.0:
        odd = (y - 2.0 * np.floor(0.5 * y)) == 1.0  # y an odd integer (exact; never for |y| >= 2^53)
        return math.copysign(0.0 if y > 0.0 else np.inf, x if odd else 1.0)
    if x == np.inf:
        return np.inf if y > 0.0 else 0.0
    lh, ll = _log_dd(x)
    yc = _fmin(_fmax(y, -_POW_Y_MAX), _POW_Y_MAX)
    ph, pl = _two_prod(yc, lh)
    pl = pl + yc * ll
    zh = ph + pl
    zl = (ph - zh) + pl
    zc = _fmin(_fmax(zh, _EXP_MIN), _EXP_MAX)
    k = np.floor(zc * _INVLN2 + 0.5)
    hi = zc - k * _LN2_HI
    eh, _ = _exp_sum(hi, k * _LN2_LO - zl)
    return _scale(eh, k)


@jit
def _normal_quantile(p: float) -> float:
    if not ((p > 0.0) and (p < 1.0)):
        return -np.inf if p == 0.0 else (np.inf if p == 1.0 else np.nan)
    q = p - 0.5
    if abs(q) <= 0.425:
        r = 0.180625 - q * q
        return (_horner(_AS241_A, r) * q) / _horner(_AS241_B, r)
    r = math.sqrt(-_log(p if q <= 0.0 else 1.0 - p))
    if r <= 5.0:
        rn = r - 1.6
        out = _horner(_AS241_C, rn) / _horner(_AS241_D, rn)
    else:
        rf = r - 5.0
        out = _horner(_AS241_E, rf) / _horner(_AS241_F, rf)
    return -out if q < 0.0 else out


# --------------------------------------------------------------------------------------------------------
# Loops over contiguous arrays, and the wrappers toyrl.kernels calls (its API: array_like in, the
# broadcast shape out, a numpy float64 for a scalar).


@jit
def _exp_loop(x: Any, out: Any) -> None:
    for i in range(x.size):
        out[i] = _exp(x[i])


@jit
def _expm1_loop(x: Any, out: Any) -> None:
    for i in range(x.size):
        out[i] = _expm1(x[i])


@jit
def _log_loop(x: Any, out: Any) -> None:
    for i in range(x.size):
        out[i] = _log(x[i])


@jit
def _log1p_loop(x: Any, out: Any) -> None:
    for i in range(x.size):
        out[i] = _log1p(x[i])


@jit
def _softplus_loop(x: Any, out: Any) -> None:
    for i in range(x.size):
        out[i] = _softplus_canonical(x[i])


@jit
def _log_expit_loop(x: Any, out: Any) -> None:
    for i in range(x.size):
        out[i] = _log_expit(x[i])


@jit
def _expit_loop(x: Any, out: Any) -> None:
    for i in range(x.size):
        out[i] = _expit(x[i])


@jit
def _normal_quantile_loop(x: Any, out: Any) -> None:
    for i in range(x.size):
        out[i] = _normal_quantile(x[i])


@jit
def _expit_pair_loop(x: Any, positive: Any, negative: Any) -> None:
    for i in range(x.size):
        positive[i], negative[i] = _expit_both(x[i])


@jit
def _power_loop(x: Any, y: Any, out: Any) -> None:
    for i in range(x.size):
        out[i] = _power(x[i], y[i])


def _result(out: np.ndarray) -> Any:
    """ndarray for array input, numpy float64 scalar for 0-d input."""
    return out[()]


def _flat(x: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """x as float64, and its elements as a contiguous vector."""
    array = np.asarray(x, dtype=np.float64)
    return array, np.ravel(array)


def _unary(loop: Any) -> Callable[[ArrayLike], Any]:
    def kernel(x: ArrayLike) -> Any:
        array, flat = _flat(x)
        out = np.empty(array.shape)
        loop(flat, out.reshape(-1))
        return _result(out)

    return kernel


exp = _unary(_exp_loop)
expm1 = _unary(_expm1_loop)
log = _unary(_log_loop)
log1p = _unary(_log1p_loop)
softplus = _unary(_softplus_loop)
log_expit = _unary(_log_expit_loop)
expit = _unary(_expit_loop)
normal_quantile = _unary(_normal_quantile_loop)


def expit_pair(x: ArrayLike) -> tuple[Any, Any]:
    array, flat = _flat(x)
    positive, negative = np.empty(array.shape), np.empty(array.shape)
    _expit_pair_loop(flat, positive.reshape(-1), negative.reshape(-1))
    return _result(positive), _result(negative)


def expit_pair_softplus(x: ArrayLike, columns: int) -> tuple[Any, Any, Any]:
    array = np.asarray(x, dtype=np.float64)
    return (*expit_pair(array), softplus(array[..., array.shape[-1] - columns :]))


def power(x: ArrayLike, y: ArrayLike) -> Any:
    xb, yb = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
    out = np.empty(xb.shape)
    _power_loop(np.ravel(xb), np.ravel(yb), out.reshape(-1))
    return _result(out)


# --------------------------------------------------------------------------------------------------------
# toyrl.noise's transforms of PCG64's raw 64-bit outputs (`open_uniform`, `standard_exponential`), each
# output's operations in one loop: (x >> 12) converts to a double exactly (it is below 2^52), + 1/2 and
# times 2^-52 are exact, and the log is `_log`, the numpy kernel's sequence.

_OPEN_SHIFT = numba.uint64(12)
_TWO_M52 = float.fromhex("0x1p-52")  # 2^-52


@jit
def _open_uniform_loop(raw: Any, out: Any) -> None:
    for i in range(raw.size):
        out[i] = (float(raw[i] >> _OPEN_SHIFT) + 0.5) * _TWO_M52


@jit
def _standard_exponential_loop(raw: Any, out: Any) -> None:
    for i in range(raw.size):
        out[i] = -_log((float(raw[i] >> _OPEN_SHIFT) + 0.5) * _TWO_M52)


def open_uniform(raw: Any) -> Any:
    """U(0, 1) in (0, 1) from raw uint64 outputs, as `toyrl.noise.open_uniform` makes them."""
    out = np.empty(raw.shape)
    _open_uniform_loop(np.ravel(raw), out.reshape(-1))
    return out


def standard_exponential(raw: Any) -> Any:
    """Exp(1) = -log U from raw uint64 outputs, as `toyrl.noise.standard_exponential` makes it."""
    out = np.empty(raw.shape)
    _standard_exponential_loop(np.ravel(raw), out.reshape(-1))
    return out


# --------------------------------------------------------------------------------------------------------
# numpy's sums. ``x.sum()`` of a contiguous float64 vector (and ``sum(-1)`` of each row of a C-contiguous
# array) is the identity 0.0 plus numpy's pairwise_sum of its elements (numpy/_core/src/umath/
# loops_utils.h.src; measured: tests/test_expected_compiled.py and tests/test_policy_compiled.py compare
# the bits on many lengths and values). The twins of toyrl.expected and toyrl.policy sum with these,
# inlined where called: a call passing arrays costs more than summing a row of 8.
inline = numba.njit(inline="always", **OPTIONS)

PAIRWISE_BLOCK = 128  # numpy's PW_BLOCKSIZE: rows up to this length are summed with 8 accumulators
STACK = 64  # pairwise_sum's tree is less than log2(n / 64) + 1 deep: 64 levels hold any length


@inline
def _block_sum(values: Any, start: int, n: int) -> float:
    """numpy's pairwise_sum of values[start : start + n] for n <= PAIRWISE_BLOCK: below 8 elements a
    loop from 0.0; else 8 accumulators combined ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)),
    then the rest in order."""
    if n < 8:
        total = 0.0
        for i in range(start, start + n):
            total += values[i]
        return total
    r0, r1, r2, r3 = values[start], values[start + 1], values[start + 2], values[start + 3]
    r4, r5, r6, r7 = values[start + 4], values[start + 5], values[start + 6], values[start + 7]
    end = start + n - n % 8
    for i in range(start + 8, end, 8):
        r0 += values[i]
        r1 += values[i + 1]
        r2 += values[i + 2]
        r3 += values[i + 3]
        r4 += values[i + 4]
        r5 += values[i + 5]
        r6 += values[i + 6]
        r7 += values[i + 7]
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for i in range(end, start + n):
        total += values[i]
    return total


@inline
def pairwise_sum(values: Any, stack: Any, left: Any) -> float:
    """numpy's pairwise_sum of a vector: above PAIRWISE_BLOCK elements, the sum of the two halves'
    pairwise sums, split at n2 = n/2 - (n/2 mod 8). numpy recurses; numba cannot load a recursive
    function from its cache (it crashes), so the same tree is walked here: the same additions in the
    same order. stack [STACK, 3] (int64) and left [STACK] are workspace: for each node on the path to
    the current block, its right half (start, length) and whether its left half's sum is in left."""
    n = len(values)
    if n <= PAIRWISE_BLOCK:
        return _block_sum(values, 0, n)
    depth, start, length = 0, 0, n
    while True:
        while length > PAIRWISE_BLOCK:  # down the left halves
            half = length // 2
            half -= half % 8
            stack[depth, 0], stack[depth, 1], stack[depth, 2] = start + half, length - half, 0
            depth += 1
            length = half
        total = _block_sum(values, start, length)
        while depth > 0 and stack[depth - 1, 2]:  # up through the nodes whose both halves are summed
            depth -= 1
            total = left[depth] + total
        if depth == 0:
            return total
        top = depth - 1  # this node's left half is summed: its right half next
        left[top], stack[top, 2] = total, 1
        start, length = stack[top, 0], stack[top, 1]


@inline
def row_sum(values: Any, stack: Any, left: Any) -> float:
    """``values.sum()`` of a contiguous float64 vector, numpy's way: the identity 0.0 plus the
    pairwise sum (so a row of -0.0 sums to +0.0, as numpy's does); stack, left: `pairwise_sum`'s."""
    return 0.0 + pairwise_sum(values, stack, left)
