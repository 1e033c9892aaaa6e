"""Selector: which responses enter the loss.

`included(batch)` -> bool [R, B, G]. Exact hook: `keeps_truncated`, whether a truncated response
is in the loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from toyrl.policy import Batch
from toyrl.stages.registry import register


@runtime_checkable
class Selector(Protocol):
    """Which responses of a batch are in the loss, bool [R, B, G]."""

    def included(self, batch: Batch) -> NDArray[np.bool_]: ...


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
