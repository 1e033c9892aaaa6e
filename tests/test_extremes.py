"""Numerical extremes: closed forms against 60-digit references, finite numbers at logits of +-40."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.config import Config
from toyrl.expected import expected_update, true_gradient
from toyrl.objective import VARIANTS
from toyrl.policy import exact_metrics, expected_length, sample_batch, stop_within, truncated_mean

mpmath = pytest.importorskip(
    "mpmath", reason="the high-precision references need mpmath (pip install mpmath)"
)
mpmath.mp.dps = 60
EXTREME_LOGITS = [-40.0, -20.0, -5.0, 0.0, 5.0, 20.0, 40.0]


def reference_geometric(phi: float, n: int):
    """(P(K <= n), E[min(K, n)], E[K | K <= n]) at 60 digits."""
    s = 1 / (1 + mpmath.exp(-mpmath.mpf(phi)))
    q = 1 - s
    within = 1 - q**n
    return within, within / s, 1 / s - n * q**n / within


@pytest.mark.parametrize("phi", EXTREME_LOGITS)
@pytest.mark.parametrize("n", [1, 99, 1500, 100_000])
def test_closed_forms_at_extreme_logits_against_60_digit_references(phi: float, n: int) -> None:
    within, length, mean = (float(v) for v in reference_geometric(phi, n))
    logit = np.array(phi)
    assert float(stop_within(n, logit)) == pytest.approx(within, rel=1e-13, abs=0)
    assert float(expected_length(logit, n)) == pytest.approx(length, rel=1e-13)
    assert float(truncated_mean(n, logit)) == pytest.approx(mean, rel=1e-12)


@pytest.mark.parametrize("psi", [-40.0, 0.0, 40.0])
@pytest.mark.parametrize("phi", [-40.0, 0.0, 40.0])
def test_exact_metrics_and_updates_stay_finite_at_the_extremes(psi: float, phi: float) -> None:
    config = Config(prompts=4, batch_prompts=2)
    theta = np.array([[psi] * 4 + [phi, -phi]])
    metrics = exact_metrics(theta, config.cap, config.min_length)
    assert all(np.isfinite(values).all() for values in metrics.values())
    assert 0 <= metrics["accuracy"][0] <= 1 and 1 <= metrics["length_mean"][0] <= config.cap
    update = expected_update(np.repeat(theta, 4, axis=0), config, list(VARIANTS.values()))
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
