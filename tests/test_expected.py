"""Exact expected updates against finite differences, exhaustive enumeration and Monte Carlo."""

import itertools

import numpy as np
import pytest

from tests.configs import ONE_GROUP, SAMPLED, TINY
from toyrl.bias import bias_report
from toyrl.config import Config
from toyrl.expected import expected_update, true_gradient
from toyrl.objective import Variant, from_spec
from toyrl.policy import Batch, exact_metrics
from toyrl.stages import REGISTRY
from toyrl.train import Adam, Drawn, Plan, initial_theta, train_step
from toyrl.variants import ARTICLE, VARIANTS, article_variants

NAMES = list(ARTICLE)


def sampled_step(theta_rows, noise, variant: Variant, config: Config) -> tuple[np.ndarray, Batch]:
    """The simulator's sampled update (minus its loss gradient), one row per batch, from one step of
    `train_step` (not applied) with noise (prompt_index, approach uniforms, length exponentials)."""
    theta = theta_rows.copy()
    plan = Plan.of([variant] * len(theta))
    step = train_step(
        theta, Adam(theta, config), Drawn.of(theta, noise, config), plan, config, theta.copy(), apply=False
    )
    assert (theta == theta_rows).all()  # evaluated, not applied
    return -step.grad, step.batch


def ascent(theta_rows, noise, variant: Variant, config: Config) -> np.ndarray:
    return sampled_step(theta_rows, noise, variant, config)[0]


def outcome_noise(theta_rows, index, right, rambled) -> tuple:
    """Noise under which the sampler draws exactly the responses (right, K) [R, B, G]: u = 0 is
    always right and u = 1 never; E = (K - 1/2) softplus(phi) gives K = floor(E / softplus) + 1."""
    rate = np.logaddexp(0.0, np.where(right, theta_rows[:, -2, None, None], theta_rows[:, -1, None, None]))
    return index, np.where(right, 0.0, 1.0), (rambled - 0.5) * rate


def enumerated_ascent(theta_rows, index, right, rambled, variant: Variant, config: Config) -> np.ndarray:
    """The simulator's update of each enumerated batch, checking that it sampled that batch."""
    noise = outcome_noise(theta_rows, index, right, rambled)
    update, batch = sampled_step(theta_rows, noise, variant, config)
    assert (batch.right == right).all() and (batch.stopped == (rambled <= config.cap)).all()
    assert (batch.length == np.minimum(rambled, config.cap)).all()
    return update


def random_states(config: Config, count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    psi = rng.normal(-0.5, 1.5, size=(count, config.prompts))
    phi = np.log(rng.uniform([1 / 900, 1 / 3000], [1 / 40, 1 / 100], size=(count, 2)))
    return np.concatenate([psi, phi], axis=1)


@pytest.mark.parametrize("seed", range(3))
def test_true_gradient_equals_finite_differences_of_exact_accuracy(seed: int) -> None:
    config = Config()
    theta = random_states(config, 1, seed)
    gradient = true_gradient(theta, config.cap, config.min_length)[0]
    step = 1e-6
    for i in range(theta.shape[1]):
        shift = np.zeros_like(theta)
        shift[0, i] = step
        up = exact_metrics(theta + shift, config.cap, config.min_length)["accuracy"][0]
        down = exact_metrics(theta - shift, config.cap, config.min_length)["accuracy"][0]
        assert gradient[i] == pytest.approx((up - down) / (2 * step), rel=1e-6, abs=1e-11)
    assert gradient[-1] == 0.0


@pytest.mark.parametrize(
    "config",
    [Config(), Config(group_size=4, length_norm=700.0), Config(group_size=16, cap=300, min_length=20)],
)
def test_dr_grpo_expected_update_is_parallel_to_the_true_gradient(config: Config) -> None:
    states = np.concatenate(
        [initial_theta(config, np.random.default_rng(0))[None], random_states(config, 4, 1)], axis=0
    )
    rows = bias_report(states, config, [VARIANTS["dr_grpo"]] * len(states))
    constant = (config.group_size - 1) / (config.group_size * config.length_norm_value)
    for row in rows:
        assert abs(row["cosine"] - 1) < 1e-9
        assert row["norm_ratio"] == pytest.approx(constant, rel=1e-9)
        assert row["phi_wrong"] == 0.0 or abs(row["phi_wrong_cosine"]) < 1e-12


def test_length_normalised_variants_push_phi_wrong_and_std_only_does_not() -> None:
    config = Config()
    states = np.concatenate(
        [initial_theta(config, np.random.default_rng(0))[None], random_states(config, 3, 2)], axis=0
    )
    for state in states:
        rows = {
            row["variant"]: row
            for row in bias_report(np.repeat(state[None], 4, 0), config, list(article_variants()))
        }
        for name in ("grpo", "length_only"):
            assert rows[name]["cosine"] < 1 - 1e-3
            assert rows[name]["phi_wrong"] < 0 and abs(rows[name]["phi_wrong_cosine"]) > 0.01
            assert rows[name]["true_phi_wrong"] == 0.0
        # std_only: no length bias (phi_wrong untouched) but the difficulty bias tilts the psi block.
        assert abs(rows["std_only"]["phi_wrong_cosine"]) < 1e-12
        assert rows["std_only"]["psi_cosine"] < 1 - 1e-6


def enumerate_expectation(theta: np.ndarray, config: Config, variant: Variant) -> np.ndarray:
    """E[-loss gradient] by summing the simulator's own estimator over every outcome of a batch.

    B = 1, so a batch is one prompt j (probability 1/P) and its G responses; each response is a
    (right, K) pair with K in 1..cap or truncated (K = cap + 1).
    """
    prompts, group, cap = config.prompts, config.group_size, config.cap
    psi, phi = theta[:prompts], theta[prompts:]
    outcomes = [(right, k) for right in (True, False) for k in range(1, cap + 2)]
    combos = np.array(list(itertools.product(range(len(outcomes)), repeat=group)))
    right = np.array([outcomes[i][0] for i in combos.ravel()]).reshape(combos.shape)
    rambled = np.array([outcomes[i][1] for i in combos.ravel()]).reshape(combos.shape)
    s = 1 / (1 + np.exp(-np.where(right, phi[0], phi[1])))
    length_prob = np.where(rambled <= cap, s * (1 - s) ** (rambled - 1), (1 - s) ** cap)
    total = np.zeros_like(theta)
    for j in range(prompts):
        p_right = 1 / (1 + np.exp(-psi[j]))
        probability = np.prod(np.where(right, p_right, 1 - p_right) * length_prob, axis=1)
        thetas = np.repeat(theta[None], len(combos), axis=0)
        index = np.full((len(combos), 1), j)
        update = enumerated_ascent(thetas, index, right[:, None, :], rambled[:, None, :], variant, config)
        total += (probability[:, None] * update).sum(axis=0) / prompts
    return total


EXACT_VARIANTS = [
    *article_variants(),
    from_spec("rloo_sum", {"advantage": "rloo", "aggregation": "seq_mean_token_sum"}),
    from_spec(
        "sample_token_sum_norm",
        {"advantage": "group_std_sample", "aggregation": "token_sum_norm", "std_eps": 1e-4},
    ),
    from_spec("masked", {"advantage": "none", "aggregation": "seq_mean_token_mean", "mask_truncated": True}),
    from_spec("plain_sum", {"advantage": "group_std", "aggregation": "token_sum"}),
]


@pytest.mark.parametrize("variant", EXACT_VARIANTS, ids=lambda v: v.name)
def test_expected_update_equals_exhaustive_enumeration(variant: Variant) -> None:
    config = ONE_GROUP
    theta = np.array([0.4, -1.1, np.log(0.3 / 0.7), np.log(0.2 / 0.8)])
    exact = expected_update(theta[None], config, [variant])[0]
    np.testing.assert_allclose(exact, enumerate_expectation(theta, config, variant), rtol=1e-11, atol=1e-15)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("state_seed", [3, 4])
def test_monte_carlo_mean_of_sampled_updates_matches(name: str, state_seed: int) -> None:
    config = SAMPLED
    theta = random_states(config, 1, state_seed)[0]
    exact = expected_update(theta[None], config, [VARIANTS[name]])[0]
    rng = np.random.default_rng(100 + state_seed)
    runs = 200_000
    thetas = np.repeat(theta[None], runs, axis=0)
    index = rng.random((runs, config.prompts)).argsort(axis=1)[:, : config.batch_prompts]
    shape = (runs, config.batch_prompts, config.group_size)
    noise = (index, rng.random(shape), rng.standard_exponential(shape))
    sampled = ascent(thetas, noise, VARIANTS[name], config)
    error = sampled.mean(axis=0) - exact
    standard_error = sampled.std(axis=0) / np.sqrt(runs)
    assert np.all(np.abs(error) <= 4 * standard_error + 1e-18), error / standard_error


def invoke(*args: str):
    from typer.testing import CliRunner

    from toyrl.cli import app

    return CliRunner().invoke(app, list(args))


def test_bias_command_at_the_initial_policy() -> None:
    import json

    result = invoke("bias", "--json")
    assert result.exit_code == 0
    rows = {row["variant"]: row for row in json.loads(result.stdout)["variants"]}
    assert set(rows) == set(NAMES)
    assert abs(rows["dr_grpo"]["cosine"] - 1) < 1e-9 and rows["grpo"]["phi_wrong_cosine"] < -0.1
    table = invoke("bias", "--variant", "grpo").stdout
    assert "\nGRPO " in table and "Dr. GRPO" not in table  # the rows by display name


def test_bias_command_replays_saved_runs_and_refuses_tampered_ones(tmp_path) -> None:
    import json

    import pandas as pd

    csv = tmp_path / "run.csv"
    assert invoke("run", "--seeds", "2", "--steps", "30", "--out", str(csv)).exit_code == 0
    result = invoke("bias", "--results", str(csv), "--step", "20", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["policy"].startswith("step 20 of") and len(data["variants"]) == 4
    frame = pd.read_csv(csv)
    frame.loc[frame.step == 20, "accuracy"] += 1e-12
    frame.to_csv(csv, index=False)
    mismatched = invoke("bias", "--results", str(csv), "--step", "20")
    assert mismatched.exit_code == 2 and "does not match run.json" in mismatched.stderr
    # A consistent pair whose numbers the current code does not make (another version, say):
    import hashlib

    meta = json.loads(csv.with_suffix(".json").read_text())
    meta["csv_sha256"] = hashlib.sha256(csv.read_bytes()).hexdigest()
    csv.with_suffix(".json").write_text(json.dumps(meta))
    tampered = invoke("bias", "--results", str(csv), "--step", "20")
    assert tampered.exit_code == 2 and "does not reproduce the saved results" in tampered.stderr
    for args, message in [
        (["bias", "--step", "3"], "--step needs --results"),
        (["bias", "--results", str(csv), "--step", "31"], "--step must be in 0..30"),
        (["bias", "--variant", "nope"], "unknown variant 'nope'"),
    ]:
        bad = invoke(*args)
        assert bad.exit_code == 2 and message in bad.stderr


def test_mean_field_runs(tmp_path) -> None:
    import json

    import pandas as pd

    csv = tmp_path / "exact.csv"
    result = invoke("run", "--mean-field", "--seeds", "2", "--steps", "60", "--out", str(csv))
    assert result.exit_code == 0
    frame = pd.read_csv(csv)
    assert frame.batch_accuracy.isna().all() and (frame.grad_norm > 0).all()
    assert json.loads(csv.with_suffix(".json").read_text())["mean_field"] is True
    dr = frame[frame.variant == "dr_grpo"]
    # E[g] has no phi_wrong component under Dr. GRPO: the wrong approach's stop probability stays put.
    np.testing.assert_allclose(dr.stop_prob_wrong, 1 / 700, rtol=1e-9)
    grpo = frame[(frame.variant == "grpo") & (frame.step == 60)]
    assert (grpo.stop_prob_wrong < 1 / 700).all()
    again = invoke("bias", "--results", str(csv), "--json")  # replays mean-field runs as such
    assert again.exit_code == 0, again.output
    # The old name still works for one release, says so, and gives the same file.
    old = tmp_path / "old.csv"
    deprecated = invoke("run", "--exact", "--seeds", "2", "--steps", "60", "--out", str(old))
    assert deprecated.exit_code == 0 and "--exact is now --mean-field" in deprecated.stderr
    assert old.read_bytes() == csv.read_bytes()  # a small file
    assert "--exact" not in invoke("run", "--help").stdout  # hidden from the help


def enumerate_batches(theta: np.ndarray, config: Config, variant: Variant) -> np.ndarray:
    """E[sampled update] by summing over every batch when B = P (both prompts, every outcome)."""
    group, cap = config.group_size, config.cap
    outcomes = [(right, k) for right in (True, False) for k in range(1, cap + 2)]
    slots = config.batch_prompts * group
    combos = np.array(list(itertools.product(range(len(outcomes)), repeat=slots)))
    right = np.array([outcomes[i][0] for i in combos.ravel()]).reshape(
        len(combos), config.batch_prompts, group
    )
    rambled = np.array([outcomes[i][1] for i in combos.ravel()]).reshape(right.shape)
    psi, phi = theta[: config.prompts], theta[config.prompts :]
    p_right = (1 / (1 + np.exp(-psi)))[None, :, None]
    s = 1 / (1 + np.exp(-np.where(right, phi[0], phi[1])))
    length_prob = np.where(rambled <= cap, s * (1 - s) ** (rambled - 1), (1 - s) ** cap)
    probability = np.prod(np.where(right, p_right, 1 - p_right) * length_prob, axis=(1, 2))
    index = np.tile(np.arange(config.batch_prompts), (len(combos), 1))
    thetas = np.repeat(theta[None], len(combos), axis=0)
    update = enumerated_ascent(thetas, index, right, rambled, variant, config)
    return (probability[:, None] * update).sum(axis=0)


# Every batch of both prompts enumerated: lengths up to 2 keep the batches few; an L_norm apart from the cap.
BATCH_CONFIG = TINY.replace(prompts=2, cap=2, length_norm=3.0)
MODES = [("advantage", mode) for mode in REGISTRY["advantage"]] + [
    ("aggregation", mode) for mode in REGISTRY["normaliser"]
]


@pytest.mark.parametrize(("switch", "mode"), MODES, ids=[f"{s}={m}" for s, m in MODES])
def test_monte_carlo_update_of_every_mode_matches_exhaustive_enumeration(switch: str, mode: str) -> None:
    """Every advantage and aggregation mode, batch-level ones included: the mean of the simulator's
    sampled updates (its own sampler) against the exact sum over every possible batch."""
    base = {"advantage": "group_std", "aggregation": "token_mean"}
    variant = from_spec("v", base | {switch: mode, "mask_truncated": True})
    theta = np.array([0.3, -0.6, np.log(0.45 / 0.55), np.log(0.3 / 0.7)])
    exact = enumerate_batches(theta, BATCH_CONFIG, variant)
    rng = np.random.default_rng(17)
    runs = 300_000
    thetas = np.repeat(theta[None], runs, axis=0)
    index = np.tile(np.arange(2), (runs, 1))
    shape = (runs, 2, 2)
    noise = (index, rng.random(shape), rng.standard_exponential(shape))
    sampled = ascent(thetas, noise, variant, BATCH_CONFIG)
    error = sampled.mean(axis=0) - exact
    assert np.all(np.abs(error) <= 4 * sampled.std(axis=0) / np.sqrt(runs) + 1e-15), error
    assert np.abs(exact).max() > 0


def test_the_phi_wrong_cosine_and_share_are_what_their_names_say() -> None:
    """The cosine with the phi_wrong axis is signed, u_w / |u|; the share is u_w^2 / |u|^2, the
    cosine squared, between 0 and 1 (an audit found a cosine reported as a share)."""
    config = Config()
    states = random_states(config, 4, seed=7)
    variants = [VARIANTS["grpo"]] * 4
    update = expected_update(states, config, variants)
    for row, u in zip(bias_report(states, config, variants), update, strict=True):
        squared = float(np.sum(u * u))
        assert row["phi_wrong_cosine"] == pytest.approx(u[-1] / np.sqrt(squared), rel=1e-12)
        assert row["phi_wrong_share"] == pytest.approx(u[-1] ** 2 / squared, rel=1e-12)
        assert row["phi_wrong_share"] == pytest.approx(row["phi_wrong_cosine"] ** 2, rel=1e-12)
        assert row["phi_wrong_cosine"] < 0 < row["phi_wrong_share"] < 1


def test_a_table_naming_a_spelled_variant_its_own_way_is_replayed_under_that_name(tmp_path) -> None:
    """toyrl 0.2 named a spelled variant by the text it was given ("aggregation=...,advantage=...",
    spaces and all); its runs are replayed under that name, so the rows match and the bias command
    works on such a table."""
    import hashlib
    import json

    import pandas as pd

    csv = tmp_path / "old.csv"
    spelled = "advantage=rloo,aggregation=seq_mean_token_sum_norm"
    assert (
        invoke("run", "--variant", spelled, "--seeds", "1", "--steps", "12", "--out", str(csv)).exit_code == 0
    )
    frame = pd.read_csv(csv)
    assert set(frame["variant"]) == {spelled}
    old_name = " aggregation=seq_mean_token_sum_norm, advantage=rloo"
    frame["variant"] = old_name
    frame.to_csv(csv, index=False, lineterminator="\n")
    meta = json.loads(csv.with_suffix(".json").read_text())
    meta["variants"] = {old_name: meta["variants"][spelled]}
    meta["csv_sha256"] = hashlib.sha256(csv.read_bytes()).hexdigest()
    csv.with_suffix(".json").write_text(json.dumps(meta))
    result = invoke("bias", "--results", str(csv), "--step", "8", "--json")
    assert result.exit_code == 0, result.output
    assert [row["variant"] for row in json.loads(result.stdout)["variants"]] == [old_name]
