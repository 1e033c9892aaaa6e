"""The objectives proposed in 2025-2026 (issue 42) against this file's own formulas.

Stages `prompt_mean` (SkyRL), `delta_l` (ΔL Normalization), `max_rl` (MaxRL as prime-rl has it),
`length_penalty` (prime-rl), `gr3` (GR3's rescaling) and the preset `trl_async_grpo` (TRL's
AsyncGRPO, existing stages).
Every batch of a tiny configuration is listed with its exact probability (`tests.test_enumeration`'s
machinery), and its first update g = sum_i w_i score_i is computed here from each source's formula,
written from the source (SkyRL's 1 / (num_prompts x tokens_in_prompt), the ΔL authors'
(|o_i| / mean |o|)^-alpha / its mean over the batch then the mean over N x L_norm, prime-rl's
(r - mean) / mean and r - pass_rate x (0.25 |o| / max |o| + 0.1 + 0.1), GR3's r / (1 + alpha |o| /
mean |o|), TRL's np.std), never by toyrl's stages. So

- toyrl's update on every batch (noise built so that `sample_batch` draws it) equals this file's
  g to 1e-12;
- the mean of 200,000 of toyrl's sampled first updates is within 5 standard errors of the
  enumerated E[g], and more than 10 from that of the variant without the new stage (power);
- MaxRL's exact hook: `toyrl.expected.expected_update` equals the enumerated E[g] to 1e-12, and
  the sampled mean is within 5 standard errors of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from tests.test_enumeration import (
    CONFIG,
    RAMBLE_ONLY,
    THETAS,
    Batches,
    Mine,
    correctness,
    enumerate_batches,
    outcome_table,
    relative_difference,
    response_noise,
    sampled_first_updates,
    sigmoid,
    toyrl_updates,
)
from toyrl.config import Config
from toyrl.expected import expected_update
from toyrl.objective import Variant
from toyrl.stages import REGISTRY, simulated_only
from toyrl.stages.normaliser import PromptMean
from toyrl.variants import parse_variant


@dataclass(frozen=True)
class Objective:
    """A variant as this file computes it."""

    advantage: str  # none, group_std, group_std_sample, max_rl
    aggregation: str  # token_mean, seq_mean_token_sum_norm, seq_mean_token_mean, prompt_mean, delta_l
    std_eps: float = 0.0
    reward: str = "window"  # or length_penalty, gr3
    alpha: float = 1.0  # delta_l's or gr3's
    weights: tuple[float, float, float] = (0.25, 0.1, 0.1)  # length_penalty's output, input, turns
    mask_truncated: bool = False


def rewards_of(code: np.ndarray, tokens: np.ndarray, config: Config, mine: Objective) -> np.ndarray:
    correct = correctness(code, config).astype(np.float64)
    if mine.reward == "window":
        return correct
    if mine.reward == "gr3":  # GR3 (as Weng et al. 2026 restate it, eq. 12): r / (1 + alpha L / mean L)
        return correct / (1 + mine.alpha * tokens / tokens.mean(axis=-1, keepdims=True))
    # prime-rl: r - pass_rate x (w_out |o| / max |o| + w_in in / max in + w_turns turns / max turns),
    # one prompt and one turn a group: in / max in = turns / max turns = 1
    w_out, w_in, w_turns = mine.weights
    pass_rate = correct.mean(axis=-1, keepdims=True)
    return correct - pass_rate * (w_out * tokens / tokens.max(axis=-1, keepdims=True) + w_in + w_turns)


def advantages_of(r: np.ndarray, mine: Objective) -> np.ndarray:
    mean = r.mean(axis=-1, keepdims=True)
    if mine.advantage == "none":
        return r - mean
    if mine.advantage == "max_rl":  # prime-rl: 0 where the group's mean is <= 0
        return np.where(mean > 0, (r - mean) / np.where(mean > 0, mean, 1.0), 0.0)
    ddof = 1 if mine.advantage == "group_std_sample" else 0
    return (r - mean) / (r.std(axis=-1, ddof=ddof, keepdims=True) + mine.std_eps)


def token_weights(
    a: np.ndarray, tokens: np.ndarray, kept: np.ndarray, config: Config, mine: Objective
) -> np.ndarray:
    """The per-token weight of each response in the loss's gradient, [N, B, G]."""
    batch_prompts, group = a.shape[1], a.shape[2]
    responses = batch_prompts * group
    length_norm = config.length_norm or config.cap
    if mine.aggregation == "token_mean":  # the token sum over the batch's tokens
        w = a / np.maximum(np.where(kept, tokens, 0.0).sum(axis=(1, 2), keepdims=True), 1.0)
    elif mine.aggregation == "seq_mean_token_sum_norm":
        w = a / (responses * length_norm)
    elif mine.aggregation == "seq_mean_token_mean":
        w = a / (responses * tokens)
    elif mine.aggregation == "prompt_mean":  # SkyRL: 1 / (num_prompts x tokens_in_prompt_p)
        in_prompt = np.maximum(np.where(kept, tokens, 0.0).sum(axis=-1, keepdims=True), 1.0)
        w = a / (batch_prompts * in_prompt)
    elif mine.aggregation == "delta_l":  # the authors' factor, then (values x mask).mean()
        mean_length = tokens.mean(axis=(1, 2), keepdims=True)
        reciprocal = 1.0 / (tokens / mean_length) ** mine.alpha
        factor = reciprocal / reciprocal.mean(axis=(1, 2), keepdims=True)
        w = a * factor / (responses * length_norm)
    else:
        raise AssertionError(mine.aggregation)
    return np.where(kept, w, 0.0)


def updates_of(theta: np.ndarray, config: Config, mine: Objective, batches: Batches) -> np.ndarray:
    """g [N, P + 2] of each batch, the ascent direction sum_i w_i score_i."""
    right_of, length_of, stopped_of = outcome_table(config.cap)
    code = batches.code
    right, length, stopped = right_of[code], length_of[code], stopped_of[code]
    tokens = (length + config.approach_tokens).astype(np.float64)
    kept = stopped if mine.mask_truncated else np.ones(code.shape, dtype=bool)
    a = advantages_of(rewards_of(code, tokens, config, mine), mine)
    w = token_weights(a, tokens, kept, config, mine)
    approach = np.where(right, 1.0, 0.0) - sigmoid(theta[:-2][batches.prompt][..., None])
    s = sigmoid(np.where(right, theta[-2], theta[-1]))
    ramble = np.where(stopped, 1.0 - length * s, -config.cap * s)
    g = np.zeros((len(code), len(theta)))
    per_group = (w * approach).sum(axis=-1)
    for j in range(config.prompts):
        g[:, j] = np.where(batches.prompt == j, per_group, 0.0).sum(axis=-1)
    g[:, -2] = np.where(right, w * ramble, 0.0).sum(axis=(1, 2))
    g[:, -1] = np.where(right, 0.0, w * ramble).sum(axis=(1, 2))
    return g


def enumerated_expectation(theta: np.ndarray, config: Config, mine: Objective) -> np.ndarray:
    batches = enumerate_batches(theta, config, Mine(mine.advantage, mine.aggregation))
    return batches.prob @ updates_of(theta, config, mine, batches)


# (variant name or spec, configuration, this file's objective, the same without the new stage)
CASES: dict[str, tuple[str, Config, Objective, Objective]] = {
    "prompt_mean": (
        "advantage=none,aggregation=prompt_mean",
        CONFIG,
        Objective("none", "prompt_mean"),
        Objective("none", "token_mean"),
    ),
    "prompt_mean,masked": (
        "advantage=none,aggregation=prompt_mean,mask_truncated=True",
        RAMBLE_ONLY,
        Objective("none", "prompt_mean", mask_truncated=True),
        Objective("none", "token_mean", mask_truncated=True),
    ),
    "skyrl_prompt_mean": (
        "skyrl_prompt_mean",
        CONFIG,
        Objective("group_std_sample", "prompt_mean", std_eps=1e-6),
        Objective("group_std_sample", "token_mean", std_eps=1e-6),
    ),
    "delta_l": (
        "advantage=none,aggregation=delta_l",
        CONFIG,
        Objective("none", "delta_l"),
        Objective("none", "seq_mean_token_sum_norm"),
    ),
    "delta_l_norm,alpha=0.5": (
        "delta_l_norm,alpha=0.5",
        RAMBLE_ONLY.replace(length_norm=5.0),
        Objective("group_std_sample", "delta_l", std_eps=1e-6, alpha=0.5),
        Objective("group_std_sample", "seq_mean_token_sum_norm", std_eps=1e-6),
    ),
    "max_rl": (
        "max_rl",
        CONFIG,
        Objective("max_rl", "token_mean"),
        Objective("none", "token_mean"),
    ),
    "prime_rl_length_penalty": (
        "prime_rl_length_penalty",
        CONFIG,
        Objective("none", "token_mean", reward="length_penalty"),
        Objective("none", "token_mean"),
    ),
    # MaxRL divides by the shaped group mean, so the constant input and turns terms act (a centred
    # advantage cancels them)
    "length_penalty,weights": (
        "advantage=max_rl,aggregation=seq_mean_token_mean,reward=length_penalty,"
        "num_output_tokens_weight=0.5,num_input_tokens_weight=0.3,num_turns_weight=0.2",
        RAMBLE_ONLY,
        Objective("max_rl", "seq_mean_token_mean", reward="length_penalty", weights=(0.5, 0.3, 0.2)),
        Objective("max_rl", "seq_mean_token_mean"),
    ),
    "gr3": (
        "gr3",
        CONFIG,
        Objective("group_std", "seq_mean_token_mean", std_eps=CONFIG.std_eps, reward="gr3", alpha=0.3),
        Objective("group_std", "seq_mean_token_mean", std_eps=CONFIG.std_eps),
    ),
    "gr3,alpha=1": (
        "advantage=none,aggregation=token_mean,reward=gr3,alpha=1",
        RAMBLE_ONLY,
        Objective("none", "token_mean", reward="gr3", alpha=1.0),
        Objective("none", "token_mean"),
    ),
    "trl_async_grpo": (
        "trl_async_grpo",
        CONFIG,
        Objective("group_std", "token_mean", std_eps=1e-8),
        Objective("group_std_sample", "token_mean", std_eps=1e-8),
    ),
}


def case(name: str) -> tuple[Variant, Config, Objective, Objective]:
    text, config, mine, without = CASES[name]
    preset, _, extra = text.partition(",")
    if "=" in preset:  # a spec
        variant = parse_variant(text)
    else:  # a preset, with more settings after it
        variant = parse_variant(f"{parse_variant(preset).spec_text()},{extra}" if extra else preset)
    names = variant.names()
    assert (names["advantage"], names["normaliser"], names["reward"]) == (
        mine.advantage,
        mine.aggregation,
        mine.reward,
    ), names
    return variant, config, mine, without


@pytest.mark.parametrize("theta_name", list(THETAS))
@pytest.mark.parametrize("name", list(CASES))
def test_toyrl_s_update_on_every_batch_is_the_source_s_formula(name: str, theta_name: str) -> None:
    """Every batch of the configuration (ordered prompt draws x 8^4 outcomes), drawn through
    `train_step`: toyrl's first update equals this file's g(batch) to 1e-12."""
    variant, config, mine, _ = case(name)
    theta = THETAS[theta_name]
    batches = enumerate_batches(theta, config, Mine(mine.advantage, mine.aggregation))
    uniform, exponential = response_noise(theta, batches.prompt, batches.code, config.cap)
    got = toyrl_updates(theta, config, variant, (batches.prompt, uniform, exponential), None)
    want = updates_of(theta, config, mine, batches)
    assert np.abs(want).max() > 1e-3
    assert relative_difference(got, want) < 1e-12, relative_difference(got, want)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_the_mean_of_toyrl_s_sampled_updates_is_the_enumerated_expectation(name: str) -> None:
    """4 x 50,000 independent first updates through `train_step`: every coordinate of their mean
    within 5 standard errors of the enumerated E[g], and more than 10 from the E[g] of the variant
    without its new stage in some coordinate (so the check has power: on this tiny configuration
    the prompt mean and the length penalty move E[g] by a few per cent, hence the draws)."""
    variant, config, mine, without = case(name)
    theta = THETAS["b"]
    exact = enumerated_expectation(theta, config, mine)
    g = np.concatenate(
        [sampled_first_updates(theta, config, variant, 50_000, seed) for seed in range(21, 25)]
    )
    mean, se = g.mean(axis=0), g.std(axis=0, ddof=1) / np.sqrt(len(g))
    assert (se > 0).all()
    z = np.abs(mean - exact) / se
    assert (z < 5).all(), f"{name}: z = {np.round(z, 2)}"
    away = np.abs(mean - enumerated_expectation(theta, config, without)) / se
    assert away.max() > 10, f"{name}: the check cannot tell {without}"


MAX_RL_EXACT = {
    "seq_mean_token_sum_norm": Objective("max_rl", "seq_mean_token_sum_norm"),
    "seq_mean_token_mean": Objective("max_rl", "seq_mean_token_mean"),
}


@pytest.mark.parametrize("theta_name", list(THETAS))
@pytest.mark.parametrize("aggregation", list(MAX_RL_EXACT))
def test_max_rl_s_exact_expected_update_is_the_enumerated_one(aggregation: str, theta_name: str) -> None:
    """MaxRL's exact hook `conditional` (E[A | r] over the group's other successes) gives the
    enumerated E[g] to 1e-12, a zero-success group's zero advantage included; it differs from the
    centred advantage's."""
    variant = parse_variant(f"advantage=max_rl,aggregation={aggregation}")
    assert not simulated_only(variant.advantage)
    theta = THETAS[theta_name]
    for config in (CONFIG, RAMBLE_ONLY.replace(length_norm=5.0)):
        exact = expected_update(theta[None], config, [variant])[0]
        enumerated = enumerated_expectation(theta, config, MAX_RL_EXACT[aggregation])
        assert relative_difference(enumerated[None], exact[None]) < 1e-12
        centred = enumerated_expectation(theta, config, Objective("none", aggregation))
        assert np.abs(centred - exact).max() > 1e-3


@pytest.mark.slow
def test_max_rl_s_exact_expected_update_is_the_mean_of_its_sampled_ones() -> None:
    """50,000 sampled first updates of max_rl with Dr. GRPO's constant: their mean within 5
    standard errors of `expected_update` in every coordinate."""
    variant = parse_variant("advantage=max_rl,aggregation=seq_mean_token_sum_norm")
    theta = THETAS["a"]
    exact = expected_update(theta[None], CONFIG, [variant])[0]
    g = np.concatenate([sampled_first_updates(theta, CONFIG, variant, 25_000, seed) for seed in (31, 32)])
    mean, se = g.mean(axis=0), g.std(axis=0, ddof=1) / np.sqrt(len(g))
    assert (np.abs(mean - exact) / se < 5).all()


def test_max_rl_gives_a_group_without_success_no_advantage() -> None:
    """(r - mu) / mu by hand, and 0 where mu = 0 (prime-rl: torch.zeros_like when mean <= 0)."""
    stage = REGISTRY["advantage"]["max_rl"]
    rewards = np.array([[[1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]])
    want = [[[1.0, -1.0, -1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [1 / 3, 1 / 3, 1 / 3, -1.0]]]
    np.testing.assert_allclose(stage.advantages(rewards, 0.0), want, rtol=0, atol=1e-15)
    np.testing.assert_allclose(stage.conditional(1.0, np.array([0.0, 1.0]), 4, 0.0), [3.0, 1.0], atol=1e-15)
    np.testing.assert_array_equal(stage.conditional(0.0, np.array([0.0]), 4, 0.0), [0.0])


def test_prompt_mean_counts_the_prompts_and_tokens_of_its_mini_batch() -> None:
    """With a mini-batch `members`: D_i = the group's tokens among the members that are in the
    loss, n = the prompts with a member (SkyRL takes the reduction per mini-batch)."""
    tokens = np.array([[[3.0, 5.0], [2.0, 7.0], [4.0, 1.0]]])
    included = np.array([[[True, True], [True, False], [True, True]]])
    members = np.array([[[True, False], [True, True], [False, False]]])
    d, n = PromptMean().denominators(tokens, included, 10.0, members)
    assert n.tolist() == [2.0]
    # prompt 0: 3 (its 5 is not a member); prompt 1: 2 (its 7 is masked out of the loss)
    assert d[0, 0, 0] == 3.0 and d[0, 1, 0] == 2.0
    d, n = PromptMean().denominators(tokens, included, 10.0)
    assert n.tolist() == [3.0]
    np.testing.assert_array_equal(d[0, :, 0], [8.0, 2.0, 5.0])
