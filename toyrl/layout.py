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

import functools
import heapq
import itertools
from bisect import insort
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "balanced_partitions",
    "equal_cuts",
    "fewest_parts",
    "rank_order",
    "token_budget_parts",
    "workload",
    "worst_tries",
]


def workload(seq_len: int) -> int:
    """verl's estimate of a sequence's attention cost: 24576 s + s^2 (calculate_workload)."""
    return 24576 * seq_len + seq_len * seq_len


# A part is a tuple (sum, size, items), items the indices in the order added: tuples compare as
# verl's Set does (by sum, then size, then its (index, value) items, which compare as their
# indices do: an index has one value). A state is k parts; it keeps only its non-empty ones,
# ascending: the others are empty (sum 0, size 0), the smallest of all parts since values are at
# least 0. Its heap entry is (-spread, its largest part negated, parts): heapq pops the largest
# spread, then the state whose largest part is larger, as verl's State orders them. Two states'
# parts share no index, so their largest parts differ by the first of their items at the latest:
# (sum, size, first item) decides, in integers that the heap compares without a Python call.
Part = tuple[int, int, list[int]]
State = tuple[int, int, int, int, list[Part]]


def _state(parts: list[Part], k: int) -> State:
    """The heap entry of a state of k parts, given its non-empty `parts` (ascending)."""
    smallest = parts[0][0] if len(parts) == k else 0
    largest, size, items = parts[-1]
    return (smallest - largest, -largest, -size, -items[0], parts)


def _merged(first: list[Part], second: list[Part], k: int) -> list[Part]:
    """verl's State.merge of two states (their non-empty parts ascending; `first` popped first):
    the first's i-th largest part joined with the second's i-th smallest, all k parts sorted.
    Only the parts that meet a non-empty one of the other state change: the first's `paired`
    smallest with the second's, the rest are carried over, so a state that takes in one item
    costs a few comparisons, not k (a token budget near the longest sequence cuts a share into
    nearly as many micro-batches as sequences)."""
    if len(first) == len(second) == k:  # two full states (equal sizes: always): every part is joined
        joined = [
            (a[0] + b[0], a[1] + b[1], a[2] + b[2]) for a, b in zip(reversed(first), second, strict=True)
        ]
        joined.sort()
        return joined
    paired = max(0, len(first) + len(second) - k)
    joined = []
    for a, b in zip(reversed(first[:paired]), second[:paired], strict=True):
        a[2].extend(b[2])  # a state's parts are its own: the merged ones are not used again
        joined.append((a[0] + b[0], a[1] + b[1], a[2]))
    kept, added = first[paired:], second[paired:]
    if len(added) > len(kept):
        kept, added = added, kept
    added += joined
    if 8 * len(added) < len(kept):
        for part in added:
            insort(kept, part)
    else:
        kept += added
        kept.sort()
    return kept


def balanced_partitions(
    values: Sequence[int] | NDArray[np.int64], k: int, equal_size: bool
) -> list[list[int]]:
    """The indices of `values` (integers >= 0) in k parts of balanced sums, each part's indices
    ascending: the largest differencing method as verl runs it (get_seqlen_balanced_partitions):
    the two states of the largest spread merged, the first's largest part with the second's
    smallest, until one is left. `equal_size`: each part holds len(values) / k items (k must
    divide it). Its work is about a merge an item, each a few comparisons (`_merged`)."""
    if not 1 <= k <= len(values):
        raise ValueError(f"{k} parts of {len(values)} items")
    array = np.asarray(values, dtype=np.int64)
    order = np.argsort(array, kind="stable")  # by value, then index
    ranked = list(zip(array[order].tolist(), order.tolist(), strict=True))
    if ranked[0][0] < 0:
        raise ValueError(f"a negative value: {ranked[0][0]}")
    if k == 1:  # every merge joins the one part of each state: all items in it
        return [list(range(len(values)))]
    if equal_size:
        if len(values) % k:
            raise ValueError(f"{len(values)} items do not cut into {k} equal parts")
        return _equal_parts(ranked, k)
    states = [_state([(value, 1, [index])], k) for value, index in ranked]
    heapq.heapify(states)
    while len(states) > 1:
        first, second = heapq.heappop(states)[-1], heapq.heappop(states)[-1]
        heapq.heappush(states, _state(_merged(first, second, k), k))
    parts = [sorted(items) for _, _, items in reversed(states[0][-1])]
    return parts + [[] for _ in range(k - len(parts))]


def _equal_parts(ranked: list[tuple[int, int]], k: int) -> list[list[int]]:
    """`balanced_partitions` into k parts of equal size, of (value, index) pairs ascending: every
    state is full from the start and the parts of a state are of one size, so a part compares as
    (sum, its first item) and is kept as that pair, its items in `members[first item]` (the
    merged part's list takes in the other's); the second state popped is replaced by the merged
    one in one sift. The same parts as the general states (`_state`, `_merged`), at about 3/4 of
    their cost: the data-parallel ranks of every verl step are dealt so."""
    members = [[index] for index in range(len(ranked))]
    states = []
    for offset in range(0, len(ranked), k):
        parts = ranked[offset : offset + k]
        states.append((parts[0][0] - parts[-1][0], -parts[-1][0], -1, -parts[-1][1], parts))
    heapq.heapify(states)
    while len(states) > 1:
        _, _, size, _, first = heapq.heappop(states)
        _, _, other_size, _, second = states[0]
        joined = []
        for (sum_a, a), (sum_b, b) in zip(reversed(first), second, strict=True):
            joined.append((sum_a + sum_b, a))
            members[a] += members[b]
        joined.sort()
        largest, first_item = joined[-1]
        heapq.heapreplace(states, (joined[0][0] - largest, -largest, size + other_size, -first_item, joined))
    return [sorted(members[first_item]) for _, first_item in reversed(states[0][-1])]


def rank_order(seq_lens: Sequence[int] | NDArray[np.int64], ranks: int) -> NDArray[np.intp]:
    """The batch's order after it is dealt to `ranks` data-parallel ranks: rank 0's part, then rank
    1's, ..., each part in the batch's order (a permutation of the batch's indices)."""
    if ranks == 1:
        return np.arange(len(seq_lens))
    lengths = np.asarray(seq_lens, dtype=np.int64)
    parts = balanced_partitions(24576 * lengths + lengths * lengths, ranks, equal_size=True)  # `workload`
    return np.fromiter(itertools.chain.from_iterable(parts), dtype=np.intp, count=len(lengths))


@functools.lru_cache(maxsize=64)
def equal_cuts(ranks: int, share: int, count: int) -> NDArray[np.intp]:
    """Each response's micro-batch [ranks, share] where every rank cuts its share of a mini-batch
    (`share` responses, in its order) into `count` equal consecutive parts: micro-batch m of rank
    q is q count + m. Read-only: one array for every update that cuts so."""
    cuts = np.arange(ranks)[:, None] * count + np.arange(share) // (share // count)
    cuts.flags.writeable = False
    return cuts


def fewest_parts(share: Sequence[int], budget: int) -> int:
    """A lower bound on the parts of at most `budget` each that `share` (sizes, each at most
    `budget`) can be cut into: Martello and Toth's L2 (Discrete Applied Mathematics 28, 1990),
    over every threshold a in 0..budget/2 at a size: the items above budget - a each need a part
    of their own, as do those above budget / 2, and the items of a..budget/2 need parts for what
    does not fit beside the latter."""
    if sum(share) <= budget:  # one part holds them all (the common case: the rest costs far more)
        return 1
    sizes = np.sort(np.asarray(share, dtype=np.int64))
    below = np.concatenate([[0], np.cumsum(sizes)])  # below[i]: the i smallest sizes' sum
    half = int(np.searchsorted(sizes, budget // 2, side="right"))  # sizes[:half] <= budget / 2
    thresholds = np.unique(np.concatenate([[0], sizes[:half]]))
    start = np.searchsorted(sizes, thresholds, side="left")  # J3 = sizes[start:half]
    alone = np.searchsorted(sizes, budget - thresholds, side="right")  # J1 = sizes[alone:]
    big = len(sizes) - half  # |J1| + |J2|
    room = (alone - half) * budget - (below[alone] - below[half])  # what J2's parts leave
    small = below[half] - below[start]
    more = np.maximum(0, -((room - small) // budget))
    return int(max(1, np.max(big + more)))


def token_budget_parts(shares: Sequence[Sequence[int]], budget: int) -> list[list[list[int]]]:
    """Each rank's micro-batches of its share of a mini-batch (`shares[r]`: its responses' sequence
    lengths in its order): the same count k on every rank, the fewest from ceil(tokens / budget) of
    the rank with the most, raised until every micro-batch of every rank holds at most `budget`
    tokens; each micro-batch the indices into its rank's share. The counts below `fewest_parts`
    of a rank are skipped: no cut into so few parts fits, verl's neither. Each count tried
    partitions every share (`balanced_partitions`), so a share of n responses costs up to about
    n^2 merges (`worst_tries`), a few n typically."""
    if max(max(share) for share in shares) > budget:
        raise ValueError("a sequence is longer than the token budget")
    count = max(fewest_parts(share, budget) for share in shares)
    workloads = [[workload(s) for s in share] for share in shares]  # once, whatever count is tried
    while True:
        layout = [balanced_partitions(values, count, equal_size=False) for values in workloads]
        if all(
            sum(share[i] for i in part) <= budget
            for share, parts in zip(shares, layout, strict=True)
            for part in parts
        ):
            return layout
        count += 1  # at most len(share): one sequence a micro-batch fits


def worst_tries(share: int, budget: int, shortest: int) -> int:
    """The most counts `token_budget_parts` tries for shares of `share` sequences of at least
    `shortest` tokens each (it starts at ceil(tokens / budget) at least and ends at `share` at
    most)."""
    return share - min(share, max(1, -(-share * shortest // budget))) + 1
