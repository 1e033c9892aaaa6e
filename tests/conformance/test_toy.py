"""The suite's toyrl side checked without any trainer: its per-token weights, pulled back through
the token log-probabilities by finite differences, give toyrl's own closed-form gradient."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conformance import toy
from tests.conformance.toy import CONFIG as toy_config
from toyrl.policy import Coefficients, OwnLogits, TokenTable, policy_gradient
from toyrl.stages import weights
from toyrl.train import Epoch, Part, Plan
from toyrl.variants import parse_variant

CONFIG = toy_config


def pulled_back(weight: np.ndarray, batch: toy.ToyBatch, theta: np.ndarray) -> np.ndarray:
    """sum over tokens of weight d logp / d theta [1, P + 2], by central differences of `ToyBatch.logp`."""
    grad = np.zeros_like(theta)
    step = 1e-6
    for j in range(theta.shape[1]):
        shift = np.zeros_like(theta)
        shift[0, j] = step
        d_logp = (batch.logp(theta + shift) - batch.logp(theta - shift)) / (2 * step)
        grad[0, j] = (weight * d_logp).sum()
    return grad


@pytest.mark.parametrize(
    "name", ["grpo", "dr_grpo", "trl_default", "verl_seq_mean_token_sum", "openrlhf_rloo", "dapo"]
)
def test_first_update_weights_give_toyrls_gradient(name: str) -> None:
    variant = parse_variant(name)
    batch = toy.sampled(3, CONFIG)
    plan = Plan.of([variant])
    rewards = plan.rewards(batch.batch, CONFIG)
    included = plan.included(batch.batch)
    denominator, n = plan.denominators(batch.batch, included, CONFIG)
    w = weights(plan.advantages(rewards, CONFIG), denominator, included)
    closed_form = policy_gradient(Coefficients(w, n=n), batch.batch, TokenTable.of(batch.theta_old))
    by_tokens = pulled_back(toy.token_weights(variant, batch), batch, batch.theta_old)
    np.testing.assert_allclose(by_tokens, closed_form, rtol=1e-6, atol=1e-9 * np.abs(closed_form).max())
    assert np.abs(closed_form).max() > 0


@pytest.mark.parametrize(
    "spec", ["dapo", "advantage=none,aggregation=seq_mean_token_mean,epsilon=0.05,beta=0.1"]
)
def test_later_update_weights_give_toyrls_gradient(spec: str) -> None:
    variant = parse_variant(spec)
    batch = toy.sampled(5, CONFIG)
    theta = toy.moved(batch, 1, scale=1.0)
    plan = Plan.of([variant])
    rewards = plan.rewards(batch.batch, CONFIG)
    included = plan.included(batch.batch)
    advantage = plan.advantages(rewards, CONFIG)
    denominator, n = plan.denominators(batch.batch, included, CONFIG)
    own = OwnLogits.of(batch.batch, theta.shape[1])
    ref = own.table(batch.theta_old) if variant.kl.beta > 0 else None
    part = Part.of(own.batch, included, denominator, n)
    epoch = Epoch.of(own, advantage, own.table(batch.theta_old), ref)
    closed_form, clipped = epoch.gradient(theta, plan, part)
    by_tokens = pulled_back(toy.token_weights(variant, batch, theta), batch, theta)
    np.testing.assert_allclose(by_tokens, closed_form, rtol=1e-6, atol=1e-9 * np.abs(closed_form).max())
    assert clipped[0] > 0  # the moved policy is far enough for the clip to act


def test_made_batches_follow_their_lengths_and_reject_impossible_ones() -> None:
    right = [[True, True, False, False]]
    batch = toy.made(right, [[3, 30, 7, 30]], [[True, False, True, False]], CONFIG)
    assert batch.mask.sum(axis=1).tolist() == [4, 31, 8, 31]
    assert batch.rewards(parse_variant("grpo")).tolist() == [0.0, 0.0, 0.0, 0.0]  # 3 < min_length; truncated
    kinds = batch.kinds()
    assert (kinds[0, :5] == [0, 1, 1, 2, -1]).all() and (kinds[1, 1:] == 1).all()
    with pytest.raises(ValueError, match="did not stop"):
        toy.made(right, [[3, 29, 7, 30]], [[True, False, True, False]], CONFIG)


def test_relative_difference() -> None:
    assert toy.relative_difference(np.array([1.0, 2.0]), np.array([1.0, 2.0])) == 0.0
    assert toy.relative_difference(np.array([1.0, 2.5]), np.array([1.0, 2.0])) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="shapes differ"):
        toy.relative_difference(np.zeros(2), np.zeros(3))
