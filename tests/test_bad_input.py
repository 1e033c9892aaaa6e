"""Bad input everywhere: one line naming the problem, exit status 2, no traceback, nothing written."""

import os
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from toyrl.cli import app

# (arguments, a fragment of the message); {tmp} is a fresh folder, {ro} a read-only one, {csv} a
# valid results CSV and {bad} a malformed one, both made before the call.
BAD = [
    (["run", "--variant", "grpoo"], "unknown variant 'grpoo' (did you mean 'grpo'?)"),
    (["run", "--variant", "advantage=median"], "advantage must be one of"),
    (
        ["run", "--variant", "aggregation=token_mean,num_iterations=0"],
        "num_iterations must be an integer in 1..64",
    ),
    (["run", "--variant", "advantage=none,beta=-1"], "beta must be a number in [0, 1e6) (got -1.0)"),
    (
        ["run", "--variant", "advantage=none,mini_batches=3"],
        "mini_batches x micro_batches = 3 must divide the batch's 128 responses",
    ),
    (["run", "--variant", "advantage=none,mini_batches=0"], "mini_batches must be an integer in 1..4096"),
    (["run", "--variant", "advantage=none,shuffle=always"], "shuffle must be one of none, once, epoch"),
    (["run", "--variant", "advantage=none,dual_clip=0.5"], "dual_clip must be a number in (1, 1e6)"),
    (["run", "--variant", "advantage=none,per_micro_batch=maybe"], "per_micro_batch must be true or false"),
    (
        ["run", "--variant", "advantage=none,aggregation=length_power,alpha=2"],
        "alpha must be a number in [0, 1] (got 2.0)",
    ),
    (
        ["run", "--variant", "advantage=none,sampler=filter_groups,max_rounds=0"],
        "max_rounds must be an integer in 1..100,000",
    ),
    (
        ["run", "--variant", "advantage=none,reward=soft_overlong,buffer=1.5"],
        "buffer must be a number in [0, 1]",
    ),
    (["run", "--variant", "advantage=grpo_plus"], "advantage must be one of"),  # an unknown family
    (
        ["run", "--variant", "objective=cispo_x"],
        "objective must be one of ppo_clip, gspo, gmpo, vespo, cispo, sapo, gpg",
    ),
    (["run", "--variant", "sampler=gfp"], "sampler must be one of once, filter_groups, gfpo"),
    (["run", "--variant", "cispoo"], "unknown variant 'cispoo' (did you mean 'cispo'?)"),
    (
        ["run", "--variant", "advantage=none,aggregation=length_power,alpha=-0.1"],
        "alpha must be a number in [0, 1] (got -0.1)",
    ),
    (
        ["run", "--variant", "advantage=none,sampler=gfpo,draws=8"],
        "sampler=gfpo keeps group_size = 8 of its draws: draws (G') must exceed it (got draws=8)",
    ),
    (
        ["run", "--variant", "advantage=none,sampler=gfpo,draws=6", "--group-size", "8"],
        "draws (G') must exceed it (got draws=6)",
    ),
    (
        ["run", "--variant", "advantage=none,sampler=gfpo,draws=1"],
        "draws must be an integer in 2..4096 (got 1)",
    ),
    (
        ["run", "--variant", "advantage=none,sampler=gfpo,keep=longest"],
        "keep must be one of shortest, reward_per_token",
    ),
    (
        ["run", "--variant", "advantage=none,objective=cispo,epsilon=1.5"],
        "epsilon must be in (0, 1] for objective=cispo (got 1.5)",
    ),
    (
        ["run", "--variant", "advantage=none,objective=sapo,tau_neg=0"],
        "tau_neg must be a number in (0, 1000]",
    ),
    (
        ["run", "--variant", "advantage=none,aggregation=token_mean,draws=3"],
        "unknown key 'draws' (not a parameter of advantage=none",
    ),
    (["run", "--variant", "dynamic_sampling", "--group-size", "1"], "--group-size must be an integer in 2.."),
    (["run", "--group-size", "1"], "--group-size must be an integer in 2..10,000 (got 1)"),
    (["run", "--batch-prompts", "65"], "--batch-prompts must be at most prompts = 64"),
    (["run", "--prompts", "0"], "--prompts must be an integer in 1..100,000"),
    (["run", "--cap", "10"], "--cap must be at least min_length = 100"),
    (["run", "--min-length", "0"], "--min-length must be an integer >= 1"),
    (["run", "--steps", "0"], "--steps must be an integer in 1..10,000,000"),
    (["run", "--seeds", "-2"], "--seeds must be an integer in 1..1,000,000"),
    (["run", "--seed-start", "-1"], "--seed-start must be an integer >= 0 (and below 2**63)"),
    (["run", "--lr", "0"], "--lr must be a finite number > 0"),
    (["run", "--lr", "inf"], "--lr must be a finite number > 0"),
    (["run", "--lr", "nan"], "--lr must be a finite number > 0"),
    (["run", "--adam-beta1", "1"], "--adam-beta1 must be a finite number >= 0 and < 1"),
    (["run", "--stop-prob-right", "0"], "--stop-prob-right must be a finite number > 0 and < 1"),
    (["run", "--prompt-logit-std", "-1"], "--prompt-logit-std must be a finite number >= 0"),
    (["run", "--std-eps", "nan"], "--std-eps must be a finite number >= 0"),
    (["run", "--n-jobs", "-5"], "--n-jobs must be -1 (all cores) or an integer >= 1"),
    (["run", "--seeds", "1000001"], "--seeds must be an integer in 1..1,000,000"),
    (["run", "--seeds", "100000", "--steps", "400"], "the limit is 20,000,000"),
    (["run", "--steps", "ten"], "Invalid value for '--steps'"),
    (["run", "--seeds", "6.5"], "Invalid value for '--seeds': '6.5' is not an integer."),
    (["run", "--seeds", "1e6"], "Invalid value for '--seeds': '1e6' is not an integer."),
    (["run", "--lr", "1/2"], "Invalid value for '--lr': '1/2' is not a number."),
    (["plot", "{csv}", "--style", "poster"], "--style must be paper or slides (got 'poster')"),
    (["run", "--out", "{tmp}/missing/r.csv"], "does not exist"),
    (["run", "--out", "{ro}/r.csv"], "writ"),
    (["run", "--out", "{tmp}/r.txt"], "--out must be a path ending in .csv"),
    (
        ["run", "--mean-field", "--variant", "trl_default"],
        "no exact expected update for variant 'trl_default'",
    ),
    (["reproduce", "--results-dir", "{tmp}/a/b"], "its parent folder does not exist"),
    (["reproduce", "--results-dir", "{ro}"], "writ"),
    (["plot", "{tmp}/nothing.csv"], "no such results file"),
    (["plot", "{bad}"], "missing columns"),
    (["plot", "{csv}", "--out", "{ro}"], "writ"),
    (["examples", "lengths"], "unknown example 'lengths'"),
    (["explore", "--out", "{tmp}/page.htm"], "--out must be a path ending in .html"),
    (["explore", "--results", "{bad}", "--out", "{tmp}/page.html"], "missing columns"),
    (["bias", "--step", "4"], "--step needs --results"),
    (["bias", "--results", "{csv}", "--step", "99"], "--step must be in 0..5"),
    (["bias", "--variant", "dapo"], "no exact expected update for variant 'dapo'"),
    (["sweep", "--out-dir", "{tmp}/s", "--grid", "lr=0,0.1"], "--lr must be a finite number > 0 (got 0.0)"),
    (["sweep", "--out-dir", "{tmp}/s", "--grid", "colour=red"], "unknown field 'colour'"),
    (["sweep", "--out-dir", "{tmp}/s", "--backend", "spark"], "--backend must be loky or dask"),
    (["sweep", "--out-dir", "{tmp}/a/b"], "parent folder"),
    (["nonsense"], "No such command 'nonsense'"),
    # Sizes bounded up front, before any memory is taken.
    (
        ["run", "--group-size", "10000", "--batch-prompts", "1000", "--prompts", "1000"],
        "--group-size times batch_prompts must be at most 1,000,000 responses per step",
    ),
    (
        ["run", "--variant", "advantage=none,num_iterations=100000000"],
        "num_iterations must be an integer in 1..64",
    ),
    (
        ["run", "--steps", "10000000", "--variant", "advantage=none,num_iterations=64", "--seeds", "1"],
        "updates per run; the limit is 100,000,000",
    ),
    # Files that are not what they claim to be, named as such.
    (["plot", "{dup}"], "variant grpo, seed 0, step 3 appears more than once"),
    (["plot", "{negseed}"], "column seed must hold whole numbers >= 0"),
    (
        ["explore", "--results", "{nanstep}", "--out", "{tmp}/page.html"],
        "column step must hold whole numbers",
    ),
    (["bias", "--results", "{gap}"], "has steps 0..5 with 5 rows"),
    (["plot", "{nested}"], "not readable JSON (nested too deeply)"),
    (["bias", "--results", "{notobject}"], "not a toyrl sidecar"),
    # Where the message used to mislead: the real cause is named.
    (["reproduce", "--results-dir", "{file}"], "is a file, not a folder"),
    (["reproduce", "--figures-dir", "{file}"], "is a file, not a folder"),
    (["run", "--out", "{file}/r.csv"], "folder '{file}' is not a folder"),
    (["run", "--out", "{tmp}/" + "x" * 250 + ".csv"], "is too long (at most"),
    (["bias", "--seed", "-1"], "--seed must be an integer >= 0"),
    # Whatever the operating system refuses is one line naming the path and its reason.
    (["plot", "{csv}", "--out", "{tmp}/" + "y" * 300], "File name too long"),
    (["reproduce", "--figures-dir", "{tmp}/" + "z" * 300], "File name too long"),
]


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, str]:
    read_only = tmp_path / "ro"
    read_only.mkdir()
    made = tmp_path / "made"
    made.mkdir()
    csv = made / "good.csv"
    runner = CliRunner()
    assert runner.invoke(app, ["run", "--steps", "5", "--seeds", "1", "-q", "--out", str(csv)]).exit_code == 0
    bad = made / "bad.csv"
    bad.write_text("variant,seed\ngrpo,0\n")
    files = {"csv": str(csv), "bad": str(bad)}
    good = pd.read_csv(csv)
    for name, frame in {
        "dup": pd.concat([good, good.iloc[[3]]]),
        "negseed": good.assign(seed=-1),
        "nanstep": good.assign(step=float("nan")),
        "gap": good.drop(index=2),
    }.items():
        frame.to_csv(made / f"{name}.csv", index=False)
        files[name] = str(made / f"{name}.csv")
    for name, sidecar in {"nested": "[" * 100_000 + "]" * 100_000, "notobject": "[1, 2]"}.items():
        (made / f"{name}.csv").write_bytes(csv.read_bytes())
        (made / f"{name}.json").write_text(sidecar)
        files[name] = str(made / f"{name}.csv")
    (made / "a-file").write_text("not a folder")
    files["file"] = str(made / "a-file")
    read_only.chmod(0o555)
    work = tmp_path / "work"
    work.mkdir()
    # Root writes through permission bits; /proc refuses new files even to root.
    unwritable = "/proc" if os.geteuid() == 0 else str(read_only)
    return {"tmp": str(work), "ro": unwritable, **files}


def test_the_table_is_large_enough() -> None:
    assert len(BAD) >= 30 and len({args[0] for args, _ in BAD}) >= 7


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a)[:40] for a, _ in BAD])
def test_bad_invocation(args: list[str], message: str, folders: dict[str, str]) -> None:
    filled = [arg.format(**folders) for arg in args]
    message = message.format(**folders)
    before = {path: path.stat().st_mtime_ns for path in Path(folders["tmp"]).parent.rglob("*")}
    result = CliRunner().invoke(app, filled)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("toyrl: error: ") and result.stderr.count("\n") == 1
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    after = {path: path.stat().st_mtime_ns for path in Path(folders["tmp"]).parent.rglob("*")}
    assert after == before  # nothing written, created or touched


# Integers stay small enough that a valid value (e.g. 900 seeds) still runs in a moment; the bounds
# on large values are checked by the table above.
NUMBER = st.one_of(
    st.integers(-1000, 1000).map(str),
    st.sampled_from(["10000001", "2999879141553876.0", "1e6"]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "x", "1e400", "-0", "0.5", "1/2", "nan", "-inf"]),
)
OPTIONS = [
    "--steps",
    "--lr",
    "--group-size",
    "--batch-prompts",
    "--prompts",
    "--cap",
    "--min-length",
    "--seeds",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(option=st.sampled_from(OPTIONS), value=NUMBER)
def test_random_option_values_never_crash(option: str, value: str, tmp_path: Path) -> None:
    """Any value: either a clean run (tiny budget) or a one-line error with exit 2; never a traceback."""
    out = tmp_path / "fuzz.csv"
    args = ["run", "--steps", "2", "--seeds", "1", "--prompts", "4", "--batch-prompts", "2", "--cap", "150"]
    args += ["--min-length", "100", "-q", "--out", str(out), option, value]
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 2), (result.exit_code, result.output, result.exception)
    if result.exit_code == 2:
        assert result.stderr.startswith("toyrl: error: ") and result.stderr.count("\n") == 1
        assert not out.exists() and not out.with_suffix(".json").exists()
    else:
        assert out.exists()
    out.unlink(missing_ok=True)
    out.with_suffix(".json").unlink(missing_ok=True)
