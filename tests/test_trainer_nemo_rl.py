"""NeMo-RL v0.7.0 on the toy: the mapping of its GRPO settings (read from NVIDIA-NeMo/RL's source,
not run: the registry's nemo-rl is a 0.0.0 placeholder), its configuration files with `defaults:`
inheritance, its launch line, detection and `toyrl check`'s report."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.test_check import SMALL, invoke
from toyrl.config import InvalidInput
from toyrl.trainers import resolve
from toyrl.trainers.nemo_rl import read_config
from toyrl.trainers.reading import detect
from toyrl.variants import parse_variant

# examples/configs/grpo_math_1B.yaml's GRPO and loss settings as NeMo-RL v0.7.0 writes them (the
# keys that decide length; its other sections hold no setting toyrl reads)
BASE = """\
grpo:
  num_prompts_per_step: 32
  num_generations_per_prompt: 16
  normalize_rewards: true
  use_leave_one_out_baseline: true
  overlong_filtering: false
  adv_estimator:
    name: "grpo"
    normalize_rewards: ${grpo.normalize_rewards}
    use_leave_one_out_baseline: ${grpo.use_leave_one_out_baseline}
    minus_baseline: true
loss_fn:
  reference_policy_kl_penalty: 0.01
  reference_policy_kl_type: "k3"
  ratio_clip_min: 0.2
  ratio_clip_max: 0.2
  ratio_clip_c: null
  token_level_loss: true
policy:
  model_name: "Qwen/Qwen2.5-1.5B"
  train_global_batch_size: 512
  train_micro_batch_size: 4
  max_total_sequence_length: 512
  max_grad_norm: 1.0
logger:
  wandb_enabled: false
cluster:
  gpus_per_node: 1
"""


def spec_of(settings: dict) -> dict:
    return parse_variant(resolve("nemo-rl", None, settings).mapping.spec).spec()


def test_the_default_is_a_token_mean_over_the_global_batch_with_the_leave_one_out_std_advantage() -> None:
    """grpo_math_1B.yaml: token_level_loss true (ClippedPGLossFn: masked_mean over the global batch's
    valid tokens), normalize_rewards with a leave-one-out baseline (GRPOAdvantageEstimator with
    calculate_baseline_and_std_per_prompt: the others' mean and sample std, epsilon 1e-6, undivided
    where that std is 0: advantage=rloo_std), a k3 term at 0.01, 32 x 16 responses in one step of 512."""
    resolved = resolve("nemo-rl", None, {})
    assert (
        parse_variant(resolved.mapping.spec).spec()
        == parse_variant("advantage=rloo_std,std_eps=1e-06,aggregation=token_mean,beta=0.01").spec()
    )
    assert not any("leave_one_out" in item for item in resolved.mapping.unmodelled)  # modelled now
    assert any("advantage=rloo_std" in item for item in resolved.mapping.notes)
    assert resolved.mapping.config == {"group_size": ("grpo.num_generations_per_prompt", 16)}
    assert resolved.release.not_run


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        # GRPOAdvantageEstimator without std: r - group mean, or r - mean of the other G - 1 (RLOO)
        ({"grpo.normalize_rewards": False, "grpo.use_leave_one_out_baseline": False}, "advantage=none"),
        ({"grpo.normalize_rewards": False}, "advantage=rloo"),
        # with std over the whole group (Bessel, num_valid / (num_valid - 1)), 1e-6 added
        ({"grpo.use_leave_one_out_baseline": False}, "advantage=group_std_sample,std_eps=1e-06"),
        # the estimator's own keys win over grpo's (grpo._create_advantage_estimator reads adv_estimator)
        (
            {"grpo.normalize_rewards": True, "grpo.adv_estimator.normalize_rewards": False},
            "advantage=rloo",
        ),
    ],
)
def test_the_advantage_follows_normalize_rewards_and_the_leave_one_out_baseline(
    settings: dict, expected: str
) -> None:
    assert spec_of(settings) == parse_variant(f"{expected},aggregation=token_mean,beta=0.01").spec()
    assert not any("leave_one_out" in item for item in resolve("nemo-rl", None, settings).mapping.unmodelled)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        # token_level_loss false: each response's token mean over the global batch's valid sequences
        ({"loss_fn.token_level_loss": False}, "aggregation=seq_mean_token_mean"),
        # GSPO: sequence-level ratios need token_level_loss false (ClippedPGLossFn asserts it)
        (
            {"loss_fn.token_level_loss": False, "loss_fn.sequence_level_importance_ratios": True},
            "aggregation=seq_mean_token_mean,objective=gspo,epsilon=0.2",
        ),
        ({"loss_fn.ratio_clip_c": 3.0}, "aggregation=token_mean,dual_clip=3.0"),
        ({"loss_fn.ratio_clip_max": 0.28}, "aggregation=token_mean,epsilon_high=0.28"),
        ({"grpo.overlong_filtering": True}, "aggregation=token_mean,mask_truncated=True"),
        # 32 x 16 responses in global batches of 128: four optimiser steps, in the batch's order
        ({"policy.train_global_batch_size": 128}, "aggregation=token_mean,mini_batches=4"),
    ],
)
def test_the_loss_clip_masking_and_steps(settings: dict, expected: str) -> None:
    base = "advantage=rloo_std,std_eps=1e-06,beta=0.01"
    assert spec_of(settings) == parse_variant(f"{base},{expected}").spec()


def test_a_kl_in_the_reward_leaves_the_grpo_loss_without_kl() -> None:
    """use_kl_in_reward: ClippedPGLossFn's penalty is 0, and GRPOAdvantageEstimator adds none."""
    assert "beta" not in spec_of({"loss_fn.use_kl_in_reward": True})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"loss_fn.token_level_loss": "maybe"}, "loss_fn.token_level_loss='maybe' is not valid"),
        ({"loss_fn.reference_policy_kl_type": "k1"}, "is not modelled by toyrl yet; modelled: 'k3'"),
        ({"loss_fn.reference_policy_kl_type": "k4"}, "valid: 'k1', 'k2', 'k3'"),
        ({"loss_fn.ratio_clip_c": 1.0}, "valid: a float > 1 or None"),
        ({"loss_fn.sequence_level_importance_ratios": True}, "needs loss_fn.token_level_loss=False"),
        ({"grpo.adv_estimator.name": "gdpo"}, "grpo.adv_estimator.name='gdpo' is not modelled"),
        ({"loss_fn.use_cispo": True}, "loss_fn.use_cispo=True is not modelled"),
        ({"grpo.num_generations_per_prompt": 0}, "valid: an int in [1, 10000]"),
    ],
)
def test_bad_values_are_one_line_naming_the_valid_ones(settings: dict, message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        resolve("nemo-rl", None, settings)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_its_files_are_told_apart_from_the_other_trainers(tmp_path: Path) -> None:
    (tmp_path / "grpo.yaml").write_text(BASE)
    nemo = read_config(tmp_path / "grpo.yaml")
    assert detect(list(nemo), "grpo.yaml")[0] == "nemo-rl"
    verl = ["actor_rollout_ref.actor.loss_agg_mode", "algorithm.adv_estimator", "data.train_batch_size"]
    assert detect(verl, "ppo.yaml")[0] == "verl"
    assert detect(["loss_type", "scale_rewards", "num_generations"], "trl.yaml")[0] == "trl"
    # logger.* is OpenRLHF's too: it counts for neither
    assert detect(["logger.wandb_project", "algo.advantage.estimator"], "f")[0] == "openrlhf"


def test_defaults_are_inherited_and_interpolations_follow_the_child(tmp_path: Path) -> None:
    """nemo_rl/utils/config.py: a child's `defaults:` (a path relative to it) is merged under it, and
    an interpolation in the parent follows the child's value (its docstring's example 4); a section
    with `_override_: true` replaces the inherited one."""
    (tmp_path / "configs" / "recipes").mkdir(parents=True)
    (tmp_path / "configs" / "grpo_math_1B.yaml").write_text(BASE)
    child = tmp_path / "configs" / "recipes" / "child.yaml"
    child.write_text(
        "defaults: ../grpo_math_1B.yaml\n"
        "grpo:\n  normalize_rewards: false\n  use_leave_one_out_baseline: false\n"
        "loss_fn:\n  _override_: true\n  token_level_loss: false\n"
    )
    settings = read_config(child)
    assert settings["grpo.num_generations_per_prompt"] == 16
    assert "grpo.adv_estimator.normalize_rewards" not in settings  # it follows grpo.normalize_rewards
    assert "loss_fn.reference_policy_kl_penalty" not in settings  # replaced by the child's loss_fn
    resolved = resolve("nemo-rl", None, {k: v for k, v in settings.items() if k in resolve_keys()})
    assert (
        parse_variant(resolved.mapping.spec).spec()
        == parse_variant("advantage=none,aggregation=seq_mean_token_mean,beta=0.01").spec()
    )


def resolve_keys() -> set[str]:
    return set(resolve("nemo-rl", None, {}).values)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("defaults: missing.yaml\ngrpo:\n  normalize_rewards: false\n", "its defaults name missing.yaml"),
        ("defaults: child.yaml\ngrpo:\n  normalize_rewards: false\n", "its defaults come back to"),
        ("defaults: 3\ngrpo:\n  normalize_rewards: false\n", "expected a file, or a list of files"),
    ],
)
def test_bad_defaults_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "child.yaml").write_text(text)
    with pytest.raises(InvalidInput) as error:
        read_config(tmp_path / "child.yaml")
    assert message in str(error.value) and "\n" not in str(error.value)


def _repository(tmp_path: Path) -> Path:
    """A checkout's layout: examples/run_grpo.py and its default configuration beside it."""
    (tmp_path / "examples" / "configs").mkdir(parents=True)
    (tmp_path / "examples" / "run_grpo.py").write_text("print('never run')\n")
    (tmp_path / "examples" / "configs" / "grpo_math_1B.yaml").write_text(BASE)
    (tmp_path / "examples" / "configs" / "grpo_math_8B.yaml").write_text(
        'defaults: "grpo_math_1B.yaml"\ngrpo:\n  num_prompts_per_step: 64\n  num_generations_per_prompt: 32\n'
    )
    return tmp_path


def test_the_launch_line_reads_its_config_then_its_overrides(tmp_path: Path, monkeypatch) -> None:
    """README: `uv run python examples/run_grpo.py --config examples/configs/grpo_math_8B.yaml
    key=value ...`; without --config, examples/configs/grpo_math_1B.yaml. The overrides are Hydra's
    and win over the files; an override of grpo.normalize_rewards reaches the estimator's key."""
    monkeypatch.chdir(_repository(tmp_path))
    command = (
        "uv run python examples/run_grpo.py --config examples/configs/grpo_math_8B.yaml "
        "grpo.normalize_rewards=false loss_fn.token_level_loss=false cluster.num_nodes=2"
    )
    code, stdout, stderr = invoke("check", *SMALL, "--", *shlex.split(command))
    assert code == 0, stderr
    assert "toyrl variant: advantage=rloo,aggregation=seq_mean_token_mean,mini_batches=4,beta=0.01" in stdout
    assert "grpo.num_generations_per_prompt=32" in stdout
    code, stdout, stderr = invoke("check", *SMALL, "--", "uv", "run", "examples/run_grpo.py")
    assert code == 0, stderr
    assert "toyrl variant: advantage=rloo_std,aggregation=token_mean,beta=0.01" in stdout


def test_a_config_path_the_script_leaves_unknown_is_one_line(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text('CONFIG=$(ls configs | head -1)\nuv run examples/run_grpo.py --config "$CONFIG"\n')
    code, stdout, stderr = invoke("check", str(script), *SMALL)
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "the file's path cannot be read" in stderr


def test_check_gives_a_verdict_and_says_no_setting_is_dr_grpo(tmp_path: Path) -> None:
    """No NeMo-RL setting divides by a constant, so none makes its loss Dr. GRPO's; the report says
    the mapping was read from the source, not run against NeMo-RL's code."""
    (tmp_path / "grpo.yaml").write_text(BASE)
    code, stdout, stderr = invoke("check", str(tmp_path / "grpo.yaml"), *SMALL)
    assert code == 0, stderr
    assert "read as NeMo-RL" in stdout and stdout.count("verdict:") == 1
    assert "to Dr. GRPO: no setting of NeMo-RL 0.7.0 that toyrl models makes these settings" in stdout
    assert "not run against its code: nemo-rl is not installable" in stdout
