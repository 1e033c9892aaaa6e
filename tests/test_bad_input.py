"""Bad input everywhere: one line naming the problem, exit status 2, no traceback, nothing written."""

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from toyrl.cli import app

from .output import error_line

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
    (["run", "--variant", "advantage=none,mini_batches=0"], "mini_batches must be an integer in 1..4,096"),
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
        "buffer must be a number in (0, 1]",
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
        "draws must be an integer in 2..4,096 (got 1)",
    ),
    (
        ["run", "--variant", "advantage=none,sampler=gfpo,keep=longest"],
        "keep must be one of shortest, reward_per_token",
    ),
    (
        ["run", "--variant", "advantage=none,objective=cispo,epsilon=1.5"],
        "epsilon must be a number in (0, 1] or None (got 1.5)",
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
    (["run", "--seed-start", "-1"], "--seed-start must be an integer in 0..9,223,372,036,854,775,802"),
    # the last seed, not only the first, must fit the results' int64 column
    (
        ["run", "--seed-start", "9223372036854775807", "--seeds", "2"],
        "--seed-start must be an integer in 0..9,223,372,036,854,775,806 with --seeds 2",
    ),
    (
        ["sweep", "--out-dir", "{tmp}/sw", "--seed-start", "9223372036854775807", "--seeds", "2"],
        "--seed-start must be an integer in 0..9,223,372,036,854,775,806 with --seeds 2",
    ),
    # one reading of a boolean everywhere (toyrl.values): false is false, other words are refused
    (
        ["sweep", "--out-dir", "{tmp}/sw", "--grid", "count_approach_token=true,no"],
        "count_approach_token must be true or false (or 1 or 0) (got 'no')",
    ),
    (
        ["run", "--variant", "mask_truncated=yes"],
        "mask_truncated must be true or false (or 1 or 0) (got 'yes')",
    ),
    (
        ["run", "--variant", "advantage=none,per_micro_batch=off"],
        "per_micro_batch must be true or false (or 1 or 0) (got 'off')",
    ),
    (
        ["check", "--trainer", "verl", "--set", "algorithm.filter_groups.enable=no"],
        "algorithm.filter_groups.enable='no' is not valid; valid: true or false (or 1 or 0)",
    ),
    # two spellings of one setting are refused, not resolved one way
    (["run", "--variant", "mask_truncated=true,selector=all"], "mask_truncated and selector both choose"),
    (
        ["run", "--variant", "mask_truncated=false,selector=stopped"],
        "mask_truncated and selector both choose",
    ),
    (
        ["run", "--variant", "advantage=group_std,eps=0.1,std_eps=0.2"],
        "'std_eps' (or its old name 'eps') is given twice",
    ),
    # every draw a sampler can make counts against the responses-a-step bound, at worst
    (
        [
            "run",
            "--prompts",
            "100000",
            "--batch-prompts",
            "1",
            "--min-length",
            "1500",
            "--variant",
            "advantage=none,sampler=filter_groups,max_rounds=100000,round_prompts=1",
        ],
        "sampler=filter_groups could draw 5,000,750,000 values a step",
    ),
    (
        [
            "run",
            "--prompts",
            "100000",
            "--batch-prompts",
            "100000",
            "--group-size",
            "10",
            "--variant",
            "advantage=none,sampler=gfpo,draws=4096",
        ],
        "sampler=gfpo draws batch_prompts x draws = 100,000 x 4,096 = 409,600,000 responses a step; "
        "the limit is 1,000,000",
    ),
    # a grid point invalid for a variant is found before the sweep writes anything
    (
        ["sweep", "--out-dir", "{tmp}/sw", "--variant", "gfpo", "--grid", "group_size=8,16", "--steps", "2"],
        "grid point group_size=16: sampler=gfpo keeps group_size = 16 of its draws",
    ),
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
    (
        ["plot", "{negseed}"],
        "column seed must hold whole numbers in 0..9,223,372,036,854,775,807 (row 2 has -1)",
    ),
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
    assert message in error_line(result.stderr)  # after progress lines, on a slow machine
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


# ---------------------------------------------------------------------------------------------------
# What toyrl check reads: expansion bombs, keys given twice, deep nesting, huge numbers, non-finite
# values; each answered in one line (exit 2), never a traceback, a hang or gigabytes of memory.

CHECK = ["--steps", "2", "--seeds", "2", "--prompts", "8", "--batch-prompts", "2", "-q"]


def _bomb(levels: int, mapping: bool) -> str:
    """YAML of `levels` aliases, each used twice by the next: 2**levels values once expanded."""
    if mapping:
        lines = ["a0: &a0 {x: 1, y: 2}"]
        lines += [f"a{i}: &a{i} {{x: *a{i - 1}, y: *a{i - 1}}}" for i in range(1, levels + 1)]
    else:
        lines = ["a0: &a0 [1, 2]"]
        lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}]" for i in range(1, levels + 1)]
    return "\n".join([*lines, f"beta: *a{levels}", ""])


def check_refuses(tmp_path: Path, name: str, content: str | bytes, *args: str) -> str:
    """check's one-line refusal of the file `name` holding `content`, with `args`."""
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = CliRunner().invoke(app, ["check", str(path), *args, *CHECK])
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stderr.startswith("toyrl: error: ") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr


@pytest.mark.parametrize("mapping", [True, False], ids=["mappings", "lists"])
def test_yaml_aliases_expanding_beyond_the_limit_are_refused_before_they_are_expanded(
    tmp_path: Path, mapping: bool
) -> None:
    """17 levels: 262,144 values of a 400-byte file (which flattening used to build); the limit
    is 100,000, counted while walking, so the walk stops there."""
    pytest.importorskip("yaml")
    stderr = check_refuses(tmp_path, "bomb.yaml", _bomb(17, mapping), "--trainer", "trl")
    assert "bomb.yaml: more than 100,000 keys and list items (YAML aliases counted at each use)" in stderr


def test_a_thirty_level_alias_bomb_is_refused_at_once_in_a_fresh_process(tmp_path: Path) -> None:
    """2**30 values: it used to take all the memory there was; here within 60 s and 2 GB, or fail."""
    pytest.importorskip("yaml")
    import resource
    import subprocess
    import sys

    (tmp_path / "bomb.yaml").write_text(_bomb(30, mapping=True))

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    command = [sys.executable, "-c", "from toyrl.cli import main; main()", "check", "bomb.yaml", *CHECK]
    result = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=240, preexec_fn=limit
    )
    assert result.returncode == 2 and "more than 100,000 keys" in result.stderr, result.stderr[-500:]


def test_yaml_merge_keys_may_be_overridden_and_aliases_within_the_limit_are_read(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    from toyrl.trainers.reading import read_settings

    path = tmp_path / "merge.yaml"
    path.write_text("base: &base {beta: 0.1, epsilon: 0.2}\ntrl: {<<: *base, beta: 0.04}\n")
    assert read_settings(path)["trl.beta"] == 0.04
    path.write_text(_bomb(10, mapping=True))
    assert len(read_settings(path)) == sum(2 ** (i + 1) for i in range(11)) + 2**11  # a0..a10, beta


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "twice.yaml",
            "algorithm:\n  adv_estimator: grpo\n  adv_estimator: rloo\n",
            "twice.yaml, line 3: the key 'adv_estimator' is given twice in one mapping; keep one",
        ),
        ("twice.yml", "beta: 0.1\nepsilon: 0.2\nbeta: 0.0\n", "line 3: the key 'beta' is given twice"),
        (
            "twice.json",
            '{"algorithm": {"adv_estimator": "grpo", "adv_estimator": "rloo"}}',
            "twice.json: the key 'adv_estimator' is given twice in one object; keep one",
        ),
    ],
)
def test_a_key_given_twice_is_refused_naming_it(
    tmp_path: Path, name: str, content: str, message: str
) -> None:
    """JSON and YAML parsers keep the last value without a word: which one the user meant is unknown."""
    pytest.importorskip("yaml")
    assert message in check_refuses(tmp_path, name, content)


HUGE = "9" * 5000  # more digits than Python converts to an int (4,300)
LONG = "9" * 400  # an int beyond a float's range


@pytest.mark.parametrize(
    ("name", "content", "args", "message"),
    [
        (
            "deep.json",
            '{"a": ' * 5000 + "1" + "}" * 5000,
            (),
            "deep.json: nested too deeply (at most 100 levels)",
        ),
        ("deep.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n", (), "deep.yaml: nested too deeply"),
        (
            "level.yaml",
            "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 120)) + "  " * 120 + "b: 1\n",
            ("--trainer", "trl"),
            "level.yaml: nested more than 100 levels deep",
        ),
        ("huge.json", f'{{"beta": {HUGE}}}', (), "huge.json: an integer of more than 4,300 digits"),
        ("huge.yaml", f"beta: {HUGE}\n", (), "huge.yaml: an integer of more than 4,300 digits"),
        (
            "long.json",
            f'{{"beta": {LONG}}}',
            ("--trainer", "trl"),
            "beta=9999999999999999999999999999...9999",
        ),
        (
            "long.yaml",
            f"beta: {LONG}\n",
            ("--trainer", "trl"),
            "(400 characters) is not valid; valid: a float",
        ),
        (
            "nan.yaml",
            "entropy_coef: .nan\n",
            ("--trainer", "trl"),
            "entropy_coef=nan is not valid; valid: a float",
        ),
        ("latin1.yaml", b"beta: 0.1 # caf\xe9\n", (), "latin1.yaml: not a text file"),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 12 else "",
)
def test_what_check_reads_is_refused_in_one_line_never_a_traceback(
    tmp_path: Path, name: str, content: str | bytes, args: tuple[str, ...], message: str
) -> None:
    pytest.importorskip("yaml")
    assert message in check_refuses(tmp_path, name, content, *args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", f"beta={LONG}"], "beta='999999999999999999999999999...999999999999999999999999999' (402"),
        (["--set", f"beta={HUGE}"], "(5,002 characters) is not valid; valid: a float in [0, inf]"),
        (["--set", "entropy_coef=nan"], "entropy_coef=nan is not valid; valid: a float"),
        (["--version", ""], "--version '' of TRL is not modelled; modelled: "),
        (["--version", " "], "--version ' ' of TRL is not modelled; modelled: "),
    ],
    ids=["400 digits", "5000 digits", "nan", "empty version", "blank version"],
)
def test_check_settings_out_of_range_are_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["check", "--trainer", "trl", *args, *CHECK])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, (result.output, result.exception)
    assert message in result.stderr


def _strict(text: str) -> Any:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_check_json_is_strict_json_with_infinite_settings_as_null() -> None:
    result = CliRunner().invoke(
        app,
        [
            "check",
            "--trainer",
            "trl",
            "--set",
            "max_grad_norm=inf",
            "--set",
            "entropy_coef=-inf",
            "--json",
            *CHECK,
        ],
    )
    assert result.exit_code == 0, result.output
    data = _strict(result.stdout)
    assert data["given"] == {"max_grad_norm": None, "entropy_coef": None}


@pytest.mark.parametrize("command", ["plot", "bias", "explore", "run"])
def test_a_sidecar_with_an_integer_of_5000_digits_is_one_line(tmp_path: Path, command: str) -> None:
    out = tmp_path / "r.csv"
    tiny = ["--steps", "2", "--seeds", "2", "--prompts", "8", "--batch-prompts", "2", "-q"]
    assert CliRunner().invoke(app, ["run", *tiny, "--out", str(out)]).exit_code == 0
    sidecar = out.with_suffix(".json")
    sidecar.write_text(sidecar.read_text().replace('"seeds": [', f'"seeds": [{HUGE}, ', 1))
    before = (out.read_bytes(), sidecar.read_bytes())
    arguments = {
        "plot": ["plot", str(out), "--out", str(tmp_path / "figs")],
        "bias": ["bias", "--results", str(out)],
        "explore": ["explore", "--results", str(out), "--out", str(tmp_path / "e.html")],
        "run": ["run", *tiny, "--out", str(out)],
    }[command]
    result = CliRunner().invoke(app, arguments)
    assert result.exit_code == 2, (result.output, result.exception)
    expected = "holds results made with other settings" if command == "run" else "more than 4,300 digits"
    assert expected in error_line(result.stderr)
    assert (out.read_bytes(), sidecar.read_bytes()) == before


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["check", "--trainer", "trl", "--set", f"num_generations={HUGE}"], "valid: an int in [2, 10000]"),
        (
            ["sweep", "--variant", "grpo", "--grid", f"group_size={HUGE}", "--out-dir", "{tmp}/s"],
            "at most 4,300 digits",
        ),
        (["run", "--variant", f"advantage=none,mini_batches={HUGE}"], "at most 4,300 digits"),
    ],
    ids=["check --set", "sweep --grid", "run --variant"],
)
def test_an_integer_of_5000_digits_given_as_text_is_one_line(
    tmp_path: Path, arguments: list[str], message: str
) -> None:
    """Beyond the digits Python converts: refused as out of range, not a traceback; nothing written."""
    result = CliRunner().invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in arguments])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, (result.output, result.exception)
    assert message in result.stderr
    assert not list(tmp_path.iterdir())


# Keys of the trainers' settings (so that values reach their checks) and any text; values of every
# JSON/YAML type, huge integers (a marker replaced by 5,000 digits once written) and non-finite floats.
SETTING_KEYS = st.sampled_from(
    [
        "loss_type",
        "beta",
        "epsilon",
        "scale_rewards",
        "num_generations",
        "entropy_coef",
        "max_grad_norm",
        "algorithm.adv_estimator",
        "actor_rollout_ref.actor.loss_agg_mode",
        "actor_rollout_ref.actor.clip_ratio",
        "actor.eps_clip",
        "reward_scale",
    ]
)
KEYS = st.one_of(SETTING_KEYS, st.text(min_size=1, max_size=6))
HUGE_MARK = "@@huge@@"
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 70),
    st.integers(10**300, 10**400),
    st.just(HUGE_MARK),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["grpo", "dr_grpo", "rloo", "token-mean", "${beta}", "${oc.env:NO_SUCH}"]),
    st.text(max_size=6),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=8,
)
SET_VALUES = st.one_of(NUMBER, st.sampled_from(["9" * 400, "9" * 5000, "true", "none", "grpo", ""]))


@st.composite
def check_inputs(draw: st.DrawFn) -> tuple[str | None, str, list[str]]:
    """(a file's name or None, its text, the --set, --trainer and --version arguments)."""
    data: dict[str, Any] = draw(st.dictionaries(KEYS, VALUES, max_size=5))
    suffix = draw(st.sampled_from([None, ".json", ".yaml"]))
    text = ""
    if suffix == ".json":
        text = json.dumps(data, allow_nan=True).replace(f'"{HUGE_MARK}"', "9" * 5000)
    elif suffix == ".yaml":
        import yaml

        containers = [value for value in data.values() if isinstance(value, dict | list)]
        for _ in range(draw(st.integers(0, 3))):  # the same object twice: written as an anchor and alias
            if containers:
                data[draw(KEYS)] = draw(st.sampled_from(containers))
        bomb: Any = {"x": 1}
        for _ in range(draw(st.integers(0, 18))):  # 2**18 values expanded: beyond the limit
            bomb = {"x": bomb, "y": bomb}
        data[draw(KEYS)] = bomb
        text = yaml.safe_dump(data, allow_unicode=True).replace(HUGE_MARK, "9" * 5000)
        if draw(st.integers(0, 3)) == 0 and data:  # a key given twice
            text += f"{yaml.safe_dump({next(iter(data)): 1})}"
    arguments: list[str] = []
    for key, value in draw(st.lists(st.tuples(SETTING_KEYS, SET_VALUES), max_size=3)):
        arguments += ["--set", f"{key}={value}"]
    trainer = draw(st.sampled_from([None, "trl", "trl", "verl", "openrlhf", "oat", "oat"]))
    arguments += [] if trainer is None else ["--trainer", trainer]
    version = draw(st.sampled_from([None, None, None, None, "", "0.1"]))
    arguments += [] if version is None else ["--version", version]
    return suffix, text, arguments


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(inputs=check_inputs())
def test_random_check_inputs_never_crash(inputs: tuple[str | None, str, list[str]], tmp_path: Path) -> None:
    """Any file and settings: checked (0), checked with misspelt keys (1) or one line (2), never a
    traceback; the expansion of YAML aliases is bounded, so no example takes long."""
    pytest.importorskip("yaml")
    suffix, text, arguments = inputs
    files = []
    if suffix is not None:
        path = tmp_path / f"settings{suffix}"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        files = [str(path)]
    result = CliRunner().invoke(app, ["check", *files, *arguments, *CHECK, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code in (0, 1, 2), result.output
    assert "Traceback" not in result.output
    if result.exit_code == 2:
        assert result.stderr.startswith("toyrl: error: ") and result.stderr.count("\n") == 1, result.stderr
    else:
        _strict(result.stdout)
