"""AReaL (areal 1.0.4) on the toy: its settings' mapping, refusals, detection, its configuration
file and launch command read, and `toyrl check` end to end. Whether the mapping is what AReaL's
installed code does is the conformance suite's (tests/conformance/test_areal.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_check import SMALL, invoke
from toyrl.config import InvalidInput
from toyrl.trainers import resolve
from toyrl.trainers.reading import detect, read_input, read_settings
from toyrl.variants import parse_variant

GROUP_MEAN = {"actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": None}
GROUP_STD = {"actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": "group"}
GROUP_BATCH = {"actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": "batch"}
WHITEN = {"actor.adv_norm.mean_level": "batch", "actor.adv_norm.std_level": "batch"}
SCALED = {"actor.reward_scaling": 10.0, "actor.reward_bias": -0.5}  # AReaL's GSM8K examples
# one optimiser step a batch (ppo_n_minibatches 1, as AReaL's GSM8K examples), G = 4
BASE = {"gconfig.n_samples": 4, "actor.reward_norm.group_size": 4, "actor.ppo_n_minibatches": 1}


def mapping_of(settings: dict):
    return resolve("areal", None, BASE | settings).mapping


def spec_of(settings: dict) -> str:
    return parse_variant(mapping_of(settings).spec).spec_text()


def same(spec: str) -> str:
    return parse_variant(spec).spec_text()


# areal/trainer/ppo/actor.py, _compute_advantages: each token's advantage is its response's reward
# (GAE at discount 1, lambda 1, no values) after reward_norm (areal/utils/data.py, Normalization:
# (x - group mean) / (std + eps)); grpo_loss_fn's ppo_actor_loss_fn divides the token sum by the
# micro-batch's tokens, which the engine weighs by its share of the mini-batch's: the token mean.
@pytest.mark.parametrize(
    ("settings", "spec"),
    [
        (GROUP_MEAN, "advantage=none,aggregation=token_mean,epsilon=0.2"),
        # std_unbiased (the default): the sample std; eps 1e-5 on rewards scaled by 10: 1e-6
        (
            GROUP_STD | {"actor.reward_scaling": 10.0, "actor.reward_bias": -0.5},
            "advantage=group_std_sample,std_eps=1e-06,aggregation=token_mean,epsilon=0.2",
        ),
        (
            GROUP_STD | {"actor.reward_norm.std_unbiased": False},
            "advantage=group_std,std_eps=1e-05,aggregation=token_mean,epsilon=0.2",
        ),
        (
            GROUP_MEAN | {"actor.reward_norm.mean_leave1out": True},
            "advantage=rloo,aggregation=token_mean,epsilon=0.2",
        ),
        # adv_norm at batch levels (areal/utils/data.py Normalization): whitened over the batch's
        # tokens, (a - m) / (std + eps), after reward_norm (AReaL's GSM8K Dr. GRPO, GRPO, LitePPO,
        # REINFORCE examples); a scale k before it divides eps by k where no std divides before
        (GROUP_MEAN | WHITEN, "advantage=areal_whiten,aggregation=token_mean,epsilon=0.2"),
        (
            GROUP_MEAN | WHITEN | SCALED,
            "advantage=areal_whiten,whiten_eps=1e-06,aggregation=token_mean,epsilon=0.2",
        ),
        (
            GROUP_STD | WHITEN | SCALED,
            "advantage=areal_group_whiten,std_eps=1e-06,aggregation=token_mean,epsilon=0.2",
        ),
        (
            GROUP_BATCH | WHITEN | SCALED,
            "advantage=areal_batch_whiten,std_eps=1e-06,aggregation=token_mean,epsilon=0.2",
        ),
        (
            WHITEN | SCALED | {"actor.adv_norm.eps": 1e-3},
            "advantage=areal_whiten_rewards,whiten_eps=1e-4,aggregation=token_mean,epsilon=0.2",
        ),
        # a leave-one-out mean is G / (G - 1) times the group-centred reward: eps x (G - 1) / G
        (
            GROUP_MEAN | WHITEN | {"actor.reward_norm.mean_leave1out": True},
            "advantage=areal_whiten,whiten_eps=7.5e-06,aggregation=token_mean,epsilon=0.2",
        ),
        # a null section switches it off, whatever its keys say (actor.adv_norm=null on a command line)
        (GROUP_MEAN | WHITEN | {"actor.adv_norm": None}, "advantage=none,aggregation=token_mean,epsilon=0.2"),
        (
            GROUP_MEAN | {"actor.eps_clip_higher": 0.28},
            "advantage=none,aggregation=token_mean,epsilon=0.2,epsilon_high=0.28",
        ),
        (
            GROUP_MEAN | {"actor.c_clip": 3.0},
            "advantage=none,aggregation=token_mean,epsilon=0.2,dual_clip=3.0",
        ),
        (
            GROUP_MEAN | {"actor.importance_sampling_level": "sequence"},
            "advantage=none,aggregation=token_mean,objective=gspo,epsilon=0.2,epsilon_high=0.2",
        ),
        (GROUP_MEAN | {"actor.use_sapo_loss": True}, "advantage=none,aggregation=token_mean,objective=sapo"),
        # 4 mini-batches of train_dataset.batch_size x n_samples / 4 responses
        (
            GROUP_MEAN | {"actor.ppo_n_minibatches": 4, "train_dataset.batch_size": 8},
            "advantage=none,aggregation=token_mean,epsilon=0.2,mini_batches=4",
        ),
    ],
)
def test_settings_map_to_the_toy(settings: dict, spec: str) -> None:
    assert spec_of(settings) == same(spec)


def test_what_the_mapping_leaves_out_is_told() -> None:
    """The AReaL stages are exact (no whitening note left in `unmodelled`); the leave-one-out
    mean's scale, folded into the epsilon, is told."""
    for settings in (GROUP_MEAN | WHITEN, GROUP_STD | WHITEN | SCALED, GROUP_BATCH | WHITEN, WHITEN):
        assert not any("whiten" in item or "nearest" in item for item in mapping_of(settings).unmodelled)
    loo = mapping_of(GROUP_MEAN | WHITEN | {"actor.reward_norm.mean_leave1out": True}).notes
    assert any("whiten_eps = eps x 3/4 / reward_scaling" in note for note in loo)
    split = mapping_of(GROUP_MEAN | {"actor.ppo_n_minibatches": 4, "train_dataset.batch_size": 8}).unmodelled
    assert any("balanced by their token counts" in item for item in split)
    assert any(
        "reward_scaling=10" in note for note in mapping_of(GROUP_MEAN | {"actor.reward_scaling": 10.0}).notes
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "actor.reward_norm=None is not modelled by toyrl"),  # PPOActorConfig's defaults: no baseline
        (
            {"actor.reward_norm.mean_level": "batch", "actor.reward_norm.std_level": "batch"},
            "actor.reward_norm.mean_level, std_level='batch, batch' is not modelled by toyrl",
        ),
        (
            {"actor.reward_norm.mean_level": "group", "actor.reward_norm.std_level": "batch"},
            "'group, batch' is not modelled by toyrl yet (the std of the group-centred rewards",
        ),
        (
            GROUP_STD | {"actor.reward_norm.mean_leave1out": True},
            "'group with mean_leave1out, group' is not modelled by toyrl",
        ),
        (GROUP_STD | {"actor.reward_norm.group_size": 8}, "group_size=8 is not gconfig.n_samples=4"),
        (
            GROUP_STD | WHITEN | {"actor.reward_norm.mean_leave1out": True},
            "'group with mean_leave1out, group' is not modelled by toyrl",
        ),
        (
            GROUP_STD | WHITEN | {"actor.reward_norm.std_unbiased": False},
            "'group, group (std_unbiased False)' is not modelled by toyrl",
        ),
        (
            GROUP_MEAN | WHITEN | {"actor.adv_norm.std_unbiased": False},
            "actor.adv_norm.std_unbiased=False is not modelled by toyrl",
        ),
        (
            {"actor.reward_norm.mean_level": "batch", "actor.reward_norm.std_level": None} | WHITEN,
            "'batch, None' is not modelled by toyrl",
        ),
        (GROUP_MEAN | {"actor.adv_norm.mean_level": "group"}, "is not modelled by toyrl"),
        (GROUP_MEAN | {"actor.eps_clip": 0.0}, "actor.eps_clip=0.0 is not modelled by toyrl"),
        (
            GROUP_MEAN | {"actor.reward_clip": 1.0, "actor.reward_scaling": 10.0},
            "actor.reward_clip=1.0 is not modelled",
        ),
        (GROUP_MEAN | {"actor.discount": 0.9}, "is not modelled by toyrl"),
        (GROUP_MEAN | {"actor.c_clip": 0.5}, "valid: a float in [1, inf] or None"),
        (GROUP_MEAN | {"actor.importance_sampling_level": "seq"}, "valid: 'token', 'sequence'"),
    ],
)
def test_bad_or_unmodelled_values_are_refused_in_one_line(settings: dict, message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        resolve("areal", None, BASE | settings)
    assert message in str(error.value) and "\n" not in str(error.value)


# examples/math/gsm8k_drgrpo.yaml (tag v1.0.4), its sections as AReaL writes them (abridged)
DRGRPO_YAML = """\
experiment_name: gsm8k-drgrpo
trial_name: trial0
seed: 1
total_train_epochs: 10
tokenizer_path: ${actor.path}
cluster:
  n_nodes: 1
  n_gpus_per_node: 8
gconfig:
  n_samples: 4
  max_new_tokens: 1024
actor:
  backend: "fsdp:d4p1t1"
  path: Qwen/Qwen2.5-1.5B-Instruct
  optimizer:
    type: adam
    lr: 1.70e-5
    gradient_clipping: 1.0
  eps_clip: 0.4
  reward_scaling: 10.0
  reward_bias: -0.5
  kl_ctl: 0.0
  ppo_n_minibatches: 1
  recompute_logprob: true
  use_decoupled_loss: true
  reward_norm:
    mean_level: group
    std_level: null
    group_size: ${gconfig.n_samples}
  adv_norm:
    mean_level: batch
    std_level: batch
vllm:
  model: ${actor.path}
  max_model_len: 32768
train_dataset:
  batch_size: 256
  path: openai/gsm8k
"""


def test_its_configuration_file_is_detected_and_read(tmp_path: Path) -> None:
    """AReaL's YAML (its vllm. section is OpenRLHF's name too: counted for neither), the
    `${gconfig.n_samples}` interpolation resolved as OmegaConf does."""
    path = tmp_path / "gsm8k_drgrpo.yaml"
    path.write_text(DRGRPO_YAML)
    settings = read_settings(path)
    assert detect(list(settings), str(path))[0] == "areal"
    assert settings["actor.reward_norm.group_size"] == 4
    resolved = resolve("areal", None, settings, frozenset(settings))
    assert same(resolved.mapping.spec) == same(
        "advantage=areal_whiten,whiten_eps=1e-06,aggregation=token_mean,epsilon=0.4"
    )


@pytest.mark.parametrize(
    "command",
    [
        "python3 examples/math/gsm8k_rl.py --config examples/math/gsm8k_drgrpo.yaml scheduler.type=local",
        "python3 -m areal.infra.launcher.local examples/math/gsm8k_rl.py "
        "--config=examples/math/gsm8k_drgrpo.yaml",
    ],
)
def test_its_launch_command_reads_the_file_under_its_overrides(
    tmp_path: Path, monkeypatch, command: str
) -> None:
    """As AReaL's README writes it: the training script, argparse's --config FILE, then Hydra
    overrides over the file (here the one that switches adv_norm off)."""
    (tmp_path / "examples/math").mkdir(parents=True)
    (tmp_path / "examples/math/gsm8k_drgrpo.yaml").write_text(DRGRPO_YAML)
    monkeypatch.chdir(tmp_path)
    read = read_input([*command.split(), "actor.adv_norm=null", "actor.eps_clip=0.2"])
    assert read.trainer == "areal"
    resolved = resolve("areal", None, read.settings, frozenset(read.settings))
    assert same(resolved.mapping.spec) == same("advantage=none,aggregation=token_mean,epsilon=0.2")


def test_a_launch_without_its_file_is_refused_in_one_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInput, match=r"configuration file examples/none\.yaml is not found"):
        read_input(["python3", "examples/math/gsm8k_rl.py", "--config", "examples/none.yaml"])
    with pytest.raises(InvalidInput, match="--config without a file"):
        read_input(["python3", "examples/math/gsm8k_rl.py", "--config"])


def test_check_end_to_end(tmp_path: Path) -> None:
    """A verdict, and: no AReaL setting makes its loss Dr. GRPO's (the token mean over the
    mini-batch is fixed: loss_weight_fn counts its tokens)."""
    path = tmp_path / "gsm8k_drgrpo.yaml"
    path.write_text(DRGRPO_YAML)
    code, stdout, stderr = invoke("check", str(path), *SMALL)
    assert code == 0, stderr
    assert "read as AReaL" in stdout and "verdict:" in stdout
    assert (
        "to Dr. GRPO: no setting of AReaL 1.0.4 that toyrl models makes these settings Dr. GRPO's loss"
        in stdout
    )
    assert "not run against its code" not in stdout


def test_check_refuses_the_default_in_one_line() -> None:
    code, _, stderr = invoke("check", "--trainer", "areal", *SMALL)
    assert code == 2
    assert "is not modelled by toyrl" in stderr and len(stderr.strip().splitlines()) == 1
