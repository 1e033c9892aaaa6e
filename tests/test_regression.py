"""The core keeps its numbers: every variant and preset regenerates the committed regression fixture.

`python scripts/regression_fixture.py` wrote tests/fixtures/ with the arithmetic of
`toyrl.kernels` and `toyrl.noise`; a change to the simulator that moves any number fails here,
naming the first line that moved. The CSVs are compared byte for byte, on every machine.
"""

from pathlib import Path

import pandas as pd
import pytest

from .files import first_difference
from .scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
fixture = load_script("regression_fixture")


@pytest.mark.parametrize(
    ("name", "config", "variants", "mean_field"), fixture.CASES, ids=lambda c: str(c)[:24]
)
def test_every_variant_regenerates_the_committed_fixture(name, config, variants, mean_field) -> None:
    saved = (ROOT / "tests" / "fixtures" / name).read_bytes()
    fresh = fixture.make(config, variants, mean_field).to_csv(index=False, lineterminator="\n").encode()
    difference = first_difference(saved, fresh)
    assert not difference, f"{name}: {difference}"


def test_the_fixture_covers_every_preset_and_every_mode() -> None:
    from toyrl.stages import REGISTRY, StoppedResponses
    from toyrl.variants import VARIANTS, parse_variant

    sampled = pd.read_csv(ROOT / "tests" / "fixtures" / "sampled.csv")
    names = set(sampled["variant"])
    assert set(VARIANTS) <= names
    variants = [parse_variant(name) for name in names]
    stale = "the fixture is stale: run `python scripts/regression_fixture.py` (its old rows must not move)"
    assert {v.names()["advantage"] for v in variants} == set(REGISTRY["advantage"]), stale
    assert {v.names()["normaliser"] for v in variants} == set(REGISTRY["normaliser"]), stale
    assert any(v.num_iterations > 1 and v.objective.clip_high != v.objective.epsilon for v in variants)
    assert any(v.kl.beta > 0 for v in variants)
    assert any(isinstance(v.selector, StoppedResponses) for v in variants)
    assert (sampled["clip_fraction"] > 0).any()  # the clipped objective is exercised


def test_a_mode_no_spec_names_is_added_to_the_fixture_after_the_others() -> None:
    """The fixture covers a new advantage or aggregation without an edit of its script: one spec for
    each the listed ones leave out, after them (so the rows before it do not move)."""
    from toyrl.stages import REGISTRY
    from toyrl.variants import parse_variant

    specs = fixture.every_mode(["grpo", "advantage=rloo,aggregation=token_mean"])
    assert specs[:2] == ["grpo", "advantage=rloo,aggregation=token_mean"]
    names = [parse_variant(spec).names() for spec in specs]
    assert {n["advantage"] for n in names} == set(REGISTRY["advantage"])
    assert {n["normaliser"] for n in names} == set(REGISTRY["normaliser"])
    assert len(specs) == len(REGISTRY["advantage"]) + len(REGISTRY["normaliser"]) - 2  # one each, no more
