"""The variants' advantages and per-token weights: the article's worked example and properties."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toyrl.config import InvalidInput
from toyrl.objective import Variant, advantages, from_spec, parse_spec, variant_weights
from toyrl.policy import Batch
from toyrl.stages import REGISTRY, weights
from toyrl.variants import VARIANTS, display_name, parse_variants

# Article, "Worked example by hand": G = 8, two correct; a correct answer of 200 tokens, a wrong
# one of 800, Dr. GRPO's L_norm = 2000.
REWARDS = np.array([1, 1, 0, 0, 0, 0, 0, 0], dtype=float)
TOKENS = np.array([200, 200, 800, 800, 800, 800, 800, 800], dtype=float)
L_NORM = 2000.0


def test_worked_example_advantages_to_the_printed_digits() -> None:
    assert round(float(REWARDS.std()), 3) == 0.433  # population std
    scaled = advantages(REWARDS, "group_std", std_eps=0.0)
    assert (round(scaled[0], 3), round(scaled[-1], 3)) == (1.732, -0.577)
    centred = advantages(REWARDS, "none", std_eps=0.0)
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
    weights = variant_weights(VARIANTS[name], REWARDS, TOKENS, std_eps=0.0, length_norm=L_NORM)
    np.testing.assert_allclose(weights[[0, -1]], [correct, wrong], rtol=1e-12)


def test_worked_example_conclusions() -> None:
    grpo = variant_weights(VARIANTS["grpo"], REWARDS, TOKENS, std_eps=0.0, length_norm=L_NORM)
    assert (round(grpo[0], 5), round(grpo[-1], 5)) == (0.00866, -0.00072)
    assert grpo[0] / -grpo[-1] == pytest.approx(12.0)  # "twelve times more gently"
    dr = variant_weights(VARIANTS["dr_grpo"], REWARDS, TOKENS, std_eps=0.0, length_norm=L_NORM)
    assert (dr[0], dr[-1]) == (0.000375, -0.000125)
    short_wrong = variant_weights(VARIANTS["dr_grpo"], REWARDS, [200] * 8, std_eps=0.0, length_norm=L_NORM)[
        -1
    ]
    assert dr[-1] * 800 / (short_wrong * 200) == pytest.approx(4.0)  # "four times the total push-down"


@given(
    rewards=st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=64),
    scale=st.floats(0.1, 100.0),
)
def test_advantage_properties(rewards: list[float], scale: float) -> None:
    r = np.array(rewards)
    centred = advantages(r, "none", std_eps=0.0)
    assert abs(centred.sum()) < 1e-9
    np.testing.assert_allclose(advantages(scale * r, "none", std_eps=0.0), scale * centred, atol=1e-9)
    np.testing.assert_allclose(advantages(r, "rloo", 0.0) * (len(r) - 1) / len(r), centred, atol=1e-12)
    if r.std() > 0:
        scaled = advantages(r, "group_std", std_eps=0.0)
        np.testing.assert_allclose(advantages(scale * r, "group_std", std_eps=0.0), scaled, atol=1e-9)
        assert scaled.std() == pytest.approx(1.0)
        assert advantages(r, "group_std_sample", std_eps=0.0).std(ddof=1) == pytest.approx(1.0)
    else:
        assert np.all(advantages(r, "group_std", std_eps=1e-6) == 0)


# A hand-computed batch of B = 2 groups of G = 2: rewards, token counts, one truncated response.
BATCH_REWARDS = np.array([[1.0, 0.0], [1.0, 1.0]])
BATCH_TOKENS = np.array([[3.0, 5.0], [2.0, 10.0]])
BATCH_STOPPED = np.array([[True, True], [True, False]])
ROOT_HALF = np.sqrt(0.5)


@pytest.mark.parametrize(
    ("advantage", "expected"),
    [
        ("group_std", [[1.0, -1.0], [0.0, 0.0]]),  # population std 0.5
        ("group_std_sample", [[0.5 / ROOT_HALF, -0.5 / ROOT_HALF], [0.0, 0.0]]),  # sample std sqrt(1/2)
        ("batch_std", [[1.0, -1.0], [0.0, 0.0]]),  # sample std of [1, 0, 1, 1] is 0.5
        ("none", [[0.5, -0.5], [0.0, 0.0]]),
        ("rloo", [[1.0, -1.0], [0.0, 0.0]]),  # r minus the other one
        ("batch_whiten", [[0.5 / np.sqrt(1 / 6), -0.5 / np.sqrt(1 / 6)], [0.0, 0.0]]),  # [.5, -.5, 0, 0]
    ],
)
def test_advantage_modes_on_a_hand_computed_batch(advantage: str, expected: list[list[float]]) -> None:
    np.testing.assert_allclose(advantages(BATCH_REWARDS, advantage, std_eps=0.0), expected, rtol=1e-12)


@pytest.mark.parametrize(
    ("aggregation", "denominators", "n"),
    [
        ("seq_mean_token_mean", [[3, 5], [2, 10]], 4),
        ("token_mean", [[20, 20], [20, 20]], 1),
        ("seq_mean_token_sum", [[1, 1], [1, 1]], 4),
        ("seq_mean_token_sum_norm", [[50, 50], [50, 50]], 4),
        ("token_sum_norm", [[50, 50], [50, 50]], 1),
        ("token_sum", [[1, 1], [1, 1]], 1),
    ],
)
def test_aggregations_on_a_hand_computed_batch(aggregation: str, denominators: list, n: int) -> None:
    # One run of the batch: L ramble tokens plus the approach token make BATCH_TOKENS.
    batch = Batch(
        prompt_index=np.array([[0, 1]]),
        right=np.ones((1, 2, 2), dtype=bool),
        length=(BATCH_TOKENS - 1).astype(np.int64)[None],
        stopped=BATCH_STOPPED[None],
    )
    assert (batch.token_count() == BATCH_TOKENS).all()

    def token_weights(variant):
        included = variant.selector.included(batch)
        advantage = variant.advantage.advantages(BATCH_REWARDS[None], 0.0)
        denominator, count = variant.normaliser.denominators(batch.token_count(), included, 50.0)
        return weights(advantage, denominator, included)[0], denominator[0], count, included[0]

    weight, _, count, _ = token_weights(from_spec("v", {"advantage": "none", "aggregation": aggregation}))
    assert count == n
    np.testing.assert_allclose(weight, np.array([[0.5, -0.5], [0.0, 0.0]]) / np.array(denominators))
    masked_variant = from_spec("m", {"advantage": "none", "aggregation": aggregation, "mask_truncated": True})
    masked_weight, masked_denominator, _, masked_included = token_weights(masked_variant)
    assert masked_weight[1, 1] == 0 and not masked_included[1, 1]
    if aggregation == "token_mean":  # the truncated response's 10 tokens leave the batch's total
        assert masked_denominator[0, 0] == 10


def test_parse_variants() -> None:
    assert [v.name for v in parse_variants(["all"])] == ["grpo", "std_only", "length_only", "dr_grpo"]
    assert [v.name for v in parse_variants(["dr_grpo", "grpo", "dr_grpo"])] == ["dr_grpo", "grpo"]
    with pytest.raises(
        InvalidInput, match=r"unknown variant 'drgrpo' \(did you mean 'dr_grpo'\?\); valid: grpo, std_only"
    ):
        parse_variants(["drgrpo"])
    spelled = parse_variants(["advantage=rloo, aggregation=token_mean, num_iterations=2, epsilon_high=0.28"])[
        0
    ]
    names = spelled.names()
    settings = (names["advantage"], names["normaliser"], spelled.num_iterations, spelled.objective.clip_high)
    assert settings == ("rloo", "token_mean", 2, 0.28)
    assert parse_variants(["trl_default"])[0].names()["normaliser"] == "token_mean"
    for bad, message in [
        ("advantage=median", "advantage must be one of"),
        ("aggregation=none", "aggregation must be one of"),
        ("num_iterations=0", r"num_iterations must be an integer in 1\.\.64"),
        ("num_iterations=65", r"num_iterations must be an integer in 1\.\.64"),
        ("colour=red", "unknown key 'colour'"),
        ("beta=abc", "beta must be a number"),
        ("epsilon=nan", "epsilon must be a finite number"),
    ]:
        with pytest.raises(InvalidInput, match=message):
            parse_variants([bad])


def test_length_power_is_grpos_mean_at_0_and_dr_grpos_constant_at_1() -> None:
    """aggregation=length_power: D_i = |o_i|^(1 - alpha) L_norm^alpha; at alpha 0 and 1 the runs
    are seq_mean_token_mean's and seq_mean_token_sum_norm's to the bit (sampled and mean-field), and
    in between the per-token weight falls as |o_i|^(alpha - 1)."""
    import pandas as pd

    from toyrl.config import Config
    from toyrl.experiment import simulate_runs
    from toyrl.stages import REGISTRY

    config = Config(prompts=8, batch_prompts=4, group_size=4, steps=20, cap=60, min_length=5)
    for alpha, same in ((0, "seq_mean_token_mean"), (1, "seq_mean_token_sum_norm")):
        power = parse_spec(f"advantage=none,aggregation=length_power,alpha={alpha}")
        plain = parse_spec(f"advantage=none,aggregation={same}")
        for mean_field in (False, True):
            a = simulate_runs(config, [(power, 3)], mean_field).drop(columns="variant")
            b = simulate_runs(config, [(plain, 3)], mean_field).drop(columns="variant")
            pd.testing.assert_frame_equal(a, b, check_exact=True)
    stage = REGISTRY["normaliser"]["length_power"]
    tokens = np.array([[[10.0, 40.0]]])
    denominator = stage.response_denominator(tokens, 100.0)
    np.testing.assert_allclose(denominator, tokens**0.5 * 10.0, rtol=1e-15)
    assert denominator[0, 0, 1] / denominator[0, 0, 0] == pytest.approx(2.0)  # weight ratio 4^(0.5 - 1)
    for bad in ("-0.1", "1.5", "nan"):
        with pytest.raises(InvalidInput, match=r"alpha must be a (number in \[0, 1\]|finite number)"):
            parse_spec(f"advantage=none,aggregation=length_power,alpha={bad}")


# A batch of two groups of four: rewards, tokens, and which responses ended before the cap.
GROUPS_REWARDS = np.array([[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])
GROUPS_TOKENS = np.array([[5.0, 40.0, 12.0, 7.0], [30.0, 3.0, 9.0, 61.0]])
GROUPS_STOPPED = np.array([[True, False, True, True], [True, True, True, False]])


@pytest.mark.parametrize("advantage", sorted(REGISTRY["advantage"]))
@pytest.mark.parametrize("selector", sorted(REGISTRY["selector"]))
def test_variant_weights_take_every_advantage_and_selector(advantage: str, selector: str) -> None:
    """Every registered advantage (those weighing responses by their tokens too) and selector: the
    weights are the advantages over D where the selector keeps a response, and exactly 0 where not."""
    variant = parse_variants([f"advantage={advantage},selector={selector},aggregation=seq_mean_token_mean"])[
        0
    ]
    got = variant_weights(variant, GROUPS_REWARDS, GROUPS_TOKENS, 1e-6, 100.0, GROUPS_STOPPED)
    keep = GROUPS_STOPPED if selector == "stopped" else np.ones_like(GROUPS_STOPPED)
    assert got.shape == GROUPS_REWARDS.shape and np.isfinite(got).all()
    assert (got[~keep] == 0).all() and (got[keep] != 0).any()


def test_variant_weights_of_the_token_weighted_advantages_by_hand() -> None:
    """OPO's length-weighted baseline and REINFORCE++'s whitening over the batch's tokens, restated
    here: A / |o| (seq_mean_token_mean) per response."""
    r, t = GROUPS_REWARDS, GROUPS_TOKENS
    opo = parse_variants(["advantage=opo,aggregation=seq_mean_token_mean"])[0]
    baseline = (t * r).sum(axis=1, keepdims=True) / t.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(variant_weights(opo, r, t, 0.0, 1.0), (r - baseline) / t, rtol=1e-14)
    whiten = parse_variants(["advantage=reinforce_pp,aggregation=seq_mean_token_mean"])[0]
    n = t.sum()
    mean = (r * t).sum() / n
    bessel = float(np.float32(n) / np.float32(n - 1))  # verl's masked_var, in float32
    variance = ((r - mean) ** 2 * t).sum() / n * bessel
    want = (r - mean) / np.sqrt(variance + 1e-8) / t
    np.testing.assert_allclose(variant_weights(whiten, r, t, 0.0, 1.0), want, rtol=1e-12)


def test_variant_weights_leave_truncated_responses_out_with_mask_truncated() -> None:
    masked = parse_variants(["advantage=none,aggregation=seq_mean_token_sum_norm,mask_truncated=true"])[0]
    plain = VARIANTS["dr_grpo"]
    w_masked = variant_weights(masked, GROUPS_REWARDS, GROUPS_TOKENS, 0.0, 100.0, GROUPS_STOPPED)
    w_plain = variant_weights(plain, GROUPS_REWARDS, GROUPS_TOKENS, 0.0, 100.0, GROUPS_STOPPED)
    assert (w_masked[~GROUPS_STOPPED] == 0).all() and (w_plain[~GROUPS_STOPPED] != 0).all()
    np.testing.assert_array_equal(w_masked[GROUPS_STOPPED], w_plain[GROUPS_STOPPED])


def test_the_epsilon_s_effect_stated_in_the_model_doc() -> None:
    """docs/model.md: TRL's or verl's std epsilon changes G = 8 binary advantages by at most the
    percentage it states (the smallest nonzero std, one success in eight, is changed most)."""
    import math
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "model.md").read_text(encoding="utf-8")
    stated = re.findall(r"either changes advantages by at most ([0-9.]+)%", " ".join(text.split()))
    largest = 0.0
    for successes in range(1, 8):
        rewards = np.array([1.0] * successes + [0.0] * (8 - successes))
        exact = advantages(rewards, "group_std", std_eps=0.0)
        for eps in (1e-6, 1e-4):
            largest = max(largest, float(np.max(np.abs(advantages(rewards, "group_std", eps) / exact - 1))))
    assert stated == [f"{math.ceil(largest * 1e6) / 1e4:.4f}"], (stated, largest)


def test_display_names_say_what_each_article_variant_drops_from_grpo() -> None:
    """Each display name is a claim about the spec: "without std division" keeps GRPO's aggregation
    and centres without dividing; "without length division" keeps GRPO's advantage and takes Dr.
    GRPO's constant divisor."""
    grpo, dr = VARIANTS["grpo"].names(), VARIANTS["dr_grpo"].names()
    by_title = {v.title: v.names() for v in VARIANTS.values() if v.label}
    assert set(by_title) == {"GRPO", "Dr. GRPO", "GRPO without std division", "GRPO without length division"}
    assert by_title["GRPO without std division"] == grpo | {"advantage": dr["advantage"]}
    assert by_title["GRPO without length division"] == grpo | {"normaliser": dr["normaliser"]}
    assert display_name("length_only") == "GRPO without std division"
    assert display_name("trl_default") == "trl_default"  # presets and specs are read as they are typed
    assert display_name("advantage=none") == "advantage=none"
    labelled = VARIANTS["std_only"]
    assert Variant.from_json(labelled.to_json()) == labelled  # the label survives a round trip


def test_toyrl_variants_lists_the_name_to_type_and_the_name_to_read() -> None:
    import json

    from typer.testing import CliRunner

    from toyrl.cli import app

    listed = CliRunner().invoke(app, ["variants"])
    assert listed.exit_code == 0 and "length_only  (GRPO without std division)" in listed.stdout
    rows = {row["name"]: row for row in json.loads(CliRunner().invoke(app, ["variants", "--json"]).stdout)}
    assert rows["std_only"]["label"] == "GRPO without length division"
    assert rows["trl_default"]["label"] == "trl_default"
