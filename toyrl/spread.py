"""Spread over seeds, computed and worded in one place.

Two kinds of numbers are reported:

- **Levels** (a variant's final accuracy, its E[L | incorrect]): mean ± sd over N seeds, the sample
  standard deviation (ddof 1), which says how much one seed varies; `mean_sd`, `format_mean_sd`.
- **Differences between variants**: the variants of a seed share its initial logits and noise
  streams (common random numbers), so the difference of two variants is taken seed by seed and its
  mean is given with a 95% confidence interval, the percentile bootstrap over seeds
  (`paired_difference`, worded by `describe`).

The percentile bootstrap is rliable's choice for RL results (Agarwal et al. 2021, "Deep RL at the
Edge of the Statistical Precipice"); with few seeds it is too narrow (it does not widen as Student's t
does, and a bootstrap of 3 seeds has only 10 distinct resamples), so read an interval over 6 seeds as
indicative. With fewer than MIN_SEEDS seeds no interval is given, in words.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from toyrl import noise
from toyrl.config import InvalidInput

CONFIDENCE = 0.95
RESAMPLES = 10_000  # endpoints vary by under 1% of the interval's width with the generator seed (1,000: 2%)
BOOTSTRAP_SEED = 2503_20783  # fixed, so an interval is the same on every call (the arXiv id)
MIN_SEEDS = 3  # fewer: no interval (2 seeds have 3 distinct resamples)


def mean_sd(values: ArrayLike) -> tuple[float, float]:
    """Mean and sample sd (ddof 1) of per-seed values [seeds]; the sd is NaN for one seed."""
    array = np.asarray(values, dtype=np.float64)
    sd = float(array.std(ddof=1)) if len(array) > 1 else float("nan")
    return float(array.mean()), sd


def format_mean_sd(values: ArrayLike, scale: float = 1.0, digits: int = 0) -> str:
    """Per-seed values as '27.1 ± 1.2' (mean ± sd, each times `scale`, `digits` decimals); the mean
    alone for one seed."""
    mean, sd = mean_sd(values)
    return f"{mean * scale:.{digits}f}" + ("" if np.isnan(sd) else f" ± {sd * scale:.{digits}f}")


def over_seeds(counts: int | Sequence[int]) -> str:
    """What a table's ± is: 'mean ± sd over 6 seeds' ('over 3–6 seeds' when variants differ; '1 seed
    (no sd)')."""
    counts = [counts] if isinstance(counts, int) else list(counts)
    low, high = min(counts), max(counts)
    if high == 1:
        return "1 seed (no sd)"
    seeds = f"{low}" if low == high else f"{low}–{high}"
    return f"mean ± sd over {seeds} seed{'s' if high > 1 else ''}"


@dataclass(frozen=True)
class Difference:
    """The paired difference (a variant) - (a reference) over `seeds` seeds: its mean and the 95%
    percentile-bootstrap interval [low, high] (None with fewer than MIN_SEEDS seeds)."""

    mean: float
    low: float | None
    high: float | None
    seeds: int

    def cell(self, scale: float = 1.0, digits: int = 0) -> str:
        """For a table: '+659 (+610 to +705)', or '+659 (2 seeds)' without an interval,
        '–' when undefined."""
        if np.isnan(self.mean):
            return "–"
        if self.low is None or self.high is None:
            return f"{_signed(self.mean * scale, digits)} ({self.seeds} seed{'s' if self.seeds > 1 else ''})"
        low, high = _signed(self.low * scale, digits), _signed(self.high * scale, digits)
        return f"{_signed(self.mean * scale, digits)} ({low} to {high})"


def paired_difference(
    values: ArrayLike, reference: ArrayLike, seeds: ArrayLike, reference_seeds: ArrayLike
) -> Difference:
    """The paired difference `values` - `reference` of two variants' per-seed values [seeds], matched
    by seed (`seeds`, `reference_seeds`: the seed of each value; the orders may differ).

    Mean of the per-seed differences d_s, and its 95% confidence interval by the percentile bootstrap
    over seeds (`_percentile_interval`: RESAMPLES resamples of the seeds with replacement, the 2.5%
    and 97.5% quantiles of the resampled means). With few seeds the percentile interval is too narrow (module
    docstring). No interval with fewer than MIN_SEEDS seeds, nor when a value is not finite (the
    mean is then NaN: E[L | correct] of a policy that is never correct); [d, d] when every d_s is d
    (the bootstrap is not asked: its distribution is degenerate). InvalidInput if the seeds differ
    or repeat.
    """
    first, second = _by_seed(values, seeds), _by_seed(reference, reference_seeds)
    if first.keys() != second.keys():
        missing = sorted(set(first) ^ set(second))
        raise InvalidInput(
            f"paired difference: the two variants must have the same seeds (seeds {_listed(missing)} are "
            "in only one); run them with the same --seeds and --seed-start"
        )
    order = sorted(first)
    a = np.array([first[seed] for seed in order])
    b = np.array([second[seed] for seed in order])
    differences = a - b
    mean = float(_mean(differences))
    if len(order) < MIN_SEEDS or not np.isfinite(differences).all():
        return Difference(mean, None, None, len(order))
    if np.all(differences == differences[0]):
        return Difference(mean, mean, mean, len(order))
    low, high = _percentile_interval(differences)
    return Difference(mean, low, high, len(order))


def _percentile_interval(differences: np.ndarray) -> tuple[float, float]:
    """The percentile bootstrap's interval of the mean of `differences` [seeds]: RESAMPLES resamples
    of the seeds with replacement, each seed's index floor(U n) from `toyrl.noise.uniform` on a PCG64
    stream seeded BOOTSTRAP_SEED, and the (1 - CONFIDENCE)/2 and (1 + CONFIDENCE)/2 quantiles of the
    resampled means by linear interpolation (numpy's default `percentile`, scipy.stats.bootstrap's
    method="percentile"). scipy's bootstrap is not used: it draws with `Generator.integers`, whose
    stream numpy does not promise across versions, and toyrl's numbers are the same bits on any
    numpy (docs/reproducibility.md)."""
    n = len(differences)
    rng = np.random.Generator(np.random.PCG64(BOOTSTRAP_SEED))
    means = np.empty(RESAMPLES)
    chunk = max(1, 4_000_000 // n)  # resamples drawn at a time: about 32 MB of indices
    for start in range(0, RESAMPLES, chunk):
        rows = min(chunk, RESAMPLES - start)
        picks = np.minimum((noise.uniform(rng, (rows, n)) * n).astype(np.intp), n - 1)
        means[start : start + rows] = _mean(differences[picks])
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)


def describe(difference: Difference, unit: str, scale: float = 1.0, digits: int = 0) -> str:
    """A paired difference in words: '+659 tokens (95% CI +610 to +705; paired bootstrap over 8
    seeds)', or '+659 tokens (2 seeds: too few seeds for an interval)'."""
    if np.isnan(difference.mean):
        return "undefined (a seed's value is not a number)"
    mean = f"{_signed(difference.mean * scale, digits)} {unit}"
    seeds = f"{difference.seeds} seed{'s' if difference.seeds > 1 else ''}"
    if difference.low is None or difference.high is None:
        return f"{mean} ({seeds}: too few seeds for an interval)"
    low, high = _signed(difference.low * scale, digits), _signed(difference.high * scale, digits)
    return f"{mean} ({CONFIDENCE:.0%} CI {low} to {high}; paired bootstrap over {seeds})"


def _mean(values: np.ndarray) -> np.ndarray:
    """The mean over the last axis, summed left to right in elementwise additions: the same bits
    whatever numpy's reduction kernels (their order of summation is theirs to choose)."""
    columns = np.moveaxis(values, -1, 0)
    return functools.reduce(np.add, columns[1:], columns[0].copy()) / values.shape[-1]


def _by_seed(values: ArrayLike, seeds: ArrayLike) -> dict[int, float]:
    array = np.asarray(values, dtype=np.float64)
    keys = [int(seed) for seed in np.asarray(seeds).ravel().tolist()]
    if array.ndim != 1 or len(array) != len(keys):
        raise InvalidInput(f"paired difference: {len(keys)} seeds for {array.size} values")
    repeated = sorted({seed for seed in keys if keys.count(seed) > 1})
    if repeated:
        raise InvalidInput(f"paired difference: seeds {_listed(repeated)} appear more than once")
    return dict(zip(keys, array.tolist(), strict=True))


def _listed(seeds: list[int]) -> str:
    return ", ".join(map(str, seeds[:5])) + (f" and {len(seeds) - 5} more" if len(seeds) > 5 else "")


def _signed(value: float, digits: int) -> str:
    """'+659', '-0.3', and '0' (not '+0' or '-0') for what rounds to zero."""
    text = f"{value:+.{digits}f}"
    return text[1:] if float(text) == 0 else text
