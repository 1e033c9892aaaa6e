"""The pieces every trainer's reading shares: how a launch command names its trainer (`Entry`),
the configuration files it names (found from where the command runs), TOML, and Python read from
a Jupyter notebook's code cells."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from toyrl.config import InvalidInput
from toyrl.trainers import Entry
from toyrl.trainers.pyconfig import notebook_source, read_python
from toyrl.trainers.reading import _find


@pytest.mark.parametrize(
    "entry, words, first",
    [
        (Entry(program=("swift", "rlhf")), ["swift", "rlhf", "--loss_type", "grpo"], 2),
        (Entry(program=("swift", "rlhf")), ["/usr/bin/swift", "rlhf", "--a", "1"], 2),
        (Entry(program=("swift", "rlhf")), ["swift", "sft", "--a", "1"], None),
        (Entry(program=("rl",)), ["uv", "run", "rl", "@", "rl.toml"], 3),
        (Entry(module="verl.trainer.main"), ["python3", "-m", "verl.trainer.main", "config=a.yaml"], 3),
        (Entry(module="verl.trainer.main"), ["python3", "-m", "verl.trainer.main_ppo", "a=1"], None),
        (Entry(module="verl.trainer.main"), ["python3", "verl/trainer/main.py", "a=1"], 2),
        (Entry(module="areal.launcher.*"), ["python3", "-m", "areal.launcher.local", "x.py"], 3),
        (Entry(module="areal.launcher.*"), ["python3", "-m", "areal.api.cli_args"], None),
        (
            Entry(script="run_grpo*.py"),
            ["uv", "run", "python", "examples/run_grpo_math.py", "--config", "c"],
            4,
        ),
        (Entry(script="run_grpo*.py"), ["python", "examples/run_sft.py"], None),
    ],
)
def test_an_entry_names_where_its_arguments_start(entry: Entry, words: list[str], first: int | None) -> None:
    found = [entry.starts(words, i) for i in range(len(words))]
    hits = [start for start in found if start is not None]
    assert (hits[0] if hits else None) == first


def test_a_configuration_file_is_found_from_where_the_command_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As given from the current folder first; else from the script's folder or one above it,
    where a repository's examples name files from its root."""
    repository = tmp_path / "repo"
    (repository / "examples" / "configs").mkdir(parents=True)
    config = repository / "examples" / "configs" / "grpo.yaml"
    config.write_text("a: 1\n")
    scripts = repository / "examples" / "scripts"
    scripts.mkdir()
    monkeypatch.chdir(tmp_path)
    assert _find("examples/configs/grpo.yaml", scripts, "run.sh").resolve() == config.resolve()
    monkeypatch.chdir(repository)
    assert _find("examples/configs/grpo.yaml", Path("elsewhere"), "run.sh") == Path(
        "examples/configs/grpo.yaml"
    )
    with pytest.raises(InvalidInput, match=r"run.sh: its configuration file configs/none.yaml is not found"):
        _find("configs/none.yaml", scripts, "run.sh")


def _notebook(*cells: tuple[str, str]) -> str:
    return json.dumps(
        {"cells": [{"cell_type": kind, "source": source.splitlines(keepends=True)} for kind, source in cells]}
    )


def test_a_notebook_s_code_cells_are_read_as_python_and_its_shell_lines_are_not() -> None:
    text = _notebook(
        ("markdown", "# GRPO with `GRPOConfig(loss_type='bnpo')` in prose"),
        ("code", "%%capture\n!pip install unsloth\nif True:\n    !nvidia-smi\n"),
        ("code", "from unsloth import FastLanguageModel\nfrom trl import GRPOConfig\n"),
        ("code", "args = GRPOConfig(\n    loss_type='dr_grpo',\n    beta=0.0,\n)\n"),
    )
    source = notebook_source(text, "nb.ipynb")
    assert "!" not in source and "%" not in source and "prose" not in source
    trainer, settings, _ = read_python(source, "nb.ipynb")
    assert settings == {"loss_type": "dr_grpo", "beta": 0.0}
    # trl's GRPOConfig in a source that imports unsloth is Unsloth's
    assert trainer == ("unsloth" if _unsloth_modelled() else "trl")


def test_trl_s_grpoconfig_without_unsloth_stays_trl_s() -> None:
    trainer, _, _ = read_python("from trl import GRPOConfig\nGRPOConfig(loss_type='grpo')\n", "x.py")
    assert trainer == "trl"


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "nb.ipynb: not a Jupyter notebook (not valid JSON"),
        ("[1, 2]", "nb.ipynb: not a Jupyter notebook (no list of cells)"),
        ('{"cells": 3}', "nb.ipynb: not a Jupyter notebook (no list of cells)"),
    ],
)
def test_what_is_not_a_notebook_is_one_line(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match="^" + re.escape(message)):
        notebook_source(text, "nb.ipynb")


def _unsloth_modelled() -> bool:
    from toyrl.trainers import registry

    return "unsloth" in registry()


def test_a_file_s_interpolation_takes_the_command_s_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launch line's overrides are over its configuration file before `${...}` is resolved, as
    Hydra and OmegaConf compose them: AReaL's `group_size: ${gconfig.n_samples}` follows the
    command's `gconfig.n_samples`, not the file's."""
    from toyrl.trainers.check import resolve_input

    (tmp_path / "grpo.yaml").write_text(
        "gconfig:\n  n_samples: 4\nactor:\n  reward_norm:\n    mean_level: group\n    std_level: group\n"
        "    group_size: ${gconfig.n_samples}\n"
    )
    monkeypatch.chdir(tmp_path)
    command = ["python3", "-m", "areal.launcher.local", "gsm8k_rl.py", "--config", "grpo.yaml"]
    resolved = resolve_input([*command, "gconfig.n_samples=8"], None, {})
    assert resolved.trainer.name == "AReaL"
    assert (resolved.values["gconfig.n_samples"], resolved.values["actor.reward_norm.group_size"]) == (8, 8)
    resolved = resolve_input(command, None, {})
    assert (resolved.values["gconfig.n_samples"], resolved.values["actor.reward_norm.group_size"]) == (4, 4)


def test_a_file_whose_own_keys_fit_no_trainer_is_read_with_what_it_inherits(tmp_path: Path) -> None:
    """NeMo-RL's child configurations (grpo_rm_1B.yaml) change only keys other trainers have too
    (`cluster.*`, `data.*`); read through their `defaults:`, their keys are NeMo-RL's."""
    from toyrl.trainers.check import resolve_input

    (tmp_path / "base.yaml").write_text(
        "grpo:\n  normalize_rewards: false\nloss_fn:\n  token_level_loss: true\n"
    )
    child = tmp_path / "child.yaml"
    child.write_text(
        "defaults: base.yaml\ncluster:\n  gpus_per_node: 8\ndata:\n  max_input_seq_length: 1024\n"
    )
    resolved = resolve_input([str(child)], None, {})
    assert resolved.trainer.name == "NeMo-RL" and resolved.values["grpo.normalize_rewards"] is False
    (tmp_path / "alone.yaml").write_text(
        "cluster:\n  gpus_per_node: 8\ndata:\n  max_input_seq_length: 1024\n"
    )
    with pytest.raises(InvalidInput, match="several trainers' alike"):
        resolve_input([str(tmp_path / "alone.yaml")], None, {})
