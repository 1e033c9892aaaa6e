"""AReaL (areal 1.0.4) against the toy variants toyrl's mapping (toyrl/trainers/areal.py) gives.

What runs is AReaL's own PPO actor (areal/trainer/ppo/actor.py), built from its own
`PPOActorConfig` and `NormConfig`: `PPOActor._compute_advantages` on a padded batch as AReaL's
rollout hands it over (prompt then response ids, right-padded; the attention mask; the loss mask
on the response tokens; the sampler's log-prob of each token at its position; one scalar reward
per sequence), which rolls the masks and log-probs onto the predicting positions, scales, clips
and normalises the rewards (`reward_norm`), places them on the last predicting position, runs its
GAE loop (discount 1, lambda 1, no values: every token's advantage its response's reward) and
normalises the advantages (`adv_norm`, `Normalization` of areal/utils/data.py); then
`PPOActor._ppo_update`, which splits the batch into `ppo_n_minibatches` mini-batches
(`split_padded_tensor_dict_into_mb_list`) and hands each to the engine's `train_batch` with its
`grpo_loss_fn` (ppo_actor_loss_fn or sapo_loss_fn: the token sum over the loss mask / the
micro-batch's loss-mask count) and `loss_weight_fn` (the loss mask's count).

The stand-in engine (`Engine`) supplies what needs a model: its `train_batch` computes the
per-token log-probs of the toy policy at the current theta in AReaL's layout (position t holds the
log-prob of token t + 1), from a float64 leaf [N, T] (toy layout) so that autograd on the leaf
gives d loss / d logp of every token; rows are found by their first token (ROW + i). It weighs the
micro-batch's loss as areal/engine/fsdp_engine.py does (loss x local weight / total weight of the
mini-batch; one micro-batch here, so the factor is 1), backpropagates, records the gradient and
moves the policy to the next theta of the test's schedule (in place of the optimiser), so a later
mini-batch sees ratios != 1. This restates two lines of the engine, which needs a GPU model.

AReaL returns its normalised rewards and advantages in float32 (`Normalization.__call__` ends in
`.float()`, after computing in float64): where the normalised values are exact in float32 (the
group mean of 0/1 rewards over 4 responses: multiples of 1/4) the comparisons are at 1e-10; where
a std divides they carry float32's rounding, and are compared at FLOAT32 (8 units of float32's
roundoff, 2^-24, relative to the largest value: at most two roundings, reward_norm's result and
adv_norm's, the first amplified at most about 4 times by adv_norm's centring, since the
token-weighted mean lies between the smallest and largest advantage). AReaL's token-weighted
whitening (`adv_norm` at batch levels) is toyrl's areal_* advantages, after each reward_norm its
GSM8K examples use (and with epsilons large enough that their place shows); the stage the
mapping used before, token_whiten_sample, is recorded as differing beyond float32's rounding.
"""

from __future__ import annotations

import types
from typing import Any
from unittest import mock

import numpy as np
import pytest

from tests.conformance.conftest import trainer_module
from tests.conformance.toy import (
    CONFIG,
    ToyBatch,
    advantages,
    relative_difference,
    sampled,
    stop_pushed,
    token_weights,
)
from toyrl.trainers import resolve
from toyrl.variants import parse_variant

DISTRIBUTION = "areal"
ROW = 1000  # the first token of row i is ROW + i: the stand-in engine finds its rows by it
BASE = {
    "gconfig.n_samples": CONFIG.group_size,
    "train_dataset.batch_size": CONFIG.batch_prompts,
    "actor.ppo_n_minibatches": 1,
    "actor.kl_ctl": 0.0,
}
GROUP_MEAN = {"actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": None}
GROUP_STD = {"actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": "group"}
GROUP_BATCH = {"actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": "batch"}
SCALED = {"actor.reward_scaling": 10.0, "actor.reward_bias": -0.5}  # AReaL's GSM8K examples
FLOAT32 = 8 * 2.0**-24  # AReaL's float32 results (module docstring)
WHITEN = {"actor.adv_norm.mean_level": "batch", "actor.adv_norm.std_level": "batch"}


@pytest.fixture(scope="module")
def areal() -> Any:
    actor = trainer_module("areal.trainer.ppo.actor", DISTRIBUTION)
    import torch
    from areal.api.cli_args import NormConfig, PPOActorConfig
    from areal.utils import stats_tracker

    # AReaL's metrics tracker takes float32 tensors only (it logs; it feeds nothing back): the
    # float64 run's tensors are handed to it in float32
    record = stats_tracker.stat

    def stat(denominator, reduce_type=None, **values):
        values = {key: v.float() if v.dtype == torch.float64 else v for key, v in values.items()}
        return record(denominator, reduce_type, **values)

    with mock.patch.object(stats_tracker, "stat", stat):
        yield types.SimpleNamespace(
            actor=actor,
            torch=torch,
            NormConfig=NormConfig,
            PPOActorConfig=PPOActorConfig,
            stats_tracker=stats_tracker,
        )


def resolved(settings: dict[str, Any]) -> Any:
    return resolve("areal", "1.0.4", BASE | {"actor.reward_norm.group_size": CONFIG.group_size} | settings)


def config_of(areal, settings: dict[str, Any]) -> Any:
    """AReaL's own PPOActorConfig of the settings (every value as toyrl resolved it)."""
    s = resolved(settings).values
    a = "actor."

    def norm(section: str) -> Any:
        mean, std = s[a + section + ".mean_level"], s[a + section + ".std_level"]
        if mean == "(unset)" and std == "(unset)":
            return None
        return areal.NormConfig(
            mean_level="batch" if mean == "(unset)" else mean,
            std_level="batch" if std == "(unset)" else std,
            mean_leave1out=s[a + section + ".mean_leave1out"],
            std_unbiased=s[a + section + ".std_unbiased"],
            eps=s[a + section + ".eps"],
            group_size=s[a + section + ".group_size"],
        )

    return areal.PPOActorConfig(
        experiment_name="toyrl",
        trial_name="conformance",
        path="",
        ppo_n_minibatches=s[a + "ppo_n_minibatches"],
        eps_clip=s[a + "eps_clip"],
        eps_clip_higher=s[a + "eps_clip_higher"],
        c_clip=s[a + "c_clip"],
        reward_scaling=s[a + "reward_scaling"],
        reward_bias=s[a + "reward_bias"],
        reward_clip=s[a + "reward_clip"],
        reward_norm=norm("reward_norm"),
        adv_norm=norm("adv_norm"),
        kl_ctl=s[a + "kl_ctl"],
        use_sapo_loss=s[a + "use_sapo_loss"],
        sapo_tau_pos=s[a + "sapo_tau_pos"],
        sapo_tau_neg=s[a + "sapo_tau_neg"],
        importance_sampling_level=s[a + "importance_sampling_level"],
    )


def run(areal, toy: ToyBatch, thetas: list[np.ndarray], settings: dict[str, Any]) -> tuple[np.ndarray, list]:
    """AReaL's advantages [N] (each response's, at its first predicting position) and the gradient
    d loss / d logp [N, T] of each optimiser step (mini-batch), the policy at thetas[m] for step m."""
    torch = areal.torch
    n, width = toy.responses, toy.width
    prompt = 1 + np.arange(n) % 3  # prompts of unequal lengths: AReaL's layout differs per row
    tokens = toy.ramble + 1
    total = int((prompt + tokens).max()) + 1  # one column of padding for all
    input_ids = torch.full((n, total), 7, dtype=torch.long)
    input_ids[:, 0] = ROW + torch.arange(n)
    position = torch.arange(total)[None, :]
    attention = (position < torch.tensor(prompt + tokens)[:, None]).long()
    response = (position >= torch.tensor(prompt)[:, None]) & attention.bool()
    column = position - torch.tensor(prompt)[:, None]  # response token j of row i at prompt_i + j
    inside = response & (column < width)
    sampler = torch.tensor(toy.logp(), dtype=torch.float64)
    logprobs = torch.where(
        inside, sampler.gather(1, column.clamp(0, width - 1)), torch.zeros((), dtype=torch.float64)
    )
    rewards = torch.tensor(toy.rewards(parse_variant("dr_grpo")), dtype=torch.float64)
    data = {
        "input_ids": input_ids,
        "attention_mask": attention,
        "loss_mask": response.long(),
        "logprobs": logprobs,
        "rewards": rewards,
    }
    actor = areal.actor.PPOActor(config_of(areal, settings), Engine(torch, toy, thetas, prompt, total))
    data = actor._compute_advantages(data)
    first = torch.tensor(prompt - 1)[:, None]  # the position predicting response token 0
    got = data["advantages"].gather(1, first)[:, 0].double().numpy().copy()
    actor._ppo_update(data)
    areal.stats_tracker.export_all(reset=True)  # as the trainer does after each step
    return got, actor.engine.grads


class Engine:
    """What PPOActor._ppo_update calls of AReaL's train engine (see the module docstring)."""

    def __init__(
        self, torch, toy: ToyBatch, thetas: list[np.ndarray], prompt: np.ndarray, total: int
    ) -> None:
        self.torch, self.toy, self.thetas, self.total = torch, toy, thetas, total
        self.prompt = torch.tensor(prompt)
        self.grads: list[np.ndarray] = []
        self.rows: list[np.ndarray] = []

    def train(self) -> None:
        pass

    def get_version(self) -> int:
        return len(self.grads)

    def train_batch(self, mb: dict[str, Any], loss_fn, loss_weight_fn) -> dict[str, float]:
        torch, toy = self.torch, self.toy
        theta = self.thetas[min(len(self.grads), len(self.thetas) - 1)]
        leaf = torch.tensor(toy.logp(theta), dtype=torch.float64, requires_grad=True)
        rows = (mb["input_ids"][:, 0] - ROW).long()
        width = toy.width
        column = torch.arange(self.total)[None, :] + 1 - self.prompt[rows][:, None]  # position t: token t + 1
        inside = (column >= 0) & (column < width)
        padded = torch.cat([leaf, leaf.new_zeros(toy.responses, 1)], dim=1)
        logprobs = padded[rows].gather(1, torch.where(inside, column, width))
        loss = loss_fn(logprobs, torch.zeros_like(logprobs.detach()), mb)
        weight = loss_weight_fn(mb)
        (loss * weight / weight).backward()  # fsdp_engine: loss x local weight / the mini-batch's total
        self.grads.append(leaf.grad.detach().numpy().copy())
        self.rows.append(np.sort(rows.numpy()))
        return {}


def spec_of(settings: dict[str, Any]) -> str:
    return resolved(settings).mapping.spec


def check(
    conform,
    setting: str,
    spec: str,
    got: np.ndarray,
    expected: np.ndarray,
    agrees: bool = True,
    tolerance: float | None = None,
) -> None:
    difference = relative_difference(got, expected)
    if tolerance is None:
        conform(DISTRIBUTION, setting, spec, difference, expected=agrees)
    else:
        conform(DISTRIBUTION, setting, spec, difference, expected=agrees, tolerance=tolerance)


LOSSES = {
    "ppo clip": {},
    "clip-higher": {"actor.eps_clip_higher": 0.28},
    "dual clip": {"actor.c_clip": 3.0},
    "gspo": {"actor.importance_sampling_level": "sequence"},
    "sapo": {"actor.use_sapo_loss": True},
    "scaled rewards": {"actor.reward_scaling": 10.0, "actor.reward_bias": -0.5},
}


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("loss", list(LOSSES))
def test_group_mean(areal, conform, loss: str, seed: int) -> None:
    """reward_norm at the group mean with no std (AReaL's Dr. GRPO example, without its adv_norm):
    the advantage r - group mean, exact in float32, and the token mean over the mini-batch: the
    first step at ratio 1, a second at a policy far from theta_old (each clip acts), against the
    mapping. With reward_scaling 10 the mapping's spec is the same and the gradient 10 times larger
    (the mapping's note: a learning-rate scale)."""
    toy = sampled(seed, CONFIG)
    settings = GROUP_MEAN | LOSSES[loss]
    spec = spec_of(settings)
    variant = parse_variant(spec)
    far = stop_pushed(toy, 70 + seed)
    got, grads = run(areal, toy, [toy.theta_old], settings)
    scale = 10.0 if loss == "scaled rewards" else 1.0
    check(
        conform, f"group mean, {loss}, seed {seed}: advantages", spec, got / scale, advantages(variant, toy)
    )
    check(
        conform,
        f"group mean, {loss}, seed {seed}: ratio 1",
        spec,
        grads[0] / scale,
        token_weights(variant, toy),
    )
    _, grads = run(areal, toy, [far], settings)
    expected = token_weights(variant, toy, far)
    assert ((expected == 0) & toy.mask).any() or loss == "sapo"  # the clip acts
    check(conform, f"group mean, {loss}, seed {seed}: far theta", spec, grads[0] / scale, expected)


def test_dr_grpo_setting(areal, conform) -> None:
    """The mapping's Dr. GRPO levers (reward_norm group mean, no std; adv_norm null) give the
    toy's `none` advantage and token_mean: AReaL's loss divides by the mini-batch's tokens, which
    no setting changes; its Dr. GRPO example's adv_norm makes it differ further (next test)."""
    toy = sampled(2, CONFIG)
    spec = spec_of(GROUP_MEAN)
    assert spec == parse_variant("trl_scale_none_only").spec_text() or "advantage=none" in spec
    _, grads = run(areal, toy, [toy.theta_old], GROUP_MEAN)
    check(conform, "Dr. GRPO levers: ratio 1", spec, grads[0], token_weights(parse_variant(spec), toy))
    dr = parse_variant("dr_grpo")
    check(conform, "Dr. GRPO levers vs Dr. GRPO's loss", "dr_grpo", grads[0], token_weights(dr, toy), False)


@pytest.mark.parametrize("unbiased", [True, False])
def test_group_std(areal, conform, unbiased: bool) -> None:
    """reward_norm at the group mean and std (sample std where std_unbiased): group_std_sample or
    group_std with std_eps = eps / reward_scaling, up to the float32 AReaL returns."""
    toy = sampled(3, CONFIG)
    settings = GROUP_STD | {"actor.reward_norm.std_unbiased": unbiased} | SCALED
    spec = spec_of(settings)
    assert ("group_std_sample" in spec) == unbiased and "std_eps=1e-06" in spec
    variant = parse_variant(spec)
    got, grads = run(areal, toy, [toy.theta_old], settings)
    expected = advantages(variant, toy)
    check(conform, f"group std (unbiased {unbiased}): advantages", spec, got, expected, tolerance=FLOAT32)
    weights = token_weights(variant, toy)
    check(conform, f"group std (unbiased {unbiased}): ratio 1", spec, grads[0], weights, tolerance=FLOAT32)


LOO = {"actor.reward_norm.mean_leave1out": True}
LARGE_EPS = {"actor.reward_norm.eps": 0.3, "actor.adv_norm.eps": 0.5}
WHITENED = {  # AReaL's GSM8K example each stands for, and the advantage the mapping gives
    "group mean (Dr. GRPO, REINFORCE-baseline examples)": (GROUP_MEAN | WHITEN | SCALED, "areal_whiten"),
    "group mean, reward_scaling 1": (GROUP_MEAN | WHITEN, "areal_whiten"),
    "leave-one-out mean (RLOO example)": (GROUP_MEAN | LOO | WHITEN | SCALED, "areal_whiten"),
    "group mean and std (GRPO example)": (GROUP_STD | WHITEN | SCALED, "areal_group_whiten"),
    "group mean and std, large eps": (GROUP_STD | WHITEN | SCALED | LARGE_EPS, "areal_group_whiten"),
    "group mean, batch std (LitePPO example)": (GROUP_BATCH | WHITEN | SCALED, "areal_batch_whiten"),
    "group mean, batch std, large eps": (GROUP_BATCH | WHITEN | LARGE_EPS, "areal_batch_whiten"),
    "rewards (REINFORCE example)": (WHITEN | SCALED, "areal_whiten_rewards"),
    "rewards, large eps": (WHITEN | SCALED | LARGE_EPS, "areal_whiten_rewards"),
}


@pytest.mark.parametrize("seed", [4, 5])
@pytest.mark.parametrize("case", list(WHITENED))
def test_token_whitening(areal, conform, case: str, seed: int) -> None:
    """adv_norm at batch levels after reward_norm (AReaL's GSM8K examples): the mapping's areal_*
    advantage, and the token mean's gradient at ratio 1 and at a policy far from theta_old, up to
    the float32 AReaL returns."""
    settings, name = WHITENED[case]
    spec = spec_of(settings)
    assert f"advantage={name}" in spec, spec
    variant = parse_variant(spec)
    toy = sampled(seed, CONFIG)
    got, grads = run(areal, toy, [toy.theta_old], settings)
    expected = advantages(variant, toy)
    assert np.abs(expected).max() > 0
    check(conform, f"adv_norm after {case}, seed {seed}: advantages", spec, got, expected, tolerance=FLOAT32)
    weights = token_weights(variant, toy)
    check(conform, f"adv_norm after {case}, seed {seed}: ratio 1", spec, grads[0], weights, tolerance=FLOAT32)
    far = stop_pushed(toy, 80 + seed)
    _, grads = run(areal, toy, [far], settings)
    weights = token_weights(variant, toy, far)
    check(
        conform, f"adv_norm after {case}, seed {seed}: far theta", spec, grads[0], weights, tolerance=FLOAT32
    )


@pytest.mark.parametrize("reward_norm", ["group mean", "group mean and std"])
def test_the_former_nearest_stage_differs(areal, conform, reward_norm: str) -> None:
    """token_whiten_sample, the stage the mapping used before the areal_* advantages, differs from
    AReaL's whitening beyond float32's rounding: by the epsilon's place after the group mean (about
    1e-5 / std), by each group's std after the group std."""
    toy = sampled(4, CONFIG)
    settings = (GROUP_MEAN if reward_norm == "group mean" else GROUP_STD) | WHITEN
    got, _ = run(areal, toy, [toy.theta_old], settings)
    nearest = "advantage=token_whiten_sample,aggregation=token_mean"
    expected = advantages(parse_variant(nearest), toy)
    check(conform, f"adv_norm after {reward_norm}: advantages", nearest, got, expected, False, FLOAT32)
