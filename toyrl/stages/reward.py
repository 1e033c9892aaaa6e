"""Reward: each response's score.

`rewards(batch, config)` -> [R, B, G]. Exact hook (`toyrl.expected`): `window(config)`, the ramble
lengths on the right approach that earn reward 1, for a 0/1 reward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from toyrl.config import Config
from toyrl.policy import Batch, FloatArray
from toyrl.stages.registry import check_declared, declared, register


@runtime_checkable
class Reward(Protocol):
    """The rewards of a batch's responses [R, B, G]."""

    def rewards(self, batch: Batch, config: Config) -> FloatArray: ...


def correct(batch: Batch, config: Config) -> FloatArray:
    """1 for a correct response (right approach, stopped, at least min_length ramble tokens), else 0
    [R, B, G]: the article's verifiable reward, and what every accuracy counts."""
    return (batch.right & batch.stopped & (batch.length >= config.min_length)).astype(np.float64)


@register("reward", "window")
@dataclass(frozen=True)
class WindowReward:
    """The verifiable reward: 1 iff right approach, stopped and at least min_length ramble tokens."""

    def rewards(self, batch: Batch, config: Config) -> FloatArray:
        return correct(batch, config)

    def window(self, config: Config) -> tuple[int, int]:
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

    def rewards(self, batch: Batch, config: Config) -> FloatArray:
        longest = config.cap + config.approach_tokens
        buffer = self.buffer * longest
        exceed = batch.token_count(config.approach_tokens) - (longest - buffer)
        penalty = np.minimum(-exceed / buffer * self.penalty_factor, 0.0)
        return np.where(correct(batch, config) > 0, 1.0, self.incorrect) + penalty
