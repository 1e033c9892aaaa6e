"""verl's releases from 0.4.0 (the first with loss_agg_mode, clip_ratio_low / _high and
norm_adv_by_std_in_grpo) to 0.9.1 (toyrl/trainers/verl.py, `RELEASES`): what `toyrl check` makes of
each one's settings.

Each release's keys, defaults, estimators, policy losses, loss_agg_modes and agg_loss are tied to
its own wheel by the conformance suite (tests/conformance/test_verl.py, `test_each_release_*`);
here, what the mapping and the report make of them: dp_actor's micro-batch normalisers before 0.8.0,
the keys a release does not have (unknown to it) and those it ignores (said so).
"""

from __future__ import annotations

import json

import pytest

from tests.test_check import SMALL, invoke
from toyrl.config import Config, InvalidInput
from toyrl.trainers import resolve
from toyrl.trainers.check import toy_variant
from toyrl.trainers.verl import RELEASES, TRAINER
from toyrl.variants import parse_variant

ACTOR = "actor_rollout_ref.actor."
LEGACY = "reward_model.reward_kwargs."
# at the toy's scale (SMALL: 4 prompts a batch): one optimiser step a batch, one micro-batch of 8 x 4
AT_TOY_SCALE = {
    "algorithm.adv_estimator": "grpo",
    "actor_rollout_ref.rollout.n": 8,
    "data.train_batch_size": 4,
    ACTOR + "ppo_mini_batch_size": 4,
    ACTOR + "ppo_micro_batch_size_per_gpu": 32,
}
DR_GRPO_LIKE = {
    "algorithm.norm_adv_by_std_in_grpo": False,
    ACTOR + "loss_agg_mode": "seq-mean-token-sum-norm",
}
DP_ACTOR = ["0.7.1", "0.7.0", "0.6.1", "0.6.0", "0.5.0", "0.4.1", "0.4.0"]  # dp_actor's update_policy


def check_json(version: str, settings: dict) -> dict:
    sets = [f"--set={key}={value}" for key, value in settings.items()]
    code, stdout, stderr = invoke("check", "--trainer", "verl", "--version", version, *sets, *SMALL, "--json")
    assert code == 0, stderr
    return json.loads(stdout)


def test_the_releases_are_newest_first_back_to_0_4_0() -> None:
    versions = [tuple(int(p) for p in v.split(".")) for v in TRAINER.releases]
    assert versions == sorted(versions, reverse=True) and TRAINER.latest == "0.9.1"
    assert list(RELEASES) == list(TRAINER.releases) and versions[-1] == (0, 4, 0)
    for version, (covers, changed) in RELEASES.items():
        assert covers in TRAINER.releases[version].source and changed in TRAINER.releases[version].source
    workers = {v: "dp_actor.py" in r.source for v, r in TRAINER.releases.items()}
    assert [v for v, dp_actor in workers.items() if dp_actor] == DP_ACTOR


@pytest.mark.parametrize("version", ["0.3.0.post1", "0.9.2", "0.7", "latest"])
def test_an_unmodelled_release_is_refused_in_one_line(version: str) -> None:
    code, stdout, stderr = invoke("check", "--trainer", "verl", "--version", version, *SMALL)
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert f"--version {version} of verl is not modelled; modelled: {', '.join(RELEASES)}" in stderr


# per release: the Dr. GRPO-like settings' normaliser, and the settings `toyrl check` proposes to make
# the GRPO-like ones Dr. GRPO's loss (None: none of the release's makes its spec Dr. GRPO's: up to
# 0.7.0 agg_loss's seq-mean-token-sum-norm sums the responses, token_sum_norm, which the toy runs as
# Dr. GRPO's loss at another constant scale; from 0.9.0 the V1 trainer needs loss_scale_factor)
SUM_NORM = {"aggregation=seq_mean_token_sum_norm": DR_GRPO_LIKE}
VERDICTS = {
    "0.9.1": ("seq_mean_token_sum_longest", DR_GRPO_LIKE | {ACTOR + "loss_scale_factor": 512}),
    "0.9.0": ("seq_mean_token_sum_longest", DR_GRPO_LIKE | {ACTOR + "loss_scale_factor": 512}),
    "0.8.0": ("seq_mean_token_sum_norm", DR_GRPO_LIKE),
    "0.7.1": ("seq_mean_token_sum_norm", DR_GRPO_LIKE),
    **{version: ("token_sum_norm", None) for version in DP_ACTOR[1:]},
}


@pytest.mark.parametrize("version", list(VERDICTS))
def test_each_release_s_verdicts(version: str) -> None:
    """GRPO-like settings (verl's defaults with grpo) drift in length on the toy in every release;
    Dr. GRPO-like ones (no std, seq-mean-token-sum-norm) do not, whatever the release's
    seq-mean-token-sum-norm computes (the V1 trainer's per-micro-batch longest response drifts no
    more at the toy's scale)."""
    normaliser, to_dr_grpo = VERDICTS[version]
    grpo = check_json(version, AT_TOY_SCALE)
    assert grpo["version"] == version and grpo["loss_preset"] == "verl_default"
    assert grpo["verdict"].startswith("length drift: wrong answers end")
    expected = None if to_dr_grpo is None else {key: value for key, value in to_dr_grpo.items()}
    assert grpo["dr_grpo_settings"] == expected
    dr_grpo = check_json(version, AT_TOY_SCALE | DR_GRPO_LIKE)
    assert parse_variant(dr_grpo["spec"]).names()["normaliser"] == normaliser
    assert dr_grpo["verdict"].startswith(("no more length drift", "these settings are Dr. GRPO itself"))


@pytest.mark.parametrize(
    ("version", "key"),
    [
        ("0.4.0", ACTOR + "policy_loss.loss_mode"),  # 0.4.1 on
        ("0.5.0", ACTOR + "optim.clip_grad"),  # 0.6.0 on (before: actor.grad_clip)
        ("0.6.1", ACTOR + "loss_scale_factor"),  # 0.7.0 on
        ("0.6.1", ACTOR + "tau_pos"),
        ("0.7.0", "reward.reward_manager.name"),  # 0.7.1 on
        ("0.7.0", "reward.reward_kwargs.overlong_buffer_cfg.enable"),
        ("0.8.0", "algorithm.filter_groups.enable"),  # 0.9.0 on
        ("0.8.0", "trainer.use_v1"),
    ],
)
def test_a_key_the_release_does_not_have_is_unknown_to_it(version: str, key: str) -> None:
    """By --set: refused in one line naming the release; in a file: not read (listed among the keys
    toyrl does not read, or as a misspelling of the release's own name), never given."""
    code, stdout, stderr = invoke(
        "check", "--trainer", "verl", "--version", version, f"--set={key}=1", *SMALL
    )
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert f"verl {version} has no setting {key!r} that toyrl knows" in stderr
    resolved = resolve("verl", version, {**AT_TOY_SCALE, key: 1}, frozenset({key}))
    assert key not in resolved.values and key not in resolved.unused
    assert key in resolved.ignored or key in resolved.misspelt


@pytest.mark.parametrize(
    ("version", "key", "value", "valid"),
    [
        ("0.4.1", "algorithm.adv_estimator", "gpg", "'opo', 'grpo_passk'"),  # 0.5.0 on
        ("0.5.0", ACTOR + "policy_loss.loss_mode", "gspo", "'vanilla', 'gpg', 'clip_cov', 'kl_cov'"),
        ("0.6.1", ACTOR + "policy_loss.loss_mode", "cispo", "'geo_mean', 'rollout_correction'"),
        ("0.7.0", ACTOR + "policy_loss.loss_mode", "rollout_correction", "'cispo', 'bypass_mode'"),
        ("0.7.0", ACTOR + "policy_loss.loss_mode", "dro", "'cispo', 'bypass_mode'"),  # 0.9.0 on
        ("0.7.0", "algorithm.adv_estimator", "gdpo", "'grpo_vectorized'"),  # 0.7.1 on
        ("0.8.0", ACTOR + "loss_agg_mode", "token-sum", "'seq-mean-token-sum-norm'"),  # 0.9.0 on
    ],
)
def test_a_value_the_release_does_not_have_is_refused(version: str, key: str, value: str, valid: str) -> None:
    with pytest.raises(InvalidInput, match=f"{key}='{value}' is not valid") as error:
        resolve("verl", version, {**AT_TOY_SCALE, key: value})
    assert str(error.value).endswith(valid) and "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("version", "key", "why"),
    [
        ("0.4.0", ACTOR + "shuffle", "never reads it: the mini-batches are the batch's, in its order"),
        ("0.6.0", ACTOR + "optim.clip_grad", "clips the gradient's norm at actor.grad_clip"),
        ("0.7.0", ACTOR + "loss_scale_factor", "never passes it to agg_loss"),
        ("0.7.1", ACTOR + "loss_scale_factor", "never passes it to agg_loss"),
        (
            "0.8.0",
            ACTOR + "grad_clip",
            "the engine worker clips the gradient's norm at actor.optim.clip_grad",
        ),
        ("0.9.0", LEGACY + "overlong_buffer_cfg.enable", "its main_ppo never reads the legacy reward_model"),
        (
            "0.9.0",
            "algorithm.filter_groups.max_num_gen_batches",
            "the V1 trainer's replay buffer never reads it",
        ),
        ("0.9.1", "algorithm.filter_groups.max_num_gen_batches", "generates until the batch is full"),
    ],
)
def test_a_key_the_release_ignores_is_said_to_be_ignored(version: str, key: str, why: str) -> None:
    resolved = resolve("verl", version, {**AT_TOY_SCALE, key: True}, frozenset({key}))
    assert why in resolved.unused[key] and key not in resolved.values
    sets = [f"--set={k}={v}" for k, v in AT_TOY_SCALE.items()]
    code, stdout, stderr = invoke(
        "check", "--trainer", "verl", "--version", version, *sets, f"--set={key}=1", *SMALL
    )
    assert code == 0, stderr
    (line,) = [
        line for line in stdout.splitlines() if line.startswith(f"note: {key}: verl {version} ignores it (")
    ]
    assert why in line


@pytest.mark.parametrize("version", DP_ACTOR)
def test_dp_actor_normalises_each_micro_batch(version: str) -> None:
    """Before 0.8.0: each micro-batch's loss normalised on its own, their mean the mini-batch's loss
    (per_micro_batch, micro-batches of 128 responses: 16 a mini-batch of 256 x 8, which the check
    cuts from the toy's steps at the trainer's size); the micro-batch size required, dynamic batch
    sizes not modelled; seq-mean-token-sum-norm divides by data.max_response_length (the padded
    width, as given), summed over responses up to 0.7.0 and averaged from 0.7.1; grad_clip is the
    gradient clip it reads."""
    settings = {"algorithm.adv_estimator": "grpo", "actor_rollout_ref.rollout.n": 8}
    micro = settings | {ACTOR + "ppo_micro_batch_size_per_gpu": 128}
    mapping = resolve("verl", version, micro).mapping
    variant = parse_variant(mapping.spec)
    assert variant.normaliser.per_micro_batch and mapping.micro_batch_responses == 128
    assert variant.schedule.mini_batches == 4 and variant.schedule.shuffle == "none"
    with pytest.raises(InvalidInput, match=f"ppo_micro_batch_size_per_gpu is required in verl {version}"):
        resolve("verl", version, settings)
    with pytest.raises(InvalidInput, match="use_dynamic_bsz=True is not modelled"):
        resolve("verl", version, micro | {ACTOR + "use_dynamic_bsz": True})
    norm = resolve("verl", version, micro | DR_GRPO_LIKE | {"data.max_response_length": 1024}).mapping
    summed = tuple(int(p) for p in version.split(".")) <= (0, 7, 0)
    want = "token_sum_norm" if summed else "seq_mean_token_sum_norm"
    assert parse_variant(norm.spec).names()["normaliser"] == want
    assert any("data.max_response_length = 1024" in item for item in norm.unmodelled)
    assert any(item.startswith(f"{ACTOR}grad_clip=1.0: gradient-norm clipping") for item in norm.unmodelled)


@pytest.mark.parametrize("version", DP_ACTOR)
@pytest.mark.parametrize("micro", [1, 4, 128])
def test_dp_actor_s_micro_batches_are_cut_from_the_toy_s_steps_at_the_trainer_s_size(
    version: str, micro: int
) -> None:
    """verl's defaults (mini-batches of 256 prompts) with a micro-batch size of 4 once asked the toy
    for 4 x 64 micro-batches of its 128 responses and were refused: the toy cuts each of its steps
    (B x G / 4 responses) into micro-batches of the trainer's size instead, as many as fit."""
    resolved = resolve(
        "verl", version, {"algorithm.adv_estimator": "grpo", ACTOR + "ppo_micro_batch_size_per_gpu": micro}
    )
    config = Config(batch_prompts=16, group_size=8)
    variant, _ = toy_variant(resolved, config)
    step = config.batch_prompts * config.group_size // variant.schedule.mini_batches
    assert variant.normaliser.per_micro_batch
    assert variant.schedule.micro_batches == max(1, min(step, step // micro))  # 32, 8, 1: all divide 32


def test_the_engine_worker_normalises_over_the_mini_batch_from_0_8_0() -> None:
    """0.8.0 (no dp_actor): the mini-batch's normalisers whatever the micro-batches; the legacy
    trainer pads to data.max_response_length, a constant divisor; actor.shuffle read; dynamic batch
    sizes taken."""
    settings = {"algorithm.adv_estimator": "grpo", ACTOR + "ppo_micro_batch_size_per_gpu": 2}
    variant = parse_variant(resolve("verl", "0.8.0", settings | {ACTOR + "shuffle": True}).mapping.spec)
    assert not variant.normaliser.per_micro_batch and variant.schedule.shuffle == "epoch"
    dynamic = resolve("verl", "0.8.0", settings | DR_GRPO_LIKE | {ACTOR + "use_dynamic_bsz": True}).mapping
    assert parse_variant(dynamic.spec).names()["normaliser"] == "seq_mean_token_sum_norm"
    assert dynamic.micro_batch_responses is None and dynamic.layout.token_budget == 0


@pytest.mark.parametrize(("version", "forced"), [("0.9.1", False), ("0.9.0", True), ("0.6.0", True)])
def test_gspo_aggregates_seq_mean_token_mean_before_0_9_1(version: str, forced: bool) -> None:
    settings = AT_TOY_SCALE | {ACTOR + "policy_loss.loss_mode": "gspo"}
    mapping = resolve("verl", version, settings).mapping
    normaliser = parse_variant(mapping.spec).names()["normaliser"]
    assert normaliser == ("seq_mean_token_mean" if forced else "token_mean")
    assert any("'gspo' aggregates seq-mean-token-mean" in note for note in mapping.notes) == forced


DAPO = {"overlong_buffer_cfg.enable": True, "overlong_buffer_cfg.len": 150, "max_resp_len": 1500}


@pytest.mark.parametrize(
    ("version", "section", "read"),
    [
        ("0.6.0", "reward_model.", True),  # main_ppo hands reward_model.reward_kwargs to the manager
        ("0.7.1", "reward_model.", True),  # moved onto reward. by migrate_legacy_reward_impl
        ("0.8.0", "reward_model.", True),
        ("0.7.1", "reward.", True),
        ("0.9.0", "reward_model.", False),  # never read
    ],
)
def test_the_dapo_manager_s_section_follows_the_release(version: str, section: str, read: bool) -> None:
    manager = "reward_model.reward_manager" if section == "reward_model." else "reward.reward_manager.name"
    given = {manager: "dapo"} | {f"{section}reward_kwargs.{key}": value for key, value in DAPO.items()}
    resolved = resolve("verl", version, AT_TOY_SCALE | given, frozenset(given))
    spec = parse_variant(resolved.mapping.spec).spec()
    assert (spec.get("reward") == "soft_overlong" and spec.get("buffer") == 0.1) == read
    assert bool(resolved.renamed) == (version in ("0.7.1", "0.8.0") and section == "reward_model.")
    assert bool(resolved.unused) == (not read)


def test_grpo_vectorized_s_variance_floor_is_told_before_0_8_0() -> None:
    settings = AT_TOY_SCALE | {"algorithm.adv_estimator": "grpo_vectorized"}
    for version, told in (("0.6.0", True), ("0.7.1", True), ("0.8.0", False)):
        notes = resolve("verl", version, settings).mapping.notes
        assert any("floors each group's variance at 1e-6" in note for note in notes) == told, version


def test_0_9_0_s_filter_groups_needs_its_metric() -> None:
    """0.9.0's filter_groups.metric has no default: verl refuses group filtering without one."""
    on = AT_TOY_SCALE | {"algorithm.filter_groups.enable": True}
    with pytest.raises(InvalidInput, match=r"algorithm\.filter_groups\.metric is unset") as error:
        resolve("verl", "0.9.0", on)
    assert "\n" not in str(error.value)
    assert (
        "sampler=filter_groups"
        in resolve("verl", "0.9.0", on | {"algorithm.filter_groups.metric": "acc"}).mapping.spec
    )
    assert "sampler=filter_groups" in resolve("verl", "0.9.1", on).mapping.spec  # 'reward' by default


FILTER = "algorithm.filter_groups."


@pytest.mark.parametrize("version", ["0.9.1", "0.9.0"])
@pytest.mark.parametrize("cap", [1, 10])
def test_the_v1_trainer_filters_groups_without_a_cap(version: str, cap: int) -> None:
    """0.9.x's V1 trainer (the default) never reads filter_groups.max_num_gen_batches: its replay
    buffer refills until the batch is full. The mapping is the same whatever the cap says: the
    sampler's most rounds (100,000), the cap said to be ignored, and the difference left (the toy
    falls back to dropped groups when a step's prompts run out) told among what is not modelled."""
    on = AT_TOY_SCALE | {FILTER + "enable": True, FILTER + "metric": "acc"}
    capped = resolve("verl", version, on | {FILTER + "max_num_gen_batches": cap}, frozenset(on))
    assert FILTER + "max_num_gen_batches" in capped.unused and not capped.misspelt
    assert capped.mapping == resolve("verl", version, on).mapping
    variant = parse_variant(capped.mapping.spec)
    assert variant.names()["sampler"] == "filter_groups" and variant.sampler.max_rounds == 100_000
    (told,) = [item for item in capped.mapping.unmodelled if item.startswith("algorithm.filter_groups:")]
    assert "with no cap" in told and "fills the batch with dropped groups" in told


@pytest.mark.parametrize("version", ["0.9.1", "0.9.0"])
def test_the_legacy_trainer_never_filters_groups(version: str) -> None:
    """trainer.use_v1=False: 0.9.x's legacy trainer reads no filter_groups setting, so the batch is
    trained as drawn (sampler once), said in a note; 0.9.0's missing metric stops only the V1
    trainer."""
    legacy = AT_TOY_SCALE | {"trainer.use_v1": False, FILTER + "enable": True}
    mapping = resolve("verl", version, legacy).mapping
    assert parse_variant(mapping.spec).names()["sampler"] == "once"
    assert any(
        "legacy trainer (trainer.use_v1=False) never reads algorithm.filter_groups" in note
        for note in mapping.notes
    )
    off = resolve("verl", version, legacy | {FILTER + "enable": False}).mapping
    assert mapping.spec == off.spec and not any("filter_groups" in note for note in off.notes)
    checked = check_json(version, legacy)  # the command line's values, read as text
    assert parse_variant(checked["spec"]).names()["sampler"] == "once"


@pytest.mark.parametrize(("version", "canonical"), [("0.9.1", True), ("0.9.0", False)])
def test_the_metric_reward_is_the_reward_from_0_9_1(version: str, canonical: bool) -> None:
    """filter_groups.metric='reward': 0.9.1's replay buffer reads the reward itself (rm_scores), the
    toy's correctness without the overlong punishment; 0.9.0's reads a reward_extra_info key of
    that name, which its reward managers do not write: told among what is not modelled."""
    on = AT_TOY_SCALE | {FILTER + "enable": True, FILTER + "metric": "reward"}
    unmodelled = resolve("verl", version, on).mapping.unmodelled
    told = [item for item in unmodelled if item.startswith(FILTER + "metric=")]
    assert (told == []) == canonical
    assert canonical or "reads every metric from the reward manager's reward_extra_info" in told[0]
