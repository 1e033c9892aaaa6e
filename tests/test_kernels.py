"""toyrl.kernels: accuracy against mpmath, exact special values, identical bits under every SIMD setting
numpy offers and in JavaScript (toyrl/explorer/kernels.js), and no transcendental library calls."""

from __future__ import annotations

import importlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tokenize
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mpmath
import numpy as np
import pytest

from toyrl import kernels

ROOT = Path(__file__).resolve().parents[1]
PY_SOURCE = ROOT / "toyrl" / "kernels.py"
JS_SOURCE = ROOT / "toyrl" / "explorer" / "kernels.js"

UNARY = ["exp", "expm1", "log", "log1p", "softplus", "log_expit", "expit", "normal_quantile"]
JS_NAMES = {
    "exp": "exp",
    "expm1": "expm1",
    "log": "log",
    "log1p": "log1p",
    "softplus": "softplus",
    "log_expit": "logExpit",
    "expit": "expit",
    "normal_quantile": "normalQuantile",
    "power": "power",
}
DBL_MAX = float(np.finfo(np.float64).max)
TINY = 5e-324

mpmath.mp.dps = 40
MPF = mpmath.mpf


# ----------------------------------------------------------------------------------------------------
# References and the error measure.


def _ref_normal_quantile(p: float, guess: float) -> mpmath.mpf:
    """Phi^-1(p) by Newton's method on mpmath's normal CDF from the kernel's (already close) value."""
    x = MPF(guess)
    target = MPF(p)
    for _ in range(8):
        x -= (mpmath.ncdf(x) - target) / mpmath.npdf(x)
    return x


REFERENCES: dict[str, Callable[[mpmath.mpf], mpmath.mpf]] = {
    "exp": mpmath.exp,
    "expm1": mpmath.expm1,
    "log": mpmath.log,
    "log1p": mpmath.log1p,
    "softplus": lambda v: mpmath.log1p(mpmath.exp(v)),
    "log_expit": lambda v: -mpmath.log1p(mpmath.exp(-v)),
    "expit": lambda v: 1 / (1 + mpmath.exp(-v)),
}

# Just below the overflow threshold's rounding boundary: exact values at or above round to inf.
_OVERFLOW_BOUNDARY = MPF(2) ** 1024 - MPF(2) ** 970


def ulp_error(got: float, exact: mpmath.mpf) -> float:
    """|got - exact| in units of the last place of the correctly rounded exact value (subnormal ulp
    2^-1074 below 2^-1022); an infinite result counts as exact when exact rounds to infinity."""
    if got != got:
        return float("inf")
    if abs(got) == np.inf:
        return 0.0 if abs(exact) >= _OVERFLOW_BOUNDARY and (exact > 0) == (got > 0) else float("inf")
    if exact == 0:
        return 0.0 if got == 0 else float("inf")
    _, e = mpmath.frexp(exact)  # |exact| = m 2^e with m in [0.5, 1)
    ulp = mpmath.ldexp(MPF(1), max(int(e) - 1, -1022) - 52)
    return float(abs(MPF(got) - exact) / ulp)


def max_ulp_error(name: str, xs: np.ndarray, ys: np.ndarray | None = None) -> tuple[float, float]:
    """The largest error of a kernel over the points, and the argument where it occurs."""
    if name == "power":
        assert ys is not None
        got = kernels.power(xs, ys)
        errs = [
            ulp_error(float(g), mpmath.power(MPF(float(a)), MPF(float(b))))
            for g, a, b in zip(got, xs, ys, strict=True)
        ]
    elif name == "normal_quantile":
        got = kernels.normal_quantile(xs)
        errs = [
            ulp_error(float(g), _ref_normal_quantile(float(p), float(g)))
            for g, p in zip(got, xs, strict=True)
        ]
    else:
        got = getattr(kernels, name)(xs)
        ref = REFERENCES[name]
        errs = [ulp_error(float(g), ref(MPF(float(v)))) for g, v in zip(got, xs, strict=True)]
    i = int(np.argmax(errs))
    return errs[i], float(xs[i])


# ----------------------------------------------------------------------------------------------------
# Grids: random (seeded) log-uniform and uniform points over each function's whole range, plus edges.


def _loguniform(rng: np.random.Generator, lo: float, hi: float, n: int) -> np.ndarray:
    return np.exp(rng.uniform(np.log(lo), np.log(hi), n))


def _neighbours(points: list[float]) -> np.ndarray:
    """The points and their two neighbouring doubles."""
    p = np.array(points, dtype=np.float64)
    with np.errstate(over="ignore"):
        return np.concatenate([p, np.nextafter(p, np.inf), np.nextafter(p, -np.inf)])


EXP_OVER = 709.782712893384  # largest x with exp(x) finite, about
EXP_UNDER = -745.1332191019411  # exp(x) rounds to 0 below, about
SUBNORMAL_EDGE = -708.3964185322641  # exp(x) = 2^-1022

EDGES = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, -2.2250738585072014e-308, 1e-300, -1e-300]
EDGES += [
    2.0**-54,
    -(2.0**-54),
    2.0**-29,
    1e-16,
    -1e-16,
    0.5,
    -0.5,
    1.0,
    -1.0,
    2.0,
    -2.0,
    0.34657359027997264,
]
EDGES += [-0.34657359027997264, 0.6931471805599453, -0.6931471805599453, 1.0397207708399179, 10.0, -10.0]
EDGES += [37.0, -37.0, 38.0, -38.0, 40.0, -40.0, 709.0, -709.0, EXP_OVER, -EXP_OVER, EXP_UNDER, 745.0]
EDGES += [-745.0, SUBNORMAL_EDGE, 1e6, -1e6, 1e300, -1e300, DBL_MAX, -DBL_MAX]


def grid(name: str) -> np.ndarray:
    """A few thousand points over the function's range (deterministic)."""
    rng = np.random.default_rng(20240607 + UNARY.index(name))
    edges = _neighbours(EDGES)
    if name in ("exp", "softplus", "log_expit", "expit", "expm1"):
        lo, hi = (-750.0, 750.0)
        parts = [
            rng.uniform(lo, hi, 2500),
            rng.uniform(-40.0, 40.0, 2500),
            rng.uniform(-2.0, 2.0, 1500),
            _loguniform(rng, 1e-300, 1.0, 600),
            -_loguniform(rng, 1e-300, 1.0, 600),
            rng.uniform(-746.0, -707.0, 800),  # subnormal exp results
            rng.uniform(700.0, 710.0, 300),
            edges,
        ]
    elif name == "log":
        parts = [
            _loguniform(rng, 5e-324, DBL_MAX, 3000),
            rng.uniform(0.5, 2.0, 2500),
            1.0 + rng.uniform(-1e-6, 1e-6, 1000),
            _loguniform(rng, 5e-324, 2.2e-308, 500),
            np.abs(edges),
        ]
    elif name == "log1p":
        parts = [
            _loguniform(rng, 1e-300, DBL_MAX, 2500),
            -_loguniform(rng, 1e-300, 1.0, 2000),
            rng.uniform(-0.5, 1.0, 2000),
            -1.0 + _loguniform(rng, 1e-16, 0.5, 800),
            edges[edges > -1.0],
        ]
    else:  # normal_quantile
        parts = [
            rng.uniform(0.0, 1.0, 3000),
            _loguniform(rng, 1e-300, 0.5, 2000),
            1.0 - _loguniform(rng, 1e-16, 0.5, 1500),
            np.array([5e-324, 1e-320, 2.2250738585072014e-308, 0.075, 0.925, 0.5, 0.5 - 2.0**-54]),
            np.array([1.0 - 2.0**-53, 0.0249, 0.9751, 1.388e-11, 1.0 - 1e-15]),
        ]
    x = np.concatenate(parts)
    return x[np.isfinite(x)]


def power_grid() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(777)
    tokens = rng.integers(1, 1_000_001, 2500).astype(np.float64)
    alpha = rng.uniform(0.0, 1.0, 2500)
    beta = np.concatenate([rng.uniform(0.0, 1.0, 1000), 1.0 - _loguniform(rng, 1e-12, 0.5, 1000)])
    t = rng.integers(1, 1_000_001, 2000).astype(np.float64)
    x_any = _loguniform(rng, 1e-300, 1e300, 2000)
    y_any = rng.uniform(-1.0, 1.0, 2000) * np.exp(rng.uniform(0.0, 5.0, 2000))
    near_one = 1.0 + rng.uniform(-1e-9, 1e-9, 500)
    y_big = rng.uniform(-1e11, 1e11, 500)
    sub = _loguniform(rng, 5e-324, 2.2e-308, 300)
    y_sub = rng.uniform(-1.5, 1.5, 300)
    xs = np.concatenate([tokens, rng.uniform(0.0, 100.0, 2500), beta, x_any, near_one, sub])
    ys = np.concatenate([1.0 - alpha, alpha, t, y_any, y_big, y_sub])
    return xs, ys


# ----------------------------------------------------------------------------------------------------
# Accuracy.

ULP_BOUND = {name: 1.0 for name in [*UNARY, "power"]}
# AS241 evaluated in double precision: its degree-7 rationals accumulate a few roundings (the
# approximation itself is about 1e-16).
ULP_BOUND["normal_quantile"] = 8.0
STATED = re.compile(r"Measured error on the accuracy test's grids: at most ([0-9.]+) ulp")


def assert_stated(name: str, worst: float) -> None:
    """The kernel's docstring states the maximum measured here, rounded up to hundredths of an ulp."""
    stated = STATED.findall(" ".join((getattr(kernels, name).__doc__ or "").split()))
    measured = math.ceil(worst * 100) / 100
    assert stated == [f"{measured:.2f}"], f"{name}'s docstring states {stated} ulp, measured {worst:.4f}"


@pytest.mark.parametrize("name", UNARY)
def test_accuracy_against_mpmath(name: str) -> None:
    worst, where = max_ulp_error(name, grid(name))
    assert worst <= ULP_BOUND[name], f"{name}: {worst:.3f} ulp at {where!r}"
    assert_stated(name, worst)


def test_power_accuracy_against_mpmath() -> None:
    xs, ys = power_grid()
    worst, where = max_ulp_error("power", xs, ys)
    assert worst <= ULP_BOUND["power"], f"power: {worst:.3f} ulp at x = {where!r}"
    assert_stated("power", worst)


def test_normal_quantile_increases_along_toyrl_s_inputs_not_along_every_double() -> None:
    """On consecutive (k + 1/2) 2^-52 (`toyrl.noise.open_uniform`'s values), in windows spread over
    (0, 1), the quantile never decreases; on consecutive doubles its rounding makes it (the docstring
    says both)."""
    rng = np.random.default_rng(20260607)
    starts = np.concatenate([[0, 2**51 - 50_000, 2**52 - 50_000], rng.integers(0, 2**52 - 50_000, 40)])
    for start in starts.astype(np.uint64):
        p = (np.arange(start, start + np.uint64(50_000), dtype=np.uint64).astype(np.float64) + 0.5) * 2.0**-52
        steps = np.diff(kernels.normal_quantile(p))
        assert np.all(steps > 0), f"a decrease after p = {p[int(np.argmin(steps))]!r}"
    doubles = 0.3 + np.arange(50_000) * np.spacing(0.3)
    assert np.any(np.diff(kernels.normal_quantile(doubles)) < 0)


def test_ulp_error_measure_can_fail() -> None:
    """The measure is not a tautology: one ulp off is one ulp, a wrong value is many."""
    one = 1.0
    assert ulp_error(np.nextafter(one, 2.0), MPF(1)) == pytest.approx(1.0)
    assert ulp_error(float(np.exp(1.0)) * (1 + 1e-14), mpmath.e) > 10
    assert ulp_error(0.0, MPF("1e-320")) > 1


# ----------------------------------------------------------------------------------------------------
# Special values, exactly.

INF, NAN = np.inf, np.nan
SPECIALS: dict[str, list[tuple[float, float]]] = {
    "exp": [
        (0.0, 1.0),
        (-0.0, 1.0),
        (INF, INF),
        (-INF, 0.0),
        (NAN, NAN),
        (710.0, INF),
        (1e300, INF),
        (-746.0, 0.0),
        (-1e300, 0.0),
        (709.782712893384, 1.7976931348622732e308),
        (-745.1332191019411, 5e-324),
        (-745.1332191019412, 0.0),
        (5e-324, 1.0),
        (-5e-324, 1.0),
    ],
    "expm1": [
        (0.0, 0.0),
        (-0.0, -0.0),
        (INF, INF),
        (-INF, -1.0),
        (NAN, NAN),
        (710.0, INF),
        (-40.0, -1.0),
        (-1e300, -1.0),
        (5e-324, 5e-324),
        (-5e-324, -5e-324),
        (1e-300, 1e-300),
        (2.0**-55, 2.0**-55),
    ],
    "log": [
        (1.0, 0.0),
        (0.0, -INF),
        (-0.0, -INF),
        (-1.0, NAN),
        (-INF, NAN),
        (INF, INF),
        (NAN, NAN),
        (5e-324, -744.4400719213812),
        (DBL_MAX, 709.782712893384),
        (2.0, 0.6931471805599453),
    ],
    "log1p": [
        (0.0, 0.0),
        (-0.0, -0.0),
        (-1.0, -INF),
        (-1.5, NAN),
        (-INF, NAN),
        (INF, INF),
        (NAN, NAN),
        (5e-324, 5e-324),
        (-5e-324, -5e-324),
        (1e-300, 1e-300),
        (DBL_MAX, 709.782712893384),
    ],
    "softplus": [
        (-INF, 0.0),
        (INF, INF),
        (NAN, NAN),
        (0.0, 0.6931471805599453),
        (-0.0, 0.6931471805599453),
        (38.0, 38.0),
        (1e300, 1e300),
        (-800.0, 0.0),
        (-745.0, 5e-324),
        (-1e300, 0.0),
    ],
    "log_expit": [
        (INF, -0.0),
        (-INF, -INF),
        (NAN, NAN),
        (0.0, -0.6931471805599453),
        (-38.0, -38.0),
        (800.0, -0.0),
        (-1e300, -1e300),
    ],
    "expit": [
        (INF, 1.0),
        (-INF, 0.0),
        (NAN, NAN),
        (0.0, 0.5),
        (-0.0, 0.5),
        (40.0, 1.0),
        (1e300, 1.0),
        (-800.0, 0.0),
        (-1e300, 0.0),
        (-745.0, 5e-324),
        (DBL_MAX, 1.0),
        (-DBL_MAX, 0.0),
    ],
    "normal_quantile": [
        (0.5, 0.0),
        (0.0, -INF),
        (1.0, INF),
        (-0.1, NAN),
        (1.1, NAN),
        (NAN, NAN),
        (-INF, NAN),
        (INF, NAN),
    ],
}


def _same_double(a: float, b: float) -> bool:
    """Equal as doubles, distinguishing -0 from +0; all nans are alike."""
    if a != a or b != b:
        return a != a and b != b
    return a == b and np.signbit(a) == np.signbit(b)


@pytest.mark.parametrize("name", UNARY)
def test_special_values_exact(name: str) -> None:
    fn = getattr(kernels, name)
    cases = SPECIALS[name]
    xs = np.array([c[0] for c in cases])
    as_array = fn(xs)
    for (x, want), got in zip(cases, as_array, strict=True):
        assert _same_double(float(got), want), f"{name}({x!r}) = {got!r}, want {want!r}"
        scalar = fn(x)
        assert _same_double(float(scalar), want), f"{name}({x!r}) as a scalar = {scalar!r}"


def test_power_special_and_exact_cases() -> None:
    cases = [
        (0.0, 0.0, 1.0),
        (0.0, 0.5, 0.0),
        (0.0, -0.5, INF),
        (-0.0, 2.0, 0.0),
        # C99's signed zeros: -0 to an odd integer power keeps its sign, to any other power not.
        (-0.0, 3.0, -0.0),
        (-0.0, 1.0, -0.0),
        (-0.0, -3.0, -INF),
        (-0.0, -1.0, -INF),
        (-0.0, -2.0, INF),
        (-0.0, 0.5, 0.0),
        (-0.0, -2.5, INF),
        (-0.0, 2.0**53 + 2.0, 0.0),
        (-0.0, 2.0**53 - 1.0, -0.0),
        (-0.0, -(2.0**53) + 1.0, -INF),
        (0.0, 3.0, 0.0),
        (0.0, -3.0, INF),
        (1.0, 12345.678, 1.0),
        (1.0, NAN, 1.0),
        (NAN, 0.0, 1.0),
        (2.5, 0.0, 1.0),
        (NAN, 1.0, NAN),
        (2.0, NAN, NAN),
        (-2.0, 0.5, NAN),
        (3.0, 1.0, 3.0),
        (1e-310, 1.0, 1e-310),
        (INF, 2.0, INF),
        (INF, -2.0, 0.0),
        (2.0, INF, INF),
        (0.5, INF, 0.0),
        (2.0, -INF, 0.0),
        (0.5, -INF, INF),
        (2.0, 1024.0, INF),
        (2.0, -1074.0, 5e-324),
        (2.0, -1076.0, 0.0),
        (0.9, 1e6, 0.0),
        (1e6, 1e6, INF),
        (4.0, 0.5, 2.0),
        (2.0, 10.0, 1024.0),
        (10.0, 22.0, 1e22),
        (7.0, 3.0, 343.0),
        (1e6, 0.5, 1000.0),
        (0.5, 3.0, 0.125),
        (1e6, -1.0, 1e-6),
    ]
    xs = np.array([c[0] for c in cases])
    ys = np.array([c[1] for c in cases])
    got = kernels.power(xs, ys)
    for (x, y, want), g in zip(cases, got, strict=True):
        assert _same_double(float(g), want), f"power({x!r}, {y!r}) = {g!r}, want {want!r}"
        assert _same_double(float(kernels.power(x, y)), want)
    # Integer powers of small integers are exact (1 ulp would allow a neighbour; the kernel does better).
    base = np.repeat(np.arange(2.0, 12.0), 12)
    expo = np.tile(np.arange(1.0, 13.0), 10)
    np.testing.assert_array_equal(kernels.power(base, expo), base**expo)
    # Adam's bias correction as used: beta**t for integer t.
    t = np.arange(1.0, 2001.0)
    worst = max(
        ulp_error(float(g), mpmath.power(MPF(0.999), int(n)))
        for g, n in zip(kernels.power(0.999, t), t, strict=True)
    )
    assert worst <= 1.0


def test_expit_relative_accuracy_for_negative_arguments() -> None:
    """expit of very negative x is e^x (relative accuracy, subnormals), never a cancelled 1 - 1."""
    x = -np.linspace(30.0, 745.0, 4000)
    worst, where = max(
        (ulp_error(float(g), 1 / (1 + mpmath.exp(-MPF(float(v))))), float(v))
        for g, v in zip(kernels.expit(x), x, strict=True)
    )
    assert worst <= 1.0, where
    assert np.all(kernels.expit(np.linspace(-700.0, 700.0, 1001)) > 0)


# ----------------------------------------------------------------------------------------------------
# Shapes, scalars, warnings.


def test_shapes_scalars_and_no_warnings() -> None:
    specials = np.array([[np.nan, np.inf, -np.inf, 0.0], [-0.0, -1.0, 1e300, -1e300]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):
            for name in UNARY:
                fn = getattr(kernels, name)
                out = fn(specials)
                assert isinstance(out, np.ndarray) and out.shape == (2, 4) and out.dtype == np.float64
                assert isinstance(fn(0.25), np.float64)
                assert isinstance(fn(np.float64(0.25)), np.float64)
                assert isinstance(fn(np.array(0.25)), np.float64)
                assert fn(np.empty((0, 3))).shape == (0, 3)
                assert fn([0.25, 0.5]).shape == (2,)
            out = kernels.power(np.array([[0.5], [2.0]]), np.array([np.nan, -np.inf, 0.0, 3.0, -1.0]))
            assert out.shape == (2, 5) and out.dtype == np.float64
            assert isinstance(kernels.power(2.0, 0.5), np.float64)
            kernels.power(np.array([0.0, -1.0, np.inf, np.nan]), np.array([-1.0, 0.5, -2.0, 2.0]))


def test_large_inputs_taken_in_chunks_give_the_same_bits() -> None:
    """A large input is taken CHUNK elements at a time (`kernels._elementwise`): each result is the
    one its element gives alone, whatever the array's size, shape or the chunk it falls in; and
    expit_pair is the two expit calls to the bit."""
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(3 * kernels.CHUNK + 17) * 30).reshape(-1, 1)
    positive = np.abs(x) + 1e-3
    for name in UNARY:
        fn = getattr(kernels, name)
        argument = positive if name in ("log", "normal_quantile") else x
        if name == "normal_quantile":
            argument = positive / (positive.max() + 1)
        whole = fn(argument)
        assert whole.shape == argument.shape
        pieces = np.concatenate([fn(part) for part in np.array_split(argument, 97)])
        assert whole.tobytes() == pieces.tobytes(), name
    powers = kernels.power(positive, x / 10)
    parts = zip(np.array_split(positive, 13), np.array_split(x, 13), strict=True)
    pieces = np.concatenate([kernels.power(a, b / 10) for a, b in parts])
    assert powers.tobytes() == pieces.tobytes()
    sigma, complement = kernels.expit_pair(x)
    assert sigma.tobytes() == kernels.expit(x).tobytes()
    assert complement.tobytes() == kernels.expit(-x).tobytes()
    small = x[:100]
    assert kernels.expit_pair(small)[1].tobytes() == kernels.expit(-small).tobytes()


@pytest.mark.parametrize("shape", [(24, 66), (3, 2), (1, 5), (kernels.CHUNK // 4 + 1, 5)])
def test_expit_pair_softplus_is_the_three_calls(shape: tuple[int, int]) -> None:
    """The fused table kernel gives the bits of expit(x), expit(-x) and softplus of the last two
    columns, at ordinary logits and at the extremes (both kernels' clamps, nan, infinities), on
    small inputs (one exponential) and large ones (taken as the three calls)."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal(shape) * 20
    extremes = [0.0, -0.0, 37.0, 37.5, -37.5, 709.0, -745.5, -746.0, 1e6, -1e6, np.inf, -np.inf, np.nan]
    flat = x.reshape(-1)
    flat[: len(extremes)] = extremes[: flat.size]
    x[:, -1] = np.resize(extremes, shape[0])
    positive, negative, rate = kernels.expit_pair_softplus(x, 2)
    assert positive.tobytes() == kernels.expit(x).tobytes()
    assert negative.tobytes() == kernels.expit(-x).tobytes()
    assert rate.shape == (shape[0], 2)
    assert rate.tobytes() == kernels.softplus(x[:, -2:]).tobytes()


def test_agrees_with_numpy_to_an_ulp_on_ordinary_inputs() -> None:
    """A cross-check against the ufuncs being replaced (independent of mpmath)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-30.0, 30.0, 5000)
    pos = np.exp(rng.uniform(-50.0, 50.0, 5000))
    pairs = [
        (kernels.exp(x), np.exp(x)),
        (kernels.expm1(x), np.expm1(x)),
        (kernels.log(pos), np.log(pos)),
        (kernels.log1p(pos), np.log1p(pos)),
        (kernels.softplus(x), np.logaddexp(0.0, x)),
        (kernels.power(pos, x / 30.0), np.power(pos, x / 30.0)),
    ]
    for ours, theirs in pairs:
        np.testing.assert_array_max_ulp(ours, theirs, maxulp=2)


# ----------------------------------------------------------------------------------------------------
# Identical bits under every SIMD setting numpy offers on this machine.

_DIGEST_SCRIPT = r"""
import hashlib, json, sys
import numpy as np
try:
    from numpy._core import _multiarray_umath as mu
except ImportError:  # numpy < 2
    from numpy.core import _multiarray_umath as mu
from toyrl import kernels
rng = np.random.default_rng(11)
# Inputs built without numpy's transcendentals (they differ between the settings, which is the point).
wide = np.ldexp(rng.uniform(0.5, 1.0, 20000), rng.integers(-1074, 1025, 20000).astype(np.int32))
x = np.concatenate([rng.uniform(-750, 750, 20000), rng.uniform(-3, 3, 20000), wide])
x = np.concatenate([x, -x[40000:]])
p = rng.uniform(0, 1, 20000)
h = hashlib.sha256()
for name in ["exp", "expm1", "log", "log1p", "softplus", "log_expit", "expit"]:
    h.update(getattr(kernels, name)(x).tobytes())
h.update(kernels.normal_quantile(p).tobytes())
h.update(kernels.power(np.abs(x[40000:60000]), x[20000:40000] * 10).tobytes())
ref = hashlib.sha256(np.exp(x).tobytes() + np.log(np.abs(x)).tobytes() + np.log1p(np.abs(x)).tobytes())
enabled = [f for f in mu.__cpu_dispatch__ if mu.__cpu_features__.get(f)]
print(json.dumps({"kernels": h.hexdigest(), "numpy": ref.hexdigest(), "enabled": enabled}))
"""


def _cpu_dispatch() -> tuple[list[str], dict[str, bool]]:
    try:
        mu = importlib.import_module("numpy._core._multiarray_umath")
    except ImportError:  # numpy < 2
        mu = importlib.import_module("numpy.core._multiarray_umath")
    return list(mu.__cpu_dispatch__), dict(mu.__cpu_features__)


def simd_settings() -> list[str]:
    """Values of NPY_DISABLE_CPU_FEATURES from 'everything numpy found' down to 'baseline only'.

    numpy lists its dispatch targets in implication order (X86_V3 < X86_V4 < AVX512_ICL ...; in numpy 1.x
    SSE41 ... AVX2 < AVX512F < AVX512_SKX ...), and a feature may be disabled only together with those
    that imply it, so each setting disables a suffix of the targets the CPU supports.
    """
    dispatch, features = _cpu_dispatch()
    found = [f for f in dispatch if features.get(f)]
    return [" ".join(found[i:]) for i in range(len(found), -1, -1)]


def test_identical_bits_under_every_simd_setting() -> None:
    env_base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES")
    }
    env_base["PYTHONPATH"] = os.pathsep.join([str(ROOT), env_base.get("PYTHONPATH", "")])
    results = {}
    for setting in simd_settings():
        env = dict(env_base, NPY_DISABLE_CPU_FEATURES=setting)
        proc = subprocess.run(
            [sys.executable, "-c", _DIGEST_SCRIPT], env=env, capture_output=True, text=True, timeout=240
        )
        assert proc.returncode == 0, f"NPY_DISABLE_CPU_FEATURES={setting!r}: {proc.stderr[-2000:]}"
        results[setting] = json.loads(proc.stdout.strip().splitlines()[-1])
    digests = {r["kernels"] for r in results.values()}
    assert len(digests) == 1, json.dumps(results, indent=1)
    # The settings really changed numpy's code paths: with AVX-512, numpy's own exp/log differ.
    _, features = _cpu_dispatch()
    if features.get("AVX512F") or features.get("AVX512_SKX") or features.get("X86_V4"):
        assert len({r["numpy"] for r in results.values()}) > 1, json.dumps(results, indent=1)
    assert results[""]["enabled"], "the unrestricted run should have dispatch targets enabled"


# ----------------------------------------------------------------------------------------------------
# JavaScript: bit-identical results from toyrl/explorer/kernels.js under node.

_NODE_SCRIPT = r"""
const fs = require("fs");
const K = require(process.argv[2]);
const spec = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
const raw = fs.readFileSync(process.argv[4]);
const data = new Float64Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
const out = new Float64Array(spec.total);
let at = 0;
for (const job of spec.jobs) {
  const f = K[job.fn];
  const n = job.n;
  if (job.fn === "power") {
    for (let i = 0; i < n; i++) out[job.offset + i] = f(data[job.x + i], data[job.y + i]);
  } else {
    for (let i = 0; i < n; i++) out[job.offset + i] = f(data[job.x + i]);
  }
  at += n;
}
fs.writeFileSync(process.argv[5], Buffer.from(out.buffer));
"""


def _js_inputs() -> dict[str, tuple[np.ndarray, ...]]:
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -1.0, 1.0, -1.5, 2.0, 0.5, 1e-320, -1e-320])
    inputs: dict[str, tuple[np.ndarray, ...]] = {}
    for name in UNARY:
        x = np.concatenate([grid(name), specials])
        if name != "normal_quantile":
            x = np.concatenate([x, -x])
        inputs[name] = (x,)
    xs, ys = power_grid()
    sx = np.array([0.0, -0.0, 1.0, np.nan, 2.0, np.inf, -2.0, 0.5, 2.0, 3.0, 1e-310, *[-0.0] * 8, 0.0, 0.0])
    sy = np.array([0.0, 2.0, np.nan, 0.0, np.nan, -1.0, 0.5, np.inf, -np.inf, 1.0, 1.0])
    sy = np.concatenate([sy, [3.0, -3.0, -2.0, 0.5, -2.5, 2.0**53 - 1, np.inf, -np.inf, 3.0, -3.0]])
    inputs["power"] = (np.concatenate([xs, sx]), np.concatenate([ys, sy]))
    return inputs


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def test_javascript_is_bit_identical(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            raise RuntimeError("CI needs node for the JavaScript kernels; .ci/run installs it")
        pytest.skip("node is not installed: the JavaScript kernels cannot be run here")
    inputs = _js_inputs()
    chunks: list[np.ndarray] = []
    jobs: list[dict[str, Any]] = []
    pos = 0
    total = 0
    for name, arrays in inputs.items():
        job: dict[str, Any] = {"fn": JS_NAMES[name], "n": len(arrays[0]), "offset": total, "x": pos}
        chunks.append(arrays[0])
        pos += len(arrays[0])
        if len(arrays) == 2:
            job["y"] = pos
            chunks.append(arrays[1])
            pos += len(arrays[1])
        total += len(arrays[0])
        jobs.append(job)
    (tmp_path / "run.js").write_text(_NODE_SCRIPT)
    (tmp_path / "spec.json").write_text(json.dumps({"jobs": jobs, "total": total}))
    np.concatenate(chunks).astype("=f8").tofile(tmp_path / "in.bin")
    proc = subprocess.run(
        [
            node,
            str(tmp_path / "run.js"),
            str(JS_SOURCE),
            str(tmp_path / "spec.json"),
            str(tmp_path / "in.bin"),
            str(tmp_path / "out.bin"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    js_out = np.fromfile(tmp_path / "out.bin", dtype="=f8")
    assert js_out.shape == (total,)
    for name, job in zip(inputs, jobs, strict=True):
        arrays = inputs[name]
        py = kernels.power(*arrays) if name == "power" else getattr(kernels, name)(arrays[0])
        js = js_out[job["offset"] : job["offset"] + job["n"]]
        bad = np.nonzero(_bits(py) != _bits(js))[0]
        if bad.size:
            i = int(bad[0])
            args = ", ".join(repr(float(a[i])) for a in arrays)
            pytest.fail(
                f"{name}({args}): python {py[i]!r} ({_bits(py)[i]:#018x}) != js {js[i]!r} "
                f"({_bits(js)[i]:#018x}); {bad.size} of {len(js)} differ"
            )


def test_javascript_file_is_page_safe() -> None:
    text = JS_SOURCE.read_text()
    assert "</script" not in text.lower()
    assert text.lstrip().startswith("/*") and '"use strict";' in text
    assert "const toyrlKernels = (function () {" in text
    assert 'if (typeof module !== "undefined") module.exports = toyrlKernels;' in text


# ----------------------------------------------------------------------------------------------------
# No transcendental library calls in either source.

_PY_FORBIDDEN_ATTRS = {
    "exp",
    "exp2",
    "expm1",
    "log",
    "log2",
    "log10",
    "log1p",
    "logaddexp",
    "logaddexp2",
    "power",
    "float_power",
    "sin",
    "cos",
    "tan",
    "sinh",
    "cosh",
    "tanh",
    "arcsin",
    "arccos",
    "arctan",
    "arctan2",
    "arcsinh",
    "arccosh",
    "arctanh",
    "cbrt",
    "hypot",
    "pow",
    "erf",
    "erfc",
    "expit",
    "logit",
}
_PY_NUMPY_NAMES = {"np", "numpy"}


def python_transcendental_calls(source: str) -> list[str]:
    """Uses of transcendental functions in Python source (comments and strings ignored)."""
    problems = []
    toks = [
        t
        for t in tokenize.generate_tokens(io.StringIO(source).readline)
        if t.type not in (tokenize.COMMENT, tokenize.STRING, tokenize.NL, tokenize.NEWLINE)
    ]
    for i, tok in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if tok.type == tokenize.NAME and tok.string in ("math", "cmath", "scipy", "mpmath", "torch"):
            problems.append(f"line {tok.start[0]}: {tok.string}")
        if (
            tok.type == tokenize.NAME
            and tok.string in _PY_NUMPY_NAMES
            and nxt is not None
            and nxt.string == "."
        ):
            attr = toks[i + 2].string if i + 2 < len(toks) else ""
            if attr in _PY_FORBIDDEN_ATTRS:
                problems.append(f"line {tok.start[0]}: {tok.string}.{attr}")
        if tok.string == "from" and nxt is not None and nxt.string.split(".")[0] == "numpy":
            names = [t.string for t in toks[i + 2 :] if t.start[0] == tok.start[0]]
            problems += [
                f"line {tok.start[0]}: from numpy import {n}" for n in names if n in _PY_FORBIDDEN_ATTRS
            ]
        if tok.type == tokenize.OP and tok.string in ("**", "**="):
            ok = nxt is not None and nxt.type == tokenize.NUMBER and re.fullmatch(r"\d+", nxt.string)
            if not ok:
                problems.append(f"line {tok.start[0]}: ** with exponent {nxt.string if nxt else ''!r}")
    return problems


def _strip_js(source: str) -> str:
    """JavaScript without comments and string literals (the kernels have no regex literals)."""
    pattern = r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|`(?:\\.|[^`\\])*`"
    return re.sub(pattern, " ", source, flags=re.S)


def js_transcendental_calls(source: str) -> list[str]:
    code = _strip_js(source)
    problems = [
        m.group(0)
        for m in re.finditer(r"\bMath\s*\.\s*(\w+)", code)
        if m.group(1) not in ("sqrt", "floor", "abs")
    ]
    problems += ["**" for _ in re.finditer(r"\*\*", code)]
    return problems


def test_sources_call_no_transcendentals() -> None:
    assert python_transcendental_calls(PY_SOURCE.read_text()) == []
    assert js_transcendental_calls(JS_SOURCE.read_text()) == []


def test_source_scan_detects_violations() -> None:
    bad_py = "import numpy as np\nimport math\ny = np.exp(x) + np.log1p(x) ** 0.5 + x ** k + math.pi\n"
    assert len(python_transcendental_calls(bad_py)) == 6
    assert (
        len(python_transcendental_calls("from numpy import exp, sqrt\nimport numpy\nz = numpy.power(x, y)\n"))
        == 2
    )
    assert python_transcendental_calls("y = x ** 2  # np.exp in a comment\ns = 'np.log'\n") == []
    bad_js = "const y = Math.exp(x) + Math.pow(x, 2) + x ** 0.5 + Math.sqrt(x); // Math.log\n"
    assert len(js_transcendental_calls(bad_js)) == 3
