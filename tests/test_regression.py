"""The core keeps its numbers: every variant and preset regenerates the committed regression fixture.

`python scripts/regression_fixture.py` wrote tests/fixtures/ before the core's redesign; a change
to the simulator that moves any number fails here, naming the first cell that moved. On the machine
that wrote the fixture the numbers are equal to the bit; elsewhere exact metrics (and every column
of runs whose parameters carry exp's rounding) are compared within 1e-12 relative.
"""

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

from toyrl.results import compare_results

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location(
    "regression_fixture", ROOT / "scripts" / "regression_fixture.py"
)
assert spec is not None and spec.loader is not None
fixture = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fixture)


@pytest.mark.parametrize(
    ("name", "config", "variants", "mean_field"), fixture.CASES, ids=lambda c: str(c)[:24]
)
def test_every_variant_regenerates_the_committed_fixture(name, config, variants, mean_field) -> None:
    saved = pd.read_csv(ROOT / "tests" / "fixtures" / name)
    fresh = fixture.make(config, variants, mean_field)
    fresh = pd.read_csv(pd.io.common.StringIO(fresh.to_csv(index=False)))  # as it reads back from disk
    comparison = compare_results(saved, fresh, mean_field=mean_field)
    assert comparison.same, comparison.describe()


def test_the_fixture_covers_every_preset_and_every_mode() -> None:
    from toyrl.objective import ADVANTAGES, AGGREGATIONS, parse_variant
    from toyrl.presets import ALL_VARIANTS

    sampled = pd.read_csv(ROOT / "tests" / "fixtures" / "sampled.csv")
    names = set(sampled["variant"])
    assert set(ALL_VARIANTS) <= names
    variants = [parse_variant(name, ALL_VARIANTS) for name in names]
    assert {v.advantage for v in variants} == set(ADVANTAGES)
    assert {v.aggregation for v in variants} == set(AGGREGATIONS)
    assert any(v.num_iterations > 1 and v.clip_high != v.epsilon for v in variants)
    assert any(v.beta > 0 for v in variants) and any(v.mask_truncated for v in variants)
    assert (sampled["clip_fraction"] > 0).any()  # the clipped objective is exercised
