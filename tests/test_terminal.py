"""Output for people: it fits the terminal, says 0 for zero, shows defaults and brackets as written,
reports long steps honestly on stderr, and `toyrl --help` starts without the heavy libraries."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import toyrl.cli.terminal as terminal
import toyrl.progress as progress_module
from toyrl import __version__
from toyrl.cli import app

TINY = ["--steps", "5", "--prompts", "8", "--batch-prompts", "4"]
SMALL_CHECK = ["--steps", "30", "--prompts", "8", "--batch-prompts", "4", "--seeds", "3", "--quiet"]


def invoke(args: list[str], columns: int | None = None) -> tuple[int, str, str]:
    env = {"COLUMNS": str(columns)} if columns else {"COLUMNS": None}
    result = CliRunner().invoke(app, args, env=env)
    return result.exit_code, result.stdout, result.stderr


def commands() -> dict[str, list[str]]:
    """The commands whose output is tables and notes, on tiny budgets (paths relative: short)."""
    return {
        "examples": ["examples"],
        "variants": ["variants"],
        "bias": ["bias"],
        "check": ["check", "--set", "loss_type=grpo", "--set", "scale_rewards=group", *SMALL_CHECK],
        "run": ["run", "--seeds", "2", *TINY, "--out", "r.csv"],
        "sweep": ["sweep", "--out-dir", "s", "--grid", "group_size=4,8", "--seeds", "1", *TINY],
    }


def squeezed(text: str) -> str:
    """The text without its line breaks and indents (a spec broken after its commas joins up)."""
    return re.sub(r"\n\s*", " ", text).replace(", ", ",")


def assert_all_there(narrow: str, whole: str) -> None:
    """Every word and number of the unwrapped output is in the wrapped one (rules under table
    headers are as wide as their columns, so they may differ)."""
    words = set(narrow.split())
    joined = squeezed(narrow)
    missing = [w for w in whole.split() if w not in words and w not in joined and w.strip("-")]
    assert not missing, missing[:10]


@pytest.mark.parametrize("columns", [80, 200])
@pytest.mark.parametrize("name", ["examples", "variants", "bias", "check", "run", "sweep"])
def test_output_fits_the_width_and_keeps_everything(
    name: str, columns: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = commands()[name]
    code, whole, _ = invoke(args)  # no COLUMNS and not a terminal: whole lines, for files and grep
    assert code == 0, whole
    for made in [*tmp_path.glob("r.*"), *tmp_path.glob("s/**/*.*"), tmp_path / "s" / "runs", tmp_path / "s"]:
        made.rmdir() if made.is_dir() else made.unlink(missing_ok=True)  # the same work again
    code, narrow, stderr = invoke(args, columns)
    assert code == 0, narrow
    long = [line for line in (narrow + stderr).splitlines() if len(line) > columns]
    # A word is never split, so a single word longer than the width (a long path) would be the one
    # exception; these commands, run with short paths, have none.
    assert long == [], long
    if columns == 80 and name in ("examples", "variants", "bias"):
        assert any(len(line) > 80 for line in whole.splitlines())  # the test has something to wrap
    assert_all_there(narrow, whole)


def test_a_table_too_wide_is_cut_into_tables_that_repeat_the_first_column() -> None:
    code, narrow, _ = invoke(["examples", "length"], 80)
    assert code == 0
    tables = [block for block in narrow.split("\n\n") if "----" in block]
    assert len(tables) == 2
    for table in tables:
        assert [line.split()[0] for line in table.splitlines()[-3:]] == ["correct", "wrong", "wrong"]
    assert "GRPO weight/token" in tables[0] and "Dr. GRPO weight/token" in tables[1]
    for cell in ("0.00866025", "-0.000721688", "0.000375", "-0.025"):  # numbers are never cut
        assert cell in narrow


def test_format_table_wraps_headers_before_it_cuts_tables() -> None:
    from toyrl.cli.terminal import format_table

    rows = [["name", "a long header of words", "another long header"], ["x", "1.5", "-2"]]
    assert format_table(rows) == format_table(rows, width=200)  # fits: the table as ever
    narrow = format_table(rows, width=40)
    assert max(map(len, narrow.splitlines())) <= 40 and len(narrow.splitlines()) > 3
    assert narrow.splitlines()[-1].split() == ["x", "1.5", "-2"]  # one table, headers wrapped
    wide = [["key", *[f"column {i}" for i in range(12)]], ["k", *[f"{i}.123456" for i in range(12)]]]
    cut = format_table(wide, width=80)
    assert len(cut.split("\n\n")) == 2 and max(map(len, cut.splitlines())) <= 80
    assert all(block.splitlines()[-1].startswith("k ") for block in cut.split("\n\n"))


def test_numbers_within_1e_15_of_zero_print_as_0() -> None:
    number = terminal.number
    assert number(-7.5e-21) == "0" and number(6.5e-33) == "0" and number(-0.0) == "0"
    assert number(2e-15) == "2e-15" and number(-0.0021619) == "-0.0021619"
    code, text, _ = invoke(["bias"])
    assert code == 0
    names = ("GRPO without length division", "Dr. GRPO")  # std_only's and dr_grpo's display names
    rows = {
        name: line[len(name) :].split()
        for line in text.splitlines()
        for name in names
        if line.startswith(name)
    }
    assert rows[names[0]][-3:] == ["0", "0", "0"] and rows[names[1]][-3:] == ["0", "0", "0"]
    assert not re.search(r"e-(1[6-9]|[2-9]\d)\b", text)
    code, data, _ = invoke(["bias", "--json"])  # machine-readable output keeps the computed values
    dr = next(row for row in json.loads(data)["variants"] if row["variant"] == "dr_grpo")
    assert 0 < abs(dr["phi_wrong"]) < 1e-15


def test_help_renders_brackets_and_defaults_as_people_write_them() -> None:
    _, run_help, _ = invoke(["run", "--help"], 80)
    assert "[default: 1/300]" in run_help and "[default: 1/700]" in run_help
    assert "[default: 0 (the cap)]" in run_help and "0.0033" not in run_help and "0.0014" not in run_help
    assert "|o_i|" in run_help and "--no-count-approach-token" in run_help  # not split at its hyphens
    _, sweep_help, _ = invoke(["sweep", "--help"], 80)
    assert "'.[dask]'" in sweep_help
    _, bias_help, _ = invoke(["bias", "--help"], 80)
    assert "E[g]" in bias_help
    for command in [
        "",
        "run",
        "reproduce",
        "plot",
        "explore",
        "bias",
        "sweep",
        "variants",
        "check",
        "examples",
    ]:
        _, text, _ = invoke([*command.split(), "--help"], 80)
        assert max(map(len, text.splitlines())) <= 80, command
    _, top, _ = invoke(["--help"], 80)
    assert "..." not in top.split("Commands:")[1]  # each command's summary whole


def test_version() -> None:
    code, text, _ = invoke(["--version"])
    assert code == 0 and text == f"toyrl {__version__}\n"


def test_a_single_worker_run_reports_progress_while_it_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(progress_module, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(progress_module, "PROGRESS_EVERY_LOGGED", 0.05)
    seen: list[float] = []
    real = progress_module.Progress.update
    waits = [0.25, 0.5, 0.75]  # shares of the run at which it waits for a status, as a slow run would

    def watched(
        self: progress_module.Progress, done: float, total: float | None = None, base: float = 0.0
    ) -> None:
        seen.append(done)
        real(self, done, total, base)
        phase = self._phase
        if phase is not None and phase.total and waits and done >= waits[0] * phase.total:
            waits.pop(0)
            shown = phase.last
            deadline = time.monotonic() + 60  # a hang guard only
            while phase.last == shown and time.monotonic() < deadline:
                time.sleep(0.01)

    monkeypatch.setattr(progress_module.Progress, "update", watched)
    code, stdout, stderr = invoke(
        ["run", "--seeds", "8", "--steps", "1000", "--n-jobs", "1", "--out", str(tmp_path / "r.csv")]
    )
    assert code == 0, stdout
    lines = stderr.splitlines()
    statuses = [line for line in lines if line.startswith("toyrl run: simulating 32 runs: ")]
    assert len(statuses) >= 3, stderr  # while it ran (at the three waits at least), not only at the end
    percents = [int(m.group(1)) for line in statuses if (m := re.search(r": (\d+)%", line))]
    assert percents == sorted(percents) and percents and percents[0] < 100
    assert len(seen) > 1000  # every step of the one chunk is reported
    assert "? left" not in stderr and "0.0 s left" not in stderr and "~" not in stderr
    assert any("done in" in line for line in lines)
    summary = next(line for line in lines if line.startswith("toyrl run: 32 runs x 1,001 steps"))
    assert "simulated in" in summary and "written in" in summary
    assert stdout.rstrip().endswith(f"wrote {tmp_path / 'r.csv'} and {tmp_path / 'r.json'}")


def test_quiet_prints_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_module, "PROGRESS_AFTER", 0.0)
    result = CliRunner().invoke(
        app, ["run", "-q", "--seeds", "4", "--steps", "100", "--out", str(tmp_path / "r.csv")]
    )
    assert result.exit_code == 0 and result.stdout == "" and result.stderr == ""


def test_a_step_is_estimated_only_once_measured() -> None:
    phase = progress_module._Phase("simulating", 100, "runs")
    phase.started -= 5
    now = time.perf_counter()
    assert phase.status(now).startswith("simulating: estimating... (5.0 s so far)")
    phase.done = 25
    assert re.fullmatch(r"simulating: 25% of 100 runs, 5\.0 s, about 15 s left", phase.status(now)), (
        phase.status(now)
    )
    phase.done = 99.99
    assert "under 1 s left" in phase.status(now)
    phase.done = 100
    assert phase.status(now) == "simulating: all 100 runs done, finishing (5.0 s so far)"
    resumed = progress_module._Phase("running", 10, "runs")
    resumed.done = resumed.base = 6  # done before this command: no measurement yet
    assert "estimating" in resumed.status(time.perf_counter())
    unknown = progress_module._Phase("rendering the figures", None, "")
    assert unknown.status(unknown.started + 3.2) == "rendering the figures... 3.2 s so far"
    assert [progress_module.duration(t) for t in (0.42, 7.34, 42.4, 754, 5500)] == [
        "0.42 s",
        "7.3 s",
        "42 s",
        "13 min",
        "1.5 h",
    ]


def test_wrapping_follows_columns_and_leaves_files_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    assert terminal.output_width() == 80  # never narrower than 80
    monkeypatch.setenv("COLUMNS", "132")
    assert terminal.output_width() == 132
    monkeypatch.delenv("COLUMNS")
    assert terminal.output_width() is None  # stdout is not a terminal here
    assert terminal.wrap("a " * 60, None) == "a " * 60
    spec = "advantage=group_std_sample,aggregation=token_mean,reward=soft_overlong,sampler=filter_groups"
    broken = terminal.wrap_list(spec, 40, "    ", "        ")
    assert all(len(line) <= 40 for line in broken.splitlines())
    assert "".join(line.strip() for line in broken.splitlines()) == spec


HEAVY = ("numpy", "pandas", "scipy", "matplotlib", "joblib", "rich", "pydantic")


def modules_after(args: list[str], cwd: Path) -> set[str]:
    """The top-level modules a fresh `toyrl ARGS` process has imported by its end."""
    code = (
        "import sys\nfrom toyrl.cli import main\nsys.argv = ['toyrl', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted({name.split('.')[0] for name in sys.modules})), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, capture_output=True, text=True, env=env
    )
    return set(done.stderr.split()[-400:])


def test_help_imports_none_of_the_heavy_libraries(tmp_path: Path) -> None:
    loaded = modules_after(["--help"], tmp_path)
    assert "typer" in loaded and "toyrl" in loaded
    assert not loaded & set(HEAVY), loaded & set(HEAVY)
    assert not modules_after(["run", "--help"], tmp_path) & set(HEAVY)


def test_a_run_on_one_worker_imports_numpy_and_nothing_heavier(tmp_path: Path) -> None:
    loaded = modules_after(["run", "-q", "--seeds", "2", *TINY, "--out", str(tmp_path / "r.csv")], tmp_path)
    assert (tmp_path / "r.csv").exists() and "numpy" in loaded
    assert not loaded & {"pandas", "scipy", "matplotlib", "joblib", "rich", "pydantic"}
