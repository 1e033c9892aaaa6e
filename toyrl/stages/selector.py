"""Selector: which responses enter the loss.

`included(batch)` -> bool [R, B, G]; a stage with `uses_rewards` is given a second argument, the
responses' rewards [R, B, G] (`included_of`). A response out of the loss has weight 0 and no
tokens in `token_mean`'s total; a per-response mean's N still counts it. Exact hooks:
`keeps_truncated`, whether a truncated response is in the loss, and, for a selector by its group's
rewards, `keeps_group(successes, G)`: whether a group of 0/1 rewards with `successes` of them 1
(any shape) is in the loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from toyrl.policy import Batch, FloatArray
from toyrl.stages.registry import Kind, check_declared, declare, declared, register


@runtime_checkable
class Selector(Protocol):
    """Which responses of a batch are in the loss, bool [R, B, G]."""

    def included(self, batch: Batch) -> NDArray[np.bool_]: ...


KIND = declare(
    Kind(
        name="selector",
        key="selector",
        default="all",
        protocol=Selector,
        step=1,
        spec_place=2,
        parameter_place=3,
        calls=("included",),
        exact_hooks=("keeps_truncated",),
        extra_argument=("uses_rewards", "included", "rewards"),
        probe_input="a batch",
    )
)


def included_of(stage: Selector, batch: Batch, rewards: FloatArray | None) -> NDArray[np.bool_]:
    """The stage's responses in the loss, given the batch's `rewards` if it `uses_rewards`."""
    if getattr(stage, "uses_rewards", False):
        if rewards is None:
            raise ValueError(f"selector stage {type(stage).__name__} needs the responses' rewards")
        return cast(Any, stage).included(batch, rewards)
    return stage.included(batch)


@register("selector", "all")
@dataclass(frozen=True)
class AllResponses:
    """Every response is in the loss."""

    keeps_truncated: ClassVar[bool] = True  # exact hook: a truncated response is in the loss

    def included(self, batch: Batch) -> NDArray[np.bool_]:
        return np.ones(batch.right.shape, dtype=bool)


@register("selector", "stopped")
@dataclass(frozen=True)
class StoppedResponses:
    """Truncated responses are masked out of the loss (TRL's mask_truncated_completions, DAPO's
    overlong filtering): weight 0, and no tokens in `token_mean`'s total. Their rewards still count
    in their group's advantages."""

    keeps_truncated: ClassVar[bool] = False

    def included(self, batch: Batch) -> NDArray[np.bool_]:
        return batch.stopped


@register("selector", "difficulty")
@dataclass(frozen=True)
class GroupMeanWithin:
    """A group is in the loss iff low < its mean reward < high, strictly; the others are masked
    out, not refilled: ROLL's difficulty_mask (alibaba/ROLL 8eb27cc2, roll/utils/functionals.py
    `difficulty_mask`: (score mean > low) * (score mean < high) over each group's
    num_return_sequences scores; `get_sample_level_mask` multiplies it into final_response_mask,
    the loss's mask, whose tokens and nonempty responses are the loss's counts). ROLL's defaults
    (roll/pipeline/rlvr/rlvr_config.py) low 0, high 1: with 0/1 rewards, the groups all wrong or
    all right are out. `drop_truncated`: truncated responses are out too (ROLL's max_len_mask, the
    same final_response_mask), while their rewards still count in their group's mean."""

    low: float = declared(0.0, -10.0, 10.0)
    high: float = declared(1.0, -10.0, 10.0)
    drop_truncated: bool = False
    uses_rewards: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_declared(self)

    @property
    def keeps_truncated(self) -> bool:
        """Exact hook: whether a truncated response is in the loss."""
        return not self.drop_truncated

    def included(self, batch: Batch, rewards: FloatArray | None = None) -> NDArray[np.bool_]:
        assert rewards is not None, "uses_rewards: given the rewards (`toyrl.train.Plan.included`)"
        mean = np.add.reduce(rewards, axis=-1, keepdims=True) / rewards.shape[-1]
        kept = np.broadcast_to((mean > self.low) & (mean < self.high), rewards.shape)
        return kept & batch.stopped if self.drop_truncated else kept.copy()

    def keeps_group(self, successes: FloatArray, group: int) -> NDArray[np.bool_]:
        mean = successes / group
        return (mean > self.low) & (mean < self.high)


@register("selector", "informative")
@dataclass(frozen=True)
class RewardSpread:
    """A group is in the loss iff its rewards spread by more than tol (max - min > tol); a group
    of equal rewards, whose group-relative advantages are all 0, is masked out of the loss, not
    refilled, so its tokens leave `token_mean`'s total. SkyRL's zero_variance_filter (skyrl
    0.3.0, skyrl/train/utils/trainer_utils.py `zero_variance_filter`, applied to the loss masks in
    skyrl/train/trainer.py; its zero_variance_filter_tol, default 1e-6); at tol 0, prime-rl's
    zero-advantage filter on GRPO's r - group mean with 0/1 rewards (prime-rl v0.8.0,
    src/prime_rl/orchestrator/filters.py `ZeroAdvantageFilter`, enforced in post_batch_filters:
    the rollouts are not sent to the trainer)."""

    tol: float = declared(0.0, 0.0, 10.0)
    keeps_truncated: ClassVar[bool] = True
    uses_rewards: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_declared(self)

    def included(self, batch: Batch, rewards: FloatArray | None = None) -> NDArray[np.bool_]:
        assert rewards is not None, "uses_rewards: given the rewards (`toyrl.train.Plan.included`)"
        spread = rewards.max(axis=-1, keepdims=True) - rewards.min(axis=-1, keepdims=True)
        return np.broadcast_to(spread > self.tol, rewards.shape).copy()

    def keeps_group(self, successes: FloatArray, group: int) -> NDArray[np.bool_]:
        spread = np.where((successes > 0) & (successes < group), 1.0, 0.0)
        return spread > self.tol
