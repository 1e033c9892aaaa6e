"""Reward: each response's score.

`rewards(batch, config)` -> [R, B, G]. Exact hook (`toyrl.expected`): `window(config)`, the ramble
lengths on the right approach that earn reward 1, for a 0/1 reward. `config` is what a reward
sees of the configuration (`KIND.settings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from toyrl.config import Config
from toyrl.policy import Batch, FloatArray
from toyrl.stages.registry import Kind, Settings, check_declared, declare, declared, register


@runtime_checkable
class Reward(Protocol):
    """The rewards of a batch's responses [R, B, G]."""

    def rewards(self, batch: Batch, config: Settings) -> FloatArray: ...


KIND = declare(
    Kind(
        name="reward",
        key="reward",
        default="window",
        protocol=Reward,
        step=0,
        spec_place=6,
        parameter_place=6,
        settings=("cap", "min_length", "approach_tokens"),
        calls=("rewards", "window"),
        exact_hooks=("window",),
        probe_input="a batch",
    )
)


def correct(batch: Batch, config: Config | Settings) -> FloatArray:
    """1 for a correct response (right approach, stopped, at least min_length ramble tokens), else 0
    [R, B, G]: the article's verifiable reward, and what every accuracy counts."""
    return (batch.right & batch.stopped & (batch.length >= config.min_length)).astype(np.float64)


@register("reward", "window")
@dataclass(frozen=True)
class WindowReward:
    """The verifiable reward: 1 iff right approach, stopped and at least min_length ramble tokens."""

    def rewards(self, batch: Batch, config: Settings) -> FloatArray:
        return correct(batch, config)

    def window(self, config: Settings) -> tuple[int, int]:
        """Exact hook: the ramble lengths K, on the right approach, that earn reward 1."""
        return config.min_length, config.cap


@register("reward", "soft_overlong")
@dataclass(frozen=True)
class SoftOverlong:
    """DAPO's reward with its soft overlong punishment (Yu et al. 2025, "Overlong Reward Shaping";
    verl's DAPO reward manager with overlong_buffer; OpenRLHF's overlong_buffer_len): 1 for a
    correct response, `incorrect` else (DAPO's rule-based reward is 1 / -1; OpenRLHF's reward
    function's own, 0 for a 0/1 one), plus min(0, -(|o| - (L_max - b)) / b) x penalty_factor, |o| the
    response's tokens, L_max the longest response (the cap's ramble tokens and the approach token,
    `Config.approach_tokens`) and b = buffer x L_max: nothing up to L_max - b, then down linearly to
    -penalty_factor at L_max. `buffer` is the trainer's buffer length over its longest response,
    0.2 in DAPO's recipe (4,096 of 20,480 tokens)."""

    buffer: float = declared(0.2, 0.0, 1.0, low_open=True)
    penalty_factor: float = declared(1.0, 0.0, 1e6)
    incorrect: float = declared(-1.0, -1e6, 1e6)
    simulated_only: ClassVar[str] = "the shaped reward is not 0 or 1"

    def __post_init__(self) -> None:
        check_declared(self)

    def rewards(self, batch: Batch, config: Settings) -> FloatArray:
        longest = config.cap + config.approach_tokens
        buffer = self.buffer * longest
        exceed = batch.token_count(config.approach_tokens) - (longest - buffer)
        penalty = np.minimum(-exceed / buffer * self.penalty_factor, 0.0)
        return np.where(correct(batch, config) > 0, 1.0, self.incorrect) + penalty


@register("reward", "length_penalty")
@dataclass(frozen=True)
class LengthPenalty:
    """prime-rl's linear length penalty (prime-rl v0.8.0, src/prime_rl/orchestrator/algo/grpo.py,
    GRPOAlgorithm.score_group; defaults from packages/prime-rl-configs/src/prime_rl/configs/
    algorithm.py, LinearLengthPenaltyConfig): r_i - p (w_out |o_i| / max_j |o_j| + w_in in_i /
    max_j in_j + w_turns turns_i / max_j turns_j), r_i the 0/1 reward, p the group's pass rate (its
    mean reward), maxima over the group. On the toy every response of a group has the same prompt
    and one turn, so the last two fractions are 1: the penalty is p (w_out |o_i| / max_j |o_j| +
    w_in + w_turns). Only a group with a success is penalised, and within it the longest response
    the most. prime-rl computes in float32, here in float64."""

    num_output_tokens_weight: float = declared(0.25, 0.0, 1e6)
    num_input_tokens_weight: float = declared(0.1, 0.0, 1e6)
    num_turns_weight: float = declared(0.1, 0.0, 1e6)
    simulated_only: ClassVar[str] = "the shaped reward is not 0 or 1"

    def __post_init__(self) -> None:
        check_declared(self)

    def rewards(self, batch: Batch, config: Settings) -> FloatArray:
        reward = correct(batch, config)
        tokens = batch.token_count(config.approach_tokens)
        pass_rate = np.add.reduce(reward, axis=-1, keepdims=True) / reward.shape[-1]
        fraction = (
            self.num_output_tokens_weight * (tokens / tokens.max(axis=-1, keepdims=True))
            + self.num_input_tokens_weight
            + self.num_turns_weight
        )
        return reward - pass_rate * fraction


@register("reward", "gr3")
@dataclass(frozen=True)
class GroupRelativeRescaling:
    """GR3's multiplicative group-relative reward rescaling (Li et al. 2026, "Tackling Length
    Inflation Without Trade-offs: Group Relative Reward Rescaling for Reinforcement Learning", arXiv
    2603.10535): r_i / (1 + alpha |o_i| / mean_j |o_j|), the mean over i's group, so a correct
    response earns less the longer it is than its group's average and a wrong one (reward 0) is
    not touched. The formula as Weng et al. 2026 restate it ("Quality Determines Direction, Length
    Shapes Magnitude", appendix A.2, eq. 12); GR3 picks alpha by its advantage-preservation
    criterion (their eq. 13), not computed here: alpha is a setting, 0.3 the restating paper's
    matched-compression choice (0.1 to 0.6 in its sweep)."""

    alpha: float = declared(0.3, 0.0, 1e3)
    simulated_only: ClassVar[str] = "the shaped reward is not 0 or 1"

    def __post_init__(self) -> None:
        check_declared(self)

    def rewards(self, batch: Batch, config: Settings) -> FloatArray:
        tokens = batch.token_count(config.approach_tokens)
        mean = np.add.reduce(tokens, axis=-1, keepdims=True) / tokens.shape[-1]
        return correct(batch, config) / (1.0 + self.alpha * (tokens / mean))
