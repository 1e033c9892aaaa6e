"""ROLL (alibaba/ROLL 8eb27cc2, v0.3.0 + 9 commits) on the toy: the mapping of its RLVR pipeline's
settings (read from ROLL's source, not run: the registry's `roll` is another project), its Hydra
configuration files, its launch line, detection and `toyrl check`'s report."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_check import SMALL, invoke
from toyrl.config import InvalidInput
from toyrl.trainers import resolve
from toyrl.trainers.reading import detect
from toyrl.trainers.roll import read_config
from toyrl.variants import VARIANTS, parse_variant

TRAIN_ARGS = "actor_train.training_args."

# An RLVR configuration as ROLL's examples write it (examples/qwen2.5-vl-7B-rlvr/rlvr_megatron.yaml's
# keys that decide length; its other sections hold no setting toyrl reads)
GRPO = """\
hydra:
  run:
    dir: .
  output_subdir: null
exp_name: "rlvr"
pretrain: Qwen/Qwen2.5-VL-7B-Instruct
rollout_batch_size: 64
num_return_sequences_in_group: 8
prompt_length: 2048
response_length: 4096
ppo_epochs: 1
adv_estimator: "grpo"
whiten_advantages: false
use_kl_loss: true
kl_loss_coef: 1.0e-2
init_kl_coef: 0.0
actor_train:
  training_args:
    per_device_train_batch_size: 1
    gradient_accumulation_steps: 64
  strategy_args:
    strategy_name: megatron_train
    strategy_config:
      tensor_model_parallel_size: 2
      expert_model_parallel_size: 1
  device_mapping: list(range(0,16))
actor_infer:
  generating_args:
    num_return_sequences: ${num_return_sequences_in_group}
reference:
  strategy_args:
    strategy_config:
      tensor_model_parallel_size: 2
"""


def spec_of(settings: dict) -> dict:
    return parse_variant(resolve("roll", None, settings).mapping.spec).spec()


def test_grpo_with_the_defaults_is_verl_s_sequence_mean_preset() -> None:
    """adv_estimator grpo: reward_postprocess sets both norm types to group (torch.std, Bessel, + 1e-6);
    loss_agg_mode's default seq-mean-token-mean; per_device_train_batch_size 8 x 1 rank: 128 responses
    (128 prompts x 1) in 16 steps, reshuffled each epoch (DataLoader shuffle=True)."""
    resolved = resolve("roll", None, {"adv_estimator": "grpo"})
    spec = parse_variant(resolved.mapping.spec).spec()
    assert spec == VARIANTS["verl_seq_mean_token_mean"].spec() | {"mini_batches": 16, "shuffle": "epoch"}
    assert resolved.release.not_run


@pytest.mark.parametrize(
    ("settings", "advantage"),
    [
        ({"norm_mean_type": "group"}, "none"),
        ({"norm_mean_type": "group", "norm_std_type": "group"}, "group_std_sample,std_eps=1e-06"),
        ({"norm_mean_type": "group", "norm_std_type": "batch"}, "batch_std,std_eps=1e-06"),
        # compute_advantage's masked_whiten over the tokens (Bessel, rsqrt(var + 1e-8)), as verl's
        ({"norm_mean_type": "group", "whiten_advantages": True}, "token_whiten_sample"),
        ({"whiten_advantages": True}, "reinforce_pp"),
        ({"norm_mean_type": "batch", "norm_std_type": "batch", "whiten_advantages": True}, "reinforce_pp"),
    ],
)
def test_reinforce_s_advantage_follows_the_norm_types_and_whitening(settings: dict, advantage: str) -> None:
    """adv_estimator reinforce: reward_norm's mean and std types, then each token's return (gamma 1:
    the response's reward), whitened over the batch's tokens if whiten_advantages."""
    expected = f"advantage={advantage},aggregation=seq_mean_token_mean,mini_batches=16,shuffle=epoch"
    assert spec_of({"adv_estimator": "reinforce", **settings}) == parse_variant(expected).spec()


@pytest.mark.parametrize(
    ("mode", "aggregation"),
    [
        ("token-mean", "token_mean"),
        ("seq-mean-token-sum", "seq_mean_token_sum"),
        ("seq-mean-token-sum-norm", "seq_mean_token_sum_norm"),
    ],
)
def test_loss_agg_modes(mode: str, aggregation: str) -> None:
    settings = {"adv_estimator": "grpo", "loss_agg_mode": mode, "sequence_length": 6144}
    assert spec_of(settings)["aggregation"] == aggregation


def test_sum_norm_divides_by_the_padded_width_never_by_n() -> None:
    """agg_loss's seq-mean-token-sum-norm: each micro-batch's sums over loss_mask.shape[-1] (the
    sequence_length - 1 the batch is padded to), summed over the step's micro-batches (loss_scale):
    a constant multiple of Dr. GRPO's loss while the width is fixed, said so; with dynamic batching
    or sequence packing the width is each micro-batch's own, which toyrl does not model."""
    settings = {
        "adv_estimator": "reinforce",
        "norm_mean_type": "group",
        "loss_agg_mode": "seq-mean-token-sum-norm",
        "prompt_length": 2048,
        "response_length": 4096,
    }
    resolved = resolve("roll", None, settings)
    assert parse_variant(resolved.mapping.spec).spec() == VARIANTS["dr_grpo"].spec() | {
        "mini_batches": 16,
        "shuffle": "epoch",
    }
    assert any("padded width 6143" in item and "never over N" in item for item in resolved.mapping.unmodelled)
    for layout in ("actor_train.use_dynamic_batching_in_train", "actor_train.use_sequence_packing"):
        with pytest.raises(InvalidInput, match="each micro-batch's own padded width"):
            resolve("roll", None, {**settings, layout: True})
    with pytest.raises(InvalidInput, match="give sequence_length, or prompt_length and response_length"):
        resolve("roll", None, {**settings, "response_length": None})


def test_clip_dual_clip_epochs_kl_and_masking() -> None:
    """ActorWorker.loss_func: clip [1 - pg_clip, 1 + pg_clip] (pg_clip_low / pg_clip_high with
    use_pg_clip_range), the dual clip at 1 + 2 pg_clip, k3 aggregated like the loss with use_kl_loss;
    get_sample_level_mask's max_len_mask: responses that fill the width out of the loss."""
    spec = spec_of(
        {
            "adv_estimator": "grpo",
            "dual_clip_loss": True,
            "pg_clip": 0.3,
            "ppo_epochs": 2,
            "use_kl_loss": True,
            "kl_loss_coef": 0.01,
            "max_len_mask": True,
        }
    )
    assert spec["dual_clip"] == pytest.approx(1.6) and spec["epsilon"] == 0.3
    assert spec["num_iterations"] == 2 and spec["beta"] == 0.01 and spec["mask_truncated"] is True
    ranged = spec_of({"adv_estimator": "grpo", "use_pg_clip_range": True, "pg_clip_high": 0.28})
    assert ranged == spec_of({"adv_estimator": "grpo"}) | {"epsilon_high": 0.28}  # low stays 0.2
    assert "beta" not in spec_of({"adv_estimator": "grpo", "kl_loss_coef": 0.01})  # without use_kl_loss


def test_the_difficulty_mask_takes_groups_out_of_the_loss_by_their_mean_score() -> None:
    """roll/utils/functionals.py `difficulty_mask`: (group mean score > difficulty_low_threshold) *
    (< difficulty_high_threshold), strictly, multiplied into final_response_mask by
    get_sample_level_mask; rlvr_config.py's thresholds default to 0 and 1. Its counts follow the mask:
    seq-mean's global_valid_samples counts only responses with a token in it, which the toy's
    per-response mean does not: said; token-mean's tokens do, as the toy's token_mean."""
    base = {"adv_estimator": "grpo", "difficulty_mask": True}
    default = resolve("roll", None, base).mapping
    # ROLL's defaults are the stage's (the canonical spec leaves them out)
    assert parse_variant(default.spec).spec() == spec_of({"adv_estimator": "grpo"}) | {
        "selector": "difficulty"
    }
    assert any(note.startswith("difficulty_mask=True: a group whose mean score") for note in default.notes)
    assert any("global_valid_samples" in item for item in default.unmodelled)
    both = {**base, "difficulty_low_threshold": 0.1, "difficulty_high_threshold": 0.95}
    assert spec_of(both)["low"] == 0.1 and spec_of(both)["high"] == 0.95
    token_mean = resolve("roll", None, {**base, "loss_agg_mode": "token-mean"}).mapping
    assert not any("global_valid_samples" in item for item in token_mean.unmodelled)
    # the same count of responses follows max_len_mask's mask (the same final_response_mask)
    masked = resolve("roll", None, {"adv_estimator": "grpo", "max_len_mask": True}).mapping
    assert any("global_valid_samples" in item for item in masked.unmodelled)
    assert "selector" not in spec_of({"adv_estimator": "grpo"})
    # get_sample_level_mask multiplies max_len_mask and difficulty_mask into one final_response_mask:
    # one selector, the truncated responses dropped too (ROLL's RLVR examples set both)
    both_masks = spec_of({**base, "max_len_mask": True})
    assert both_masks["selector"] == "difficulty" and both_masks["drop_truncated"] is True
    assert "mask_truncated" not in both_masks
    # compute_advantage whitens over final_response_mask's tokens: the masked groups' are not in it
    whitened = {"adv_estimator": "reinforce", "norm_mean_type": "group", "whiten_advantages": True}
    told = resolve("roll", None, {**whitened, "difficulty_mask": True}).mapping.unmodelled
    assert any(item.startswith("whiten_advantages=True with difficulty_mask=True: ROLL") for item in told)


def test_the_optimiser_steps_count_the_data_parallel_ranks() -> None:
    """A step is per_device_train_batch_size x gradient_accumulation_steps on each of the
    device_mapping's GPUs over tensor x pipeline x context parallel: 16 GPUs, tp 2: 8 ranks x 32 =
    256 of 64 x 8 = 512 responses, two steps."""
    settings = {
        "adv_estimator": "grpo",
        "rollout_batch_size": 64,
        "num_return_sequences_in_group": 8,
        f"{TRAIN_ARGS}per_device_train_batch_size": 1,
        f"{TRAIN_ARGS}gradient_accumulation_steps": 32,
        "actor_train.device_mapping": "list(range(0,16))",
        "actor_train.strategy_args.strategy_config.tensor_model_parallel_size": 2,
    }
    resolved = resolve("roll", None, settings)
    assert resolved.mapping.step_responses == 256
    assert parse_variant(resolved.mapping.spec).spec()["mini_batches"] == 2
    two_gpus = {**settings, "actor_train.device_mapping": "[0, 1]"}
    assert resolve("roll", None, two_gpus).mapping.step_responses == 32
    for unread in ("list(range(0, 4, 0))", "list(range(0, 10000000000))", "list(range())", "gpus()"):
        with pytest.raises(InvalidInput, match="it reads a list of device ids or list"):
            resolve("roll", None, {**settings, "actor_train.device_mapping": unread})


def test_a_yaml_list_of_devices_is_read_as_roll_takes_it(tmp_path: Path) -> None:
    """WorkerConfig.device_mapping: a list of ids, or the text of one (4 GPUs, tp 2: 2 ranks)."""
    path = tmp_path / "rlvr.yaml"
    path.write_text(GRPO.replace("device_mapping: list(range(0,16))", "device_mapping: [0, 1, 2, 3]"))
    settings = read_config(path)
    assert settings["actor_train.device_mapping"] == "[0, 1, 2, 3]"
    code, stdout, stderr = invoke("check", str(path), *SMALL)
    assert code == 0, stderr
    assert (
        "toyrl variant: advantage=group_std_sample,aggregation=seq_mean_token_mean,mini_batches=4" in stdout
    )


def test_an_advantage_clip_beyond_the_toy_s_largest_advantage_is_said_not_to_act() -> None:
    """A group-std advantage of 0/1 rewards is at most (G - 1) / sqrt(G) (2.47 at G = 8)."""
    base = {"adv_estimator": "grpo", "num_return_sequences_in_group": 8}
    wide = resolve("roll", None, {**base, "advantage_clip": 10.0}).mapping
    assert any("cannot act" in note for note in wide.notes) and not any(
        "advantage_clip" in u for u in wide.unmodelled
    )
    narrow = resolve("roll", None, {**base, "advantage_clip": 2.0}).mapping
    assert any(item.startswith("advantage_clip=2.0") for item in narrow.unmodelled)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "adv_estimator='gae' is not modelled by toyrl yet (a value model)"),
        (
            {"adv_estimator": "grpo", "loss_agg_mode": "token-sum"},
            "valid: 'token-mean', 'seq-mean-token-sum'",
        ),
        ({"adv_estimator": "grpo", "difficulty_high_threshold": 11.0}, "difficulty_high_threshold"),
        ({"adv_estimator": "grpo", "length_loss_weight": True}, "length_loss_weight=True is not modelled"),
        ({"adv_estimator": "grpo", "whiten_advantages": True}, "whiten_advantages=True is not modelled"),
        ({"adv_estimator": "reinforce"}, "norm_mean_type=None is not modelled"),
        (
            {"adv_estimator": "grpo", "actor_train.device_mapping": "gpus()"},
            "actor_train.device_mapping='gpus()'",
        ),
    ],
)
def test_bad_or_unmodelled_values_are_one_line(settings: dict, message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        resolve("roll", None, settings)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_its_files_are_told_apart_from_the_other_trainers(tmp_path: Path) -> None:
    (tmp_path / "rlvr_config.yaml").write_text(GRPO)
    assert detect(list(read_config(tmp_path / "rlvr_config.yaml")), "rlvr_config.yaml")[0] == "roll"
    assert detect(["critic_type", "num_samples", "cliprange"], "oat.yaml")[0] == "oat"
    assert detect(["actor_rollout_ref.actor.loss_agg_mode"], "ppo.yaml")[0] == "verl"
    # reward_pretrain and init_kl_coef are OpenRLHF's too: they count for neither
    assert detect(["reward_pretrain", "init_kl_coef", "algo.advantage.estimator"], "f")[0] == "openrlhf"


def test_a_hydra_defaults_list_is_composed(tmp_path: Path) -> None:
    """Hydra's defaults list as ROLL's agentic examples write it (`- ../config/NAME@_here_`): the
    file merged at the top, the primary file's own settings over it (`_self_` last when not listed),
    or under it when `_self_` comes last; `group: option` under the group."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "base.yaml").write_text("adv_estimator: grpo\nloss_agg_mode: token-mean\n")
    (tmp_path / "exp" / "algo").mkdir(parents=True)
    (tmp_path / "exp" / "algo" / "b.yaml").write_text("per_device_train_batch_size: 4\n")
    primary = tmp_path / "exp" / "rlvr.yaml"
    primary.write_text("defaults:\n  - ../config/base@_here_\nloss_agg_mode: seq-mean-token-sum\n")
    assert read_config(primary)["loss_agg_mode"] == "seq-mean-token-sum"
    primary.write_text(
        "defaults:\n  - _self_\n  - ../config/base@_here_\nloss_agg_mode: seq-mean-token-sum\n"
    )
    assert read_config(primary)["loss_agg_mode"] == "token-mean"
    primary.write_text("defaults:\n  - algo: b\n")
    assert read_config(primary) == {"algo.per_device_train_batch_size": 4}
    primary.write_text("defaults:\n  - ../config/missing@_here_\n")
    with pytest.raises(InvalidInput, match=r"its defaults name \.\./config/missing"):
        read_config(primary)


def test_the_launch_line_reads_config_path_and_name(tmp_path: Path, monkeypatch) -> None:
    """README: `python examples/start_rlvr_pipeline.py --config_path qwen2.5-7B-rlvr_megatron
    --config_name rlvr_config` from the repository's root; Hydra takes the path from the script's
    folder."""
    (tmp_path / "examples" / "qwen2.5-7B-rlvr_megatron").mkdir(parents=True)
    (tmp_path / "examples" / "start_rlvr_pipeline.py").write_text("print('never run')\n")
    (tmp_path / "examples" / "qwen2.5-7B-rlvr_megatron" / "rlvr_config.yaml").write_text(GRPO)
    monkeypatch.chdir(tmp_path)
    command = [
        "python",
        "examples/start_rlvr_pipeline.py",
        "--config_path",
        "qwen2.5-7B-rlvr_megatron",
        "--config_name",
        "rlvr_config",
    ]
    code, stdout, stderr = invoke("check", *SMALL, "--", *command)
    assert code == 0, stderr
    # 64 x 8 responses in one step: 1 x 64 on each of 16 / 2 ranks
    assert "toyrl variant: advantage=group_std_sample,aggregation=seq_mean_token_mean,beta=0.01" in stdout
    command[1] = "examples/start_rlvr_vl_pipeline.py"  # the VL pipeline: the same RLVRConfig and loss
    code, stdout, stderr = invoke("check", *SMALL, "--", *command)
    assert code == 0 and "read as ROLL" in stdout, stderr
    code, stdout, stderr = invoke("check", *SMALL, "--", *command, "--seed", "1")
    assert code == 2 and "--seed is not an argument of ROLL's RLVR pipeline script" in stderr
    script = tmp_path / "examples" / "qwen2.5-7B-rlvr_megatron" / "run_rlvr_pipeline.sh"
    script.write_text(
        "CONFIG_PATH=$(basename $(dirname $0))\n"
        "python examples/start_rlvr_pipeline.py --config_path $CONFIG_PATH  --config_name rlvr_config\n"
    )
    code, stdout, stderr = invoke("check", str(script), *SMALL)
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "--config_path $(basename $(dirname $0)): the configuration's path cannot be read" in stderr


def test_check_gives_a_verdict_and_what_to_change_in_roll_s_names(tmp_path: Path) -> None:
    (tmp_path / "rlvr_config.yaml").write_text(GRPO)
    code, stdout, stderr = invoke("check", str(tmp_path / "rlvr_config.yaml"), *SMALL)
    assert code == 0, stderr
    assert "read as ROLL" in stdout and stdout.count("verdict:") == 1
    assert (
        "to Dr. GRPO: set adv_estimator='reinforce', norm_mean_type='group', "
        "loss_agg_mode='seq-mean-token-sum-norm'"
    ) in stdout
    assert "not run against its code: the package registry's roll is an unrelated project" in stdout


def test_check_runs_a_difficulty_mask_beside_dr_grpo(tmp_path: Path) -> None:
    """ROLL's RLVR examples set difficulty_mask with max_len_mask: `toyrl check` reads the file,
    trains it and Dr. GRPO's loss in its schedule (the reference leaves the selector's thresholds out
    with the selector), and gives a verdict."""
    path = tmp_path / "rlvr.yaml"
    masks = (
        "max_len_mask: true\ndifficulty_mask: true\n"
        "difficulty_low_threshold: 0.1\ndifficulty_high_threshold: 0.95\n"
    )
    path.write_text(GRPO + masks)
    code, stdout, stderr = invoke("check", str(path), *SMALL)
    assert code == 0, stderr
    assert "selector=difficulty,low=0.1,high=0.95,drop_truncated=True" in stdout
    assert sum(line.startswith("verdict: ") for line in stdout.splitlines()) == 1
