"""The worked examples: every number the source texts print, to the digits printed."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.examples import (
    EXAMPLES,
    difficulty_example,
    difficulty_profiles,
    expected_estimators,
    four_responses_example,
    length_example,
    token_weight_curves,
)


def test_length_example_to_the_articles_digits() -> None:
    n = length_example().numbers
    assert round(n["group_std"], 3) == 0.433
    assert (round(n["grpo_advantage_correct"], 3), round(n["grpo_advantage_wrong"], 3)) == (1.732, -0.577)
    assert (round(n["grpo_weight_correct"], 5), round(n["grpo_weight_wrong_800"], 5)) == (0.00866, -0.00072)
    assert round(n["grpo_gentleness"]) == 12  # "twelve times more gently"
    assert (n["dr_advantage_correct"], n["dr_advantage_wrong"]) == (0.75, -0.25)
    assert (n["dr_weight_correct"], n["dr_weight_wrong"]) == (0.000375, -0.000125)
    assert n["dr_push_down_800_vs_200"] == pytest.approx(4.0)  # "four times the total push-down"
    assert n["grpo_push_down_800_vs_200"] == pytest.approx(1.0)


def test_difficulty_example_to_the_articles_digits() -> None:
    example = difficulty_example()
    n = example.numbers
    assert (round(100 * n["dr_relative_k1"]), round(100 * n["grpo_relative_k1"])) == (44, 66)
    assert round(n["max_flattening"], 1) == 1.5  # "a factor of up to 1.5 at G = 8"
    assert (round(n["std_g64_single"], 3), round(n["weight_g64_single"], 1)) == (0.124, 8.1)
    assert (round(n["advantage_g16_single_dr"], 2), round(n["advantage_g16_single_grpo"], 1)) == (0.94, 3.9)
    assert n["std_multiplier_half"] == 2.0 and round(n["std_multiplier_k1"]) == 3  # "doubles", "triple"
    # The table the article lost: sum |A_i| = 2 G p(1 - p) for Dr. GRPO and 2 G sqrt(p(1 - p)) for GRPO.
    k = np.array([row[0] for row in example.rows])
    p = k / 8
    np.testing.assert_allclose([row[3] for row in example.rows], 16 * np.sqrt(p * (1 - p)), atol=1e-12)
    np.testing.assert_allclose([row[4] for row in example.rows], 16 * p * (1 - p), atol=1e-12)


def test_four_responses_example_to_the_tutorials_fractions() -> None:
    example = four_responses_example()
    n = example.numbers
    assert (n["mean"], n["std"]) == (0.5, 0.5)
    assert (n["grpo_y1"], n["length_only_y1"], n["dr_grpo_y1"]) == (1 / 8, 1 / 16, 1 / 32)
    assert (n["grpo_y2"], n["dr_grpo_y2"]) == (1 / 16, 1 / 32)
    assert [row[3:] for row in example.rows] == [
        ["1/8", "1/16", "1/32"],
        ["1/16", "1/32", "1/32"],
        ["-1/8", "-1/16", "-1/32"],
        ["-1/16", "-1/32", "-1/32"],
    ]


@pytest.mark.parametrize("group_size", [2, 3, 4, 8])
@pytest.mark.parametrize("pass_rate", [0.1, 0.3, 0.5, 0.9])
def test_group_mean_scales_the_gradient_by_k_minus_one_over_k(group_size: int, pass_rate: float) -> None:
    gradient, mean_baseline, rloo = expected_estimators(pass_rate, group_size)
    assert gradient == pytest.approx(pass_rate * (1 - pass_rate))
    assert mean_baseline / gradient == pytest.approx((group_size - 1) / group_size, rel=1e-12)
    assert rloo / gradient == pytest.approx(1.0, rel=1e-12)


def test_expected_estimators_against_monte_carlo() -> None:
    rng = np.random.default_rng(0)
    group, p, draws = 4, 0.3, 400_000
    outcomes = (rng.random((draws, group)) < p).astype(float)
    centred = outcomes - outcomes.mean(axis=1, keepdims=True)
    sample = (centred * (outcomes - p)).mean(axis=1)
    exact = expected_estimators(p, group)[1]
    assert abs(sample.mean() - exact) < 4 * sample.std() / np.sqrt(draws)


def test_curves_behind_the_teaching_figures() -> None:
    lengths = np.array([100.0, 200.0, 800.0])
    curves = token_weight_curves(lengths)
    np.testing.assert_allclose(curves["grpo_correct"] * lengths, np.sqrt(3))  # A / |o|
    np.testing.assert_allclose(curves["dr_grpo_wrong"], -0.25 / 2000)  # flat in length
    profiles = difficulty_profiles([8, 64], np.array([0.1, 0.5, 0.9]))
    for group in (8, 64):  # Dr. GRPO's expected mass has exactly the true gradient's shape p(1 - p)
        np.testing.assert_allclose(profiles["expected"][group]["dr_grpo"], profiles["gradient"], rtol=1e-9)
    assert profiles["expected"][64]["grpo"][0] > profiles["expected"][8]["grpo"][0] > profiles["gradient"][0]


def test_examples_command_prints_tables_and_json() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["examples"])
    assert result.exit_code == 0
    assert "12 times more gently" in result.stdout and "44% of the update" in result.stdout
    assert "1/8 -> 1/16" in result.stdout and "0.750" in result.stdout
    one = runner.invoke(app, ["examples", "four", "--json"])
    data = json.loads(one.stdout)
    assert [item["name"] for item in data] == ["four"] and data[0]["numbers"]["dr_grpo_y2"] == 1 / 32
    everything = json.loads(runner.invoke(app, ["examples", "--json"]).stdout)
    assert [item["name"] for item in everything] == list(EXAMPLES)
    bad = runner.invoke(app, ["examples", "lenght"])
    assert bad.exit_code == 2
    assert bad.stderr == "toyrl: error: unknown example 'lenght'; valid: length, difficulty, four, baseline\n"
