"""`toyrl sweep`: sweeps that grow (seeds, grid values, variants) and grids over stage parameters."""

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.config import Config, InvalidInput
from toyrl.experiment import simulate_runs
from toyrl.objective import parse_spec
from toyrl.plugins import LOADED, unload
from toyrl.sweep import parse_grid, run_sweep
from toyrl.variants import VARIANTS

from .files import assert_identical_files

SMALL = ["--steps", "30", "--prompts", "8", "--batch-prompts", "4"]
K2 = '''from dataclasses import dataclass

from toyrl.stages import declared, register

__version__ = "1.0"


@register("kl", "k2_growth")
@dataclass(frozen=True)
class K2:
    """beta k2 per token, k2 = (log pi - log pi_ref)^2 / 2, to the initial policy."""

    beta: float = declared(0.0, 0.0, 1e6, high_open=True)

    def loss(self, ratio, log_ref_ratio):
        return log_ref_ratio

    def token_advantages(self, advantage, old, ref, batch, counts):
        return None
'''


@pytest.fixture
def k2(tmp_path: Path) -> Iterator[Path]:
    """Where to write the plugin; it is unloaded after the test, as other tests check the registries."""
    yield tmp_path / "k2.py"
    for plugin in list(LOADED.values()):
        unload(plugin)


def sweep(folder: Path, *args: str):
    result = CliRunner().invoke(app, ["sweep", "--out-dir", str(folder), *args, *SMALL])
    return result


def run_files(folder: Path) -> dict[str, tuple[bytes, int]]:
    """Each run file's bytes and inode: a file rewritten, even with the same bytes, has another."""
    return {path.name: (path.read_bytes(), path.stat().st_ino) for path in (folder / "runs").glob("*.csv")}


def test_a_grown_sweep_runs_only_the_new_runs_and_equals_a_fresh_one(tmp_path: Path) -> None:
    """2 variants x 2 grid points x 3 seeds, grown to 5 seeds and a third point: 2 x 3 x 5 - 12 = 18
    runs run, the 12 finished ones untouched, and the tables a fresh sweep's, byte for byte."""
    variants = ["--variant", "grpo", "--variant", "dr_grpo"]
    grown = tmp_path / "grown"
    first = sweep(grown, *variants, "--grid", "group_size=4,8", "--seeds", "3")
    assert first.exit_code == 0, first.output
    before = run_files(grown)
    assert len(before) == 12
    again = sweep(grown, *variants, "--grid", "group_size=4,8,16", "--seeds", "5")
    assert again.exit_code == 0, again.output
    assert "toyrl sweep: 12 runs reused, 18 to run\n" in again.stderr
    assert "toyrl sweep: 12 runs reused, 18 run in " in again.stderr
    after = run_files(grown)
    assert len(after) == 30 and {name: after[name] for name in before} == before
    manifest = json.loads((grown / "sweep.json").read_text())
    assert manifest["grid"] == {"group_size": [4, 8, 16]} and manifest["seeds"] == [0, 1, 2, 3, 4]
    fresh = tmp_path / "fresh"
    whole = sweep(fresh, *variants, "--grid", "group_size=4,8,16", "--seeds", "5")
    assert whole.exit_code == 0 and "toyrl sweep: 0 runs reused, 30 to run\n" in whole.stderr
    for name in ("results.csv", "final.csv"):
        assert_identical_files(grown / name, fresh / name)
    assert len(pd.read_csv(grown / "results.csv")) == 30 * 31


def test_the_first_command_again_keeps_the_grown_sweep(tmp_path: Path) -> None:
    """A command that gives less than the folder's sweep runs nothing and keeps its tables: the
    sweep grows, it never shrinks; a variant added alone is added."""
    folder = tmp_path / "s"
    assert sweep(folder, "--variant", "grpo", "--seeds", "2").exit_code == 0
    assert sweep(folder, "--variant", "grpo", "--seeds", "3").exit_code == 0
    tables = {name: (folder / name).read_bytes() for name in ("results.csv", "final.csv")}
    same = sweep(folder, "--variant", "grpo", "--seeds", "2")
    assert same.exit_code == 0 and "toyrl sweep: 3 runs reused, 0 to run\n" in same.stderr
    assert {name: (folder / name).read_bytes() for name in tables} == tables
    added = sweep(folder, "--variant", "dr_grpo", "--seeds", "3")
    assert added.exit_code == 0 and "toyrl sweep: 3 runs reused, 3 to run\n" in added.stderr
    results = pd.read_csv(folder / "results.csv")
    assert list(dict.fromkeys(results.variant)) == ["dr_grpo", "grpo"]  # the command's first
    assert sorted(set(results.seed)) == [0, 1, 2]


def test_a_new_axis_needs_the_value_of_the_finished_runs(tmp_path: Path) -> None:
    """The finished runs were made at the base lr, 0.02: an lr axis without it is refused, naming it;
    with it, they are that point's runs. A setting of the finished runs that differs is refused."""
    folder = tmp_path / "s"
    assert sweep(folder, "--variant", "grpo", "--seeds", "2").exit_code == 0
    manifest = (folder / "sweep.json").read_bytes()
    before = run_files(folder)
    refused = sweep(folder, "--variant", "grpo", "--seeds", "2", "--grid", "lr=0.01,0.03")
    assert refused.exit_code == 2 and refused.stderr == (
        f"toyrl: error: --grid lr is a new axis; the sweep in {folder} has its runs at lr=0.02; give "
        "--grid lr with 0.02 among its values, or use another --out-dir, or --force to replace it\n"
    )
    other = sweep(folder, "--variant", "grpo", "--seeds", "2", "--prompt-logit-std", "0.5")
    assert other.exit_code == 2 and "--prompt-logit-std is 0.5 here but 1.0 in the sweep in" in other.stderr
    assert (folder / "sweep.json").read_bytes() == manifest and run_files(folder) == before
    grown = sweep(folder, "--variant", "grpo", "--seeds", "2", "--grid", "lr=0.01,0.02")
    assert grown.exit_code == 0 and "toyrl sweep: 2 runs reused, 2 to run\n" in grown.stderr
    dropped = sweep(folder, "--variant", "grpo", "--seeds", "2", "--lr", "0.05")  # the axis left out
    assert dropped.exit_code == 2 and dropped.stderr == (
        f"toyrl: error: the sweep in {folder} grids lr over 0.01, 0.02; this command has its runs at "
        "lr=0.05; give --grid lr with 0.05 to add it, or use another --out-dir, or --force to replace it\n"
    )
    assert sweep(folder, "--variant", "grpo", "--seeds", "2").exit_code == 0  # lr=0.02: one of its values
    assert {name: run_files(folder)[name] for name in before} == before
    results = pd.read_csv(folder / "results.csv")
    alone = simulate_runs(Config(steps=30, prompts=8, batch_prompts=4), [(VARIANTS["grpo"], 1)])
    mine = results[(results.lr == 0.02) & (results.seed == 1)].drop(columns="lr").reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, alone, check_exact=True, check_dtype=False)


def test_a_variant_renamed_to_another_spec_or_a_changed_plugin_is_refused(tmp_path: Path, k2: Path) -> None:
    k2.write_text(K2)
    folder = tmp_path / "s"
    mine = "mine=advantage=group_std,aggregation=token_mean,kl=custom:k2_growth,beta=0.04"
    plugin = ["--plugin", str(k2)]
    assert sweep(folder, *plugin, "--variant", mine, "--seeds", "1").exit_code == 0
    renamed = sweep(
        folder, *plugin, "--variant", "mine=advantage=rloo,aggregation=token_mean", "--seeds", "1"
    )
    assert renamed.exit_code == 2 and renamed.stderr.startswith(
        "toyrl: error: variant 'mine' is advantage=rloo,aggregation=token_mean here but "
        "advantage=group_std,aggregation=token_mean,kl=custom:k2_growth,beta=0.04 in the sweep in"
    )
    k2.write_text(K2 + "# tuned\n")
    changed = sweep(folder, *plugin, "--variant", mine, "--seeds", "2")
    assert changed.exit_code == 2 and changed.stderr.startswith(
        "toyrl: error: plugin k2's source is not the one the sweep in"
    )
    assert len(run_files(folder)) == 1


def test_a_grid_over_a_stage_parameter(tmp_path: Path) -> None:
    """advantage.std_eps sets grpo's advantage at each point, as its spec would; dr_grpo's advantage
    has no std_eps: it is left unchanged, said so, and its runs are shared by the points."""
    folder = tmp_path / "s"
    args = [
        "--variant",
        "grpo",
        "--variant",
        "dr_grpo",
        "--seeds",
        "2",
        "--grid",
        "advantage.std_eps=0.001,0.5",
    ]
    result = sweep(folder, *args)
    assert result.exit_code == 0, result.output
    assert "--grid advantage.std_eps leaves dr_grpo unchanged (no stage of theirs has it)" in result.stderr
    assert "toyrl sweep: 0 runs reused, 6 run in " in result.stderr  # 2 x 2 of grpo's, 2 of dr_grpo's
    assert len(run_files(folder)) == 6
    results = pd.read_csv(folder / "results.csv")
    assert list(results.columns[:2]) == ["variant", "advantage.std_eps"]
    config = Config(steps=30, prompts=8, batch_prompts=4)
    spelled = parse_spec("advantage=group_std,aggregation=seq_mean_token_mean,std_eps=0.5")
    alone = simulate_runs(config, [(spelled, 1)]).assign(variant="grpo")
    chosen = results[
        (results.variant == "grpo") & (results["advantage.std_eps"] == 0.5) & (results.seed == 1)
    ]
    mine = chosen.drop(columns="advantage.std_eps").reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, alone, check_exact=True, check_dtype=False)
    at_small = results[(results.variant == "grpo") & (results["advantage.std_eps"] == 0.001)]
    assert not at_small.accuracy.reset_index(drop=True).equals(chosen.accuracy.reset_index(drop=True))
    dr = results[results.variant == "dr_grpo"].groupby("advantage.std_eps")
    first, second = (group.drop(columns="advantage.std_eps").reset_index(drop=True) for _, group in dr)
    pd.testing.assert_frame_equal(first, second, check_exact=True)
    final = pd.read_csv(folder / "final.csv")
    assert list(final.columns[:2]) == ["variant", "advantage.std_eps"] and len(final) == 4


def test_a_stage_axis_by_its_spec_key_and_a_plugins_parameter(tmp_path: Path, k2: Path) -> None:
    """`beta=...` as a spec spells it sets the plugin's KL term; growing by a value runs only it."""
    k2.write_text(K2)
    folder = tmp_path / "s"
    plugin = ["--plugin", str(k2)]
    spec = "advantage=group_std,aggregation=token_mean,kl=custom:k2_growth,beta=0.04,num_iterations=2"
    first = sweep(folder, *plugin, "--variant", spec, "--seeds", "1", "--grid", "beta=0.04")
    assert first.exit_code == 0, first.output
    grown = sweep(folder, *plugin, "--variant", spec, "--seeds", "1", "--grid", "beta=0.04,0.5")
    assert grown.exit_code == 0 and "toyrl sweep: 1 runs reused, 1 to run\n" in grown.stderr
    results = pd.read_csv(folder / "results.csv")
    assert list(results.beta.unique()) == [0.04, 0.5]
    config = Config(steps=30, prompts=8, batch_prompts=4)
    alone = simulate_runs(config, [(parse_spec(spec.replace("0.04", "0.5")), 0)])
    alone = alone.assign(variant=parse_spec(spec).name)  # the variant's name: its canonical spec
    mine = results[results.beta == 0.5].drop(columns="beta").reset_index(drop=True)
    pd.testing.assert_frame_equal(mine, alone, check_exact=True, check_dtype=False)


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        (["alpah=0,1"], "--grid 'alpah=0,1': unknown field 'alpah' (did you mean 'alpha'?); valid: "),
        (["normaliser.epsilon=0.1"], "unknown field 'normaliser.epsilon' (did you mean 'epsilon'?)"),
        (
            ["aggregation=token_mean"],
            "unknown field 'aggregation' (a stage is chosen by --variant, not --grid)",
        ),
        (
            ["advantage.std_eps=0.1,1"],
            "--grid advantage.std_eps: grpo: std_eps must be a number in [0, 1) or None (got 1.0)",
        ),
        (["advantage.std_eps=x"], "--grid 'advantage.std_eps=x': std_eps must be a number (got 'x')"),
        (["advantage.std_eps=none"], "'none' (no value) cannot be a grid value"),
        (["alpha=0.5"], "--grid 'alpha=0.5': no variant's stages have alpha (variants: grpo, dr_grpo)"),
        (
            ["epsilon=0.1", "objective.epsilon=0.3"],
            "--grid epsilon and --grid objective.epsilon both set grpo's",
        ),
        (
            ["aggregation.alpha=0.5"],
            "--grid 'aggregation.alpha=0.5': no variant's stages have alpha (variants: grpo, dr_grpo)",
        ),
    ],
)
def test_a_bad_stage_axis_is_one_line_before_anything(tmp_path: Path, axes: list[str], message: str) -> None:
    variants = [VARIANTS["grpo"], VARIANTS["dr_grpo"]]
    with pytest.raises(InvalidInput, match=None) as error:
        parse_grid(axes, Config(), variants)
    assert message in str(error.value) and "\n" not in str(error.value)
    grid = [part for axis in axes for part in ("--grid", axis)]
    result = sweep(tmp_path / "s", "--variant", "grpo", "--variant", "dr_grpo", *grid)
    assert result.exit_code == 2 and result.stderr == f"toyrl: error: {error.value}\n"
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(
    ("variant", "value", "message"),
    [
        ("dr_grpo", 0.1, "--grid advantage.std_eps: no variant's stages have it (variants: dr_grpo)"),
        ("grpo", 2.0, "--grid advantage.std_eps: grpo: std_eps must be a number in [0, 1) or None (got 2.0)"),
    ],
)
def test_run_sweep_checks_a_grid_it_is_given(
    tmp_path: Path, variant: str, value: float, message: str
) -> None:
    """The Python API, given a grid not read by parse_grid, checks it as parse_grid does."""
    config = Config(steps=5, prompts=8, batch_prompts=4)
    with pytest.raises(InvalidInput) as error:
        run_sweep(tmp_path / "s", [VARIANTS[variant]], {"advantage.std_eps": [value]}, [0], config)
    assert str(error.value) == message
    assert not (tmp_path / "s").exists()


def test_a_new_stage_axis_holding_each_variants_own_value_reuses_its_runs(tmp_path: Path) -> None:
    """grpo's clip epsilon is 0.2: an epsilon axis over 0.2 and 0.3 reuses the finished runs as its
    0.2 point; std_eps is None in grpo's spec, which no grid holds: that new axis is refused."""
    folder = tmp_path / "s"
    args = ["--variant", "grpo", "--seeds", "2"]
    assert sweep(folder, *args).exit_code == 0
    before = run_files(folder)
    refused = sweep(folder, *args, "--grid", "advantage.std_eps=0.1")
    assert refused.exit_code == 2 and refused.stderr == (
        f"toyrl: error: --grid advantage.std_eps is a new axis; the sweep in {folder} has grpo's runs at "
        "advantage.std_eps=None; no grid holds None; use another --out-dir, or --force to replace it\n"
    )
    grown = sweep(folder, *args, "--grid", "epsilon=0.3,0.2")
    assert grown.exit_code == 0 and "toyrl sweep: 2 runs reused, 2 to run\n" in grown.stderr
    assert {name: run_files(folder)[name] for name in before} == before
    assert list(pd.read_csv(folder / "results.csv").epsilon.unique()) == [0.3, 0.2]
