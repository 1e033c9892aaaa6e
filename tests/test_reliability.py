"""Reliability: no silent overwrite, version warnings, and interrupted runs that leave nothing broken."""

import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.results import load_results

from .files import assert_identical_files, first_difference
from .output import error_line

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


def interruptible(command: list[str], cwd: Path) -> subprocess.Popen[str]:
    """`command` started in `cwd` with SIGINT's default action, as from a terminal: a pytest-xdist
    worker ignores SIGINT and a child inherits that, so Python would not install its handler, and
    a ^C sent before toyrl sets its own would be lost (the run would finish with 0)."""
    return subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


SWALLOWED = """
import signal, time
from toyrl.cli import app, main

@app.command("swallow")
def swallow() -> None:
    try:  # a C extension that clears the KeyboardInterrupt and sets its own error (matplotlib's agg)
        signal.raise_signal(signal.{name})
        time.sleep(5)
    except KeyboardInterrupt:
        pass
    raise ValueError("Invalid bounding box")

main()
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=lambda s: s.name)
def test_an_error_that_replaces_the_interruption_still_ends_as_one(sig: signal.Signals) -> None:
    """The signal is noted before KeyboardInterrupt is raised, so whatever unwinds after it is an
    interruption: exit 130 and one line, not a traceback (seen once in CI, from matplotlib)."""
    script = SWALLOWED.format(name=sig.name)
    process = interruptible([sys.executable, "-c", script, "swallow"], Path.cwd())
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert stderr == "toyrl: interrupted\n"


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_a_killed_run_leaves_no_broken_file_and_a_rerun_finishes(tmp_path: Path, sig: signal.Signals) -> None:
    args = ["run", "--seeds", "60", "--steps", "400", "-q", "--out", "r.csv"]
    command = [sys.executable, "-c", "from toyrl.cli import main; main()", *args]
    process = interruptible(command, tmp_path)
    time.sleep(1.5)  # imports done, simulating
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=60)
    if sig != signal.SIGKILL:
        # 130: stopped cleanly; -sig: the signal came before toyrl had started (a slow import).
        assert process.returncode in (130, -sig), stderr
        if process.returncode == 130:
            assert "Traceback" not in stderr and "interrupted" in stderr
        left = sorted(path.name for path in tmp_path.iterdir())
        assert left == [], (process.returncode, left, stderr)  # nothing written, no temporary file left
    names = {path.name for path in tmp_path.iterdir() if not path.name.startswith(".")}
    assert names in (set(), {"r.csv", "r.json"}), (names, stderr)  # never one without the other
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


@pytest.mark.slow
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
        process = interruptible(command, tmp_path)
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
    assert_identical_files(ROOT / "results" / "article.csv", tmp_path / "results" / "article.csv")
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
    from toyrl.experiment import run_experiment
    from toyrl.variants import article_variants

    config = Config(steps=30)
    frames = [run_experiment(config, article_variants(), [0, 1, 2], n_jobs=n) for n in (1, 2, -1)]
    for other in frames[1:]:
        pd.testing.assert_frame_equal(frames[0], other, check_exact=True)


def test_a_failed_write_leaves_the_previous_pair_intact_and_no_orphan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk or a read-only file at any point: the old CSV and sidecar stay as they were."""
    import toyrl.files as files

    out = tmp_path / "r.csv"
    assert invoke("run", *TINY, "--out", str(out)).exit_code == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real_fill, real_replace = files._fill, os.replace
    calls = {"copy": 0, "replace": 0}

    def full_disk_on_the_sidecar(temporary: Path, path: Path, data: object) -> None:
        calls["copy"] += 1
        if path.suffix == ".json":
            raise files.InvalidInput(f"cannot write {path}: No space left on device")
        real_fill(temporary, path, data)  # type: ignore[arg-type]

    monkeypatch.setattr(files, "_fill", full_disk_on_the_sidecar)
    failed = invoke("run", *TINY, "--lr", "0.05", "--force", "--out", str(out))
    assert failed.exit_code == 2 and "No space left on device" in failed.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing replaced, no temp
    monkeypatch.setattr(files, "_fill", real_fill)

    def second_rename_fails(source: str, target: str) -> None:
        calls["replace"] += 1
        if str(target).endswith(".json"):
            raise OSError(30, "Read-only file system")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", second_rename_fails)
    failed = invoke("run", *TINY, "--lr", "0.05", "--force", "--out", str(out))
    assert failed.exit_code == 2 and "Read-only file system" in failed.stderr
    monkeypatch.setattr(os, "replace", real_replace)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # the CSV was put back
    load_results(out)
    fresh = tmp_path / "fresh.csv"
    monkeypatch.setattr(files, "_fill", full_disk_on_the_sidecar)
    assert invoke("run", *TINY, "--out", str(fresh)).exit_code == 2
    assert {p.name for p in tmp_path.iterdir()} == set(before)  # no orphan sidecar or CSV
    assert calls["copy"] >= 3 and calls["replace"] >= 2


@pytest.mark.slow
def test_a_second_writer_of_the_same_results_is_refused_at_once(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    command = [sys.executable, "-c", "from toyrl.cli import main; main()", "run", "-q", "--out", str(out)]
    first = subprocess.Popen([*command, "--seeds", "60"], stderr=subprocess.PIPE, text=True)
    lock = tmp_path / ".r.csv.lock"
    deadline = time.monotonic() + 120  # a hang guard: imports are slow on a loaded machine
    while not lock.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lock.exists(), "the first run never started writing"
    second = subprocess.run([*command, "--lr", "0.05", "--seeds", "1"], capture_output=True, text=True)
    _, first_stderr = first.communicate(timeout=240)
    assert first.returncode == 0, first_stderr
    assert second.returncode == 2 and second.stderr.count("\n") == 1
    assert "another toyrl command is writing results" in second.stderr
    _, meta = load_results(out)
    assert meta is not None and meta["config"]["lr"] == 0.02 and len(meta["seeds"]) == 60
    assert not lock.exists()  # released and removed


def test_workers_end_with_a_killed_parent(tmp_path: Path) -> None:
    """SIGKILL cannot be handled by the parent; its joblib workers notice and exit by themselves."""
    psutil = pytest.importorskip("psutil")
    command = [sys.executable, "-c", "from toyrl.cli import main; main()", "run", "--seeds", "3000"]
    parent = subprocess.Popen(
        [*command, "--n-jobs", "2", "-q", "--out", str(tmp_path / "r.csv")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process = psutil.Process(parent.pid)
    deadline = time.monotonic() + 60
    while len(process.children(recursive=True)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    workers = process.children(recursive=True)
    assert len(workers) >= 2
    time.sleep(1.0)  # the workers are computing
    parent.kill()
    parent.wait(timeout=10)
    _, alive = psutil.wait_procs(workers, timeout=120)  # a hang guard: a loaded machine is slow to end them
    assert not alive, [w.pid for w in alive]
    assert parent.stdout is not None and parent.stdout.read() == b""  # the pipe closed: nobody holds it


def test_running_out_of_memory_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import toyrl.cli.commands

    def no_memory(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr(toyrl.cli.commands, "run_experiment", no_memory)
    result = invoke("run", *TINY, "--out", str(tmp_path / "r.csv"))
    assert result.exit_code == 2 and result.stderr.startswith("toyrl: error: out of memory")
    assert result.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []


def test_results_written_in_pieces_are_the_bytes_of_one_piece(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import toyrl.results as results
    from toyrl.config import Config
    from toyrl.experiment import run_experiment
    from toyrl.variants import ARTICLE

    config = Config(steps=12, prompts=8, batch_prompts=4)
    frame = run_experiment(config, list(ARTICLE), [0, 1])
    meta = {
        "toyrl_version": results.__version__,
        "arithmetic": results.ARITHMETIC,
        "config": config.to_dict(),  # the one that made the frame: load checks it against step 0
    }
    results.save_results(frame, tmp_path / "whole.csv", meta)
    monkeypatch.setattr(results, "CSV_ROWS_PER_WRITE", 7)
    results.save_results(frame, tmp_path / "pieces.csv", meta)
    assert_identical_files(tmp_path / "whole.csv", tmp_path / "pieces.csv")
    assert (tmp_path / "whole.csv").read_bytes() == frame.to_csv(index=False, lineterminator="\n").encode()
    digests = {json.loads((tmp_path / f"{n}.json").read_text())["csv_sha256"] for n in ("whole", "pieces")}
    assert len(digests) == 1
    load_results(tmp_path / "pieces.csv")  # the digest matches the file


def test_the_worker_count_is_bounded_by_the_cores_and_the_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """--n-jobs 1000 must not start a thousand processes (a red-team found 721 of them)."""
    import toyrl.experiment as experiment
    from toyrl.config import Config

    from .test_parallel_figures import counted_parallel

    asked = counted_parallel(monkeypatch)
    monkeypatch.setattr(experiment.os, "cpu_count", lambda: 2)
    config = Config(steps=3, prompts=8, batch_prompts=4)
    many = experiment.run_experiment(config, ["grpo", "dr_grpo"], [0, 1, 2], n_jobs=1000)
    assert asked == [2]
    monkeypatch.setattr(experiment.os, "cpu_count", lambda: 64)
    experiment.run_experiment(config, ["grpo"], [0, 1, 2], n_jobs=1000)
    assert asked == [2, 3]  # three runs: three workers, not 64 or 1000
    import pandas as pd

    pd.testing.assert_frame_equal(many, experiment.run_experiment(config, ["grpo", "dr_grpo"], [0, 1, 2]))


def test_a_big_run_says_up_front_what_it_will_take(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import toyrl.cli.commands

    def stop(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt  # no need to run it: the estimate comes first

    monkeypatch.setattr(toyrl.cli.commands, "run_experiment", stop)
    big = invoke("run", "--seeds", "1000", "--out", str(tmp_path / "r.csv"))
    first = big.stderr.splitlines()[0]
    assert (
        first.startswith("toyrl run: 4,000 runs x 401 steps: roughly ")
        and "MB for the results table" in first
    )
    monkeypatch.undo()
    small = invoke("run", *TINY, "--out", str(tmp_path / "s.csv"))
    assert small.exit_code == 0 and "roughly" not in small.stderr


def test_the_estimate_counts_a_samplers_worst_case_rounds(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import toyrl.cli.commands

    def stop(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(toyrl.cli.commands, "run_experiment", stop)
    # one prompt a round among 1,000 that never fill a batch (min_length = cap): about 1,000 rounds a step
    refilling = "advantage=none,sampler=filter_groups,max_rounds=1000,round_prompts=1"
    args = ["--prompts", "1000", "--batch-prompts", "1", "--min-length", "1500", "--seeds", "1"]
    slow = invoke("run", *args, "--variant", refilling, "--out", str(tmp_path / "r.csv"))
    assert slow.stderr.startswith("toyrl run: 1 runs x 401 steps: roughly ")
    seconds = float(slow.stderr.split("roughly ")[1].split(" s")[0].replace(",", ""))
    assert 40 < seconds < 400  # 401 steps of about 1,000 rounds at 200 us
    once = invoke("run", *args, "--variant", "advantage=none", "--out", str(tmp_path / "r.csv"))
    assert "roughly" not in once.stderr


def test_the_refill_loop_is_bounded_by_numpy_not_by_prompts_squared() -> None:
    from toyrl.config import Config
    from toyrl.stages import FilterGroups

    config = Config(prompts=1000, batch_prompts=1, min_length=1500)
    sampler = FilterGroups(max_rounds=1000, round_prompts=1)
    assert sampler.refills(config) == 999
    # B x G, then rounds of 1 prompt's G responses and the uniforms ordering the 999, 998, ... left
    assert sampler.worst_draws(config) == 8 + 999 * 8 + 999 * 1000 // 2


def test_a_sidecar_that_is_not_an_object_is_refused_or_replaced_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    assert invoke("run", *TINY, "--out", str(out)).exit_code == 0
    out.with_suffix(".json").write_text("[1, 2]")
    refused = invoke("run", *TINY, "--out", str(out))
    assert refused.exit_code == 2 and "holds results made with other settings" in refused.stderr
    assert invoke("run", *TINY, "--out", str(out), "--force").exit_code == 0  # replaced, no traceback
    load_results(out)


# --- one parser per kind of value ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("true", True), ("False", False), ("1", True), ("0", False), (" TRUE ", True), ("false", False)],
)
def test_a_boolean_reads_the_same_in_a_spec_a_grid_and_a_trainer_setting(text: str, value: bool) -> None:
    from toyrl.config import Config
    from toyrl.objective import parse_spec
    from toyrl.sweep import parse_grid
    from toyrl.trainers import Setting

    assert parse_grid([f"count_approach_token={text}"], Config()) == {"count_approach_token": [value]}
    assert parse_spec(f"advantage=none,per_micro_batch={text}").normaliser.per_micro_batch is value
    assert (parse_spec(f"mask_truncated={text}").names()["selector"] == "stopped") is value
    assert Setting(False, kind=bool).parse("enable", text) is value


@pytest.mark.parametrize("text", ["no", "yes", "off", "on", "", "2", "truthy", "None"])
def test_a_boolean_in_any_other_spelling_is_refused_everywhere(text: str) -> None:
    from toyrl.config import Config, InvalidInput
    from toyrl.objective import parse_spec
    from toyrl.sweep import parse_grid
    from toyrl.trainers import Setting

    for read in (
        lambda: parse_grid([f"count_approach_token=true,{text}"], Config()),
        lambda: parse_spec(f"advantage=none,per_micro_batch={text}"),
        lambda: parse_spec(f"mask_truncated={text}"),
        lambda: Setting(False, kind=bool).parse("enable", text),
    ):
        with pytest.raises(InvalidInput, match="true or false"):
            read()


def test_a_sweep_over_count_approach_token_false_runs_false(tmp_path: Path) -> None:
    small = ["--steps", "2", "--prompts", "4", "--batch-prompts", "2", "--group-size", "2", "--seeds", "1"]
    result = invoke(
        "sweep", *small, "--variant", "grpo", "--grid", "count_approach_token=false,1", "-q",
        "--out-dir", str(tmp_path / "sw"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    grid = json.loads((tmp_path / "sw" / "sweep.json").read_text())["grid"]
    assert grid == {"count_approach_token": [False, True]}


def test_minus_zero_and_zero_are_one_variant() -> None:
    from toyrl.variants import parse_variant

    negative = parse_variant("aggregation=length_power,alpha=-0.0")
    assert negative == parse_variant("aggregation=length_power,alpha=0")
    assert negative.name == "advantage=none,aggregation=length_power,alpha=0.0"


def _spec_parts() -> Any:
    from hypothesis import strategies as st

    from toyrl.objective import KIND_KEYS, spec_keys
    from toyrl.stages import REGISTRY

    names = [name for registered in REGISTRY.values() for name in registered]
    values = st.one_of(
        st.sampled_from(names),
        st.sampled_from(["true", "false", "0", "1", "no", "-0.0", "0.5", "1e400", "nan", "-1", "4", "x", ""]),
        st.integers(-5, 70).map(str),
        st.text(max_size=4),
    )
    keys = st.one_of(st.sampled_from([*spec_keys(), "eps", *KIND_KEYS]), st.text(max_size=5))
    return st.lists(st.tuples(keys, values), min_size=1, max_size=5)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=_spec_parts())
@example(parts=[("A", "gr3")])  # a label on a preset: named by the label, its spec text by itself
def test_a_spec_is_a_variant_or_one_line_of_invalid_input(parts: list[tuple[str, str]]) -> None:
    from toyrl.config import InvalidInput
    from toyrl.variants import parse_variant

    text = ",".join(f"{key}={value}" for key, value in parts)
    try:
        variant = parse_variant(text)
    except InvalidInput as error:
        assert "\n" not in str(error) and str(error)
    else:
        # it round-trips: its spec text is the same variant (named by that text, where `text` may
        # have given a label or named a preset: `A=gr3`)
        again = parse_variant(variant.spec_text())
        assert again.spec() == variant.spec() and again.name == variant.spec_text()
        if variant.name == variant.spec_text():  # unlabelled: the whole variant comes back
            assert again == variant


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=_spec_parts())
def test_the_cli_on_any_spec_exits_0_or_2_without_a_traceback(tmp_path_factory: Any, parts: Any) -> None:
    text = ",".join(f"{key}={value}" for key, value in parts)
    out = tmp_path_factory.mktemp("spec") / "r.csv"
    tiny = ["--steps", "1", "--prompts", "4", "--batch-prompts", "2", "--group-size", "2", "--seeds", "1"]
    result = invoke("run", *tiny, "--variant", text, "-q", "--out", str(out))
    assert result.exit_code in (0, 2), (text, result.output)
    assert "Traceback" not in result.stderr
    if result.exit_code == 2:
        assert result.stderr.startswith("toyrl: error: ") and result.stderr.count("\n") == 1


# --- divergence is one line, not NaN ---------------------------------------------------------

KL_VARIANT = "advantage=none,aggregation=seq_mean_token_sum_norm,beta=0.1"


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_run_that_leaves_finite_numbers_stops_in_one_line_and_keeps_the_old_results(
    tmp_path: Path, jobs: str
) -> None:
    out = tmp_path / "r.csv"
    assert invoke("run", *TINY, "--variant", KL_VARIANT, "--out", str(out)).exit_code == 0
    before = (out.read_bytes(), out.with_suffix(".json").read_bytes())
    command = [
        sys.executable,
        "-c",
        "from toyrl.cli import main; main()",
        "run",
        *TINY,
        "--variant",
        KL_VARIANT,
        "--lr",
        "1000",
    ]
    result = subprocess.run(
        [*command, "--n-jobs", jobs, "--out", str(out), "--force"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr  # no warnings flood, no traceback
    # seed 0's divergence, as one worker meets it first, even when seed 1's worker fails first
    assert f"variant {KL_VARIANT}, seed 0 diverged at step 1" in result.stderr
    assert "likely cause: a learning rate too large for this objective (--lr 1000)" in result.stderr
    assert (out.read_bytes(), out.with_suffix(".json").read_bytes()) == before


def test_a_diverging_sweep_point_keeps_the_runs_already_written(tmp_path: Path) -> None:
    small = ["--steps", "5", "--prompts", "8", "--batch-prompts", "4", "--seeds", "1"]
    folder = tmp_path / "sw"
    result = invoke(
        "sweep", *small, "--variant", KL_VARIANT, "--grid", "lr=0.02,1000", "--out-dir", str(folder)
    )
    assert result.exit_code == 2 and "diverged at step 1" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("toyrl: error: variant ")
    assert len(list((folder / "runs").glob("*.csv"))) == 1  # the lr=0.02 point, finished first


def test_a_vanishing_length_norm_is_refused_up_front() -> None:
    from toyrl.config import Config, ConfigError
    from toyrl.train import Diverged, check_finite
    from toyrl.variants import parse_variant

    for value in (1e-300, 0.5, 1e10):
        with pytest.raises(
            ConfigError, match=r"must be 0 \(the cap\) or a number of tokens in \[1, 1e\+09\]"
        ):
            Config(length_norm=value)
    # and a gradient whose square overflows (Adam's second moment) stops the run by itself
    theta, grad = np.zeros((1, 66)), np.full((1, 66), 1e200)
    with pytest.raises(Diverged, match="too small for float64"):
        check_finite(3, theta, grad, [(parse_variant("dr_grpo"), 7)], Config())


def _toyrl(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """toyrl in a fresh process, within 240 s (a hang guard, however loaded the machine) and 4 GB of
    address space: a read that waits for a FIFO's writer or never ends fails the test instead of
    holding the suite."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    command = [sys.executable, "-c", "from toyrl.cli import main; main()", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=240, preexec_fn=limit)


def _results(tmp: Path) -> None:
    assert invoke("run", *TINY, "--out", str(tmp / "r.csv")).exit_code == 0


def _sweep(tmp: Path) -> None:
    assert invoke("sweep", *TINY, "--out-dir", str(tmp / "s")).exit_code == 0


def _first_run(tmp: Path) -> str:
    return str(sorted((tmp / "s" / "runs").iterdir())[0].relative_to(tmp))


def _made(*folders: str) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        for folder in folders:
            (tmp / folder).mkdir()

    return make


CHECK = ["--steps", "2", "--seeds", "2", "--prompts", "8", "--batch-prompts", "2", "-q"]
# (the file, made special; the command that reads it; what is made first)
READS: dict[str, tuple[str | Callable[[Path], str], list[str], Callable[[Path], None] | None]] = {
    "run --out's sidecar": ("r.json", ["run", *TINY, "--out", "r.csv"], None),
    "plot's results CSV": ("r.csv", ["plot", "r.csv", "--out", "figs"], None),
    "plot's sidecar": ("r.json", ["plot", "r.csv", "--out", "figs"], _results),
    "bias --results's sidecar": ("r.json", ["bias", "--results", "r.csv"], _results),
    "explore --results's sidecar": ("r.json", ["explore", "--results", "r.csv", "--out", "e.html"], _results),
    "sweep.json": ("s/sweep.json", ["sweep", *TINY, "--out-dir", "s"], _made("s")),
    "a sweep's run": (_first_run, ["sweep", *TINY, "--out-dir", "s"], _sweep),
    "reproduce's article.json": (
        "res/article.json",
        ["reproduce", "-q", "--results-dir", "res", "--figures-dir", "figs"],
        _made("res", "figs"),
    ),
    "a plugin": ("p.py", ["run", *TINY, "--plugin", "p.py", "--out", "x.csv"], None),
    "check's configuration": ("c.yaml", ["check", "c.yaml", *CHECK], None),
    "check's script": ("c.sh", ["check", "c.sh", *CHECK], None),
}
SPECIAL = {
    "FIFO": (os.mkfifo, "a FIFO (named pipe), not "),
    "/dev/zero": (lambda path: path.symlink_to("/dev/zero"), "a character device (/dev/zero), not "),
}


def _tree(root: Path) -> dict[str, str]:
    """Every path under `root`: a regular file's SHA-256, else what it is."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        if path.is_file()
        else ("folder" if path.is_dir() else "link" if path.is_symlink() else "special")
        for path in root.rglob("*")
    }


@pytest.mark.parametrize("special", list(SPECIAL))
@pytest.mark.parametrize("read", list(READS))
def test_a_fifo_or_device_where_toyrl_reads_a_file_is_refused_without_reading_it(
    tmp_path: Path, read: str, special: str
) -> None:
    """Opening a FIFO for reading waits for a writer, and /dev/zero never ends: each is named in one
    line, at once, and nothing is written."""
    target, args, setup = READS[read]
    make, message = SPECIAL[special]
    if setup is not None:
        setup(tmp_path)
    name = target(tmp_path) if callable(target) else target
    (tmp_path / name).unlink(missing_ok=True)
    make(tmp_path / name)
    before = _tree(tmp_path)
    result = _toyrl(args, tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"{name}: {message}" in error_line(result.stderr)  # after progress lines on a slow machine
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(
    ("name", "args", "setup", "message"),
    [
        ("r.json", ["plot", "r.csv", "--out", "figs"], _results, "a results sidecar is at most 64 MB"),
        ("r.json", ["run", *TINY, "--out", "r.csv"], _results, "a results sidecar is at most 64 MB"),
        ("s/sweep.json", ["sweep", *TINY, "--out-dir", "s"], _made("s"), "a sweep manifest is at most 64 MB"),
        ("c.yaml", ["check", "c.yaml", *CHECK], None, "a trainer's configuration file is at most 4 MB"),
        ("p.py", ["run", *TINY, "--plugin", "p.py", "--out", "x.csv"], None, "a plugin file is at most 4 MB"),
    ],
    ids=["plot's sidecar", "run's sidecar", "sweep.json", "check's configuration", "a plugin"],
)
def test_a_file_beyond_its_kind_s_size_cap_is_refused_naming_its_size_and_the_cap(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    args: list[str],
    setup: Callable[[Path], None] | None,
    message: str,
) -> None:
    if setup is not None:
        setup(tmp_path)
    cap = 64_000_000 if name.endswith(".json") else 4_000_000
    with open(tmp_path / name, "wb") as stream:  # sparse: no disk taken
        stream.truncate(cap + 1)
    before = _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    error = error_line(result.stderr)  # after progress lines, on a slow machine
    assert f"{name}: {cap + 1:,} bytes" in error and message in error
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("terminal", [False, True], ids=["into a pipe", "on a terminal"])
def test_an_error_after_progress_lines_is_the_last_line_and_the_only_other_one(
    monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    """A step slow enough to show its progress (here made so at once, whatever the machine's speed)
    that then fails: the error comes after the statuses, on a line of its own, the status drawn on a
    terminal erased first, so a user and a log both end with the error alone."""
    import threading

    import toyrl.progress as output
    import toyrl.results
    from toyrl.config import InvalidInput

    shown = threading.Event()
    real_show = output.Progress._show

    def show(progress: output.Progress, text: str, final: bool) -> None:
        real_show(progress, text, final)
        shown.set()

    def slow_broken_read(path: Path) -> None:
        assert shown.wait(60), "no progress line"  # a hang guard only
        raise InvalidInput(f"{path.name}: not a results table")

    monkeypatch.setattr(output, "PROGRESS_AFTER", 0.0)
    monkeypatch.setattr(output.Progress, "_show", show)
    monkeypatch.setattr(output, "_is_terminal", lambda stream: terminal)
    monkeypatch.setattr(toyrl.results, "load_results", slow_broken_read)
    # color: the terminal's control sequences are kept, as click keeps them for a real terminal
    result = CliRunner().invoke(app, ["plot", "r.csv", "--out", "figs"], color=True)
    assert result.exit_code == 2 and "toyrl plot: reading r.csv" in result.stderr, result.stderr
    assert error_line(result.stderr) == "toyrl: error: r.csv: not a results table"
    before = "\r\x1b[K" if terminal else "\n"  # the status erased, or ended by its newline
    assert result.stderr.endswith(f"{before}toyrl: error: r.csv: not a results table\n")
    assert result.stdout == ""


@pytest.mark.parametrize(
    "stderr",
    [
        "toyrl: error: x",  # no newline
        "Traceback (most recent call last):\ntoyrl: error: x\n",
        "toyrl: warning: y\ntoyrl: error: x\n",
        "\ntoyrl: error: x\n",
        "toyrl: error: x\ntoyrl: error: y\n",
        "toyrl plot: reading r.csv... 1.1 s so far\n",  # no error
        "toyrl plot: reading r.csv... 1.1 s so fartoyrl: error: x\n",  # glued to a status
        "\rtoyrl plot: reading r.csv... 1.1 s so far\x1b[K\rtoyrl: error: x\n",  # drawn over, not erased
    ],
)
def test_the_one_line_error_reader_refuses_anything_else(stderr: str) -> None:
    with pytest.raises(AssertionError):
        error_line(stderr)
