"""OpenRLHF's PPO trainer settings on the toy (openrlhf 0.11.2: openrlhf/cli/train_ppo_ray.py's
arguments; openrlhf/trainer/ppo_utils/experience_maker.py's advantage estimators;
openrlhf/models/loss.py and openrlhf/utils/loss_utils.py, the loss and its token normalisation).
Settings are the argument names without their dashes, e.g. `algo.advantage.estimator`.

What the mapping follows:
- `algo.advantage.estimator`: "group_norm" (r - group mean, divided by the group's sample std +
  1e-9), "dr_grpo" (r - group mean), "rloo" (leave-one-out), "reinforce_baseline" (group mean, then
  whitened over the rollout's tokens with the population variance, clamped at 1e-8:
  `token_whiten`, computed in float32); the default "gae" needs a value model;
- `actor.loss_agg_mode`: "token-mean" (the default: the optimiser step's tokens, since 0.10.4),
  "seq-mean-token-mean";
- `actor.eps_clip`, `train.max_epochs`; the KL: by default a k1 penalty in the reward
  (`algo.kl.init_coef` 0.01, `algo.kl.use_loss` false), which toyrl does not model; k3 in the loss
  (`use_loss` with estimator k3) is toyrl's KL term;
- `rollout.n_samples_per_prompt`: the group size G.
"""

from __future__ import annotations

import math
from typing import Any

from toyrl.trainers import Release, Setting, ToyMapping, Trainer, not_modelled, ppo_spec

ADVANTAGE = {
    "group_norm": "advantage=group_std_sample,std_eps=1e-09",
    "dr_grpo": "advantage=none",
    "rloo": "advantage=rloo",
    "reinforce_baseline": "advantage=token_whiten",
}
AGGREGATION = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean_token_mean"}

SETTINGS_0_11_2 = {
    "algo.advantage.estimator": Setting(
        "gae", ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo", "flash_reinforce")
    ),
    "algo.advantage.no_std_norm": Setting(False, kind=bool),
    "actor.loss_agg_mode": Setting("token-mean", tuple(AGGREGATION)),
    "actor.policy_loss_type": Setting("ppo", ("ppo", "gspo")),
    "actor.eps_clip": Setting(0.2, kind=float, low=0.0, high=10.0),
    "actor.dual_clip": Setting(None, kind=float, low=1.0, optional=True),
    "actor.entropy_coef": Setting(None, kind=float, optional=True),
    "train.max_epochs": Setting(1, kind=int, low=1, high=64),
    "train.batch_size": Setting(128, kind=int, low=1),
    "rollout.batch_size": Setting(1024, kind=int, low=1),
    "rollout.n_samples_per_prompt": Setting(1, kind=int, low=1, high=10_000),
    "algo.kl.init_coef": Setting(0.01, kind=float, low=0.0),
    "algo.kl.use_loss": Setting(False, kind=bool),
    "algo.kl.estimator": Setting("k1", ("k1", "k2", "k3")),
    "reward.overlong_buffer_len": Setting(None, kind=float, low=0.0, optional=True),
    "algo.dynamic_filtering_enable": Setting(False, kind=bool),
}


def _mapping(s: dict[str, Any]) -> ToyMapping:
    estimator = s["algo.advantage.estimator"]
    if estimator not in ADVANTAGE:
        why = "PPO's GAE needs a value model" if estimator == "gae" else ""
        raise not_modelled("algo.advantage.estimator", estimator, ADVANTAGE, why)
    if s["actor.policy_loss_type"] != "ppo":
        raise not_modelled("actor.policy_loss_type", s["actor.policy_loss_type"], ["ppo"])
    if estimator == "reinforce_baseline" and s["algo.advantage.no_std_norm"]:
        why = "token-weighted centring without the std"
        raise not_modelled("algo.advantage.no_std_norm", True, [False], why)
    spec = [ADVANTAGE[estimator], f"aggregation={AGGREGATION[s['actor.loss_agg_mode']]}"]
    notes, unmodelled = [], []
    if estimator == "reinforce_baseline":
        notes.append("reinforce_baseline whitens in float32: it equals token_whiten to float32 rounding")
    coef = s["algo.kl.init_coef"]
    in_loss = coef > 0 and s["algo.kl.use_loss"] and s["algo.kl.estimator"] == "k3"
    spec += ppo_spec(s["actor.eps_clip"], epochs=s["train.max_epochs"], beta=coef if in_loss else 0.0)
    if coef > 0 and not in_loss:
        place = "in the loss" if s["algo.kl.use_loss"] else "in the reward (the default)"
        unmodelled.append(
            f"algo.kl.init_coef={coef} with estimator {s['algo.kl.estimator']} {place}: toyrl's KL term is "
            "k3 in the loss; left out (zero while the policy is the reference)"
        )
    n = s["rollout.n_samples_per_prompt"]
    updates = s["rollout.batch_size"] * n // s["train.batch_size"]
    if updates > 1:
        unmodelled.append(
            f"rollout.batch_size={s['rollout.batch_size']} x n_samples_per_prompt={n} / train.batch_size="
            f"{s['train.batch_size']}: {updates} optimiser steps per rollout; the toy takes one per epoch"
        )
    if estimator == "group_norm" and n > 1 and (1 - 1 / n) * math.sqrt(n) > 10:
        unmodelled.append(
            "reward.clip_range (-10, 10) cuts group_norm advantages beyond 10, which groups of "
            f"{n} can reach; the toy does not clip"
        )
    for key, what in (
        ("actor.dual_clip", "the dual clip (acts only where ratios moved from 1)"),
        ("actor.entropy_coef", "an entropy bonus"),
        ("reward.overlong_buffer_len", "DAPO's soft overlong punishment"),
    ):
        if s[key] is not None:
            unmodelled.append(f"{key}={s[key]}: {what}; left out")
    if s["algo.dynamic_filtering_enable"]:
        unmodelled.append("algo.dynamic_filtering_enable=True: dynamic sampling; left out")
    return ToyMapping(",".join(spec), {"group_size": ("rollout.n_samples_per_prompt", n)}, unmodelled, notes)


TRAINER = Trainer(
    name="OpenRLHF",
    distribution="openrlhf",
    releases={
        "0.11.2": Release(
            SETTINGS_0_11_2,
            "openrlhf/cli/train_ppo_ray.py, openrlhf/trainer/ppo_utils/experience_maker.py, "
            "openrlhf/models/loss.py",
            _mapping,
        )
    },
)
