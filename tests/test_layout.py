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


def test_ranks_of_verl_s_batches_are_the_straightforward_method_s() -> None:
    """The batches verl's V1 trainer deals every step (128 responses to 2, 4 or 8 ranks, equal
    parts: `_equal_parts`, which keeps a part as its sum and first item), lengths of every kind,
    many tied: the same parts as the straightforward method, and `rank_order` is them in order."""
    rng = np.random.default_rng(11)
    for trial in range(60):
        seq = _lengths(rng, 128, trial % 3)
        workloads = [layout.workload(s) for s in seq]
        for ranks in (2, 4, 8):
            expected = reference_partitions(workloads, ranks, True)
            assert layout.balanced_partitions(workloads, ranks, True) == expected
            assert layout.rank_order(seq, ranks).tolist() == list(itertools.chain.from_iterable(expected))


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


# --- the layout of a run's updates, as toyrl.train.Plan had it: a loop over ranks and micro-batches --


def reference_laid_out(
    plan: object,
    run: int,
    update: int,
    position: np.ndarray,
    tokens: np.ndarray,
    dealt: dict[int, np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    ranks, mini = plan.ranks, plan.mini_batches  # type: ignore[attr-defined]
    seq = (tokens.ravel() + plan.prompt_tokens).astype(np.int64)  # type: ignore[attr-defined]
    if run not in dealt:
        by_position = np.argsort(position.ravel(), kind="stable")
        dealt[run] = by_position[layout.rank_order(seq[by_position].tolist(), ranks)]
    order = dealt[run]
    share = len(order) // ranks // mini
    members, micro = np.zeros(len(seq), bool), np.zeros(len(seq), np.intp)
    shares = [order[(q * mini + update % mini) * share :][:share] for q in range(ranks)]
    budget = plan.token_budget if plan.per_micro_batch[run] else 0  # type: ignore[attr-defined]
    if budget:
        cut = layout.token_budget_parts([seq[s].tolist() for s in shares], budget)
        count = len(cut[0])
    else:
        count = plan.micro_batches  # type: ignore[attr-defined]
        each = share // count
        cut = [[list(range(m * each, (m + 1) * each)) for m in range(count)] for _ in shares]
    for q, (indices, parts) in enumerate(zip(shares, cut, strict=True)):
        members[indices] = True
        for m, part in enumerate(parts):
            micro[indices[part]] = q * count + m
    return members.reshape(position.shape), micro.reshape(position.shape)


@pytest.mark.parametrize(
    "spec",
    [
        "aggregation=seq_mean_token_sum_longest,mini_batches=4,micro_batches=2,ranks=8,prompt_tokens=1501,"
        "per_micro_batch=True",
        "aggregation=token_mean,mini_batches=2,ranks=4,prompt_tokens=10",
        "aggregation=seq_mean_token_sum_longest,num_iterations=2,mini_batches=2,ranks=2,token_budget=4000,"
        "prompt_tokens=0,per_micro_batch=True",
        "aggregation=seq_mean_token_sum_longest,mini_batches=2,ranks=4,token_budget=8000,prompt_tokens=10,"
        "per_micro_batch=True",
    ],
)
def test_each_update_s_layout_is_the_loop_s(spec: str) -> None:
    """Plan.parts lays a run's mini- and micro-batches out as the loop over ranks and micro-batches
    did, for every update of a step (the ranks' order kept across them), in the batch's order and
    in shuffled ones, lengths with many ties (the cap) and without."""
    from toyrl.train import Plan
    from toyrl.variants import parse_variant

    plan = Plan.of([parse_variant(spec)] * 3)
    rng = np.random.default_rng(11)
    shape = (3, 16, 8)  # runs, prompts, group
    for trial in range(12):
        tokens = np.where(rng.random(shape) < 0.3, 1501.0, rng.integers(1, 1500, size=shape)).astype(float)
        if trial % 3 == 0:
            tokens[:] = 700.0  # every length the same
        positions = None
        if trial % 2:
            positions = np.stack(
                [[rng.permutation(128).reshape(16, 8) for _ in range(2)] for _ in range(3)]
            )  # [R, orders, B, G]
        dealt: dict[int, np.ndarray] = {}
        expected: dict[int, np.ndarray] = {}
        for update in range(plan.updates):
            members, micro = plan.parts(update, positions, tokens, dealt)
            for run in range(3):
                if positions is None:
                    position = np.arange(128).reshape(16, 8)
                else:
                    position = positions[run, min(update // plan.mini_batches, positions.shape[1] - 1)]
                want = reference_laid_out(plan, run, update, position, tokens[run], expected)
                assert np.array_equal(members[run], want[0]) and np.array_equal(micro[run], want[1])


def test_equal_cuts_number_each_rank_s_micro_batches_after_the_ranks_before() -> None:
    """Rank q's share cut into `count` consecutive parts: micro-batch m of rank q is q count + m;
    one read-only array, shared by every update that cuts so."""
    cuts = layout.equal_cuts(2, 6, 3)
    assert cuts.tolist() == [[0, 0, 1, 1, 2, 2], [3, 3, 4, 4, 5, 5]]
    assert layout.equal_cuts(2, 6, 3) is cuts and not cuts.flags.writeable
    assert layout.equal_cuts(3, 2, 1).tolist() == [[0, 0], [1, 1], [2, 2]]


def test_one_part_and_a_share_within_the_budget_take_no_merges(monkeypatch: pytest.MonkeyPatch) -> None:
    """A share whose tokens fit the budget is one micro-batch, found without a largest differencing
    run (the common case of use_dynamic_bsz: every merge of one part joins everything); the lower
    bound is 1 there without sorting the sizes."""

    def merge(*args: object) -> None:
        raise AssertionError("a merge for one part")

    monkeypatch.setattr(layout, "_merged", merge)
    assert layout.balanced_partitions([5, 3, 9, 3], 1, equal_size=False) == [[0, 1, 2, 3]]
    assert layout.balanced_partitions([5, 3, 9, 3], 1, equal_size=True) == [[0, 1, 2, 3]]
    assert layout.token_budget_parts([[3, 2, 4], [1, 1, 1]], 9) == [[[0, 1, 2]], [[0, 1, 2]]]
    monkeypatch.setattr(layout.np, "sort", merge)
    assert layout.fewest_parts([3, 2, 4], 9) == 1
