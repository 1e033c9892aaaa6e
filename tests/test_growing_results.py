"""`toyrl run` results that grow and never collide (issue 42, items 3 and 4): into a results file of
the same settings only the missing (variant, seed) runs run, the finished rows stay byte for byte,
and the grown file is a fresh run of the grown request to the byte; a setting that changes finished
runs is refused, naming it; the default --out is named by the variants and settings."""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import toyrl
import toyrl.experiment
from toyrl.cli import app
from toyrl.config import Config, InvalidInput
from toyrl.experiment import run_experiment
from toyrl.plugins import LOADED, unload
from toyrl.results import NAME_LENGTH, default_results_path
from toyrl.variants import parse_variants

TINY = ["--steps", "6", "--prompts", "8", "--batch-prompts", "4"]


@pytest.fixture(autouse=True)
def no_plugin_stays_loaded() -> Iterator[None]:
    yield
    for plugin in list(LOADED.values()):
        unload(plugin)


@pytest.fixture
def simulated(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """The (variant, seed) runs the commands simulate, in order."""
    runs: list[tuple[str, int]] = []
    original = toyrl.experiment.run_experiment

    def counting(config: Any, variants: Any, seeds: Any, *args: Any, **kwargs: Any) -> Any:
        runs.extend((variant.name, seed) for variant in variants for seed in seeds)
        return original(config, variants, seeds, *args, **kwargs)

    monkeypatch.setattr(toyrl.experiment, "run_experiment", counting)
    return runs


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def run(out: Path, *args: str) -> str:
    code, _, stderr = invoke("run", *args, *TINY, "--out", str(out))
    assert code == 0, stderr
    return stderr


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


@pytest.mark.parametrize(
    ("first", "then", "reused", "ran"),
    [
        (["--variant", "grpo", "--seeds", "2"], ["--variant", "grpo", "--seeds", "4"], 2, 2),
        (["--variant", "grpo", "--seeds", "2"], ["--variant", "dr_grpo", "--seeds", "2"], 2, 2),
        (
            ["--variant", "grpo", "--seeds", "2"],
            ["--variant", "grpo", "--variant", "dapo", "--seeds", "3"],
            2,
            4,
        ),
        (
            ["--variant", "gfpo", "--seeds", "2", "--seed-start", "3"],
            ["gfpo", "x=dr_grpo", "--seeds", "5"],
            2,
            8,
        ),
    ],
)
def test_a_grown_file_is_a_fresh_run_of_the_grown_request_to_the_byte(
    tmp_path: Path,
    simulated: list[tuple[str, int]],
    first: list[str],
    then: list[str],
    reused: int,
    ran: int,
) -> None:
    out = tmp_path / "grown.csv"
    run(out, *first)
    before = lines(out)
    simulated.clear()
    said = run(out, *then)
    assert f"grown.csv: reusing {reused} runs it holds, running {ran}" in said
    grown_runs = list(simulated)
    assert len(grown_runs) == ran and len(set(grown_runs)) == ran
    sidecar = json.loads(out.with_suffix(".json").read_text())
    grown = [*sidecar["variants"]]
    fresh = tmp_path / "fresh.csv"
    seeds = sidecar["seeds"]
    assert seeds == list(range(seeds[0], seeds[-1] + 1))
    asked = [arg for name in grown for arg in ("--variant", "x=dr_grpo" if name == "x" else name)]
    run(fresh, *asked, "--seeds", str(len(seeds)), "--seed-start", str(seeds[0]))
    assert out.read_bytes() == fresh.read_bytes()
    assert json.loads(fresh.with_suffix(".json").read_text()) == sidecar
    assert set(before[1:]) <= set(lines(out))  # every finished row, byte for byte
    finished = {(row.split(b",")[0].decode(), int(row.split(b",")[1])) for row in before[1:]}
    assert finished.isdisjoint(grown_runs)  # none of them ran again


def test_a_run_is_the_same_whatever_runs_beside_it() -> None:
    """What growing rests on: a run's rows do not depend on the other variants and seeds run with it
    (presets that resample, GFPO, filter groups and several updates a batch among them)."""
    config = Config(steps=8, prompts=8, batch_prompts=4)
    every = parse_variants(["grpo", "dapo", "gfpo", "gspo", "dr_grpo", "x=trl_default"])
    together = run_experiment(config, every, [0, 1, 2, 3])
    for variant in every:
        alone = run_experiment(config, [variant], [2])
        rows = together[(together["variant"] == variant.name) & (together["seed"] == 2)]
        assert alone.equals(rows.reset_index(drop=True)), variant.name


def test_fewer_seeds_or_variants_than_the_file_keep_it_as_it_is(
    tmp_path: Path, simulated: list[tuple[str, int]]
) -> None:
    out = tmp_path / "r.csv"
    run(out, "--variant", "grpo", "--variant", "dr_grpo", "--seeds", "4")
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in (out, out.with_suffix(".json"))}
    simulated.clear()
    code, stdout, stderr = invoke("run", "--variant", "dr_grpo", "--seeds", "2", *TINY, "--out", str(out))
    assert code == 0, stderr
    assert "r.csv: reusing 8 runs it holds, running 0" in stderr and simulated == []
    assert {path: (path.read_bytes(), path.stat().st_mtime_ns) for path in before} == before
    assert f"kept {out} and" in stdout
    assert "GRPO  " in stdout and "Dr. GRPO" in stdout  # the table shows what the file holds


@pytest.mark.parametrize(
    ("again", "setting"),
    [
        (["--variant", "grpo", "--steps", "7"], "steps: 6 in the file, 7 asked"),
        (["--variant", "grpo", "--group-size", "4"], "group_size: 8 in the file, 4 asked"),
        (["--variant", "grpo", "--mean-field"], "mean-field runs: no in the file, yes asked"),
        (
            ["a=dr_grpo"],
            "variant a: advantage=group_std,aggregation=token_mean in the file, "
            "advantage=none,aggregation=seq_mean_token_sum_norm asked",
        ),
    ],
)
def test_a_setting_that_changes_finished_runs_is_refused_naming_it(
    tmp_path: Path, again: list[str], setting: str
) -> None:
    out = tmp_path / "r.csv"
    run(out, "--variant", "grpo", "--variant", "a=advantage=group_std,aggregation=token_mean", "--seeds", "2")
    before = {path: path.read_bytes() for path in tmp_path.iterdir()}
    arguments = [*TINY, *again] if "--steps" in again else [*again, *TINY]
    code, stdout, stderr = invoke("run", *arguments, "--out", str(out))
    assert code == 2 and stdout == "" and stderr.count("\n") == 1, stderr
    assert stderr == (
        f"toyrl: error: --out: {out} holds results made with other settings ({setting}); choose another "
        "path, or add --force\n"
    )
    assert {path: path.read_bytes() for path in tmp_path.iterdir()} == before
    code, _, stderr = invoke("run", *arguments, "--out", str(out), "--force")
    assert code == 0, stderr


def test_another_plugin_source_is_refused_naming_the_plugin(tmp_path: Path) -> None:
    plugin = tmp_path / "halved.py"
    source = (
        "from dataclasses import dataclass\nimport numpy as np\nfrom toyrl.stages import register\n\n\n"
        '@register("advantage", "halved")\n@dataclass(frozen=True)\nclass Halved:\n'
        "    def advantages(self, rewards, std_eps):\n"
        "        return (rewards - rewards.mean(axis=-1, keepdims=True)) / 2\n"
    )
    plugin.write_text(source)
    out = tmp_path / "r.csv"
    run(out, "--plugin", str(plugin), "h=advantage=custom:halved", "--seeds", "2")
    unload(next(iter(LOADED.values())))
    plugin.write_text(source.replace("/ 2", "/ 3"))
    code, _, stderr = invoke(
        "run", "--plugin", str(plugin), "h=advantage=custom:halved", *TINY, "--out", str(out)
    )
    assert code == 2
    assert "holds results made with other settings (plugin halved's source sha256: " in stderr
    # its runs are needed for new seeds: without the plugin, its variant is not known
    unload(next(iter(LOADED.values())))
    code, _, stderr = invoke("run", "--variant", "dr_grpo", "--seeds", "3", *TINY, "--out", str(out))
    assert code == 2 and "advantage must be one of" in stderr and "pass its file with --plugin" in stderr


def test_the_default_out_never_collides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: `--variant grpo` then `--variant dr_grpo`, each its own file; the same request
    again reuses its file; other settings, another file."""
    monkeypatch.chdir(tmp_path)
    for args in (["--variant", "grpo"], ["--variant", "dr_grpo"], ["--variant", "grpo", "--steps", "5"]):
        code, _, stderr = invoke("run", *TINY, *args, "--seeds", "2")
        assert code == 0, stderr
    names = sorted(path.name for path in tmp_path.glob("*.csv"))
    assert names == [
        "toyrl-run_dr_grpo,prompts=8,batch_prompts=4,steps=6.csv",
        "toyrl-run_grpo,prompts=8,batch_prompts=4,steps=5.csv",
        "toyrl-run_grpo,prompts=8,batch_prompts=4,steps=6.csv",
    ]
    code, _, stderr = invoke("run", *TINY, "--variant", "grpo", "--seeds", "3")
    assert code == 0 and "reusing 2 runs it holds, running 1" in stderr
    assert len(list(tmp_path.glob("*.csv"))) == 3


def test_default_names_are_short_readable_and_distinct() -> None:
    default = Config()
    assert default_results_path(default, parse_variants(["all"])).name == "toyrl-run.csv"
    assert default_results_path(
        default, parse_variants(["dr_grpo", "grpo", "length_only", "std_only"])
    ).name == ("toyrl-run_dr_grpo+grpo+length_only+std_only.csv")
    assert default_results_path(default, parse_variants(["all"]), mean_field=True).name == (
        "toyrl-run_all,mean_field.csv"
    )
    spec = default_results_path(default, parse_variants(["advantage=rloo"])).name
    assert spec.startswith("toyrl-run_spec-") and "=" not in spec
    requests = [
        (Config(group_size=4), ["grpo"]),
        (Config(group_size=4), ["grpo", "dr_grpo"]),
        (Config(), ["grpo", "dr_grpo"]),
        (Config(steps=4), ["grpo"]),
        (Config(), ["advantage=rloo"]),
        (Config(), ["advantage=rloo,aggregation=token_mean"]),
        (Config(), ["trl_default@0.22.1"]),
    ]
    long = [f"label{i}=advantage=rloo,epsilon={0.1 + i / 100}" for i in range(16)]
    requests += [(Config(), long), (Config(), long[:-1])]
    names = [default_results_path(config, parse_variants(names)).name for config, names in requests]
    assert len(set(names)) == len(names)
    assert all(len(name) <= len("toyrl-run_.csv") + NAME_LENGTH for name in names)
    assert names[-1].count("~") == 1 and names[-2].count("~") == 1


def test_results_made_by_another_toyrl_are_made_again(
    tmp_path: Path, simulated: list[tuple[str, int]]
) -> None:
    out = tmp_path / "r.csv"
    run(out, "--variant", "grpo", "--seeds", "2")
    made = out.read_bytes()
    sidecar = out.with_suffix(".json")
    sidecar.write_text(sidecar.read_text().replace(f'"{toyrl.__version__}"', '"0.0.1"'))
    simulated.clear()
    said = run(out, "--variant", "grpo", "--seeds", "3")
    assert "r.csv: running its 3 runs again (toyrl 0.0.1 made them)" in said and len(simulated) == 3
    assert out.read_bytes()[: len(made)] == made
    # a CSV that does not match its sidecar (an interrupted write): its runs are made again
    out.write_bytes(out.read_bytes() + b"\n")
    simulated.clear()
    said = run(out, "--variant", "grpo", "--seeds", "3")
    assert "(r.csv does not match r.json)" in said and len(simulated) == 3


def test_api_save_names_the_setting_that_differs(tmp_path: Path) -> None:
    toyrl.save(toyrl.run("grpo", seeds=1, steps=6, prompts=8, batch_prompts=4), tmp_path / "r.csv")
    other = toyrl.run("grpo", seeds=1, steps=5, prompts=8, batch_prompts=4)
    with pytest.raises(InvalidInput, match=r"other settings \(steps: 6 in the file, 5 asked\)"):
        toyrl.save(other, tmp_path / "r.csv")
