"""OpenRLHF's PPO trainer settings on the toy, per release from 0.6.0 (the first with group_norm)
to 0.11.2 (openrlhf/cli/train_ppo_ray.py's arguments; openrlhf/trainer/ppo_utils/experience_maker.py's
advantage estimators; openrlhf/models/loss.py and openrlhf/utils/loss_utils.py, the loss and its
token normalisation). `RELEASES` names, newest first, the releases modelled, each standing for the
releases that read alike and saying what changed. Settings are the argument names without their
dashes: `algo.advantage.estimator` since 0.10.2, `advantage_estimator` before (`RENAMED_0_10_2`);
each release reads the other names as its own, with a note (its own parser refuses them). A name
of another release that this one's parser does not have is refused (`Release.refuses`).

What the mapping follows (0.11.2; the older releases' differences in `_mapping`):
- `algo.advantage.estimator`: "group_norm" (r - group mean, divided by the group's sample std +
  1e-9), "dr_grpo" (r - group mean), "rloo" (leave-one-out), "reinforce_baseline" (group mean, then
  whitened over the rollout's tokens with the population variance, clamped at 1e-8:
  `token_whiten`, computed in float32); the default "gae" needs a value model; "reinforce"
  (REINFORCE++: the rewards themselves whitened with the population variance) is no toyrl stage
  (reinforce_pp is verl's, with the Bessel-corrected variance), "flash_reinforce" neither; before
  0.8.5 rloo's advantages are whitened over the tokens too;
- `actor.loss_agg_mode`: "token-mean" (the default: the optimiser step's tokens, since 0.10.4; each
  micro-batch's own from 0.7.0 to 0.10.3; each response's token mean, averaged, before 0.7.0),
  "seq-mean-token-mean";
- `actor.policy_loss_type`: "ppo" (the token ratio), "gspo" (the sequence's ratio, exp of its
  tokens' mean log-ratio, in PPO's clip at eps_clip; each sample's token mean, whatever
  loss_agg_mode says: objective=gspo with seq_mean_token_mean; 0.8.8 took the token mean);
- `actor.eps_clip_low_high` LOW HIGH, PolicyLoss's clip range (trainer/ray/ppo_actor.py), which
  train_ppo_ray.py sets to (`actor.eps_clip`, eps_clip) where it is not given: any size the parser
  takes, a LOW above 1 being no lower clip (`toyrl.trainers.verl.ratio_clip`); `actor.dual_clip`,
  `train.max_epochs`;
- `rollout.batch_size` x `n_samples_per_prompt` / `train.batch_size`: optimiser steps per rollout,
  each on train.batch_size samples of the replay buffer, reshuffled each epoch, or in its order
  with `train.dynamic_batch_enable`, `ds.tensor_parallel_size` > 1 (since 0.8.1) or
  `ds.ring_attn_size` > 1 (ppo_train's should_shuffle);
- the KL: by default a k1 penalty in the reward (`algo.kl.init_coef` 0.01, `algo.kl.use_loss`
  false): `kl=k1_reward`, each token's advantage its return, the KL included; k3 in the loss
  (`use_loss` with estimator k3) is toyrl's k3 term;
- `rollout.n_samples_per_prompt`: the group size G.
"""

from __future__ import annotations

import dataclasses
import math
from functools import partial
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

# The releases modelled, newest first, each standing for the releases that read alike for the
# settings toyrl reads (each one's train_ppo_ray.py arguments, read in its own wheel by the
# conformance suite, and its loss and advantage code): version -> (the releases, what changed
# from the one before).
RELEASES = {
    "0.11.2": (
        "0.11.2",
        "actor.loss_agg_mode (token-mean or seq-mean-token-mean); estimator flash_reinforce",
    ),
    "0.11.1": ("0.11.1", "algo.kl.unbiased_gradient"),
    "0.11.0": ("0.10.4-0.11.0", "the token mean over the optimiser step (iter_grad_accum_global_norm)"),
    "0.10.3": ("0.10.3", "with dynamic batching, each micro-batch divided by the step's tokens"),
    "0.10.2": ("0.10.2", "the arguments renamed (algo.*, actor.*, train.*, rollout.*, ...)"),
    "0.10.1.post2": ("0.10.0-0.10.1.post2", "micro_train_batch_size defaults to 1"),
    "0.9.10": ("0.9.8-0.9.10", "max_new_tokens for generate_max_len; max_len defaults to 2048"),
    "0.9.7": ("0.8.9-0.9.7", "gspo averages each sample's token mean"),
    "0.8.8": ("0.8.8", "policy_loss_type ppo or gspo (gspo's loss the micro-batch's token mean)"),
    "0.8.7": ("0.8.7", "overlong_buffer_len, overlong_penalty_factor"),
    "0.8.6": ("0.8.6", "dual_clip; use_dynamic_batch"),
    "0.8.5": ("0.8.5", "rloo's advantages no longer whitened over the tokens"),
    "0.8.4": ("0.8.3-0.8.4", "entropy_loss_coef defaults to None"),
    "0.8.2": ("0.8.2", "eps_clip_low_high"),
    "0.8.1.post1": (
        "0.8.1-0.8.1.post1",
        "dynamic_filtering; tensor parallelism keeps the replay buffer's order",
    ),
    "0.8.0.post1": ("0.7.4-0.8.0.post1", "ds_tensor_parallel_size (the replay buffer still shuffled)"),
    "0.7.3": ("0.7.2-0.7.3", "entropy_loss_coef, 0 by default"),
    "0.7.1.post2": (
        "0.7.0-0.7.1.post2",
        "the loss is each micro-batch's token mean (token_level_loss), packed or not",
    ),
    "0.6.4": ("0.6.4", "no_advantage_std_norm"),
    "0.6.3.post2": ("0.6.3.post2", "estimator dr_grpo"),
    "0.6.3.post1": ("0.6.0.post1-0.6.3.post1", "kl_estimator k1, k2 or k3, for use_kl_estimator_k3"),
    "0.6.0": (
        "0.6.0",
        "estimators group_norm and reinforce_baseline, use_kl_loss; each response's token mean averaged "
        "(the micro-batch's token mean with packing_samples); every estimator but group_norm whitened",
    ),
}


def _at(version: str) -> tuple[int, ...]:
    """A release's number as a tuple: "0.6.3.post1" -> (0, 6, 3, 1), after 0.6.3 and before 0.6.4."""
    return tuple(int(part.removeprefix("post")) for part in version.split("."))


# OpenRLHF 0.10.2 renamed train_ppo_ray.py's arguments (0.10.1's names -> 0.10.2's); 0.9.7 and
# earlier had generate_max_len for 0.9.8's max_new_tokens.
RENAMED_0_10_2 = {
    "advantage_estimator": "algo.advantage.estimator",
    "no_advantage_std_norm": "algo.advantage.no_std_norm",
    "policy_loss_type": "actor.policy_loss_type",
    "eps_clip": "actor.eps_clip",
    "eps_clip_low_high": "actor.eps_clip_low_high",
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
    "use_dynamic_batch": "train.dynamic_batch_enable",
    "ds_tensor_parallel_size": "ds.tensor_parallel_size",
    "ring_attn_size": "ds.ring_attn_size",
}
RENAMED_IN = "0.10.2"

ESTIMATORS = ("gae", "reinforce", "rloo", "reinforce_baseline", "group_norm", "dr_grpo", "flash_reinforce")
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
    "algo.advantage.estimator": Setting("gae", ESTIMATORS),
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
    "algo.kl.unbiased_gradient": Setting(False, kind=bool),
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
    # before 0.10.4 the token mean is each micro-batch's (`UNREAD_FROM`)
    "train.micro_batch_size": Setting(1, kind=int, low=1),
}
# The settings before 0.10.2, by their flat names, with 0.10.1.post2's defaults (`_settings` gives
# each release's). Besides RENAMED_0_10_2's: 0.6.0's use_kl_estimator_k3 (k3 for k1), and
# packing_samples, which makes 0.6.x's loss the packed micro-batch's token mean.
FLAT = {
    name: SETTINGS_0_11_2[RENAMED_0_10_2[name]]
    for name in (
        "advantage_estimator",
        "no_advantage_std_norm",
        "policy_loss_type",
        "eps_clip",
        "eps_clip_low_high",
        "dual_clip",
        "entropy_loss_coef",
        "max_epochs",
        "train_batch_size",
        "micro_train_batch_size",
        "rollout_batch_size",
        "n_samples_per_prompt",
        "init_kl_coef",
        "use_kl_loss",
        "kl_estimator",
    )
} | {
    "use_kl_estimator_k3": Setting(False, kind=bool),
    "overlong_buffer_len": SETTINGS_0_11_2["reward.overlong_buffer_len"],
    "overlong_penalty_factor": SETTINGS_0_11_2["reward.overlong_penalty_factor"],
    "generate_max_len": Setting(1024, kind=int, low=1),
    "max_new_tokens": SETTINGS_0_11_2["rollout.max_new_tokens"],
    "max_len": SETTINGS_0_11_2["data.max_len"],
    "dynamic_filtering": Setting(False, kind=bool),
    "max_norm": SETTINGS_0_11_2["actor.max_norm"],
    "use_dynamic_batch": Setting(False, kind=bool),
    "ds_tensor_parallel_size": Setting(1, kind=int, low=1),
    "ring_attn_size": Setting(1, kind=int, low=1),
    "packing_samples": Setting(False, kind=bool),
}
# The first release with each setting (the others: 0.6.0, or 0.10.2 for the names since then), and
# the last one with those that went.
SINCE = {
    "no_advantage_std_norm": "0.6.4",
    "policy_loss_type": "0.8.8",
    "eps_clip_low_high": "0.8.2",
    "dual_clip": "0.8.6",
    "entropy_loss_coef": "0.7.2",
    "kl_estimator": "0.6.0.post1",
    "overlong_buffer_len": "0.8.7",
    "overlong_penalty_factor": "0.8.7",
    "max_new_tokens": "0.9.8",
    "dynamic_filtering": "0.8.1",
    "use_dynamic_batch": "0.8.6",
    "ds_tensor_parallel_size": "0.7.4",
    "algo.kl.unbiased_gradient": "0.11.1",
    "actor.loss_agg_mode": "0.11.2",
}
UNTIL = {"use_kl_estimator_k3": "0.6.0", "generate_max_len": "0.9.7"}
# Names the later parsers still take that toyrl reads no more from a release on: the loss does not
# depend on them (packed or not from 0.7.0; the micro-batch size from 0.10.4, the step's normaliser)
UNREAD_FROM = {"packing_samples": "0.7.0", "train.micro_batch_size": "0.10.4"}


def _settings(version: str) -> dict[str, Setting]:
    """The settings of a release, with its defaults (its train_ppo_ray.py)."""
    at = _at(version)
    flat = at < _at(RENAMED_IN)
    table = FLAT if flat else SETTINGS_0_11_2
    settings = {
        key: setting
        for key, setting in table.items()
        if _at(SINCE.get(key, "0.6.0")) <= at <= _at(UNTIL.get(key, "99"))
        and at < _at(UNREAD_FROM.get(key, "99"))
    }
    estimators = 7 if at >= (0, 11, 2) else 6 if at >= (0, 6, 3, 2) else 5
    older = {
        "advantage_estimator": Setting("gae", ESTIMATORS[:estimators]),
        "algo.advantage.estimator": Setting("gae", ESTIMATORS[:estimators]),
        "micro_train_batch_size": Setting(1 if at >= (0, 10, 0) else 4, kind=int, low=1),
        "max_len": Setting(None, kind=int, low=1, optional=True) if at < (0, 9, 8) else FLAT["max_len"],
        "entropy_loss_coef": Setting(0.0, kind=float) if at < (0, 8, 3) else FLAT["entropy_loss_coef"],
    }
    return settings | {key: setting for key, setting in older.items() if key in settings}


def _clip_range(s: dict[str, Any], notes: list[str]) -> tuple[float, float]:
    """PolicyLoss's clamp(rho, 1 - clip_eps_low, 1 + clip_eps_high) (models/loss.py): ActorPPOTrainer
    builds it from --actor.eps_clip_low_high alone (trainer/ray/ppo_actor.py), which train_ppo_ray.py
    sets to (eps_clip, eps_clip) where it is not given (before 0.8.2: PolicyLoss(eps_clip)); a
    lower bound that cannot bind is the toy's epsilon = 1 (`toyrl.trainers.verl.ratio_clip`)."""
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


def _scope(s: dict[str, Any], at: tuple[int, ...]) -> str:
    """Whose tokens the token mean divides by: the optimiser step's (`iter_grad_accum_global_norm`,
    0.10.4 on; with dynamic batching 0.10.3's too, `get_loss_batch_info`), each micro-batch's
    (PolicyLoss's token_level_loss, 0.7.0 to 0.10.3; 0.6.x's on packed samples, one row a
    micro-batch), each response's (0.6.x's `masked_mean(loss, action_mask, dim=-1).mean()`), or,
    with dynamic batching from 0.8.6 to 0.10.2, each micro-batch's weighted by its share of the
    step's samples (`dynamic_loss_scale`)."""
    dynamic = s["train.dynamic_batch_enable"]
    if at >= (0, 10, 4) or (dynamic and at >= (0, 10, 3)):
        return "step"
    if dynamic:
        return "sample-weighted"
    if at >= (0, 7, 0) or s.get("packing_samples", False):
        return "micro-batch"
    return "response"


def _mapping(s: dict[str, Any], version: str = "0.11.2") -> ToyMapping:
    """The settings (by 0.10.2's names) of `version` on the toy."""
    at = _at(version)
    estimator = s["algo.advantage.estimator"]
    if estimator not in ADVANTAGE:
        raise not_modelled(
            "algo.advantage.estimator", estimator, ADVANTAGE, ESTIMATOR_REASONS.get(estimator, "")
        )
    gspo = s["actor.policy_loss_type"] == "gspo"
    # the estimators whose advantages are whitened over the rollout's tokens (float32): every one
    # but group_norm and dr_grpo before 0.8.5 (0.6.x's replay buffer, then the experience maker)
    whitened = estimator == "reinforce_baseline" or (estimator == "rloo" and at < (0, 8, 5))
    if whitened and s["algo.advantage.no_std_norm"]:
        why = "token-weighted centring without the std"
        raise not_modelled("algo.advantage.no_std_norm", True, [False], why)
    notes, unmodelled = [], []
    scope = _scope(s, at)
    aggregation = s.get("actor.loss_agg_mode", "token-mean")
    if scope == "response":
        aggregation = "seq-mean-token-mean"
        notes.append(
            f"OpenRLHF {version}'s loss is each response's token mean, averaged (seq_mean_token_mean)"
        )
    if (
        gspo and at >= (0, 8, 9) and aggregation != "seq-mean-token-mean"
    ):  # PolicyLoss: token_level_loss False
        said = ", whatever loss_agg_mode says" if "actor.loss_agg_mode" in s else ""
        notes.append(f"actor.policy_loss_type='gspo' averages each sample's token mean{said}")
        aggregation = "seq-mean-token-mean"
    elif gspo and at < (0, 8, 9):
        notes.append(
            f"actor.policy_loss_type='gspo' in OpenRLHF {version} takes the token mean of the sequence-ratio "
            "loss (each sample's token mean from 0.8.9)"
        )
    advantage = "advantage=token_whiten" if whitened else ADVANTAGE[estimator]
    spec = [advantage, f"aggregation={AGGREGATION[aggregation]}"]
    if estimator == "reinforce_baseline":
        notes.append("reinforce_baseline whitens in float32: it equals token_whiten to float32 rounding")
    elif whitened:
        notes.append(
            f"rloo: OpenRLHF {version} whitens its advantages over the tokens (token_whiten, float32)"
        )
    coef, estimator_kl = s["algo.kl.init_coef"], s["algo.kl.estimator"]
    unbiased = s.get("algo.kl.unbiased_gradient", False)
    in_loss = coef > 0 and s["algo.kl.use_loss"] and estimator_kl == "k3" and not unbiased
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
        if whitened:
            unmodelled.append(
                f"{estimator} with the KL in the reward: OpenRLHF whitens the per-token returns (the "
                "KL included) over the rollout's tokens; the toy whitens the responses' advantages, then "
                "adds the KL"
            )
    elif coef > 0 and not in_loss and not gspo and unbiased and s["algo.kl.use_loss"]:
        unmodelled.append(
            f"algo.kl.unbiased_gradient with algo.kl.init_coef={coef} in the loss: its gradient is w k1 "
            "grad log pi (w = pi / pi_old, clamped at 10) whatever the estimator; toyrl's KL terms are k3 "
            "in the loss and k1 in the reward; left out (zero while the policy is the reference)"
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
    # ppo_train; tensor parallelism since 0.8.1, dynamic batching since 0.8.6)
    keeping = ("train.dynamic_batch_enable", "ds.tensor_parallel_size", "ds.ring_attn_size")
    kept = [
        f"{key}={s[key]}"
        for key in keeping
        if s[key] != SETTINGS_0_11_2[key].default and (key != "ds.tensor_parallel_size" or at >= (0, 8, 1))
    ]
    if s["ds.tensor_parallel_size"] > 1 and at < (0, 8, 1):
        notes.append(
            f"ds.tensor_parallel_size={s['ds.tensor_parallel_size']}: OpenRLHF {version} shuffles the replay "
            "buffer with tensor parallelism too (its order kept from 0.8.1)"
        )
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
    if s["actor.entropy_coef"]:  # 0 (0.7.2's default) and None add no entropy term
        unmodelled.append(f"actor.entropy_coef={s['actor.entropy_coef']}: an entropy bonus; left out")
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
    spec_text = ",".join(spec)
    if scope == "step" and at < (0, 10, 4):
        notes.append(
            f"OpenRLHF {version} with train.dynamic_batch_enable divides every micro-batch by the optimiser "
            "step's tokens (setup_dynamic_batch's dynamic_batch_num_tokens): the step's token mean"
        )
    elif scope == "sample-weighted":
        unmodelled.append(
            f"train.dynamic_batch_enable: OpenRLHF {version} cuts each optimiser step into micro-batches "
            "balanced by length and weighs each one's token mean by its share of the step's samples "
            "(dynamic_loss_scale); the toy takes the step's token mean"
        )
    micro_responses = None
    if scope == "micro-batch" and aggregation == "token-mean":
        micro = s["train.micro_batch_size"]
        accumulation = max(1, s["train.batch_size"] // micro)
        if accumulation > 1 and micro == 1:  # one sample a micro-batch: its token mean is the response's
            spec_text = spec_text.replace("aggregation=token_mean", "aggregation=seq_mean_token_mean")
        elif accumulation > 1:  # `toyrl.trainers.check` cuts the toy's steps into micro-batches of `micro`
            spec_text += ",per_micro_batch=True"
            micro_responses = micro
        packed = " (packing_samples: one packed row each)" if at < (0, 7, 0) else ""
        notes.append(
            f"OpenRLHF {version} takes the token mean of each micro-batch of train.micro_batch_size={micro} "
            f"samples{packed} and averages the {accumulation} of an optimiser step"
            + (
                " (one sample each: each response's own token mean)"
                if micro == 1 and accumulation > 1
                else ""
            )
        )
    group = {"group_size": ("rollout.n_samples_per_prompt", n)}
    return ToyMapping(
        spec_text,
        group,
        unmodelled,
        notes,
        step_responses=s["train.batch_size"],
        micro_batch_responses=micro_responses,
    )


def _own_names(text: str, names: dict[str, str]) -> str:
    """`text` with each setting named as the release names it (0.10.2's name -> the release's)."""
    for newer in sorted(names, key=len, reverse=True):  # actor.eps_clip_low_high before actor.eps_clip
        text = text.replace(newer, names[newer])
    return text


def _flat_mapping(s: dict[str, Any], version: str) -> ToyMapping:
    """A release before 0.10.2 (flat names) on the toy: its settings by 0.10.2's names, the ones it
    does not have at values that change nothing (0.11.2's defaults), mapped by `_mapping`, and the
    report's names its own."""
    names = {RENAMED_0_10_2[key]: key for key in s if key in RENAMED_0_10_2}
    newer = {key: setting.default for key, setting in _settings("0.10.3").items()}
    newer |= {RENAMED_0_10_2[key]: value for key, value in s.items() if key in RENAMED_0_10_2}
    newer["packing_samples"] = s.get("packing_samples", False)
    if "use_kl_estimator_k3" in s:
        newer["algo.kl.estimator"] = "k3" if s["use_kl_estimator_k3"] else "k1"
        names["algo.kl.estimator"] = "use_kl_estimator_k3"
    try:
        mapped = _mapping(newer, version)
    except InvalidInput as error:
        raise InvalidInput(_own_names(str(error), names)) from None
    return ToyMapping(
        mapped.spec,
        {field: (names[setting], value) for field, (setting, value) in mapped.config.items()},
        [_own_names(item, names) for item in mapped.unmodelled],
        [_own_names(item, names) for item in mapped.notes],
        step_responses=mapped.step_responses,
        micro_batch_responses=mapped.micro_batch_responses,
    )


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
        "dynamic_filtering_reward_range",
        "vllm_tensor_parallel_size",  # before 0.10.2, beside ds_tensor_parallel_size
    }
)
SOURCE = (
    "openrlhf/cli/train_ppo_ray.py, openrlhf/trainer/ppo_utils/experience_maker.py, openrlhf/models/loss.py"
)


def _release(version: str) -> Release:
    covers, changed = RELEASES[version]
    settings = _settings(version)
    if _at(version) >= _at(RENAMED_IN):
        why = f"the name before OpenRLHF {RENAMED_IN}, which {version}'s parser refuses"
        aliases = {old: (new, why) for old, new in RENAMED_0_10_2.items() if new in settings}
        mapping = partial(_mapping, version=version)
    else:
        why = f"its name since OpenRLHF {RENAMED_IN}, which {version}'s parser refuses"
        aliases = {new: (old, why) for old, new in RENAMED_0_10_2.items() if old in settings}
        mapping = partial(_flat_mapping, version=version)
    return Release(settings, f"{SOURCE} of {covers}: {changed}", mapping, aliases)


def _refused(releases: dict[str, Release]) -> dict[str, dict[str, str]]:
    """Per release, the names toyrl reads in another release that its own parser does not take
    (and that it does not read as one of its own), with why: each release's argparse stops at them."""
    first: dict[str, str] = {}  # a name (and its name across 0.10.2, `RENAMED_0_10_2`) -> its first release
    last: dict[str, str] = {}
    for version, release in reversed(releases.items()):
        start = RELEASES[version][0].split("-")[0]
        for name in release.settings:
            first.setdefault(name, start)
            first.setdefault(RENAMED_0_10_2.get(name, name), start)
            last[name] = version
    refused: dict[str, dict[str, str]] = {}
    for version, release in releases.items():
        at, flat = _at(version), _at(version) < _at(RENAMED_IN)
        refused[version] = {}
        for name in last:
            later = UNREAD_FROM.get(name)
            if name in release.settings or name in release.aliases:
                continue
            if later is not None and at >= _at(later) and ("." not in name) == flat:
                continue  # the parser takes it; toyrl reads it no more (UNREAD_FROM)
            if _at(first[RENAMED_0_10_2.get(name, name)]) > at:
                why = f"an argument of OpenRLHF {first[RENAMED_0_10_2.get(name, name)]} and later"
            elif ("." not in name) != flat:
                why = f"a name {'since' if flat else 'before'} OpenRLHF {RENAMED_IN}"
            elif _at(last[name]) < at:
                why = f"an argument of OpenRLHF {last[name]} and earlier"
            else:
                why = f"an argument of OpenRLHF {first[name]} and later"
            refused[version][name] = why
    return refused


_RELEASES = {version: _release(version) for version in RELEASES}
TRAINER = Trainer(
    name="OpenRLHF",
    distribution="openrlhf",
    releases={
        version: dataclasses.replace(release, refuses=refused)
        for (version, release), refused in zip(_RELEASES.items(), _refused(_RELEASES).values(), strict=True)
    },
    marks=MARKS,
    other_names=OTHER_NAMES,
)
