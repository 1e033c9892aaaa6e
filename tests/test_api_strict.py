"""The Python API is as strict as the CLI: the same refusals in the same words, every count checked
before anything is built from it, numpy integers taken as the integers they are, and no argument
of a wrong type reaching the code as a raw TypeError or AttributeError."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import toyrl
from toyrl.cli import app
from toyrl.config import InvalidInput

from .output import error_line

TINY = {"steps": 2, "prompts": 8, "batch_prompts": 2, "group_size": 4}


@pytest.mark.parametrize(
    ("call", "argument", "command"),
    [
        (lambda: toyrl.run("dr_grpo", seeds=0), "seeds", ["run", "--seeds", "0"]),
        (lambda: toyrl.run("dr_grpo", seeds=2_000_000), "seeds", ["run", "--seeds", "2000000"]),
        (lambda: toyrl.run("dr_grpo", seeds=np.int64(0)), "seeds", ["run", "--seeds", "0"]),
        (lambda: toyrl.run("dr_grpo", steps=np.int64(0)), "steps", ["run", "--steps", "0"]),
        (lambda: toyrl.run("dr_grpo", cap=np.int32(0)), "cap", ["run", "--cap", "0"]),
        (lambda: toyrl.run("dr_grpo", n_jobs=np.int64(0)), "n_jobs", ["run", "--n-jobs", "0"]),
        (lambda: toyrl.check(trainer="trl", seeds=1), "seeds", ["check", "--trainer", "trl", "--seeds", "1"]),
        (lambda: toyrl.expected_update(seed=-1), "seed", ["bias", "--seed", "-1"]),
        (lambda: toyrl.expected_update(seed=2**63), "seed", ["bias", "--seed", str(2**63)]),
        (
            lambda: toyrl.check(trainer="trl", seeds=np.int64(20_000)),
            "seeds",
            ["check", "--trainer", "trl", "--seeds", "20000"],
        ),
    ],
)
def test_the_api_refuses_what_the_cli_refuses_with_the_same_line(
    call: Any, argument: str, command: list[str], tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as raised:
        call()
    message = str(raised.value)
    assert message.startswith(f"{argument} ") and "\n" not in message
    result = CliRunner().invoke(
        app, [*command, "--out", str(tmp_path / "r.csv")] if command[0] == "run" else command
    )
    option = "--" + argument.replace("_", "-")
    assert result.exit_code == 2
    assert error_line(result.stderr) == f"toyrl: error: {option}{message[len(argument) :]}"
    assert not list(tmp_path.iterdir())


WRONG = {
    "seeds as text": (lambda: toyrl.run("dr_grpo", seeds="12"), "seeds must be a number of seeds"),
    "seeds as floats": (lambda: toyrl.run("dr_grpo", seeds=[1.9, 2.9]), "seeds must be a non-empty list"),
    "seeds as a bool": (lambda: toyrl.run("dr_grpo", seeds=True), "seeds must be a number of seeds"),
    "a seed twice": (lambda: toyrl.run("dr_grpo", seeds=[1, 1]), "seeds must be distinct (seed 1"),
    "a seed beyond int64": (lambda: toyrl.run("dr_grpo", seeds=[2**63]), "seeds must be integers in 0.."),
    "variants as a number": (lambda: toyrl.run(5), "variants must be a variant's name"),
    "a variant as a number": (lambda: toyrl.run(["grpo", 5]), "variants must be a variant's name"),
    "mean_field as text": (
        lambda: toyrl.run("dr_grpo", mean_field="yes"),
        "mean_field must be True or False",
    ),
    "progress as a number": (lambda: toyrl.run("dr_grpo", progress=2), "progress must be True or False"),
    "n_jobs as a float": (lambda: toyrl.run("dr_grpo", n_jobs=1.5), "n_jobs must be -1"),
    "a float seed": (lambda: toyrl.expected_update(seed=1.5), "seed must be an integer >= 0"),
    "a bool seed": (lambda: toyrl.expected_update(seed=True), "seed must be an integer >= 0"),
    "theta as text": (lambda: toyrl.expected_update(theta="abc"), "theta must hold 66 finite numbers"),
    "theta of text": (lambda: toyrl.expected_update(theta=["a"] * 66), "theta must hold 66 finite numbers"),
    "a trainer as a number": (lambda: toyrl.check(trainer=123), "trainer must be a trainer's name"),
    "a version as a number": (lambda: toyrl.check(trainer="trl", version=1.16), "version must be a release"),
    "settings keyed by a number": (
        lambda: toyrl.check(trainer="trl", settings={1: 2}),
        "settings must be keyed",
    ),
    "settings as a list": (
        lambda: toyrl.check(trainer="trl", settings=[("a", 1)]),
        "settings must be a dict",
    ),
    "a setting as a list": (
        lambda: toyrl.check(trainer="trl", settings={"beta": [1]}),
        "settings['beta'] must be text, a number",
    ),
    "check's seeds as text": (
        lambda: toyrl.check(trainer="trl", seeds="3"),
        "seeds must be an integer in 2..",
    ),
    "check's seeds as a float": (
        lambda: toyrl.check(trainer="trl", seeds=2.5),
        "seeds must be an integer in 2..",
    ),
    "a file as a number": (lambda: toyrl.check(5), "config_file must be a file's path"),
    "a command line of numbers": (lambda: toyrl.check(["python", 3]), "config_file must be a file's path"),
    "load of a number": (lambda: toyrl.load(5), "path must be a file's path"),
    "load of None": (lambda: toyrl.load(None), "path must be a file's path"),
    "save of a number": (lambda: toyrl.save(5, "r.csv"), "frame must be a pandas DataFrame"),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_an_argument_of_a_wrong_type_is_one_line_naming_it(
    case: str, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    call, message = WRONG[case]
    with pytest.raises(InvalidInput) as raised:
        call()
    assert str(raised.value).startswith(message), str(raised.value)
    assert "\n" not in str(raised.value)
    assert not list(tmp_path.iterdir())


def test_save_checks_its_own_arguments_before_writing(tmp_path: Path) -> None:
    frame = toyrl.run("dr_grpo", seeds=1, **TINY)
    for call, message in (
        (lambda: toyrl.save(frame, 5), "path must be a file's path"),
        (lambda: toyrl.save(frame, tmp_path / "r.csv", force="no"), "force must be True or False"),
    ):
        with pytest.raises(InvalidInput, match=message):
            call()
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/statm are Linux's")
def test_a_seed_count_beyond_the_bound_is_refused_before_the_seeds_are_built() -> None:
    """10**9 seeds are 36 GB as a list: with 1 GB of address space beyond what the interpreter
    has, building them first is a MemoryError; the count is refused before. So are a range and a
    generator of too many seeds, which are read no further than the bound."""
    code = (
        "import resource, itertools, toyrl\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
        "used = int(open('/proc/self/statm').read().split()[0]) * resource.getpagesize()\n"
        "resource.setrlimit(resource.RLIMIT_AS, (used + 10**9, hard))\n"
        "for seeds in (10**9, range(10**9), itertools.count()):\n"
        "    try:\n"
        "        toyrl.run('dr_grpo', seeds=seeds, steps=1)\n"
        "    except toyrl.config.InvalidInput as error:\n"
        "        print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "seeds must be an integer in 1..1,000,000 (got 1000000000)",
        "seeds must list at most 1,000,000 seeds (got more)",
        "seeds must list at most 1,000,000 seeds (got more)",
    ]


def test_numpy_integers_are_the_integers_they_hold() -> None:
    plain = toyrl.run("dr_grpo", seeds=2, **TINY)
    numpy = toyrl.run("dr_grpo", seeds=np.int64(2), **{k: np.int64(v) for k, v in TINY.items()})
    pd.testing.assert_frame_equal(numpy, plain, check_exact=True)
    assert numpy.attrs["toyrl"] == plain.attrs["toyrl"]
    listed = toyrl.run("dr_grpo", seeds=np.array([0, 1]), **TINY)
    pd.testing.assert_frame_equal(listed, plain, check_exact=True)
    assert toyrl.Config(steps=np.int64(3)).steps == 3 and type(toyrl.Config(steps=np.int64(3)).steps) is int


def test_a_variant_named_twice_runs_once_as_on_the_command_line() -> None:
    frame = toyrl.run(["dr_grpo", "dr_grpo"], seeds=1, **TINY)
    assert frame["variant"].tolist().count("dr_grpo") == TINY["steps"] + 1


def test_expected_update_at_a_saturated_policy_is_a_table_not_an_exception() -> None:
    """Every sigmoid saturated. At +-700 each row lies along stop_logit_right alone (the rest
    underflows to exactly 0), with squares below the smallest float (1e-301 squared): its cosine
    with grad J is 1, not a ZeroDivisionError. At +-1e308 every row is 0 and has no direction: NaN.
    Neither gives a numpy warning on the way."""
    logits = [f"prompt_logit_{j}" for j in range(64)] + ["stop_logit_right", "stop_logit_wrong"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        near = toyrl.expected_update(theta=[700.0] * 64 + [-700.0, 700.0])
        far = toyrl.expected_update(theta=[1e308] * 64 + [-1e308, 1e308])
    assert (near[logits].drop(columns="stop_logit_right") == 0).all().all()
    assert (near["stop_logit_right"] > 0).all()
    assert (near["cosine"] == 1.0).all() and (near["stop_logit_wrong_share"] == 0.0).all()
    assert (far[logits] == 0).all().all()
    assert far["cosine"].isna().all() and far["stop_logit_wrong_share"].isna().all()


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return toyrl.run(["grpo", "dr_grpo"], seeds=2, **TINY)


FIGURES = {
    "a number for a frame": (lambda f: toyrl.plot.accuracy(5), "frame must be a pandas DataFrame"),
    "a frame without its columns": (
        lambda f: toyrl.plot.accuracy(f.drop(columns="accuracy")),
        "the frame: missing columns accuracy",
    ),
    "a cap as text": (
        lambda f: toyrl.plot.length_by_correctness(f, cap="9"),
        "cap must be an integer in 1..",
    ),
    "an infinite cap": (
        lambda f: toyrl.plot.branch_lengths(f, cap=float("inf")),
        "cap must be an integer in 1..",
    ),
    "a float min_length": (
        lambda f: toyrl.plot.length_by_correctness(f, min_length=1.5),
        "min_length must be an integer >= 1",
    ),
    "a style as a number": (
        lambda f: toyrl.plot.accuracy(f, style=3),
        "style must be paper or slides (got 3)",
    ),
    "an ax as a number": (lambda f: toyrl.plot.accuracy(f, ax=5), "ax must be a matplotlib Axes or None"),
    "a 2 x 2 without its variants": (
        lambda f: toyrl.plot.length_2x2(f),
        "the 2 x 2 needs the article's four",
    ),
    "a folder as a number": (lambda f: toyrl.plot.save(f, 5), "folder must be a folder's path"),
    "save's style": (lambda f: toyrl.plot.save(f, "figures", style="x"), "style must be paper or slides"),
}


@pytest.mark.parametrize("case", list(FIGURES))
def test_the_figures_refuse_a_wrong_argument_in_one_line(
    case: str, frame: pd.DataFrame, tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(tmp_path)
    call, message = FIGURES[case]
    with pytest.raises(InvalidInput) as raised:
        call(frame)
    assert str(raised.value).startswith(message) and "\n" not in str(raised.value), str(raised.value)
    assert not list(tmp_path.iterdir())


def test_the_figures_take_a_numpy_cap_and_refuse_a_style_as_the_cli_does(
    frame: pd.DataFrame, tmp_path: Path
) -> None:
    toyrl.plot.length_by_correctness(frame, cap=np.int64(1500), min_length=np.int32(100))
    path = tmp_path / "r.csv"
    toyrl.save(frame, path)
    result = CliRunner().invoke(app, ["plot", str(path), "--style", "x", "--out", str(tmp_path / "figures")])
    with pytest.raises(InvalidInput) as raised:
        toyrl.plot.accuracy(frame, style="x")
    assert (result.exit_code, error_line(result.stderr)) == (2, f"toyrl: error: --{raised.value}")
