"""verl's PPO trainer settings on the toy (verl 0.9.1: verl/trainer/config/ppo_trainer.yaml's
defaults; verl/trainer/ppo/core_algos.py: the advantage estimators, `agg_loss`, the "vanilla"
policy loss). Settings are the Hydra paths, e.g. `actor_rollout_ref.actor.loss_agg_mode`.

What the mapping follows:
- `algorithm.adv_estimator`: "grpo" (r - group mean, divided by the group's sample std + 1e-6
  unless `algorithm.norm_adv_by_std_in_grpo` is false), "rloo" (leave-one-out), and
  "reinforce_plus_plus_baseline" (group mean, then whitened over the batch's tokens with a
  Bessel-corrected variance + 1e-8: `token_whiten_sample`), "reinforce_plus_plus" (at gamma 1: the
  rewards themselves whitened so, `reinforce_pp`), "opo" (the length-weighted group baseline),
  "gpg" (the centred reward times N / nonzero rewards) and "grpo_passk" (the best response's
  margin over the second, divided by the group's std unless norm_adv_by_std_in_grpo is false:
  `passk`); the default "gae" needs a value model, and "remax" a greedy rollout's reward;
- `actor_rollout_ref.actor.policy_loss.loss_mode`: "vanilla" (PPO, dual clip), "gspo", "cispo",
  "sapo" (`actor.tau_pos` / `tau_neg`, in the actor's section, not its policy_loss; always
  seq-mean-token-mean), "gpg" and "geo_mean" (GMPO; the mean over responses);
- `actor_rollout_ref.actor.loss_agg_mode`: "token-mean" (the batch's tokens), "seq-mean-token-mean",
  "seq-mean-token-sum" (a response's token sum, averaged over the global batch),
  "seq-mean-token-sum-norm" (the same, divided by `loss_scale_factor`, or when it is unset by the
  padded width: in the V1 trainer each micro-batch's longest response, seq_mean_token_sum_longest;
  in the legacy one data.max_response_length, seq_mean_token_sum_norm), "token-sum";
- the V1 trainer's layout (`toyrl.layout`): `trainer.nnodes` x `n_gpus_per_node` / the Ulysses
  sequence-parallel size data-parallel ranks, each batch dealt to them balanced by workload
  (`ranks`); micro-batches of `ppo_micro_batch_size_per_gpu`, or with `use_dynamic_bsz` of at
  most `ppo_max_token_len_per_gpu` tokens (`token_budget`), prompts counted at
  `data.max_prompt_length`; where they matter (several mini-batches, or a divisor per micro-batch);
- `clip_ratio_low`/`clip_ratio_high` (each `clip_ratio` when null; both are 0.2 by default, so
  clip_ratio alone does nothing), any size verl takes (it checks none): a lower bound 1 - low below
  0 cannot bind (`ratio_clip`: no lower clip), an upper one of 1 + 10 or more, and GMPO's log-ratio
  clip at 10 or more, are beyond the toy's clip ranges (refused in one line); `clip_ratio_c` (the
  dual clip, 3 by default), `ppo_epochs`; the KL loss (`use_kl_loss`, `kl_loss_coef`, `kl_loss_type`
  low_var_kl = k3);
- `data.train_batch_size` / `ppo_mini_batch_size` (1024 / 256 by default): optimiser steps per
  generated batch, each on its mini-batch, in the batch's order (reshuffled each epoch with
  `actor.shuffle`);
- `reward.reward_manager.name='dapo'` with `reward.reward_kwargs.overlong_buffer_cfg` (enable, len,
  penalty_factor) and `max_resp_len`: DAPO's soft overlong punishment (`soft_overlong`, the buffer
  as a fraction of the longest response), on the math score 1 / -1; up to 0.7.0 they are
  `reward_model.reward_manager` and `reward_model.reward_kwargs.*` (verl/trainer/main_ppo.py),
  which 0.7.1 and 0.8.0 move onto reward. (aliases) and 0.9.x accepts and never reads
  (`IGNORED_0_9_1`: only its fully async trainer migrates them, migrate_legacy_reward_impl), so
  DAPO scripts in the old form run 0.9.x without the penalty; `algorithm.filter_groups` (enable,
  metric; 0.9.0 on): dynamic sampling (`filter_groups`) in the V1 trainer, which generates until
  the batch is full with no cap (max_num_gen_batches is never read: `FILTER_CAP`), none in the
  legacy one (trainer.use_v1=False), which never reads filter_groups;
- `actor_rollout_ref.rollout.n`: the group size G.

The releases (`RELEASES`, back to 0.4.0, the first with loss_agg_mode): each one's settings are
those of its configuration it reads (`_settings`: `SINCE`, its estimators, policy losses and
loss_agg_modes), mapped by `_mapping` at that release: before 0.8.0 by dp_actor's update_policy
(`_micro_batches`: each micro-batch normalised on its own, seq-mean-token-sum-norm a sum over the
width up to 0.7.0, loss_scale_factor and actor.shuffle never read, actor.grad_clip the clip);
GSPO aggregates seq-mean-token-mean before 0.9.1; the V1 trainer's layout from 0.9.0.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from toyrl.config import InvalidInput
from toyrl.stages.objective import PPOClip
from toyrl.stages.registry import declarations
from toyrl.stages.sampler import FilterGroups
from toyrl.trainers import (
    Levers,
    MicroLayout,
    Release,
    Setting,
    ToyMapping,
    Trainer,
    constant_note,
    grad_clip_note,
    not_modelled,
    ppo_spec,
    schedule_spec,
)

ACTOR = "actor_rollout_ref.actor."
VERSION = "0.9.1"
ESTIMATORS = (
    "gae",
    "grpo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "rloo",
    "opo",
    "grpo_passk",
    "gpg",
    "rloo_vectorized",
    "grpo_vectorized",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
    "gdpo",
)
MODELLED_ESTIMATORS = (
    "grpo",
    "grpo_vectorized",
    "rloo",
    "rloo_vectorized",
    "reinforce_plus_plus_baseline",
    "reinforce_plus_plus",
    "opo",
    "gpg",
    "grpo_passk",
)
MODELLED_LOSS_MODES = ("vanilla", "gspo", "cispo", "sapo", "gpg", "geo_mean")
# why the other estimators are not modelled
ESTIMATOR_REASONS = {
    "gae": "PPO's GAE needs a value model",
    "remax": "its baseline is the reward of a greedy rollout of each prompt, a second generation that "
    "toyrl's advantage stages do not take",
}
AGGREGATION = {
    "token-mean": "token_mean",
    "token-sum": "token_sum",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "seq-mean-token-sum": "seq_mean_token_sum",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}
LOSS_MODES = (
    "vanilla",
    "dppo_tv",
    "dppo_kl",
    "gspo",
    "sapo",
    "gpg",
    "clip_cov",
    "kl_cov",
    "geo_mean",
    "dro",
    "cispo",
    "bypass_mode",
    "rollout_correction",  # 0.6.1's only
)
KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")
MANAGERS = ("naive", "prime", "batch", "dapo")

SETTINGS_0_9_1 = {
    "algorithm.adv_estimator": Setting("gae", ESTIMATORS),
    "algorithm.norm_adv_by_std_in_grpo": Setting(True, kind=bool),
    "algorithm.gamma": Setting(1.0, kind=float, low=0.0, high=1.0),
    "algorithm.use_kl_in_reward": Setting(False, kind=bool),
    ACTOR + "loss_agg_mode": Setting("token-mean", tuple(AGGREGATION)),
    ACTOR + "loss_scale_factor": Setting(None, kind=float, low=0.0, optional=True),
    ACTOR + "policy_loss.loss_mode": Setting("vanilla", LOSS_MODES),
    # any clip range verl takes (it checks none): large ones are how its scripts turn a clip off
    ACTOR + "clip_ratio": Setting(0.2, kind=float, low=0.0),
    ACTOR + "clip_ratio_low": Setting(0.2, kind=float, low=0.0, optional=True),
    ACTOR + "clip_ratio_high": Setting(0.2, kind=float, low=0.0, optional=True),
    ACTOR + "clip_ratio_c": Setting(3.0, kind=float, low=1.0),
    ACTOR + "ppo_epochs": Setting(1, kind=int, low=1, high=64),
    ACTOR + "ppo_mini_batch_size": Setting(256, kind=int, low=1),
    ACTOR + "use_kl_loss": Setting(False, kind=bool),
    ACTOR + "kl_loss_coef": Setting(0.001, kind=float, low=0.0),
    ACTOR + "kl_loss_type": Setting("low_var_kl", KL_TYPES),
    ACTOR + "shuffle": Setting(False, kind=bool),
    "actor_rollout_ref.rollout.n": Setting(1, kind=int, low=1, high=10_000),
    "data.train_batch_size": Setting(1024, kind=int, low=1),
    "reward.reward_manager.name": Setting("naive", MANAGERS),
    "reward.reward_kwargs.overlong_buffer_cfg.enable": Setting(False, kind=bool),
    "reward.reward_kwargs.overlong_buffer_cfg.len": Setting(0, kind=int, low=0),
    "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor": Setting(1.0, kind=float, low=0.0),
    "reward.reward_kwargs.max_resp_len": Setting(None, kind=int, low=1, optional=True),
    "algorithm.filter_groups.enable": Setting(False, kind=bool),
    "algorithm.filter_groups.metric": Setting("reward", kind=str),
    "trainer.balance_batch": Setting(True, kind=bool),
    "trainer.use_v1": Setting(True, kind=bool),
    "trainer.nnodes": Setting(1, kind=int, low=1),
    "trainer.n_gpus_per_node": Setting(8, kind=int, low=1),
    "data.max_response_length": Setting(512, kind=int, low=1),
    "data.max_prompt_length": Setting(512, kind=int, low=1),
    ACTOR + "ppo_micro_batch_size_per_gpu": Setting(None, kind=int, low=1, optional=True),
    ACTOR + "use_dynamic_bsz": Setting(False, kind=bool),
    ACTOR + "ppo_max_token_len_per_gpu": Setting(16384, kind=int, low=1),
    ACTOR + "ulysses_sequence_parallel_size": Setting(1, kind=int, low=1),  # deprecated for ...
    ACTOR + "fsdp_config.ulysses_sequence_parallel_size": Setting(1, kind=int, low=1),  # ... this
    ACTOR + "optim.clip_grad": Setting(1.0, kind=float, low=0.0),
    ACTOR + "tau_pos": Setting(1.0, kind=float, low=0.0, high=1000.0),
    ACTOR + "tau_neg": Setting(1.05, kind=float, low=0.0, high=1000.0),
}

# The releases modelled, newest first, each standing for the releases that read alike what toyrl
# reads (read in each release's own wheel): version -> (the releases, what changed from the one
# before). 0.4.0 is the first with loss_agg_mode, clip_ratio_low / _high and norm_adv_by_std_in_grpo.
# Before 0.8.0 the default worker (trainer.use_legacy_worker_impl=auto) updates the actor with
# verl/workers/actor/dp_actor.py's update_policy: each micro-batch's loss aggregated on its own,
# divided by the gradient-accumulation steps, the mini-batches in the batch's order.
RELEASES = {
    "0.9.1": ("0.9.1", "policy loss gspo aggregates by loss_agg_mode (before: seq-mean-token-mean)"),
    "0.9.0": (
        "0.9.0",
        "the V1 trainer (trainer.use_v1, the default: each micro-batch padded to its longest response, "
        "the batch dealt to the ranks by workload); algorithm.filter_groups (read by the V1 trainer only, "
        "never its max_num_gen_batches); loss_agg_mode token-sum; "
        "policy loss dro; main_ppo no longer reads the legacy reward_model section",
    ),
    "0.8.0": (
        "0.8.0",
        "no dp_actor: the engine worker's ppo_loss (verl/workers/utils/losses.py), normalised over the "
        "mini-batch; the legacy trainer pads responses to data.max_response_length",
    ),
    "0.7.1": (
        "0.7.1",
        "seq-mean-token-sum-norm averages the responses' sums before dividing (agg_loss); "
        "reward.reward_manager and reward.reward_kwargs, onto which main_ppo moves the legacy "
        "reward_model section; estimators optimal_token_baseline, tir_optimal_token_baseline, gdpo; "
        "policy losses dppo_tv, dppo_kl",
    ),
    "0.7.0": (
        "0.7.0",
        "loss_scale_factor (which dp_actor never passes to agg_loss); policy losses sapo, cispo, bypass_mode "
        "(rollout_correction's successor); actor.tau_pos / tau_neg",
    ),
    "0.6.1": ("0.6.1", "policy loss rollout_correction"),
    "0.6.0": (
        "0.6.0",
        "policy losses gspo and geo_mean; estimators grpo_vectorized, rloo_vectorized; actor.optim.clip_grad "
        "(was actor.grad_clip)",
    ),
    "0.5.0": ("0.5.0", "estimator and policy loss gpg"),
    "0.4.1": ("0.4.1", "actor.policy_loss.loss_mode: vanilla, clip_cov, kl_cov"),
    "0.4.0": ("0.4.0", "loss_agg_mode, clip_ratio_low / _high / _c, algorithm.norm_adv_by_std_in_grpo"),
}
OLDEST_V1, OLDEST_ENGINE = (0, 9, 0), (0, 8, 0)  # the V1 trainer's first release; the engine worker's

# The first release whose configuration has each setting (the others: 0.4.0), checked against each
# release's own configuration by the conformance suite. The DAPO manager's reward_kwargs are no keys
# of the file (main_ppo hands whatever the section holds to the manager): they go with their section.
LEGACY_REWARD = "reward_model.reward_kwargs."
REWARD = "reward.reward_kwargs."
SINCE = {
    ACTOR + "policy_loss.loss_mode": "0.4.1",
    ACTOR + "optim.clip_grad": "0.6.0",
    ACTOR + "fsdp_config.ulysses_sequence_parallel_size": "0.6.0",
    ACTOR + "loss_scale_factor": "0.7.0",
    ACTOR + "tau_pos": "0.7.0",
    ACTOR + "tau_neg": "0.7.0",
    "reward.reward_manager.name": "0.7.1",
    **{REWARD + key: "0.7.1" for key in ("overlong_buffer_cfg.enable", "overlong_buffer_cfg.len")},
    **{REWARD + key: "0.7.1" for key in ("overlong_buffer_cfg.penalty_factor", "max_resp_len")},
    "algorithm.filter_groups.enable": "0.9.0",
    "algorithm.filter_groups.metric": "0.9.0",
    "algorithm.filter_groups.max_num_gen_batches": "0.9.0",
    "trainer.use_v1": "0.9.0",
}
GRAD_CLIP = Setting(1.0, kind=float, low=0.0)  # actor.grad_clip: dp_actor's clip_grad_norm_ bound
# The legacy reward section as main_ppo reads it up to 0.7.0 (then moved onto reward.: aliases)
LEGACY_REWARD_SETTINGS = {
    "reward_model.reward_manager": Setting("naive", MANAGERS),
    LEGACY_REWARD + "overlong_buffer_cfg.enable": Setting(False, kind=bool),
    LEGACY_REWARD + "overlong_buffer_cfg.len": Setting(0, kind=int, low=0),
    LEGACY_REWARD + "overlong_buffer_cfg.penalty_factor": Setting(1.0, kind=float, low=0.0),
    LEGACY_REWARD + "max_resp_len": Setting(None, kind=int, low=1, optional=True),
}
# The first release registering each estimator, policy loss and loss_agg_mode (the others: 0.4.0;
# 0.4.0 has no policy_loss.loss_mode, its loss is vanilla), and rollout_correction's last.
ESTIMATOR_SINCE = {
    "gpg": "0.5.0",
    "rloo_vectorized": "0.6.0",
    "grpo_vectorized": "0.6.0",
    "optimal_token_baseline": "0.7.1",
    "tir_optimal_token_baseline": "0.7.1",
    "gdpo": "0.7.1",
}
LOSS_MODE_SINCE = {
    "gpg": "0.5.0",
    "gspo": "0.6.0",
    "geo_mean": "0.6.0",
    "rollout_correction": "0.6.1",
    "sapo": "0.7.0",
    "cispo": "0.7.0",
    "bypass_mode": "0.7.0",
    "dppo_tv": "0.7.1",
    "dppo_kl": "0.7.1",
    "dro": "0.9.0",
}
LOSS_MODE_UNTIL = {"rollout_correction": "0.6.1"}
AGGREGATION_SINCE = {"token-sum": "0.9.0"}
# read only by the V1 trainer's layout (`_ranks`, `_sum_norm`); only by the engine worker (0.8.0 on);
# only by dp_actor (before)
V1_LAYOUT = (
    "trainer.use_v1",
    "trainer.nnodes",
    "trainer.n_gpus_per_node",
    "data.max_prompt_length",
    ACTOR + "ppo_max_token_len_per_gpu",
    ACTOR + "ulysses_sequence_parallel_size",
    ACTOR + "fsdp_config.ulysses_sequence_parallel_size",
)
ENGINE_ONLY = (ACTOR + "shuffle", ACTOR + "loss_scale_factor", ACTOR + "optim.clip_grad")
DP_ACTOR_ONLY = (ACTOR + "grad_clip",)


def _at(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _has(version: str, name: str, since: dict[str, str], until: dict[str, str]) -> bool:
    at = _at(version)
    return at >= _at(since.get(name, "0.4.0")) and at <= _at(until.get(name, VERSION))


def _settings(version: str) -> dict[str, Setting]:
    """The settings toyrl reads in a release, with its defaults and valid values: those of its
    configuration (`SINCE`) that its trainer and worker read (the V1 layout from 0.9.0; the engine
    worker's settings from 0.8.0, dp_actor's before: `ENGINE_ONLY`, `DP_ACTOR_ONLY`), its estimators,
    policy losses and loss_agg_modes."""
    at = _at(version)
    settings = {
        key: setting
        for key, setting in (
            SETTINGS_0_9_1 | LEGACY_REWARD_SETTINGS | {ACTOR + "grad_clip": GRAD_CLIP}
        ).items()
        if _has(version, key, SINCE, {})
        and (at >= OLDEST_V1 or key not in V1_LAYOUT)
        and key not in (DP_ACTOR_ONLY if at >= OLDEST_ENGINE else ENGINE_ONLY)
        and (at < (0, 7, 1) or key not in LEGACY_REWARD_SETTINGS)
    }
    choices = {
        "algorithm.adv_estimator": [e for e in ESTIMATORS if _has(version, e, ESTIMATOR_SINCE, {})],
        ACTOR + "policy_loss.loss_mode": [
            m for m in LOSS_MODES if _has(version, m, LOSS_MODE_SINCE, LOSS_MODE_UNTIL)
        ],
        ACTOR + "loss_agg_mode": [a for a in AGGREGATION if _has(version, a, AGGREGATION_SINCE, {})],
    }
    for key, valid in choices.items():
        if key in settings:
            settings[key] = dataclasses.replace(settings[key], choices=tuple(valid))
    return settings


def _dapo_spec(
    s: dict[str, Any],
    unmodelled: list[str],
    manager: str = "reward.reward_manager.name",
    kwargs: str = REWARD,
) -> list[str]:
    """The DAPO reward manager (the setting `manager` names it; `kwargs`, the section of its keyword
    arguments: reward.reward_kwargs. from 0.7.1, reward_model.reward_kwargs. before): its math score,
    1 / -1, and the overlong buffer."""
    spec = []
    if s[manager] == "dapo":
        factor, length = (
            s[kwargs + "overlong_buffer_cfg.penalty_factor"],
            s[kwargs + "overlong_buffer_cfg.len"],
        )
        longest = s[kwargs + "max_resp_len"]
        if not s[kwargs + "overlong_buffer_cfg.enable"]:
            factor = 0.0
        elif longest is None or not 0 < length <= longest:
            raise InvalidInput(
                f"{kwargs}overlong_buffer_cfg.len={length} must be in 1..{kwargs}max_resp_len "
                f"(={longest}), as verl's DAPO reward manager requires (from 0.5.0; the toy's buffer is a "
                "fraction of the longest response)"
            )
        buffer = length / longest if factor > 0 else 0.2
        spec += ["reward=soft_overlong", f"buffer={buffer:.6g}", f"penalty_factor={factor}"]
        unmodelled.append(
            f"{manager}='dapo': its score is the data source's (DAPO's math score: 1 / -1, as the toy takes "
            "it)"
        )
    elif s[kwargs + "overlong_buffer_cfg.enable"]:
        unmodelled.append("overlong_buffer_cfg: only the 'dapo' reward manager reads it; left out")
    return spec


def _filter_groups_spec(
    s: dict[str, Any], version: str, shaped: bool, notes: list[str], unmodelled: list[str]
) -> list[str]:
    """algorithm.filter_groups (0.9.0 on) as the V1 trainer runs it (verl/trainer/ppo/v1:
    trainer_base.py's _build_replay_buffer, replay_buffer.py's ReplayBuffer.sample): a finished
    group whose metric is the same for every response is evicted, two more prompts are generated for
    each one evicted, with no cap, until data.train_batch_size groups are left (the surplus is
    discarded). max_num_gen_batches is never read (`FILTER_CAP`); the legacy trainer reads no
    filter_groups setting. The metric "reward" is the reward itself (rm_scores) from 0.9.1; 0.9.0
    reads every metric from reward_extra_info. `shaped`: the reward is DAPO's soft overlong
    punishment."""
    if not s["algorithm.filter_groups.enable"]:
        return []
    if not s["trainer.use_v1"]:
        notes.append(
            f"algorithm.filter_groups.enable=True: verl {version}'s legacy trainer (trainer.use_v1=False) "
            "never reads algorithm.filter_groups (only the V1 trainer's replay buffer does): no dynamic "
            "sampling, every group drawn is trained on"
        )
        return []
    metric = s["algorithm.filter_groups.metric"]
    if not metric:
        raise InvalidInput(
            "algorithm.filter_groups.metric is unset: verl requires it when group filtering is enabled; "
            "valid: 'acc', 'reward' or a reward_extra_info key"
        )
    unmodelled.append(
        f"algorithm.filter_groups: verl {version}'s V1 trainer generates until the batch holds "
        "data.train_batch_size groups whose responses differ, with no cap (two prompts for each group "
        "dropped, the dataset restarted at its end); the toy refills in rounds of B prompts not drawn "
        f"yet this step (max_rounds={NO_CAP}, its most) and, when they run out, fills the batch with "
        "dropped groups (zero_variance_fraction shows how often)"
    )
    if metric == "reward" and _at(version) < (0, 9, 1):
        unmodelled.append(
            f"algorithm.filter_groups.metric='reward': verl {version} reads every metric from the reward "
            "manager's reward_extra_info, where its managers put no 'reward' (acc, or the score function's "
            "own keys), so the run stops ('Finished groups are missing DAPO metric') unless the score "
            "function returns one; the toy filters on correctness (acc)"
        )
    elif metric not in ("acc", "reward") or (metric == "reward" and shaped):
        unmodelled.append(
            f"algorithm.filter_groups.metric={metric!r}: the toy filters on correctness (acc), which "
            "equals the reward only without the overlong punishment"
        )
    return ["sampler=filter_groups", f"max_rounds={NO_CAP}"]


TOY_CLIP = declarations(PPOClip)["epsilon_high"]["high"]  # the toy's clip ranges are below this
NO_CAP = declarations(FilterGroups)["max_rounds"]["high"]  # filter_groups' most refill rounds


def ratio_clip(
    low_name: str, low: float, high_name: str, high: float, notes: list[str]
) -> tuple[float | None, float]:
    """A ratio clip clamp(rho, 1 - low, 1 + high) (verl's vanilla, gspo and cispo losses,
    OpenRLHF's PolicyLoss) on the toy's clip range: a lower bound below 0 (low > 1) cannot bind,
    ratios being positive: no lower clip (None), which the scripts of both trainers set by a large
    low; an upper bound the toy's clip ranges do not reach is refused in one line."""
    if high >= TOY_CLIP:
        raise InvalidInput(
            f"{high_name}={high:g} clips the ratio at 1 + {high:g}, beyond the toy's clip ranges; valid on "
            f"the toy: {high_name} below {TOY_CLIP:g}"
        )
    if low <= 1:
        return low, high
    notes.append(
        f"{low_name}={low:g}: the lower clip at ratio 1 - {low:g} < 0 cannot bind (ratios are positive): "
        "no lower clip"
    )
    return None, high


def _clip_names(s: dict[str, Any]) -> tuple[str, str]:
    """The settings that give the clip range: clip_ratio_low / _high, each clip_ratio where it is None."""
    low, high = ACTOR + "clip_ratio_low", ACTOR + "clip_ratio_high"
    return low if s[low] is not None else ACTOR + "clip_ratio", high if s[
        high
    ] is not None else ACTOR + "clip_ratio"


def _objective_spec(s: dict[str, Any], epochs: int, beta: float, notes: list[str]) -> list[str]:
    """The policy loss: "vanilla" PPO with the dual clip clip_ratio_c; "gspo" (the sequence ratio,
    clipped at clip_ratio_low / _high, no dual clip); "cispo" (the weight clip(rho, 1 - low,
    1 + high), detached); "sapo" (the gate at actor.tau_pos / tau_neg); "gpg" (-A log pi);
    "geo_mean" (GMPO: the token log-ratios clipped at -low / high, their geometric mean). A lower
    ratio clip that cannot bind is none (`ratio_clip`): PPO's and GSPO's epsilon = 1 (a bound at 0,
    which binds no more), CISPO's epsilon unset."""
    mode = s[ACTOR + "policy_loss.loss_mode"]
    low_name, high_name = _clip_names(s)
    low, high = s[low_name], s[high_name]
    if mode == "geo_mean":  # the log-ratio's clip, at -low and high: any size can bind
        for name, value in ((low_name, low), (high_name, high)):
            if value >= TOY_CLIP:
                raise InvalidInput(
                    f"{name}={value:g} with policy_loss.loss_mode='geo_mean' clips the log-ratio at "
                    f"{value:g}, beyond the toy's clip ranges; valid on the toy: {name} below {TOY_CLIP:g}"
                )
    elif mode in ("vanilla", "gspo", "cispo"):
        low, high = ratio_clip(low_name, low, high_name, high, notes)
    if mode == "vanilla":
        return ppo_spec(1.0 if low is None else low, high, epochs, beta, dual_clip=s[ACTOR + "clip_ratio_c"])
    spec = [item for item in ppo_spec(0.2, None, epochs, beta) if not item.startswith("epsilon")]
    if mode in ("gspo", "cispo", "geo_mean"):
        spec.append(f"objective={'gmpo' if mode == 'geo_mean' else mode}")
        if low is not None or mode != "cispo":  # CISPO's default: no lower bound
            spec.append(f"epsilon={1.0 if low is None else low}")
        spec.append(f"epsilon_high={high}")
    elif mode == "sapo":
        spec.append("objective=sapo")
        for key, field in (("tau_pos", 1.0), ("tau_neg", 1.05)):
            if s[ACTOR + key] != field:
                spec.append(f"{key}={s[ACTOR + key]}")
    else:
        spec.append("objective=gpg")
    return spec


def _mapping(given: dict[str, Any], version: str = VERSION) -> ToyMapping:
    """A release's settings (`_settings(version)`, every one present) on the toy. The settings an
    older release does not have take values that do nothing (0.9.1's defaults; the legacy trainer
    before 0.9.0; vanilla PPO before 0.4.1); its dp_actor (before 0.8.0) is `_micro_batches`'."""
    at = _at(version)
    s = {**SETTINGS_DEFAULTS_0_9_1, "trainer.use_v1": at >= OLDEST_V1, **given}
    clip_grad = ACTOR + ("grad_clip" if at < OLDEST_ENGINE else "optim.clip_grad")
    estimator = s["algorithm.adv_estimator"]
    if estimator not in MODELLED_ESTIMATORS:
        why = ESTIMATOR_REASONS.get(estimator, "")
        modelled = [e for e in MODELLED_ESTIMATORS if _has(version, e, ESTIMATOR_SINCE, {})]
        raise not_modelled("algorithm.adv_estimator", estimator, modelled, why)
    mode = s[ACTOR + "policy_loss.loss_mode"]
    if mode not in MODELLED_LOSS_MODES:
        modelled = [m for m in MODELLED_LOSS_MODES if _has(version, m, LOSS_MODE_SINCE, LOSS_MODE_UNTIL)]
        raise not_modelled(ACTOR + "policy_loss.loss_mode", mode, modelled)
    if at < OLDEST_ENGINE and s[ACTOR + "use_dynamic_bsz"]:
        raise not_modelled(ACTOR + "use_dynamic_bsz", True, [False], "micro-batches of unequal sizes")
    notes, unmodelled = [], []
    if estimator == "grpo_vectorized":
        advantage = "group_std_sample,std_eps=1e-06"  # its code never reads the flag
        notes.append(
            "grpo_vectorized divides by the group std whatever algorithm.norm_adv_by_std_in_grpo says "
            "(compute_advantage does not pass it the flag), in float32"
        )
        if at < (0, 8, 0):  # groupwise.group_mean_std: sqrt(clamp(var, min=eps)), eps = 1e-6 until 0.7.1
            notes.append(
                f"verl {version}'s grpo_vectorized floors each group's variance at 1e-6 before adding 1e-6 "
                "to its std: the same advantages as the toy's wherever a group's rewards differ by more "
                "than about 1e-3"
            )
    elif estimator == "grpo":
        advantage = "group_std_sample,std_eps=1e-06" if s["algorithm.norm_adv_by_std_in_grpo"] else "none"
    elif estimator == "grpo_passk":
        advantage = (
            "passk,std_eps=1e-06" if s["algorithm.norm_adv_by_std_in_grpo"] else "passk,std_scaled=False"
        )
    elif estimator.startswith("rloo"):
        advantage = "rloo"
    elif estimator == "reinforce_plus_plus":
        if s["algorithm.gamma"] != 1:
            raise not_modelled("algorithm.gamma", s["algorithm.gamma"], [1.0], "discounted per-token returns")
        advantage = "reinforce_pp"
    elif estimator in ("opo", "gpg"):
        advantage = estimator
    else:
        advantage = "token_whiten_sample"
    aggregation = s[ACTOR + "loss_agg_mode"]
    if (mode == "sapo" or (mode == "gspo" and at < (0, 9, 1))) and aggregation != "seq-mean-token-mean":
        notes.append(
            f"policy_loss.loss_mode={mode!r} aggregates seq-mean-token-mean in verl {version}, whatever "
            "loss_agg_mode says"
        )
        aggregation = "seq-mean-token-mean"
    if mode == "geo_mean":
        if aggregation != "seq-mean-token-mean":
            notes.append(
                "policy_loss.loss_mode='geo_mean' averages the responses' losses, whatever loss_agg_mode says"
            )
        aggregation = "seq-mean-token-mean"
    if mode == "geo_mean" and at >= OLDEST_ENGINE:  # dp_actor divides by the accumulation steps
        unmodelled.append(
            "policy_loss.loss_mode='geo_mean' takes the mean over each micro-batch, and the micro-batches' "
            "gradients add up: the gradient is the mini-batch's mean times its micro-batches "
            "(ppo_mini_batch_size x rollout.n / ppo_micro_batch_size_per_gpu), a constant scale the toy "
            "leaves out (Adam nearly ignores it)"
        )
    spec = [f"advantage={advantage}", f"aggregation={AGGREGATION[aggregation]}"]
    epochs = s[ACTOR + "ppo_epochs"]
    beta = 0.0
    if s[ACTOR + "use_kl_loss"]:
        kl_type = s[ACTOR + "kl_loss_type"]
        if kl_type in ("low_var_kl", "k3"):
            beta = s[ACTOR + "kl_loss_coef"]
        else:
            unmodelled.append(f"kl_loss_type={kl_type!r}: toyrl's KL term is k3 (low_var_kl); left out")
    spec += _objective_spec(s, epochs, beta, notes)
    if s[ACTOR + "clip_ratio"] != 0.2 and ACTOR + "clip_ratio" not in _clip_names(s):
        notes.append(
            f"actor.clip_ratio={s[ACTOR + 'clip_ratio']}: verl reads it only where clip_ratio_low or "
            "clip_ratio_high is null, and both are set (0.2 by default): no effect"
        )
    if s["algorithm.use_kl_in_reward"]:
        unmodelled.append("algorithm.use_kl_in_reward=True: a KL penalty in the reward; left out")
    # data.train_batch_size prompts a step, ppo_mini_batch_size prompts an optimiser step (both
    # times rollout.n responses); the mini-batches in the batch's order unless actor.shuffle; the
    # normalisers are the mini-batch's (global batch info since 0.7.1), so micro-batches do not matter
    schedule, notes_of_schedule = schedule_spec(
        s["data.train_batch_size"],
        s[ACTOR + "ppo_mini_batch_size"],
        "epoch" if s[ACTOR + "shuffle"] else "none",
        "data.train_batch_size / actor.ppo_mini_batch_size",
    )
    spec += schedule
    unmodelled += notes_of_schedule
    if not s["trainer.use_v1"] and s["trainer.balance_batch"] and len(schedule) > 0:
        unmodelled.append(
            "trainer.balance_batch=True (the default) makes the legacy trainer reorder the batch by "
            "sequence length before the mini-batches are cut; the toy cuts them in its own order"
        )
    micro, budget = None, 0
    if aggregation == "seq-mean-token-sum-norm":
        micro, budget = _sum_norm(s, version, spec, notes, unmodelled)
    ranks = _ranks(s, len(schedule) > 0 or micro is not None or budget > 0, unmodelled)
    if s["trainer.use_v1"] and not s["trainer.balance_batch"]:
        notes.append(
            f"trainer.balance_batch=False: verl {version}'s V1 trainer does not read it; it deals every "
            "batch to its data-parallel ranks balanced by workload"
        )
    if at < (0, 7, 1):
        spec += _dapo_spec(s, unmodelled, "reward_model.reward_manager", LEGACY_REWARD)
    else:
        spec += _dapo_spec(s, unmodelled)
    spec += _filter_groups_spec(s, version, "reward=soft_overlong" in spec, notes, unmodelled)
    if at < OLDEST_ENGINE:
        spec, micro = _micro_batches(s, version, spec, notes, unmodelled)
    if s[clip_grad] > 0:
        unmodelled.append(grad_clip_note(clip_grad, s[clip_grad]))
    n = s["actor_rollout_ref.rollout.n"]  # the toy takes it when it is given (`toyrl.trainers.check`)
    step = s[ACTOR + "ppo_mini_batch_size"] * n
    return ToyMapping(
        ",".join(spec),
        {"group_size": ("actor_rollout_ref.rollout.n", n)},
        unmodelled,
        notes,
        step_responses=step,
        micro_batch_responses=micro,
        layout=MicroLayout(
            ranks=ranks,
            token_budget=budget,
            prompt_tokens=s["data.max_prompt_length"],
            response_tokens=s["data.max_response_length"],
        ),
    )


def _sequence_parallel(s: dict[str, Any]) -> int:
    """Ulysses' sequence-parallel size: the actor's deprecated setting where it is above 1 (the
    actor config copies it into fsdp_config then), else fsdp_config's (verl/workers/config/actor.py)."""
    deprecated = s[ACTOR + "ulysses_sequence_parallel_size"]
    return int(deprecated if deprecated > 1 else s[ACTOR + "fsdp_config.ulysses_sequence_parallel_size"])


def _ranks(s: dict[str, Any], matters: bool, unmodelled: list[str]) -> int:
    """The data-parallel ranks the V1 trainer deals each batch to, balanced by workload (its
    `_balance_batch`, on every step whatever trainer.balance_batch says): nnodes x n_gpus_per_node
    / ulysses_sequence_parallel_size, where which responses share a mini- or micro-batch matters
    (several mini-batches, or a divisor taken on each micro-batch); else 1."""
    ranks = s["trainer.nnodes"] * s["trainer.n_gpus_per_node"] // _sequence_parallel(s)
    if not (s["trainer.use_v1"] and matters) or ranks <= 1:
        return 1
    if s[ACTOR + "shuffle"]:
        unmodelled.append(
            f"actor.shuffle=True over {ranks} data-parallel ranks: each rank shuffles its own part of the "
            "batch (seed + rank); the toy shuffles the batch as one rank"
        )
        return 1
    return ranks


def _sum_norm(
    s: dict[str, Any], version: str, spec: list[str], notes: list[str], unmodelled: list[str]
) -> tuple[int | None, int]:
    """seq-mean-token-sum-norm's divisor: agg_loss divides each response's token sum by
    loss_scale_factor, or when it is None by the width of the loss mask it is given. The V1 trainer
    (trainer.use_v1, the default) pads each micro-batch to its own longest response in ppo_loss, so
    the divisor is that response's length (the aggregation becomes seq_mean_token_sum_longest on
    each micro-batch); the legacy RayPPOTrainer pads to data.max_response_length, a constant.
    (the micro-batch size in responses, or None; the token budget of use_dynamic_bsz, or 0), which
    `toyrl.trainers.check` scales to the toy's batch and lengths. dp_actor (before 0.8.0) passes
    agg_loss no loss_scale_factor: the padded width, data.max_response_length."""
    factor = s[ACTOR + "loss_scale_factor"]
    if factor is not None:
        unmodelled.append(constant_note(ACTOR + "loss_scale_factor", factor, "the constant divisor"))
        return None, 0
    if not s["trainer.use_v1"]:
        width = s["data.max_response_length"]
        unmodelled.append(
            constant_note(
                ACTOR + "loss_scale_factor",
                None,
                f"the legacy trainer's padded width, data.max_response_length = {width}",
            )
        )
        return None, 0
    spec[1] = "aggregation=seq_mean_token_sum_longest,per_micro_batch=True"
    fix = f"Set {ACTOR}loss_scale_factor (e.g. to data.max_response_length) for Dr. GRPO"
    if s[ACTOR + "use_dynamic_bsz"]:
        budget = s[ACTOR + "ppo_max_token_len_per_gpu"] * _sequence_parallel(s)
        notes.append(
            f"loss_scale_factor is unset: verl {version}'s V1 trainer pads each micro-batch to its own "
            "longest response and divides every response's token sum by that length; with "
            f"use_dynamic_bsz a micro-batch is the fewest sequences balanced by workload within "
            f"ppo_max_token_len_per_gpu={s[ACTOR + 'ppo_max_token_len_per_gpu']} tokens (prompt and "
            "response), so the divisor varies from micro-batch to micro-batch and step to step: not "
            f"Dr. GRPO's constant. {fix}"
        )
        return None, int(budget)
    micro = s[ACTOR + "ppo_micro_batch_size_per_gpu"]
    if micro is None:
        raise InvalidInput(
            f"{ACTOR}ppo_micro_batch_size_per_gpu is unset: verl {version} requires it without "
            "use_dynamic_bsz, and with loss_scale_factor unset it sets each micro-batch's divisor; "
            "an integer >= 1"
        )
    notes.append(
        f"loss_scale_factor is unset: verl {version}'s V1 trainer pads each micro-batch "
        f"(ppo_micro_batch_size_per_gpu={micro} responses) to its own longest response and divides "
        "every response's token sum by that length, so the divisor varies from micro-batch to "
        f"micro-batch and step to step: not Dr. GRPO's constant. {fix}"
    )
    return int(micro), 0


def _micro_batches(
    s: dict[str, Any], version: str, spec: list[str], notes: list[str], unmodelled: list[str]
) -> tuple[list[str], int | None]:
    """dp_actor's update_policy (before 0.8.0): each loss_agg_mode is taken on each micro-batch of
    ppo_micro_batch_size_per_gpu responses and the mini-batch's loss is their mean (loss /
    gradient_accumulation); until 0.7.0 agg_loss's seq-mean-token-sum-norm is the micro-batch's sum of
    token sums over the width, not their mean (token_sum_norm). The spec and the micro-batch's size
    in responses where there are several (`toyrl.trainers.check` cuts the toy's optimiser steps into
    micro-batches of that size: the count at the trainer's scale would not fit the toy's batch)."""
    micro = s[ACTOR + "ppo_micro_batch_size_per_gpu"]
    if micro is None:
        raise InvalidInput(
            f"{ACTOR}ppo_micro_batch_size_per_gpu is required in verl {version} (without use_dynamic_bsz): "
            "an integer >= 1"
        )
    if _at(version) <= (0, 7, 0):
        spec = [
            "aggregation=token_sum_norm" if item == "aggregation=seq_mean_token_sum_norm" else item
            for item in spec
        ]
    responses = s[ACTOR + "ppo_mini_batch_size"] * s["actor_rollout_ref.rollout.n"]
    accumulation = max(1, responses // micro)
    if accumulation > 1:
        spec += ["per_micro_batch=True"]
    if responses % micro:
        unmodelled.append(
            f"ppo_mini_batch_size x rollout.n = {responses} is not a multiple of "
            f"ppo_micro_batch_size_per_gpu={micro}; the toy takes {accumulation} equal micro-batches"
        )
    notes.append(
        f"verl {version} normalises each micro-batch's loss on its own and divides by the "
        f"gradient-accumulation steps ({accumulation} here; on one GPU)"
    )
    return spec, (micro if accumulation > 1 else None)


SETTINGS_DEFAULTS_0_9_1 = {key: setting.default for key, setting in SETTINGS_0_9_1.items()}

# The sections of verl's Hydra configuration (verl/trainer/config/ppo_trainer.yaml; OpenRLHF's
# arguments share data., critic. and reward.), and its names that toyrl does not read, spelt close
# to ones it reads (checked against 0.7.0's and 0.9.1's _generated_ppo_trainer.yaml).
MARKS = (
    "actor_rollout_ref.",
    "algorithm.",
    "trainer.",
    "reward_model.",
    "custom_reward_function.",
    "ray_kwargs.",
    "ray_init.",
    "global_profiler.",
    "transfer_queue.",
    "reward_manager.",
    "distillation.",
    "sandbox_fusion.",
    "skip.",
    "data.",
    "critic.",
    "reward.",
)
OTHER_NAMES = frozenset(
    {
        "actor_rollout_ref.ref.ulysses_sequence_parallel_size",  # the reference model's, and ...
        "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size",  # ... its newer place
        ACTOR + "ppo_micro_batch_size",
        "reward_model.enable",  # the reward model's switch (0.9.1: reward.reward_model.enable)
        "reward_manager.module.name",  # 0.7.0's custom manager (0.9.1: reward.reward_manager.module.name)
        "actor_rollout_ref.rollout.val_kwargs.n",
        "data.gen_batch_size",
        "data.val_batch_size",
        "reward.reward_manager.module.name",
        "reward_manager.name",
    }
)

# The legacy reward_model section, which 0.7.0 reads (LEGACY_REWARD) and 0.9.1 accepts and never
# reads: only the fully async trainer moves it to reward. (migrate_legacy_reward_impl,
# verl/experimental/reward_loop/reward_loop.py); verl/trainer/main_ppo.py does not call it.
LEGACY = (
    "its main_ppo never reads the legacy reward_model section; only its fully async trainer moves it to "
    "reward. (verl/experimental/reward_loop/reward_loop.py, migrate_legacy_reward_impl)"
)
IGNORED_0_9_1 = {
    LEGACY_REWARD: f"{LEGACY}: DAPO's overlong penalty is off; reward.reward_kwargs.* sets it",
    "reward_model.reward_manager": f"{LEGACY}: the reward manager is reward.reward_manager.name's, 'naive' "
    "by default, with no DAPO score or overlong penalty",
}
# algorithm.filter_groups' cap, which verl 0.9.x's V1 trainer logs it ignores (trainer_base.py,
# _resolve_filter_groups_metric) and its ReplayBuffer never reads; the legacy trainer reads no
# filter_groups setting
FILTER_CAP = {
    "algorithm.filter_groups.max_num_gen_batches": "the V1 trainer's replay buffer never reads it, and verl "
    "logs so; with filter_groups on it generates until the batch is full, however many batches that takes, "
    "never stopping with an error nor training on groups all right or all wrong; the legacy trainer reads "
    "no filter_groups setting",
}

# What dp_actor (before 0.8.0) never reads
DP_ACTOR = "dp_actor's update_policy (the default worker before 0.8.0, trainer.use_legacy_worker_impl=auto)"
IGNORED_BY_DP_ACTOR = {
    ACTOR + "shuffle": f"{DP_ACTOR} never reads it: the mini-batches are the batch's, in its order",
    ACTOR + "optim.clip_grad": f"{DP_ACTOR} clips the gradient's norm at actor.grad_clip",
}
IGNORED_0_7 = IGNORED_BY_DP_ACTOR | {
    ACTOR + "loss_scale_factor": f"{DP_ACTOR} never passes it to agg_loss (only the engine worker's ppo_loss "
    "does): seq-mean-token-sum-norm divides by the padded width, data.max_response_length",
}
# 0.7.1 and 0.8.0's main_ppo moves the legacy reward section onto reward. (migrate_legacy_reward_impl)
MIGRATED = {
    "reward_model.reward_manager": (
        "reward.reward_manager.name",
        "moved there by main_ppo (migrate_legacy_reward_impl)",
    ),
    **{
        LEGACY_REWARD + key: (REWARD + key, "moved there by main_ppo (migrate_legacy_reward_impl)")
        for key in (
            "overlong_buffer_cfg.enable",
            "overlong_buffer_cfg.len",
            "overlong_buffer_cfg.penalty_factor",
            "max_resp_len",
        )
    },
}
DR_GRPO: dict[str, Levers] = {
    "algorithm.adv_estimator": ("grpo",),
    "algorithm.norm_adv_by_std_in_grpo": (False,),
    ACTOR + "loss_agg_mode": ("seq-mean-token-sum-norm",),
    ACTOR + "loss_scale_factor": lambda s: (s["data.max_response_length"],),
    ACTOR + "policy_loss.loss_mode": ("vanilla",),
    "reward.reward_manager.name": ("naive",),
    "reward_model.reward_manager": ("naive",),
    "algorithm.filter_groups.enable": (False,),
}


def _release(version: str) -> Release:
    covers, changed = RELEASES[version]
    at = _at(version)
    settings = _settings(version)
    if at == (0, 9, 0):  # no default metric yet: verl asks for one when filter_groups is on
        settings["algorithm.filter_groups.metric"] = Setting(None, kind=str, optional=True)
    worker = (
        "verl/workers/utils/losses.py (ppo_loss)"
        if at >= OLDEST_ENGINE
        else "verl/workers/actor/dp_actor.py (update_policy)"
    )
    aliases = MIGRATED if OLDEST_ENGINE >= at >= (0, 7, 1) else {}
    if at == (0, 7, 0):  # the reward_manager section's name, ${oc.select:reward_model.reward_manager,naive}
        aliases = {
            "reward_manager.name": (
                "reward_model.reward_manager",
                "verl 0.7.0's reward manager, which defaults to reward_model.reward_manager",
            )
        }
    engine = {ACTOR + "grad_clip": "the engine worker clips the gradient's norm at actor.optim.clip_grad"}
    if at >= OLDEST_ENGINE:
        ignores = (IGNORED_0_9_1 | FILTER_CAP if at >= OLDEST_V1 else {}) | engine
    else:
        ignores = IGNORED_0_7 if at >= (0, 7) else IGNORED_BY_DP_ACTOR
    return Release(
        settings,
        f"verl/trainer/config/ppo_trainer.yaml, verl/trainer/ppo/core_algos.py (advantages, agg_loss, policy "
        f"losses), {worker} of {covers}: {changed}",
        functools.partial(_mapping, version=version),
        aliases=aliases,
        dr_grpo={key: levers for key, levers in DR_GRPO.items() if key in settings},
        ignores={
            key: why for key, why in ignores.items() if key.endswith(".") or _has(version, key, SINCE, {})
        },
    )


TRAINER = Trainer(
    name="verl",
    distribution="verl",
    releases={version: _release(version) for version in RELEASES},
    marks=MARKS,
    other_names=OTHER_NAMES,
)
