"""Results files: what `toyrl.load` (and so `toyrl plot` and `bias --results`) reads is what was
written, and `toyrl.save` writes nothing that `load` would refuse."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

import toyrl
from toyrl.cli import app
from toyrl.config import MAX_SEED, InvalidInput

from .output import error_line

TINY = {"steps": 2, "prompts": 8, "batch_prompts": 2, "group_size": 4}


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return toyrl.run(["grpo", "dr_grpo"], seeds=2, **TINY)


def rewrite(path: Path, csv: str | None = None, **config: Any) -> None:
    """Replace the CSV's text and/or settings of the sidecar's configuration, its digest made to match:
    what a careful hand edit leaves."""
    sidecar = path.with_suffix(".json")
    meta = json.loads(sidecar.read_text())
    if csv is not None:
        path.write_text(csv)
        meta["csv_sha256"] = hashlib.sha256(csv.encode()).hexdigest()
    meta["config"] |= config
    sidecar.write_text(json.dumps(meta))


def refusals(path: Path) -> list[tuple[int, str]]:
    """(exit status, error line) of `toyrl plot` and `toyrl bias --results` on the file: the one line
    that ends stderr after nothing but progress lines (which a loaded machine may print first)."""
    runner = CliRunner()
    out = [runner.invoke(app, ["plot", str(path), "--out", str(path.parent / "figures")])]
    out.append(runner.invoke(app, ["bias", "--results", str(path)]))
    return [(result.exit_code, error_line(result.stderr)) for result in out]


@pytest.mark.parametrize("seed", [2**63, 2**64 - 1, -1])
def test_a_seed_beyond_int64_is_refused_not_wrapped(frame: pd.DataFrame, seed: int, tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    toyrl.save(frame, path)
    lines = path.read_text().splitlines(keepends=True)
    last = lines[-1].split(",")
    last[1] = str(seed)  # the last run's last step: a seed 2**63 once became -2**63
    rewrite(path, "".join(lines[:-1]) + ",".join(last))
    line = f"{path}: column seed must hold whole numbers in 0..{MAX_SEED:,} (row {len(lines)} has {seed})"
    with pytest.raises(InvalidInput) as raised:
        toyrl.load(path)
    assert str(raised.value) == line
    for code, error in refusals(path):
        assert (code, error) == (2, f"toyrl: error: {line}")


def test_the_largest_seed_is_read_back_exactly(frame: pd.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    toyrl.save(frame, path)
    text = path.read_text()
    rewrite(path, text.replace("\ndr_grpo,1,", f"\ndr_grpo,{MAX_SEED},"))  # a float would make it 2**63
    assert MAX_SEED in set(toyrl.load(path)["seed"])


BROKEN = {
    "a run twice": (
        lambda f: pd.concat([f, f[f["variant"] == "grpo"].iloc[:3]]),
        "variant grpo, seed 0, step 0 appears",
    ),
    "a dropped column": (lambda f: f.drop(columns="accuracy"), "missing columns accuracy"),
    "a missing step": (lambda f: f[f["step"] != 1], "variant grpo, seed 0 has steps 0..2 with 2 rows"),
    "a seed beyond int64": (
        lambda f: f.assign(seed=f["seed"].astype(float) * 2.0**64),
        "column seed must hold",
    ),
    "text for numbers": (lambda f: f.assign(accuracy="high"), "columns accuracy must hold numbers"),
    "no rows": (lambda f: f.iloc[:0], "has no rows"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_save_writes_nothing_that_load_would_refuse(frame: pd.DataFrame, case: str, tmp_path: Path) -> None:
    """Refused before anything is written, and results already at the path are kept as they were."""
    change, message = BROKEN[case]
    path = tmp_path / "r.csv"
    toyrl.save(frame, path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    broken = change(frame.copy())
    broken.attrs = frame.attrs
    for target in (path, tmp_path / "new.csv"):
        with pytest.raises(InvalidInput) as raised:
            toyrl.save(broken, target, force=True)
        assert str(raised.value).startswith(f"the frame: {message}"), str(raised.value)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    pd.testing.assert_frame_equal(toyrl.load(path), frame, check_exact=True)


def test_save_refuses_a_configuration_load_would_refuse(frame: pd.DataFrame, tmp_path: Path) -> None:
    for attrs, message in (
        ({}, "is not one of this toyrl's"),
        ({"arithmetic": frame.attrs["toyrl"]["arithmetic"], "when": object()}, "is not JSON"),
        (frame.attrs["toyrl"] | {"config": frame.attrs["toyrl"]["config"] | {"cap": 1000}}, "did not make"),
        (frame.attrs["toyrl"] | {"config": {"cap": -1}}, r"is not a valid one \(cap must be an integer"),
    ):
        unmade = frame.copy()
        unmade.attrs = {"toyrl": attrs}
        with pytest.raises(InvalidInput, match=message):
            toyrl.save(unmade, tmp_path / "r.csv")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("cap", 1000),
        ("cap", 1501),
        ("min_length", 50),
        ("stop_prob_wrong", 1 / 600),
        ("prompt_logit_mean", -0.5),
    ],
)
def test_an_edited_sidecar_configuration_is_refused(
    frame: pd.DataFrame, setting: str, value: Any, tmp_path: Path
) -> None:
    """The CSV's digest is intact; the sidecar's configuration is not the one that made it, so the
    figures would mark the wrong cap and min_length. Refused, exit 2, one line; nothing is drawn."""
    path = tmp_path / "r.csv"
    toyrl.save(frame, path)
    rewrite(path, **{setting: value})
    with pytest.raises(InvalidInput) as raised:
        toyrl.load(path)
    message = str(raised.value)
    assert message.startswith(f"{path}: the sidecar's configuration did not make these results (")
    for code, error in refusals(path):
        assert (code, error) == (2, f"toyrl: error: {message}")
    assert not (tmp_path / "figures").exists()


def test_a_sidecar_configuration_out_of_its_range_is_refused(frame: pd.DataFrame, tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    toyrl.save(frame, path)
    rewrite(path, cap=0)
    with pytest.raises(InvalidInput, match=r"the sidecar's configuration is not a valid one \(cap must be"):
        toyrl.load(path)


def test_a_sidecar_as_written_is_read_back(frame: pd.DataFrame, tmp_path: Path) -> None:
    """The checks refuse no file toyrl wrote: other settings, mean-field runs, later steps kept."""
    for made, kwargs in (
        (frame, {}),
        (toyrl.run("dr_grpo", seeds=[5, 3], **TINY | {"cap": 40, "min_length": 10}), {}),
        (toyrl.run("dr_grpo", seeds=1, mean_field=True, **TINY | {"cap": 30, "min_length": 5}), {}),
    ):
        path = tmp_path / "r.csv"
        toyrl.save(made, path, force=True, **kwargs)
        loaded = toyrl.load(path)
        pd.testing.assert_frame_equal(loaded, made, check_exact=True)
