"""The variants' advantages and per-token weights: the article's worked example and properties."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toyrl.config import InvalidInput
from toyrl.objective import VARIANTS, advantages, parse_variants, variant_weights

# Article, "Worked example by hand": G = 8, two correct; a correct answer of 200 tokens, a wrong
# one of 800, Dr. GRPO's L_norm = 2000.
REWARDS = np.array([1, 1, 0, 0, 0, 0, 0, 0], dtype=float)
TOKENS = np.array([200, 200, 800, 800, 800, 800, 800, 800], dtype=float)
L_NORM = 2000.0


def test_worked_example_advantages_to_the_printed_digits() -> None:
    assert round(float(REWARDS.std()), 3) == 0.433  # population std
    scaled = advantages(REWARDS, True, eps=0.0)
    assert (round(scaled[0], 3), round(scaled[-1], 3)) == (1.732, -0.577)
    centred = advantages(REWARDS, False, eps=0.0)
    assert (centred[0], centred[-1]) == (0.75, -0.25)


@pytest.mark.parametrize(
    ("name", "correct", "wrong"),
    [
        ("grpo", np.sqrt(3) / 200, -1 / np.sqrt(3) / 800),
        ("std_only", np.sqrt(3) / L_NORM, -1 / np.sqrt(3) / L_NORM),
        ("length_only", 0.75 / 200, -0.25 / 800),
        ("dr_grpo", 0.75 / L_NORM, -0.25 / L_NORM),
    ],
)
def test_worked_example_weights_of_every_variant(name: str, correct: float, wrong: float) -> None:
    weights = variant_weights(VARIANTS[name], REWARDS, TOKENS, eps=0.0, length_norm=L_NORM)
    np.testing.assert_allclose(weights[[0, -1]], [correct, wrong], rtol=1e-12)


def test_worked_example_conclusions() -> None:
    grpo = variant_weights(VARIANTS["grpo"], REWARDS, TOKENS, eps=0.0, length_norm=L_NORM)
    assert (round(grpo[0], 5), round(grpo[-1], 5)) == (0.00866, -0.00072)
    assert grpo[0] / -grpo[-1] == pytest.approx(12.0)  # "twelve times more gently"
    dr = variant_weights(VARIANTS["dr_grpo"], REWARDS, TOKENS, eps=0.0, length_norm=L_NORM)
    assert (dr[0], dr[-1]) == (0.000375, -0.000125)
    short_wrong = variant_weights(VARIANTS["dr_grpo"], REWARDS, [200] * 8, eps=0.0, length_norm=L_NORM)[-1]
    assert dr[-1] * 800 / (short_wrong * 200) == pytest.approx(4.0)  # "four times the total push-down"


@given(
    rewards=st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=64),
    scale=st.floats(0.1, 100.0),
)
def test_advantage_properties(rewards: list[float], scale: float) -> None:
    r = np.array(rewards)
    centred = advantages(r, False, eps=0.0)
    assert abs(centred.sum()) < 1e-9
    np.testing.assert_allclose(advantages(scale * r, False, eps=0.0), scale * centred, atol=1e-9)
    if r.std() > 0:
        scaled = advantages(r, True, eps=0.0)
        np.testing.assert_allclose(advantages(scale * r, True, eps=0.0), scaled, atol=1e-9)
        assert scaled.std() == pytest.approx(1.0)
    else:
        assert np.all(advantages(r, True, eps=1e-6) == 0)


def test_per_run_switches_broadcast_over_groups() -> None:
    rewards = np.array([[[1.0, 0.0, 0.0, 0.0]], [[1.0, 0.0, 0.0, 0.0]]])
    switches = np.array([True, False])[:, None, None]
    result = advantages(rewards, switches, eps=0.0)
    np.testing.assert_allclose(result[0], advantages(rewards[0], True, eps=0.0))
    np.testing.assert_allclose(result[1], advantages(rewards[1], False, eps=0.0))


def test_parse_variants() -> None:
    assert parse_variants(["all"]) == ["grpo", "std_only", "length_only", "dr_grpo"]
    assert parse_variants(["dr_grpo", "grpo", "dr_grpo"]) == ["grpo", "dr_grpo"]
    with pytest.raises(InvalidInput, match="unknown variant 'drgrpo'; valid: grpo, std_only"):
        parse_variants(["drgrpo"])
