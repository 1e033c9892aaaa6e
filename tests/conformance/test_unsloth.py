"""Unsloth's GRPO loss (unsloth_zoo 2026.10.9) against toyrl's mapping of Unsloth's settings
(toyrl/trainers/unsloth.py).

What runs is Unsloth's own loss, `unsloth_zoo.rl_replacements.grpo_compute_loss`, the function
that replaces TRL's `_compute_loss` (through `grpo_accumulated_loss`) when unsloth is imported: its
ratios, PPO's clip and delta, cispo's and sapo's weights, GSPO's sequence ratio, its k3 term (times
the ratio with use_bias_correction_kl, clamped) and its normalisers, each already divided for
gradient accumulation (dapo's by num_items_in_batch x accumulation steps / steps_per_generation),
on the toy's per-token log-probs: `new` is a micro-batch's rows of a float64 leaf tensor [N, T] at
the policy under test, `old` and `ref` the toy's at theta_old, so autograd on the leaf gives
Unsloth's d loss / d logp of every token. The micro-batches are the generation batch cut in order
(the order TRL's shuffle drew is passed to toyrl as `order`: here the batch's own). Restated
plumbing, each a line: `num_items_in_batch` (TRL: the generation batch's completion-token count)
and the accumulation (transformers' Trainer does not divide a GRPO loss again: TRL's
loss_is_scaled_for_ga), the optimiser step replaced by the test's schedule of policies.

What the suite does not run: TRL's advantages (tests/conformance/test_trl.py runs them; the
advantages here are toyrl's, as both sides' input), and UnslothGRPOConfig's rewrites of the
settings (loss_type None -> dapo, beta None -> 0.001 but for dapo and dr_grpo, dr_grpo's
scale_rewards -> False, ...: unsloth/models/rl.py writes them into a generated class when unsloth
is imported, which patches TRL for a GPU). The settings below are given in full, so that no
rewrite applies, on both sides.
"""

from __future__ import annotations

import os
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

DISTRIBUTION = "unsloth_zoo"
CONFIG = toy_config


def corner_cases() -> ToyBatch:
    cap = CONFIG.cap
    right = [[1, 1, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [1, 0, 1, 1]]
    ramble = [[3, 12, 7, cap], [5, cap, 9, 2], [5, 6, 20, 29], [cap, cap, 8, 15]]
    stopped = [[1, 1, 1, 0], [1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1]]
    return made(np.array(right), np.array(ramble), np.array(stopped), CONFIG)


BATCHES = {"made": corner_cases, **{f"sampled {s}": (lambda s=s: sampled(s, CONFIG)) for s in (0, 1)}}


@pytest.fixture(scope="module")
def zoo(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """unsloth_zoo's loss, under torch's default dtype float64: its sapo temperatures are
    `torch.where(advantages > 0, pos, neg)` of Python floats, a tensor of the default dtype (in
    float32, tau_neg 1.05 is 1.0499999523: 2e-8 relative off the toy's, measured)."""
    os.environ.setdefault("UNSLOTH_IS_PRESENT", "1")  # what `import unsloth` sets first
    # unsloth_zoo writes modules it generates to ./unsloth_compiled_cache unless told elsewhere
    os.environ.setdefault("UNSLOTH_COMPILE_LOCATION", str(tmp_path_factory.mktemp("unsloth_compiled_cache")))
    replacements = trainer_module("unsloth_zoo.rl_replacements", DISTRIBUTION)
    import torch

    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield types.SimpleNamespace(loss=replacements.grpo_compute_loss, torch=torch)
    finally:
        torch.set_default_dtype(dtype)


# Every setting the loss reads, given (no UnslothGRPOConfig rewrite applies to a given value)
FULL = {
    "loss_type": "grpo",
    "beta": 0.0,
    "scale_rewards": "group",
    "epsilon": 0.2,
    "mask_truncated_completions": False,
    "per_device_train_batch_size": 16,
    "gradient_accumulation_steps": 1,
    "num_generations": 4,
    "max_completion_length": 31,
}


def mapped(settings: dict[str, Any]) -> Variant:
    return parse_variant(resolve("unsloth", None, FULL | settings).mapping.spec)


def run_unsloth(zoo, toy: ToyBatch, settings: dict[str, Any], thetas: list[np.ndarray]) -> list[np.ndarray]:
    """d loss / d logp [N, T] of each optimiser step: steps_per_generation micro-batches of the
    generation batch in order, gradient_accumulation_steps of them a step, num_iterations passes."""
    torch = zoo.torch
    s = FULL | settings
    variant = mapped(settings)
    n = toy.responses
    advantage = torch.tensor(advantages(variant, toy), dtype=torch.float64)
    mask = torch.tensor(toy.mask, dtype=torch.float64)
    old = torch.tensor(toy.logp(), dtype=torch.float64)
    accumulation = s["gradient_accumulation_steps"]
    steps = s.get("steps_per_generation") or accumulation
    size = n // steps
    num_items = mask.sum()  # TRL: the generation batch's completion tokens
    high = s.get("epsilon_high")
    kwargs = {
        "loss_type": s["loss_type"],
        "epsilon_low": s["epsilon"],
        "epsilon_high": s["epsilon"] if high is None else high,
        "max_completion_length": s["max_completion_length"],
        "delta": s.get("delta"),
        "importance_sampling_level": s.get("importance_sampling_level", "token"),
        "num_items_in_batch": num_items,
        "current_gradient_accumulation_steps": accumulation,
        "steps_per_generation": steps,
        "num_processes": 1,
        "use_bias_correction_kl": s.get("use_bias_correction_kl", True),
        "sapo_temperature_pos": s.get("sapo_temperature_pos", 1.0),
        "sapo_temperature_neg": s.get("sapo_temperature_neg", 1.05),
    }
    grads: list[np.ndarray] = []
    micro = 0
    for _ in range(s.get("num_iterations", 1)):
        for part in range(steps):
            if micro % accumulation == 0:
                theta = thetas[min(len(grads), len(thetas) - 1)]
                leaf = torch.tensor(toy.logp(theta), dtype=torch.float64, requires_grad=True)
            rows = torch.arange(part * size, (part + 1) * size)
            loss, *_ = zoo.loss(
                old[rows] if s["beta"] else None,
                leaf[rows],
                old[rows],
                None,
                torch.zeros(len(rows), toy.width, dtype=torch.long),
                mask[rows],
                s["beta"],
                advantage[rows],
                **kwargs,
            )
            loss.backward()
            micro += 1
            if micro % accumulation == 0:
                grads.append(leaf.grad.numpy().copy())
    return grads


FIRST = [
    ({}, "grpo"),
    ({"loss_type": "dr_grpo", "scale_rewards": "none"}, "dr_grpo, no std"),
    ({"loss_type": "dapo"}, "dapo (TRL's default)"),
    ({"loss_type": "bnpo", "gradient_accumulation_steps": 4}, "bnpo, 4 micro-batches"),
    ({"loss_type": "dapo", "gradient_accumulation_steps": 4}, "dapo, 4 micro-batches"),
    ({"loss_type": "grpo", "beta": 0.001}, "grpo, beta 0.001 (Unsloth's default for grpo)"),
    ({"loss_type": "sapo"}, "sapo"),
    ({"loss_type": "cispo", "epsilon_high": 5.0}, "cispo"),
    ({"importance_sampling_level": "sequence"}, "GSPO's sequence ratio"),
]


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize(("settings", "what"), FIRST, ids=[what for _, what in FIRST])
def test_first_update(zoo, conform, batch: str, settings: dict[str, Any], what: str) -> None:
    toy = BATCHES[batch]()
    variant = mapped(settings)
    (got,) = run_unsloth(zoo, toy, settings, [toy.theta_old])
    expected = token_weights(variant, toy, order=np.arange(toy.responses))
    conform(DISTRIBUTION, f"{what} ({batch})", variant.spec_text(), relative_difference(got, expected))


LATER = [
    ({"num_iterations": 2, "epsilon": 0.1}, "grpo, 2 iterations"),
    ({"num_iterations": 2, "epsilon": 0.1, "beta": 0.04}, "grpo, 2 iterations, beta 0.04 ratio-weighted"),
    ({"loss_type": "dr_grpo", "scale_rewards": "none", "num_iterations": 2}, "dr_grpo, 2 iterations"),
    ({"delta": 1.5, "num_iterations": 2, "epsilon": 0.1}, "delta (dual clip)"),
    ({"loss_type": "sapo", "num_iterations": 2}, "sapo, 2 iterations"),
    ({"loss_type": "cispo", "epsilon_high": 1.5, "num_iterations": 2}, "cispo, 2 iterations"),
    ({"importance_sampling_level": "sequence", "num_iterations": 2}, "GSPO, 2 iterations"),
    (
        {"loss_type": "dapo", "steps_per_generation": 4, "gradient_accumulation_steps": 2},
        "dapo, 2 steps of 2 micro-batches",
    ),
]


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize(("settings", "what"), LATER, ids=[what for _, what in LATER])
def test_later_updates(zoo, conform, batch: str, settings: dict[str, Any], what: str) -> None:
    """Optimiser step u at a moved policy (ratios != 1), against the old log-probs at theta_old."""
    toy = BATCHES[batch]()
    variant = mapped(settings)
    thetas = [toy.theta_old] + [moved(toy, 20 + u, 1.0) for u in range(1, 4)]
    grads = run_unsloth(zoo, toy, settings, thetas)
    assert len(grads) == 2  # two passes, or two optimiser steps a generation
    for update, got in enumerate(grads):
        theta = None if update == 0 else thetas[update]
        expected = token_weights(variant, toy, theta, update=update, order=np.arange(toy.responses))
        conform(
            DISTRIBUTION,
            f"{what}, step {update + 1} ({batch})",
            variant.spec_text(),
            relative_difference(got, expected),
        )


def test_the_comparison_tells_the_normalisers_apart(zoo) -> None:
    """Unsloth's gradients against a wrong toyrl spec differ far beyond the tolerance."""
    toy = corner_cases()
    (got,) = run_unsloth(zoo, toy, {"loss_type": "dapo"}, [toy.theta_old])
    wrong = parse_variant("advantage=group_std_sample,aggregation=seq_mean_token_mean,std_eps=0.0001")
    assert relative_difference(got, token_weights(mapped({"loss_type": "dapo"}), toy)) <= 1e-10
    assert relative_difference(got, token_weights(wrong, toy)) > 0.1
