"""Random variates from the PCG64 bit stream alone: the same draws on every machine and in the page.

A run's noise comes from numpy's PCG64 generators (`toyrl.train.run_streams`), whose 64-bit
outputs are specified to the bit and the same on every platform. numpy's own transforms of them
are not: its ziggurat exponential and normal call the C library's exp and log in their rare
branches, and numpy does not promise their streams across versions. So toyrl takes the raw
outputs x (uint64) and transforms them itself, with IEEE-754 arithmetic and `toyrl.kernels`:

- `uniform`: numpy's `Generator.random`, (x >> 11) 2^-53, in [0, 1) (53 bits: every value exact);
- `open_uniform`: ((x >> 12) + 1/2) 2^-52, in (0, 1) (52 bits and a half: never 0 or 1, symmetric
  about 1/2; every value exact);
- `standard_exponential`: -log(U), U = `open_uniform` (inversion: at most 36.7);
- `standard_normal`: Phi^-1(U), U = `open_uniform` (inversion, Wichura's AS241: |z| below 8.3);
- `permutation_prefix`: the first k of a uniformly random permutation, the indices of `uniform`s
  in increasing order (ties, which 53-bit draws make unlikely, go to the lower index).

Each variate takes exactly one output of its stream, so a stream's draws follow one another
whatever the shapes they are drawn in. Every function takes one generator, or a sequence of them
(one per run: the result then has a leading runs axis, each run's draws from its own generator,
transformed together). toyrl/explorer/random.js draws the same in the page.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from toyrl import kernels

FloatArray = NDArray[np.float64]
Shape = int | tuple[int, ...]
Streams = np.random.Generator | Sequence[np.random.Generator]


def _each(rng: Streams, draw: Callable[[np.random.Generator], NDArray[Any]]) -> NDArray[Any]:
    """draw(rng), or the draws of several generators (a list or tuple) stacked along a new first axis."""
    if isinstance(rng, Sequence):
        return np.stack([draw(one) for one in rng])
    return draw(rng)


def uniform(rng: Streams, shape: Shape) -> FloatArray:
    """U(0, 1) in [0, 1) [shape]: numpy's `Generator.random`, (x >> 11) 2^-53."""
    return _each(rng, lambda one: one.random(shape))


def open_uniform(rng: Streams, shape: Shape) -> FloatArray:
    """U(0, 1) in (0, 1) [shape]: ((x >> 12) + 1/2) 2^-52, exact (x >> 12 < 2^52)."""
    raw = _each(rng, lambda one: one.bit_generator.random_raw(shape))
    compiled = kernels.compiled_module("toyrl.kernels_compiled")
    if compiled is not None:  # the same exact operations, one loop
        return cast(FloatArray, compiled.open_uniform(raw))
    return _open(raw)


def _open(raw: NDArray[np.uint64]) -> FloatArray:
    return ((raw >> np.uint64(12)).astype(np.float64) + 0.5) * 2.0**-52


def standard_exponential(rng: Streams, shape: Shape) -> FloatArray:
    """Exp(1) [shape] by inversion: -log U, U = `open_uniform`."""
    raw = _each(rng, lambda one: one.bit_generator.random_raw(shape))
    compiled = kernels.compiled_module("toyrl.kernels_compiled")
    if compiled is not None:  # U and its log in one loop (`kernels.log`'s operations)
        return cast(FloatArray, compiled.standard_exponential(raw))
    return -kernels.log(_open(raw))


def standard_normal(rng: Streams, shape: Shape) -> FloatArray:
    """Normal(0, 1) [shape] by inversion: Phi^-1(U), U = `open_uniform` (`kernels.normal_quantile`)."""
    return kernels.normal_quantile(open_uniform(rng, shape))


INDEX_BITS = 11  # the low bits of an output below `uniform`'s 53: room for an index below 2^11


def permutation_prefix(rng: Streams, rows: Shape, size: int, count: int) -> NDArray[np.intp]:
    """The first `count` entries of a uniformly random permutation of 0..size-1 for each of `rows`
    [*rows, count]: the order of `size` uniforms per row, ties to the lower index (a stable argsort
    of `uniform`'s draws, so ties cannot depend on the sorting algorithm).

    For size <= 2^11 the same order comes from one plain sort: each output x keeps the 53 bits that
    `uniform` makes its draw of ((x >> 11) 2^-53, increasing in them) and takes its index in the 11
    below, so every key is distinct and sorts as (draw, index)."""
    shape = (rows,) if isinstance(rows, int) else rows
    if size > 1 << INDEX_BITS:
        return uniform(rng, (*shape, size)).argsort(axis=-1, kind="stable")[..., :count]
    raw = _each(rng, lambda one: one.bit_generator.random_raw((*shape, size)))
    keys = (raw >> np.uint64(INDEX_BITS) << np.uint64(INDEX_BITS)) | np.arange(size, dtype=np.uint64)
    if count < size:
        keys = np.partition(keys, count - 1, axis=-1)[..., :count] if count > 0 else keys[..., :0]
    first = np.sort(keys, axis=-1)[..., :count] & np.uint64((1 << INDEX_BITS) - 1)
    return first.astype(np.intp)
