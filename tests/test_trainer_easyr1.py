"""EasyR1 (hiyouga/EasyR1 0.3.3.dev0, commit b44b311) on the toy: its configuration (worker.*,
algorithm.*, data.*) mapped as its source computes, `python3 -m verl.trainer.main config=FILE
key=value` read as OmegaConf.from_cli reads it, told apart from verl's (its package is also named
`verl`), `toyrl check` end to end.

The mapping was read from EasyR1's source, not run against it (EasyR1 is not on the package
registry): each expected spec below cites what it follows."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.config import InvalidInput
from toyrl.trainers import resolve
from toyrl.trainers.reading import detect, read_input
from toyrl.variants import parse_variant

SMALL = ["--steps", "3", "--prompts", "8", "--batch-prompts", "4", "--seeds", "2", "--quiet"]
ACTOR = "worker.actor."
# one optimiser step a batch: the loss and advantage alone
ONE_STEP = {"data.rollout_batch_size": "128", ACTOR + "global_batch_size": "128", "worker.rollout.n": "5"}


def spec(settings: dict) -> str:
    return parse_variant(resolve("easyr1", None, {**ONE_STEP, **settings}).mapping.spec).spec_text()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        # core_algos.py compute_grpo_outcome_advantage: (r - mean) / (torch.std + 1e-6), always;
        # average_loss "token": the micro-batch's masked mean, times its tokens / the mini-batch's
        # (dp_actor.update_policy): the mini-batch's token mean; compute_policy_loss's default: the
        # clip at 0.2 / 0.3 (ActorConfig) and the dual clip 3
        (
            {},
            "advantage=group_std_sample,aggregation=token_mean,epsilon_high=0.3,dual_clip=3.0,std_eps=1e-06",
        ),
        (
            {"algorithm.adv_estimator": "rloo"},
            "advantage=rloo,aggregation=token_mean,epsilon_high=0.3,dual_clip=3.0",
        ),
        (
            {"algorithm.adv_estimator": "grpo_passk"},
            "advantage=passk,aggregation=token_mean,epsilon_high=0.3,dual_clip=3.0,std_eps=1e-06",
        ),
        (
            {ACTOR + "loss_type": "cispo", ACTOR + "clip_ratio_high": "4.0"},
            "advantage=group_std_sample,aggregation=token_mean,objective=cispo,epsilon=0.2,epsilon_high=4.0,"
            "std_eps=1e-06",
        ),
        (
            {ACTOR + "loss_type": "sapo", ACTOR + "tau_negative": "2"},
            "advantage=group_std_sample,aggregation=token_mean,objective=sapo,tau_neg=2.0,std_eps=1e-06",
        ),
        # algorithm.use_kl_loss with low_var_kl: k3 in the loss at kl_coef (examples/config.yaml's choice)
        (
            {
                "algorithm.use_kl_loss": True,
                "algorithm.kl_penalty": "low_var_kl",
                "algorithm.kl_coef": "0.01",
            },
            "advantage=group_std_sample,aggregation=token_mean,epsilon_high=0.3,dual_clip=3.0,beta=0.01,std_eps=1e-06",
        ),
    ],
)
def test_the_advantage_and_loss_follow_easyr1_s_code(settings: dict, expected: str) -> None:
    assert spec(settings) == parse_variant(expected).spec_text()


def test_mini_batches_and_the_kl_in_the_reward() -> None:
    # data.rollout_batch_size / worker.actor.global_batch_size (fsdp_workers multiplies both by n)
    mapping = resolve("easyr1", None, {**ONE_STEP, ACTOR + "global_batch_size": "32"}).mapping
    assert "mini_batches=4" in mapping.spec and mapping.step_responses == 32 * 5
    # AlgorithmConfig's defaults: the KL in the reward (use_kl_loss False, disable_kl False): told
    assert any("a KL penalty ('kl', kl_coef 0.001) in the reward" in item for item in mapping.unmodelled)
    with pytest.raises(InvalidInput, match=r"EasyR1's trainer refuses it"):
        resolve("easyr1", None, {**ONE_STEP, ACTOR + "global_batch_size": "100"})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({ACTOR + "loss_avg_mode": "seq"}, "worker.actor.loss_avg_mode='seq' is not modelled by toyrl yet"),
        (
            {"algorithm.adv_estimator": "gae"},
            "algorithm.adv_estimator='gae' is not modelled by toyrl yet (a value model)",
        ),
        ({"algorithm.online_filtering": True}, "algorithm.online_filtering=True is not modelled"),
        ({ACTOR + "clip_ratio_low": "0"}, "worker.actor.clip_ratio_low=0.0 is not modelled"),
        ({ACTOR + "loss_type": "gspo_tokn"}, "did you mean 'gspo_token'?"),
        ({"worker.rollout.n": "0"}, "worker.rollout.n=0 is not valid"),
    ],
)
def test_bad_values_name_the_valid_ones(settings: dict, message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        resolve("easyr1", None, {**ONE_STEP, **settings})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_easyr1_s_files_are_not_verl_s_and_verl_s_are_not_easyr1_s() -> None:
    easyr1 = ["worker.actor.global_batch_size", "algorithm.adv_estimator", "data.rollout_batch_size"]
    assert detect(easyr1, "x")[0] == "easyr1"
    verl = ["actor_rollout_ref.actor.loss_agg_mode", "algorithm.adv_estimator", "data.train_batch_size"]
    assert detect(verl, "x")[0] == "verl"


CONFIG = """data:
  max_response_length: 2048
  rollout_batch_size: 512  # equivalent to verl's data.train_batch_size
  mini_rollout_batch_size: null  # equivalent to verl's data.gen_batch_size

algorithm:
  adv_estimator: grpo
  disable_kl: false
  use_kl_loss: true
  kl_penalty: low_var_kl
  kl_coef: 1.0e-2

worker:
  actor:
    global_batch_size: 128  # equivalent to verl's actor.ppo_mini_batch_size
    micro_batch_size_per_device_for_update: 1
  rollout:
    n: 5
    val_override_config:
      temperature: 0.6
      n: 1

trainer:
  n_gpus_per_node: 8
"""

SCRIPT = """#!/bin/bash

set -x

MODEL_PATH=Qwen/Qwen2.5-7B-Instruct  # replace it with your local file path

python3 -m verl.trainer.main \\
    config=examples/config.yaml \\
    worker.actor.model.model_path=${MODEL_PATH} \\
    worker.actor.loss_type=cispo \\
    worker.actor.clip_ratio_high=4.0 \\
    worker.rollout.n=8
"""


def test_a_launch_script_and_its_config_as_easyr1_s_examples_write_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/qwen2_5_7b_math_grpo.sh's form, run from the repository's root: config=FILE under
    the command's key=value words (verl/trainer/main.py: the file merged, then the CLI)."""
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "config.yaml").write_text(CONFIG)
    (tmp_path / "examples" / "run.sh").write_text(SCRIPT)
    monkeypatch.chdir(tmp_path)
    read = read_input(["examples/run.sh"])
    assert read.trainer == "easyr1"
    assert read.settings["worker.rollout.n"] == 8 and read.settings["worker.actor.clip_ratio_high"] == 4.0
    assert read.settings["algorithm.kl_coef"] == 0.01  # from the file
    resolved = resolve("easyr1", None, read.settings, frozenset(read.settings))
    assert resolved.misspelt == {}  # its own names (data.mini_rollout_batch_size) are not taken for typos
    mapping = resolved.mapping
    assert (
        "objective=cispo" in mapping.spec and "beta=0.01" in mapping.spec and "mini_batches=4" in mapping.spec
    )


def test_verl_s_own_entry_is_still_verl_s(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo\n")
    assert read_input([str(script)]).trainer == "verl"


def test_check_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    result = CliRunner().invoke(app, ["check", str(path), *SMALL])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("read as EasyR1 (keys under worker.*")
    assert "not run against its code: EasyR1 is not installable from the package registry" in result.stdout
    assert sum(line.startswith("verdict: ") for line in lines) == 1
    assert (
        "to Dr. GRPO: no setting of EasyR1 0.3.3.dev0 that toyrl models makes these settings Dr. GRPO's loss"
        in lines
    )
