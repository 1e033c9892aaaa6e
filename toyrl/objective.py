"""The four objectives as data: how advantages are scaled and how token losses are aggregated.

Article, "The two biases" and "The Dr. GRPO objective". At ratio 1 (one on-policy update, clipping
inactive) every variant's loss gradient is

    grad = -(1 / (B G)) sum_i w_i sum_t grad log pi(o_i,t),    w_i = A_i / D_i,

a per-token weight w_i shared by all tokens of response i. Two switches set it:

| name          | advantage A_i                    | denominator D_i |
| ------------- | -------------------------------- | --------------- |
| `grpo`        | (r_i - mean(r)) / (std(r) + eps) | abs(o_i)        |
| `std_only`    | (r_i - mean(r)) / (std(r) + eps) | L_norm          |
| `length_only` | r_i - mean(r)                    | abs(o_i)        |
| `dr_grpo`     | r_i - mean(r)                    | L_norm          |

mean and std are over the response's group of G; std is the population std (the article's worked
example: two successes in eight give std 0.433). abs(o_i) is the response's token count, approach
token included (L + 1); L_norm is a constant, by default the cap.
So `std_only` keeps GRPO's std division but drops the length mean; `length_only` keeps the length
mean but drops the std: each isolates one of the two normalisations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from toyrl.config import InvalidInput

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class Variant:
    """A loss variant: two switches and the line that describes it."""

    name: str
    std_scaled: bool  # divide group-centred rewards by the group's reward std
    length_mean: bool  # divide each response's token sum by its own token count
    summary: str


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("grpo", True, True, "GRPO: std-scaled advantage, per-response token mean"),
        Variant("std_only", True, False, "std division only: std-scaled advantage, constant L_norm"),
        Variant("length_only", False, True, "length mean only: centred advantage, per-response mean"),
        Variant("dr_grpo", False, False, "Dr. GRPO: centred advantage, constant L_norm"),
    )
}


def advantages(rewards: ArrayLike, std_scaled: ArrayLike, eps: float) -> FloatArray:
    """Group-relative advantages [..., G] of rewards [..., G].

    r_i - mean(r), divided by std(r) + eps where `std_scaled` (a bool broadcastable to [..., 1],
    e.g. one switch per run). Zero-variance groups get zero advantage either way, even at eps = 0.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    centred = rewards - rewards.mean(axis=-1, keepdims=True)
    scale = np.where(std_scaled, rewards.std(axis=-1, keepdims=True) + eps, 1.0)
    return np.divide(
        centred, scale, out=np.zeros(np.broadcast_shapes(centred.shape, scale.shape)), where=scale > 0
    )


def leave_one_out_advantages(rewards: ArrayLike) -> FloatArray:
    """RLOO's advantages [..., G]: r_i minus the mean of the other G - 1 rewards of its group.

    Tutorial, section 4.1: r_i - mean(r) = ((G - 1) / G) (r_i - mean_{j != i} r_j), so the group
    mean scales the expected gradient by (G - 1) / G; leaving r_i out of its own baseline removes it.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    group = rewards.shape[-1]
    return rewards - (rewards.sum(axis=-1, keepdims=True) - rewards) / (group - 1)


def token_weights(
    advantage: ArrayLike, token_count: ArrayLike, length_mean: ArrayLike, length_norm: float
) -> FloatArray:
    """Per-token weights w_i = A_i / D_i [..., G]: D_i = token_count where `length_mean`, else L_norm."""
    return np.asarray(advantage, dtype=np.float64) / np.where(length_mean, token_count, length_norm)


def variant_weights(
    variant: Variant, rewards: ArrayLike, token_count: ArrayLike, eps: float, length_norm: float
) -> FloatArray:
    """Per-token weights of one variant for rewards and token counts [..., G]."""
    advantage = advantages(rewards, variant.std_scaled, eps)
    return token_weights(advantage, token_count, variant.length_mean, length_norm)


def parse_variants(names: list[str]) -> list[str]:
    """Variant names in table order without repeats; 'all' stands for the four."""
    known = list(VARIANTS)
    chosen = set()
    for name in names:
        if name == "all":
            chosen.update(known)
        elif name in VARIANTS:
            chosen.add(name)
        else:
            raise InvalidInput(f"unknown variant {name!r}; valid: {', '.join([*known, 'all'])}")
    return [name for name in known if name in chosen]
