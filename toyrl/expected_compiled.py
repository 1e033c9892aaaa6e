"""The mean-field update's sums compiled by numba: the same bits as `toyrl.expected`'s numpy, a run at a time.

`toyrl.expected._length_sums` forms [R, cap] arrays, P(K = k) by blocks (`toyrl.expected.geometric_pmf`),
the score 1 - k s, the weights scale P / D and scale P score / D and their products with the window's
masks, and sums each row with ``ndarray.sum(-1)``; `toyrl.expected._mean_advantage` forms the [R, P, G]
probabilities of the other group members' successes (`binomial_pmf`) and sums their products with the
advantage's values over the group. Here each row is formed in a buffer by the
same IEEE-754 operations in the same order per element (the kernels are `toyrl.kernels_compiled`'s
per-element twins), and summed in numpy's own order: ``sum(-1)`` of a C-contiguous float64 row is
``0.0 + pairwise_sum(row)`` (numpy/_core/src/umath/loops_utils.h.src; measured, not assumed:
tests/test_expected_compiled.py compares the bits on many lengths and values under every numpy SIMD
setting). Compiled with fastmath off (`toyrl.kernels_compiled.OPTIONS`): no fused multiply-add, no
reassociation. A nan sum may differ from numpy's in its sign bit: which of two nans an addition
returns is the compiler's choice of operand order, in numpy's C as here (and a run with a nan stops).
Not imported by ``import toyrl``: `toyrl.expected` imports it through
`toyrl.kernels.compiled_module` when the compiled path is on.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from toyrl.expected import PMF_BLOCK, log_choose
from toyrl.kernels_compiled import (
    OPTIONS,
    STACK,
    _exp,
    _expit,
    _log,
    _log1p,
    _log_expit,
    row_sum,
)
from toyrl.policy import SCORE_EXACT_ABOVE

jit = numba.njit(**OPTIONS)


@jit
def row_sums(rows: Any, out: Any) -> None:
    """out[r] = rows[r].sum() for a C-contiguous [R, n] array, as ``rows.sum(-1)``."""
    stack, left = np.empty((STACK, 3), np.int64), np.empty(STACK)
    for r in range(rows.shape[0]):
        out[r] = row_sum(rows[r], stack, left)


@jit
def _branch_sums(
    stop_logit: Any, denominator: Any, scale: Any, low: float, high: float, windowed: bool, out: Any
) -> None:
    """`toyrl.expected._length_sums` per run r: out[r] = (weight, scored) or, `windowed`,
    (weight_in, scored_in, weight_out, scored_out), "in" for low <= k <= high. denominator
    [1 or R, cap] is D(k), the normaliser's hook. Per element, the operations of numpy's passes in
    their order; each sum over a whole row of cap, masked elements included, as numpy's."""
    cap = denominator.shape[1]
    blocks = -(-cap // PMF_BLOCK)
    within, first, pmf = np.empty(PMF_BLOCK), np.empty(blocks), np.empty(blocks * PMF_BLOCK)
    rows = np.empty((4, cap))
    stack, left = np.empty((STACK, 3), np.int64), np.empty(STACK)
    k = np.arange(1, cap + 1).astype(np.float64)
    inside = ((k >= low) & (k <= high)).astype(np.float64)  # numpy's boolean masks as doubles: 1.0, 0.0
    outside = 1.0 - inside
    for r in range(len(stop_logit)):
        phi = stop_logit[r]
        # geometric_pmf: s q^(k - 1) = exp(log s + PMF_BLOCK j log q) exp(i log q), k - 1 = PMF_BLOCK j + i
        log_s, log_q = _log_expit(phi), _log_expit(-phi)
        for i in range(PMF_BLOCK):
            within[i] = _exp(float(i) * log_q)
        for j in range(blocks):
            first[j] = _exp(log_s + (float(j) * PMF_BLOCK) * log_q)
        for j in range(blocks):
            for i in range(PMF_BLOCK):
                pmf[j * PMF_BLOCK + i] = first[j] * within[i]
        s, sc = _expit(phi), scale[r]
        d = denominator[r if denominator.shape[0] > 1 else 0]
        # scale P / D and scale P (1 - k s) / D; times a scale of 1, which numpy's path skips, is exact
        if windowed:
            for i in range(cap):
                p = sc * pmf[i]
                scored, weight = (p * (1.0 - k[i] * s)) / d[i], p / d[i]
                rows[0, i], rows[1, i] = weight * inside[i], scored * inside[i]
                rows[2, i], rows[3, i] = weight * outside[i], scored * outside[i]
        else:
            for i in range(cap):
                p = sc * pmf[i]
                rows[0, i], rows[1, i] = p / d[i], (p * (1.0 - k[i] * s)) / d[i]
        if phi > SCORE_EXACT_ABOVE:  # as _length_sums: the score sigma(-phi), not 1 - s rounded to 0
            scored = ((sc * pmf[0]) * _expit(-phi)) / d[0]
            if windowed:
                rows[1, 0], rows[3, 0] = scored * inside[0], scored * outside[0]
            else:
                rows[1, 0] = scored
        for column in range(out.shape[1]):
            out[r, column] = row_sum(rows[column], stack, left)


def branch_sums(
    stop_logit: np.ndarray, denominator: np.ndarray, scale: np.ndarray, window: tuple[int, int] | None
) -> dict[str, np.ndarray]:
    """The sums over stopped lengths of `toyrl.expected._branch_sums` ([R] each; the caller adds the
    truncation atom): stop_logit [R], denominator D(k) [cap] or [R, cap], scale [R]."""
    runs = len(stop_logit)
    d = np.asarray(denominator, dtype=np.float64)
    d = np.ascontiguousarray(d.reshape(-1, d.shape[-1]))
    out = np.empty((runs, 2 if window is None else 4))
    low, high = (1.0, 0.0) if window is None else (float(window[0]), float(window[1]))
    logits = np.ascontiguousarray(stop_logit, dtype=np.float64)
    _branch_sums(logits, d, np.ascontiguousarray(scale, dtype=np.float64), low, high, window is not None, out)
    names = ("weight", "scored") if window is None else ("weight_in", "scored_in", "weight_out", "scored_out")
    return {name: out[:, column] for column, name in enumerate(names)}


@jit
def _binomial_row(log_coefficient: Any, k: Any, n: float, p: float, out: Any) -> None:
    """`toyrl.expected.binomial_pmf` for one p: out[g] = P(Binomial(n, p) = k[g]), with
    log_coefficient[g] = log C(n, k[g])."""
    log_p, log_not = _log(p), _log1p(-p)
    for g in range(len(k)):
        successes = 0.0 if k[g] == 0.0 else k[g] * log_p
        failures = 0.0 if n - k[g] == 0.0 else (n - k[g]) * log_not
        out[g] = _exp((log_coefficient[g] + successes) + failures)


@jit
def _mean_advantage(log_coefficient: Any, k: Any, n: float, p: Any, conditional: Any, out: Any) -> None:
    """out[r, m] = sum_g P(Binomial(n, p[m]) = k[g]) conditional[r, g], each sum numpy's."""
    pmf, products = np.empty(len(k)), np.empty(len(k))
    stack, left = np.empty((STACK, 3), np.int64), np.empty(STACK)
    for m in range(len(p)):
        _binomial_row(log_coefficient, k, n, p[m], pmf)
        for r in range(2):
            for g in range(len(k)):
                products[g] = pmf[g] * conditional[r, g]
            out[r, m] = row_sum(products, stack, left)


def mean_advantage(
    others: np.ndarray, n: int, success_rate: np.ndarray, correct: np.ndarray, incorrect: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`toyrl.expected._mean_advantage`'s sums: (sum_k' P(k') A(1, k'), sum_k' P(k') A(0, k')) [...]
    for k' = others [G] ~ Binomial(n, success_rate [...]), from the advantage hook's values correct,
    incorrect [G] (A(r, k') for r = 1, 0)."""
    conditional = np.ascontiguousarray(np.stack([correct, incorrect]), dtype=np.float64)
    out = np.empty((2, *np.shape(success_rate)))
    rates = np.ascontiguousarray(success_rate, dtype=np.float64).reshape(-1)
    _mean_advantage(log_choose(others, n), others, float(n), rates, conditional, out.reshape(2, -1))
    return out[0], out[1]
