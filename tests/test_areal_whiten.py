"""AReaL's advantages (areal_whiten, areal_whiten_rewards, areal_group_whiten, areal_batch_whiten)
against AReaL 1.0.4's normalisation as read from its code, restated here independently of toyrl.

`normalization` follows areal/utils/data.py `Normalization.__call__` (high_precision: float64)
step by step: the mean per level (`_compute_mean`: over the mask's elements, or every element
without a mask), x - mean zeroed outside the mask, the std per level (`_compute_std`: about the
mean already computed, so a batch std after a group mean is about the group means; Bessel over the
mask's count when unbiased, 1 where that count is <= 1), then (x - mean) / (std + eps), eps 0
where std_level is None. `areal_advantages` follows areal/trainer/ppo/actor.py
`PPOActor._compute_advantages`: (r + reward_bias) x reward_scaling, reward_norm on the responses'
rewards (no mask), each token of a response its reward (GAE at discount 1, lambda 1, no values),
then adv_norm over the tokens of the loss mask. AReaL rounds each normalisation's result to
float32; this restatement, like toyrl, does not (tests/conformance/test_areal.py runs AReaL's own).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

from tests.configs import SMALL
from tests.explorer_cases import check_case, page_run, python_side, result_expression
from tests.test_explorer_node import data, needs_node, node_evaluate  # noqa: F401 (a fixture)
from toyrl.config import InvalidInput
from toyrl.objective import from_spec
from toyrl.stages import REGISTRY
from toyrl.train import simulate
from toyrl.variants import parse_variant


def normalization(
    x: np.ndarray,
    mask: np.ndarray | None,
    mean_level: str | None,
    std_level: str | None,
    eps: float,
    group_size: int,
    unbiased: bool = True,
) -> np.ndarray:
    """areal/utils/data.py Normalization.__call__ on x [bs] or [bs, T] (loss mask of x's shape)."""
    bs = x.shape[0]

    def mean_of(xx: np.ndarray, m: np.ndarray | None) -> float:
        if m is None:
            return float(xx.sum() / xx.size)
        factor = m.sum()
        return 0.0 if factor == 0 else float((xx * m).sum() / factor)

    def std_of(xx: np.ndarray, m: np.ndarray | None, mean: np.ndarray) -> float:
        if m is None:
            factor, squares = xx.size, ((xx - mean) ** 2).sum()
        else:
            factor, squares = m.sum(), ((xx * m - mean * m) ** 2).sum()
        if unbiased:
            return 1.0 if factor <= 1 else float(np.sqrt(squares / (factor - 1)))
        return 1.0 if factor == 0 else float(np.sqrt(squares / factor))

    groups = [slice(i * group_size, (i + 1) * group_size) for i in range(bs // group_size)]
    mean = np.zeros_like(x)
    if mean_level == "batch":
        mean[:] = mean_of(x, mask)
    elif mean_level == "group":
        for s in groups:
            mean[s] = mean_of(x[s], None if mask is None else mask[s])
    centred = x - mean
    if mask is not None:
        centred = centred * mask
    std = np.ones_like(x)
    if std_level == "batch":
        std[:] = std_of(x, mask, mean)
    elif std_level == "group":
        for s in groups:
            std[s] = (
                1.0
                if group_size == 1 and unbiased
                else std_of(x[s], None if mask is None else mask[s], mean[s])
            )
    else:
        eps = 0.0
    return centred / (std + eps)


def areal_advantages(
    rewards: np.ndarray,
    tokens: np.ndarray,
    reward_norm: tuple[str | None, str | None] | None,
    reward_eps: float = 1e-5,
    adv_eps: float = 1e-5,
    scaling: float = 1.0,
    bias: float = 0.0,
) -> np.ndarray:
    """PPOActor._compute_advantages on one batch: rewards, tokens [B, G] -> each response's
    advantage [B, G] (its first token's; every token of a response has the same)."""
    group = rewards.shape[-1]
    score = (rewards.reshape(-1) + bias) * scaling
    if reward_norm is not None:
        score = normalization(score, None, reward_norm[0], reward_norm[1], reward_eps, group)
    counts = tokens.reshape(-1).astype(int)
    mask = (np.arange(counts.max())[None, :] < counts[:, None]).astype(np.float64)
    per_token = score[:, None] * mask
    return normalization(per_token, mask, "batch", "batch", adv_eps, 1)[:, 0].reshape(rewards.shape)


# each advantage: the reward_norm levels it stands for and how its epsilons follow from AReaL's
# (reward_norm.eps e_r, adv_norm.eps e_a, reward_scaling k)
AREAL = {
    "areal_whiten": (("group", None), lambda e_r, e_a, k: {"whiten_eps": e_a / k}),
    "areal_whiten_rewards": (None, lambda e_r, e_a, k: {"whiten_eps": e_a / k}),
    "areal_group_whiten": (("group", "group"), lambda e_r, e_a, k: {"std_eps": e_r / k, "whiten_eps": e_a}),
    "areal_batch_whiten": (("group", "batch"), lambda e_r, e_a, k: {"std_eps": e_r / k, "whiten_eps": e_a}),
}


def stage_of(name: str, **parameters: float) -> Any:
    return dataclasses.replace(REGISTRY["advantage"][name], **parameters)


def stage_advantages(stage: Any, rewards: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    return stage.advantages(
        rewards, stage.std_eps if getattr(stage, "std_eps", None) is not None else 1e-6, tokens
    )


def random_batches(count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """0/1 rewards [B, G] (some groups all equal) and token counts [B, G], of several shapes."""
    rng = np.random.default_rng(43)
    batches = []
    for _ in range(count):
        prompts, group = int(rng.integers(1, 6)), int(rng.integers(2, 9))
        rewards = (rng.random((prompts, group)) < rng.random((prompts, 1))).astype(np.float64)
        tokens = rng.integers(1, 40, size=(prompts, group)).astype(np.float64)
        batches.append((rewards, tokens))
    return batches


def relative(got: np.ndarray, expected: np.ndarray) -> float:
    return float(np.abs(got - expected).max() / max(np.abs(expected).max(), 1e-300))


@pytest.mark.parametrize("name", list(AREAL))
@pytest.mark.parametrize(
    ("e_r", "e_a", "k", "bias"), [(1e-5, 1e-5, 1.0, 0.0), (1e-5, 1e-5, 10.0, -0.5), (0.1, 0.3, 2.0, 0.25)]
)
def test_random_batches_agree_with_areal(name: str, e_r: float, e_a: float, k: float, bias: float) -> None:
    """Each stage, with the epsilons its mapping derives, on random batches: AReaL's normalisation
    to 1e-12 relative (AReaL's examples scale by 10 and bias by -0.5; large epsilons show where
    each goes)."""
    levels, eps = AREAL[name]
    stage = stage_of(name, **eps(e_r, e_a, k))
    differing = 0
    for rewards, tokens in random_batches(60):
        expected = areal_advantages(rewards, tokens, levels, e_r, e_a, k, bias)
        got = stage_advantages(stage, rewards, tokens)
        assert np.allclose(got, expected, rtol=0, atol=1e-12 * max(np.abs(expected).max(), 1.0)), (
            rewards,
            tokens,
        )
        differing += bool(np.abs(expected).max() > 0)
    assert differing > 30  # most batches carry a signal


@pytest.mark.parametrize("name", list(AREAL))
def test_every_batch_of_a_tiny_run_agrees_with_areal(name: str) -> None:
    """Every batch toyrl's training loop hands the stage (rewards and token counts of each step of
    each run) against AReaL's normalisation at its default epsilons (1e-5)."""
    levels, eps = AREAL[name]
    spec = {"advantage": name, "aggregation": "token_mean", **eps(1e-5, 1e-5, 1.0)}
    variant = from_spec(json.dumps(spec), spec)
    seen: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    original: Any = type(variant.advantage).advantages

    def recorded(self: Any, rewards: np.ndarray, std_eps: float, tokens: np.ndarray) -> np.ndarray:
        out = original(self, rewards, std_eps, tokens)
        seen.append((rewards.copy(), tokens.copy(), out.copy()))
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(variant.advantage), "advantages", recorded)
        simulate(SMALL, [(variant, 0), (variant, 1)])
    assert len(seen) >= SMALL.steps
    compared = 0
    for rewards, tokens, got in seen:
        for run in np.ndindex(rewards.shape[:-2]):
            expected = areal_advantages(rewards[run], tokens[run], levels)
            assert np.abs(got[run] - expected).max() <= 1e-12 * max(np.abs(expected).max(), 1.0)
            compared += 1
    assert compared >= 2 * SMALL.steps


def _eps_on_variance(values: np.ndarray, tokens: np.ndarray, eps: float) -> np.ndarray:
    total = tokens.sum(axis=(-2, -1), keepdims=True)
    shifted = values - (values * tokens).sum(axis=(-2, -1), keepdims=True) / total
    variance = (shifted * shifted * tokens).sum(axis=(-2, -1), keepdims=True) / (total - 1)
    return shifted / np.sqrt(variance + eps)


def _population(values: np.ndarray, tokens: np.ndarray, eps: float) -> np.ndarray:
    total = tokens.sum(axis=(-2, -1), keepdims=True)
    shifted = values - (values * tokens).sum(axis=(-2, -1), keepdims=True) / total
    return shifted / (np.sqrt((shifted * shifted * tokens).sum(axis=(-2, -1), keepdims=True) / total) + eps)


def _per_response(values: np.ndarray, tokens: np.ndarray, eps: float) -> np.ndarray:
    shifted = values - values.mean(axis=(-2, -1), keepdims=True)
    return shifted / (shifted.std(axis=(-2, -1), keepdims=True, ddof=1) + eps)


MUTANTS = {
    "eps on the variance": ("whitening", _eps_on_variance),
    "population variance over tokens": ("whitening", _population),
    "responses not weighed by tokens": ("whitening", _per_response),
    "group <-> batch std": ("scale", None),
    "centred <-> raw rewards": ("centred", None),
}


@pytest.mark.parametrize("mutant", list(MUTANTS))
@pytest.mark.parametrize("name", list(AREAL))
def test_the_comparison_fails_on_a_mutated_formula(name: str, mutant: str) -> None:
    """The comparison above tells each stage from a mutation of its formula (where the mutation
    applies to the stage): the mutated stage differs from AReaL's normalisation on the same batches
    by far more than the tolerance."""
    part, replacement = MUTANTS[mutant]
    levels, eps = AREAL[name]
    stage = stage_of(name, **eps(1e-3, 1e-3, 1.0))  # an epsilon large enough to be seen
    if part == "scale":
        if not hasattr(stage, "scale"):
            pytest.skip("no std divides the rewards")
        stage = dataclasses.replace(stage, scale="batch" if stage.scale == "group" else "group")
    if part == "centred":
        if not hasattr(stage, "centred"):
            pytest.skip("its rewards are always centred")
        stage = dataclasses.replace(stage, centred=not stage.centred)
    with pytest.MonkeyPatch.context() as patch:
        if replacement is not None:
            patch.setattr("toyrl.stages.advantage._token_whitened", replacement)
        worst = max(
            relative(
                stage_advantages(stage, rewards, tokens),
                areal_advantages(rewards, tokens, levels, 1e-3, 1e-3),
            )
            for rewards, tokens in random_batches(30)
        )
    assert worst > 1e-6


def test_zero_spread_gives_zero_at_zero_epsilon() -> None:
    """A batch whose advantages are all equal (every group all right or all wrong): 0, also at
    epsilon 0, where AReaL's 0 / 0 would be NaN (the documented difference); a group all equal
    inside a batch that varies: 0 for that group, as AReaL's 0 / (0 + eps)."""
    rewards = np.array([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    tokens = np.array([[3.0, 4.0, 5.0], [6.0, 7.0, 8.0]])
    for name in ("areal_whiten", "areal_group_whiten", "areal_batch_whiten"):
        zero = {"whiten_eps": 0.0} | ({"std_eps": 0.0} if name != "areal_whiten" else {})
        assert (stage_advantages(stage_of(name, **zero), rewards, tokens) == 0).all()
    mixed = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
    got = stage_advantages(stage_of("areal_group_whiten", std_eps=1e-5), mixed, tokens)
    expected = areal_advantages(mixed, tokens, ("group", "group"))
    assert np.allclose(got, expected, rtol=0, atol=1e-12) and np.isfinite(got).all()


def test_parameters_are_checked_in_one_line() -> None:
    for spec, words in (
        ("advantage=areal_whiten,whiten_eps=1.5", "whiten_eps must be a number in [0, 1)"),
        ("advantage=areal_group_whiten,std_eps=-1", "std_eps must be a number in [0, 1) or None"),
        ("advantage=areal_whiten,std_eps=1e-6", "unknown key 'std_eps'"),
    ):
        with pytest.raises(
            InvalidInput, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
        ):
            parse_variant(spec)
    spec = "advantage=areal_group_whiten,aggregation=token_mean,std_eps=1e-06,whiten_eps=1e-06"
    assert parse_variant(spec).spec_text() == spec


@needs_node
def test_the_page_computes_the_same_bits(data: dict[str, Any]) -> None:  # noqa: F811
    """The page's twins (toyrl/explorer/sim.js ArealWhiten, ArealScaledWhiten) train each stage to
    the same bits as toyrl, at the default and at zero epsilons."""
    variants = [
        {"advantage": name, "aggregation": "token_mean", **parameters}
        for name in AREAL
        for parameters in (
            {},
            {"whiten_eps": 0.0} | ({"std_eps": 0.0} if "group" in name or "batch" in name else {}),
        )
    ]
    spec = {
        "variants": variants,
        "seeds": [0, 1],
        "steps": 25,
        "prompts": 20,
        "batch_prompts": 4,
        "group_size": 4,
    }
    check_case(page_run(node_evaluate(data, result_expression(spec)), spec), spec, python_side(spec))
