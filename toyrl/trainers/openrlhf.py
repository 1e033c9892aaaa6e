"""OpenRLHF's PPO trainer settings on the toy (openrlhf 0.11.2: openrlhf/cli/train_ppo_ray.py's
arguments; openrlhf/trainer/ppo_utils/experience_maker.py's advantage estimators;
openrlhf/models/loss.py and openrlhf/utils/loss_utils.py, the loss and its token normalisation).
Settings are the argument names without their dashes, e.g. `algo.advantage.estimator`; the names
before 0.10.2 (`advantage_estimator`, ...: `RENAMED_0_10_2`) are read as the same settings, and
the newer names as 0.6.4's.

What the mapping follows:
- `algo.advantage.estimator`: "group_norm" (r - group mean, divided by the group's sample std +
  1e-9), "dr_grpo" (r - group mean), "rloo" (leave-one-out), "reinforce_baseline" (group mean, then
  whitened over the rollout's tokens with the population variance, clamped at 1e-8:
  `token_whiten`, computed in float32); the default "gae" needs a value model; "reinforce"
  (REINFORCE++: the rewards themselves whitened with the population variance) is no toyrl stage
  (reinforce_pp is verl's, with the Bessel-corrected variance), "flash_reinforce" neither;
- `actor.loss_agg_mode`: "token-mean" (the default: the optimiser step's tokens, since 0.10.4),
  "seq-mean-token-mean";
- `actor.policy_loss_type`: "ppo" (the token ratio), "gspo" (the sequence's ratio, exp of its
  tokens' mean log-ratio, in PPO's clip at eps_clip; each sample's token mean, whatever
  loss_agg_mode says: objective=gspo with seq_mean_token_mean);
- `actor.eps_clip_low_high` LOW HIGH, PolicyLoss's clip range (trainer/ray/ppo_actor.py), which
  train_ppo_ray.py sets to (`actor.eps_clip`, eps_clip) where it is not given: any size the parser
  takes, a LOW above 1 being no lower clip (`toyrl.trainers.verl.ratio_clip`); `actor.dual_clip`,
  `train.max_epochs`;
- `rollout.batch_size` x `n_samples_per_prompt` / `train.batch_size`: optimiser steps per rollout,
  each on train.batch_size samples of the replay buffer, reshuffled each epoch, or in its order
  with `train.dynamic_batch_enable`, `ds.tensor_parallel_size` > 1 or `ds.ring_attn_size` > 1
  (ppo_train's should_shuffle);
- the KL: by default a k1 penalty in the reward (`algo.kl.init_coef` 0.01, `algo.kl.use_loss`
  false): `kl=k1_reward`, each token's advantage its return, the KL included; k3 in the loss
  (`use_loss` with estimator k3) is toyrl's k3 term;
- `rollout.n_samples_per_prompt`: the group size G.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from toyrl.config import InvalidInput, shown
from toyrl.trainers import (
    Release,
    Setting,
    ToyMapping,
    Trainer,
    Unresolved,
    grad_clip_note,
    not_modelled,
    ppo_spec,
    schedule_spec,
)
from toyrl.trainers.verl import ratio_clip

# OpenRLHF 0.10.2 renamed train_ppo_ray.py's arguments (0.10.1's names -> 0.10.2's); 0.9.x and
# 0.6.4 have the older names (0.9.x's generate_max_len was 0.10.1's max_new_tokens).
RENAMED_0_10_2 = {
    "advantage_estimator": "algo.advantage.estimator",
    "no_advantage_std_norm": "algo.advantage.no_std_norm",
    "policy_loss_type": "actor.policy_loss_type",
    "eps_clip": "actor.eps_clip",
    "dual_clip": "actor.dual_clip",
    "entropy_loss_coef": "actor.entropy_coef",
    "max_epochs": "train.max_epochs",
    "train_batch_size": "train.batch_size",
    "micro_train_batch_size": "train.micro_batch_size",
    "rollout_batch_size": "rollout.batch_size",
    "n_samples_per_prompt": "rollout.n_samples_per_prompt",
    "init_kl_coef": "algo.kl.init_coef",
    "use_kl_loss": "algo.kl.use_loss",
    "kl_estimator": "algo.kl.estimator",
    "overlong_buffer_len": "reward.overlong_buffer_len",
    "overlong_penalty_factor": "reward.overlong_penalty_factor",
    "max_new_tokens": "rollout.max_new_tokens",
    "generate_max_len": "rollout.max_new_tokens",
    "max_len": "data.max_len",
    "dynamic_filtering": "algo.dynamic_filtering_enable",
    "max_norm": "actor.max_norm",
}


def _older_names(settings: dict[str, Setting], version: str) -> dict[str, tuple[str, str]]:
    """The names before 0.10.2 of a newer release's settings, read as its own (its parser refuses them)."""
    why = f"the name before OpenRLHF 0.10.2, which {version}'s parser refuses"
    return {old: (new, why) for old, new in RENAMED_0_10_2.items() if new in settings}


ADVANTAGE = {
    "group_norm": "advantage=group_std_sample,std_eps=1e-09",
    "dr_grpo": "advantage=none",
    "rloo": "advantage=rloo",
    "reinforce_baseline": "advantage=token_whiten",
}
AGGREGATION = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean_token_mean"}
# why the other estimators are not modelled (experience_maker.py, compute_advantages_and_returns)
ESTIMATOR_REASONS = {
    "gae": "PPO's GAE needs a value model",
    "reinforce": "REINFORCE++: the rewards themselves whitened over the rollout's tokens with the "
    "population variance, clamped at 1e-8; toyrl's reinforce_pp whitens with the Bessel-corrected "
    "variance + 1e-8 (verl's), its token_whiten centres each group first",
    "flash_reinforce": "the reward minus the rollout batch's mean, not whitened: no toyrl advantage stage",
}


class ClipPair(Setting):
    """--actor.eps_clip_low_high LOW HIGH (argparse's nargs=2 floats, default None): two clip ranges,
    each a float >= 0, from a command line's two words or one text "LOW HIGH"."""

    def describe(self) -> str:
        return "two floats LOW HIGH, each >= 0, or None"

    def parse(self, name: str, value: Any) -> Any:
        if isinstance(value, Unresolved) or value is None or value in ("None", "null"):
            return super().parse(name, value)
        words = value.split() if isinstance(value, str) else value
        if isinstance(words, (list, tuple)) and len(words) == 2:
            bound = Setting(0.0, kind=float, low=0.0)
            for word in words:
                if isinstance(word, Unresolved):
                    bound.parse(name, word)  # says why it cannot be read
            try:
                return tuple(bound.parse(name, word) for word in words)
            except InvalidInput:
                pass
        raise InvalidInput(f"{name}={shown(value)} is not valid; valid: {self.describe()}")


SETTINGS_0_11_2 = {
    "algo.advantage.estimator": Setting(
        "gae", ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo", "flash_reinforce")
    ),
    "algo.advantage.no_std_norm": Setting(False, kind=bool),
    "actor.loss_agg_mode": Setting("token-mean", tuple(AGGREGATION)),
    "actor.policy_loss_type": Setting("ppo", ("ppo", "gspo")),
    # any clip range the parser takes (a float; >= 0 here): a large one turns the clip off
    "actor.eps_clip": Setting(0.2, kind=float, low=0.0),
    "actor.eps_clip_low_high": ClipPair(None, optional=True),
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
    "reward.overlong_penalty_factor": Setting(1.0, kind=float, low=0.0),
    "rollout.max_new_tokens": Setting(None, kind=int, low=1, optional=True),
    "data.max_len": Setting(2048, kind=int, low=1),
    "algo.dynamic_filtering_enable": Setting(False, kind=bool),
    "actor.max_norm": Setting(1.0, kind=float, low=0.0),
    # what makes ppo_train's DataLoader keep the replay buffer's order (should_shuffle)
    "train.dynamic_batch_enable": Setting(False, kind=bool),
    "ds.tensor_parallel_size": Setting(1, kind=int, low=1),
    "ds.ring_attn_size": Setting(1, kind=int, low=1),
}


def _clip_range(s: dict[str, Any], notes: list[str]) -> tuple[float, float]:
    """PolicyLoss's clamp(rho, 1 - clip_eps_low, 1 + clip_eps_high) (models/loss.py): ActorPPOTrainer
    builds it from --actor.eps_clip_low_high alone (trainer/ray/ppo_actor.py), which train_ppo_ray.py
    sets to (eps_clip, eps_clip) where it is not given; a lower bound that cannot bind is the toy's
    epsilon = 1 (`toyrl.trainers.verl.ratio_clip`)."""
    pair = s["actor.eps_clip_low_high"]
    if pair is None:
        names, (low, high) = ("actor.eps_clip", "actor.eps_clip"), (s["actor.eps_clip"], s["actor.eps_clip"])
    else:
        names, (low, high) = ("actor.eps_clip_low_high's LOW", "actor.eps_clip_low_high's HIGH"), pair
        if s["actor.eps_clip"] != SETTINGS_0_11_2["actor.eps_clip"].default:
            notes.append(
                f"actor.eps_clip={s['actor.eps_clip']}: no effect; --actor.eps_clip_low_high sets both "
                "bounds of the clip (train_ppo_ray.py reads eps_clip only where eps_clip_low_high is unset)"
            )
    low, high = ratio_clip(names[0], low, names[1], high, notes)
    return 1.0 if low is None else low, high


def _mapping(s: dict[str, Any]) -> ToyMapping:
    estimator = s["algo.advantage.estimator"]
    if estimator not in ADVANTAGE:
        raise not_modelled(
            "algo.advantage.estimator", estimator, ADVANTAGE, ESTIMATOR_REASONS.get(estimator, "")
        )
    gspo = s["actor.policy_loss_type"] == "gspo"
    if estimator == "reinforce_baseline" and s["algo.advantage.no_std_norm"]:
        why = "token-weighted centring without the std"
        raise not_modelled("algo.advantage.no_std_norm", True, [False], why)
    notes, unmodelled = [], []
    aggregation = s["actor.loss_agg_mode"]
    if gspo and aggregation != "seq-mean-token-mean":  # PolicyLoss sets token_level_loss False
        notes.append(
            "actor.policy_loss_type='gspo' averages each sample's token mean, whatever loss_agg_mode says"
        )
        aggregation = "seq-mean-token-mean"
    spec = [ADVANTAGE[estimator], f"aggregation={AGGREGATION[aggregation]}"]
    if estimator == "reinforce_baseline":
        notes.append("reinforce_baseline whitens in float32: it equals token_whiten to float32 rounding")
    coef, estimator_kl = s["algo.kl.init_coef"], s["algo.kl.estimator"]
    in_loss = coef > 0 and s["algo.kl.use_loss"] and estimator_kl == "k3"
    in_reward = coef > 0 and not s["algo.kl.use_loss"] and estimator_kl == "k1"
    low, high = _clip_range(s, notes)
    spec += ppo_spec(
        low,
        high,
        epochs=s["train.max_epochs"],
        beta=coef if in_loss else 0.0,
        dual_clip=None if gspo else s["actor.dual_clip"],
    )
    if gspo:  # the sequence's ratio in PPO's clip (gspo's own default epsilon_high is not epsilon)
        spec += ["objective=gspo"] + ([f"epsilon_high={high}"] if high == low else [])
        if s["actor.dual_clip"] is not None:
            unmodelled.append(
                f"actor.dual_clip={s['actor.dual_clip']} with gspo: OpenRLHF bounds the sequence ratio's "
                "objective at dual_clip A; toyrl's gspo has no dual clip, so it is left out"
            )
    if gspo and coef > 0 and not in_loss:
        place = "loss" if s["algo.kl.use_loss"] else "reward"
        unmodelled.append(
            f"algo.kl.init_coef={coef} ({estimator_kl} in the {place}) "
            "with gspo: toyrl's gspo takes one advantage a response, and its KL term is k3 in the loss; "
            "left out (zero while the policy is the reference)"
        )
        in_reward = False
    if in_reward:  # the default: -coef k1 on every token, the advantage each token's return
        spec += ["kl=k1_reward", f"beta={coef}"]
        if estimator == "reinforce_baseline":
            unmodelled.append(
                "reinforce_baseline with the KL in the reward: OpenRLHF whitens the per-token returns (the "
                "KL included) over the rollout's tokens; the toy whitens the responses' advantages, then "
                "adds the KL"
            )
    elif coef > 0 and not in_loss and not gspo:
        place = "in the loss" if s["algo.kl.use_loss"] else "in the reward"
        unmodelled.append(
            f"algo.kl.init_coef={coef} with estimator {estimator_kl} {place}: toyrl's KL terms are k3 in the "
            "loss and k1 in the reward; left out (zero while the policy is the reference)"
        )
    n = s["rollout.n_samples_per_prompt"]
    # the rollout's samples in a replay buffer, read by a data loader in optimiser steps of
    # train.batch_size samples, shuffled each epoch unless should_shuffle is False (ppo_actor.py,
    # ppo_train); token-mean's normaliser is the step's (since 0.10.4; with dynamic batching
    # always: the replay buffer's dynamic_batch_num_tokens, setup_dynamic_batch)
    kept = [
        f"{key}={s[key]}"
        for key in ("train.dynamic_batch_enable", "ds.tensor_parallel_size", "ds.ring_attn_size")
        if s[key] != SETTINGS_0_11_2[key].default
    ]
    schedule, notes_of_schedule = schedule_spec(
        s["rollout.batch_size"] * n,
        s["train.batch_size"],
        "none" if kept else "epoch",
        "rollout.batch_size x n_samples_per_prompt / train.batch_size",
    )
    if kept and len(schedule) > 0:
        notes.append(
            f"{', '.join(kept)}: ppo_train's DataLoader does not shuffle the replay buffer (should_shuffle), "
            "so the optimiser steps take the rollout's samples in its order, every epoch"
        )
    spec += schedule
    unmodelled += notes_of_schedule
    if estimator == "group_norm" and n > 1 and (1 - 1 / n) * math.sqrt(n) > 10:
        unmodelled.append(
            "reward.clip_range (-10, 10) cuts group_norm advantages beyond 10, which groups of "
            f"{n} can reach; the toy does not clip"
        )
    buffer = s["reward.overlong_buffer_len"]
    if buffer is not None:
        longest = s["rollout.max_new_tokens"] or s["data.max_len"]  # as apply_length_penalties takes it
        if not 0 < buffer <= longest:
            raise InvalidInput(
                f"reward.overlong_buffer_len={buffer} must be in (0, {longest}] (rollout.max_new_tokens, "
                "else data.max_len), as OpenRLHF's apply_overlong_penalty requires"
            )
        factor = s["reward.overlong_penalty_factor"]
        spec += [
            "reward=soft_overlong",
            f"buffer={buffer / longest:.6g}",
            f"penalty_factor={factor}",
            "incorrect=0",
        ]
        notes.append(
            "reward.overlong_buffer_len: DAPO's soft overlong punishment on the reward function's own score "
            "(the toy's 0 / 1), the buffer as a fraction of rollout.max_new_tokens (else data.max_len)"
        )
    for key, what in (("actor.entropy_coef", "an entropy bonus"),):
        if s[key] is not None:
            unmodelled.append(f"{key}={s[key]}: {what}; left out")
    if s["algo.dynamic_filtering_enable"]:
        # keeps a group whose mean score is inside algo.dynamic_filtering_range, (0, 1) by default:
        # with 0/1 scores, the groups of mixed correctness
        spec += ["sampler=filter_groups", "max_rounds=100000"]
        notes.append(
            "algo.dynamic_filtering_enable: groups of mixed correctness kept (the default range (0, 1) on "
            "0/1 scores); OpenRLHF replaces each dropped prompt by one new prompt, taken in the order "
            "generation finishes, where the toy refills in rounds of B unused prompts and keeps the first B "
            "mixed groups"
        )
        if buffer is not None:
            unmodelled.append(
                "algo.dynamic_filtering_enable with the overlong penalty: OpenRLHF filters on the penalised "
                "mean score, the toy on correctness"
            )
    if s["actor.max_norm"] > 0:
        unmodelled.append(grad_clip_note("actor.max_norm", s["actor.max_norm"]))
    group = {"group_size": ("rollout.n_samples_per_prompt", n)}
    return ToyMapping(",".join(spec), group, unmodelled, notes, step_responses=s["train.batch_size"])


# 0.10.3: no actor.loss_agg_mode (always the token mean) and the token mean taken on each
# micro-batch of train.micro_batch_size samples (get_loss_batch_info, before 0.10.4's whole-step
# normaliser), the step's loss their mean.
SETTINGS_0_10_3 = {
    key: setting for key, setting in SETTINGS_0_11_2.items() if key != "actor.loss_agg_mode"
} | {
    "train.micro_batch_size": Setting(1, kind=int, low=1),
}


def _mapping_0_10_3(s: dict[str, Any]) -> ToyMapping:
    mapped = _mapping(s | {"actor.loss_agg_mode": "token-mean"})
    if s["train.dynamic_batch_enable"]:  # get_loss_batch_info takes the replay buffer's step totals
        mapped.notes.append(
            "OpenRLHF 0.10.3 with train.dynamic_batch_enable divides every micro-batch by the optimiser "
            "step's tokens (setup_dynamic_batch's dynamic_batch_num_tokens): the step's token mean"
        )
        return mapped
    micro = s["train.micro_batch_size"]
    accumulation = max(1, s["train.batch_size"] // micro)
    spec = mapped.spec
    if accumulation > 1 and micro == 1:  # one sample a micro-batch: its token mean is the response's
        spec = spec.replace("aggregation=token_mean", "aggregation=seq_mean_token_mean")
    elif accumulation > 1:
        spec += f",micro_batches={accumulation},per_micro_batch=True"
    mapped.notes.append(
        f"OpenRLHF 0.10.3 takes the token mean of each micro-batch of train.micro_batch_size={micro} "
        f"samples and averages the {accumulation} of an optimiser step"
        + (" (one sample each: each response's own token mean)" if micro == 1 and accumulation > 1 else "")
    )
    return dataclasses.replace(mapped, spec=spec)


# 0.6.4: flat argument names; PolicyLoss is each response's token mean, averaged (no aggregation
# option, no dual clip); NaiveReplayBuffer.normalize whitens every estimator's advantages over the
# tokens but group_norm's and dr_grpo's (in float32).
SETTINGS_0_6_4 = {
    "advantage_estimator": Setting(
        "gae", ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo")
    ),
    "eps_clip": Setting(0.2, kind=float, low=0.0, high=10.0),
    "max_epochs": Setting(1, kind=int, low=1, high=64),
    "train_batch_size": Setting(128, kind=int, low=1),
    "micro_train_batch_size": Setting(4, kind=int, low=1),
    "rollout_batch_size": Setting(1024, kind=int, low=1),
    "n_samples_per_prompt": Setting(1, kind=int, low=1, high=10_000),
    "init_kl_coef": Setting(0.01, kind=float, low=0.0),
    "use_kl_loss": Setting(False, kind=bool),
    "kl_estimator": Setting("k1", ("k1", "k2", "k3")),
    "max_norm": Setting(1.0, kind=float, low=0.0),
}
NEWER_NAMES_0_6_4 = {
    old: new for old, new in RENAMED_0_10_2.items() if old in SETTINGS_0_6_4 and new in SETTINGS_0_11_2
}


def _mapping_0_6_4(s: dict[str, Any]) -> ToyMapping:
    newer = {key: setting.default for key, setting in SETTINGS_0_11_2.items()}
    newer |= {NEWER_NAMES_0_6_4[key]: value for key, value in s.items() if key in NEWER_NAMES_0_6_4}
    mapped = _mapping(newer | {"actor.loss_agg_mode": "seq-mean-token-mean"})
    spec = mapped.spec.replace("advantage=rloo", "advantage=token_whiten")
    if s["advantage_estimator"] == "rloo":
        mapped.notes.append(
            "rloo: OpenRLHF 0.6.4 whitens its advantages over the tokens (token_whiten, float32)"
        )
        if "kl=k1_reward" in spec:
            mapped.unmodelled.append(
                "rloo with the KL in the reward: OpenRLHF 0.6.4 whitens the per-token returns (the KL "
                "included); the toy whitens the responses' advantages, then adds the KL"
            )
    mapped.notes.append("OpenRLHF 0.6.4's loss is each response's token mean, averaged (seq_mean_token_mean)")
    group = {"group_size": ("n_samples_per_prompt", s["n_samples_per_prompt"])}
    unmodelled = [
        item.replace("rollout.n_samples_per_prompt", "n_samples_per_prompt") for item in mapped.unmodelled
    ]
    return ToyMapping(spec, group, unmodelled, mapped.notes, step_responses=s["train_batch_size"])


# Argument names of train_ppo_ray.py that only OpenRLHF has: its sections since 0.10.2 (verl shares
# data., critic. and reward.), and names before it; and those spelt close to the ones toyrl reads.
MARKS = (
    "algo.",
    "actor.",
    "train.",
    "rollout.",
    "ds.",
    "vllm.",
    "ckpt.",
    "logger.",
    "ref.",
    "eval.",
    "data.",
    "critic.",
    "reward.",
    "reward_pretrain",
    "ref_num_nodes",
    "actor_num_nodes",
    "actor_num_gpus_per_node",
    "vllm_num_engines",
    "colocate_all_models",
    "micro_rollout_batch_size",
    "prompt_max_len",
    "normalize_reward",
    "use_wandb",
    "ckpt_path",
    "actor_learning_rate",
    "packing_samples",
    "label_key",
)
OTHER_NAMES = frozenset(
    {
        "local_rank",  # DeepSpeed's launcher argument (TrainingArguments has one too)
        "use_ms",  # models from ModelScope
        "algo.dynamic_filtering_range",
        "critic.max_norm",
        "eval.n_samples_per_prompt",
        "eval_n_samples_per_prompt",
        "micro_rollout_batch_size",
        "micro_train_batch_size",
        "rollout.micro_batch_size",
    }
)
SOURCE = (
    "openrlhf/cli/train_ppo_ray.py, openrlhf/trainer/ppo_utils/experience_maker.py, openrlhf/models/loss.py"
)
TRAINER = Trainer(
    name="OpenRLHF",
    distribution="openrlhf",
    releases={
        "0.11.2": Release(SETTINGS_0_11_2, SOURCE, _mapping, _older_names(SETTINGS_0_11_2, "0.11.2")),
        "0.10.3": Release(
            SETTINGS_0_10_3,
            SOURCE + ", openrlhf/utils/loss_utils.py (get_loss_batch_info)",
            _mapping_0_10_3,
            _older_names(SETTINGS_0_10_3, "0.10.3"),
        ),
        "0.6.4": Release(
            SETTINGS_0_6_4,
            "openrlhf/cli/train_ppo_ray.py, openrlhf/models/loss.py (PolicyLoss), "
            "openrlhf/trainer/ppo_utils/replay_buffer.py (normalize)",
            _mapping_0_6_4,
            {
                new: (old, "its name since OpenRLHF 0.10.2, which 0.6.4's parser refuses")
                for old, new in RENAMED_0_10_2.items()
                if old in SETTINGS_0_6_4
            },
        ),
    },
    marks=MARKS,
    other_names=OTHER_NAMES,
)
