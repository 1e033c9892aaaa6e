"""How a trainer lays a mini-batch out over data-parallel ranks and micro-batches, where that
depends on the responses' lengths: verl's V1 trainer.

verl 0.9.1 deals each step's batch to its data-parallel ranks in parts of equal size balanced by
workload (`PPOTrainer._balance_batch` in verl/trainer/ppo/v1/trainer_base.py, always in the V1
trainer), each rank's part kept in the batch's order; each rank cuts its part into its share of
every mini-batch, consecutively; and with `use_dynamic_bsz` it cuts its share of a mini-batch into
the fewest micro-batches whose token counts (prompt and response) stay within
`ppo_max_token_len_per_gpu`, balanced by workload (`rearrange_micro_batches` in
verl/utils/seqlen_balancing.py), the count the same on every rank. The balancing is the
Karmarkar-Karp largest differencing method, on integer workloads 24576 s + s^2 of the sequence
lengths s (`calculate_workload`); written here from its description, with verl's order of ties
(items sorted by workload then index; a set compared by sum, then size, then its items), so it
picks the same parts, which tests/conformance/test_verl.py checks against verl's own functions.

Which micro-batch a response is in matters for a normaliser taken on each micro-batch (verl's
seq-mean-token-sum-norm with loss_scale_factor unset divides by each micro-batch's longest
response); which mini-batch it is in, for every normaliser.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["balanced_partitions", "rank_order", "token_budget_parts", "workload"]


def workload(seq_len: int) -> int:
    """verl's estimate of a sequence's attention cost: 24576 s + s^2 (calculate_workload)."""
    return 24576 * seq_len + seq_len * seq_len


# A part is a tuple (sum, size, items), items the (index, value) pairs in the order added: tuples
# compare as verl's Set does (by sum, then size, then items). A state is its k parts, largest
# first, in a heap entry (-spread, _First(largest part), parts): heapq pops the largest spread,
# then the state whose largest part is larger, as verl's State orders them.
Part = tuple[int, int, list[tuple[int, int]]]


class _First:
    """A state's largest part, ordered so that the larger one is popped first."""

    __slots__ = ("part",)

    def __init__(self, part: Part) -> None:
        self.part = part

    def __lt__(self, other: _First) -> bool:
        return self.part > other.part


def _state(parts: list[Part]) -> tuple[int, _First, list[Part]]:
    parts.sort(reverse=True)
    return (parts[-1][0] - parts[0][0], _First(parts[0]), parts)


def balanced_partitions(values: Sequence[int], k: int, equal_size: bool) -> list[list[int]]:
    """The indices of `values` in k parts of balanced sums, each part's indices ascending: the
    largest differencing method as verl runs it (get_seqlen_balanced_partitions): the two states
    of the largest spread merged, the first's largest part with the second's smallest, until one
    is left. `equal_size`: each part holds len(values) / k items (k must divide it)."""
    if not 1 <= k <= len(values):
        raise ValueError(f"{k} parts of {len(values)} items")
    ranked = sorted((int(value), index) for index, value in enumerate(values))
    states: list[tuple[int, _First, list[Part]]] = []
    if equal_size:
        if len(values) % k:
            raise ValueError(f"{len(values)} items do not cut into {k} equal parts")
        for offset in range(0, len(ranked), k):
            block = ranked[offset : offset + k]
            states.append(_state([(value, 1, [(index, value)]) for value, index in block]))
    else:
        empty: list[Part] = [(0, 0, [])] * (k - 1)
        states = [_state([(value, 1, [(index, value)]), *empty]) for value, index in ranked]
    heapq.heapify(states)
    while len(states) > 1:
        first, second = heapq.heappop(states)[2], heapq.heappop(states)[2]
        merged = [
            (a[0] + b[0], a[1] + b[1], a[2] + b[2]) for a, b in zip(first, reversed(second), strict=True)
        ]
        heapq.heappush(states, _state(merged))
    return [sorted(index for index, _ in items) for _, _, items in states[0][2]]


def rank_order(seq_lens: Sequence[int], ranks: int) -> NDArray[np.intp]:
    """The batch's order after it is dealt to `ranks` data-parallel ranks: rank 0's part, then rank
    1's, ..., each part in the batch's order (a permutation of the batch's indices)."""
    if ranks == 1:
        return np.arange(len(seq_lens))
    parts = balanced_partitions([workload(int(s)) for s in seq_lens], ranks, equal_size=True)
    return np.array([index for part in parts for index in part], dtype=np.intp)


def token_budget_parts(shares: Sequence[Sequence[int]], budget: int) -> list[list[list[int]]]:
    """Each rank's micro-batches of its share of a mini-batch (`shares[r]`: its responses' sequence
    lengths in its order): the same count k on every rank, at least ceil(tokens / budget) of the
    rank with the most, raised until every micro-batch of every rank holds at most `budget` tokens;
    each micro-batch the indices into its rank's share."""
    if max(max(share) for share in shares) > budget:
        raise ValueError("a sequence is longer than the token budget")
    count = max(min(len(share), -(-sum(share) // budget)) for share in shares)
    smallest = min(len(share) for share in shares)
    workloads = [[workload(s) for s in share] for share in shares]  # once, whatever count is tried
    while True:
        if count > smallest:  # cannot happen: single sequences fit the budget
            raise ValueError("no layout of the shares fits the token budget")
        layout = [balanced_partitions(values, count, equal_size=False) for values in workloads]
        if all(
            sum(share[i] for i in part) <= budget
            for share, parts in zip(shares, layout, strict=True)
            for part in parts
        ):
            return layout
        count += 1
