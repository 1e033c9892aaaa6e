"""ms-swift's GRPO settings on the toy (ms-swift 4.6.0: swift/arguments/rlhf_args.py `RLHFArguments`
and its defaults, swift/rlhf_trainers/args_mixin.py `GRPOArgumentsMixin` and
`_init_generation_batch_params`, swift/rl_core/advantage.py `compute_advantages`,
swift/rlhf_trainers/grpo_trainer.py `_compute_loss_and_metrics`, `_prepare_batch_inputs` and
`_prepare_inputs`, swift/rewards/orm.py `SoftOverlong`). Settings are `swift rlhf`'s flags
without their dashes.

What the mapping follows:
- `rlhf_type` "grpo" (`swift rlhf`'s own default is "dpo": a launch line without it is not GRPO);
- `advantage_estimator` "grpo" (r - group mean), "rloo" (leave-one-out: (r - mean) G / (G - 1)) or
  "reinforce_plus_plus" (r - group mean); `scale_rewards` (default by the estimator: "group",
  "none", "batch") divides by the group's sample std + 1e-4 ("group"), or by the batch's rewards'
  sample std + 1e-4 (grpo "batch": batch_std), or, for reinforce_plus_plus "batch", by the sample
  std of the group-centred advantages over the batch (batch_whiten: their mean is 0); "gdpo"
  whitens each reward function over the batch after its group (no toyrl stage);
- `kl_in_reward` (default: False for grpo, True for rloo and reinforce_plus_plus): the k1 KL to
  the reference subtracted from the reward (no toyrl stage, where beta > 0); otherwise `beta`
  (0.04 for GRPO) is k3 in the loss, clamped (log-ratio to [-20, 20], the term to [-10, 10]),
  aggregated as the policy loss, never times the ratio;
- `loss_type`: "grpo" (the default) and "sapo" average each response's token mean over the
  micro-batch (seq_mean_token_mean); "bnpo" the micro-batch's token mean (per_micro_batch);
  "dr_grpo" the micro-batch's token sum / (its responses x max_completion_length)
  (seq_mean_token_sum_norm); "dapo" and "cispo" divide by the tokens of the whole generation batch
  (`num_items_in_batch`, all steps_per_generation micro-batches of every process: token_mean, and
  with several optimiser steps a generation each divides by all of them: batch_tokens times a
  learning rate that many times smaller); "fipo" and "real" have no toyrl stage;
- `epsilon`, `epsilon_high` (default epsilon), `delta` (the ratio clamped at delta before PPO's
  min: a dual clip where delta >= 1 + epsilon_high), `num_iterations`;
  `importance_sampling_level` "sequence" (GSPO's ratio) and "sequence_token" (GSPO-token: the
  same gradient, every token of a response having its advantage); `tau_pos` / `tau_neg` (sapo);
  cispo's weight clamp(ratio, max=epsilon_high), detached (toyrl's cispo, epsilon_high one less);
- the schedule: the generation batch is per_device_train_batch_size x steps_per_generation
  responses a process (steps_per_generation defaults to gradient_accumulation_steps, 1 for GRPO;
  generation_batch_size is the other way to set it), cut in its own order (groups together, no
  shuffle: `_split_data_by_steps`) into steps_per_generation micro-batches, the same ones again at
  each of num_iterations; an optimiser step accumulates gradient_accumulation_steps of them;
- `overlong_filter`: truncated responses out of the loss; `reward_funcs` naming `soft_overlong`
  (-(L - (soft_max_length - soft_cache_length)) / soft_cache_length below 0, no floor) beside the
  task's reward (the toy's 0/1 correctness): the toy's soft_overlong reward;
- `num_generations`: the group size G.
"""

from __future__ import annotations

from typing import Any

from toyrl.config import InvalidInput
from toyrl.trainers import (
    Entry,
    Levers,
    Release,
    Setting,
    ToyMapping,
    Trainer,
    constant_note,
    grad_clip_note,
    not_modelled,
    ppo_spec,
    schedule_spec,
    soft_overlong_spec,
)
from toyrl.trainers.launch import Launch, read_flags
from toyrl.trainers.shell import Word
from toyrl.trainers.trl import CLIP_LIMIT, Names, beyond_bound, clip_range

RLHF_TYPES = ("dpo", "orpo", "simpo", "kto", "cpo", "rm", "ppo", "grpo", "gkd")
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "fipo", "real")
AGGREGATION = {
    "grpo": "seq_mean_token_mean",
    "sapo": "seq_mean_token_mean",
    "bnpo": "token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
    "dapo": "token_mean",  # the generation batch's tokens (WINDOW_NORMALIZED_LOSS_TYPES)
    "cispo": "token_mean",
}
WINDOW_NORMALIZED = ("dapo", "cispo")
OWN_OBJECTIVE = ("cispo", "sapo")
# rlhf_args.py `_init_grpo`: scale_rewards and kl_in_reward by advantage_estimator
DEFAULT_SCALE = {"grpo": "group", "rloo": "none", "reinforce_plus_plus": "batch"}
SOFT_OVERLONG = "soft_overlong"
# swift/rewards/orm.py: the built-in reward functions whose reward depends on the response's
# length, besides soft_overlong
LENGTH_REWARDS = ("cosine", "repetition")

SETTINGS_4_6_0 = {
    "rlhf_type": Setting("grpo", RLHF_TYPES),
    "loss_type": Setting("grpo", LOSS_TYPES),
    "advantage_estimator": Setting("grpo", ("grpo", "rloo", "reinforce_plus_plus")),
    "scale_rewards": Setting(None, ("group", "batch", "none", "gdpo"), optional=True),
    "kl_in_reward": Setting(None, kind=bool, optional=True),
    "beta": Setting(0.04, kind=float, low=0.0),
    "epsilon": Setting(0.2, kind=float),
    "epsilon_high": Setting(None, kind=float, optional=True),
    "delta": Setting(None, kind=float, optional=True),
    "num_iterations": Setting(1, kind=int, low=1, high=64),
    # 1 only with a teacher (on-policy distillation); GRPO's check is `_mapping`'s
    "num_generations": Setting(8, kind=int, low=1, high=10_000),
    "max_completion_length": Setting(512, kind=int, low=1),
    "per_device_train_batch_size": Setting(1, kind=int, low=1),
    "gradient_accumulation_steps": Setting(1, kind=int, low=1),  # `_set_default`: 1 for GRPO
    "steps_per_generation": Setting(None, kind=int, low=1, optional=True),
    "generation_batch_size": Setting(None, kind=int, low=1, optional=True),
    "importance_sampling_level": Setting("token", ("token", "sequence", "sequence_token")),
    "tau_pos": Setting(1.0, kind=float, low=0.0, high=1000.0),
    "tau_neg": Setting(1.05, kind=float, low=0.0, high=1000.0),
    "overlong_filter": Setting(False, kind=bool),
    "dynamic_sample": Setting(False, kind=bool),
    "top_entropy_quantile": Setting(1.0, kind=float, low=0.0, high=1.0),
    "reward_funcs": Names(None, kind=str, optional=True),
    "reward_weights": Names(None, kind=float, optional=True),
    "soft_max_length": Setting(None, kind=int, low=1, optional=True),
    "soft_cache_length": Setting(None, kind=int, low=1, optional=True),
    "off_policy_sequence_mask_delta": Setting(None, kind=float, optional=True),
    "advantage_reweight": Setting(None, ("rlsd",), optional=True),
    "sdar_loss_coef": Setting(0.0, kind=float, low=0.0),
    "teacher_model": Setting(None, kind=str, optional=True),
    "max_grad_norm": Setting(1.0, kind=float, low=0.0),
}
# `_init_max_completion_length`: the older names of max_completion_length
ALIASES = {
    "max_new_tokens": ("max_completion_length", "ms-swift's compatibility name"),
    "response_length": ("max_completion_length", "ms-swift's compatibility name (PPO's)"),
}


def _advantage(s: dict[str, Any], scale: str) -> list[str]:
    """The spec items of the advantage (swift/rl_core/advantage.py `compute_advantages`)."""
    estimator = s["advantage_estimator"]
    if scale == "gdpo":
        raise not_modelled(
            "scale_rewards",
            "gdpo",
            ["group", "batch", "none"],
            "each reward function normalised in its group, then the sum whitened over the batch",
        )
    if estimator == "rloo" and scale != "none":
        raise not_modelled(
            "scale_rewards",
            scale,
            ["none"],
            f"with advantage_estimator='rloo': the leave-one-out advantage over the {scale}'s reward std",
        )
    if estimator == "rloo":
        return ["advantage=rloo"]
    if scale == "none":
        return ["advantage=none"]
    if estimator == "reinforce_plus_plus" and scale == "batch":
        return ["advantage=batch_whiten", "std_eps=0.0001"]
    return [f"advantage={'batch_std' if scale == 'batch' else 'group_std_sample'}", "std_eps=0.0001"]


def _objective(s: dict[str, Any], on_policy: bool, notes: list[str]) -> tuple[list[str], float, float | None]:
    """The spec items of the loss's per-token objective, and the toy's clip range: PPO's clip
    (GSPO's at the sequence levels), cispo's detached weight clamp(ratio, max=epsilon_high), or
    sapo's gate at tau_pos / tau_neg."""
    loss, level = s["loss_type"], s["importance_sampling_level"]
    if loss in OWN_OBJECTIVE and level != "token":
        raise not_modelled(
            "importance_sampling_level",
            level,
            ["token"],
            f"with loss_type={loss!r}: toyrl's {loss} is per token",
        )
    if loss == "sapo":
        spec = ["objective=sapo"]
        for key in ("tau_pos", "tau_neg"):
            if s[key] != SETTINGS_4_6_0[key].default:
                spec.append(f"{key}={s[key]}")
        return spec, s["epsilon"], s["epsilon_high"]
    if loss == "cispo":
        cap = s["epsilon"] if s["epsilon_high"] is None else s["epsilon_high"]
        if cap <= 1:
            raise InvalidInput(
                f"loss_type='cispo' caps each token's weight at epsilon_high (or epsilon when it is None) = "
                f"{cap:g}, not above the on-policy ratio 1: even the first update's weights are {cap:g}, "
                "which toyrl's cispo does not model; set epsilon_high above 1"
            )
        if cap - 1 >= CLIP_LIMIT and not on_policy:
            raise beyond_bound("epsilon_high", cap, cap)
        spec = ["objective=cispo"] + ([] if cap - 1 >= CLIP_LIMIT else [f"epsilon_high={cap - 1:g}"])
        return spec, s["epsilon"], s["epsilon_high"]
    low, high = clip_range(s, on_policy, notes)
    spec = []
    if level != "token":
        spec.append("objective=gspo")
        if s["epsilon_high"] is None and high is not None:  # gspo's own default is not epsilon
            spec.append(f"epsilon_high={high}")
    if level == "sequence_token":
        notes.append(
            "importance_sampling_level='sequence_token' (GSPO-token): the sequence's ratio, detached, times "
            "each token's; with one advantage a response its gradient is GSPO's (GSPO paper, section 4.3)"
        )
    return spec, low, high


def _reward(s: dict[str, Any], notes: list[str], unmodelled: list[str]) -> list[str]:
    """The spec items of the reward functions: soft_overlong beside the task's reward (its weight
    from reward_weights, the task's the others' sum) as the toy's soft_overlong reward."""
    funcs = s["reward_funcs"] or []
    for name in funcs:
        if name in LENGTH_REWARDS:
            raise not_modelled(
                "reward_funcs",
                name,
                [SOFT_OVERLONG, "the task's rewards"],
                "a reward of the response's length",
            )
    weights = s["reward_weights"]
    if weights is not None and len(weights) != len(funcs):
        unmodelled.append(
            f"reward_weights: {len(weights)} weights for {len(funcs)} reward functions (a reward model is "
            "weighed last); the weights are left out"
        )
        weights = None
    weights = weights if weights is not None else [1.0] * len(funcs)
    overlong = sum(w for name, w in zip(funcs, weights, strict=True) if name == SOFT_OVERLONG)
    task = sum(weights) - overlong
    if SOFT_OVERLONG not in funcs:
        return []
    if task <= 0:
        raise InvalidInput(
            f"reward_funcs={funcs} weighs the task's reward {task:g}: the toy's reward is 0/1 correctness; "
            f"valid: a reward function beside {SOFT_OVERLONG!r}, of positive weight"
        )
    cache = s["soft_cache_length"]
    if cache is None:
        raise InvalidInput(
            "reward_funcs names 'soft_overlong' without soft_cache_length, which ms-swift requires "
            "(rlhf_args.py `_init_grpo`); valid: soft_cache_length below soft_max_length"
        )
    longest = s["max_completion_length"]
    soft_max = longest if s["soft_max_length"] is None else s["soft_max_length"]
    if cache >= soft_max:
        raise InvalidInput(
            f"soft_cache_length={cache} is not below soft_max_length={soft_max}, which ms-swift's "
            "SoftOverlong asserts; valid: soft_cache_length < soft_max_length"
        )
    start = soft_max - cache
    if longest <= start:
        notes.append(
            f"reward_funcs soft_overlong: punishes responses past {start} tokens, and "
            f"max_completion_length={longest} stops them before: it never applies"
        )
        return []
    return soft_overlong_spec(longest, start, cache, overlong, task)


def _mapping(s: dict[str, Any]) -> ToyMapping:
    if s["rlhf_type"] != "grpo":
        raise not_modelled("rlhf_type", s["rlhf_type"], ["grpo"], "toyrl checks GRPO's loss")
    loss = s["loss_type"]
    if loss not in AGGREGATION:
        raise not_modelled("loss_type", loss, AGGREGATION)
    for key, what in (
        (
            "teacher_model",
            "on-policy distillation (OPD-RL): the teacher's log-ratio in each token's advantage",
        ),
        ("advantage_reweight", "RLSD: each token's advantage reweighted by a teacher's log-probs"),
    ):
        if s[key] is not None:
            raise not_modelled(key, s[key], [None], what)
    if s["num_generations"] == 1:  # rlhf_args.py `_check_teacher`
        raise InvalidInput(
            "num_generations=1: ms-swift refuses it for GRPO without a teacher; valid: 2 or more"
        )
    estimator = s["advantage_estimator"]
    scale = s["scale_rewards"] or DEFAULT_SCALE[estimator]
    kl_in_reward = s["kl_in_reward"] if s["kl_in_reward"] is not None else estimator != "grpo"
    if kl_in_reward and s["beta"] > 0:
        raise not_modelled(
            "kl_in_reward",
            True,
            [False],
            f"with beta={s['beta']} and advantage_estimator={estimator!r}: the k1 KL to the reference "
            "subtracted from each reward",
        )
    notes: list[str] = []
    unmodelled: list[str] = []
    spec = [*_advantage(s, scale), f"aggregation={AGGREGATION[loss]}"]
    per_device, accumulation = s["per_device_train_batch_size"], s["gradient_accumulation_steps"]
    steps = s["steps_per_generation"]
    if steps is None and s["generation_batch_size"] is not None:  # one process: NPROC_PER_NODE is not read
        steps = max(1, s["generation_batch_size"] // per_device)
    steps = steps or accumulation
    on_policy = s["num_iterations"] == 1 and steps // accumulation <= 1
    objective, low, high = _objective(s, on_policy, notes)
    beta = s["beta"] if not kl_in_reward else 0.0
    ppo = ppo_spec(low, high, s["num_iterations"], beta, s["overlong_filter"])
    spec += [item for item in ppo if not item.startswith("epsilon")] if loss in OWN_OBJECTIVE else ppo
    spec += objective
    spec += _reward(s, notes, unmodelled)
    if beta > 0:
        notes.append(
            f"beta={beta}: k3 to the reference in the loss (ms-swift's default for GRPO is 0.04), its "
            "log-ratio clamped to [-20, 20] and the term to [-10, 10], aggregated as the policy loss"
        )
    if loss == "dr_grpo":
        unmodelled.append(
            constant_note("max_completion_length", s["max_completion_length"], "dr_grpo's constant")
        )
    schedule, notes_of_schedule = schedule_spec(
        steps,
        accumulation,
        "none",
        "steps_per_generation / gradient_accumulation_steps",
        micro_batches=accumulation if loss == "bnpo" else 1,
    )
    spec += schedule
    unmodelled += notes_of_schedule
    if loss == "bnpo" and accumulation > 1:
        spec.append("per_micro_batch=True")
    if loss in WINDOW_NORMALIZED and steps // accumulation > 1:
        spec.append("batch_tokens=True")
        unmodelled.append(
            f"{loss} over {steps // accumulation} optimiser steps a generation: ms-swift divides each by all "
            "the generation batch's tokens, not its share: a learning rate that many times smaller; left out"
        )
    delta = s["delta"]
    if delta is not None and loss in OWN_OBJECTIVE:
        unmodelled.append(f"delta={delta}: ms-swift applies it to PPO's clip only, not to {loss}; left out")
    elif delta is not None and s["importance_sampling_level"] != "token":
        unmodelled.append(f"delta={delta} with the sequence ratio: the toy's gspo has no cap; left out")
    elif delta is not None and delta >= 1 + (high if high is not None else low):
        spec.append(f"dual_clip={delta}")
    elif delta is not None:
        unmodelled.append(
            f"delta={delta} < 1 + epsilon_high: the cap also zeroes positive advantages' tokens between "
            "delta and 1 + epsilon_high; the toy's dual clip acts on negative ones only"
        )
    for key, default, what in (
        ("dynamic_sample", False, "resamples groups of equal rewards up to max_resample_times rounds"),
        (
            "top_entropy_quantile",
            1.0,
            "keeps the tokens of highest entropy only; the toy has no token entropies",
        ),
        ("off_policy_sequence_mask_delta", None, "masks responses far from the sampler with A < 0"),
        ("sdar_loss_coef", 0.0, "a teacher-distillation term in the loss"),
    ):
        if s[key] != default:
            unmodelled.append(f"{key}={s[key]}: {what}; left out")
    if s["max_grad_norm"] > 0:
        unmodelled.append(grad_clip_note("max_grad_norm", s["max_grad_norm"]))
    notes.append(
        "one process: NPROC_PER_NODE multiplies the responses of a generation and of an optimiser step, "
        "not their number"
    )
    group = {"group_size": ("num_generations", s["num_generations"])}
    return ToyMapping(",".join(spec), group, unmodelled, notes, step_responses=per_device * accumulation)


def _read_launch(words: list[Word], origin: str) -> Launch:
    """`swift rlhf`'s flags as argparse reads them; without --rlhf_type, swift's default 'dpo'."""
    launch = read_flags(words, origin, "ms-swift")
    launch.settings.setdefault("rlhf_type", "dpo")
    return launch


# Names of `swift rlhf`'s arguments that only ms-swift has (swift/arguments, rlhf_trainers/args_mixin.py)
MARKS = (
    "rlhf_type",
    "tuner_type",
    "train_type",
    "external_plugins",
    "sleep_level",
    "offload_model",
    "offload_optimizer",
    "move_model_batches",
    "split_dataset_ratio",
    "vllm_max_model_len",
    "overlong_filter",
    "soft_cache_length",
    "kl_in_reward",
    "tau_pos",
    "tau_neg",
)
# ms-swift's names spelt close to the ones toyrl reads
OTHER_NAMES = frozenset(
    {
        "num_generations_eval",
        "per_device_eval_batch_size",
        "reward_model",
        "reward_model_plugin",
        "max_resample_times",
        "teacher_model_type",
        "teacher_model_server",
        "real_tau",
        "max_length",
    }
)
DR_GRPO: dict[str, Levers] = {
    "loss_type": ("dr_grpo",),
    "scale_rewards": ("none",),
    "advantage_estimator": ("grpo",),
    "overlong_filter": (False,),
    "importance_sampling_level": ("token",),
}


TRAINER = Trainer(
    name="ms-swift",
    distribution="ms-swift",
    releases={
        "4.6.0": Release(
            SETTINGS_4_6_0,
            "swift/arguments/rlhf_args.py, swift/rlhf_trainers/args_mixin.py, swift/rl_core/advantage.py, "
            "swift/rlhf_trainers/grpo_trainer.py (_compute_loss_and_metrics) of ms-swift 4.6.0",
            _mapping,
            aliases=ALIASES,
            dr_grpo=DR_GRPO,
        )
    },
    marks=MARKS,
    extends="trl",
    other_names=OTHER_NAMES,
    entries=(Entry(program=("swift", "rlhf"), read=_read_launch),),
)
