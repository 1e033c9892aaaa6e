"""`toyrl.spread`: mean ± sd, and paired differences with a percentile-bootstrap interval, checked
against hand-worked cases and against the exact bootstrap distribution found by enumerating every
resample; seeds matched and mismatches refused; the same bits under every SIMD setting."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import warnings
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.test_kernels import simd_settings
from toyrl.config import InvalidInput
from toyrl.spread import Difference, describe, format_mean_sd, over_seeds, paired_difference
from toyrl.sweep import final_table

ROOT = Path(__file__).resolve().parent.parent


def test_mean_and_sample_sd_as_a_person_reads_them() -> None:
    # sd of 0.26, 0.27, 0.28 with ddof 1: sqrt((0.01² + 0 + 0.01²) / 2) = 0.01
    assert format_mean_sd([0.27, 0.28, 0.26], scale=100, digits=1) == "27.0 ± 1.0"
    assert format_mean_sd([1377.4]) == "1377"  # one seed: no sd
    assert over_seeds(6) == "mean ± sd over 6 seeds"
    assert over_seeds([3, 6, 6]) == "mean ± sd over 3–6 seeds"
    assert over_seeds([1, 1]) == "1 seed (no sd)"


def test_the_percentile_interval_of_a_hand_worked_case() -> None:
    """d = (0, 0, 3): a resample's mean is the number k of draws of the 3, k ~ Binomial(3, 1/3):
    P(k=0) = 8/27 > 2.5% and P(k <= 2) = 26/27 < 97.5%, so the percentile interval is [0, 3]."""
    difference = paired_difference([5.0, 7.0, 9.0], [5.0, 7.0, 6.0], [0, 1, 2], [0, 1, 2])
    assert difference == Difference(1.0, 0.0, 3.0, 3)
    assert describe(difference, "tokens") == "+1 tokens (95% CI 0 to +3; paired bootstrap over 3 seeds)"


@pytest.mark.parametrize(
    "values", [[1.0, 2.5, 4.0, 10.0], [-3.0, 0.5, 0.75, 2.0], [100.0, 130.0, 90.0, 95.0, 300.0]]
)
def test_the_interval_is_the_percentiles_of_the_exact_bootstrap_distribution(values: list[float]) -> None:
    """Every one of the n^n equally likely resamples of n seeds enumerated, with exact fractions:
    the interval's ends lie within the exact distribution's 2% to 3% and 97% to 98% quantiles (10,000
    resamples put the 2.5% quantile within 0.5% of probability, 3 standard errors, of its exact place)."""
    n = len(values)
    exact = Fraction  # the resampled means, exactly, each of probability 1 / n^n
    means = sorted(sum(map(exact, sample)) / n for sample in itertools.product(values, repeat=n))

    def quantile(p: float) -> float:
        return float(means[min(int(p * len(means)), len(means) - 1)])

    reference = [0.5 * k for k in range(n)]  # differences are taken from it: values - reference
    difference = paired_difference(np.add(values, reference), reference, range(n), range(n))
    assert difference.mean == pytest.approx(float(sum(map(exact, values)) / n), rel=1e-15)
    assert difference.low is not None and difference.high is not None
    assert quantile(0.02) <= difference.low <= quantile(0.03)
    assert quantile(0.97) <= difference.high <= quantile(0.98)


def test_the_interval_agrees_with_scipys_percentile_bootstrap() -> None:
    """scipy.stats.bootstrap (paired, percentile) on the same seeds, with its own generator: the
    ends agree within 3% of the interval's width (both are 10,000-resample estimates)."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(7)
    values, reference = rng.normal(900, 60, 12), rng.normal(0, 60, 12)
    ours = paired_difference(values, reference, range(12), range(12))
    theirs = bootstrap(
        (values, reference),
        lambda a, b, axis=-1: np.mean(a - b, axis=axis),
        paired=True,
        vectorized=True,
        method="percentile",
        n_resamples=10_000,
        random_state=np.random.default_rng(1),
    ).confidence_interval
    assert ours.low is not None and ours.high is not None
    width = theirs.high - theirs.low
    assert abs(ours.low - theirs.low) < 0.03 * width and abs(ours.high - theirs.high) < 0.03 * width


def test_values_are_matched_by_seed_and_mismatched_seeds_refused() -> None:
    values, reference = [3.0, 1.0, 7.0, 2.0], [1.0, 0.5, 2.0, 1.5]
    aligned = paired_difference(values, reference, [10, 11, 12, 13], [10, 11, 12, 13])
    shuffled = paired_difference(values, reference[::-1], [10, 11, 12, 13], [13, 12, 11, 10])
    # the mean is the same however values are paired; the interval is not: paired by position, it differs
    assert shuffled == aligned and aligned.mean == 2.0
    assert paired_difference(values, reference[::-1], range(4), range(4)).low != aligned.low
    assert paired_difference(values[::-1], reference[::-1], [13, 12, 11, 10], [13, 12, 11, 10]) == aligned
    with pytest.raises(InvalidInput, match=r"the same seeds \(seeds 9, 13 are in only one\)"):
        paired_difference(values, reference, [10, 11, 12, 13], [9, 10, 11, 12])
    with pytest.raises(InvalidInput, match=r"seeds 10 appear more than once"):
        paired_difference(values, reference, [10, 10, 12, 13], [10, 10, 12, 13])
    with pytest.raises(InvalidInput, match="3 seeds for 4 values"):
        paired_difference(values, reference, [10, 11, 12], [10, 11, 12, 13])


def test_fewer_than_three_seeds_give_words_not_an_interval() -> None:
    two = paired_difference([10.0, 14.0], [1.0, 1.0], [0, 1], [0, 1])
    assert two == Difference(11.0, None, None, 2)
    assert describe(two, "tokens") == "+11 tokens (2 seeds: too few seeds for an interval)"
    assert two.cell() == "+11 (2 seeds)"
    assert describe(paired_difference([0.5], [0.25], [3], [3]), "points", 100, 1) == (
        "+25.0 points (1 seed: too few seeds for an interval)"
    )


def test_equal_differences_give_a_point_interval_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        zero = paired_difference([4.0, 5.0, 6.0], [4.0, 5.0, 6.0], [0, 1, 2], [0, 1, 2])
        constant = paired_difference([4.0, 5.0, 6.0, 7.0], [3.0, 4.0, 5.0, 6.0], range(4), range(4))
    assert zero == Difference(0.0, 0.0, 0.0, 3) and constant == Difference(1.0, 1.0, 1.0, 4)
    assert describe(zero, "tokens") == "0 tokens (95% CI 0 to 0; paired bootstrap over 3 seeds)"


def test_the_wording_of_a_difference() -> None:
    difference = Difference(659.2, 610.4, 705.1, 8)
    assert (
        describe(difference, "tokens") == "+659 tokens (95% CI +610 to +705; paired bootstrap over 8 seeds)"
    )
    assert difference.cell() == "+659 (+610 to +705)"
    assert Difference(-0.0004, -0.012, 0.011, 6).cell(100, 1) == "0.0 (-1.2 to +1.1)"  # never '-0.0'
    assert Difference(float("nan"), None, None, 6).cell() == "–"


def test_sweep_table_gives_each_grid_point_s_paired_difference() -> None:
    """Three seeds, two grid points; GRPO's E[L | incorrect] is Dr. GRPO's + 100 (+ 7 at group size
    8) at every seed, its accuracy - 0.4: each interval is that one value."""
    rows = []
    for group_size, seed in itertools.product((4, 8), range(3)):
        base = 500.0 + 10 * seed
        rows.append(("dr_grpo", group_size, seed, 0.6 + 0.01 * seed, base))
        rows.append(("grpo", group_size, seed, 0.2 + 0.01 * seed, base + 100 + 7 * (group_size == 8)))
    last = pd.DataFrame(rows, columns=["variant", "group_size", "seed", "accuracy", "length_incorrect"])
    heading, table = final_table(last, ["group_size"])
    assert heading.startswith("Final step, exact expectations, mean ± sd over 3 seeds; vs Dr. GRPO:")
    assert "the 95% CI in parentheses (percentile bootstrap over seeds)" in heading
    assert table[0][-2:] == ["vs Dr. GRPO: accuracy, points", "vs Dr. GRPO: E[L | incorrect]"]
    assert table[1] == ["4", "Dr. GRPO", "61.0 ± 1.0", "510 ± 10", "reference", "reference"]
    assert table[2] == [
        "4",
        "GRPO",
        "21.0 ± 1.0",
        "610 ± 10",
        "-40.0 (-40.0 to -40.0)",
        "+100 (+100 to +100)",
    ]
    assert table[4][-1] == "+107 (+107 to +107)"
    two = final_table(last[last["seed"] < 2], ["group_size"])
    assert "too few seeds for an interval (at least 3)" in two[0] and two[1][2][-1] == "+100 (2 seeds)"


_DIGITS = """
import json
import numpy as np
from toyrl.spread import paired_difference
rng = np.random.default_rng(7)
values, reference = rng.normal(600, 80, 8), rng.normal(480, 60, 8)
d = paired_difference(values, reference, range(8), range(8))
print(json.dumps([d.mean.hex(), d.low.hex(), d.high.hex()]))
"""


def test_the_same_interval_to_the_bit_under_every_simd_setting() -> None:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    results = {}
    for setting in simd_settings():
        proc = subprocess.run(
            [sys.executable, "-c", _DIGITS],
            env=dict(env, NPY_DISABLE_CPU_FEATURES=setting),
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        results[setting] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len({tuple(r) for r in results.values()}) == 1, results
