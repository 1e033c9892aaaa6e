"""SkyRL (skyrl 0.3.0) on the toy: its settings' mapping, refusals, detection, its launch command
read, and `toyrl check` end to end. Whether the mapping is what SkyRL's installed code does is the
conformance suite's (tests/conformance/test_skyrl.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_check import SMALL, invoke
from toyrl.config import InvalidInput
from toyrl.trainers import resolve
from toyrl.trainers.reading import detect, read_input
from toyrl.variants import parse_variant

A = "trainer.algorithm."


def spec_of(settings: dict) -> str:
    return parse_variant(resolve("skyrl", None, settings).mapping.spec).spec_text()


def same(spec: str) -> str:
    return parse_variant(spec).spec_text()


# skyrl/train/config/config.py: AlgorithmConfig's defaults are advantage_estimator "grpo",
# grpo_norm_by_std True (ppo_utils.compute_grpo_outcome_advantage: torch.std, epsilon 1e-6),
# loss_reduction "token_mean", policy_loss_type "regular" (no dual clip), eps_clip 0.2 / 0.2;
# TrainerConfig's train_batch_size 1024 and policy_mini_batch_size 256: 4 optimiser steps a batch.
DEFAULT = "advantage=group_std_sample,std_eps=1e-06,aggregation=token_mean,epsilon=0.2,mini_batches=4"


@pytest.mark.parametrize(
    ("settings", "spec"),
    [
        ({}, DEFAULT),
        # ppo_utils.apply_loss_reduction_to_advantages_minibatch: sequence_mean is A / (B |o_i|)
        # (with the KL term, which the worker averages per response, in the same aggregation)
        (
            {A + "loss_reduction": "sequence_mean"},
            DEFAULT.replace("token_mean", "seq_mean_token_mean") + ",beta=0.001",
        ),
        # seq_mean_token_sum_norm: A / (B max_seq_len), the constant; examples/train/algorithms/drgrpo
        (
            {
                A + "loss_reduction": "seq_mean_token_sum_norm",
                A + "max_seq_len": 1536,
                A + "grpo_norm_by_std": False,
                A + "use_kl_loss": False,
            },
            "advantage=none,aggregation=seq_mean_token_sum_norm,epsilon=0.2,mini_batches=4",
        ),
        ({A + "loss_reduction": "prompt_mean"}, DEFAULT.replace("token_mean", "prompt_mean")),
        # token_mean_legacy: each micro-batch of micro_train_batch_size_per_gpu responses by its tokens
        (
            {A + "loss_reduction": "token_mean_legacy", "trainer.micro_train_batch_size_per_gpu": 64},
            DEFAULT + ",per_micro_batch=True",
        ),
        ({A + "grpo_norm_by_std": False}, DEFAULT.replace("group_std_sample,std_eps=1e-06", "none")),
        ({A + "advantage_estimator": "rloo"}, DEFAULT.replace("group_std_sample,std_eps=1e-06", "rloo")),
        ({A + "advantage_estimator": "maxrl"}, DEFAULT.replace("group_std_sample,std_eps=1e-06", "max_rl")),
        (
            {A + "advantage_estimator": "reinforce++"},
            DEFAULT.replace("group_std_sample,std_eps=1e-06", "reinforce_pp"),
        ),
        ({A + "policy_loss_type": "dual_clip"}, DEFAULT + ",dual_clip=3.0"),
        ({A + "eps_clip_high": 0.28}, DEFAULT + ",epsilon_high=0.28"),
        (
            {A + "eps_clip_low": 2.0},
            DEFAULT.replace("epsilon=0.2", "epsilon=1.0,epsilon_high=0.2"),
        ),  # 1 - 2 < 0: no lower clip
        ({A + "policy_loss_type": "gspo"}, DEFAULT + ",objective=gspo,epsilon_high=0.2"),
        ({A + "policy_loss_type": "sapo"}, DEFAULT.replace(",epsilon=0.2", "") + ",objective=sapo"),
        # CISPO: clamp(ratio, 1 - cispo_eps_clip_low, 1 + cispo_eps_clip_high), detached
        (
            {A + "policy_loss_type": "cispo", A + "cispo.cispo_eps_clip_low": 0.2},
            DEFAULT + ",objective=cispo,epsilon_high=5.0",
        ),
        (
            {A + "policy_loss_type": "cispo", A + "cispo.cispo_eps_clip_low": 2.0},
            DEFAULT.replace(",epsilon=0.2", "") + ",objective=cispo,epsilon_high=5.0",
        ),
        ({"generator.apply_overlong_filtering": True}, DEFAULT + ",mask_truncated=True"),
        ({"trainer.update_epochs_per_batch": 2}, DEFAULT + ",num_iterations=2"),
        ({A + "dynamic_sampling.type": "filter"}, DEFAULT + ",sampler=filter_groups,max_rounds=30"),
        (
            {A + "dynamic_sampling.type": "filter", A + "dynamic_sampling.max_sample_batches": -1},
            DEFAULT + ",sampler=filter_groups,max_rounds=100000",
        ),
    ],
)
def test_settings_map_to_the_toy(settings: dict, spec: str) -> None:
    assert spec_of(settings) == same(spec)


def test_the_kl_term_is_left_out_where_skyrl_aggregates_it_otherwise() -> None:
    """use_kl_loss is true by default; the worker averages the k3 term per response, whatever
    loss_reduction says, so only sequence_mean takes it into the toy's spec."""
    resolved = resolve("skyrl", None, {})
    assert "beta" not in resolved.mapping.spec
    assert any("use_kl_loss=True" in item for item in resolved.mapping.unmodelled)
    assert "beta=0.001" in resolve("skyrl", None, {A + "loss_reduction": "sequence_mean"}).mapping.spec


def test_token_mean_legacy_cuts_the_toy_s_steps_into_micro_batches() -> None:
    mapping = resolve(
        "skyrl",
        None,
        {A + "loss_reduction": "token_mean_legacy", "trainer.micro_train_batch_size_per_gpu": 64},
    ).mapping
    assert mapping.step_responses == 256 * 5 and mapping.micro_batch_responses == 64


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {A + "advantage_estimator": "gae"},
            "trainer.algorithm.advantage_estimator='gae' is not modelled by toyrl",
        ),
        (
            {A + "policy_loss_type": "kl_cov"},
            "trainer.algorithm.policy_loss_type='kl_cov' is not modelled by toyrl",
        ),
        ({A + "advantage_batch_normalize": True}, "advantage_batch_normalize=True is not modelled by toyrl"),
        (
            {A + "dynamic_sampling.type": "replace"},
            "dynamic_sampling.type='replace' is not modelled by toyrl",
        ),
        ({A + "policy_loss_type": "cispo"}, "cispo.cispo_eps_clip_low=0.0 is not modelled by toyrl"),
        ({A + "loss_reduction": "seq_mean_token_sum_norm"}, "max_seq_len is unset"),
        ({A + "loss_reduction": "token_sum"}, "valid: 'token_mean', 'token_mean_legacy'"),
        ({A + "eps_clip_high": 12.0}, "beyond the toy's clip ranges"),
        ({"generator.n_samples_per_prompt": 0}, "valid: an int in [1, 10000]"),
    ],
)
def test_bad_or_unmodelled_values_are_refused_in_one_line(settings: dict, message: str) -> None:
    with pytest.raises(InvalidInput, match=None) as error:
        resolve("skyrl", None, settings)
    assert message in str(error.value) and "\n" not in str(error.value)


SKYRL_YAML = """\
trainer:
  algorithm:
    advantage_estimator: grpo
    loss_reduction: token_mean
  train_batch_size: 1024
  policy_mini_batch_size: 256
generator:
  n_samples_per_prompt: 5
environment:
  env_class: gsm8k
"""
VERL_YAML = """\
actor_rollout_ref:
  actor:
    loss_agg_mode: token-mean
  rollout:
    n: 5
trainer:
  n_gpus_per_node: 8
data:
  train_batch_size: 1024
"""


def test_detected_by_its_own_sections_and_not_taken_for_verl(tmp_path: Path) -> None:
    """SkyRL's configuration shares trainer. and data. with verl's (counted for neither); its
    generator. and environment. sections are its own, verl's actor_rollout_ref. is verl's."""
    skyrl_file, verl_file = tmp_path / "skyrl.yaml", tmp_path / "verl.yaml"
    skyrl_file.write_text(SKYRL_YAML)
    verl_file.write_text(VERL_YAML)
    assert detect(list(read_input([str(skyrl_file)]).settings), "skyrl.yaml")[0] == "skyrl"
    assert detect(list(read_input([str(verl_file)]).settings), "verl.yaml")[0] == "verl"


# examples/train/algorithms/drgrpo/run_drgrpo_gsm8k.sh (tag skyrl-v0.3.0), as its README writes it
DRGRPO_SCRIPT = """\
set -x
DATA_DIR="$HOME/data/gsm8k"
NUM_GPUS=4
MAX_PROMPT_LENGTH=512
MAX_GENERATE_LENGTH=1024
MAX_SEQ_LEN=$((MAX_PROMPT_LENGTH + MAX_GENERATE_LENGTH))
LOSS_REDUCTION="seq_mean_token_sum_norm"
GRPO_NORM_BY_STD=false
USE_KL_LOSS=false

uv run --isolated --extra fsdp -m skyrl.train.entrypoints.main_base \\
  data.train_data="['$DATA_DIR/train.parquet']" \\
  trainer.algorithm.advantage_estimator="grpo" \\
  trainer.algorithm.loss_reduction=$LOSS_REDUCTION \\
  trainer.algorithm.grpo_norm_by_std=$GRPO_NORM_BY_STD \\
  trainer.algorithm.use_kl_loss=$USE_KL_LOSS \\
  trainer.placement.policy_num_gpus_per_node=$NUM_GPUS \\
  trainer.train_batch_size=1024 \\
  trainer.policy_mini_batch_size=256 \\
  trainer.micro_train_batch_size_per_gpu=64 \\
  generator.sampling_params.max_generate_length=$MAX_GENERATE_LENGTH \\
  trainer.algorithm.max_seq_len=$MAX_SEQ_LEN \\
  generator.n_samples_per_prompt=5 \\
  $@
"""


def test_the_launch_script_is_read_as_skyrl_s(tmp_path: Path) -> None:
    """A launch script as SkyRL's examples write it: `uv run ... -m skyrl.train.entrypoints.main_base`
    and its key=value overrides, the shell's variables followed (never run)."""
    script = tmp_path / "run_drgrpo_gsm8k.sh"
    script.write_text(DRGRPO_SCRIPT)
    read = read_input([str(script)])
    assert read.trainer == "skyrl"
    assert read.settings[A + "loss_reduction"] == "seq_mean_token_sum_norm"
    assert read.settings[A + "grpo_norm_by_std"] is False
    resolved = resolve("skyrl", None, read.settings, frozenset(read.settings))
    assert same(resolved.mapping.spec) == same(
        "advantage=none,aggregation=seq_mean_token_sum_norm,epsilon=0.2,mini_batches=4"
    )
    assert resolved.values[A + "max_seq_len"] == 1536


@pytest.mark.parametrize("module", ["skyrl.train.entrypoints.main_base", "skyrl_train.entrypoints.main_base"])
def test_both_entry_points_are_skyrl_s(module: str) -> None:
    read = read_input(["python", "-m", module, "trainer.algorithm.loss_reduction=sequence_mean"])
    assert read.trainer == "skyrl" and read.settings == {A + "loss_reduction": "sequence_mean"}


def test_check_end_to_end_says_what_to_change_in_skyrl_s_names() -> None:
    code, stdout, stderr = invoke(
        "check",
        *SMALL,
        "--",
        "uv",
        "run",
        "--isolated",
        "-m",
        "skyrl.train.entrypoints.main_base",
        "trainer.algorithm.advantage_estimator=grpo",
        "generator.n_samples_per_prompt=4",
    )
    assert code == 0, stderr
    assert "read as SkyRL" in stdout and "verdict:" in stdout
    line = next(text for text in stdout.splitlines() if text.startswith("to Dr. GRPO: set "))
    assert "trainer.algorithm.grpo_norm_by_std=False" in line
    assert "trainer.algorithm.loss_reduction='seq_mean_token_sum_norm'" in line
    assert "trainer.algorithm.max_seq_len=" in line
    assert "not run against its code" not in stdout  # the conformance suite runs it


def test_check_of_skyrl_s_dr_grpo_needs_nothing(tmp_path: Path) -> None:
    script = tmp_path / "run_drgrpo_gsm8k.sh"
    script.write_text(DRGRPO_SCRIPT)
    code, stdout, stderr = invoke("check", str(script), *SMALL)
    assert code == 0, stderr
    assert "to Dr. GRPO: nothing to change" in stdout


def test_zero_variance_filter_is_the_informative_selector_and_refused_with_overlong_filtering() -> None:
    """skyrl/train/trainer.py zeroes the loss masks of groups whose rewards spread no more than
    zero_variance_filter_tol (trainer_utils.zero_variance_filter): selector=informative at that
    tolerance; with apply_overlong_filtering the spread is over the responses left, which the toy's
    one selector cannot take with mask_truncated."""
    on = {"trainer.algorithm.zero_variance_filter": True}
    assert resolve("skyrl", None, on).mapping.spec.endswith("selector=informative,tol=1e-06")
    tolerance = on | {"trainer.algorithm.zero_variance_filter_tol": 0.5}
    assert resolve("skyrl", None, tolerance).mapping.spec.endswith("selector=informative,tol=0.5")
    assert "selector" not in resolve("skyrl", None, {}).mapping.spec
    with pytest.raises(InvalidInput, match="zero_variance_filter=True is not modelled by toyrl yet"):
        resolve("skyrl", None, on | {"generator.apply_overlong_filtering": True})
