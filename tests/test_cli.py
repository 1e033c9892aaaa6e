"""`toyrl run` end to end on tiny budgets, and bad input answered with one line and exit 2."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from toyrl import __version__
from toyrl.cli import app
from toyrl.config import Config

TINY = ["--steps", "5", "--prompts", "8", "--batch-prompts", "4"]


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_run_writes_results_sidecar_and_summary(tmp_path: Path) -> None:
    out = tmp_path / "res.csv"
    code, stdout, _ = invoke(
        "run",
        "--variant",
        "dr_grpo",
        "--variant",
        "grpo",
        "--seeds",
        "2",
        "--seed-start",
        "5",
        *TINY,
        "--out",
        str(out),
    )
    assert code == 0
    frame = pd.read_csv(out)
    assert len(frame) == 2 * 2 * 6
    assert set(frame.variant) == {"grpo", "dr_grpo"} and set(frame.seed) == {5, 6}
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["toyrl_version"] == __version__
    assert Config.from_dict(meta["config"]) == Config(steps=5, prompts=8, batch_prompts=4)
    assert meta["seeds"] == [5, 6] and list(meta["variants"]) == ["dr_grpo", "grpo"]
    grpo = {"advantage": "group_std", "aggregation": "seq_mean_token_mean"}
    assert meta["variants"]["grpo"]["spec"] == grpo
    assert set(meta["variants"]["grpo"]) == {"spec", "summary", "stands_for"}
    assert meta["mean_field"] is False and "exact" not in meta
    assert set(meta["columns"]) == set(frame.columns)
    lines = stdout.splitlines()
    assert "Final step (5), exact expectations, mean ± sd over 2 seeds:" in lines
    assert any(line.startswith("GRPO ") and " ± " in line for line in lines)  # display names
    assert any(line.startswith("Dr. GRPO ") for line in lines)
    assert "names in commands: Dr. GRPO = dr_grpo, GRPO = grpo" in lines
    assert "Paired differences from Dr. GRPO: too few seeds for an interval (2; at least 3)" in lines


def test_run_gives_paired_differences_with_intervals(tmp_path: Path) -> None:
    """Three seeds: the differences from Dr. GRPO (in the run, not first) with their 95% intervals."""
    out = tmp_path / "res.csv"
    code, stdout, _ = invoke(
        "run", "--variant", "grpo", "--variant", "dr_grpo", "--seeds", "3", *TINY, "--out", str(out)
    )
    assert code == 0, stdout
    heading = stdout.split("Paired differences from Dr. GRPO (the article's fix;", 1)[1]
    assert "the 95% CI in parentheses (percentile bootstrap over 3 seeds):" in " ".join(heading.split())
    (row,) = [line for line in stdout.splitlines() if line.startswith("GRPO ") and " to " in line]
    frame = pd.read_csv(out)
    last = frame[frame.step == 5].set_index(["variant", "seed"])["length_incorrect"]
    differences = last["grpo"] - last["dr_grpo"]
    # each cell is the mean difference and an interval within the range of the seeds' differences
    cells = [cell for cell in row.split("  ") if " to " in cell]
    mean, low, high = (
        float(x) for x in cells[1].replace("(", "").replace(")", "").replace(" to ", " ").split()
    )
    assert mean == round(differences.mean())
    assert round(differences.min()) <= low <= mean <= high <= round(differences.max())


def test_run_as_the_issue_writes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code, stdout, _ = invoke("run", "--variant", "dr_grpo", "--seeds", "6")
    assert code == 0, stdout
    frame = pd.read_csv(tmp_path / "toyrl-run_dr_grpo.csv")  # named by its variant
    assert frame.groupby("seed").step.max().eq(400).all() and frame.seed.nunique() == 6
    assert (tmp_path / "toyrl-run_dr_grpo.json").exists()


def test_all_runs_the_four_and_one_seed_has_no_spread(tmp_path: Path) -> None:
    out = tmp_path / "all.csv"
    code, stdout, _ = invoke("run", "--variant", "all", "--seeds", "1", *TINY, "--out", str(out))
    assert code == 0
    assert list(dict.fromkeys(pd.read_csv(out).variant)) == ["grpo", "std_only", "length_only", "dr_grpo"]
    lines = stdout.splitlines()
    assert lines[0] == "Final step (5), exact expectations, 1 seed (no sd):"
    table = lines[3:7]
    names = ["GRPO", "GRPO without length division", "GRPO without std division", "Dr. GRPO"]
    assert [line[: len(name) + 2].strip() for line, name in zip(table, names, strict=True)] == names
    assert not any("±" in line for line in table)
    assert "Paired differences from Dr. GRPO: too few seeds for an interval (1; at least 3)" in lines


BAD = [
    (["--variant", "drgrpo"], "unknown variant 'drgrpo' (did you mean 'dr_grpo'?); valid: grpo, std_only"),
    (["--variant", "advantage=median"], "advantage must be one of group_std, group_std_sample"),
    (["--group-size", "1"], "--group-size must be an integer in 2..10,000 (got 1)"),
    (["--batch-prompts", "65"], "--batch-prompts must be at most prompts = 64 (got 65)"),
    (["--cap", "99"], "--cap must be at least min_length = 100 (got 99)"),
    (["--steps", "0"], "--steps must be an integer in 1..10,000,000 (got 0)"),
    (["--steps", "-3"], "--steps must be an integer in 1..10,000,000 (got -3)"),
    (["--seeds", "0"], "--seeds must be an integer in 1..1,000,000 (got 0)"),
    (
        ["--seed-start", "-1"],
        "--seed-start must be an integer in 0..9,223,372,036,854,775,802 with --seeds 6: the last seed, "
        "S+N-1, must fit in int64 (at most 9,223,372,036,854,775,807) (got -1)",
    ),
    (["--lr", "0"], "--lr must be a finite number > 0 (got 0.0)"),
    (["--lr", "-0.1"], "--lr must be a finite number > 0 (got -0.1)"),
    (["--lr", "nan"], "--lr must be a finite number > 0 (got nan)"),
    (["--stop-prob-wrong", "1"], "--stop-prob-wrong must be a finite number > 0 and < 1 (got 1.0)"),
    (["--n-jobs", "0"], "--n-jobs must be -1 (all cores) or an integer >= 1 (got 0)"),
    (["--seeds", "six"], "Invalid value for '--seeds'"),
    (["--no-such-option"], "No such option: --no-such-option"),
    (["--out", "results.txt"], "--out must be a path ending in .csv (got 'results.txt')"),
]


@pytest.mark.parametrize(("args", "message"), BAD)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = invoke("run", *args)
    assert code == 2
    assert stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("toyrl: error: ")
    assert message in stderr
    assert list(tmp_path.iterdir()) == []


def test_output_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    code, _, stderr = invoke("run", "--out", str(tmp_path / "missing" / "r.csv"))
    assert code == 2 and "does not exist" in stderr


def test_bad_input_leaves_earlier_results_untouched(tmp_path: Path) -> None:
    out = tmp_path / "keep.csv"
    assert invoke("run", "--seeds", "1", *TINY, "--out", str(out))[0] == 0
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    assert invoke("run", "--seeds", "1", *TINY, "--group-size", "1", "--out", str(out))[0] == 2
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before


def test_console_script_prints_no_traceback(tmp_path: Path) -> None:
    """The installed command, in a fresh process: one line on stderr, exit 2."""
    command = [sys.executable, "-c", "from toyrl.cli import main; main()", "run", "--group-size", "1"]
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=tmp_path, env=os.environ | {"COLUMNS": "80"}
    )
    assert result.returncode == 2
    assert result.stderr == "toyrl: error: --group-size must be an integer in 2..10,000 (got 1)\n"
    assert list(tmp_path.iterdir()) == []


def test_the_wheel_lists_every_subpackage() -> None:
    """pyproject.toml names the packages a `pip install .` copies: every folder of toyrl/ with an
    __init__.py must be one of them, or an installed `toyrl check` cannot import toyrl.trainers."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    section = (root / "pyproject.toml").read_text().split("[tool.setuptools]", 1)[1]
    listed = set(re.findall(r'"([\w.]+)"', re.search(r"packages = \[(.*?)\]", section).group(1)))
    found = {".".join(init.parent.relative_to(root).parts) for init in (root / "toyrl").rglob("__init__.py")}
    assert found == listed


@pytest.mark.parametrize(
    ("option", "text", "value"),
    [
        ("--seeds", " +2 ", 2),
        ("--seeds", "2.0", 2),
        ("--steps", "1_0", 10),
        ("--lr", "5e-2", 0.05),
        ("--lr", " 0.05", 0.05),
    ],
)
def test_numbers_are_read_as_typer_reads_them(option: str, text: str, value: float, tmp_path: Path) -> None:
    """Options are read without pydantic (toyrl.cli.options._PlainValue), with typer's own rules."""
    out = tmp_path / "r.csv"
    args = ["run", "--seeds", "1", "--steps", "3", "--prompts", "8", "--batch-prompts", "4", "-q"]
    code, _, stderr = invoke(*args, "--out", str(out), option, text)
    assert code == 0, stderr
    meta = json.loads(out.with_suffix(".json").read_text())
    recorded = len(meta["seeds"]) if option == "--seeds" else meta["config"][option[2:]]
    assert recorded == value


def test_plot_draws_the_slides_style(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    assert invoke("run", "--variant", "grpo", "--seeds", "2", *TINY, "-q", "--out", str(out))[0] == 0
    code, stdout, stderr = invoke("plot", str(out), "--style", "slides", "--out", str(tmp_path / "slides"))
    assert code == 0, stderr
    drawn = sorted(path.name for path in (tmp_path / "slides").iterdir())
    assert "final_numbers.md" in drawn and any(name.endswith(".svg") for name in drawn)
    assert stdout.startswith("wrote ") and str(tmp_path / "slides" / "final_numbers.md") in stdout
    assert "toyrl plot: " in stderr


def test_toyrl_run_checks_each_variant_once_at_the_edge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation happens once, where the command reads its input: no layer below checks again."""
    import toyrl.experiment
    import toyrl.train

    checked: list[str] = []
    original = toyrl.train.check_variant

    def counting(variant: Any, config: Any) -> None:
        checked.append(variant.name)
        original(variant, config)

    monkeypatch.setattr(toyrl.experiment, "check_variant", counting)
    monkeypatch.setattr(toyrl.train, "check_variant", counting)
    out = tmp_path / "runs.csv"
    args = ["run", "--variant", "grpo", "--variant", "dr_grpo", "--seeds", "3", "--steps", "2", "-q"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert checked == ["grpo", "dr_grpo"] and out.is_file()
