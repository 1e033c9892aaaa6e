"""ms-swift 4.6.0's GRPO settings on the toy (toyrl/trainers/swift.py): the mapping of its default and
of each loss and advantage it documents, its refusals, detection, its launch lines as its examples
write them, and `toyrl check` end to end. Each expected spec states the line of ms-swift's code it
comes from; that the installed ms-swift computes the same gradients is the conformance suite's
(tests/conformance/test_swift.py)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.test_check import SMALL, invoke
from toyrl.config import InvalidInput
from toyrl.trainers import resolve
from toyrl.trainers.check import resolve_input
from toyrl.trainers.reading import detect
from toyrl.variants import parse_variant

pytest.importorskip("tree_sitter_bash")


def spec(settings: dict) -> str:
    return parse_variant(resolve("ms-swift", None, settings).mapping.spec).spec_text()


def canonical(text: str) -> str:
    return parse_variant(text).spec_text()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        # rlhf_args.py `_set_default`: loss_type 'grpo'; `_init_grpo`: beta 0.04, scale_rewards 'group';
        # advantage.py: (r - mean) / (grouped.std() + 1e-4); grpo_trainer.py:1082: each response's token mean
        ({}, "advantage=group_std_sample,aggregation=seq_mean_token_mean,std_eps=0.0001,beta=0.04"),
        # grpo_trainer.py:1087: the token sum / (batch_size x max_completion_length); scale 'none': no std
        (
            {"loss_type": "dr_grpo", "scale_rewards": "none", "beta": 0},
            "advantage=none,aggregation=seq_mean_token_sum_norm",
        ),
        # grpo_trainer.py:1085: the micro-batch's token mean, each of gradient_accumulation_steps
        (
            {"loss_type": "bnpo", "gradient_accumulation_steps": 4, "beta": 0},
            "advantage=group_std_sample,aggregation=token_mean,std_eps=0.0001,micro_batches=4,per_micro_batch=True",
        ),
        # grpo_trainer.py:1126: dapo divides by the generation batch's tokens (num_items_in_batch)
        (
            {"loss_type": "dapo", "beta": 0},
            "advantage=group_std_sample,aggregation=token_mean,std_eps=0.0001",
        ),
        (
            {"loss_type": "dapo", "beta": 0, "steps_per_generation": 8, "gradient_accumulation_steps": 2},
            "advantage=group_std_sample,aggregation=token_mean,std_eps=0.0001,mini_batches=4,batch_tokens=True",
        ),
        # advantage.py: scale 'batch' divides by rewards.std() over the batch
        (
            {"scale_rewards": "batch", "beta": 0},
            "advantage=batch_std,aggregation=seq_mean_token_mean,std_eps=0.0001",
        ),
        # advantage.py: rloo (r K - mean K) / (K - 1), no std ('none', its default)
        (
            {"advantage_estimator": "rloo", "kl_in_reward": False},
            "advantage=rloo,aggregation=seq_mean_token_mean,beta=0.04",
        ),
        # advantage.py: reinforce_plus_plus 'batch' divides r - group mean by its std over the batch
        (
            {"advantage_estimator": "reinforce_plus_plus", "beta": 0},
            "advantage=batch_whiten,aggregation=seq_mean_token_mean,std_eps=0.0001",
        ),
        # grpo_trainer.py:1036: cispo's weight clamp(coef_1, max=epsilon_high), detached
        (
            {"loss_type": "cispo", "epsilon_high": 5.0, "beta": 0},
            "advantage=group_std_sample,aggregation=token_mean,objective=cispo,epsilon_high=4,std_eps=0.0001",
        ),
        # grpo_trainer.py:1039: sapo's gate at tau_pos / tau_neg, each response's token mean
        (
            {"loss_type": "sapo", "tau_neg": 2.0, "beta": 0},
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,objective=sapo,tau_neg=2.0,std_eps=0.0001",
        ),
        # grpo_trainer.py:1011: the sequence's ratio (GSPO), PPO's clip at epsilon
        (
            {"importance_sampling_level": "sequence", "beta": 0},
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,objective=gspo,epsilon=0.2,"
            "epsilon_high=0.2,std_eps=0.0001",
        ),
        # grpo_trainer.py:966: overlong_filter drops truncated completions from completion_mask
        (
            {"overlong_filter": True, "beta": 0},
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,mask_truncated=True,std_eps=0.0001",
        ),
        # grpo_trainer.py:1054: the ratio clamped at delta before PPO's min
        (
            {"delta": 3.0, "beta": 0},
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,dual_clip=3.0,std_eps=0.0001",
        ),
        # orm.py SoftOverlong: -(L - (512 - 128)) / 128 below 0: -1 at the longest response
        (
            {"reward_funcs": "accuracy,soft_overlong", "soft_cache_length": 128, "beta": 0},
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,reward=soft_overlong,buffer=0.25,"
            "penalty_factor=1.0,incorrect=0,std_eps=0.0001",
        ),
    ],
)
def test_each_mode_maps_to_its_spec(settings: dict, expected: str) -> None:
    assert spec(settings) == canonical(expected)


def test_dapo_over_several_steps_says_its_learning_rate_is_smaller() -> None:
    mapping = resolve("ms-swift", None, {"loss_type": "dapo", "steps_per_generation": 4}).mapping
    assert any(
        "4 optimiser steps a generation" in item and "that many times smaller" in item
        for item in mapping.unmodelled
    )


def test_dr_grpo_s_constant_is_named() -> None:
    mapping = resolve("ms-swift", None, {"loss_type": "dr_grpo", "max_completion_length": 1024}).mapping
    assert any(
        item.startswith("max_completion_length=1024: dr_grpo's constant") for item in mapping.unmodelled
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"loss_type": "dr_gpro"},
            "loss_type='dr_gpro' is not valid (did you mean 'dr_grpo'?); valid: 'grpo'",
        ),
        ({"loss_type": "fipo"}, "loss_type='fipo' is not modelled by toyrl yet; modelled: 'grpo'"),
        ({"rlhf_type": "dpo"}, "rlhf_type='dpo' is not modelled by toyrl yet (toyrl checks GRPO's loss)"),
        ({"advantage_estimator": "rloo"}, "kl_in_reward=True is not modelled by toyrl yet (with beta=0.04"),
        ({"scale_rewards": "gdpo"}, "scale_rewards='gdpo' is not modelled by toyrl yet"),
        (
            {"advantage_estimator": "rloo", "kl_in_reward": False, "scale_rewards": "group"},
            "scale_rewards='group' is not modelled by toyrl yet (with advantage_estimator='rloo'",
        ),
        ({"reward_funcs": "accuracy,cosine"}, "reward_funcs='cosine' is not modelled by toyrl yet"),
        ({"num_generations": 1}, "num_generations=1: ms-swift refuses it for GRPO without a teacher"),
        ({"teacher_model": "Qwen/Qwen3-8B"}, "teacher_model='Qwen/Qwen3-8B' is not modelled by toyrl yet"),
        ({"reward_funcs": "accuracy,soft_overlong"}, "without soft_cache_length, which ms-swift requires"),
        ({"loss_type": "cispo"}, "loss_type='cispo' caps each token's weight at epsilon_high"),
        ({"importance_sampling_level": "sequence", "loss_type": "sapo"}, "with loss_type='sapo'"),
    ],
)
def test_a_value_toyrl_does_not_model_is_refused_in_one_line(settings: dict, message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        resolve("ms-swift", None, settings)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_swift_s_own_names_tell_its_files_and_trl_s_stay_trl_s() -> None:
    assert detect(["kl_in_reward", "beta"], "f")[0] == "ms-swift"
    assert detect(["tuner_type", "overlong_filter"], "f")[0] == "ms-swift"
    # names ms-swift's GRPOConfig takes from TRL's are TRL's, as before
    assert detect(["loss_type", "scale_rewards"], "f")[0] == "trl"
    assert detect(["actor_rollout_ref.actor.loss_agg_mode"], "f")[0] == "verl"


# examples/train/grpo/internal/gspo.sh's form (ms-swift's docs write launch lines so)
GSPO = """\
CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 \\
NPROC_PER_NODE=8 \\
swift rlhf \\
    --rlhf_type grpo \\
    --model Qwen/Qwen2.5-7B-Instruct \\
    --beta 0.0 \\
    --epsilon 3e-4 \\
    --epsilon_high 4e-4 \\
    --steps_per_generation 32 \\
    --importance_sampling_level sequence \\
    --per_device_train_batch_size 2 \\
    --gradient_accumulation_steps 8 \\
    --num_generations 16 \\
    --tuner_type full \\
    --reward_funcs accuracy \\
    --use_vllm true \\
    --max_completion_length 8192
"""


def test_a_launch_script_is_read_as_ms_swift(tmp_path: Path) -> None:
    script = tmp_path / "gspo.sh"
    script.write_text(GSPO)
    resolved = resolve_input([str(script)], None, {})
    assert resolved.trainer.name == "ms-swift"
    assert resolved.given["steps_per_generation"] == 32 and resolved.given["epsilon_high"] == 0.0004
    assert resolved.mapping.spec == (
        "advantage=group_std_sample,std_eps=0.0001,aggregation=seq_mean_token_mean,epsilon=0.0003,"
        "epsilon_high=0.0004,objective=gspo,mini_batches=4"
    )


def test_a_launch_line_without_rlhf_type_is_swift_s_default_dpo() -> None:
    with pytest.raises(InvalidInput, match="rlhf_type='dpo' is not modelled by toyrl yet"):
        resolve_input(["swift", "rlhf", "--loss_type", "grpo"], None, {})


def test_check_gives_a_verdict_and_the_settings_to_change_in_swift_s_names() -> None:
    command = "swift rlhf --rlhf_type grpo --num_generations 4 --beta 0 --loss_type grpo"
    code, stdout, stderr = invoke("check", *SMALL, "--", *shlex.split(command))
    assert code == 0, stderr
    assert stdout.splitlines()[0].startswith("read as ms-swift (the command line: swift rlhf)")
    assert "verdict: " in stdout
    assert "to Dr. GRPO: set loss_type='dr_grpo', scale_rewards='none'; " in stdout
    code, stdout, _ = invoke("check", "--json", *SMALL, "--", *shlex.split(command))
    data = json.loads(stdout)
    assert data["trainer"] == "ms-swift" and data["dr_grpo_settings"] == {
        "loss_type": "dr_grpo",
        "scale_rewards": "none",
    }
