"""`toyrl check`'s readers of launch commands and scripts (toyrl.trainers.shell, .launch, .reading):
every launch form of verl, TRL and OpenRLHF, as a file and after --, read with real grammars (bash's,
Hydra's), never run; what a script leaves unknown named; bad input one line."""

from __future__ import annotations

import json
import string
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_check import SMALL, invoke
from toyrl.config import InvalidInput
from toyrl.trainers import Unresolved
from toyrl.trainers.reading import read_input

pytest.importorskip("tree_sitter_bash")
pytest.importorskip("hydra")

ACTOR = "actor_rollout_ref.actor."


def _script(tmp_path: Path, text: str, name: str = "run.sh") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (
            ["python", "-m", "openrlhf.cli.train_ppo_ray", "--a", "1", "--b=2", "--flag"],
            {"a": "1", "b": "2", "flag": True},
        ),
        (
            ["deepspeed", "--module", "openrlhf.cli.train_ppo_ray", "--reward.clip_range", "-10", "10"],
            {"reward.clip_range": ["-10", "10"]},
        ),
        (["python3", "/src/openrlhf/cli/train_ppo_ray.py", "--a", "1", "--a", "3"], {"a": "3"}),
        (["trl", "grpo", "--loss_type", "dr_grpo", "--use_vllm", "--epsilon=0.3"], None),
    ],
)
def test_flags_are_read_as_argparse_reads_them(tokens: list[str], expected: dict | None) -> None:
    read = read_input(tokens)
    if expected is None:
        assert read.trainer == "trl"
        assert read.settings == {"loss_type": "dr_grpo", "use_vllm": True, "epsilon": "0.3"}
    else:
        assert read.trainer == "openrlhf" and read.settings == expected


def test_a_shell_script_s_variables_comments_and_pipes(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "#!/bin/bash\nset -x\nN=8\nexport EST=dr_grpo\n# python -m openrlhf.cli.train_ppo_ray --x 1\n"
        "deepspeed --module openrlhf.cli.train_ppo_ray \\\n  --rollout.n_samples_per_prompt $N \\\n"
        "  --algo.advantage.estimator ${EST} \\\n  --train.async_enable 2>&1 | tee log.txt\n",
    )
    read = read_input([str(script)])
    assert read.origin == f"{script}, line 6: openrlhf.cli.train_ppo_ray"
    assert read.settings == {
        "rollout.n_samples_per_prompt": "8",
        "algo.advantage.estimator": "dr_grpo",
        "train.async_enable": True,
    }


def test_arrays_defaults_arithmetic_and_quoting(tmp_path: Path) -> None:
    """Arrays spread quoted and unquoted, comments inside them, `${X:-default}`, `$((...))` as bash
    computes it (integer division towards zero), `+=`, single and double quotes, `ray job submit --`."""
    script = _script(
        tmp_path,
        "BASE=${WORK:-/w}\nN=$(( (7 - 10) / 2 + 10 ))\nARGS=(\n  --rollout.batch_size 16\n"
        "  # --rollout.batch_size 99\n  --data.input_key 'a b'\n)\nARGS+=(--train.batch_size 32)\n"
        'NAME="x y"\nray job submit --address="http://127.0.0.1:8265" \\\n'
        "  -- python3 -m openrlhf.cli.train_ppo_ray \\\n"
        '  "${ARGS[@]}" --rollout.n_samples_per_prompt $N --ckpt.path "$BASE/ckpt" --logger.name $NAME\n',
    )
    read = read_input([str(script)])
    assert read.settings == {
        "rollout.batch_size": "16",
        "data.input_key": "a b",
        "train.batch_size": "32",
        "rollout.n_samples_per_prompt": "9",
        "ckpt.path": "/w/ckpt",
        "logger.name": ["x", "y"],  # unquoted: split into two words
    }


def test_what_a_script_leaves_unknown_is_named_and_the_default_taken(tmp_path: Path) -> None:
    """A variable the script never sets, one set under a condition, a command's output and `$@`:
    the settings depending on them are named, checked with the release's default, exit status 1."""
    script = _script(
        tmp_path,
        'if [ -n "$BIG" ]; then G=16; else G=4; fi\n'
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=$G \\\n"
        "  trainer.nnodes=$SLURM_JOB_NUM_NODES data.train_files=$HOME/data.parquet \\\n"
        "  trainer.experiment_name=$(date +%s) $@\n",
    )
    read = read_input([str(script)])
    n = read.settings["actor_rollout_ref.rollout.n"]
    assert isinstance(n, Unresolved) and n.at_run and "under a condition (line 1)" in n.why
    assert "$SLURM_JOB_NUM_NODES is not set in the script" in read.settings["trainer.nnodes"].why
    assert "command's output" in read.settings["trainer.experiment_name"].why
    assert any("$@" in note and "the script's own arguments" in note for note in read.notes)
    code, stdout, stderr = invoke("check", str(script), "--json", *SMALL)
    assert code == 1, stderr
    data = json.loads(stdout)
    assert set(data["unknown"]) == {"actor_rollout_ref.rollout.n", "trainer.nnodes"}
    assert data["settings"]["trainer.nnodes"] == 1  # verl's default, said so
    code, stdout, _ = invoke("check", str(script), "--set", "actor_rollout_ref.rollout.n=4", *SMALL)
    assert code == 1 and "warning: 1 setting the script leaves to when it runs" in stdout
    assert "trainer.nnodes=$SLURM_JOB_NUM_NODES: $SLURM_JOB_NUM_NODES is not set" in stdout


def test_hydra_overrides_are_read_by_hydra_s_grammar(tmp_path: Path) -> None:
    """`+key`, `++key`, `~key`, quoted values, lists, null, an interpolation of another setting
    resolved as Hydra does, Hydra's own flags noted, hydra.* keys left to Hydra."""
    script = _script(
        tmp_path,
        "L=1024\npython3 -m verl.trainer.main_ppo --config-name=ppo_megatron_trainer \\\n"
        "  algorithm.adv_estimator=grpo data.max_response_length=$L \\\n"
        f"  {ACTOR}loss_scale_factor='${{data.max_response_length}}' \\\n"
        f"  +{ACTOR}clip_ratio_low=0.2 ++{ACTOR}clip_ratio_high=0.28 '~{ACTOR}clip_ratio_c' \\\n"
        '  trainer.logger=\'["console","wandb"]\' actor_rollout_ref.model.lora_rank=null hydra.run.dir=/x\n',
    )
    read = read_input([str(script)])
    assert read.trainer == "verl"
    assert read.settings["data.max_response_length"] == 1024
    assert read.settings[ACTOR + "loss_scale_factor"] == 1024
    assert read.settings[ACTOR + "clip_ratio_low"] == 0.2 and read.settings[ACTOR + "clip_ratio_high"] == 0.28
    assert ACTOR + "clip_ratio_c" not in read.settings and "hydra.run.dir" not in read.settings
    assert read.settings["trainer.logger"] == ["console", "wandb"]
    assert read.settings["actor_rollout_ref.model.lora_rank"] is None
    assert any("--config-name ppo_megatron_trainer" in note for note in read.notes)
    assert any(f"~{ACTOR}clip_ratio_c: deleted" in note for note in read.notes)


def test_a_placeholder_is_refused_only_where_toyrl_reads_it(tmp_path: Path) -> None:
    line = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo {}='<path_to_config>'\n"
    read = read_input([str(_script(tmp_path, line.format("actor_rollout_ref.model.path")))])
    assert isinstance(read.settings["actor_rollout_ref.model.path"], Unresolved)
    code, _, stderr = invoke("check", str(_script(tmp_path, line.format(ACTOR + "ppo_epochs"))), *SMALL)
    assert code == 2 and stderr.count("\n") == 1
    assert f"{ACTOR}ppo_epochs=<path_to_config> cannot be read: Hydra cannot read this value" in stderr


def test_trl_command_lines_and_their_config_files(tmp_path: Path) -> None:
    """`trl grpo --config FILE` and a script launched by accelerate: the file's settings under the
    flags (the flags win); accelerate's own options are not the script's."""
    (tmp_path / "recipe.yaml").write_text("loss_type: grpo\nscale_rewards: group\nnum_generations: 4\n")
    script = _script(
        tmp_path,
        "accelerate launch --config_file zero3.yaml --num_processes 7 train_grpo.py \\\n"
        "  --config recipe.yaml --loss_type dr_grpo --output_dir out\n",
    )
    read = read_input([str(script)])
    assert read.trainer is None  # a Python script: its keys say whose it is
    assert read.settings == {
        "loss_type": "dr_grpo",
        "scale_rewards": "group",
        "num_generations": 4,
        "output_dir": "out",
    }
    code, stdout, stderr = invoke("check", "--json", *SMALL, "--", "trl", "grpo", "--loss_type", "dr_grpo")
    assert code == 0, stderr
    assert json.loads(stdout)["given"] == {"loss_type": "dr_grpo"}


def test_a_launcher_after_a_wrapper_and_its_options_given_with_equals(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "srun --nodes=4 accelerate launch --config_file=zero3.yaml --num_processes 32 grpo.py \\\n"
        "  --model_name_or_path Qwen/Qwen2.5-0.5B --loss_type grpo --lora_target_modules q_proj v_proj\n",
    )
    read = read_input([str(script)])
    assert read.origin == f"{script}, line 1: grpo.py"
    assert read.settings == {
        "model_name_or_path": "Qwen/Qwen2.5-0.5B",
        "loss_type": "grpo",
        "lora_target_modules": ["q_proj", "v_proj"],
    }


@pytest.mark.parametrize(
    ("line", "flags"),
    [
        ("accelerate launch train_grpo.py\n", "no flags"),
        ("python train_grpo.py --server_ip x\n", "flags of no trainer toyrl models (server_ip)"),
    ],
)
def test_a_script_launched_without_a_trainer_s_flags_points_to_the_script(
    tmp_path: Path, line: str, flags: str
) -> None:
    code, _, stderr = invoke("check", str(_script(tmp_path, line)), *SMALL)
    assert code == 2 and stderr.count("\n") == 1
    assert f"line 1: train_grpo.py is launched with {flags}" in stderr
    assert "toyrl check train_grpo.py reads its GRPOConfig(...) call" in stderr


def test_a_data_preparation_script_beside_the_launch_is_passed_over(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        "python3 examples/data_preprocess/gsm8k.py --local_dir ~/data/gsm8k\n"
        "python3 prepare.py positional\n"
        "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=rloo\n",
    )
    read = read_input([str(script)])
    assert read.trainer == "verl" and read.settings == {"algorithm.adv_estimator": "rloo"}


def test_bash_c_inside_a_wrapper_is_read(tmp_path: Path) -> None:
    script = _script(
        tmp_path,
        'V=8\nsrun --nodes=1 bash -c "pip install x && python3 -m openrlhf.cli.train_ppo_ray '
        '--rollout.n_samples_per_prompt $V --algo.advantage.estimator group_norm" &>> log\n',
    )
    read = read_input([str(script)])
    assert read.settings == {"rollout.n_samples_per_prompt": "8", "algo.advantage.estimator": "group_norm"}


def test_a_broken_line_before_the_launch_is_read_past_and_named(tmp_path: Path) -> None:
    script = _script(
        tmp_path, "echo $(( 1 + ))\n\npython3 -m verl.trainer.main_ppo algorithm.adv_estimator=rloo\n"
    )
    read = read_input([str(script)])
    assert read.settings == {"algorithm.adv_estimator": "rloo"}
    assert any("cannot read line 1" in note for note in read.notes)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "python3 -m verl.trainer.main_ppo a=1 'b=2\n",
            "line 1: bash's grammar cannot read the launch command",
        ),
        ("echo hi\n", "no trainer's launch command in it"),
        ("python3 -m verl.trainer.main_ppo '=[1,'\n", "is not a Hydra override"),
        ("python3 -m verl.trainer.main_ppo 'a b=1'\n", "'a b=1' is not a Hydra override"),
        ("python3 -m verl.trainer.main_ppo algorithm\n", "'algorithm' is not a Hydra override"),
        (
            "python3 -m verl.trainer.main_ppo 'algorithm.adv_estimator=[1,'\n",
            "algorithm.adv_estimator=[1, cannot be read: Hydra cannot read this value",
        ),
        (
            "python3 -m verl.trainer.main_ppo a=1\npython3 -m verl.trainer.main_ppo a=2\n",
            "2 launch commands (lines 1, 2)",
        ),
        ("A=xx\n" + "".join("A=$A$A\n" for _ in range(40)), "characters once its variables are expanded"),
    ],
)
def test_bad_scripts_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    code, stdout, stderr = invoke("check", str(_script(tmp_path, text)), *SMALL)
    assert code == 2 and stdout == "" and stderr.count("\n") == 1, stderr
    assert message in stderr


def test_a_python_config_through_the_command(tmp_path: Path) -> None:
    path = tmp_path / "train.py"
    path.write_text("import trl\nargs = trl.GRPOConfig(loss_type='dr_grpo', scale_rewards=SCALE, **extra)\n")
    code, stdout, stderr = invoke("check", str(path), *SMALL)  # checked with the default, and said so
    assert code == 1 and "scale_rewards=SCALE: computed when the script runs" in stdout, stderr
    code, stdout, stderr = invoke("check", str(path), "--set", "scale_rewards=none", "--json", *SMALL)
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["given"] == {"loss_type": "dr_grpo", "scale_rewards": "none"}
    assert data["read_as"].startswith(f"read as TRL ({path}, line 2)")
    assert any(note.startswith("**extra") for note in data["unread"])


FRAGMENTS = [
    "A=1",
    "A=$A$A",
    "B=(--x 1 --y)",
    '"${B[@]}"',
    "${A:-2}",
    "$((A + 1))",
    "$(date)",
    "$@",
    "python3 -m verl.trainer.main_ppo",
    "python3 -m openrlhf.cli.train_ppo_ray",
    "trl grpo",
    "accelerate launch x.py",
    "a.b=1",
    "+a=[1,2]",
    "~a",
    "--flag",
    "'",
    '"',
    "\\\n",
    "\n",
    ";",
    "|",
    "&&",
    "if true; then",
    "fi",
    "bash -c 'python3 -m verl.trainer.main_ppo x=1'",
    "<path>",
    "${",
    "}",
    "(",
    ")",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(st.sampled_from(FRAGMENTS), st.text(string.printable, max_size=8)),
        max_size=20,
    )
)
def test_any_script_is_read_or_refused_in_one_line(tmp_path: Path, parts: list[str]) -> None:
    path = tmp_path / "fuzz.sh"
    path.write_text(" ".join(parts))
    try:
        read_input([str(path)])
    except InvalidInput as error:
        assert "\n" not in str(error)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=12)), min_size=1, max_size=12))
def test_any_command_line_is_read_or_refused_in_one_line(words: list[str]) -> None:
    for anchor in (["python3", "-m", "verl.trainer.main_ppo"], ["trl", "grpo"], ["python3", "x.py"]):
        try:
            read_input([*anchor, *words])
        except InvalidInput as error:
            assert "\n" not in str(error)


@pytest.mark.parametrize(
    ("module", "line"), [("tree_sitter_bash", "x.sh"), ("hydra.core.override_parser.overrides_parser", "--")]
)
def test_without_the_check_extra_the_reader_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, line: str
) -> None:
    from toyrl.trainers import shell

    monkeypatch.setitem(sys.modules, module, None)
    shell._parser.cache_clear()
    try:
        if line == "--":
            arguments = ["python3", "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=grpo"]
        else:
            arguments = [str(_script(tmp_path, "python3 -m verl.trainer.main_ppo a=1\n", line))]
        with pytest.raises(InvalidInput, match=r"pip install -e \S*\[check\]'?$"):
            read_input(arguments)
    finally:
        shell._parser.cache_clear()
