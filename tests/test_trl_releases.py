"""TRL's releases from 0.14.0 (the first GRPOTrainer) to 1.16.0, values TRL accepts that the toy's
ranges do not, and the reward settings that change length (toyrl/trainers/trl.py).

Each release's defaults are tied to its own grpo_config.py by the conformance suite
(tests/conformance/test_trl.py, `test_each_release_s_defaults_are_its_grpo_config_s`); here, what
the mapping makes of them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_check import SMALL, invoke
from toyrl.config import Config, InvalidInput
from toyrl.trainers import parse_sets, resolve
from toyrl.trainers.check import dr_grpo_settings
from toyrl.trainers.trl import RELEASES, TRAINER
from toyrl.variants import parse_variant

TOKEN_MEAN = "advantage=group_std_sample,aggregation=token_mean,std_eps=0.0001,epsilon=0.2"


@pytest.mark.parametrize(
    ("version", "spec", "step"),
    [
        ("1.16.0", TOKEN_MEAN, 8),
        ("0.22.2", TOKEN_MEAN, 8),
        ("0.22.1", "advantage=none,aggregation=token_mean,epsilon=0.2", 8),  # 'group' divides by nothing
        ("0.19.1", TOKEN_MEAN, 8),  # bnpo, beta 0
        ("0.18.0", TOKEN_MEAN + ",beta=0.04", 8),  # open-r1's pin: bnpo, beta 0.04
        ("0.16.1", TOKEN_MEAN + ",beta=0.04", 8),  # no loss_type: the micro-batch's token mean
        ("0.15.2", TOKEN_MEAN.replace("token_mean", "seq_mean_token_mean") + ",beta=0.04", 8),
        # per_device_train_batch_size=1 prompt of 8 completions, 8 accumulated micro-batches
        ("0.14.0", TOKEN_MEAN.replace("token_mean", "seq_mean_token_mean") + ",beta=0.04", 64),
    ],
)
def test_each_release_s_defaults_map_as_its_code(version: str, spec: str, step: int) -> None:
    resolved = resolve("trl", version, {})
    assert resolved.mapping.spec == spec
    assert resolved.mapping.step_responses == step


def test_the_releases_are_newest_first_with_what_changed() -> None:
    versions = [tuple(int(p) for p in v.split(".")) for v in TRAINER.releases]
    assert versions == sorted(versions, reverse=True) and TRAINER.latest == "1.16.0"
    assert set(RELEASES) == set(TRAINER.releases) and "0.18.0" in RELEASES
    assert all(covers and changed for covers, changed in RELEASES.values())
    assert "0.18.0-0.18.2" in TRAINER.releases["0.18.0"].source


def test_open_r1_s_pin_is_checked() -> None:
    """open-r1 pins TRL 0.18.0: bnpo, each micro-batch its own token mean, the generation batch
    shuffled once; `--version 0.18.0` runs."""
    bnpo = parse_variant(resolve("trl", "0.18.0", {"gradient_accumulation_steps": 4}).mapping.spec)
    assert bnpo.normaliser.per_micro_batch and bnpo.schedule.micro_batches == 4
    assert bnpo.schedule.shuffle == "once" and bnpo.kl.beta == 0.04
    code, stdout, stderr = invoke("check", "--trainer", "trl", "--version", "0.18.0", *SMALL)
    assert code == 0, stderr
    assert any(line.startswith("TRL 0.18.0 (") for line in stdout.splitlines())
    assert "verdict: " in stdout


def test_before_0_18_the_generation_batch_is_split_in_order() -> None:
    """0.17.0 splits the generation batch into micro-batches as generated (no shuffle), 0.16 takes
    one micro-batch a generation: bnpo's micro-batches hold whole groups."""
    for version in ("0.17.0", "0.16.1"):
        settings = {"gradient_accumulation_steps": 2}
        if version == "0.17.0":
            settings["loss_type"] = "bnpo"
        schedule = parse_variant(resolve("trl", version, settings).mapping.spec).schedule
        assert (schedule.micro_batches, schedule.shuffle) == (2, "none"), version
    with pytest.raises(InvalidInput, match="loss_type='dapo' is not valid"):
        resolve("trl", "0.21.0", {"loss_type": "dapo"})
    with pytest.raises(InvalidInput, match="loss_type='cispo' is not valid"):
        resolve("trl", "0.25.1", {"loss_type": "cispo"})


def test_a_later_release_s_setting_is_a_note_not_a_misspelling() -> None:
    """num_iterations (0.16.0 on) in a 0.14.0 file: spelt like num_generations, but a real name."""
    resolved = resolve("trl", "0.14.0", {"num_iterations": 2}, frozenset({"num_iterations"}))
    assert (
        resolved.misspelt == {} and "a setting of TRL 0.16.0 and later" in resolved.unused["num_iterations"]
    )
    later = resolve("trl", "0.15.2", {"group_by_length": True}, frozenset({"group_by_length"}))
    assert "its own sampler" in later.unused["group_by_length"]
    assert resolve("trl", "0.14.0", {"group_by_length": True}, frozenset({"group_by_length"})).unused == {}


def test_the_kl_term_s_form_and_default_follow_the_release() -> None:
    """use_bias_correction_kl from 0.26.0 (False), True from 1.10.0; the plain k3 before."""
    for version, weighted in (("1.16.0", True), ("1.9.2", False), ("0.25.1", False)):
        kl = parse_variant(resolve("trl", version, {"beta": 0.04}).mapping.spec).kl
        assert kl.ratio_weighted is weighted, version


def test_dapo_s_normaliser_before_its_fixes() -> None:
    several = {"steps_per_generation": 4, "gradient_accumulation_steps": 2}
    older = resolve("trl", "1.9.0", several).mapping
    assert parse_variant(older.spec).normaliser.batch_tokens
    assert any("fixed in 1.9.1" in item for item in older.unmodelled)
    assert not any("fixed in 1.9.1" in item for item in resolve("trl", "1.9.2", several).mapping.unmodelled)
    masked = {"mask_truncated_completions": True}
    assert any("counts the truncated" in u for u in resolve("trl", "1.8.0", masked).mapping.unmodelled)
    assert not any("counts the truncated" in u for u in resolve("trl", "1.9.0", masked).mapping.unmodelled)


def test_luspo_before_1_10_is_refused_in_one_line() -> None:
    with pytest.raises(InvalidInput, match="loss_type='luspo' is not modelled") as error:
        resolve("trl", "0.29.1", {"loss_type": "luspo"})
    assert "averages over the padding" in str(error.value) and "\n" not in str(error.value)
    assert "aggregation=seq_mean_token_sum" in resolve("trl", None, {"loss_type": "luspo"}).mapping.spec


@pytest.mark.parametrize(
    ("settings", "epsilon", "high", "note"),
    [
        ({"epsilon": 10}, 1.0, 1.0, "never binds"),  # DeepSeekMath's epsilon in TRL's docs, on policy
        ({"epsilon": 10, "epsilon_high": 0.28}, 1.0, 0.28, "1 - 10 <= 0 never binds"),
        ({"epsilon_high": 12}, 0.2, 0.2, "epsilon_high=12: the upper bound never binds"),
        ({"epsilon": 0.2, "epsilon_high": 5.0}, 0.2, 5.0, None),
    ],
)
def test_a_clip_that_cannot_bind_is_no_clip(settings: dict, epsilon: float, high: float, note: str) -> None:
    resolved = resolve("trl", None, settings)
    objective = parse_variant(resolved.mapping.spec).objective
    assert (objective.epsilon, objective.clip_high) == (epsilon, high)
    assert any(note in n for n in resolved.mapping.notes) if note else resolved.mapping.notes == []


def test_a_clip_beyond_the_toy_s_range_off_policy_is_one_line() -> None:
    with pytest.raises(
        InvalidInput, match="epsilon=10 bounds the ratio at 11, beyond the toy's clip ranges"
    ) as error:
        resolve("trl", None, {"epsilon": 10, "num_iterations": 2})
    assert "\n" not in str(error.value)
    assert "epsilon_high" not in resolve("trl", None, {"loss_type": "cispo", "epsilon_high": 20}).mapping.spec
    with pytest.raises(InvalidInput, match="epsilon_high=20 bounds the ratio at 20"):
        resolve("trl", None, {"loss_type": "cispo", "epsilon_high": 20, "steps_per_generation": 2})
    assert "dual_clip=20.0" in resolve("trl", None, {"delta": 20}).mapping.spec  # no bound in TRL


OVERLONG = ["accuracy_reward", "get_soft_overlong_punishment"]


@pytest.mark.parametrize(
    ("settings", "reward"),
    [
        # trl grpo's punishment (1280, 256): from 1024 tokens down to -1 at 1280
        ({"max_completion_length": 1280}, {"buffer": 0.2, "penalty_factor": 1.0}),
        # the ramp stops at 1152, half way: 128 of 1152 tokens, down to -0.5
        ({"max_completion_length": 1152}, {"buffer": 128 / 1152, "penalty_factor": 0.5}),
        (
            {"max_completion_length": 1280, "reward_weights": [2.0, 1.0]},
            {"buffer": 0.2, "penalty_factor": 0.5},
        ),
    ],
)
def test_soft_overlong_punishment_is_the_toy_s_overlong_reward(settings: dict, reward: dict) -> None:
    resolved = resolve("trl", None, {"reward_funcs": OVERLONG} | settings)
    stage = parse_variant(resolved.mapping.spec).reward
    assert (stage.buffer, stage.penalty_factor, stage.incorrect) == pytest.approx(
        (reward["buffer"], reward["penalty_factor"], 0.0), rel=1e-5
    )


def test_soft_overlong_punishment_where_it_never_applies_or_cannot_be_had() -> None:
    default = resolve("trl", None, {"reward_funcs": OVERLONG})  # max_completion_length 512 < 1024
    assert "reward=" not in default.mapping.spec and any("never applies" in n for n in default.mapping.notes)
    refusals = [
        ("0.22.2", {}, "registers unbuilt, so its first reward call fails"),
        ("0.21.0", {}, "does not know"),
        (None, {"max_completion_length": 2048}, "gives -1 to every completion past 1280 tokens"),
        (None, {"reward_weights": [1.0]}, "reward_weights has 1 weights for 2 reward functions"),
        (
            None,
            {"multi_objective_aggregation": "normalize_then_sum", "max_completion_length": 1280},
            "sums first",
        ),
    ]
    for version, settings, message in refusals:
        with pytest.raises(InvalidInput, match=message) as error:
            resolve("trl", version, {"reward_funcs": OVERLONG} | settings)
        assert "\n" not in str(error.value)
    with pytest.raises(InvalidInput, match="valid: a reward function beside"):
        resolve(
            "trl", None, {"reward_funcs": ["get_soft_overlong_punishment"], "max_completion_length": 1280}
        )


def test_reward_settings_from_text() -> None:
    sets = parse_sets(
        ["reward_funcs=[accuracy_reward, get_soft_overlong_punishment]", "reward_weights=1,0.5"]
    )
    resolved = resolve("trl", None, sets | {"max_completion_length": "1280"})
    assert resolved.values["reward_funcs"] == OVERLONG and resolved.values["reward_weights"] == [1.0, 0.5]
    assert "penalty_factor=0.5" in resolved.mapping.spec
    with pytest.raises(InvalidInput, match="reward_weights='heavy' is not valid; valid: a float"):
        resolve("trl", None, {"reward_weights": "heavy"})


def test_check_runs_trl_grpo_s_overlong_reward(tmp_path: Path) -> None:
    path = tmp_path / "grpo.json"
    path.write_text(
        json.dumps({"reward_funcs": OVERLONG, "max_completion_length": 1280, "loss_type": "grpo"})
    )
    code, stdout, stderr = invoke("check", str(path), "--json", *SMALL)
    assert code == 0, stderr
    result = json.loads(stdout)
    assert "reward=soft_overlong" in result["spec"] and "reward=" not in result["dr_grpo_spec"]


def test_normalize_then_sum_divides_by_the_std_whatever_scale_rewards_says() -> None:
    settings = {
        "loss_type": "dr_grpo",
        "scale_rewards": "none",
        "multi_objective_aggregation": "normalize_then_sum",
    }
    resolved = resolve("trl", None, settings)
    assert parse_variant(resolved.mapping.spec).names()["advantage"] == "group_std_sample"
    assert "whatever scale_rewards='none' says" in resolved.mapping.notes[0]
    assert any("factor common to the batch" in u for u in resolved.mapping.unmodelled)
    assert dr_grpo_settings(resolved, Config()) == {"multi_objective_aggregation": "sum_then_normalize"}
    older = resolve("trl", "0.26.2", {"multi_objective_aggregation": "normalize_then_sum"})
    assert "a setting of TRL 0.27.0 and later" in older.unused["multi_objective_aggregation"]


def test_reward_weights_matter_where_they_change_the_loss() -> None:
    none = resolve(
        "trl", None, {"scale_rewards": "none", "reward_funcs": ["accuracy_reward"], "reward_weights": [2]}
    )
    assert any("weight 2 rescales the learning rate" in u for u in none.mapping.unmodelled)
    group = resolve("trl", None, {"reward_funcs": ["accuracy_reward"], "reward_weights": [2]})
    assert not any("reward_weights" in u for u in group.mapping.unmodelled)
    with pytest.raises(InvalidInput, match="the task's reward weighs -1"):
        resolve("trl", None, {"reward_funcs": ["accuracy_reward"], "reward_weights": [-1]})
