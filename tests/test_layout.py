"""toyrl.layout: verl's V1 layout, the same parts as the straightforward method, at about one merge
per item (tests/conformance/test_verl.py checks it against verl's own functions)."""

from __future__ import annotations

import heapq
import itertools
import math
import subprocess
import sys
from collections.abc import Sequence

import numpy as np
import pytest

from toyrl import layout

# --- the straightforward method, as toyrl.layout had it: every merge builds and sorts all k parts ----


Part = tuple[int, int, list[tuple[int, int]]]  # (sum, size, (index, value) items)


class _First:
    __slots__ = ("part",)

    def __init__(self, part: Part) -> None:
        self.part = part

    def __lt__(self, other: _First) -> bool:
        return self.part > other.part


def _state(parts: list[Part]) -> tuple[int, _First, list[Part]]:
    parts.sort(reverse=True)
    return (parts[-1][0] - parts[0][0], _First(parts[0]), parts)


def reference_partitions(values: Sequence[int], k: int, equal_size: bool) -> list[list[int]]:
    ranked = sorted((int(value), index) for index, value in enumerate(values))
    if equal_size:
        states = [
            _state([(value, 1, [(index, value)]) for value, index in ranked[offset : offset + k]])
            for offset in range(0, len(ranked), k)
        ]
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


def reference_budget_parts(shares: Sequence[Sequence[int]], budget: int) -> list[list[list[int]]]:
    count = max(min(len(share), -(-sum(share) // budget)) for share in shares)
    workloads = [[layout.workload(s) for s in share] for share in shares]
    while True:
        cut = [reference_partitions(values, count, False) for values in workloads]
        if all(
            sum(share[i] for i in part) <= budget
            for share, parts in zip(shares, cut, strict=True)
            for part in parts
        ):
            return cut
        count += 1


def _lengths(rng: np.random.Generator, n: int, kind: int) -> list[int]:
    """Sequence lengths: a few values (many ties), a wide range, or the toy's shape (many at the cap)."""
    if kind == 0:
        return rng.integers(1, 4, size=n).tolist()
    if kind == 1:
        return rng.integers(1, 20_000, size=n).tolist()
    return np.where(rng.random(n) < 0.4, 1501, rng.integers(2, 400, size=n)).tolist()


def test_the_parts_are_the_straightforward_method_s() -> None:
    """Random lengths, many tied, every count of parts from 1 to the items (where the merges take
    the fast paths: a state of few non-empty parts, all of them empty but one), equal-size and not,
    and the token budget's micro-batches of one and of several ranks: the same parts, in the same
    order, as the straightforward method."""
    rng = np.random.default_rng(7)
    for trial in range(800):
        n = int(rng.integers(1, 70))
        seq = _lengths(rng, n, trial % 3)
        workloads = [layout.workload(s) for s in seq]
        k = int(rng.integers(1, n + 1))
        assert layout.balanced_partitions(workloads, k, False) == reference_partitions(workloads, k, False)
        assert layout.balanced_partitions(seq, k, False) == reference_partitions(seq, k, False)
        k_equal = int(rng.choice([d for d in range(1, n + 1) if n % d == 0]))
        assert layout.balanced_partitions(workloads, k_equal, True) == reference_partitions(
            workloads, k_equal, True
        )
        shares = [_lengths(rng, n, trial % 3) for _ in range(int(rng.integers(1, 4)))]
        budget = max(max(share) for share in shares) + int(
            rng.integers(0, 3 * max(map(sum, shares)) // n + 1)
        )
        assert layout.token_budget_parts(shares, budget) == reference_budget_parts(shares, budget)
    zeros = [0, 0, 3, 0, 5]  # an empty part and a part of zeros differ by size
    for k in range(1, 6):
        assert layout.balanced_partitions(zeros, k, False) == reference_partitions(zeros, k, False)


def _fewest_bins(sizes: Sequence[int], budget: int) -> int:
    """The fewest parts of at most `budget` that `sizes` cut into, by trying every assignment."""
    for count in range(1, len(sizes) + 1):
        for labels in itertools.product(range(count), repeat=len(sizes)):
            loads = [0] * count
            for size, label in zip(sizes, labels, strict=True):
                loads[label] += size
            if max(loads) <= budget:
                return count
    raise AssertionError("unreachable: one item a part fits")


def test_fewest_parts_is_a_lower_bound_at_least_the_tokens_over_the_budget() -> None:
    """Martello and Toth's L2 never exceeds the fewest parts (found by trying every assignment) and
    never falls below ceil(tokens / budget); worked examples: three items over half the budget need
    three parts where their tokens fill two; a threshold counts the small items beside them."""
    assert layout.fewest_parts([6, 6, 6], 10) == 3 and math.ceil(18 / 10) == 2
    assert layout.fewest_parts([6, 6, 6, 4, 4, 4], 10) == 3
    assert layout.fewest_parts([6, 6, 6, 5, 5, 5], 10) == 5  # the 5s fit beside no 6, two a part
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 7))
        budget = int(rng.integers(2, 20))
        sizes = rng.integers(1, budget + 1, size=n).tolist()
        bound = layout.fewest_parts(sizes, budget)
        assert math.ceil(sum(sizes) / budget) <= bound <= _fewest_bins(sizes, budget)


def test_the_token_budget_starts_at_its_lower_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The counts below `fewest_parts` are not tried: with half the sequences over half the budget,
    ceil(tokens / budget) is far below it, and every count between was a whole largest differencing
    run that could not fit."""
    rng = np.random.default_rng(5)
    share = np.where(rng.random(1024) < 0.5, 1500, rng.integers(2, 400, size=1024)).tolist()
    budget = 1950
    tried: list[int] = []
    partitions = layout.balanced_partitions

    def counted(values: Sequence[int], k: int, equal_size: bool) -> list[list[int]]:
        tried.append(k)
        return partitions(values, k, equal_size)

    monkeypatch.setattr(layout, "balanced_partitions", counted)
    (parts,) = layout.token_budget_parts([share], budget)
    over_half = sum(2 * s > budget for s in share)
    assert tried[0] >= over_half > math.ceil(sum(share) / budget)
    assert tried == list(range(tried[0], len(parts) + 1))


def test_a_large_share_is_laid_out_in_bounded_time() -> None:
    """The issue's split: 4,096 sequences of the toy's shape under a token budget of 1,501 (the
    straightforward method: minutes, every merge sorting a thousand parts; now seconds). The
    timeout only guards against a hang: it is minutes beyond what the layout takes on a machine
    loaded 10 times over."""
    script = (
        "import numpy as np; from toyrl import layout; rng = np.random.default_rng(0); "
        "seq = np.where(rng.random(8192) < 0.4, 1501, rng.integers(2, 400, size=8192)).tolist(); "
        "(parts,) = layout.token_budget_parts([seq], 1501); "
        "assert sorted(i for p in parts for i in p) == list(range(8192)); "
        "assert all(sum(seq[i] for i in p) <= 1501 for p in parts); "
        "assert len(parts) >= seq.count(1501)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr


def test_worst_tries_counts_from_the_tokens_lower_bound_to_one_part_a_sequence() -> None:
    assert layout.worst_tries(4096, 1501, 2) == 4096 - 6 + 1
    assert layout.worst_tries(10, 100, 100) == 1  # every sequence fills a part: one count, 10
    assert layout.worst_tries(1, 5, 0) == 1
