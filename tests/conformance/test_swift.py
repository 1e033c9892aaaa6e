"""ms-swift (ms-swift 4.6.0) against toyrl's mapping of its settings (toyrl/trainers/swift.py).

What runs is ms-swift's own code:
- the advantages: `swift.rl_core.advantage.compute_advantages` (the function GRPOTrainer's
  `_compute_advantages` calls with the gathered rewards), on the toy's rewards [N, 1], for each
  advantage_estimator x scale_rewards the mapping claims;
- the micro-batches: `BaseRolloutTrainerMixin._split_data_by_steps` (what `split_by_mini_batches` calls),
  cutting the generation batch, in its order, into steps_per_generation parts;
- the per-token advantage: `expand_advantage_to_per_token` (`_postprocess_batch`);
- the loss: `GRPOTrainer._compute_loss_and_metrics` and `_undo_gradient_accumulation_scaling`, the
  trainer's own methods, on a trainer instance made without its __init__ (which loads models),
  its attributes set as `_prepare_algorithm_params` sets them from the arguments, a real
  (single-process, CPU) `accelerate.Accelerator`, and `_get_per_token_logps_and_entropies` (the
  model's forward) replaced on the instance: it returns the micro-batch's rows of a float64 leaf
  tensor [N, T] of the toy's per-token log-probs at the policy under test, so that autograd on the
  leaf gives ms-swift's d loss / d logp of every token.
Two pieces of plumbing are restated, each a line: `num_items_in_batch`, the generation batch's
completion-token count (`_prepare_batch_inputs`: `total_lengths.sum()`), and transformers'
`Trainer.training_step`, which divides each micro-batch's loss by the accumulation steps before
backward (GRPOTrainer sets `model_accepts_loss_kwargs = False`) and steps the optimiser every
gradient_accumulation_steps micro-batches. The optimiser step itself is replaced by the test's
schedule of policies (`toy.moved`), so later steps see ratios != 1, as in test_oat.py.

toyrl's side (tests/conformance/toy.py) is its core, given the spec toyrl's mapping gives for the
same settings (`toyrl.trainers.resolve("ms-swift", ...)`): never a restatement of ms-swift's formula.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

from tests.conformance.conftest import trainer_module
from tests.conformance.toy import CONFIG as toy_config
from tests.conformance.toy import (
    ToyBatch,
    advantages,
    made,
    moved,
    relative_difference,
    sampled,
    token_weights,
)
from toyrl.objective import Variant
from toyrl.trainers import resolve
from toyrl.variants import parse_variant

DISTRIBUTION = "ms-swift"
CONFIG = toy_config  # T = cap + 1 = 31 positions; dr_grpo's max_completion_length is T


def corner_cases() -> ToyBatch:
    """Hand-made: unequal lengths, an all-0 and an all-1 group, truncated responses."""
    cap = CONFIG.cap
    right = [[1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 1]]
    ramble = [[3, 12, 7, cap], [5, cap, 9, 2], [5, 6, 20, 29], [cap, cap, 8, 15]]
    stopped = [[1, 1, 1, 0], [1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1]]
    return made(np.array(right), np.array(ramble), np.array(stopped), CONFIG)


BATCHES = {"made": corner_cases, **{f"sampled {s}": (lambda s=s: sampled(s, CONFIG)) for s in (0, 1)}}


@pytest.fixture(scope="module")
def swift() -> types.SimpleNamespace:
    advantage = trainer_module("swift.rl_core.advantage", DISTRIBUTION)
    import torch
    from accelerate import Accelerator
    from swift.rl_core.data import GRPOBatch
    from swift.rlhf_trainers.base_rollout_mixin import BaseRolloutTrainerMixin
    from swift.rlhf_trainers.grpo_trainer import GRPOTrainer

    return types.SimpleNamespace(
        advantage=advantage,
        torch=torch,
        accelerator=Accelerator(cpu=True),
        GRPOBatch=GRPOBatch,
        split=BaseRolloutTrainerMixin._split_data_by_steps,
        GRPOTrainer=GRPOTrainer,
    )


def mapped(settings: dict[str, Any]) -> Variant:
    """toyrl's variant of the settings (its defaults filled in), as `toyrl check` maps them."""
    return parse_variant(resolve(DISTRIBUTION, None, settings).mapping.spec)


def swift_advantages(swift, toy: ToyBatch, variant: Variant, settings: dict[str, Any]) -> np.ndarray:
    """ms-swift's advantages [N] of the toy's rewards (compute_advantages, as _compute_advantages
    calls it: one reward function of weight 1)."""
    torch = swift.torch
    estimator = settings.get("advantage_estimator", "grpo")
    scale = (
        settings.get("scale_rewards")
        or {"grpo": "group", "rloo": "none", "reinforce_plus_plus": "batch"}[estimator]
    )
    rewards = torch.tensor(toy.rewards(variant), dtype=torch.float64)[:, None]
    computed, _ = swift.advantage.compute_advantages(
        rewards_per_func=rewards,
        reward_weights=torch.ones(1, dtype=torch.float64),
        num_generations=toy.shape[1],
        advantage_estimator=estimator,
        scale_rewards=scale,
        kl_in_reward=False,
        beta=0.0,
    )
    return computed.numpy()


ADVANTAGES = [
    {},
    {"scale_rewards": "batch"},
    {"scale_rewards": "none"},
    {"advantage_estimator": "rloo", "kl_in_reward": False},
    {"advantage_estimator": "reinforce_plus_plus", "kl_in_reward": False},
    {"advantage_estimator": "reinforce_plus_plus", "kl_in_reward": False, "scale_rewards": "group"},
    {"advantage_estimator": "reinforce_plus_plus", "kl_in_reward": False, "scale_rewards": "none"},
]


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("settings", ADVANTAGES, ids=str)
def test_advantages(swift, conform, batch: str, settings: dict[str, Any]) -> None:
    toy = BATCHES[batch]()
    variant = mapped(settings)
    got = swift_advantages(swift, toy, variant, settings)
    conform(
        DISTRIBUTION,
        f"advantages {settings} ({batch})",
        variant.spec_text(),
        relative_difference(got, advantages(variant, toy)),
    )


class Trainer:
    """ms-swift's GRPOTrainer without its __init__: the attributes `_prepare_algorithm_params`
    sets from the arguments, and the model's forward replaced (the class docstring above)."""

    def __new__(cls, swift, settings: dict[str, Any], toy: ToyBatch):  # type: ignore[no-untyped-def]
        trainer = object.__new__(swift.GRPOTrainer)
        epsilon = settings.get("epsilon", 0.2)
        epsilon_high = settings.get("epsilon_high")
        values = {
            "model": types.SimpleNamespace(training=True),
            "args": types.SimpleNamespace(
                delta=settings.get("delta"),
                log_entropy=False,
                top_entropy_quantile=1.0,
                gradient_accumulation_steps=settings.get("gradient_accumulation_steps", 1),
            ),
            "accelerator": swift.accelerator,
            "compute_entropy": False,
            "top_entropy_quantile": 1.0,
            "overlong_filter": settings.get("overlong_filter", False),
            "beta": settings.get("beta", 0.04),
            "kl_in_reward": False,
            "rollout_importance_sampling_mode": None,
            "log_rollout_offpolicy_metrics": False,
            "disable_rollout_importance_sampling": False,
            "importance_sampling_level": settings.get("importance_sampling_level", "token"),
            "_has_teacher": False,
            "loss_type": settings.get("loss_type", "grpo"),
            "off_policy_sequence_mask_delta": None,
            "epsilon_low": epsilon,
            "epsilon_high": epsilon if epsilon_high is None else epsilon_high,
            "tau_pos": settings.get("tau_pos", 1.0),
            "tau_neg": settings.get("tau_neg", 1.05),
            "max_completion_length": toy.width,
            "num_generations": toy.shape[1],
            "sdar_loss_coef": 0.0,
            "chord_sft_iterator": None,
            "model_accepts_loss_kwargs": False,
            "compute_loss_func": None,
            "current_gradient_accumulation_steps": settings.get("gradient_accumulation_steps", 1),
        }
        for name, value in values.items():
            object.__setattr__(trainer, name, value)
        return trainer


def run_swift(swift, toy: ToyBatch, settings: dict[str, Any], thetas: list[np.ndarray]) -> list[np.ndarray]:
    """d loss / d logp [N, T] of each of ms-swift's optimiser steps over the generation batch: its
    steps_per_generation micro-batches (`_split_data_by_steps`), gradient_accumulation_steps of
    them a step, for num_iterations passes; step u at the policy thetas[u] (the last one after)."""
    torch = swift.torch
    n, width = toy.responses, toy.width
    variant = mapped(settings)
    base = torch.tensor(swift_advantages(swift, toy, variant, settings), dtype=torch.float64)
    mask = torch.tensor(toy.mask)
    accumulation = settings.get("gradient_accumulation_steps", 1)
    steps = settings.get("steps_per_generation") or accumulation
    chunks = swift.split(list(range(n)), steps)
    old = torch.tensor(toy.logp(), dtype=torch.float64)
    truncated = torch.tensor(~toy.stopped)
    num_items = mask.sum(-1).to(torch.float64).sum()  # _prepare_batch_inputs: total_lengths.sum()
    trainer = Trainer(swift, settings, toy)
    grads: list[np.ndarray] = []
    micro = 0
    for _ in range(settings.get("num_iterations", 1)):
        for chunk in chunks:
            if micro % accumulation == 0:
                theta = thetas[min(len(grads), len(thetas) - 1)]
                leaf = torch.tensor(toy.logp(theta), dtype=torch.float64, requires_grad=True)
            rows = torch.tensor(chunk)
            batch = swift.GRPOBatch(
                completion_mask=mask[rows],
                truncated_mask=truncated[rows],
                seq_lengths=mask[rows].sum(-1),
                old_per_token_logps=old[rows],
                ref_per_token_logps=old[rows] if trainer.beta != 0 else None,
                num_items_in_batch=num_items,
            )
            batch.advantages = swift.advantage.expand_advantage_to_per_token(
                base[rows], batch.completion_mask
            )
            trainer._get_per_token_logps_and_entropies = lambda *a, rows=rows, leaf=leaf, **k: (
                leaf[rows],
                None,
            )
            loss, _ = trainer._compute_loss_and_metrics(None, {}, batch)
            (loss / accumulation).backward()  # transformers' Trainer.training_step
            micro += 1
            if micro % accumulation == 0:
                grads.append(leaf.grad.numpy().copy())
    assert all(g.shape == (n, width) for g in grads)
    return grads


LOSSES = [
    ({}, "the defaults: grpo, group std, beta 0.04"),
    ({"loss_type": "dr_grpo", "scale_rewards": "none"}, "Dr. GRPO's settings"),
    ({"loss_type": "dr_grpo", "scale_rewards": "none", "beta": 0.0}, "Dr. GRPO, beta 0"),
    ({"loss_type": "bnpo", "gradient_accumulation_steps": 4, "beta": 0.0}, "bnpo, 4 micro-batches"),
    ({"loss_type": "dapo", "beta": 0.0, "gradient_accumulation_steps": 2}, "dapo, 2 micro-batches"),
    ({"loss_type": "grpo", "gradient_accumulation_steps": 4}, "grpo, 4 micro-batches"),
    ({"loss_type": "sapo", "beta": 0.0}, "sapo"),
    ({"loss_type": "cispo", "epsilon_high": 5.0, "beta": 0.0}, "cispo"),
    ({"importance_sampling_level": "sequence", "beta": 0.0}, "GSPO's sequence ratio"),
    ({"importance_sampling_level": "sequence_token", "beta": 0.0}, "GSPO-token"),
    ({"overlong_filter": True, "beta": 0.0}, "overlong_filter"),
    ({"advantage_estimator": "rloo", "kl_in_reward": False, "beta": 0.0}, "rloo"),
]


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize(("settings", "what"), LOSSES, ids=[what for _, what in LOSSES])
def test_first_update(swift, conform, batch: str, settings: dict[str, Any], what: str) -> None:
    """One optimiser step a generation, on policy (ratio 1)."""
    toy = BATCHES[batch]()
    variant = mapped(settings)
    (got,) = run_swift(swift, toy, settings, [toy.theta_old])
    conform(
        DISTRIBUTION,
        f"{what} ({batch})",
        variant.spec_text(),
        relative_difference(got, token_weights(variant, toy)),
    )


SCHEDULES = [
    ({"steps_per_generation": 4, "gradient_accumulation_steps": 2, "beta": 0.0}, "grpo, 2 steps"),
    ({"num_iterations": 2, "epsilon": 0.1}, "grpo, 2 iterations, beta 0.04"),
    (
        {"loss_type": "dr_grpo", "scale_rewards": "none", "steps_per_generation": 4, "beta": 0.0},
        "Dr. GRPO, 4 steps",
    ),
    (
        {"loss_type": "bnpo", "steps_per_generation": 4, "gradient_accumulation_steps": 2, "beta": 0.0},
        "bnpo, 2 steps of 2 micro-batches",
    ),
    ({"delta": 1.5, "num_iterations": 2, "epsilon": 0.1, "beta": 0.0}, "delta (dual clip)"),
    ({"loss_type": "sapo", "num_iterations": 2, "beta": 0.0}, "sapo, 2 iterations"),
    ({"loss_type": "cispo", "epsilon_high": 1.5, "num_iterations": 2, "beta": 0.0}, "cispo, 2 iterations"),
    ({"importance_sampling_level": "sequence", "num_iterations": 2, "beta": 0.0}, "GSPO, 2 iterations"),
    (
        {"importance_sampling_level": "sequence_token", "num_iterations": 2, "beta": 0.0},
        "GSPO-token, 2 iterations",
    ),
    (
        {"loss_type": "dr_grpo", "scale_rewards": "none", "num_iterations": 2},
        "Dr. GRPO, 2 iterations, beta 0.04",
    ),
]


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize(("settings", "what"), SCHEDULES, ids=[what for _, what in SCHEDULES])
def test_later_updates(swift, conform, batch: str, settings: dict[str, Any], what: str) -> None:
    """Several optimiser steps a generation: step u at a moved policy (ratios != 1), ms-swift's
    micro-batches in the generation batch's order (toyrl's shuffle none)."""
    toy = BATCHES[batch]()
    variant = mapped(settings)
    thetas = [toy.theta_old] + [moved(toy, 10 + u, 1.0) for u in range(1, 8)]
    grads = run_swift(swift, toy, settings, thetas)
    for update, got in enumerate(grads):
        theta = None if update == 0 else thetas[update]
        expected = token_weights(variant, toy, theta, update=update)
        conform(
            DISTRIBUTION,
            f"{what}, step {update + 1} of {len(grads)} ({batch})",
            variant.spec_text(),
            relative_difference(got, expected),
        )
    assert len(grads) >= 2  # every case takes several optimiser steps


def test_dapo_over_several_steps_is_batch_tokens_times_a_smaller_learning_rate(swift, conform) -> None:
    """dapo with 2 optimiser steps a generation: ms-swift divides each by all the generation batch's
    tokens; toyrl's batch_tokens by their share (the batch's over 2): exactly a factor 2 (the mapping
    names it in `unmodelled`)."""
    toy = corner_cases()
    settings = {"loss_type": "dapo", "steps_per_generation": 2, "beta": 0.0}
    variant = mapped(settings)
    grads = run_swift(swift, toy, settings, [toy.theta_old, moved(toy, 3, 1.0)])
    for update, got in enumerate(grads):
        theta = None if update == 0 else moved(toy, 3, 1.0)
        expected = token_weights(variant, toy, theta, update=update)
        conform(
            DISTRIBUTION,
            f"dapo 2 steps x 2, step {update + 1}",
            variant.spec_text(),
            relative_difference(2 * got, expected),
        )


def test_the_comparison_tells_the_aggregations_and_clips_apart(swift) -> None:
    """ms-swift's gradients against a wrong toyrl spec differ far beyond the tolerance: the default's
    against the token mean, the dual clip's later step against no dual clip."""
    toy = corner_cases()
    (default,) = run_swift(swift, toy, {"beta": 0.0}, [toy.theta_old])
    token_mean = parse_variant("advantage=group_std_sample,aggregation=token_mean,std_eps=0.0001")
    assert relative_difference(default, token_weights(token_mean, toy)) > 0.1
    settings = {"delta": 1.5, "num_iterations": 2, "epsilon": 0.1, "beta": 0.0}
    theta = moved(toy, 11, 1.0)
    _, later = run_swift(swift, toy, settings, [toy.theta_old, theta])
    without = parse_variant(mapped(settings).spec_text().replace(",dual_clip=1.5", ""))
    assert relative_difference(later, token_weights(mapped(settings), toy, theta, update=1)) <= 1e-10
    assert relative_difference(later, token_weights(without, toy, theta, update=1)) > 0.1


@pytest.mark.parametrize(("longest", "cache", "soft_max", "weight"), [(64, 16, None, 1.0), (40, 20, 48, 0.5)])
def test_soft_overlong_is_the_toy_s_reward(
    swift, longest: int, cache: int, soft_max: int | None, weight: float
) -> None:
    """ms-swift's SoftOverlong (swift/rewards/orm.py) at every length up to max_completion_length (the
    toy's longest response: its cap and approach token), weighted beside a 0/1 task reward, against
    the toy's soft_overlong reward of the mapped spec."""
    import dataclasses

    from swift.rewards.orm import SoftOverlong

    from toyrl.policy import Batch

    settings = {
        "reward_funcs": ["accuracy", "soft_overlong"],
        "reward_weights": [1.0, weight],
        "max_completion_length": longest,
        "soft_cache_length": cache,
        "soft_max_length": soft_max,
    }
    stage = mapped(settings).reward
    punish = SoftOverlong(types.SimpleNamespace(soft_max_length=soft_max or longest, soft_cache_length=cache))
    config = dataclasses.replace(CONFIG, cap=longest - 1)
    ramble = np.arange(0, longest)
    wrong = np.zeros(len(ramble), dtype=bool)
    batch = Batch(np.zeros(len(ramble), dtype=np.int64), wrong, ramble.astype(np.int64), ~wrong)
    tokens = ramble + config.approach_tokens
    swift_rewards = weight * np.array(
        punish([""] * len(tokens), response_token_ids=[[4] * int(n) for n in tokens])
    )
    assert swift_rewards.min() < 0
    assert np.abs(stage.rewards(batch, config) - swift_rewards).max() < 1e-12
