"""`toyrl check`: a trainer's settings mapped to a variant, run beside Dr. GRPO, bad input refused.

The mapping is checked here against the named presets whose `stands_for` names the same TRL
settings (a consistency check inside toyrl); whether those presets are what TRL's installed code
does is the conformance suite's job (tests/conformance/test_trl.py).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.config import Config, InvalidInput
from toyrl.trainers import parse_sets, registry, resolve
from toyrl.trainers.check import (
    Check,
    Outcome,
    dr_grpo_in,
    dr_grpo_settings,
    toy_micro_batches,
    toy_variant,
)
from toyrl.trainers.reading import read_settings
from toyrl.variants import VARIANTS, parse_variant

SMALL = ["--steps", "30", "--prompts", "8", "--batch-prompts", "4", "--seeds", "3", "--quiet"]


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize(
    ("settings", "preset"),
    [
        ({}, "trl_default"),
        ({"loss_type": "grpo"}, "trl_grpo"),
        ({"loss_type": "dr_grpo"}, "trl_dr_grpo_loss_only"),
        ({"loss_type": "dr_grpo", "scale_rewards": "none"}, "trl_dr_grpo"),
        ({"loss_type": "dr_grpo", "scale_rewards": False}, "trl_dr_grpo"),
        (parse_sets(["loss_type=dr_grpo", "scale_rewards=false"]), "trl_dr_grpo"),
        (parse_sets(["scale_rewards=True"]), "trl_default"),
        ({"scale_rewards": "none"}, "trl_scale_none_only"),
        ({"scale_rewards": "batch"}, "trl_batch_scale"),
    ],
)
def test_trl_settings_land_on_the_presets_that_stand_for_them(settings: dict, preset: str) -> None:
    resolved = resolve("trl", None, settings)
    assert parse_variant(resolved.mapping.spec).spec() == VARIANTS[preset].spec()


@pytest.mark.parametrize("version", ["0.22.0", "0.22.1"])
@pytest.mark.parametrize(
    ("scale", "preset"),
    [("group", "trl_scale_none_only"), ("batch", "trl_default"), ("none", "trl_default")],
)
def test_trl_0_22_swaps_scale_rewards(version: str, scale: str, preset: str) -> None:
    """TRL 0.22.0-0.22.1's code divides by the group std for 'batch' and 'none' and by nothing for
    'group' (tests/conformance/test_trl.py measures it on the installed 0.22.1)."""
    resolved = resolve("trl", version, {"scale_rewards": scale})
    assert parse_variant(resolved.mapping.spec).spec() == VARIANTS[preset].spec()
    assert "swaps the modes" in resolved.mapping.notes[0]
    with pytest.raises(InvalidInput, match="loss_type='cispo' is not valid"):
        resolve("trl", version, {"loss_type": "cispo"})  # not in that release


def _assumed(name: str) -> str:
    """The end of the first line when the input names no release: the newest assumed, the range modelled."""
    releases = list(registry()[name].releases)
    return (
        f"; release {releases[0]} assumed, the newest of the {len(releases)} modelled ({releases[-1]} to "
        f"{releases[0]}; --version RELEASE for another)"
    )


TRL_ASSUMED, VERL_ASSUMED, OPENRLHF_ASSUMED = (_assumed(name) for name in ("trl", "verl", "openrlhf"))
VERL = "actor_rollout_ref.actor."
MICRO_16 = {VERL + "ppo_micro_batch_size_per_gpu": 16}
DR_GRPO_SETTINGS = {
    VERL + "loss_agg_mode": "seq-mean-token-sum-norm",
    "algorithm.norm_adv_by_std_in_grpo": False,
}


@pytest.mark.parametrize(
    ("settings", "preset"),
    [
        ({}, "verl_default"),
        ({VERL + "loss_agg_mode": "seq-mean-token-mean"}, "verl_seq_mean_token_mean"),
        ({VERL + "loss_agg_mode": "seq-mean-token-sum"}, "verl_seq_mean_token_sum"),
        ({VERL + "loss_agg_mode": "seq-mean-token-sum-norm", **MICRO_16}, "verl_sum_norm_only"),
        ({**DR_GRPO_SETTINGS, **MICRO_16}, "verl_dr_grpo"),
        ({**DR_GRPO_SETTINGS, VERL + "loss_scale_factor": 1500}, "verl_dr_grpo_constant"),
        ({**DR_GRPO_SETTINGS, "trainer.use_v1": False}, "verl_dr_grpo_constant"),
    ],
)
def test_verl_settings_land_on_the_presets_that_stand_for_them(settings: dict, preset: str) -> None:
    """The presets are the settings' loss and advantage at one optimiser step per batch; verl's
    defaults take 1024 / 256 = 4 (in the batch's order) and apply the dual clip c = 3. Without
    loss_scale_factor, seq-mean-token-sum-norm divides by each micro-batch's longest response: the
    mapping gives the micro-batch's size, which `toyrl check` turns into the toy's micro-batches
    (the presets' 8 micro-batches of the toy's batch)."""
    resolved = resolve("verl", None, {"algorithm.adv_estimator": "grpo", **settings})
    spec = resolved.mapping.spec
    if resolved.mapping.micro_batch_responses is not None:
        assert resolved.mapping.micro_batch_responses == 16
        spec += ",micro_batches=8"
    assert parse_variant(spec).spec() == VARIANTS[preset].spec() | {"mini_batches": 4, "dual_clip": 3.0}
    assert not any("optimiser steps" in item for item in resolved.mapping.unmodelled)


def test_verl_sum_norm_without_a_scale_factor_divides_by_each_micro_batch_s_longest_response() -> None:
    """verl 0.9.1's default V1 trainer: the divisor is each micro-batch's longest response, so the
    micro-batch size is needed (verl requires it too, or use_dynamic_bsz's token budget, which the
    mapping hands on: ppo_max_token_len_per_gpu x ulysses_sequence_parallel_size), and the report
    says to set loss_scale_factor."""
    settings = {"algorithm.adv_estimator": "grpo", **DR_GRPO_SETTINGS}
    with pytest.raises(InvalidInput, match="ppo_micro_batch_size_per_gpu is unset"):
        resolve("verl", None, settings)
    dynamic = settings | {VERL + "use_dynamic_bsz": True, VERL + "ulysses_sequence_parallel_size": 2}
    resolved = resolve("verl", None, dynamic)
    assert resolved.mapping.micro_batch_responses is None
    assert resolved.mapping.layout.token_budget == 2 * 16384 and resolved.mapping.layout.ranks == 4
    (note,) = [item for item in resolved.mapping.notes if "loss_scale_factor is unset" in item]
    assert "ppo_max_token_len_per_gpu=16384" in note and f"Set {VERL}loss_scale_factor" in note
    resolved = resolve("verl", None, settings | {VERL + "ppo_micro_batch_size_per_gpu": 4})
    (note,) = [item for item in resolved.mapping.notes if "loss_scale_factor is unset" in item]
    assert "longest response" in note and f"Set {VERL}loss_scale_factor" in note
    # a constant divisor, given or the legacy trainer's padded width: Dr. GRPO's, no micro-batches
    for constant in ({VERL + "loss_scale_factor": 512}, {"trainer.use_v1": False}):
        resolved = resolve("verl", None, settings | constant)
        assert resolved.mapping.micro_batch_responses is None
        assert "seq_mean_token_sum_norm" in resolved.mapping.spec


@pytest.mark.parametrize(
    ("step", "micro", "count"), [(32, 4, 8), (32, 3, 8), (32, 64, 1), (30, 4, 6), (7, 1, 7)]
)
def test_toy_micro_batches_divide_the_step(step: int, micro: int, count: int) -> None:
    assert toy_micro_batches(step, micro) == count


def test_check_of_verl_s_default_sum_norm_quantifies_the_drift_and_its_fix() -> None:
    """With loss_scale_factor unset the check runs the micro-batch divisor beside Dr. GRPO and
    names the setting to change; with it set, the settings are Dr. GRPO's (one variant)."""
    settings = ["--set", "algorithm.adv_estimator=grpo", "--set", "algorithm.norm_adv_by_std_in_grpo=false"]
    settings += [
        "--set",
        f"{VERL}loss_agg_mode=seq-mean-token-sum-norm",
        "--set",
        f"{VERL}ppo_mini_batch_size=1024",
    ]
    code, stdout, stderr = invoke(
        "check", "--trainer", "verl", *settings, "--set", f"{VERL}ppo_micro_batch_size_per_gpu=1", *SMALL
    )
    assert code == 0, stderr
    # 32 responses a step over verl's 8 ranks (its default GPUs), each rank's 4 in micro-batches of 1
    assert "aggregation=seq_mean_token_sum_longest" in stdout and "micro_batches=4" in stdout
    assert "ranks=8" in stdout
    assert f"Set {VERL}loss_scale_factor" in stdout
    assert "verdict: length drift: wrong answers end" in stdout
    code, stdout, stderr = invoke(
        "check", "--trainer", "verl", *settings, "--set", f"{VERL}loss_scale_factor=1500", *SMALL
    )
    assert code == 0, stderr
    assert "preset verl_dr_grpo_constant" in stdout
    assert "verdict: these settings are Dr. GRPO itself" in stdout


def test_verl_estimators_epochs_and_kl() -> None:
    with pytest.raises(InvalidInput, match="PPO's GAE needs a value model"):
        resolve("verl", None, {})  # verl's own default estimator
    resolved = resolve(
        "verl",
        "0.9.1",
        {
            "algorithm.adv_estimator": "reinforce_plus_plus_baseline",
            VERL + "ppo_epochs": 2,
            VERL + "clip_ratio_high": 0.28,
            VERL + "use_kl_loss": True,
            VERL + "kl_loss_coef": 0.01,
            "data.train_batch_size": 256,
        },
    )
    variant = parse_variant(resolved.mapping.spec)
    assert variant.names()["advantage"] == "token_whiten_sample"
    assert (variant.num_iterations, variant.objective.clip_high, variant.kl.beta) == (2, 0.28, 0.01)
    assert variant.objective.dual_clip == 3.0 and variant.schedule.mini_batches == 1  # 256 / 256
    shuffled = resolve(
        "verl",
        None,
        {"algorithm.adv_estimator": "grpo", VERL + "shuffle": True, VERL + "ppo_mini_batch_size": 128},
    )
    schedule = parse_variant(shuffled.mapping.spec).schedule
    assert (schedule.mini_batches, schedule.shuffle) == (8, "epoch")
    uneven = resolve("verl", None, {"algorithm.adv_estimator": "grpo", VERL + "ppo_mini_batch_size": 300})
    assert any("1024 is not a multiple of 300; the toy takes 3" in item for item in uneven.mapping.unmodelled)


@pytest.mark.parametrize(
    ("settings", "preset"),
    [
        ({"algo.advantage.estimator": "group_norm"}, "openrlhf_group_norm"),
        ({"algo.advantage.estimator": "dr_grpo"}, "openrlhf_dr_grpo"),
        ({"algo.advantage.estimator": "rloo"}, "openrlhf_rloo"),
        ({"algo.advantage.estimator": "reinforce_baseline"}, "openrlhf_reinforce_baseline"),
        (
            {"algo.advantage.estimator": "dr_grpo", "actor.loss_agg_mode": "seq-mean-token-mean"},
            "length_only",
        ),
    ],
)
def test_openrlhf_settings_land_on_the_presets(settings: dict, preset: str) -> None:
    """The presets' loss and advantage; OpenRLHF's default batch sizes (rollout 1024 x 1 sample,
    train batch 128) take 8 optimiser steps per rollout from a replay buffer shuffled each epoch."""
    resolved = resolve("openrlhf", None, settings)
    spec = parse_variant(resolved.mapping.spec).spec()
    schedule = {
        "mini_batches": 8,
        "shuffle": "epoch",
        "kl": "k1_reward",
        "beta": 0.01,
    }  # and its k1 KL reward
    assert spec == VARIANTS[preset].spec() | schedule
    with pytest.raises(InvalidInput, match="PPO's GAE needs a value model"):
        resolve("openrlhf", None, {})


@pytest.mark.parametrize(
    ("settings", "preset"),
    [({"critic_type": "grpo", "beta": 0}, "oat_grpo"), ({"beta": 0}, "oat_drgrpo")],
)
def test_oat_settings_land_on_the_presets(settings: dict, preset: str) -> None:
    resolved = resolve("oat", None, settings)
    spec = parse_variant(resolved.mapping.spec).spec()
    assert spec == VARIANTS[preset].spec() | {"mini_batches": 2, "shuffle": "epoch"}  # 128 x 2 / 128
    default = parse_variant(resolve("oat", "0.2.4", {}).mapping.spec)
    assert default.kl.beta == 0.1 and default.names()["normaliser"] == "seq_mean_token_sum_norm"


def test_a_trainer_default_group_size_is_named_when_the_toy_keeps_its_own() -> None:
    code, stdout, stderr = invoke("check", "--trainer", "oat", "--set", "beta=0", *SMALL)
    assert code == 0, stderr
    assert "note: group_size = 8 is the toy's; num_samples defaults to 2 (--set num_samples=... " in stdout


def test_settings_from_a_file_ignore_what_the_toy_has_no_use_for(tmp_path: Path) -> None:
    path = tmp_path / "verl.json"
    path.write_text(
        json.dumps(
            {
                "algorithm": {"adv_estimator": "grpo"},
                "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-6}}, "rollout": {"n": 4}},
                "trainer": {"project_name": "x"},
            }
        )
    )
    code, stdout, stderr = invoke("check", str(path), "--trainer", "verl", *SMALL)
    assert code == 0, stderr
    assert "not read (no bearing on the toy's gradients, or unknown to toyrl): " in stdout
    assert "actor_rollout_ref.actor.optim.lr, trainer.project_name" in stdout and "G = 4" in stdout
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"algorithm": {"adv_estimater": "grpo", "adv_estimator": "grpo"}}))
    code, stdout, stderr = invoke("check", str(typo), "--trainer", "verl", *SMALL)
    assert code == 1 and "not read (" not in stdout  # a checked file with a probable typo: exit status 1
    lines = stdout.splitlines()
    assert lines[1:3] == [
        "warning: 1 key looks misspelt; toyrl does not read it:",
        "  - algorithm.adv_estimater: did you mean algorithm.adv_estimator? "
        "(checked with algorithm.adv_estimator='grpo', given)",
    ]
    assert lines[-1].startswith("warning: the verdict takes the defaults in place of the 1 misspelt key")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"algorithm": {"adv_estimator": "grpo", "norm_adv_by_std_in_grpo": "maybe"}}))
    code, _, stderr = invoke("check", str(bad), "--trainer", "verl", *SMALL)
    valid = "valid: true or false (or 1 or 0)"
    assert code == 2 and f"algorithm.norm_adv_by_std_in_grpo='maybe' is not valid; {valid}" in stderr


def test_trl_settings_from_text_and_what_is_not_modelled() -> None:
    resolved = resolve(
        "trl",
        "1.16.0",
        parse_sets(["num_iterations=2", "epsilon_high=0.28", "mask_truncated_completions=true", "beta=0.04"]),
    )
    variant = parse_variant(resolved.mapping.spec)
    assert (variant.num_iterations, variant.objective.clip_high, variant.kl.beta) == (2, 0.28, 0.04)
    assert variant.selector.keeps_truncated is False
    assert variant.kl.ratio_weighted  # use_bias_correction_kl=True, TRL's default: beta rho k3
    bnpo = resolve("trl", None, {"loss_type": "bnpo", "gradient_accumulation_steps": 4})
    local = parse_variant(bnpo.mapping.spec)
    assert local.normaliser.per_micro_batch and local.schedule.micro_batches == 4
    assert (local.schedule.mini_batches, local.schedule.shuffle) == (1, "once")
    left_out = resolve("trl", None, {"loss_type": "bnpo"}).mapping.unmodelled
    assert len(left_out) == 1 and left_out[0].startswith("max_grad_norm=1.0: gradient-norm clipping")
    assert resolve("trl", None, {"loss_type": "bnpo", "max_grad_norm": 0}).mapping.unmodelled == []
    several = resolve("trl", None, {"steps_per_generation": 8, "gradient_accumulation_steps": 2})
    schedule = parse_variant(several.mapping.spec).schedule
    assert (schedule.mini_batches, schedule.micro_batches, schedule.shuffle) == (4, 1, "once")
    assert parse_variant(several.mapping.spec).normaliser.batch_tokens  # dapo: the generation batch's tokens
    clipped = parse_variant(resolve("trl", None, {"delta": 1.5, "epsilon_high": 0.28}).mapping.spec)
    assert clipped.objective.dual_clip == 1.5
    low = resolve("trl", None, {"delta": 1.1})
    assert "dual_clip" not in low.mapping.spec and any(
        "delta=1.1 < 1 + epsilon_high" in u for u in low.mapping.unmodelled
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"los_type": "grpo"}, "no setting 'los_type' that toyrl knows (did you mean 'loss_type'?)"),
        ({"loss_type": "grpoo"}, "loss_type='grpoo' is not valid (did you mean 'grpo'?)"),
        (
            {"loss_type": "cispo"},
            "caps each token's weight at epsilon_high (or epsilon when it is None) = 0.2",
        ),
        (
            {"loss_type": "sapo", "importance_sampling_level": "sequence"},
            "importance_sampling_level='sequence' is not modelled by toyrl yet (with loss_type='sapo'",
        ),
        ({"beta": -1}, "beta=-1.0 is not valid; valid: a float in [0, inf]"),
        ({"num_iterations": "two"}, "num_iterations='two' is not valid; valid: an int in [1, 64]"),
        ({"mask_truncated_completions": "maybe"}, "is not valid; valid: true or false (or 1 or 0)"),
    ],
)
def test_bad_settings_name_the_valid_ones(settings: dict, message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        resolve("trl", None, settings)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_unknown_trainer_and_release() -> None:
    with pytest.raises(InvalidInput, match=r"--trainer 'tlr' is not modelled \(did you mean 'trl'\?\)"):
        resolve("tlr", None, {})
    every = r"modelled: 1\.16\.0, .*, 0\.14\.0$"
    with pytest.raises(InvalidInput, match=r"--version 0\.1 of TRL is not modelled; " + every):
        resolve("trl", "0.1", {})


def test_settings_files(tmp_path: Path) -> None:
    path = tmp_path / "grpo.json"
    path.write_text(json.dumps({"loss_type": "dr_grpo", "scale_rewards": "none"}))
    assert read_settings(path) == {"loss_type": "dr_grpo", "scale_rewards": "none"}
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({"actor": {"loss_agg_mode": "token-mean"}, "n": 8}))
    assert read_settings(nested) == {"actor.loss_agg_mode": "token-mean", "n": 8}
    broken = tmp_path / "broken.json"
    broken.write_text("{loss_type: ")
    with pytest.raises(InvalidInput, match="not valid JSON"):
        read_settings(broken)
    with pytest.raises(
        InvalidInput, match=r"expected a trainer's configuration \(\.json, \.yaml, \.yml, \.toml\)"
    ):
        read_settings(_touch(tmp_path / "grpo.ini"))
    toml = tmp_path / "rl.toml"  # prime-rl's form: tables are sections
    toml.write_text('max_steps = 20\n\n[trainer.loss]\nratio_type = "token"\nmask = { low = 0.2 }\n')
    assert read_settings(toml) == {
        "max_steps": 20,
        "trainer.loss.ratio_type": "token",
        "trainer.loss.mask.low": 0.2,
    }
    toml.write_text("a = 1\na = 2\n")
    with pytest.raises(InvalidInput, match=r"rl.toml: not valid TOML \(Cannot overwrite a value"):
        read_settings(toml)
    with pytest.raises(InvalidInput, match="no such file"):
        read_settings(tmp_path / "missing.json")
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(InvalidInput, match="a mapping of settings"):
        read_settings(listed)


def _touch(path: Path) -> Path:
    path.write_text("")
    return path


def test_yaml_settings(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    path = tmp_path / "grpo.yaml"
    path.write_text("loss_type: dr_grpo\nscale_rewards: false\nnum_generations: 4\n")
    assert read_settings(path) == {"loss_type": "dr_grpo", "scale_rewards": False, "num_generations": 4}


def outcome(name: str, incorrect: list[float]) -> Outcome:
    values = np.array(incorrect)
    return Outcome(
        VARIANTS[name], np.full(len(values), 0.5), values, np.full(len(values), 300.0), values * 0 + 500
    )


def test_the_verdict_needs_four_standard_errors_and_two_percent() -> None:
    resolved = resolve("trl", None, {})
    reference = outcome("dr_grpo", [500, 510, 490, 505])

    def verdict(incorrect: list[float]) -> str:
        check = Check(
            resolved, None, [0, 1, 2, 3], outcome("trl_default", incorrect), reference, False, None, None
        )  # type: ignore[arg-type]
        return check.verdict()

    # differences 200, 202, 198, 202: mean 200.5; a bootstrap mean lies within 198 and 202
    drift = verdict([700, 712, 688, 707])
    assert drift.startswith(
        "length drift: wrong answers end longer than under Dr. GRPO by +200 tokens (95% CI +"
    )
    found = re.search(r"\(95% CI \+(\d+) to \+(\d+); paired bootstrap over 4 seeds\)", drift)
    assert found, drift
    low, high = map(float, found.groups())
    assert 198 <= low < 200.5 < high <= 202
    shorter = Check(
        resolved,
        None,
        [0, 1, 2, 3],
        outcome("trl_default", [450, 460, 440, 455]),
        outcome("dr_grpo", [300, 310, 290, 305]),
        False,
        None,
        None,
    )  # type: ignore[arg-type]
    assert shorter.verdict().startswith(  # every seed's difference is 150: the interval is [150, 150]
        "wrong answers end longer than under Dr. GRPO by +150 tokens (95% CI +150 to +150; paired bootstrap "
        "over 4 seeds), though shorter than at the start"
    )
    assert verdict([400, 410, 390, 405]) == (
        "wrong answers end shorter than under Dr. GRPO: -100 tokens (95% CI -100 to -100; paired bootstrap "
        "over 4 seeds)"
    )
    assert verdict([505, 515, 495, 510]).startswith("no more length drift than Dr. GRPO")  # 5 tokens: < 2%
    within = verdict([560, 470, 520, 470])
    assert within.startswith("no more length drift than Dr. GRPO")  # within 4 SE
    assert "(95% CI " in within and "within 4 standard errors" in within


def test_check_runs_the_settings_beside_dr_grpo() -> None:
    code, stdout, stderr = invoke("check", "--set", "loss_type=grpo", *SMALL)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0] == "read as TRL (key loss_type)" + TRL_ASSUMED
    assert lines[1].startswith("TRL 1.16.0 (") and lines[1].endswith("loss_type='grpo'")
    assert "(preset trl_grpo)" in lines[2]
    assert "3 seeds x 30 steps" in stdout and "Dr. GRPO" in stdout and stdout.count("verdict:") == 1
    assert "final step, mean ± sd over 3 seeds (exact expectations):" in stdout
    assert "(95% CI " in stdout and "; paired bootstrap over 3 seeds)" in stdout
    code, stdout, _ = invoke("check", "--set", "loss_type=grpo", "--json", *SMALL)
    data = json.loads(stdout)
    difference = data["difference_length_incorrect"]
    low, high = difference["ci95"]
    assert low <= difference["mean"] <= high
    assert difference["ci_method"].startswith("percentile bootstrap over 3 paired seeds")
    assert data["preset"] == "trl_grpo" and len(data["setting"]["length_incorrect"]) == 3
    assert data["settings"]["loss_type"] == "grpo" and data["given"] == {"loss_type": "grpo"}


def test_check_compares_with_dr_grpo_in_the_same_schedule() -> None:
    """verl's defaults take 4 mini-batches with the dual clip: Dr. GRPO is run with the same
    schedule and clip, and the settings are named as the loss of their one-step preset."""
    code, stdout, stderr = invoke(
        "check", "--trainer", "verl", "--set", "algorithm.adv_estimator=grpo", *SMALL
    )
    assert code == 0, stderr
    assert "(the loss and advantage of preset verl_default, at one optimiser step a batch)" in stdout
    assert (
        "Dr. GRPO here: advantage=none,aggregation=seq_mean_token_sum_norm,mini_batches=4,ranks=8,"
        "prompt_tokens=1501,dual_clip=3.0" in stdout  # the mini-batches as verl's 8 default ranks hold them
    )
    assert dr_grpo_in(VARIANTS["trl_default"]) is VARIANTS["dr_grpo"]
    masked = dr_grpo_in(parse_variant("dapo"))
    assert masked.selector.keeps_truncated and masked.objective.clip_high == 0.28  # the clip, not the mask


def test_check_of_dr_grpo_itself_and_group_size() -> None:
    code, stdout, stderr = invoke(
        "check",
        "--set",
        "loss_type=dr_grpo",
        "--set",
        "scale_rewards=none",
        "--set",
        "num_generations=4",
        *SMALL,
    )
    assert code == 0, stderr
    assert "G = 4" in stdout and "these settings are Dr. GRPO itself" in stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "loss_type"], "--set 'loss_type': expected KEY=VALUE"),
        (["--set", "loss_typ=grpo"], "loss_typ: did you mean TRL's loss_type?"),
        (["--trainer", "trl", "--set", "loss_typ=grpo"], "did you mean 'loss_type'?"),
        (["--trainer", "verll"], "--trainer 'verll' is not modelled"),
        (["--seeds", "1"], "seeds"),
        (["missing.json"], "missing.json: no such file"),
    ],
)
def test_check_bad_input_is_one_line_exit_2(args: list[str], message: str) -> None:
    code, stdout, stderr = invoke("check", *args, "--steps", "5")
    assert code == 2 and message in stderr and stderr.count("\n") == 1 and stdout == ""


def test_verl_0_7_0_normalises_each_micro_batch() -> None:
    """verl 0.7.0's legacy actor takes each loss_agg_mode on each micro-batch and averages them:
    token-mean per micro-batch, seq-mean-token-sum-norm as a per-micro-batch sum / L_norm (the
    conformance suite checks both against 0.7.0's update_policy); its micro-batch size is required."""
    settings = {"algorithm.adv_estimator": "grpo", VERL + "ppo_micro_batch_size_per_gpu": 128}
    mapping = resolve("verl", "0.7.0", settings).mapping
    token_mean = parse_variant(mapping.spec)
    assert token_mean.normaliser.per_micro_batch and mapping.micro_batch_responses == 128  # 2 of 256 x 1
    assert (token_mean.schedule.mini_batches, token_mean.schedule.shuffle) == (4, "none")
    norm = resolve("verl", "0.7.0", settings | {VERL + "loss_agg_mode": "seq-mean-token-sum-norm"})
    assert parse_variant(norm.mapping.spec).names()["normaliser"] == "token_sum_norm"
    newer = resolve(
        "verl",
        "0.9.1",
        {"algorithm.adv_estimator": "grpo", VERL + "loss_agg_mode": "seq-mean-token-sum-norm", **MICRO_16},
    )
    assert parse_variant(newer.mapping.spec).names()["normaliser"] == "seq_mean_token_sum_longest"
    with pytest.raises(
        InvalidInput, match=re.escape("ppo_micro_batch_size_per_gpu is required in verl 0.7.0")
    ):
        resolve("verl", "0.7.0", {"algorithm.adv_estimator": "grpo"})
    with pytest.raises(InvalidInput, match=re.escape("no setting 'algorithm.filter_groups.enable'")):
        resolve("verl", "0.7.0", settings | {"algorithm.filter_groups.enable": True})


def test_dapo_settings_land_on_the_dapo_preset() -> None:
    """verl's DAPO reward manager with its overlong buffer and filter_groups: the dapo preset's
    reward and sampler; OpenRLHF's overlong buffer on its reward function's 0 / 1."""
    settings = {
        "algorithm.adv_estimator": "grpo",
        VERL + "clip_ratio_high": 0.28,
        "reward.reward_manager.name": "dapo",
        "reward.reward_kwargs.overlong_buffer_cfg.enable": True,
        "reward.reward_kwargs.overlong_buffer_cfg.len": 4096,
        "reward.reward_kwargs.max_resp_len": 20480,
        "algorithm.filter_groups.enable": True,
        "algorithm.filter_groups.metric": "acc",
        "algorithm.filter_groups.max_num_gen_batches": 10,
    }
    variant = parse_variant(resolve("verl", None, settings).mapping.spec)
    assert variant.reward == VARIANTS["dapo"].reward and variant.names()["sampler"] == "filter_groups"
    assert variant.sampler.max_rounds == 100_000  # verl 0.9.1's V1 trainer never reads max_num_gen_batches
    loss = {k: v for k, v in variant.spec().items() if k not in ("mini_batches", "dual_clip", "max_rounds")}
    assert loss == VARIANTS["dapo"].spec()
    with pytest.raises(
        InvalidInput,
        match=re.escape("overlong_buffer_cfg.len=0 must be in 1..reward.reward_kwargs.max_resp_len"),
    ):
        resolve("verl", None, settings | {"reward.reward_kwargs.overlong_buffer_cfg.len": 0})
    openrlhf = resolve(
        "openrlhf", None, {"algo.advantage.estimator": "group_norm", "reward.overlong_buffer_len": 512}
    )
    shaped = parse_variant(openrlhf.mapping.spec).reward
    assert (shaped.buffer, shaped.incorrect) == (0.25, 0.0)  # 512 of data.max_len 2048


def test_check_says_when_the_toys_optimiser_steps_are_smaller_than_the_trainers() -> None:
    """verl's defaults take 4 steps of 256 prompts x rollout.n; on a toy batch of 4 prompts x 8 the 4
    steps hold 8 responses each, which the output says; at the toy's scale it says nothing."""
    code, stdout, stderr = invoke(
        "check", "--trainer", "verl", "--set", "algorithm.adv_estimator=grpo", *SMALL
    )
    assert code == 0, stderr
    assert (
        "note: the toy's optimiser steps hold 8 responses (B x G / mini_batches), the trainer's 256" in stdout
    )
    at_scale = ["--set", "data.train_batch_size=4", "--set", f"{VERL}ppo_mini_batch_size=1"]
    at_scale += ["--set", "actor_rollout_ref.rollout.n=8"]
    code, stdout, stderr = invoke(
        "check", "--trainer", "verl", "--set", "algorithm.adv_estimator=grpo", *at_scale, *SMALL
    )
    assert code == 0, stderr
    assert "mini_batches=4" in stdout and "optimiser steps hold" not in stdout


def test_openrlhf_older_releases_normalise_as_their_code() -> None:
    """0.10.3 takes the token mean of each micro-batch (one sample each by default: each response's
    own mean), 0.6.4 each response's mean with flat argument names, and whitens rloo's advantages;
    the conformance suite checks both against the installed releases."""
    group = {"algo.advantage.estimator": "group_norm", "rollout.n_samples_per_prompt": 8}
    default = parse_variant(resolve("openrlhf", "0.10.3", group).mapping.spec)
    assert default.names()["normaliser"] == "seq_mean_token_mean"
    four = resolve("openrlhf", "0.10.3", group | {"train.micro_batch_size": 4}).mapping
    # micro-batches of 4 samples: `toyrl.trainers.check` cuts the toy's optimiser steps to that size
    assert parse_variant(four.spec).normaliser.per_micro_batch and four.micro_batch_responses == 4
    newest = parse_variant(resolve("openrlhf", "0.11.2", group).mapping.spec)
    assert newest.names()["normaliser"] == "token_mean" and not newest.normaliser.per_micro_batch
    old = resolve("openrlhf", "0.6.4", {"advantage_estimator": "rloo", "n_samples_per_prompt": 8})
    variant = parse_variant(old.mapping.spec)
    assert (
        variant.names()["advantage"] == "token_whiten"
        and variant.names()["normaliser"] == "seq_mean_token_mean"
    )
    assert old.mapping.config == {"group_size": ("n_samples_per_prompt", 8)}
    renamed = resolve("openrlhf", "0.6.4", group)  # the names since 0.10.2, read as 0.6.4's own
    assert renamed.given == {"advantage_estimator": "group_norm", "n_samples_per_prompt": 8}
    assert renamed.renamed["algo.advantage.estimator"][0] == "advantage_estimator"
    with pytest.raises(InvalidInput, match=re.escape("no setting 'actor.loss_agg_mode'")):
        resolve("openrlhf", "0.10.3", group | {"actor.loss_agg_mode": "token-mean"})


@pytest.mark.parametrize(
    ("trainer", "version", "settings", "preset"),
    [
        ("trl", "0.22.1", {}, "trl_default@0.22.1"),
        ("openrlhf", "0.10.3", {"algo.advantage.estimator": "group_norm"}, "openrlhf_group_norm@0.10.3"),
        ("openrlhf", "0.10.3", {"algo.advantage.estimator": "dr_grpo"}, "openrlhf_dr_grpo@0.10.3"),
        ("openrlhf", "0.6.4", {"advantage_estimator": "rloo"}, "openrlhf_rloo@0.6.4"),
    ],
)
def test_versioned_presets_are_their_releases_defaults(
    trainer: str, version: str, settings: dict, preset: str
) -> None:
    """A release's preset is the loss and advantage `toyrl check --version` maps its defaults to
    (the schedule and the KL reward aside, which the presets leave out)."""
    spec = parse_variant(resolve(trainer, version, settings).mapping.spec).spec()
    loss = {
        key: value
        for key, value in spec.items()
        if key not in ("mini_batches", "shuffle", "kl", "beta", "dual_clip")
    }
    assert loss == VARIANTS[preset].spec()


def test_trl_sequence_level_is_gspo() -> None:
    """importance_sampling_level="sequence": objective=gspo with TRL's own clip range (the
    conformance suite checks it against GRPOTrainer); delta has no counterpart there."""
    resolved = resolve(
        "trl", None, {"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4}
    )
    variant = parse_variant(resolved.mapping.spec)
    assert variant.names()["objective"] == "gspo"
    assert (variant.objective.epsilon, variant.objective.clip_high) == (3e-4, 4e-4)
    plain = parse_variant(resolve("trl", None, {"importance_sampling_level": "sequence"}).mapping.spec)
    assert plain.objective.clip_high == 0.2  # TRL's epsilon, not gspo's own default
    capped = resolve("trl", None, {"importance_sampling_level": "sequence", "delta": 1.5})
    assert any("delta=1.5 with the sequence ratio" in item for item in capped.mapping.unmodelled)


def test_trl_cispo_and_sapo_are_their_objectives() -> None:
    """loss_type cispo: toyrl's cispo with no lower bound and cap 1 + epsilon_high = TRL's
    epsilon_high, normalised as dapo (batch_tokens with several steps); sapo: the gate with TRL's
    temperatures, normalised as grpo. delta acts on PPO's clip only (the conformance suite checks
    both losses against GRPOTrainer)."""
    cispo = resolve("trl", None, {"loss_type": "cispo", "epsilon_high": 5.0, "steps_per_generation": 4})
    variant = parse_variant(cispo.mapping.spec)
    assert variant.names()["objective"] == "cispo" and variant.names()["normaliser"] == "token_mean"
    assert (variant.objective.epsilon, variant.objective.epsilon_high) == (None, 4.0)
    assert variant.normaliser.batch_tokens and variant.schedule.mini_batches == 4
    sapo = resolve("trl", None, {"loss_type": "sapo", "sapo_temperature_neg": 2.0, "delta": 3.0})
    variant = parse_variant(sapo.mapping.spec)
    assert variant.names()["normaliser"] == "seq_mean_token_mean"
    assert (variant.objective.tau_pos, variant.objective.tau_neg) == (1.0, 2.0)
    assert any("delta=3.0: TRL applies it to PPO's clip only" in u for u in sapo.mapping.unmodelled)


def test_verl_new_families_map_to_their_stages() -> None:
    """verl's opo and gpg estimators, and its gspo, cispo, sapo and gpg policy losses (no dual
    clip but vanilla's; sapo always per response)."""
    mode = "actor_rollout_ref.actor.policy_loss.loss_mode"

    def mapped(settings: dict[str, Any]) -> Any:
        return parse_variant(
            resolve("verl", None, {"algorithm.adv_estimator": "grpo"} | settings).mapping.spec
        )

    assert mapped({"algorithm.adv_estimator": "opo"}).names()["advantage"] == "opo"
    gpg = mapped({"algorithm.adv_estimator": "gpg", mode: "gpg"})
    assert gpg.names()["advantage"] == "gpg" and gpg.names()["objective"] == "gpg"
    cispo = mapped({mode: "cispo"})
    assert (cispo.objective.epsilon, cispo.objective.epsilon_high) == (0.2, 0.2)
    sapo = mapped({mode: "sapo", "actor_rollout_ref.actor.tau_neg": 1.5})
    assert sapo.names()["normaliser"] == "seq_mean_token_mean" and sapo.objective.tau_neg == 1.5
    gspo = mapped({mode: "gspo"})
    assert gspo.names()["objective"] == "gspo" and gspo.objective.clip_high == 0.2
    assert mapped({}).objective.dual_clip == 3.0 and "dual_clip" not in gspo.spec()
    with pytest.raises(
        InvalidInput, match=re.escape("policy_loss.loss_mode='dppo_tv' is not modelled by toyrl yet")
    ):
        mapped({mode: "dppo_tv"})


def test_verl_reinforce_plus_plus_is_reinforce_pp() -> None:
    """reinforce_plus_plus at gamma 1: the rewards whitened over the batch's tokens, no group mean
    (the conformance suite checks it against verl's estimator); a discount is refused."""
    resolved = resolve("verl", None, {"algorithm.adv_estimator": "reinforce_plus_plus"})
    assert parse_variant(resolved.mapping.spec).names()["advantage"] == "reinforce_pp"
    with pytest.raises(InvalidInput, match=re.escape("algorithm.gamma=0.9 is not modelled by toyrl yet")):
        resolve("verl", None, {"algorithm.adv_estimator": "reinforce_plus_plus", "algorithm.gamma": 0.9})


# OpenRLHF's own README example of train_ppo_ray (openrlhf 0.11.2's package description, "RL
# Training: PPO/REINFORCE++ with Ray and vLLM"), with the README's GRPO-family variant line added
# before its last argument; it still spells two arguments by their names before 0.10.2.
OPENRLHF_README_0_11_2 = """\
# launch the master node of ray in container
ray start --head --node-ip-address 0.0.0.0 --num-gpus 8

ray job submit --address="http://127.0.0.1:8265" \\
   --runtime-env-json='{"working_dir": "/openrlhf"}' \\
   -- python3 -m openrlhf.cli.train_ppo_ray \\
   --ref.num_nodes 1 \\
   --ref.num_gpus_per_node 8 \\
   --actor.num_nodes 1 \\
   --actor.num_gpus_per_node 8 \\
   --vllm.num_engines 4 \\
   --vllm.tensor_parallel_size 2 \\
   --train.colocate_all \\
   --vllm.gpu_memory_utilization 0.5 \\
   --actor.model_name_or_path OpenRLHF/Llama-3-8b-sft-mixture \\
   --reward.model_name_or_path OpenRLHF/Llama-3-8b-rm-700k \\
   --ckpt.output_dir /openrlhf/examples/test_scripts/final/llama3-8b-rlhf \\
   --ckpt.save_hf \\
   --train.batch_size 128 \\
   --rollout.batch_size 1024 \\
   --train.dynamic_batch_enable \\
   --rollout.n_samples_per_prompt 1 \\
   --train.max_epochs 1 \\
   --prompt_max_len 1024 \\
   --data.max_samples 100000 \\
   --generate_max_len 1024 \\
   --ds.zero_stage 3 \\
   --actor.adam.lr 5e-7 \\
   --algo.kl.init_coef 0.01 \\
   --data.prompt_dataset OpenRLHF/prompt-collection-v0.1 \\
   --data.input_key context_messages \\
   --data.apply_chat_template \\
   --reward.normalize_enable \\
   --vllm.enable_sleep \\
   --ds.enable_sleep \\
   --algo.advantage.estimator dr_grpo \\
   --logger.wandb.key {wandb_token}

# Algorithm Variants (all use single-turn agent execution):
# --algo.advantage.estimator group_norm       # GRPO
"""
# The same example in openrlhf 0.9.3's README, by the names before 0.10.2.
OPENRLHF_README_0_9_3 = """\
ray job submit --address="http://127.0.0.1:8265" \\
   --runtime-env-json='{"working_dir": "/openrlhf"}' \\
   -- python3 -m openrlhf.cli.train_ppo_ray \\
   --ref_num_nodes 1 \\
   --actor_num_nodes 1 \\
   --colocate_all_models \\
   --pretrain OpenRLHF/Llama-3-8b-sft-mixture \\
   --train_batch_size 128 \\
   --rollout_batch_size 1024 \\
   --use_dynamic_batch \\
   --n_samples_per_prompt 1 \\
   --max_epochs 1 \\
   --prompt_max_len 1024 \\
   --generate_max_len 1024 \\
   --actor_learning_rate 5e-7 \\
   --init_kl_coef 0.01 \\
   --normalize_reward \\
   --advantage_estimator group_norm \\
   --use_wandb {wandb_token}
"""
# The toy's batch (4 prompts x 8) in one optimiser step: OpenRLHF's rollout of 1024 x n in train
# batches of 128 would take more steps than the toy's 32 responses hold.
OPENRLHF_AT_TOY_SCALE = ["--set", "rollout.batch_size=16", "--set", "rollout.n_samples_per_prompt=8"]


def test_a_verl_file_is_read_as_verl_without_trainer(tmp_path: Path) -> None:
    """The issue's case: a verl Dr. GRPO file, no --trainer. It was read as TRL's (every key not
    read, TRL's defaults judged); now its keys say whose it is. With loss_scale_factor unset, verl
    0.9.1 divides by each micro-batch's longest response: the check says so, measures the drift and
    names the setting; with it set, the file is Dr. GRPO itself."""
    pytest.importorskip("yaml")
    path = tmp_path / "dr_grpo.yaml"
    text = (
        "algorithm:\n  adv_estimator: grpo\n  norm_adv_by_std_in_grpo: false\n"
        "data:\n  train_batch_size: 4\n"
        "actor_rollout_ref:\n  rollout:\n    n: 8\n  actor:\n    ppo_mini_batch_size: 4\n"
        "    ppo_micro_batch_size_per_gpu: 4\n    loss_agg_mode: seq-mean-token-sum-norm\n"
    )
    path.write_text(text)
    code, stdout, stderr = invoke("check", str(path), *SMALL)
    assert code == 0, stderr
    assert (
        stdout.splitlines()[0] == "read as verl (keys under actor_rollout_ref.*, algorithm.*)" + VERL_ASSUMED
    )
    assert "pads each micro-batch (ppo_micro_batch_size_per_gpu=4 responses) to its own longest" in stdout
    assert f"Set {VERL}loss_scale_factor" in stdout and "not read (" not in stdout
    assert re.search(r"verdict: .*than under Dr\. GRPO|verdict: no more length drift", stdout)
    path.write_text(text + "    loss_scale_factor: 1500\n")
    code, stdout, stderr = invoke("check", str(path), *SMALL)
    assert code == 0, stderr
    assert "these settings are Dr. GRPO itself" in stdout and "not read (" not in stdout
    code, stdout, stderr = invoke("check", str(path), "--trainer", "trl", *SMALL)  # --trainer decides
    assert code == 0, stderr
    assert stdout.splitlines()[0] == "read as TRL (--trainer trl)" + TRL_ASSUMED and "not read (" in stdout


def test_a_trl_cli_config_is_read_as_trl(tmp_path: Path) -> None:
    """A `trl grpo --config FILE.yaml` file: GRPOConfig's keys with the script's model and dataset
    arguments, which tell TRL apart and are neither settings toyrl reads nor misspellings."""
    pytest.importorskip("yaml")
    path = tmp_path / "grpo.yaml"
    path.write_text(
        "model_name_or_path: Qwen/Qwen2-0.5B-Instruct\ndataset_name: trl-lib/tldr\n"
        "output_dir: Qwen2-0.5B-GRPO\nlearning_rate: 1.0e-6\nper_device_eval_batch_size: 4\n"
        "num_generations_eval: 4\nloss_type: dr_grpo\nscale_rewards: none\n"
    )
    code, stdout, stderr = invoke("check", str(path), *SMALL)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0] == "read as TRL (keys dataset_name, loss_type, model_name_or_path, ...)" + TRL_ASSUMED
    assert "warning" not in stdout and "Dr. GRPO itself" in stdout
    assert (
        "not read (no bearing on the toy's gradients, or unknown to toyrl): model_name_or_path, "
        "dataset_name, output_dir, learning_rate, per_device_eval_batch_size, num_generations_eval"
    ) in stdout


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"beta": 0.1}, "its keys (beta) are several trainers' alike; pass --trainer trl or --trainer oat"),
        (
            {"loss_type": "grpo", "algorithm": {"norm_adv_by_std_in_grpo": False}},
            "fits several trainers: TRL (key loss_type); verl (keys under algorithm.*); pass --trainer trl "
            "or --trainer verl",
        ),
        ({"learning_rat": 1}, "no key of a trainer toyrl models (learning_rat); pass --trainer trl | verl"),
        ({"scale_reward": "none"}, "(scale_reward: did you mean TRL's scale_rewards?)"),
    ],
)
def test_a_file_that_fits_no_trainer_or_several_is_refused(
    tmp_path: Path, settings: dict, message: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(settings))
    code, stdout, stderr = invoke("check", str(path), *SMALL)
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert stderr.startswith(f"toyrl: error: {path}") and message in stderr


def test_every_release_s_own_settings_are_read_as_its_trainer() -> None:
    """Property: the settings toyrl reads of any release, and their other names, are detected as
    that release's trainer; the verl names they are spelt like (critic.*) are not verl's evidence."""
    from toyrl.trainers import registry
    from toyrl.trainers.reading import detect

    for name, chosen in registry().items():
        # a trainer that extends another's configuration (Unsloth's, TRL's GRPOConfig) is told by
        # its own names beside the other's (`Trainer.marks`)
        own = list(chosen.marks) if chosen.extends else []
        for version, release in chosen.releases.items():
            assert detect([*release.settings, *own], "f")[0] == name, (name, version)
            if release.aliases:
                assert detect([*release.aliases, *own], "f")[0] == name, (name, version)
    with pytest.raises(InvalidInput, match="nothing to check"):
        invoke_raising("check")


def invoke_raising(*args: str) -> None:
    result = CliRunner().invoke(app, list(args))
    if result.exit_code == 2:
        raise InvalidInput(result.stderr)


@pytest.mark.parametrize(
    ("trainer", "key", "nearest"),
    [
        ("trl", "scale_reward", "scale_rewards"),
        ("trl", "loss-type", "loss_type"),
        ("trl", "num_generations_eval", None),  # GRPOConfig's own, not a typo
        ("trl", "max_prompt_length", None),
        ("verl", "algorithm.adv_estimater", "algorithm.adv_estimator"),
        ("verl", VERL + "policy_loss.tau_pos", VERL + "tau_pos"),  # one level too deep
        ("verl", "actor_rollout_ref.actr.loss_agg_mode", VERL + "loss_agg_mode"),
        ("verl", "loss_agg_mode", VERL + "loss_agg_mode"),  # at the top level
        ("verl", "critic.ppo_epochs", None),  # the critic's, another section
        ("verl", VERL + "optim.lr", None),
        ("verl", VERL + "ppo_micro_batch_size", None),  # verl's deprecated name
        ("openrlhf", "algo.advantage.estimater", "algo.advantage.estimator"),
        # the older name's typo, told by this release's name of the setting
        ("openrlhf", "advantage_estimater", "algo.advantage.estimator"),
        ("openrlhf", "eval.n_samples_per_prompt", None),
        ("oat", "critic_typ", "critic_type"),
    ],
)
def test_misspelt_keys_are_named_with_the_setting_meant(trainer: str, key: str, nearest: str | None) -> None:
    estimator = {
        "verl": {"algorithm.adv_estimator": "grpo"},
        "openrlhf": {"algo.advantage.estimator": "rloo"},
    }
    resolved = resolve(trainer, None, {key: 1, **estimator.get(trainer, {})}, frozenset({key}))
    assert resolved.misspelt == ({key: nearest} if nearest else {})
    assert resolved.ignored == ([] if nearest else [key])


def test_a_misspelt_key_is_reported_first_however_many_keys_are_not_read(tmp_path: Path) -> None:
    """`scale_reward` among 14 keys toyrl does not read: before the table, with the setting meant
    and its value in the check, and again after the verdict; exit status 1, --json says it too."""
    unread = {f"logging_option_{i}": i for i in range(13)} | {"output_dir": "out"}
    path = tmp_path / "grpo.json"
    path.write_text(json.dumps(unread | {"loss_type": "dr_grpo", "scale_reward": "none"}))
    code, stdout, _ = invoke("check", str(path), *SMALL)
    lines = stdout.splitlines()
    assert code == 1
    assert lines[1:3] == [
        "warning: 1 key looks misspelt; toyrl does not read it:",
        "  - scale_reward: did you mean scale_rewards? (checked with scale_rewards='group', its default)",
    ]
    assert "and 6 more (--json lists them all)" in stdout and "scale_reward," not in stdout
    code, stdout, _ = invoke("check", str(path), "--json", *SMALL)
    assert code == 1 and json.loads(stdout)["misspelt"] == {"scale_reward": "scale_rewards"}


def test_openrlhf_readme_command_lines_are_read_as_given(tmp_path: Path) -> None:
    """OpenRLHF's README example, as a script and as a command line after --: wrappers, comments,
    flags without values; the names it keeps from before 0.10.2 are read and noted."""
    script = tmp_path / "train.sh"
    script.write_text(OPENRLHF_README_0_11_2)
    code, stdout, stderr = invoke("check", str(script), *OPENRLHF_AT_TOY_SCALE, *SMALL)
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0] == f"read as OpenRLHF ({script}, line 4: openrlhf.cli.train_ppo_ray)" + OPENRLHF_ASSUMED
    assert "algo.advantage.estimator='dr_grpo'" in lines[1] and "rollout.max_new_tokens=1024" in lines[1]
    assert (
        "note: generate_max_len is rollout.max_new_tokens (the name before OpenRLHF 0.10.2, which "
        "0.11.2's parser refuses)"
    ) in lines
    assert "advantage=none,aggregation=token_mean" in lines[2] and "warning" not in stdout
    command = "\n".join(OPENRLHF_README_0_11_2.splitlines()[3:-3]).replace("\\\n", " ")
    code, stdout_line, stderr = invoke("check", *OPENRLHF_AT_TOY_SCALE, *SMALL, "--", *shlex.split(command))
    assert code == 0, stderr
    assert stdout_line.splitlines()[1:] == lines[1:]
    assert stdout_line.splitlines()[0] == (
        "read as OpenRLHF (the command line: openrlhf.cli.train_ppo_ray)" + OPENRLHF_ASSUMED
    )


def test_openrlhf_names_before_0_10_2_are_the_same_settings(tmp_path: Path) -> None:
    """0.9.3's README example, by the older names: the same settings of 0.11.2 as the newer names
    give, each rename noted; under --version 0.6.4 the older names are its own."""
    script = tmp_path / "old.sh"
    script.write_text(OPENRLHF_README_0_9_3)
    old = ["--set", "rollout_batch_size=16", "--set", "n_samples_per_prompt=8"]
    code, stdout, stderr = invoke("check", str(script), *old, "--json", *SMALL)
    assert code == 0, stderr
    data = json.loads(stdout)
    assert (
        data["given"]["algo.advantage.estimator"] == "group_norm" and data["given"]["train.batch_size"] == 128
    )
    assert data["renamed"]["advantage_estimator"] == "algo.advantage.estimator"
    newer = resolve(
        "openrlhf",
        None,
        {
            "algo.advantage.estimator": "group_norm",
            "rollout.n_samples_per_prompt": 8,
            "rollout.batch_size": 16,
        },
    )
    assert data["spec"] == parse_variant(newer.mapping.spec).spec_text()
    assert resolve("openrlhf", "0.6.4", {"advantage_estimator": "dr_grpo"}).renamed == {}


def test_openrlhf_dr_grpo_estimator_is_its_own_value() -> None:
    """`dr_grpo` is a value of OpenRLHF's estimator (0.6.4 to 0.11.2): r - group mean, the token
    mean kept (the preset openrlhf_dr_grpo); it changes the advantage only."""
    for version, key in (("0.11.2", "algo.advantage.estimator"), ("0.10.3", "advantage_estimator")):
        spec = parse_variant(resolve("openrlhf", version, {key: "dr_grpo"}).mapping.spec).spec()
        assert spec["advantage"] == "none" and spec["aggregation"] != "seq_mean_token_sum_norm"


def test_verl_interpolations_are_resolved_as_hydra_does(tmp_path: Path) -> None:
    """verl's configuration refers to its own keys: `${data.max_response_length}`,
    `${oc.select:...}`; an interpolation toyrl cannot resolve is refused where it reads the key,
    naming it, and listed where it does not. A key toyrl does not read is left as written."""
    pytest.importorskip("omegaconf")
    path = tmp_path / "verl.yaml"
    text = (
        "data:\n  train_batch_size: 4\n  max_response_length: 1024\n"
        "algorithm:\n  adv_estimator: grpo\n"
        "actor_rollout_ref:\n  rollout:\n    n: 8\n"
        "  actor:\n    rollout_n: ${oc.select:actor_rollout_ref.rollout.n,1}\n"
        "    ppo_micro_batch_size_per_gpu: ${oc.select:actor_rollout_ref.rollout.n,1}\n"
        "    ppo_mini_batch_size: ${data.train_batch_size}\n"
        "    loss_scale_factor: ${data.max_response_length}\n"
        "    checkpoint:\n      save_contents: ${data.missing}\n"
    )
    path.write_text(text)
    settings = read_settings(path)
    assert (
        settings[VERL + "ppo_mini_batch_size"] == 4 and settings[VERL + "ppo_micro_batch_size_per_gpu"] == 8
    )
    assert settings[VERL + "rollout_n"] == "${oc.select:actor_rollout_ref.rollout.n,1}"  # not read
    assert settings[VERL + "loss_scale_factor"] == 1024
    code, stdout, stderr = invoke("check", str(path), *SMALL)
    assert code == 0, stderr
    assert "actor_rollout_ref.actor.checkpoint.save_contents" in stdout  # unresolvable, not read
    path.write_text(text.replace("${data.train_batch_size}", "${data.train_batch_sise}"))
    code, stdout, stderr = invoke("check", str(path), *SMALL)
    assert code == 2 and stderr.count("\n") == 1
    assert (
        "actor_rollout_ref.actor.ppo_mini_batch_size=${data.train_batch_sise} cannot be read: the "
        "interpolation cannot be resolved" in stderr
    )


def test_interpolations_without_omegaconf_name_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("yaml")
    import sys

    monkeypatch.setitem(sys.modules, "omegaconf", None)
    path = tmp_path / "verl.yaml"
    path.write_text(
        "data:\n  max_response_length: 8\nactor_rollout_ref:\n  actor:\n"
        "    loss_scale_factor: ${data.max_response_length}\n"
    )
    with pytest.raises(
        InvalidInput, match=re.escape("resolving it needs OmegaConf: pip install -e ") + r".*\[yaml\]'?$"
    ):
        read_settings(path)


@pytest.mark.parametrize(
    ("trainer", "settings"),
    [
        ("trl", ["loss_type=dr_grpo", "steps_per_generation=3", "gradient_accumulation_steps=2"]),
        (
            "verl",
            [
                "algorithm.adv_estimator=grpo",
                f"{VERL}loss_agg_mode=seq-mean-token-sum-norm",
                f"{VERL}ppo_micro_batch_size_per_gpu=16",
            ],
        ),
        ("openrlhf", ["algo.advantage.estimator=group_norm", "rollout.batch_size=4"]),
        ("oat", ["beta=0"]),
    ],
)
def test_every_hint_names_a_setting_of_the_trainer(trainer: str, settings: list[str]) -> None:
    """Each `--set NAME=...` the report suggests is one its trainer takes; the toy's own gradient
    clip is named as toyrl run's variant key, which parses."""
    args = [item for setting in settings for item in ("--set", setting)]
    code, stdout, stderr = invoke("check", "--trainer", trainer, *args, *SMALL)
    assert code == 0, stderr
    hints = re.findall(r"--set ([\w.]+)=", stdout)
    assert hints or trainer == "trl"  # TRL's default group size is the toy's: nothing to suggest
    release = resolve(trainer, None, parse_sets(settings)).release
    for name in hints:
        assert name in release.settings, name
    assert "spell max_grad_norm" not in stdout
    spec = re.search(r"toyrl variant: (\S+)", stdout).group(1)
    assert "toyrl run --variant SPEC,max_grad_norm=C" in stdout
    assert parse_variant(spec + ",max_grad_norm=1.0").schedule.max_grad_norm == 1.0


def test_a_command_line_is_openrlhf_s_only() -> None:
    code, _, stderr = invoke(
        "check", "--trainer", "verl", *SMALL, "--", "python", "-m", "openrlhf.cli.train_ppo_ray", "--a", "1"
    )
    assert (
        code == 2 and "the command line: openrlhf.cli.train_ppo_ray is OpenRLHF's; --trainer verl" in stderr
    )


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("binary.json", b"\x00\x01\x02\xff\xfe", "binary.json: not a text file"),
        ("zeros.yaml", b"loss_type: grpo\x00\n", "zeros.yaml: not a text file"),
        ("empty.json", b"", "empty.json: empty; expected a trainer's settings"),
        ("blank.yaml", b"\n  \n", "blank.yaml: empty"),
        (
            "list.yaml",
            b"- loss_type\n- grpo\n",
            "expected a mapping of settings at the top level, got a list",
        ),
        ("number.json", b"3", "expected a mapping of settings at the top level, got a int"),
        (
            "nothing.yaml",
            b"# only a comment\n",
            "expected a mapping of settings at the top level, got nothing",
        ),
        ("run.sh", b"#!/bin/bash\necho train\n", "run.sh: no trainer's launch command in it"),
        (
            "lr.sh",
            b"#!/bin/bash\npython train.py --lr 1e-6\n",
            "line 2: train.py is launched with flags of no trainer toyrl models (lr)",
        ),
        (
            "two.sh",
            b"python -m openrlhf.cli.train_ppo_ray --a 1\npython -m openrlhf.cli.train_ppo_ray --a 2\n",
            "two.sh: 2 launch commands (lines 1, 2); toyrl checks one",
        ),
        (
            "quote.sh",
            b"python -m openrlhf.cli.train_ppo_ray --a 'x\n",
            "quote.sh, line 1: bash's grammar cannot read the launch command (an unclosed quote",
        ),
        ("stray.sh", b"python -m openrlhf.cli.train_ppo_ray grpo --a 1\n", "'grpo' follows no --argument"),
        (
            "grpo.ini",
            b"loss_type = 'grpo'\n",
            "expected a trainer's configuration (.json, .yaml, .yml, .toml), launch script (.sh) or Python",
        ),
        ("grpo.toml", b"loss_type = grpo\n", "grpo.toml: not valid TOML (Invalid value"),
        (
            "range.sh",
            b"python -m openrlhf.cli.train_ppo_ray --algo.advantage.estimator rloo --actor.eps_clip -1\n",
            "actor.eps_clip=-1.0 is not valid; valid: a float in [0, inf]",
        ),
        (
            "bad-n.sh",
            b"N=one\npython -m openrlhf.cli.train_ppo_ray --rollout.n_samples_per_prompt $N\n",
            "rollout.n_samples_per_prompt='one' is not valid",
        ),
    ],
)
def test_check_refuses_what_is_not_a_configuration(
    tmp_path: Path, name: str, content: bytes, message: str
) -> None:
    pytest.importorskip("yaml")
    path = tmp_path / name
    path.write_bytes(content)
    code, stdout, stderr = invoke("check", str(path), *SMALL)
    assert code == 2 and stdout == "" and stderr.count("\n") == 1, stderr
    assert stderr.startswith("toyrl: error: ") and message in stderr


def test_check_refuses_a_folder_and_an_unreadable_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code, _, stderr = invoke("check", str(tmp_path), *SMALL)
    assert code == 2 and "a folder, not a trainer's configuration file" in stderr
    locked = tmp_path / "locked.json"
    locked.write_text("{}")

    opened = os.open

    def refused(path: Any, *args: Any, **kwargs: Any) -> int:
        if Path(path) == locked:  # as for a file of mode 000, not as root
            raise PermissionError(13, "Permission denied", str(path))
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)
    code, stdout, stderr = invoke("check", str(locked), *SMALL)
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "locked.json" in stderr and "ermission denied" in stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "num_generations=1"], "num_generations=1 is not valid; valid: an int in [2, 10000]"),
        (
            ["--trainer", "verl", "--set", "algorithm.adv_estimater=grpo"],
            "(did you mean 'algorithm.adv_estimator'?)",
        ),
        (
            ["--trainer", "openrlhf", "--set", "advantage_estimater=rloo"],
            "(did you mean 'algo.advantage.estimator'?)",
        ),
        (
            ["--set", "rollout.n_samples_per_prompt=1", "--set", "algo.advantage.estimator=rloo"],
            "rollout.n_samples_per_prompt=1 sets the toy's group_size, which must be an integer in 2..10,000",
        ),
        ([], "nothing to check: give a trainer's configuration file"),
    ],
)
def test_check_bad_settings_are_one_line(args: list[str], message: str) -> None:
    code, stdout, stderr = invoke("check", *args, *SMALL)
    assert code == 2 and stdout == "" and stderr.count("\n") == 1 and message in stderr, stderr


def test_docs_trainers_examples_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/trainers.md's worked examples: each `<!-- example: NAME -->` block written as NAME, each
    `$ toyrl check ...` command run as written (a small budget added), its quoted lines printed first:
    a TRL YAML file, command line and GRPOConfig(...) call, a verl YAML file and launch script, an
    OpenRLHF command line and script of arrays."""
    pytest.importorskip("omegaconf")
    pytest.importorskip("hydra")
    pytest.importorskip("tree_sitter_bash")
    text = (Path(__file__).resolve().parent.parent / "docs" / "trainers.md").read_text()
    section = text.split("### Worked examples", 1)[1]
    files = re.findall(r"<!-- example: (\S+) -->\n```\w+\n(.*?)```", section, flags=re.S)
    commands = re.findall(r"```console\n\$ (.*?)```", section, flags=re.S)
    assert len(files) == 5 and len(commands) == 7
    for name, content in files:
        (tmp_path / name).write_text(content)
    monkeypatch.chdir(tmp_path)
    for block in commands:
        lines = block.replace("\\\n", " ").splitlines()
        words = shlex.split(lines[0])
        assert words[:2] == ["toyrl", "check"]
        args = words[2:]
        cut = args.index("--") if "--" in args else len(args)
        code, stdout, stderr = invoke("check", *args[:cut], *SMALL, *args[cut:])
        assert code == 0, stderr
        assert stdout.splitlines()[: len(lines) - 1] == lines[1:], stdout


@pytest.mark.parametrize(
    ("trainer", "version", "settings", "fix"),
    [
        ("trl", None, {}, {"loss_type": "dr_grpo", "scale_rewards": "none"}),
        ("trl", None, {"loss_type": "dr_grpo"}, {"scale_rewards": "none"}),  # the issue's half
        ("trl", None, {"loss_type": "dr_grpo", "scale_rewards": "none"}, {}),
        ("trl", "0.22.1", {}, {"loss_type": "dr_grpo"}),  # its 'group' divides by nothing (swapped)
        (
            "verl",
            None,
            {"algorithm.adv_estimator": "grpo"},
            {
                "algorithm.norm_adv_by_std_in_grpo": False,
                VERL + "loss_agg_mode": "seq-mean-token-sum-norm",
                VERL + "loss_scale_factor": 512,
            },
        ),
        (
            "verl",
            None,
            {"algorithm.adv_estimator": "grpo", **DR_GRPO_SETTINGS, **MICRO_16},
            {VERL + "loss_scale_factor": 512},
        ),
        ("oat", None, {"critic_type": "grpo"}, {"critic_type": "drgrpo"}),
        ("openrlhf", None, {"algo.advantage.estimator": "group_norm"}, None),  # no constant-normalised loss
    ],
)
def test_the_fewest_settings_that_make_a_run_dr_grpo(
    trainer: str, version: str | None, settings: dict, fix: dict | None
) -> None:
    """What the report tells to set, per trainer and release, as each trainer's code defines Dr.
    GRPO (docs/trainers.md's table): {} when the settings are it, None when nothing toyrl models is."""
    resolved = resolve(trainer, version, settings)
    assert dr_grpo_settings(resolved, Config()) == fix


def test_the_report_says_what_to_set_for_dr_grpo() -> None:
    code, stdout, stderr = invoke("check", "--set", "loss_type=dr_grpo", *SMALL)
    assert code == 0, stderr
    (line,) = [line for line in stdout.splitlines() if line.startswith("to Dr. GRPO:")]
    assert line.startswith("to Dr. GRPO: set scale_rewards='none'; the toy then runs these settings as")
    code, stdout, stderr = invoke("check", "--set", "loss_type=dr_grpo", "--json", *SMALL)
    assert json.loads(stdout)["dr_grpo_settings"] == {"scale_rewards": "none"}
    code, stdout, _ = invoke("check", "--set", "loss_type=dr_grpo", "--set", "scale_rewards=none", *SMALL)
    assert "to Dr. GRPO: nothing to change" in stdout


def test_verl_s_ranks_and_token_budget_reach_the_toy_s_layout() -> None:
    """verl's V1 trainer deals every batch to its data-parallel ranks balanced by workload (whatever
    trainer.balance_batch says): nnodes x n_gpus_per_node / ulysses_sequence_parallel_size ranks,
    8 by default. The toy takes as many as its smaller steps allow while a rank's share still holds
    a micro-batch of the trainer's size, and scales the token budget and the prompts by its longest
    response over data.max_response_length; each difference is said."""
    config = Config()  # 128 responses a step; 4 mini-batches of 32 at verl's defaults
    settings = {"algorithm.adv_estimator": "grpo", **DR_GRPO_SETTINGS}

    def toy(extra: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        resolved = resolve("verl", None, settings | extra)
        variant, notes = toy_variant(resolved, config)
        return variant.spec(), notes + resolved.mapping.unmodelled + resolved.mapping.notes

    spec, notes = toy(MICRO_16 | {"trainer.balance_batch": False})  # not read by the V1 trainer
    assert any("balance_batch=False: verl 0.9.1's V1 trainer does not read it" in note for note in notes)
    assert (
        spec["ranks"] == 2
        and spec.get("micro_batches", 1) == 1
        and spec["prompt_tokens"] == round(512 * 1501 / 512)
    )
    assert any("to 2 data-parallel ranks, the trainer to 8" in note for note in notes)
    spec, notes = toy({VERL + "ppo_micro_batch_size_per_gpu": 2})
    assert spec["ranks"] == 8 and spec["micro_batches"] == 2
    assert not any("data-parallel rank" in note for note in notes)
    spec, _ = toy(MICRO_16 | {"trainer.n_gpus_per_node": 1})
    assert spec.get("ranks", 1) == 1 and "prompt_tokens" not in spec and spec["micro_batches"] == 2
    spec, notes = toy(MICRO_16 | {VERL + "shuffle": True})  # each rank shuffles its own part
    assert spec.get("ranks", 1) == 1 and any("each rank shuffles its own part" in note for note in notes)
    spec, notes = toy({VERL + "use_dynamic_bsz": True, "data.max_response_length": 1024})
    budget = int(np.ceil(16384 * 1501 / 1024))  # the toy's longest response (cap + 1) over the trainer's
    assert spec["token_budget"] == budget and spec["prompt_tokens"] == round(512 * 1501 / 1024)
    # the budget holds 10 of the longest sequences (24,017 // (750 + 1501)): 2 ranks' shares of 16
    # do, 4 ranks' of 8 would not
    assert spec["ranks"] == 2
    assert any(f"are the toy's {budget:,}" in note for note in notes)
    # the legacy trainer: a constant divisor and no ranks; its balance_batch reorders by length
    spec, notes = toy({"trainer.use_v1": False})
    assert "ranks" not in spec and any("legacy trainer reorder the batch" in note for note in notes)


def test_check_of_verl_s_dynamic_batch_size_runs_the_token_budget() -> None:
    """use_dynamic_bsz with loss_scale_factor unset: the check runs the budget's micro-batches on
    the toy beside Dr. GRPO, names the setting to change, and with it set reads Dr. GRPO."""
    settings = ["--set", "algorithm.adv_estimator=grpo", "--set", "algorithm.norm_adv_by_std_in_grpo=false"]
    settings += [
        "--set",
        f"{VERL}loss_agg_mode=seq-mean-token-sum-norm",
        "--set",
        f"{VERL}use_dynamic_bsz=true",
    ]
    settings += ["--set", "data.train_batch_size=256", "--set", "trainer.n_gpus_per_node=1"]
    code, stdout, stderr = invoke("check", "--trainer", "verl", *settings, *SMALL)
    assert code == 0, stderr
    assert "token_budget=" in stdout and "ppo_max_token_len_per_gpu=16384" in stdout
    assert "verdict: " in stdout and f"to Dr. GRPO: set {VERL}loss_scale_factor=" in stdout
    code, stdout, stderr = invoke(
        "check", "--trainer", "verl", *settings, "--set", f"{VERL}loss_scale_factor=512", *SMALL
    )
    assert code == 0, stderr
    assert "verdict: these settings are Dr. GRPO itself" in stdout


@pytest.mark.parametrize(
    ("trainer", "settings", "preset"),
    [
        (
            "trl",
            {
                "loss_type": "luspo",
                "importance_sampling_level": "sequence",
                "epsilon": 3e-4,
                "epsilon_high": 4e-4,
                "steps_per_generation": 4,
            },
            "luspo",
        ),
        ("trl", {"loss_type": "vespo", "steps_per_generation": 4}, "vespo"),
        (
            "verl",
            {
                "algorithm.adv_estimator": "grpo",
                VERL + "policy_loss.loss_mode": "geo_mean",
                VERL + "clip_ratio_low": 0.4,
                VERL + "clip_ratio_high": 0.4,
            },
            "gmpo",
        ),
        (
            "verl",
            {"algorithm.adv_estimator": "grpo_passk", VERL + "ppo_mini_batch_size": 1024},
            "verl_grpo_passk",
        ),
        (
            "verl",
            {
                "algorithm.adv_estimator": "grpo",
                VERL + "loss_agg_mode": "token-sum",
                VERL + "ppo_mini_batch_size": 1024,
            },
            "verl_token_sum",
        ),
    ],
)
def test_the_newer_modes_land_on_their_presets(trainer: str, settings: dict, preset: str) -> None:
    """TRL's luspo and vespo, verl's geo_mean (whatever loss_agg_mode says), grpo_passk and token-sum
    are the presets that stand for them (the conformance suite runs each against the trainer)."""
    resolved = resolve(trainer, None, settings)
    assert parse_variant(resolved.mapping.spec).spec() == VARIANTS[preset].spec()


def test_openrlhf_gspo_is_gspo_per_sample() -> None:
    """--actor.policy_loss_type gspo: toyrl's gspo at eps_clip on both sides, each sample's token
    mean whatever loss_agg_mode says; the KL in the reward (OpenRLHF's default) is left out, said so."""
    resolved = resolve(
        "openrlhf", None, {"algo.advantage.estimator": "group_norm", "actor.policy_loss_type": "gspo"}
    )
    variant = parse_variant(resolved.mapping.spec)
    assert variant.names()["objective"] == "gspo" and variant.names()["normaliser"] == "seq_mean_token_mean"
    assert variant.objective.epsilon == variant.objective.clip_high == 0.2
    assert variant.names()["kl"] == "k3" and variant.kl.beta == 0
    assert any(
        "with gspo: toyrl's gspo takes one advantage a response" in u for u in resolved.mapping.unmodelled
    )
    assert any("whatever loss_agg_mode says" in n for n in resolved.mapping.notes)


def test_verl_geo_mean_says_its_micro_batch_sum_and_remax_why_not() -> None:
    geo = resolve(
        "verl", None, {"algorithm.adv_estimator": "grpo", VERL + "policy_loss.loss_mode": "geo_mean"}
    )
    assert any("the micro-batches' gradients add up" in u for u in geo.mapping.unmodelled)
    unscaled = resolve(
        "verl", None, {"algorithm.adv_estimator": "grpo_passk", "algorithm.norm_adv_by_std_in_grpo": False}
    )
    assert parse_variant(unscaled.mapping.spec).advantage.std_scaled is False
    with pytest.raises(
        InvalidInput,
        match=re.escape(
            "algorithm.adv_estimator='remax' is not modelled by toyrl yet (its baseline is the reward of a "
            "greedy rollout"
        ),
    ):
        resolve("verl", None, {"algorithm.adv_estimator": "remax"})


def test_a_value_the_toy_refuses_is_told_as_the_user_s_settings() -> None:
    """A setting within its trainer's range whose variant the toy refuses names the settings given,
    not toyrl's spec."""
    code, _, stderr = invoke("check", "--set", "epsilon=0", "--set", "epsilon_high=0.1", *SMALL)
    assert code == 2 and stderr.count("\n") == 1
    assert stderr.startswith(
        "toyrl: error: TRL 1.16.0 with epsilon=0.0, epsilon_high=0.1: the toy cannot take it"
    )
    assert "variant spec" not in stderr
