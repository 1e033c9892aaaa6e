"""Reliability: no silent overwrite, version warnings, and interrupted runs that leave nothing broken."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.results import load_results

from .files import assert_equivalent_results, assert_identical_files, first_difference

TINY = ["--steps", "20", "--prompts", "8", "--batch-prompts", "4", "--seeds", "2", "-q"]


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_results_of_other_settings_are_not_overwritten_without_force(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    assert invoke("run", *TINY, "--out", str(out)).exit_code == 0
    before = (out.read_bytes(), out.with_suffix(".json").read_bytes())
    refused = invoke("run", *TINY, "--lr", "0.05", "--out", str(out))
    assert refused.exit_code == 2 and "holds results made with other settings" in refused.stderr
    assert (out.read_bytes(), out.with_suffix(".json").read_bytes()) == before
    assert invoke("run", *TINY, "--out", str(out)).exit_code == 0  # same settings: replaced
    assert out.read_bytes() == before[0]
    forced = invoke("run", *TINY, "--lr", "0.05", "--out", str(out), "--force")
    assert forced.exit_code == 0 and out.read_bytes() != before[0]


def test_results_of_another_version_warn_and_mismatched_pairs_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    assert invoke("run", *TINY, "--out", str(out)).exit_code == 0
    meta = json.loads(out.with_suffix(".json").read_text())
    out.with_suffix(".json").write_text(json.dumps(meta | {"toyrl_version": "0.0.1"}))
    with pytest.warns(UserWarning, match="made by toyrl 0.0.1"):
        load_results(out)
    plotted = invoke("plot", str(out), "--out", str(tmp_path / "figs"))
    assert plotted.exit_code == 0 and "toyrl: warning:" in plotted.stderr and "0.0.1" in plotted.stderr
    out.write_text(out.read_text().replace("dr_grpo", "grpo", 1))
    broken = invoke("plot", str(out), "--out", str(tmp_path / "figs"))
    assert broken.exit_code == 2 and "does not match r.json" in broken.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_killed_run_leaves_no_broken_file_and_a_rerun_finishes(tmp_path: Path, sig: signal.Signals) -> None:
    args = ["run", "--seeds", "120", "--steps", "400", "-q", "--out", "r.csv"]
    command = [sys.executable, "-c", "from toyrl.cli import main; main()", *args]
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(1.5)  # imports done, simulating
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    if sig != signal.SIGKILL:
        # 130: stopped cleanly; -sig: the signal came before toyrl had started (a slow import).
        assert process.returncode in (130, -sig), stderr
        if process.returncode == 130:
            assert "Traceback" not in stderr and "interrupted" in stderr
        assert list(tmp_path.iterdir()) == []  # nothing written, no temporary file left
    names = {path.name for path in tmp_path.iterdir() if not path.name.startswith(".")}
    assert names in (set(), {"r.csv", "r.json"})  # never one without the other
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    load_results(tmp_path / "r.csv")  # the pair matches
    reference = tmp_path / "reference"
    reference.mkdir()
    subprocess.run(command, cwd=reference, check=True, capture_output=True)
    assert_identical_files(tmp_path / "r.csv", reference / "r.csv")


def test_two_fresh_processes_give_identical_numbers(tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        out = tmp_path / f"r{i}.csv"
        env = os.environ | {"PYTHONHASHSEED": str(i)}
        subprocess.run(
            [sys.executable, "-c", "from toyrl.cli import main; main()", "run", *TINY, "--out", str(out)],
            check=True,
            env=env,
            capture_output=True,
        )
        outs.append(out.read_bytes())
    assert not first_difference(outs[0], outs[1])


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_an_interrupted_reproduce_and_sweep_finish_on_a_rerun(tmp_path: Path, sig: signal.Signals) -> None:
    """At a (seeded) random moment: exit 130, every file on disk whole, and a rerun ends identical."""
    import random

    import pandas as pd

    delay = random.Random(int(sig)).uniform(1.0, 3.0)
    sweep = [
        "sweep",
        "--out-dir",
        "s",
        "--variant",
        "dr_grpo",
        "--grid",
        "lr=0.01,0.015,0.02,0.025",
        "--steps",
        "1500",
    ]
    for args in (["reproduce", "-q"], [*sweep, "-q"]):
        command = [sys.executable, "-c", "from toyrl.cli import main; main()", *args]
        process = subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        time.sleep(delay)
        process.send_signal(sig)
        _, stderr = process.communicate(timeout=120)
        # 130: stopped cleanly; -sig: the signal came before toyrl had started (during imports).
        assert process.returncode in (0, 130, -sig), stderr
        if process.returncode == 130:
            assert "Traceback" not in stderr and "interrupted" in stderr
        for csv in tmp_path.rglob("*.csv"):
            pd.read_csv(csv)  # whole files only
        if sig != signal.SIGKILL:  # nothing can clean up after SIGKILL; a hidden .tmp may remain
            assert not list(tmp_path.rglob(".*.tmp"))  # temporary files removed on the way out
        rerun = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True)
        assert rerun.returncode == 0, rerun.stderr
    assert_equivalent_results(ROOT / "results" / "article.csv", tmp_path / "results" / "article.csv")
    whole = subprocess.run(
        [
            sys.executable,
            "-c",
            "from toyrl.cli import main; main()",
            *[a if a != "s" else "w" for a in sweep],
            "-q",
        ],
        cwd=tmp_path,
        capture_output=True,
    )
    assert whole.returncode == 0
    assert_identical_files(tmp_path / "s" / "results.csv", tmp_path / "w" / "results.csv")


def test_numbers_are_the_same_on_every_worker_count() -> None:
    import pandas as pd

    from toyrl.config import Config
    from toyrl.objective import VARIANTS
    from toyrl.train import run_experiment

    config = Config(steps=30)
    frames = [run_experiment(config, list(VARIANTS.values()), [0, 1, 2], n_jobs=n) for n in (1, 2, -1)]
    for other in frames[1:]:
        pd.testing.assert_frame_equal(frames[0], other, check_exact=True)
