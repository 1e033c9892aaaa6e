"""verl's and OpenRLHF's keys as their releases read them: misspellings named by the release's own
setting, the clip ranges the trainers take, keys a release ignores, and the settings that change
OpenRLHF's order of optimiser steps. What the installed trainers do is the conformance suite's
(tests/conformance/test_verl.py, test_openrlhf.py); these check toyrl's mapping and report."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.test_check import OPENRLHF_AT_TOY_SCALE, SMALL, invoke
from toyrl.config import InvalidInput
from toyrl.trainers import registry, resolve
from toyrl.variants import parse_variant

ACTOR = "actor_rollout_ref.actor."
LEGACY = "reward_model.reward_kwargs."
GRPO = {"algorithm.adv_estimator": "grpo"}
OPENRLHF = "python3 -m openrlhf.cli.train_ppo_ray --algo.advantage.estimator group_norm "


def spec_of(trainer: str, settings: dict, version: str | None = None) -> dict:
    return parse_variant(resolve(trainer, version, settings).mapping.spec).spec()


def clip_of(trainer: str, settings: dict) -> tuple[float | None, float | None]:
    """The toy's (epsilon, epsilon_high) of the settings' objective, its defaults filled in."""
    objective = parse_variant(resolve(trainer, None, settings).mapping.spec).stage("objective")
    return objective.epsilon, objective.clip_high


# --- 1. a misspelling is told by the release's name of the setting ---------------------------


def test_the_audit_s_command_line_names_the_setting_not_the_older_name() -> None:
    """`data.generate_max_len` is spelt like `generate_max_len`, OpenRLHF 0.9's name of 0.11.2's
    rollout.max_new_tokens: the report names that setting and its value (no KeyError), and exits 1
    as for any misspelt key; by --set, one line naming it, exit 2."""
    command = (
        "python3 -m openrlhf.cli.train_ppo_ray --algo.advantage.estimator dr_grpo "
        "--actor.policy_loss_type ppo --rollout.n_samples_per_prompt 8 --data.generate_max_len 1024"
    )
    code, stdout, stderr = invoke(
        "check", "--set", "rollout.batch_size=16", *SMALL, "--", *shlex.split(command)
    )
    assert code == 1 and stderr == "", stderr
    assert (
        "  - data.generate_max_len: did you mean rollout.max_new_tokens? "
        "(checked with rollout.max_new_tokens=None, its default)"
    ) in stdout.splitlines()
    code, stdout, stderr = invoke(
        "check", "--trainer", "openrlhf", "--set", "data.generate_max_len=1024", *SMALL
    )
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "(did you mean 'rollout.max_new_tokens'?)" in stderr


@pytest.mark.parametrize(
    ("trainer", "version"),
    [
        (name, version)
        for name, t in registry().items()
        for version, release in t.releases.items()
        if any("." not in alias for alias in release.aliases)
    ],
)
def test_every_misspelt_key_names_a_setting_of_the_release(trainer: str, version: str) -> None:
    """A key spelt like a flat other name of a setting (`zz.<that name>`: the same last part, a
    section of its own) is told by the release's name of that setting."""
    release = registry()[trainer].releases[version]
    keys = {f"zz.{alias}": 1 for alias in release.aliases if "." not in alias}
    base = {"verl": {**GRPO, ACTOR + "ppo_micro_batch_size_per_gpu": 4}, "openrlhf": {}}.get(trainer, {})
    estimator = "advantage_estimator" if version == "0.6.4" else "algo.advantage.estimator"
    base = base | ({estimator: "group_norm"} if trainer == "openrlhf" else {})
    resolved = resolve(trainer, version, base | keys, frozenset(keys))
    assert resolved.misspelt == {key: release.aliases[key.removeprefix("zz.")][0] for key in keys}
    assert set(resolved.misspelt.values()) <= set(release.settings)


# --- 2. clip ranges: any the trainers take -----------------------------------------------------


def test_verl_s_cispo_example_turns_its_lower_clip_off() -> None:
    """verl's CISPO example sets clip_ratio_low=10: a lower bound 1 - 10 < 0, which a ratio never
    reaches, so no lower bound (CISPO's epsilon unset); PPO's and GSPO's the same way take the toy's
    epsilon = 1 (a bound at 0); each said in a note. The check runs (exit 0)."""
    cispo = {**GRPO, ACTOR + "policy_loss.loss_mode": "cispo", ACTOR + "clip_ratio_low": "10"}
    assert clip_of("verl", cispo) == (None, 0.2)
    assert clip_of("verl", {**cispo, ACTOR + "clip_ratio_low": 0.5}) == (0.5, 0.2)
    assert clip_of("verl", {**GRPO, ACTOR + "clip_ratio_low": 100}) == (1.0, 0.2)
    assert clip_of("verl", {**GRPO, ACTOR + "clip_ratio_low": 1}) == (1.0, 0.2)  # as given: no note
    gspo = {**GRPO, ACTOR + "policy_loss.loss_mode": "gspo", ACTOR + "clip_ratio_low": 3}
    assert clip_of("verl", gspo) == (1.0, 0.2)
    sets = [f"{key}={value}" for key, value in cispo.items()]
    sets += ["actor_rollout_ref.rollout.n=8", "data.train_batch_size=4", ACTOR + "ppo_mini_batch_size=4"]
    code, stdout, stderr = invoke("check", "--trainer", "verl", *(f"--set={item}" for item in sets), *SMALL)
    assert code == 0, stderr
    assert f"note: {ACTOR}clip_ratio_low=10: the lower clip at ratio 1 - 10 < 0 cannot bind" in stdout


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({ACTOR + "clip_ratio_high": 100}, f"{ACTOR}clip_ratio_high=100 clips the ratio at 1 + 100"),
        (
            {ACTOR + "policy_loss.loss_mode": "geo_mean", ACTOR + "clip_ratio_low": 10},
            "with policy_loss.loss_mode='geo_mean' clips the log-ratio at 10",
        ),
        (
            {ACTOR + "clip_ratio_high": None, ACTOR + "clip_ratio": 12},
            f"{ACTOR}clip_ratio=12 clips the ratio",
        ),
    ],
)
def test_verl_clips_the_toy_cannot_take_are_one_line(settings: dict, message: str) -> None:
    """An upper ratio clip at 1 + 10 or more (or GMPO's log-ratio clip at 10 or more, which can
    bind) is beyond the toy's clip ranges: refused in one line naming the setting and what the toy
    takes, by the CLI with exit 2."""
    with pytest.raises(InvalidInput, match=message.replace("(", r"\(").replace("+", r"\+")):
        resolve("verl", None, {**GRPO, **settings})
    sets = [f"--set={key}={value}" for key, value in {**GRPO, **settings}.items()]
    code, stdout, stderr = invoke(
        "check", "--trainer", "verl", *sets, "--set=actor_rollout_ref.rollout.n=8", *SMALL
    )
    assert code == 2 and stdout == "" and stderr.count("\n") == 1 and "below 10" in stderr, stderr


def test_verl_s_clip_ratio_is_said_to_have_no_effect_where_both_bounds_are_set() -> None:
    """verl 0.9.1 takes clip_ratio only where clip_ratio_low / _high is null; both default to 0.2."""
    resolved = resolve("verl", None, {**GRPO, ACTOR + "clip_ratio": 0.3})
    assert clip_of("verl", {**GRPO, ACTOR + "clip_ratio": 0.3}) == (0.2, 0.2)
    assert any(
        note.startswith("actor.clip_ratio=0.3: verl reads it only where") for note in resolved.mapping.notes
    )
    both_null = {ACTOR + "clip_ratio_low": None, ACTOR + "clip_ratio_high": None, ACTOR + "clip_ratio": 0.3}
    resolved = resolve("verl", None, {**GRPO, **both_null})
    assert clip_of("verl", {**GRPO, **both_null}) == (0.3, 0.3) and not resolved.mapping.notes


def test_openrlhf_s_clip_range_is_eps_clip_low_high_where_given(tmp_path: Path) -> None:
    """--actor.eps_clip_low_high LOW HIGH (two words, or "LOW HIGH" by --set) is the clip; eps_clip
    is then without effect (said when it is given); a LOW above 1 cannot bind (epsilon = 1);
    GSPO's sequence ratio takes the same clip."""
    code, stdout, stderr = invoke(
        "check",
        *OPENRLHF_AT_TOY_SCALE,
        "--json",
        *SMALL,
        "--",
        *shlex.split(OPENRLHF + "--actor.eps_clip 0.3 --actor.eps_clip_low_high 0.1 0.28"),
    )
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["given"]["actor.eps_clip_low_high"] == [0.1, 0.28]
    assert "epsilon=0.1" in data["spec"] and "epsilon_high=0.28" in data["spec"]
    assert any(note.startswith("actor.eps_clip=0.3: no effect") for note in data["notes"])
    base = {"algo.advantage.estimator": "group_norm"}
    assert spec_of("openrlhf", {**base, "actor.eps_clip_low_high": "0.2 0.28"}) == spec_of(
        "openrlhf", {**base, "actor.eps_clip_low_high": ["0.2", "0.28"]}
    )
    assert clip_of("openrlhf", {**base, "actor.eps_clip": 50, "actor.eps_clip_low_high": "10 0.2"}) == (
        1.0,
        0.2,
    )
    gspo = {**base, "actor.policy_loss_type": "gspo"}
    assert clip_of("openrlhf", {**gspo, "actor.eps_clip_low_high": "3e-4 4e-4"}) == (3e-4, 4e-4)
    assert clip_of("openrlhf", {**gspo, "actor.eps_clip": 0.1}) == (0.1, 0.1)  # not gspo's own 4e-4
    with pytest.raises(InvalidInput, match="clips the ratio at 1 \\+ 20, beyond the toy's clip ranges"):
        resolve("openrlhf", None, {**base, "actor.eps_clip": 20})


@pytest.mark.parametrize("value", ["0.2", "0.2 0.3 0.4", "-1 0.2", "a 0.2"])
def test_openrlhf_s_bad_clip_pair_is_one_line(value: str) -> None:
    code, stdout, stderr = invoke(
        "check", "--trainer", "openrlhf", "--set", f"actor.eps_clip_low_high={value}", *SMALL
    )
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "is not valid; valid: two floats LOW HIGH, each >= 0, or None" in stderr


# --- 3. and 5. verl: every key of its releases' configurations, and what 0.9.1 ignores ------------


DAPO_LEGACY = """\
algorithm:
  adv_estimator: grpo
actor_rollout_ref:
  rollout:
    n: 8
  actor:
    ppo_mini_batch_size: 4
    ppo_micro_batch_size_per_gpu: 4
  ref:
    ulysses_sequence_parallel_size: 1
    fsdp_config:
      ulysses_sequence_parallel_size: 1
data:
  train_batch_size: 4
reward_model:
  reward_manager: dapo
  reward_kwargs:
    max_resp_len: 1500
    overlong_buffer_cfg:
      enable: true
      len: 150
      penalty_factor: 1.0
"""


def test_verl_0_9_1_ignores_the_legacy_reward_kwargs_and_0_7_0_reads_them(tmp_path: Path) -> None:
    """DAPO's overlong buffer in the legacy reward_model section: verl 0.9.1's main_ppo never reads
    that section, so the check says so for each key (no misspelling, exit 0) and runs without the
    penalty; 0.7.0 reads it (reward_model.reward_manager, reward_model.reward_kwargs): DAPO's soft
    overlong punishment. The reference model's Ulysses size is no misspelling of the actor's."""
    path = tmp_path / "dapo.yaml"
    path.write_text(DAPO_LEGACY)
    code, stdout, stderr = invoke("check", str(path), "--json", *SMALL)
    assert code == 0, stderr
    data = json.loads(stdout)
    assert data["misspelt"] == {} and "reward=soft_overlong" not in data["spec"]
    ignored = data["ignored_by_the_trainer"]
    assert set(ignored) == {"reward_model.reward_manager"} | {
        LEGACY + key
        for key in (
            "max_resp_len",
            "overlong_buffer_cfg.enable",
            "overlong_buffer_cfg.len",
            "overlong_buffer_cfg.penalty_factor",
        )
    }
    assert "DAPO's overlong penalty is off" in ignored[LEGACY + "overlong_buffer_cfg.enable"]
    code, stdout, _ = invoke("check", str(path), *SMALL)
    assert (
        f"note: {LEGACY}overlong_buffer_cfg.enable: verl 0.9.1 ignores it (its main_ppo never reads" in stdout
    )
    code, stdout, stderr = invoke("check", str(path), "--version", "0.7.0", "--json", *SMALL)
    assert code == 0, stderr
    data = json.loads(stdout)
    spec = parse_variant(data["spec"]).spec()
    assert spec["reward"] == "soft_overlong" and spec["buffer"] == 0.1  # 150 of max_resp_len 1500
    assert data["misspelt"] == {} and data["ignored_by_the_trainer"] == {}


@pytest.mark.parametrize(("version", "moved"), [("0.8.0", True), ("0.7.1", True), ("0.4.0", False)])
def test_verl_s_older_releases_read_the_legacy_reward_section(
    tmp_path: Path, version: str, moved: bool
) -> None:
    """The same DAPO file for releases before 0.9.0: 0.7.1 and 0.8.0's main_ppo moves the legacy
    reward_model section onto reward. (migrate_legacy_reward_impl), told as those settings' other
    names; up to 0.7.0 it is the release's own: DAPO's soft overlong punishment either way."""
    path = tmp_path / "dapo.yaml"
    path.write_text(DAPO_LEGACY)
    code, stdout, stderr = invoke("check", str(path), "--version", version, "--json", *SMALL)
    assert code == 0, stderr
    data = json.loads(stdout)
    spec = parse_variant(data["spec"]).spec()
    assert spec["reward"] == "soft_overlong" and spec["buffer"] == 0.1
    assert data["misspelt"] == {} and data["ignored_by_the_trainer"] == {}
    assert data["renamed"] == (
        {LEGACY + "max_resp_len": "reward.reward_kwargs.max_resp_len"}
        | {
            LEGACY + f"overlong_buffer_cfg.{key}": f"reward.reward_kwargs.overlong_buffer_cfg.{key}"
            for key in ("enable", "len", "penalty_factor")
        }
        | {"reward_model.reward_manager": "reward.reward_manager.name"}
        if moved
        else {}
    )


def test_verl_0_7_0_s_reward_manager_name_is_the_legacy_manager() -> None:
    """0.7.0's reward_manager.name defaults to reward_model.reward_manager (an interpolation): the
    same setting, by either name; a DAPO buffer out of range is refused as its manager does."""
    settings = {**GRPO, ACTOR + "ppo_micro_batch_size_per_gpu": 4, "reward_manager.name": "dapo"}
    resolved = resolve("verl", "0.7.0", settings)
    assert resolved.given["reward_model.reward_manager"] == "dapo"
    assert parse_variant(resolved.mapping.spec).spec()["reward"] == "soft_overlong"
    bad = settings | {LEGACY + "overlong_buffer_cfg.enable": True, LEGACY + "overlong_buffer_cfg.len": 10}
    with pytest.raises(
        InvalidInput, match=f"{LEGACY}overlong_buffer_cfg.len=10 must be in 1..{LEGACY}max_resp_len"
    ):
        resolve("verl", "0.7.0", bad)


# --- 4. OpenRLHF: what keeps the replay buffer's order, REINFORCE++, every argument known ---------


@pytest.mark.parametrize(
    "flag", ["--train.dynamic_batch_enable", "--ds.tensor_parallel_size 2", "--ds.ring_attn_size 2"]
)
def test_openrlhf_s_unshuffled_replay_buffer(flag: str) -> None:
    """ppo_train's DataLoader shuffles the replay buffer unless dynamic batching, tensor parallelism
    or ring attention is on: then the optimiser steps take the rollout's order, toyrl's
    shuffle=none, said in a note; 0.10.3's dynamic batching normalises by the step's tokens (the
    replay buffer's), not each micro-batch's."""
    command = (
        OPENRLHF + "--rollout.batch_size 16 --rollout.n_samples_per_prompt 8 --train.batch_size 32 " + flag
    )
    code, stdout, stderr = invoke("check", "--json", *SMALL, "--", *shlex.split(command))
    assert code == 0, stderr
    data = json.loads(stdout)
    spec = parse_variant(data["spec"]).spec()
    assert spec["mini_batches"] == 4 and "shuffle" not in spec  # the batch's order
    assert any("does not shuffle the replay buffer" in note for note in data["notes"])
    default = parse_variant(
        resolve(
            "openrlhf",
            None,
            {
                "algo.advantage.estimator": "group_norm",
                "rollout.n_samples_per_prompt": 8,
                "rollout.batch_size": 16,
                "train.batch_size": 32,
            },
        ).mapping.spec
    ).spec()
    assert default["shuffle"] == "epoch"


def test_openrlhf_0_10_3_dynamic_batching_normalises_by_the_step() -> None:
    base = {"algo.advantage.estimator": "group_norm", "train.micro_batch_size": 4}
    assert spec_of("openrlhf", base, "0.10.3")["per_micro_batch"] is True
    dynamic = spec_of("openrlhf", base | {"train.dynamic_batch_enable": True}, "0.10.3")
    assert "per_micro_batch" not in dynamic and dynamic["aggregation"] == "token_mean"
    assert "shuffle" not in dynamic  # the batch's order


def test_openrlhf_reinforce_is_refused_with_why() -> None:
    """REINFORCE++ whitens the rewards themselves with the population variance: neither toyrl's
    reinforce_pp (verl's Bessel-corrected variance) nor token_whiten (each group centred first)."""
    code, stdout, stderr = invoke(
        "check", *SMALL, "--", *shlex.split(OPENRLHF.replace("group_norm", "reinforce"))
    )
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "algo.advantage.estimator='reinforce' is not modelled by toyrl yet (REINFORCE++" in stderr
    assert "population variance" in stderr and "modelled: 'group_norm'" in stderr


@pytest.mark.parametrize("key", ["local_rank", "use_ms", "actor.eps_clip_low_high", "ds.ring_attn_size"])
def test_openrlhf_s_flat_and_new_arguments_are_known(key: str) -> None:
    assert registry()["openrlhf"].knows(key)


def test_a_name_two_trainers_have_tells_neither() -> None:
    """`local_rank` is TrainingArguments' (so TRL's) and OpenRLHF's: a TRL file holding it is TRL's."""
    from toyrl.trainers.reading import detect

    assert detect(["loss_type", "local_rank"], "f")[0] == "trl"
    assert detect(["algo.advantage.estimator", "local_rank"], "f")[0] == "openrlhf"
