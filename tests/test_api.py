"""The Python API (`toyrl.run`, `toyrl.plot`, `toyrl.expected_update`, `toyrl.check`, `save`/`load`)
gives what the commands give: the same bytes of results and figures, the same numbers, the same
refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import toyrl
from toyrl.cli import app
from toyrl.config import ConfigError, InvalidInput

TINY = {"steps": 12, "prompts": 8, "batch_prompts": 4}
TINY_FLAGS = ["--steps", "12", "--prompts", "8", "--batch-prompts", "4"]


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_run_then_save_writes_the_bytes_toyrl_run_writes(tmp_path: Path) -> None:
    code, _, err = invoke(
        "run", "--variant", "grpo", "--variant", "dr_grpo", "--seeds", "2", "-q",
        "--out", str(tmp_path / "cli.csv"), *TINY_FLAGS,
    )  # fmt: skip
    assert code == 0, err
    frame = toyrl.run(["grpo", "dr_grpo"], seeds=2, **TINY)
    assert frame.attrs["toyrl"]["config"]["steps"] == 12
    assert frame.attrs["toyrl"]["seeds"] == [0, 1]
    toyrl.save(frame, tmp_path / "api.csv")
    assert (tmp_path / "api.csv").read_bytes() == (tmp_path / "cli.csv").read_bytes()
    assert (tmp_path / "api.json").read_bytes() == (tmp_path / "cli.json").read_bytes()


def test_seeds_as_a_list_and_a_variant_spec(tmp_path: Path) -> None:
    frame = toyrl.run("advantage=rloo,aggregation=token_mean", seeds=[3, 5], **TINY)
    assert sorted(set(frame["seed"])) == [3, 5]
    assert len(frame) == 2 * (TINY["steps"] + 1)
    one = toyrl.run("advantage=rloo,aggregation=token_mean", seeds=[5], **TINY)
    fives = frame[frame["seed"] == 5].reset_index(drop=True)
    pd.testing.assert_frame_equal(fives, one, check_exact=True)


def test_load_gives_back_the_saved_table_and_its_configuration(tmp_path: Path) -> None:
    frame = toyrl.run("dr_grpo", seeds=1, **TINY)
    toyrl.save(frame, tmp_path / "r.csv")
    loaded = toyrl.load(tmp_path / "r.csv")
    pd.testing.assert_frame_equal(loaded, frame, check_exact=True)
    assert loaded.attrs["toyrl"]["config"] == frame.attrs["toyrl"]["config"]
    assert loaded.attrs["toyrl"]["variants"] == frame.attrs["toyrl"]["variants"]


def test_save_keeps_results_of_other_settings_unless_forced(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    toyrl.save(toyrl.run("dr_grpo", seeds=1, **TINY), path)
    before = path.read_bytes()
    other = toyrl.run("grpo", seeds=1, **TINY)
    with pytest.raises(InvalidInput, match="other settings"):
        toyrl.save(other, path)
    assert path.read_bytes() == before
    toyrl.save(other, path, force=True)
    assert path.read_bytes() != before
    with pytest.raises(InvalidInput, match="no configuration"):
        toyrl.save(pd.DataFrame({"step": [0]}), tmp_path / "bare.csv")


def test_plot_save_writes_the_figures_toyrl_plot_writes(tmp_path: Path) -> None:
    """A script's `toyrl.run` + `toyrl.plot.save` against `toyrl run` + `toyrl plot`: the frame in
    memory and the one read back from the CSV and its sidecar draw the same bytes."""
    code, _, err = invoke("run", "--seeds", "2", "-q", "--out", str(tmp_path / "cli.csv"), *TINY_FLAGS)
    assert code == 0, err
    code, _, err = invoke("plot", str(tmp_path / "cli.csv"), "--out", str(tmp_path / "cli"), "-q")
    assert code == 0, err
    frame = toyrl.run("all", seeds=2, **TINY)
    written = toyrl.plot.save(frame, tmp_path / "api")
    names = sorted(path.name for path in written)
    assert names == sorted(path.name for path in (tmp_path / "cli").iterdir())
    assert {"length_2x2.png", "length_by_correctness.svg", "bias.png", "final_numbers.md"} <= set(names)
    for name in names:
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name


def test_plot_functions_return_figures_of_the_frame() -> None:
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    frame = toyrl.run("all", seeds=1, **TINY)
    for draw in (toyrl.plot.length_by_correctness, toyrl.plot.length_2x2, toyrl.plot.branch_lengths):
        figure = draw(frame)
        assert isinstance(figure, Figure)
        assert len([ax for ax in figure.axes if ax.get_visible()]) >= 2
        plt.close(figure)
    figure = toyrl.plot.accuracy(frame)
    assert isinstance(figure, Figure)
    plt.close(figure)


def test_expected_update_matches_toyrl_bias_and_shows_grpo_lengthening_wrong_answers() -> None:
    code, out, err = invoke("bias", "--json")
    assert code == 0, err
    rows = {row["variant"]: row for row in json.loads(out)["variants"]}
    table = toyrl.expected_update("all")
    assert list(table.index) == ["grpo", "std_only", "length_only", "dr_grpo", "grad J"]
    for name, row in rows.items():
        assert table.loc[name, "cosine"] == row["cosine"]
        assert table.loc[name, "stop_logit_right"] == row["phi_right"]
        assert table.loc[name, "stop_logit_wrong"] == row["phi_wrong"]
        assert table.loc["grad J", "stop_logit_right"] == row["true_phi_right"]
    # The article's lesson: the per-response mean lowers the wrong approach's stop logit (longer
    # wrong answers); a constant normaliser leaves it where grad J does, at 0.
    assert table.loc["grpo", "stop_logit_wrong"] < 0
    assert table.loc["grpo", "stop_logit_wrong_share"] > 0.1
    assert table.loc["dr_grpo", "stop_logit_wrong_share"] < 1e-20
    assert table.loc["grad J", "stop_logit_wrong"] == 0


def test_expected_update_at_a_given_policy() -> None:
    initial = toyrl.expected_update("grpo", seed=3)
    theta = np.zeros(64 + 2)
    theta[-2:] = [-5.0, -6.5]
    there = toyrl.expected_update("grpo", theta=theta)
    assert not np.array_equal(initial.loc["grpo"].to_numpy(), there.loc["grpo"].to_numpy())
    with pytest.raises(InvalidInput, match="theta must hold 66 finite numbers"):
        toyrl.expected_update("grpo", theta=[0.0, 1.0])
    with pytest.raises(InvalidInput, match="no exact expected update"):
        toyrl.expected_update("gfpo")


def test_check_gives_the_verdict_toyrl_check_gives(tmp_path: Path) -> None:
    settings = tmp_path / "grpo.json"
    settings.write_text(json.dumps({"loss_type": "grpo", "num_generations": 8}))
    code, out, err = invoke("check", str(settings), "--trainer", "trl", "--seeds", "2", "--json", *TINY_FLAGS)
    assert code == 0, err
    result = toyrl.check(settings, trainer="trl", seeds=2, **TINY)
    assert result.verdict() == json.loads(out)["verdict"]
    assert str(result).splitlines()[-2].startswith("to Dr. GRPO:")
    half = toyrl.check(trainer="trl", settings={"loss_type": "dr_grpo"}, seeds=2, **TINY)
    assert half.fix == {"scale_rewards": "none"}  # TRL scales by the group's std by default
    fixed = toyrl.check(trainer="trl", settings={"loss_type": "dr_grpo", **half.fix}, seeds=2, **TINY)
    assert "Dr. GRPO itself" in fixed.verdict()


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: toyrl.run("grpo", seeds=1, stepz=3),
            InvalidInput,
            "unknown setting 'stepz'; Config's fields",
        ),
        (
            lambda: toyrl.run("grpo", seeds=0),
            InvalidInput,
            r"seeds must be an integer in 1\.\.1,000,000 \(got 0\)",
        ),
        (lambda: toyrl.run([], seeds=1), InvalidInput, "no variants given"),
        (lambda: toyrl.run("grpo", seeds=1, group_size=1), ConfigError, "group_size"),
        (lambda: toyrl.run("nonsense", seeds=1), InvalidInput, "nonsense"),
        (lambda: toyrl.check(), InvalidInput, "nothing to check"),
        (
            lambda: toyrl.check(trainer="trl", seeds=1),
            InvalidInput,
            r"seeds must be an integer in 2\.\.10,000 \(a standard error needs two\)",
        ),
    ],
)
def test_bad_input_is_refused_in_one_line(call: object, error: type, message: str) -> None:
    with pytest.raises(error, match=message) as raised:
        call()  # type: ignore[operator]
    assert "\n" not in str(raised.value)


def test_import_toyrl_does_not_import_matplotlib_until_plot_is_used() -> None:
    import subprocess
    import sys

    code = (
        "import sys, toyrl\n"
        "assert 'matplotlib' not in sys.modules and 'pandas' not in sys.modules\n"
        "toyrl.plot\n"
        "assert 'matplotlib' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_docs_api_is_what_its_script_writes_from_the_docstrings() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    result = subprocess.run(
        [sys.executable, str(root / "scripts" / "api_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
