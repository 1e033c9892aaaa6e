"""oat's PPO learner settings on the toy (oat-llm 0.2.4: oat/args.py and oat/algorithms/ppo.py,
`PPOArgs` and `PPOLearner.learning_step`).

What the mapping follows:
- `critic_type`: "drgrpo" (the default: r - group mean; each response's token sum divided by
  `generate_max_length`, averaged over responses: seq_mean_token_sum_norm) and "grpo" (divided by
  the group's sample std + 1e-8; each response's token mean: seq_mean_token_mean); "ppo" needs a
  value model;
- `beta` (default 0.1): k3 to the reference policy in the loss, aggregated like the policy loss;
- `cliprange`, `num_ppo_epochs`; `ignore_no_eos`: truncated responses out of the loss;
- `rollout_batch_size` x `num_samples` / `train_batch_size`: optimiser steps per rollout, each on
  a mini-batch of a random permutation drawn each epoch;
- `num_samples`: the group size G.
"""

from __future__ import annotations

from typing import Any

from toyrl.trainers import (
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

SETTINGS_0_2_4 = {
    "critic_type": Setting("drgrpo", ("ppo", "grpo", "drgrpo")),
    "beta": Setting(0.1, kind=float, low=0.0),
    "cliprange": Setting(0.2, kind=float, low=0.0, high=10.0),
    "num_ppo_epochs": Setting(1, kind=int, low=1, high=64),
    "ignore_no_eos": Setting(False, kind=bool),
    "num_samples": Setting(2, kind=int, low=1, high=10_000),
    "generate_max_length": Setting(512, kind=int, low=1),
    "train_batch_size": Setting(128, kind=int, low=1),
    "rollout_batch_size": Setting(128, kind=int, low=1),
    "whiten_adv": Setting(False, kind=bool),
    "kl_penalty_coef": Setting(0.0, kind=float, low=0.0),
    "non_stop_penalty": Setting(0.0, kind=float),
    "reward_scale": Setting(1.0, kind=float),
    "max_norm": Setting(1.0, kind=float, low=0.0),
}


def _mapping(s: dict[str, Any]) -> ToyMapping:
    critic = s["critic_type"]
    if critic == "ppo":
        raise not_modelled("critic_type", critic, ["grpo", "drgrpo"], "a value model")
    if critic == "grpo":
        spec = ["advantage=group_std_sample,std_eps=1e-08", "aggregation=seq_mean_token_mean"]
    else:
        spec = ["advantage=none", "aggregation=seq_mean_token_sum_norm"]
    spec += ppo_spec(s["cliprange"], None, s["num_ppo_epochs"], s["beta"], s["ignore_no_eos"])
    notes = []
    if s["beta"] > 0:
        notes.append(
            f"beta={s['beta']}: a k3 KL term in the loss (oat's default beta is 0.1; the presets "
            "oat_grpo and oat_drgrpo are beta 0)"
        )
    unmodelled = []
    if critic == "drgrpo":
        unmodelled.append(constant_note("generate_max_length", s["generate_max_length"], "drgrpo's constant"))
    schedule, notes_of_schedule = schedule_spec(
        s["rollout_batch_size"] * s["num_samples"],
        s["train_batch_size"],
        "epoch",
        "rollout_batch_size x num_samples / train_batch_size",
    )
    spec += schedule
    unmodelled += notes_of_schedule
    for key, default, what in (
        ("whiten_adv", False, "whitens the advantages over the batch"),
        ("kl_penalty_coef", 0.0, "a KL penalty in the reward"),
        ("non_stop_penalty", 0.0, "a penalty on responses without EOS"),
        ("reward_scale", 1.0, "scales the rewards"),
    ):
        if s[key] != default:
            unmodelled.append(f"{key}={s[key]}: {what}; left out")
    if s["max_norm"] > 0:
        unmodelled.append(grad_clip_note("max_norm", s["max_norm"]))
    group = {"group_size": ("num_samples", s["num_samples"])}
    return ToyMapping(",".join(spec), group, unmodelled, notes, step_responses=s["train_batch_size"])


# Names of oat's arguments (oat/args.py, oat/algorithms/ppo.py) that only oat has, and those spelt
# close to the ones toyrl reads.
MARKS = (
    "num_samples",
    "cliprange",
    "collocate",
    "vllm_gpu_ratio",
    "num_prompt_epoch",
    "oracle",
    "max_train",
    "eval_data",
    "prompt_max_length",
    "use_wb",
    "wb_project",
    "gpus",
)
OTHER_NAMES = frozenset({"eval_generate_max_length", "num_prompt_epoch"})

TRAINER = Trainer(
    name="oat",
    distribution="oat-llm",
    releases={
        "0.2.4": Release(
            SETTINGS_0_2_4,
            "oat/args.py, oat/algorithms/ppo.py (PPOArgs, PPOLearner.learning_step)",
            _mapping,
            dr_grpo={"critic_type": ("drgrpo",), "ignore_no_eos": (False,), "whiten_adv": (False,)},
        )
    },
    marks=MARKS,
    other_names=OTHER_NAMES,
)
