"""Labels (issue 42, item 1): `label=NAME` in a spec, or `NAME=SPEC`, names a variant everywhere it
is shown or stored (the results' variant column and sidecar, tables, legends, `plot`, `bias`,
`sweep`, the Python API); a bad label, or two specs under one, is refused in one line."""

import json
from collections.abc import Iterator
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import toyrl
from toyrl.cli import app
from toyrl.config import InvalidInput
from toyrl.plugins import LOADED, unload
from toyrl.variants import LABEL_MAX, VARIANTS, parse_variant, parse_variants, saved_variant

matplotlib.use("Agg")

TINY = ["--steps", "6", "--prompts", "8", "--batch-prompts", "4"]
TINY_SETTINGS = {"steps": 6, "prompts": 8, "batch_prompts": 4}

# docs/plugins.md's normaliser with an exact hook: D_i = max(|o_i|, floor), n = N.
FLOOR_PLUGIN = """
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from toyrl.stages import declared, register

__version__ = "1.0"


@register("normaliser", "floor")
@dataclass(frozen=True)
class Floor:
    floor: float = declared(100.0, 1.0, 1e6)
    averaged: ClassVar[bool] = True

    def response_denominator(self, tokens, length_norm):
        return np.maximum(tokens, self.floor)

    def denominators(self, tokens, included, length_norm, members=None):
        every = np.ones(tokens.shape, dtype=bool) if members is None else members
        return self.response_denominator(tokens, length_norm), every.sum(axis=(-2, -1)).astype(float)
"""
MINE = "mine=advantage=none,aggregation=custom:floor,floor=100"


@pytest.fixture(autouse=True)
def no_plugin_stays_loaded() -> Iterator[None]:
    yield
    for plugin in list(LOADED.values()):
        unload(plugin)


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_the_issue_acceptance_labels_every_output_mine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`toyrl run "mine=...custom:floor,floor=100" --plugin p.py`: "mine" in the CSV, the sidecar,
    the tables, the figures' legends and final_numbers.md of `toyrl plot`, and `toyrl bias`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.py").write_text(FLOOR_PLUGIN)
    code, stdout, stderr = invoke("run", MINE, "--plugin", "p.py", "--seeds", "3", *TINY)
    assert code == 0, stderr
    [results] = tmp_path.glob("toyrl-run*.csv")
    assert results.name == "toyrl-run_mine,prompts=8,batch_prompts=4,steps=6.csv"
    frame = pd.read_csv(results)
    assert set(frame["variant"]) == {"mine"} and sorted(frame["seed"].unique()) == [0, 1, 2]
    sidecar = json.loads(results.with_suffix(".json").read_text())
    assert sidecar["variants"]["mine"]["spec"] == {"advantage": "none", "aggregation": "custom:floor"}
    assert sidecar["plugins"][0]["name"] == "p"
    table = stdout.splitlines()[1:4]
    assert table[2].split()[:2] == ["mine", "3"], stdout

    code, _, stderr = invoke("plot", str(results), "--plugin", "p.py", "--out", "figures", "-q")
    assert code == 0, stderr  # the bias figure replays "mine" from the sidecar's spec
    numbers = (tmp_path / "figures" / "final_numbers.md").read_text()
    assert "| mine | `mine` |" in numbers
    loaded = toyrl.load(results)
    figures = (toyrl.plot.length_by_correctness(loaded), toyrl.plot.accuracy(loaded))
    legends = [
        text.get_text()
        for figure in figures
        for ax in figure.axes
        for text in [*(ax.get_legend().get_texts() if ax.get_legend() else []), ax.title]
    ]
    legends += [
        text.get_text() for figure in figures for legend in figure.legends for text in legend.get_texts()
    ]
    assert "mine" in legends and not any("floor" in text for text in legends), legends

    code, data, stderr = invoke("bias", "--results", str(results), "--plugin", "p.py", "--json")
    assert code == 0, stderr
    assert [row["variant"] for row in json.loads(data)["variants"]] == ["mine"]


def test_a_label_names_the_same_runs_as_the_spec_unlabelled() -> None:
    """A label changes the name only: the same spec, stages and numbers; on a preset too."""
    spec = "advantage=none,aggregation=token_mean"
    labelled = [
        parse_variant(f"x={spec}"),
        parse_variant(f"{spec},label=x"),
        parse_variant(f"label=x, {spec}"),
    ]
    assert {v.name for v in labelled} == {"x"} and {v.spec_text() for v in labelled} == {spec}
    preset = VARIANTS["dr_grpo"]
    for text in ("x=dr_grpo", "dr_grpo,label=x", f"{preset.spec_text()},label=x"):
        variant = parse_variant(text)
        assert (variant.name, variant.spec(), variant.title) == ("x", preset.spec(), "x")
    plain = toyrl.run(spec, seeds=2, **TINY_SETTINGS)
    named = toyrl.run(f"x={spec}", seeds=2, **TINY_SETTINGS)
    assert set(named["variant"]) == {"x"}
    assert plain.drop(columns="variant").equals(named.drop(columns="variant"))
    assert named.attrs["toyrl"]["variants"]["x"]["spec"] == parse_variant(spec).spec()


def test_a_results_file_of_labels_reads_back_its_variants(tmp_path: Path) -> None:
    """`saved_variant` takes a labelled variant's spec from the sidecar; without one, the name alone
    is not a variant."""
    frame = toyrl.run(["a=dr_grpo", "advantage=rloo,label=b"], seeds=1, **TINY_SETTINGS)
    toyrl.save(frame, tmp_path / "r.csv")
    recorded = toyrl.load(tmp_path / "r.csv").attrs["toyrl"]["variants"]
    assert saved_variant("a", recorded).spec() == VARIANTS["dr_grpo"].spec()
    assert saved_variant("b", recorded).spec() == parse_variant("advantage=rloo").spec()
    assert saved_variant("b", recorded).name == "b"
    with pytest.raises(InvalidInput, match="unknown variant 'b'"):
        saved_variant("b")


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        (
            "1abc=dr_grpo",
            "label '1abc' must be 1 to 40 letters, digits, '_', '.' or '-', starting with a letter",
        ),
        ("a b=dr_grpo", "label 'a b' must be 1 to 40 letters"),
        ("advantage=none,label=a/b", "label 'a/b' must be 1 to 40 letters"),
        ("advantage=none,label=", "label '' must be 1 to 40 letters"),
        ("=dr_grpo", "label '' must be 1 to 40 letters"),
        (f"{'x' * (LABEL_MAX + 1)}=dr_grpo", "must be 1 to 40 letters"),
        ("grpo=advantage=none", "label 'grpo' is already a named variant's name"),
        ("advantage=none,label=all", "label 'all' is already a named variant's name"),
        ("GRPO=advantage=none", "label 'GRPO' is already a named variant's name or display text"),
        ("advantage=none,label=epsilon", "label 'epsilon' is a spec key"),
        ("x=dr_grpo,label=y", "is given 2 labels (y, x); give one"),
        ("label=x", "label 'x' names no variant"),
    ],
)
def test_a_bad_label_is_refused_in_one_line(variant: str, message: str, tmp_path: Path) -> None:
    code, stdout, stderr = invoke("run", "--variant", variant, "--out", str(tmp_path / "r.csv"), *TINY)
    assert code == 2 and stdout == "" and stderr.count("\n") == 1, stderr
    assert stderr.startswith("toyrl: error: ") and message in stderr
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InvalidInput, match="label"):
        toyrl.run(variant, seeds=1, **TINY_SETTINGS)


def test_two_specs_under_one_label_are_refused_naming_both(tmp_path: Path) -> None:
    words = "two variants are named 'a': advantage=group_std,aggregation=seq_mean_token_mean and "
    words += "advantage=none,aggregation=seq_mean_token_sum_norm; give each its own label"
    for args in (
        ["--variant", "a=grpo", "--variant", "a=dr_grpo"],
        ["a=grpo", "--variant", "advantage=none,aggregation=seq_mean_token_sum_norm,label=a"],
    ):
        code, _, stderr = invoke("run", *args, "--out", str(tmp_path / "r.csv"), *TINY)
        assert code == 2 and stderr == f"toyrl: error: {words}\n"
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(InvalidInput, match=words):
        toyrl.run(["a=grpo", "a=dr_grpo"], seeds=1, **TINY_SETTINGS)
    with pytest.raises(InvalidInput, match=words):
        parse_variants(["a=grpo", "a=dr_grpo"])
    # one label given twice for one spec is one variant, as a name given twice is
    assert [v.name for v in parse_variants(["a=dr_grpo", "dr_grpo,label=a", "dr_grpo"])] == ["a", "dr_grpo"]


def test_labels_name_a_sweeps_variants_and_the_exact_update(tmp_path: Path) -> None:
    code, _, stderr = invoke(
        "sweep", "--out-dir", str(tmp_path / "s"), "--variant", "short=dr_grpo", "--variant",
        "advantage=group_std,aggregation=token_mean,label=tm", "--seeds", "1", *TINY, "-q",
    )  # fmt: skip
    assert code == 0, stderr
    assert list(dict.fromkeys(pd.read_csv(tmp_path / "s" / "results.csv")["variant"])) == ["short", "tm"]
    update = toyrl.expected_update(["short=dr_grpo", "dr_grpo"])
    assert list(update.index) == ["short", "dr_grpo", "grad J"]
    assert np.array_equal(update.loc["short"].to_numpy(), update.loc["dr_grpo"].to_numpy())
