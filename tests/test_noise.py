"""toyrl.noise: the variates' definitions, which the page's random.js follows to the bit."""

from __future__ import annotations

import numpy as np
import pytest

from toyrl import noise


@pytest.mark.parametrize(
    ("rows", "size", "count"),
    [
        ((401,), 64, 8),
        ((3, 5), 64, 64),
        ((2,), 5, 0),
        ((), 7, 3),
        ((4,), 2048, 17),
        ((2,), 3000, 5),
        ((), 1, 1),
    ],
)
def test_permutation_prefix_is_the_stable_argsort_of_the_uniforms(
    rows: tuple[int, ...], size: int, count: int
) -> None:
    """The first `count` indices of a stable argsort of `uniform`'s draws, for one generator and for
    a list of them, and the stream left where those draws leave it (sizes above 2^11: the argsort
    itself)."""
    for seed in range(3):
        got = noise.permutation_prefix(np.random.default_rng(seed), rows, size, count)
        reference = np.random.default_rng(seed)
        want = reference.random((*rows, size)).argsort(axis=-1, kind="stable")[..., :count]
        assert got.dtype == want.dtype and got.shape == want.shape
        assert (got == want).all()
        streams = [np.random.default_rng(seed + i) for i in range(3)]
        stacked = noise.permutation_prefix(streams, rows, size, count)
        for i, stream in enumerate(streams):
            again = np.random.default_rng(seed + i)
            assert (
                stacked[i] == again.random((*rows, size)).argsort(axis=-1, kind="stable")[..., :count]
            ).all()
            assert stream.random() == again.random()


class _Raw:
    """A bit generator whose outputs are given (ties in their top 53 bits, distinct below)."""

    def __init__(self, outputs: np.ndarray) -> None:
        self.outputs = outputs

    def random_raw(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.outputs.reshape(shape)


class _Stream:
    def __init__(self, outputs: np.ndarray) -> None:
        self.bit_generator = _Raw(outputs)


def test_permutation_prefix_breaks_ties_to_the_lower_index() -> None:
    """Draws equal in `uniform`'s 53 bits keep their index order whatever their low 11 bits."""
    top = np.array([5, 3, 5, 3, 1, 5], dtype=np.uint64) << np.uint64(11)
    low = np.array([2047, 9, 0, 1000, 7, 1], dtype=np.uint64)
    order = noise.permutation_prefix(_Stream(top | low), (), 6, 6)  # type: ignore[arg-type]
    assert order.tolist() == [4, 1, 3, 0, 2, 5]
    assert noise.permutation_prefix(_Stream(top | low), (), 6, 2).tolist() == [4, 1]  # type: ignore[arg-type]
