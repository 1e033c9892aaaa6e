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
  as a fraction of the longest response), on the math score 1 / -1; 0.7.0 reads them as
  `reward_model.reward_manager` and `reward_model.reward_kwargs.*` (verl/trainer/main_ppo.py),
  which 0.9.1 accepts and never reads (`IGNORED_0_9_1`: only its fully async trainer migrates
  them, migrate_legacy_reward_impl), so DAPO scripts in the old form run 0.9.1 without the penalty;
  `algorithm.filter_groups` (enable, max_num_gen_batches): dynamic sampling (`filter_groups`);
- `actor_rollout_ref.rollout.n`: the group size G.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from toyrl.config import InvalidInput
from toyrl.stages.objective import PPOClip
from toyrl.stages.registry import declarations
from toyrl.trainers import (
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
    "algorithm.filter_groups.max_num_gen_batches": Setting(0, kind=int, low=0, high=100_000),
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

# 0.7.0: the legacy actor (dp_actor.update_policy) normalises each micro-batch on its own and
# divides by the gradient-accumulation steps; it never reads actor.shuffle; no filter_groups; the
# reward manager and its keyword arguments in the reward_model section (verl/trainer/main_ppo.py
# passes reward_model.reward_kwargs to load_reward_manager, whose manager is reward_manager.name,
# ${oc.select:reward_model.reward_manager,naive}).
LEGACY_REWARD = "reward_model.reward_kwargs."
SETTINGS_0_7_0 = {
    key: setting
    for key, setting in SETTINGS_0_9_1.items()
    if not key.startswith(("reward.", "algorithm.filter_groups."))
    and key
    not in (
        ACTOR + "shuffle",
        "trainer.use_v1",
        "data.max_response_length",
        "data.max_prompt_length",
        "trainer.nnodes",
        "trainer.n_gpus_per_node",
        ACTOR + "ppo_max_token_len_per_gpu",
        ACTOR + "ulysses_sequence_parallel_size",
        ACTOR + "fsdp_config.ulysses_sequence_parallel_size",
    )
} | {
    ACTOR + "ppo_micro_batch_size_per_gpu": Setting(None, kind=int, low=1, optional=True),
    ACTOR + "use_dynamic_bsz": Setting(False, kind=bool),
    "reward_model.reward_manager": Setting("naive", MANAGERS),
    LEGACY_REWARD + "overlong_buffer_cfg.enable": Setting(False, kind=bool),
    LEGACY_REWARD + "overlong_buffer_cfg.len": Setting(0, kind=int, low=0),
    LEGACY_REWARD + "overlong_buffer_cfg.penalty_factor": Setting(1.0, kind=float, low=0.0),
    LEGACY_REWARD + "max_resp_len": Setting(None, kind=int, low=1, optional=True),
}
REWARD = "reward.reward_kwargs."


def _dapo_spec(
    s: dict[str, Any],
    unmodelled: list[str],
    manager: str = "reward.reward_manager.name",
    kwargs: str = REWARD,
) -> list[str]:
    """The DAPO reward manager (the setting `manager` names it; `kwargs`, the section of its keyword
    arguments: 0.9.1's reward.reward_kwargs., 0.7.0's reward_model.reward_kwargs.): its math score,
    1 / -1, and the overlong buffer; and filter_groups (0.9.1's)."""
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
                f"(={longest}), as verl's DAPO reward manager requires"
            )
        buffer = length / longest if factor > 0 else 0.2
        spec += ["reward=soft_overlong", f"buffer={buffer:.6g}", f"penalty_factor={factor}"]
        unmodelled.append(
            f"{manager}='dapo': its score is the data source's (DAPO's math score: 1 / -1, as the toy takes "
            "it)"
        )
    elif s[kwargs + "overlong_buffer_cfg.enable"]:
        unmodelled.append("overlong_buffer_cfg: only the 'dapo' reward manager reads it; left out")
    if s.get("algorithm.filter_groups.enable"):  # not a setting of 0.7.0
        rounds = s["algorithm.filter_groups.max_num_gen_batches"] or 100_000
        spec += ["sampler=filter_groups", f"max_rounds={rounds}"]
        metric = s["algorithm.filter_groups.metric"]
        if metric not in ("acc", "reward") or (metric == "reward" and spec[0] == "reward=soft_overlong"):
            unmodelled.append(
                f"algorithm.filter_groups.metric={metric!r}: the toy filters on correctness (acc), which "
                "equals the reward only without the overlong punishment"
            )
    return spec


TOY_CLIP = declarations(PPOClip)["epsilon_high"]["high"]  # the toy's clip ranges are below this


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


def _mapping(s: dict[str, Any]) -> ToyMapping:
    estimator = s["algorithm.adv_estimator"]
    if estimator not in MODELLED_ESTIMATORS:
        why = ESTIMATOR_REASONS.get(estimator, "")
        raise not_modelled("algorithm.adv_estimator", estimator, MODELLED_ESTIMATORS, why)
    mode = s[ACTOR + "policy_loss.loss_mode"]
    if mode not in MODELLED_LOSS_MODES:
        raise not_modelled(ACTOR + "policy_loss.loss_mode", mode, MODELLED_LOSS_MODES)
    notes, unmodelled = [], []
    if estimator == "grpo_vectorized":
        advantage = "group_std_sample,std_eps=1e-06"  # its code never reads the flag
        notes.append(
            "grpo_vectorized divides by the group std whatever algorithm.norm_adv_by_std_in_grpo says "
            "(compute_advantage does not pass it the flag), in float32"
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
    if mode == "sapo" and aggregation != "seq-mean-token-mean":
        notes.append(
            "policy_loss.loss_mode='sapo' aggregates seq-mean-token-mean, whatever loss_agg_mode says"
        )
        aggregation = "seq-mean-token-mean"
    if mode == "geo_mean":
        if aggregation != "seq-mean-token-mean":
            notes.append(
                "policy_loss.loss_mode='geo_mean' averages the responses' losses, whatever loss_agg_mode says"
            )
        aggregation = "seq-mean-token-mean"
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
        micro, budget = _sum_norm(s, spec, notes, unmodelled)
    ranks = _ranks(s, len(schedule) > 0 or micro is not None or budget > 0, unmodelled)
    if s["trainer.use_v1"] and not s["trainer.balance_batch"]:
        notes.append(
            f"trainer.balance_batch=False: verl {VERSION}'s V1 trainer does not read it; it deals every "
            "batch to its data-parallel ranks balanced by workload"
        )
    spec += _dapo_spec(s, unmodelled)
    if s[ACTOR + "optim.clip_grad"] > 0:
        unmodelled.append(grad_clip_note(ACTOR + "optim.clip_grad", s[ACTOR + "optim.clip_grad"]))
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
    s: dict[str, Any], spec: list[str], notes: list[str], unmodelled: list[str]
) -> tuple[int | None, int]:
    """seq-mean-token-sum-norm's divisor: agg_loss divides each response's token sum by
    loss_scale_factor, or when it is None by the width of the loss mask it is given. The V1 trainer
    (trainer.use_v1, the default) pads each micro-batch to its own longest response in ppo_loss, so
    the divisor is that response's length (the aggregation becomes seq_mean_token_sum_longest on
    each micro-batch); the legacy RayPPOTrainer pads to data.max_response_length, a constant.
    (the micro-batch size in responses, or None; the token budget of use_dynamic_bsz, or 0), which
    `toyrl.trainers.check` scales to the toy's batch and lengths."""
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
            f"loss_scale_factor is unset: verl {VERSION}'s V1 trainer pads each micro-batch to its own "
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
            f"{ACTOR}ppo_micro_batch_size_per_gpu is unset: verl 0.9.1 requires it without "
            "use_dynamic_bsz, and with loss_scale_factor unset it sets each micro-batch's divisor; "
            "an integer >= 1"
        )
    notes.append(
        f"loss_scale_factor is unset: verl {VERSION}'s V1 trainer pads each micro-batch "
        f"(ppo_micro_batch_size_per_gpu={micro} responses) to its own longest response and divides "
        "every response's token sum by that length, so the divisor varies from micro-batch to "
        f"micro-batch and step to step: not Dr. GRPO's constant. {fix}"
    )
    return int(micro), 0


def _mapping_0_7_0(s: dict[str, Any]) -> ToyMapping:
    """0.7.0's legacy actor: as 0.9.1, but each loss_agg_mode is taken on each micro-batch of
    ppo_micro_batch_size_per_gpu responses and the mini-batch's loss is their mean (loss /
    gradient_accumulation), and the mini-batches are always in the batch's order."""
    if s[ACTOR + "use_dynamic_bsz"]:
        raise not_modelled(ACTOR + "use_dynamic_bsz", True, [False], "micro-batches of unequal sizes")
    micro = s[ACTOR + "ppo_micro_batch_size_per_gpu"]
    if micro is None:
        raise InvalidInput(
            f"{ACTOR}ppo_micro_batch_size_per_gpu is required in verl 0.7.0 (without use_dynamic_bsz): "
            "an integer >= 1"
        )
    responses = s[ACTOR + "ppo_mini_batch_size"] * s["actor_rollout_ref.rollout.n"]
    newer = {
        "trainer.use_v1": False,  # the legacy trainer: a padded width, the response length cap
        ACTOR + "shuffle": False,
        "reward.reward_manager.name": "naive",
        "reward.reward_kwargs.overlong_buffer_cfg.enable": False,
        "algorithm.filter_groups.enable": False,
    }
    mapped = _mapping({**SETTINGS_DEFAULTS_0_9_1, **s, **newer})
    spec = mapped.spec.replace("aggregation=seq_mean_token_sum_norm", "aggregation=token_sum_norm")
    reward = _dapo_spec(s, mapped.unmodelled, "reward_model.reward_manager", LEGACY_REWARD)
    spec += "".join(f",{item}" for item in reward)
    accumulation = max(1, responses // micro)
    if accumulation > 1:
        spec += f",micro_batches={accumulation},per_micro_batch=True"
    if responses % micro:
        mapped.unmodelled.append(
            f"ppo_mini_batch_size x rollout.n = {responses} is not a multiple of "
            f"ppo_micro_batch_size_per_gpu={micro}; the toy takes {accumulation} equal micro-batches"
        )
    mapped.notes.append(
        "verl 0.7.0 normalises each micro-batch's loss on its own and divides by the gradient-accumulation "
        f"steps ({accumulation} here; on one GPU)"
    )
    return dataclasses.replace(mapped, spec=spec)


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

TRAINER = Trainer(
    name="verl",
    distribution="verl",
    releases={
        "0.9.1": Release(
            SETTINGS_0_9_1,
            "verl/trainer/config/ppo_trainer.yaml, verl/trainer/ppo/core_algos.py (advantages, agg_loss, "
            "the vanilla policy loss)",
            _mapping,
            dr_grpo={
                "algorithm.adv_estimator": ("grpo",),
                "algorithm.norm_adv_by_std_in_grpo": (False,),
                ACTOR + "loss_agg_mode": ("seq-mean-token-sum-norm",),
                ACTOR + "loss_scale_factor": lambda s: (s["data.max_response_length"],),
                ACTOR + "policy_loss.loss_mode": ("vanilla",),
                "reward.reward_manager.name": ("naive",),
                "algorithm.filter_groups.enable": (False,),
            },
            ignores=IGNORED_0_9_1,
        ),
        "0.7.0": Release(
            SETTINGS_0_7_0,
            "verl/trainer/config/ppo_trainer.yaml, verl/workers/actor/dp_actor.py (update_policy), "
            "verl/trainer/ppo/core_algos.py",
            _mapping_0_7_0,
            aliases={
                "reward_manager.name": (
                    "reward_model.reward_manager",
                    "verl 0.7.0's reward manager, which defaults to reward_model.reward_manager",
                )
            },
        ),
    },
    marks=MARKS,
    other_names=OTHER_NAMES,
)
