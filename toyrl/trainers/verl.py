"""verl's PPO trainer settings on the toy (verl 0.9.1: verl/trainer/config/ppo_trainer.yaml's
defaults; verl/trainer/ppo/core_algos.py: the advantage estimators, `agg_loss`, the "vanilla"
policy loss). Settings are the Hydra paths, e.g. `actor_rollout_ref.actor.loss_agg_mode`.

What the mapping follows:
- `algorithm.adv_estimator`: "grpo" (r - group mean, divided by the group's sample std + 1e-6
  unless `algorithm.norm_adv_by_std_in_grpo` is false), "rloo" (leave-one-out), and
  "reinforce_plus_plus_baseline" (group mean, then whitened over the batch's tokens with a
  Bessel-corrected variance + 1e-8: `token_whiten_sample`); the default "gae" needs a value model;
- `actor_rollout_ref.actor.loss_agg_mode`: "token-mean" (the batch's tokens), "seq-mean-token-mean",
  "seq-mean-token-sum" (a response's token sum, averaged over the global batch),
  "seq-mean-token-sum-norm" (the same, divided by `loss_scale_factor`, default the padded length:
  seq_mean_token_sum_norm), "token-sum";
- `clip_ratio_low`/`clip_ratio_high` (each `clip_ratio` when unset), `ppo_epochs`; the KL loss
  (`use_kl_loss`, `kl_loss_coef`, `kl_loss_type` low_var_kl = k3);
- `actor_rollout_ref.rollout.n`: the group size G.
"""

from __future__ import annotations

from typing import Any

from toyrl.trainers import Release, Setting, ToyMapping, Trainer, constant_note, not_modelled, ppo_spec

ACTOR = "actor_rollout_ref.actor."
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
MODELLED_ESTIMATORS = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_plus_plus_baseline")
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

SETTINGS_0_9_1 = {
    "algorithm.adv_estimator": Setting("gae", ESTIMATORS),
    "algorithm.norm_adv_by_std_in_grpo": Setting(True, kind=bool),
    "algorithm.use_kl_in_reward": Setting(False, kind=bool),
    ACTOR + "loss_agg_mode": Setting("token-mean", tuple(AGGREGATION)),
    ACTOR + "loss_scale_factor": Setting(None, kind=float, low=0.0, optional=True),
    ACTOR + "policy_loss.loss_mode": Setting("vanilla", LOSS_MODES),
    ACTOR + "clip_ratio": Setting(0.2, kind=float, low=0.0, high=10.0),
    ACTOR + "clip_ratio_low": Setting(0.2, kind=float, low=0.0, high=10.0, optional=True),
    ACTOR + "clip_ratio_high": Setting(0.2, kind=float, low=0.0, high=10.0, optional=True),
    ACTOR + "clip_ratio_c": Setting(3.0, kind=float, low=1.0),
    ACTOR + "ppo_epochs": Setting(1, kind=int, low=1, high=64),
    ACTOR + "ppo_mini_batch_size": Setting(256, kind=int, low=1),
    ACTOR + "use_kl_loss": Setting(False, kind=bool),
    ACTOR + "kl_loss_coef": Setting(0.001, kind=float, low=0.0),
    ACTOR + "kl_loss_type": Setting("low_var_kl", KL_TYPES),
    ACTOR + "shuffle": Setting(False, kind=bool),
    "actor_rollout_ref.rollout.n": Setting(1, kind=int, low=1, high=10_000),
    "data.train_batch_size": Setting(1024, kind=int, low=1),
}


def _mapping(s: dict[str, Any]) -> ToyMapping:
    estimator = s["algorithm.adv_estimator"]
    if estimator not in MODELLED_ESTIMATORS:
        why = "PPO's GAE needs a value model" if estimator == "gae" else ""
        raise not_modelled("algorithm.adv_estimator", estimator, MODELLED_ESTIMATORS, why)
    mode = s[ACTOR + "policy_loss.loss_mode"]
    if mode != "vanilla":
        raise not_modelled(ACTOR + "policy_loss.loss_mode", mode, ["vanilla"])
    notes = []
    if estimator == "grpo_vectorized":
        advantage = "group_std_sample,std_eps=1e-06"  # its code never reads the flag
        notes.append(
            "grpo_vectorized divides by the group std whatever algorithm.norm_adv_by_std_in_grpo says "
            "(compute_advantage does not pass it the flag), in float32"
        )
    elif estimator == "grpo":
        advantage = "group_std_sample,std_eps=1e-06" if s["algorithm.norm_adv_by_std_in_grpo"] else "none"
    elif estimator.startswith("rloo"):
        advantage = "rloo"
    else:
        advantage = "token_whiten_sample"
    spec = [f"advantage={advantage}", f"aggregation={AGGREGATION[s[ACTOR + 'loss_agg_mode']]}"]
    low = s[ACTOR + "clip_ratio_low"] if s[ACTOR + "clip_ratio_low"] is not None else s[ACTOR + "clip_ratio"]
    high = (
        s[ACTOR + "clip_ratio_high"] if s[ACTOR + "clip_ratio_high"] is not None else s[ACTOR + "clip_ratio"]
    )
    epochs = s[ACTOR + "ppo_epochs"]
    unmodelled = []
    beta = 0.0
    if s[ACTOR + "use_kl_loss"]:
        kl_type = s[ACTOR + "kl_loss_type"]
        if kl_type in ("low_var_kl", "k3"):
            beta = s[ACTOR + "kl_loss_coef"]
        else:
            unmodelled.append(f"kl_loss_type={kl_type!r}: toyrl's KL term is k3 (low_var_kl); left out")
    spec += ppo_spec(low, high, epochs, beta)
    if s["algorithm.use_kl_in_reward"]:
        unmodelled.append("algorithm.use_kl_in_reward=True: a KL penalty in the reward; left out")
    updates = max(1, s["data.train_batch_size"] // s[ACTOR + "ppo_mini_batch_size"])
    if updates > 1:
        unmodelled.append(
            f"data.train_batch_size={s['data.train_batch_size']} / ppo_mini_batch_size="
            f"{s[ACTOR + 'ppo_mini_batch_size']}: {updates} optimiser steps per generated batch "
            "(each epoch); the toy takes one per epoch, over the whole batch"
        )
    if updates > 1 or epochs > 1:
        unmodelled.append(
            f"clip_ratio_c={s[ACTOR + 'clip_ratio_c']}: the dual clip (acts only where ratios moved from 1)"
        )
    if s[ACTOR + "loss_agg_mode"] == "seq-mean-token-sum-norm":
        factor = s[ACTOR + "loss_scale_factor"]
        constant = "the padded response length" if factor is None else factor
        unmodelled.append(constant_note("loss_scale_factor", factor, f"the constant ({constant})"))
    n = s["actor_rollout_ref.rollout.n"]  # the toy takes it when it is given (`toyrl.trainers.check`)
    return ToyMapping(",".join(spec), {"group_size": ("actor_rollout_ref.rollout.n", n)}, unmodelled, notes)


TRAINER = Trainer(
    name="verl",
    distribution="verl",
    releases={
        "0.9.1": Release(
            SETTINGS_0_9_1,
            "verl/trainer/config/ppo_trainer.yaml, verl/trainer/ppo/core_algos.py (advantages, agg_loss, "
            "the vanilla policy loss)",
            _mapping,
        )
    },
)
