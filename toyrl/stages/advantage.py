"""Advantage: each response's advantage from its group's (or batch's) rewards.

`advantages(rewards, std_eps)`: [..., B, G] from rewards of that shape; a zero-variance group or
batch gets zero advantage, even at std_eps = 0. A stage with `uses_tokens` is given a third
argument, the responses' token counts |o| [..., B, G]. Exact hook `conditional(r, others, G,
std_eps)`: the advantage of a response with reward r whose group has `others` successes among the
other G - 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

import numpy as np

from toyrl.config import Config
from toyrl.policy import FloatArray
from toyrl.stages.registry import Kind, Settings, check_declared, declare, declared, register


@runtime_checkable
class Advantage(Protocol):
    """Advantages [..., B, G] of rewards [..., B, G] (and, with `uses_tokens`, of token counts)."""

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray: ...


KIND = declare(
    Kind(
        name="advantage",
        key="advantage",
        default="none",
        protocol=Advantage,
        step=2,
        spec_place=0,
        parameter_place=4,
        shown=True,
        settings=("std_eps",),
        calls=("advantages", "conditional"),
        exact_hooks=("conditional",),
        extra_argument=("uses_tokens", "advantages", "tokens"),
        probe_input="rewards",
    )
)


def advantages_of(
    stage: Advantage, rewards: FloatArray, std_eps: float, tokens: FloatArray | None
) -> FloatArray:
    """The stage's advantages of `rewards`, given the responses' token counts `tokens` (|o|, of the
    rewards' shape) if it `uses_tokens`."""
    if getattr(stage, "uses_tokens", False):
        if tokens is None:
            raise ValueError(f"advantage stage {type(stage).__name__} needs the responses' tokens")
        return cast(Any, stage).advantages(rewards, std_eps, tokens)
    return stage.advantages(rewards, std_eps)


def _std_eps() -> Any:
    return declared(None, 0.0, 1.0, high_open=True, optional=True)  # None: the configuration's std_eps


def _scaled(centred: FloatArray, scale: FloatArray, std_eps: float) -> FloatArray:
    if std_eps > 0:  # every scale is positive
        return centred / scale
    return np.divide(
        centred, scale, out=np.zeros(np.broadcast_shapes(centred.shape, scale.shape)), where=scale > 0
    )


def _centred(rewards: FloatArray) -> FloatArray:
    group = rewards.shape[-1]
    return (
        rewards - np.add.reduce(rewards, axis=-1, keepdims=True) / group
    )  # numpy's mean, without its wrapper


@register("advantage", "group_std_sample", ddof=1)  # decorators apply bottom-up: group_std first
@register("advantage", "group_std", ddof=0)
@dataclass(frozen=True)
class GroupStd:
    """(r_i - group mean) / (group std + std_eps): GRPO's. ddof 0, the population std (the article's
    worked example and toy); ddof 1, the sample std (torch's default: TRL, verl, oat)."""

    ddof: int = 0
    std_eps: float | None = _std_eps()  # None: the configuration's std_eps
    fixed: ClassVar[tuple[str, ...]] = ("ddof",)

    def __post_init__(self) -> None:
        check_declared(self)

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        group = rewards.shape[-1]
        centred = _centred(rewards)
        # numpy's std, spelled out from the centred rewards (same operations, same bits, less overhead)
        squares = np.add.reduce(centred * centred, axis=-1, keepdims=True)
        return _scaled(centred, np.sqrt(squares / (group - self.ddof)) + std_eps, std_eps)

    def conditional(self, r: float, others: FloatArray, group: int, std_eps: float) -> FloatArray:
        k = r + others
        std = np.sqrt(k / group * (1 - k / group))
        if self.ddof == 1:
            std = std * np.sqrt(group / (group - 1))
        scale = std + std_eps
        return np.divide(r - k / group, scale, out=np.zeros(scale.shape), where=scale > 0)


@register("advantage", "batch_std")
@dataclass(frozen=True)
class BatchStd:
    """(r_i - group mean) / (sample std of all the batch's rewards + std_eps): TRL's scale_rewards='batch'."""

    std_eps: float | None = _std_eps()
    simulated_only: ClassVar[str] = "the batch's std couples its groups"

    def __post_init__(self) -> None:
        check_declared(self)

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        return _scaled(
            _centred(rewards), rewards.std(axis=(-2, -1), keepdims=True, ddof=1) + std_eps, std_eps
        )


@register("advantage", "none")
@dataclass(frozen=True)
class Centred:
    """r_i - group mean: Dr. GRPO's (no std)."""

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        return _centred(rewards)

    def conditional(self, r: float, others: FloatArray, group: int, std_eps: float) -> FloatArray:
        return r - (r + others) / group


@register("advantage", "rloo")
@dataclass(frozen=True)
class LeaveOneOut:
    """r_i minus the mean of the group's other G - 1 rewards (RLOO).

    Tutorial, section 4.1: r_i - mean(r) = ((G - 1) / G) (r_i - mean_{j != i} r_j), so the group
    mean scales the expected gradient by (G - 1) / G; leaving r_i out of its own baseline removes it.
    """

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        group = rewards.shape[-1]
        return rewards - (rewards.sum(axis=-1, keepdims=True) - rewards) / (group - 1)

    def conditional(self, r: float, others: FloatArray, group: int, std_eps: float) -> FloatArray:
        return r - others / (group - 1)


@register("advantage", "rloo_std")
@dataclass(frozen=True)
class LeaveOneOutStd:
    """NeMo-RL's GRPO advantage with its defaults use_leave_one_out_baseline and normalize_rewards
    (NVIDIA-NeMo/RL v0.7.0, nemo_rl/algorithms/utils.py `calculate_baseline_and_std_per_prompt`,
    called by nemo_rl/algorithms/advantage_estimator.py `GRPOAdvantageEstimator.compute_advantage`):
    over the other G - 1 rewards of i's group, b_i = sum_{j != i} r_j / (G - 1) and
    m_i = sum_{j != i} r_j^2 / (G - 1), s_i = sqrt((m_i - b_i^2) (G - 1) / (G - 2)), the sample
    std (ddof 1) of the leave-one-out set, from its moments, NaN (a negative moment difference, or
    G = 2) taken as 0 (`nan_to_num(0)`); A_i = (r_i - b_i) / (s_i + std_eps) where s_i > 0, else
    r_i - b_i, undivided ("don't sharpen the ones with no variation"). NeMo-RL's std_eps is 1e-6.
    The sums over the others are the group's total less r_i (NeMo-RL's, a mask-matrix product, is
    the same number on 0/1 rewards)."""

    std_eps: float | None = _std_eps()

    def __post_init__(self) -> None:
        check_declared(self)

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        others = rewards.shape[-1] - 1
        squares = rewards * rewards
        baseline = (np.add.reduce(rewards, axis=-1, keepdims=True) - rewards) / others
        square_mean = (np.add.reduce(squares, axis=-1, keepdims=True) - squares) / others
        return _loo_scaled(rewards - baseline, square_mean - baseline * baseline, others, std_eps)

    def conditional(self, r: float, others: FloatArray, group: int, std_eps: float) -> FloatArray:
        baseline = others / (group - 1)  # with 0/1 rewards the others' squares sum to their successes
        return _loo_scaled(r - baseline, baseline - baseline * baseline, group - 1, std_eps)


def _loo_scaled(centred: FloatArray, spread: FloatArray, others: int, std_eps: float) -> FloatArray:
    """`LeaveOneOutStd`'s (r_i - b_i) / (s_i + std_eps) where s_i > 0, else r_i - b_i; `spread` is
    m_i - b_i^2 over the `others` = G - 1 rewards."""
    if others < 2:  # NeMo-RL's (G - 1) / (G - 2) is 1 / 0: the std is NaN, then 0
        return centred
    with np.errstate(invalid="ignore"):  # sqrt of a negative spread: NaN, then 0 (nan_to_num)
        std = np.nan_to_num(np.sqrt(spread * (others / (others - 1))), nan=0.0)
    return np.divide(centred, std + std_eps, out=np.array(centred, dtype=np.float64), where=std > 0)


@register("advantage", "batch_whiten")
@dataclass(frozen=True)
class BatchWhiten:
    """a_i = r_i - group mean, then (a_i - mean(a)) / (sample std(a) + std_eps) over the batch
    (OpenRLHF's reinforce_baseline)."""

    std_eps: float | None = _std_eps()
    simulated_only: ClassVar[str] = "batch whitening couples the groups of a batch"

    def __post_init__(self) -> None:
        check_declared(self)

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        centred = _centred(rewards)
        centred = centred - centred.mean(axis=(-2, -1), keepdims=True)
        return _scaled(centred, centred.std(axis=(-2, -1), keepdims=True, ddof=1) + std_eps, std_eps)


@register(
    "advantage", "reinforce_pp", ddof=1, var_eps=1e-8, var_floor=0.0, float32_bessel=True, centred=False
)
@register("advantage", "token_whiten_sample", ddof=1, var_eps=1e-8, var_floor=0.0, float32_bessel=True)
@register("advantage", "token_whiten", ddof=0, var_eps=0.0, var_floor=1e-8)  # bottom-up: this one first
@dataclass(frozen=True)
class TokenWhiten:
    """a_i = r_i - group mean, then whitened over the batch's *tokens* (REINFORCE++-baseline): each
    response weighs |o_i| (its tokens, every response's), mean m = sum |o| a / sum |o|, variance
    v = sum |o| (a - m)^2 / (sum |o| - ddof), A_i = (a_i - m) / sqrt(max(v + var_eps, var_floor)).

    `token_whiten`: OpenRLHF's reinforce_baseline (population variance, var.clamp(min=1e-8).rsqrt());
    `token_whiten_sample`: verl's reinforce_plus_plus_baseline (masked_whiten: Bessel-corrected over
    tokens, rsqrt(var + 1e-8)), whose masked_var takes the Bessel factor n / (n - 1) from integer
    token counts, a division torch makes in float32: v = [sum |o| (a - m)^2 / n] fl32(n / (n - 1))
    (`float32_bessel`; the float32 rounding moves A by up to about 2e-8 relative). `reinforce_pp`:
    REINFORCE++ (Hu 2025; verl's reinforce_plus_plus at gamma 1, each token's return its response's
    reward), the same whitening of the rewards themselves, with no group mean (`centred` False).
    Longer responses weigh more in the batch's statistics."""

    ddof: int = 0
    var_eps: float = 0.0
    var_floor: float = 1e-8
    float32_bessel: bool = False
    centred: bool = True
    fixed: ClassVar[tuple[str, ...]] = ("ddof", "var_eps", "var_floor", "float32_bessel", "centred")
    uses_tokens: ClassVar[bool] = True
    simulated_only: ClassVar[str] = "token-weighted whitening couples the groups of a batch"

    def advantages(self, rewards: FloatArray, std_eps: float, tokens: FloatArray | None = None) -> FloatArray:
        assert tokens is not None, "uses_tokens: given the token counts (`toyrl.train.Plan.advantages`)"
        centred = _centred(rewards) if self.centred else rewards
        total = tokens.sum(axis=(-2, -1), keepdims=True)
        mean = (centred * tokens).sum(axis=(-2, -1), keepdims=True) / total
        shifted = centred - mean
        squares = (shifted * shifted * tokens).sum(axis=(-2, -1), keepdims=True)
        if self.float32_bessel:
            bessel = (total.astype(np.float32) / (total - 1).astype(np.float32)).astype(np.float64)
            variance = squares / total * bessel
        else:
            variance = squares / (total - self.ddof)
        return shifted / np.sqrt(np.maximum(variance + self.var_eps, self.var_floor))


@register("advantage", "opo")
@dataclass(frozen=True)
class LengthWeightedBaseline:
    """OPO's optimal baseline (Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline", arXiv
    2505.23585, eq. 7; verl's `opo` estimator): A_i = r_i - b, b = sum_j |o_j| r_j / sum_j |o_j|
    over the group, each reward weighed by its response's tokens, so a long wrong answer pulls the
    baseline down the most."""

    uses_tokens: ClassVar[bool] = True
    simulated_only: ClassVar[str] = "OPO's baseline weighs the group's rewards by their lengths"

    def advantages(self, rewards: FloatArray, std_eps: float, tokens: FloatArray | None = None) -> FloatArray:
        assert tokens is not None, "uses_tokens: given the token counts (`toyrl.train.Plan.advantages`)"
        baseline = (tokens * rewards).sum(axis=-1, keepdims=True) / tokens.sum(axis=-1, keepdims=True)
        return rewards - baseline


@register("advantage", "gpg")
@dataclass(frozen=True)
class RescaledCentred:
    """GPG's advantage (Chu et al. 2025, eq. 9; verl's `gpg` estimator at f_norm 1):
    A_i = alpha (r_i - group mean), alpha = N / M, N the batch's responses and M how many of them
    have a nonzero reward (at least 1): with 0/1 rewards, the inverse of the batch's accuracy,
    which scales the gradient up when few answers are right. verl computes N / M in float32 (an
    int over an int64 tensor), here in float64: up to about 6e-8 relative apart where N / M is not
    a float32 number (the conformance suite records it)."""

    simulated_only: ClassVar[str] = "GPG's scale N / M counts the whole batch's nonzero rewards"

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        responses = rewards.shape[-2] * rewards.shape[-1]
        nonzero = np.maximum(np.count_nonzero(rewards, axis=(-2, -1)), 1)[..., None, None]
        return responses / nonzero * _centred(rewards)


@register("advantage", "passk")
@dataclass(frozen=True)
class BestOverSecond:
    """verl's grpo_passk (compute_grpo_passk_outcome_advantage, after Chen et al. 2025, "Pass@k
    Training", arXiv 2503.19595): only the best response of a group has an advantage, its margin
    over the second best, A = (r_max - r_second) / (group sample std + std_eps) on the first
    response with r_max (`std_scaled`: verl's norm_adv_by_std_in_grpo; else the margin alone), 0 on
    every other one. Tied best rewards give the group 0. With 0 / 1 rewards, the one correct
    response of a group with exactly one earns 1 / (std + eps), std = sqrt(1 / G): a credit for
    solving what the group's others did not."""

    std_eps: float | None = _std_eps()
    std_scaled: bool = True

    def __post_init__(self) -> None:
        check_declared(self)

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        group = rewards.shape[-1]
        ranked = np.sort(rewards, axis=-1)
        margin = ranked[..., -1:] - ranked[..., -2:-1]
        if self.std_scaled:  # GroupStd's sample std, the same operations
            centred = _centred(rewards)
            squares = np.add.reduce(centred * centred, axis=-1, keepdims=True)
            margin = _scaled(margin, np.sqrt(squares / (group - 1)) + std_eps, std_eps)
        best = np.arange(group) == np.argmax(rewards, axis=-1)[..., None]
        return np.where(best, margin, 0.0)

    def conditional(self, r: float, others: FloatArray, group: int, std_eps: float) -> FloatArray:
        alone = np.where(others == 0, r, 0.0)  # the group's one success: a margin of 1
        if not self.std_scaled:
            return alone
        k = r + others  # GroupStd's sample std, the same operations
        scale = np.sqrt(k / group * (1 - k / group)) * np.sqrt(group / (group - 1)) + std_eps
        return np.divide(alone, scale, out=np.zeros(scale.shape), where=scale > 0)


@register("advantage", "max_rl")
@dataclass(frozen=True)
class MeanScaled:
    """MaxRL's advantage (Tajwar et al. 2026, "Maximum Likelihood Reinforcement Learning", arXiv
    2602.02710), as prime-rl implements it (prime-rl v0.8.0, src/prime_rl/orchestrator/algo/max_rl.py,
    MaxRLAlgorithm.score_group): A_i = (r_i - mu) / mu, mu the group's mean reward, so a prompt
    solved at rate p weighs about 1 / p. A group with mu <= 0 (no success, for 0/1 rewards) gets
    zero advantages, as prime-rl does: there is no signal to scale. prime-rl computes in float32,
    here in float64."""

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        group = rewards.shape[-1]
        mean = np.add.reduce(rewards, axis=-1, keepdims=True) / group
        return np.divide(rewards - mean, mean, out=np.zeros(rewards.shape), where=mean > 0)

    def conditional(self, r: float, others: FloatArray, group: int, std_eps: float) -> FloatArray:
        mean = (r + others) / group
        return np.divide(r - mean, mean, out=np.zeros(mean.shape), where=mean > 0)


def std_eps_of(advantage: Any, config: Config | Settings | float) -> float:
    """The std epsilon an advantage stage uses: its own `std_eps`, or the configuration's `std_eps`
    (or the number given for it)."""
    own = getattr(advantage, "std_eps", None)
    if own is not None:
        return float(own)
    return float(config) if isinstance(config, int | float) else float(config.std_eps)


def _token_whitened(values: FloatArray, tokens: FloatArray, eps: float) -> FloatArray:
    """AReaL's adv_norm at batch levels over the batch's tokens (each response weighs |o_i|, its
    tokens in the loss mask): m = sum |o| a / sum |o|, v = sum |o| (a - m)^2 / (sum |o| - 1) (Bessel
    over tokens), (a_i - m) / (sqrt(v) + eps): the epsilon on the std, not on the variance."""
    total = tokens.sum(axis=(-2, -1), keepdims=True)
    mean = (values * tokens).sum(axis=(-2, -1), keepdims=True) / total
    shifted = values - mean
    squares = (shifted * shifted * tokens).sum(axis=(-2, -1), keepdims=True)
    return _scaled(shifted, np.sqrt(squares / (total - 1)) + eps, eps)


@register("advantage", "areal_whiten_rewards", centred=False)
@register("advantage", "areal_whiten")  # bottom-up: this one first
@dataclass(frozen=True)
class ArealWhiten:
    """AReaL's reward_norm at the group mean (no std), then its adv_norm at batch levels (areal
    1.0.4, areal/utils/data.py `Normalization.__call__`, `_compute_mean`, `_compute_std`, applied in
    that order by areal/trainer/ppo/actor.py `PPOActor._compute_advantages`; each token's advantage
    its response's normalised reward at discount 1, lambda 1): a_i = r_i - group mean (`centred`;
    else a_i = r_i, no reward_norm), then over the batch's tokens, each response weighing |o_i|,
    m = sum |o| a / sum |o|, v = sum |o| (a - m)^2 / (sum |o| - 1), A_i = (a_i - m) / (sqrt(v) +
    whiten_eps): the epsilon on the std, where token_whiten_sample puts it on the variance. With a
    reward scale k (reward_scaling), whiten_eps is adv_norm's eps / k. A zero std at whiten_eps 0
    gives 0 (AReaL's 0 / 0 is NaN). AReaL rounds each normalisation's result to float32; this is
    float64. `areal_whiten`: its GSM8K Dr. GRPO example; `areal_whiten_rewards`: its REINFORCE one."""

    centred: bool = True
    whiten_eps: float = declared(1e-5, 0.0, 1.0, high_open=True)
    fixed: ClassVar[tuple[str, ...]] = ("centred",)
    uses_tokens: ClassVar[bool] = True
    simulated_only: ClassVar[str] = "token-weighted whitening couples the groups of a batch"

    def __post_init__(self) -> None:
        check_declared(self)

    def advantages(self, rewards: FloatArray, std_eps: float, tokens: FloatArray | None = None) -> FloatArray:
        assert tokens is not None, "uses_tokens: given the token counts (`toyrl.train.Plan.advantages`)"
        return _token_whitened(_centred(rewards) if self.centred else rewards, tokens, self.whiten_eps)


@register("advantage", "areal_batch_whiten", scale="batch")
@register("advantage", "areal_group_whiten", scale="group")  # bottom-up: this one first
@dataclass(frozen=True)
class ArealScaledWhiten:
    """AReaL's reward_norm at the group mean and a std, then its adv_norm at batch levels (areal
    1.0.4, areal/utils/data.py `Normalization`; areal/trainer/ppo/actor.py
    `PPOActor._compute_advantages`): c_i = r_i - group mean, then by `scale`: "group",
    a_i = c_i / (s_g + std_eps), s_g the group's sample std (std_level group, std_unbiased);
    "batch", a_i = c_i / (S + std_eps), S^2 = sum_i c_i^2 / (BG - 1) over the batch's responses
    about their *group* means (std_level batch after mean_level group: `_compute_std` is given the
    group means); then `ArealWhiten`'s whitening over the batch's tokens with whiten_eps (adv_norm's
    eps). With a reward scale k (reward_scaling), std_eps is reward_norm's eps / k. A zero std at a
    zero epsilon gives 0 (AReaL's 0 / 0 is NaN); float64, where AReaL rounds each normalisation's
    result to float32. `areal_group_whiten`: its GSM8K GRPO example; `areal_batch_whiten`: its
    LitePPO example."""

    scale: str = "group"
    std_eps: float | None = _std_eps()  # None: the configuration's std_eps
    whiten_eps: float = declared(1e-5, 0.0, 1.0, high_open=True)
    fixed: ClassVar[tuple[str, ...]] = ("scale",)
    uses_tokens: ClassVar[bool] = True
    simulated_only: ClassVar[str] = "token-weighted whitening couples the groups of a batch"

    def __post_init__(self) -> None:
        check_declared(self)

    def advantages(self, rewards: FloatArray, std_eps: float, tokens: FloatArray | None = None) -> FloatArray:
        assert tokens is not None, "uses_tokens: given the token counts (`toyrl.train.Plan.advantages`)"
        centred = _centred(rewards)
        if self.scale == "group":  # GroupStd's sample std, the same operations
            squares = np.add.reduce(centred * centred, axis=-1, keepdims=True)
            count = rewards.shape[-1]
        else:
            squares = (centred * centred).sum(axis=(-2, -1), keepdims=True)
            count = rewards.shape[-2] * rewards.shape[-1]
        scaled = _scaled(centred, np.sqrt(squares / (count - 1)) + std_eps, std_eps)
        return _token_whitened(scaled, tokens, self.whiten_eps)
