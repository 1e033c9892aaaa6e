"""Unsloth 2026.10.9's GRPO settings on the toy (toyrl/trainers/unsloth.py): TRL's GRPOConfig after
the rewrites UnslothGRPOConfig makes (unsloth/models/rl.py), read from Python as Unsloth's notebooks
write it, detected by its import, and `toyrl check` end to end. Each expected spec states the
Unsloth rule it comes from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_check import SMALL, invoke
from toyrl.config import InvalidInput
from toyrl.trainers import resolve
from toyrl.trainers.check import resolve_input
from toyrl.trainers.reading import detect
from toyrl.variants import parse_variant


def spec(settings: dict, trainer: str = "unsloth") -> str:
    return parse_variant(resolve(trainer, None, settings).mapping.spec).spec_text()


def canonical(text: str) -> str:
    return parse_variant(text).spec_text()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        # loss_type None -> 'dapo' (TRL >= 0.22's), beta None -> 0.0 for dapo: TRL's default
        ({}, "advantage=group_std_sample,aggregation=token_mean,std_eps=0.0001"),
        # loss_type 'dr_grpo': scale_rewards 'group' (the default) is set to False
        ({"loss_type": "dr_grpo"}, "advantage=none,aggregation=seq_mean_token_sum_norm"),
        # an explicit 'dapo': mask_truncated_completions None -> True, epsilon_high None -> 0.28
        (
            {"loss_type": "dapo"},
            "advantage=group_std_sample,aggregation=token_mean,epsilon_high=0.28,mask_truncated=True,std_eps=0.0001",
        ),
        # loss_type 'grpo': beta None -> 0.001 (TRL's 0.0), times the ratio (use_bias_correction_kl)
        (
            {"loss_type": "grpo"},
            "advantage=group_std_sample,aggregation=seq_mean_token_mean,beta=0.001,ratio_weighted=True,"
            "std_eps=0.0001",
        ),
        # 'cispo': epsilon_high None -> 5.0, the weight's cap (toyrl's cispo, one less)
        (
            {"loss_type": "cispo"},
            "advantage=group_std_sample,aggregation=token_mean,objective=cispo,beta=0.001,ratio_weighted=True,"
            "std_eps=0.0001",
        ),
        # an explicit beta stays; dr_grpo with scale_rewards 'batch' keeps it (only 'group'/True change)
        (
            {"loss_type": "dr_grpo", "scale_rewards": "batch", "beta": 0.0},
            "advantage=batch_std,aggregation=seq_mean_token_sum_norm,std_eps=0.0001",
        ),
    ],
)
def test_unsloth_s_rewrites_of_trl_s_settings(settings: dict, expected: str) -> None:
    assert spec(settings) == canonical(expected)


def test_where_unsloth_and_trl_differ() -> None:
    """The same settings, TRL's defaults against Unsloth's: grpo's KL and dr_grpo's std."""
    assert spec({"loss_type": "grpo"}, "trl") != spec({"loss_type": "grpo"})
    assert spec({"loss_type": "dr_grpo"}, "trl") != spec({"loss_type": "dr_grpo"})
    assert spec({}, "trl") == spec({})


def test_a_batch_size_that_does_not_hold_whole_groups_becomes_num_generations() -> None:
    resolved = resolve(
        "unsloth",
        None,
        {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 1, "num_generations": 4},
    )
    assert resolved.mapping.step_responses == 4
    assert any("Unsloth sets per_device_train_batch_size=4" in note for note in resolved.mapping.notes)
    assert resolve("unsloth", None, {}).mapping.step_responses == 8  # 4 x 2, a multiple of 8


def test_a_bad_value_is_refused_in_one_line() -> None:
    with pytest.raises(InvalidInput) as error:
        resolve("unsloth", None, {"loss_type": "drgrpo"})
    assert "loss_type='drgrpo' is not valid (did you mean 'dr_grpo'?); valid: 'grpo'" in str(error.value)


def test_only_unsloth_s_own_fields_tell_it_by_keys() -> None:
    assert detect(["loss_type", "beta"], "f")[0] == "trl"
    assert detect(["unsloth_num_chunks", "beta"], "f") == (
        "unsloth",
        "read as Unsloth (key unsloth_num_chunks)",
    )


# As Unsloth's notebooks write it (unslothai/notebooks python_scripts/Qwen2.5_(3B)-GRPO.py)
NOTEBOOK = """\
from unsloth import FastLanguageModel
import torch
max_seq_length = 1024
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name = "Qwen/Qwen2.5-3B-Instruct",
    max_seq_length = max_seq_length,
    load_in_4bit = True,
)
from trl import GRPOConfig, GRPOTrainer
training_args = GRPOConfig(
    learning_rate = 5e-6,
    adam_beta1 = 0.9,
    adam_beta2 = 0.99,
    weight_decay = 0.1,
    warmup_ratio = 0.1,
    lr_scheduler_type = "cosine",
    optim = "paged_adamw_8bit",
    logging_steps = 1,
    per_device_train_batch_size = 1,
    gradient_accumulation_steps = 1,
    num_generations = 8,
    max_prompt_length = 256,
    max_completion_length = 200,
    max_steps = 250,
    save_steps = 250,
    max_grad_norm = 0.1,
    report_to = "none",
    output_dir = "outputs",
)
"""


def test_a_notebook_s_python_is_read_as_unsloth(tmp_path: Path) -> None:
    source = tmp_path / "grpo.py"
    source.write_text(NOTEBOOK)
    resolved = resolve_input([str(source)], None, {})
    assert resolved.trainer.name == "Unsloth"
    assert resolved.mapping.step_responses == 8  # 1 x 1 is no multiple of 8: Unsloth takes 8
    without = tmp_path / "trl.py"
    without.write_text(NOTEBOOK.replace("from unsloth import FastLanguageModel\n", ""))
    assert resolve_input([str(without)], None, {}).trainer.name == "TRL"


def test_check_gives_a_verdict_and_the_setting_to_change(tmp_path: Path) -> None:
    source = tmp_path / "grpo.py"
    source.write_text(NOTEBOOK.replace("num_generations = 8", "num_generations = 4"))
    code, stdout, stderr = invoke("check", str(source), *SMALL)
    assert code == 0, stderr
    assert stdout.splitlines()[0].startswith("read as Unsloth")
    assert "verdict: " in stdout and "to Dr. GRPO: set loss_type='dr_grpo'; " in stdout
    code, stdout, _ = invoke("check", str(source), "--json", *SMALL)
    assert json.loads(stdout)["dr_grpo_settings"] == {"loss_type": "dr_grpo"}
