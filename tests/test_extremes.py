"""Numerical extremes: closed forms against high-precision references, finite numbers at any logit.

References are mpmath at 60 digits (120 where a difference cancels). Tolerances, where the
reference is at least 1e-300: relative 1e-13 for P(K <= n), its log and E[min(K, n)], 1e-12 for
E[K | K <= n] and every `exact_metrics` value (the largest error measured is 5e-14). Below 1e-300
(a probability that underflows: subnormal or 0 in float64), absolute 1e-300.
"""

import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.config import Config
from toyrl.expected import expected_update, true_gradient
from toyrl.experiment import run_experiment
from toyrl.policy import (
    Coefficients,
    TokenTable,
    exact_metrics,
    expected_length,
    log_stop_within,
    policy_gradient,
    sample_batch,
    stop_within,
    survival,
    truncated_mean,
)
from toyrl.train import EXACT_COLUMNS
from toyrl.variants import article_variants

try:
    import mpmath
except ImportError:  # the references need it; the other checks do not
    mpmath = None
else:
    mpmath.mp.dps = 60
needs_mpmath = pytest.mark.skipif(
    mpmath is None, reason="the high-precision references need mpmath (pip install mpmath)"
)

EXTREME_LOGITS = [-40.0, -20.0, -5.0, 0.0, 5.0, 20.0, 40.0]
# From s = e^-1e6 to 1 - e^-1e6: softplus(phi) is 0 below about -745 and subnormal down from -708.
HUGE_LOGITS = [-1e6, -1e4, -1000.0, -800.0, -745.5, -720.0, -700.0, 700.0, 800.0, 1e4, 1e6]
TINY_REFERENCE = 1e-300  # below it, probabilities are compared absolutely
LENGTHS = [
    "length_mean",
    "length_correct",
    "length_incorrect",
    "length_right_approach",
    "length_wrong_approach",
]
PROBABILITIES = ["accuracy", "p_right_approach", "stop_prob_right", "stop_prob_wrong"]


def mp_softplus(phi: float):
    phi = mpmath.mpf(phi)
    return phi + mpmath.log1p(mpmath.exp(-phi)) if phi > 0 else mpmath.log1p(mpmath.exp(phi))


def mp_truncated_mean(n: int, y):
    """E[K | K <= n] at y = softplus(phi): 1/s - n/(e^(n y) - 1), or its series where that cancels."""
    if n * y < mpmath.mpf(10) ** -20:  # next term O(n^6 y^5), below 1e-100 relative
        return mpmath.mpf(n + 1) / 2 - (n**2 - 1) * y / 12 + (mpmath.mpf(n) ** 4 - 1) * y**3 / 720
    with mpmath.workdps(120):  # 1/s is at most 1e27 here: 90 digits survive the difference
        return 1 / -mpmath.expm1(-y) - n / mpmath.expm1(n * y)


def reference_geometric(phi: float, n: int):
    """(P(K <= n), E[min(K, n)], E[K | K <= n]) at 60 digits, from y = softplus(phi) (any phi)."""
    y = mp_softplus(phi)
    within = -mpmath.expm1(-n * y)
    return within, within / -mpmath.expm1(-y), mp_truncated_mean(n, y)


def reference_metrics(psi: list[float], phi_right: float, phi_wrong: float, cap: int, min_length: int):
    """Every `exact_metrics` value as an mpmath number, from the definitions (no underflow in mpmath)."""

    def sigma(v: float):
        return 1 / (1 + mpmath.exp(-mpmath.mpf(v)))

    m = min_length
    y_right, y_wrong = mp_softplus(phi_right), mp_softplus(phi_wrong)
    p_right = mpmath.fsum(sigma(v) for v in psi) / len(psi)
    p_wrong = mpmath.fsum(sigma(-v) for v in psi) / len(psi)
    length_right = -mpmath.expm1(-cap * y_right) / -mpmath.expm1(-y_right)
    length_wrong = -mpmath.expm1(-cap * y_wrong) / -mpmath.expm1(-y_wrong)
    short = -mpmath.expm1(-(m - 1) * y_right)
    short_length = short * mp_truncated_mean(m - 1, y_right) if m > 1 else 0
    truncated = mpmath.exp(-cap * y_right)
    return {
        "accuracy": p_right * mpmath.exp(-(m - 1) * y_right) * -mpmath.expm1(-(cap - m + 1) * y_right),
        "length_mean": p_right * length_right + p_wrong * length_wrong,
        "length_correct": m - 1 + mp_truncated_mean(cap - m + 1, y_right),
        "length_incorrect": (p_wrong * length_wrong + p_right * (short_length + cap * truncated))
        / (p_wrong + p_right * (short + truncated)),
        "length_right_approach": length_right,
        "length_wrong_approach": length_wrong,
        "p_right_approach": p_right,
        "stop_prob_right": sigma(phi_right),
        "stop_prob_wrong": sigma(phi_wrong),
    }


def close(value: float, reference, rel: float) -> bool:
    if abs(reference) < TINY_REFERENCE:
        return abs(value - float(reference)) <= TINY_REFERENCE
    return abs((mpmath.mpf(value) - reference) / reference) <= rel


@needs_mpmath
@pytest.mark.parametrize("phi", EXTREME_LOGITS)
@pytest.mark.parametrize("n", [1, 99, 1500, 100_000])
def test_closed_forms_at_extreme_logits_against_60_digit_references(phi: float, n: int) -> None:
    within, length, mean = (float(v) for v in reference_geometric(phi, n))
    logit = np.array(phi)
    assert float(stop_within(n, logit)) == pytest.approx(within, rel=1e-13, abs=0)
    assert float(expected_length(logit, n)) == pytest.approx(length, rel=1e-13)
    assert float(truncated_mean(n, logit)) == pytest.approx(mean, rel=1e-12)


@needs_mpmath
@pytest.mark.parametrize("phi", HUGE_LOGITS)
@pytest.mark.parametrize("n", [1, 99, 1500, 100_000])
def test_closed_forms_hold_their_limits_at_huge_logits(phi: float, n: int) -> None:
    within, length, mean = reference_geometric(phi, n)
    logit = np.array(phi)
    assert close(float(stop_within(n, logit)), within, rel=1e-13)
    assert close(float(log_stop_within(n, logit)), mpmath.log(within), rel=1e-13)
    assert close(float(expected_length(logit, n)), length, rel=1e-13)
    assert close(float(truncated_mean(n, logit)), mean, rel=1e-12)


def crossover_logits(cap: int, min_length: int) -> list[float]:
    """phi_right where, with psi = 1000, a part of the incorrect responses weighs about e^-1000 as
    the wrong approach does: truncated (cap softplus(phi) = 1000), or stopped short (phi ~ -1000)."""
    y = 1000 / cap
    short = math.log(max(min_length - 1, 1))
    return [y + math.log(-math.expm1(-y)), -1000 - short, -1003 - short]


@needs_mpmath
@pytest.mark.parametrize(
    "cap, min_length", [(1500, 100), (1500, 1), (1500, 1500), (10, 5), (1, 1), (100_000, 10)]
)
@pytest.mark.parametrize("psi", [[-1e3], [1e3], [1e3, -1e3, 0.0], [1e3, 999.0]])
def test_exact_metrics_at_huge_logits_against_references(cap: int, min_length: int, psi: list[float]) -> None:
    failures = []
    for phi_right in [-1e6, -1e4, -800.0, -745.5, -720.0, -40.0, -1.0, 0.0, 5.0, 40.0, 800.0, 1e6]:
        for phi_wrong in [-1e6, -800.0, 0.0, 1e6]:
            theta = np.array([[*psi, phi_right, phi_wrong]])
            metrics = exact_metrics(theta, cap, min_length)
            reference = reference_metrics(psi, phi_right, phi_wrong, cap, min_length)
            failures += [
                (name, phi_right, phi_wrong, float(metrics[name][0]), float(reference[name]))
                for name in reference
                if not close(float(metrics[name][0]), reference[name], rel=1e-12)
            ]
    for phi_right in crossover_logits(cap, min_length):
        theta = np.array([[*psi, phi_right, 0.0]])
        metrics = exact_metrics(theta, cap, min_length)
        reference = reference_metrics(psi, phi_right, 0.0, cap, min_length)
        failures += [
            (name, phi_right, 0.0, float(metrics[name][0]), float(reference[name]))
            for name in reference
            if not close(float(metrics[name][0]), reference[name], rel=1e-12)
        ]
    assert not failures


def check_metric_bounds(metrics: dict[str, np.ndarray], cap: int, min_length: int) -> None:
    for name, values in metrics.items():
        assert np.isfinite(values).all(), name
    for name in PROBABILITIES:
        assert ((metrics[name] >= 0) & (metrics[name] <= 1)).all(), name
    for name in LENGTHS:
        low = min_length if name == "length_correct" else 1
        assert ((metrics[name] >= low) & (metrics[name] <= cap)).all(), (name, metrics[name])


# The whole float64 range, with the logits where the closed forms switch regime drawn often.
finite_logits = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(-1e3, 1e3),
    st.sampled_from([-1e6, -800.0, -745.5, -720.0, -40.0, 0.0, 40.0, 470.0, 800.0, 1e6]),
)


@settings(max_examples=300, deadline=None)
@given(
    theta=arrays(np.float64, st.tuples(st.integers(1, 3), st.integers(3, 6)), elements=finite_logits),
    cap=st.integers(1, 10_000_000),
    data=st.data(),
)
def test_metrics_are_finite_and_in_bounds_at_any_finite_logit(theta: np.ndarray, cap: int, data) -> None:
    min_length = data.draw(st.one_of(st.just(1), st.just(cap), st.integers(1, cap)), label="min_length")
    # P(incorrect) underflows only when every psi_j is above about 460 (and min_length is 1, and
    # cap softplus(phi_right) above about 460): one psi for all prompts, often.
    if data.draw(st.booleans(), label="one psi for all prompts"):
        theta[:, :-2] = theta[:, :1]
    phi = theta[:, -2]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow or invalid-value warnings either
        metrics = exact_metrics(theta, cap, min_length)
        geometric = {
            "survival": survival(cap, phi),
            "stop_within": stop_within(cap, phi),
            "log_stop_within": log_stop_within(cap, phi),
            "expected_length": expected_length(phi, cap),
            "truncated_mean": truncated_mean(cap, phi),
        }
        shape = (theta.shape[0], 1, 4)
        exponential = np.array([0.0, 1e-300, 1.0, 1e300])  # an Exp(1) draw of 0 included
        batch = sample_batch(
            theta,
            np.zeros((theta.shape[0], 1), dtype=np.intp),
            np.full(shape, 0.5),
            np.broadcast_to(exponential, shape),
            cap,
        )
        table = TokenTable.of(theta)
        scores = (
            table.approach_score(batch),
            table.ramble_score(batch),
            table.stop_score(batch),
            policy_gradient(Coefficients(np.ones(shape)), batch, table),
        )
    check_metric_bounds(metrics, cap, min_length)
    assert all(np.isfinite(values).all() for values in geometric.values())
    for name in ("survival", "stop_within"):
        assert ((geometric[name] >= 0) & (geometric[name] <= 1)).all()
    assert (geometric["log_stop_within"] <= 0).all()
    assert ((geometric["expected_length"] >= 1) & (geometric["expected_length"] <= cap)).all()
    assert ((geometric["truncated_mean"] >= 1) & (geometric["truncated_mean"] <= (cap + 1) / 2)).all()
    assert batch.length.min() >= 1 and batch.length.max() <= cap
    assert (batch.stopped | (batch.length == cap)).all()
    assert all(np.isfinite(values).all() for values in scores)


@pytest.mark.parametrize("lr", [10.0, 1000.0])
@pytest.mark.parametrize("exact", [False, True])
def test_large_learning_rates_keep_exact_columns_finite_and_in_bounds(lr: float, exact: bool) -> None:
    # lr 10 drives stop probabilities to 1e-29 (lengths that rounded to cap + 2e-13 before); lr 1000
    # past e^-745, where s = 0 in float64 (NaN lengths before).
    config = Config(prompts=4, batch_prompts=2, group_size=4, steps=60, lr=lr)
    frame = run_experiment(config, ["grpo", "dr_grpo"], [0, 1], mean_field=exact)
    metrics = {name: frame[name].to_numpy() for name in EXACT_COLUMNS}
    check_metric_bounds(metrics, config.cap, config.min_length)
    assert np.isfinite(frame["grad_norm"]).all()
    if lr == 1000.0:
        assert (metrics["stop_prob_wrong"] == 0).any()  # the regime the fix is for is reached


def test_sampling_and_scores_at_stop_probabilities_beyond_float64() -> None:
    # phi_right = -800: s = 0, so every right-approach response is truncated, even with an Exp(1)
    # draw of 0 (0 / 0 before); phi_wrong = 40: one token, whose stop score 1 - s = sigma(-40) is
    # 4e-18, not the 0 that 1 - sigma(40) rounds to.
    theta = np.array([[50.0, -50.0, -800.0, 40.0]])
    shape = (1, 2, 3)
    batch = sample_batch(
        theta,
        np.array([[0, 1]]),
        np.full(shape, 0.5),
        np.broadcast_to(np.array([0.0, 1.0, 30.0]), shape),
        cap=20,
    )
    assert batch.right[0, 0].all() and not batch.right[0, 1].any()
    assert (batch.length[0, 0] == 20).all() and not batch.stopped[0, 0].any()
    assert (batch.length[0, 1] == 1).all() and batch.stopped[0, 1].all()
    table = TokenTable.of(theta)
    approach, stop = table.approach_score(batch), table.ramble_score(batch)
    np.testing.assert_allclose(approach[0, 0], math.exp(-50.0), rtol=1e-15)  # 1 - sigma(50)
    np.testing.assert_allclose(stop[0, 1], math.exp(-40.0), rtol=1e-15)


@pytest.mark.parametrize("psi", [-40.0, 0.0, 40.0])
@pytest.mark.parametrize("phi", [-40.0, 0.0, 40.0])
def test_exact_metrics_and_updates_stay_finite_at_the_extremes(psi: float, phi: float) -> None:
    config = Config(prompts=4, batch_prompts=2)
    theta = np.array([[psi] * 4 + [phi, -phi]])
    metrics = exact_metrics(theta, config.cap, config.min_length)
    assert all(np.isfinite(values).all() for values in metrics.values())
    assert 0 <= metrics["accuracy"][0] <= 1 and 1 <= metrics["length_mean"][0] <= config.cap
    update = expected_update(np.repeat(theta, 4, axis=0), config, list(article_variants()))
    assert (
        np.isfinite(update).all() and np.isfinite(true_gradient(theta, config.cap, config.min_length)).all()
    )
    rng = np.random.default_rng(0)
    shape = (1, 2, 8)
    batch = sample_batch(
        theta, np.array([[0, 1]]), rng.random(shape), rng.standard_exponential(shape), config.cap
    )
    assert batch.length.min() >= 1 and batch.length.max() <= config.cap
    # Stop probabilities of 1e-17 and 1 - 1e-17: every response truncated, or one token long.
    if phi == -40.0:
        assert not batch.stopped[batch.right].any()
    if phi == 40.0:
        assert (batch.length[batch.right] == 1).all()


@pytest.mark.parametrize(
    "args", [["--lr", "1.0"], ["--cap", "1", "--min-length", "1"], ["--stop-prob-right", "1e-17"]]
)
def test_odd_settings_finish_with_finite_numbers(tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "odd.csv"
    result = CliRunner().invoke(
        app, ["run", "--steps", "200", "--seeds", "2", "-q", *args, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    frame = pd.read_csv(out)
    exact = frame[
        ["accuracy", "length_mean", "length_correct", "length_incorrect", "p_right_approach", "grad_norm"]
    ]
    assert np.isfinite(exact.to_numpy()).all()
