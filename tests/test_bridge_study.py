"""The committed bridge study (results/bridge_study.csv, .json, .md; figures/bridge_study.png):
its table and summary agree, recomputed here from the CSV with plain pandas; its summary and
figure are what the script writes from the table; and the words docs/bridge.md says about it
hold. (The numbers themselves need TRL: tests/conformance/test_trl_bridge.py reruns seed 0's
first 32 steps and finds the committed rows.)"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.figures import study_figures
from toyrl.plots import save_figure

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT / "results" / "bridge_study.csv"
META = json.loads((ROOT / "results" / "bridge_study.json").read_text())
DERIVED = META["derived"]
WINDOW = DERIVED["window"]


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return pd.read_csv(CSV)


def series(frame: pd.DataFrame, label: str, source: str, seed: int) -> pd.Series:
    rows = frame[(frame["label"] == label) & (frame["source"] == source) & (frame["seed"] == seed)]
    return rows.set_index("step")["length_incorrect"]


def test_the_table_is_the_one_the_summary_was_made_from(frame: pd.DataFrame) -> None:
    assert hashlib.sha256(CSV.read_bytes()).hexdigest() == META["csv_sha256"]
    assert sorted(set(frame["label"])) == ["dapo", "dr_grpo", "grpo"]
    assert sorted(set(frame["seed"])) == DERIVED["seeds"] == [0, 1, 2]
    assert len(frame) == 3 * 2 * 3 * (DERIVED["last_step"] + 1)
    assert META["settings"] == {
        "grpo": {"loss_type": "grpo", "scale_rewards": "group"},
        "dr_grpo": {"loss_type": "dr_grpo", "scale_rewards": "none"},
        "dapo": {},
    }
    assert (
        META["trl_args"]["dapo"]["loss_type"] == "dapo"
        and META["trl_args"]["dapo"]["scale_rewards"] == "group"
    )


@pytest.mark.parametrize("label", ["grpo", "dapo"])
@pytest.mark.parametrize("step", ["25", "50", "100", "150"])
def test_gaps_recomputed(frame: pd.DataFrame, label: str, step: str) -> None:
    """Per seed: the mean over the WINDOW steps up to `step` of label's E[L | incorrect] less
    dr_grpo's; the mean and SE over seeds."""
    for source in ("network", "toy"):
        per_seed = []
        for seed in DERIVED["seeds"]:
            difference = series(frame, label, source, seed) - series(frame, "dr_grpo", source, seed)
            per_seed.append(difference.loc[int(step) - WINDOW + 1 : int(step)].mean())
        saved = DERIVED["gaps"][label][step][source]
        assert saved["per_seed"] == pytest.approx(per_seed, abs=5e-4)
        assert saved["mean"] == pytest.approx(np.mean(per_seed), abs=5e-4)
        assert saved["se"] == pytest.approx(np.std(per_seed, ddof=1) / np.sqrt(len(per_seed)), abs=5e-4)


def test_grpo_stays_above_dr_grpo_from_early_on_in_every_seed(frame: pd.DataFrame) -> None:
    """The issue's acceptance: GRPO's incorrect length above Dr. GRPO's from step ~30 on in every
    seed (the figure's moving mean of WINDOW steps)."""
    for seed, saved in zip(DERIVED["seeds"], DERIVED["gaps"]["grpo"]["stays_above_from"], strict=True):
        moving = [
            series(frame, label, "network", seed).rolling(WINDOW, min_periods=1).mean()
            for label in ("grpo", "dr_grpo")
        ]
        above = (moving[0] - moving[1]) > 0
        first = next(step for step in above.index if above.loc[step:].all())
        assert first == saved
        assert first <= 30


def test_the_words_of_the_guide_hold(frame: pd.DataFrame) -> None:
    levels, gaps = DERIVED["levels"], DERIVED["gaps"]
    # "none of the others'" were clipped; seeds 1 and 2 of GRPO "unclipped"
    assert levels["dr_grpo"]["network"]["clipped_share"] == levels["dapo"]["network"]["clipped_share"] == 0
    assert [DERIVED["seeds_network"]["grpo"][seed]["clipped_steps"] for seed in ("1", "2")] == [0, 0]
    # TRL's defaults: a drift in the toy beyond 3 SE, none measurable in the network
    toy, network = gaps["dapo"]["150"]["toy"], gaps["dapo"]["150"]["network"]
    assert toy["mean"] > 3 * toy["se"] and abs(network["mean"]) <= 3 * network["se"]
    # GRPO's drift transfers: both beyond 3 SE, the same sign
    for source in ("network", "toy"):
        assert gaps["grpo"]["150"][source]["mean"] > 3 * gaps["grpo"]["150"][source]["se"]
    # "accuracy rises far faster in the network"; GRPO's truncation "stays lower in the network"
    for label in ("grpo", "dr_grpo"):
        assert levels[label]["network"]["accuracy"]["150"] > 1.4 * levels[label]["toy"]["accuracy"]["150"]
    assert levels["grpo"]["network"]["truncated"]["150"] < levels["grpo"]["toy"]["truncated"]["150"]
    # seed 0's breakdown: its incorrect length fell from its peak, other tokens crept in
    seed0 = DERIVED["seeds_network"]["grpo"]["0"]
    assert seed0["last_incorrect"] < seed0["peak_incorrect"] - 10 and seed0["last_off_ramble"] > 0.05


def test_the_summary_and_figure_are_what_the_script_writes(tmp_path: Path) -> None:
    """`--plot-only` from the committed table writes the committed .md and .json, and the figures
    this process draws of the table (the PNG and SVG carry no dates), which show what the committed
    figure does (tests/test_figures.py, on any matplotlib allowed)."""
    results, figures = tmp_path / "results", tmp_path / "figures"
    results.mkdir()
    figures.mkdir()
    for suffix in (".csv", ".json"):
        shutil.copy(CSV.with_suffix(suffix), results)
    command = [sys.executable, str(ROOT / "scripts" / "bridge_study.py"), "--plot-only"]
    subprocess.run([*command, "--out-dir", str(results), "--figures", str(figures)], check=True, cwd=tmp_path)
    for name in ("bridge_study.csv", "bridge_study.json", "bridge_study.md"):
        assert (results / name).read_bytes() == (ROOT / "results" / name).read_bytes(), name
    for kind in ("png", "svg"):
        save_figure(study_figures()["bridge_study"](), tmp_path / f"drawn.{kind}")
        assert (figures / f"bridge_study.{kind}").read_bytes() == (tmp_path / f"drawn.{kind}").read_bytes()
