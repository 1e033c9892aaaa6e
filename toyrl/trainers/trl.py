"""TRL's `GRPOTrainer` settings on the toy (trl 1.16.0: trl/trainer/grpo_config.py, and
grpo_trainer.py's advantage computation and `_compute_loss`).

What the mapping follows, per setting:
- `scale_rewards`: "group" (or True) divides r - group mean by the group's sample std + 1e-4,
  "batch" by the whole batch's, "none" (or False) not at all;
- `loss_type`: "grpo" averages each response's token losses, then over responses
  (seq_mean_token_mean); "dr_grpo" divides the batch's token-loss sum by N max_completion_length
  (seq_mean_token_sum_norm, whose constant only rescales the learning rate; the toy keeps its own,
  the cap); "dapo" (the default) divides by the active tokens of the whole generation batch
  (token_mean; with several optimiser steps per generation, each divides by the generation batch's
  tokens over their number: batch_tokens); "bnpo" by those of each micro-batch (per_micro_batch);
- `epsilon`, `epsilon_high`, `num_iterations`: PPO's clip and epochs; `delta` (at least
  1 + epsilon_high): the dual clip; `beta`: k3 in the loss, times the ratio with
  `use_bias_correction_kl` (the default: ratio_weighted);
- `steps_per_generation` / `gradient_accumulation_steps`: optimiser steps per generated batch,
  which TRL shuffles once and keeps in that order for every iteration (shuffle=once); each step
  accumulates gradient_accumulation_steps micro-batches (micro_batches, for bnpo);
  `mask_truncated_completions`: truncated completions out of the loss;
- `importance_sampling_level="sequence"`: GSPO's sequence ratio (objective=gspo, TRL's clip range);
- `loss_type="cispo"`: the weight clamp(rho, max=epsilon_high), detached, normalised as dapo
  (objective=cispo with no lower bound, epsilon_high one less than TRL's cap); `"sapo"`: the soft
  gate at sapo_temperature_pos / _neg, normalised as grpo (objective=sapo); `"luspo"`: PPO's clip
  (GSPO's with the sequence level), each completion's token sum averaged (seq_mean_token_sum);
  `"vespo"`: the Gamma weight of the sequence ratio at vespo_k_pos / _lambda_pos / _k_neg /
  _lambda_neg, detached, normalised as dapo (objective=vespo);
- `num_generations`: the group size G.
"""

from __future__ import annotations

from typing import Any

from toyrl.config import InvalidInput
from toyrl.trainers import (
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
)

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
AGGREGATION = {
    "grpo": "seq_mean_token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
    "dapo": "token_mean",
    "bnpo": "token_mean",
    "cispo": "token_mean",  # normalised as dapo: the generation batch's tokens
    "sapo": "seq_mean_token_mean",  # as grpo: each completion's mean
    "luspo": "seq_mean_token_sum",  # each completion's token sum, averaged over completions
    "vespo": "token_mean",  # normalised as dapo
}
OWN_OBJECTIVE = ("cispo", "sapo", "vespo")  # their own per-token objective, not PPO's clip (nor delta)
ADVANTAGE = {"group": "group_std_sample", "batch": "batch_std", "none": "none"}

SETTINGS_1_16_0 = {
    "loss_type": Setting("dapo", LOSS_TYPES),
    "scale_rewards": Setting("group", ("group", "batch", "none", True, False)),
    "beta": Setting(0.0, kind=float, low=0.0),
    "epsilon": Setting(0.2, kind=float, low=0.0, high=10.0),
    "epsilon_high": Setting(None, kind=float, low=0.0, high=10.0, optional=True),
    "num_iterations": Setting(1, kind=int, low=1, high=64),
    "mask_truncated_completions": Setting(False, kind=bool),
    "num_generations": Setting(8, kind=int, low=2, high=10_000),
    "max_completion_length": Setting(512, kind=int, low=1, optional=True),
    "importance_sampling_level": Setting("token", ("token", "sequence")),
    "delta": Setting(None, kind=float, low=0.0, optional=True),
    "top_entropy_quantile": Setting(1.0, kind=float, low=0.0, high=1.0),
    "entropy_coef": Setting(0.0, kind=float),
    "use_bias_correction_kl": Setting(True, kind=bool),
    "gradient_accumulation_steps": Setting(1, kind=int, low=1),
    "steps_per_generation": Setting(None, kind=int, low=1, optional=True),
    "max_grad_norm": Setting(1.0, kind=float, low=0.0),
    "per_device_train_batch_size": Setting(8, kind=int, low=1),
    "sapo_temperature_pos": Setting(1.0, kind=float, low=0.0, high=1000.0),
    "sapo_temperature_neg": Setting(1.05, kind=float, low=0.0, high=1000.0),
    "vespo_k_pos": Setting(2.0, kind=float, low=0.0, high=1000.0),
    "vespo_lambda_pos": Setting(3.0, kind=float, low=0.0, high=1000.0),
    "vespo_k_neg": Setting(3.0, kind=float, low=0.0, high=1000.0),
    "vespo_lambda_neg": Setting(2.0, kind=float, low=0.0, high=1000.0),
}
VESPO_KEYS = ("k_pos", "lambda_pos", "k_neg", "lambda_neg")


SETTINGS_0_22 = {
    key: setting
    for key, setting in SETTINGS_1_16_0.items()
    if key not in ("use_bias_correction_kl", "entropy_coef", "sapo_temperature_pos", "sapo_temperature_neg")
    and not key.startswith("vespo_")
} | {"loss_type": Setting("dapo", ("grpo", "bnpo", "dr_grpo", "dapo"))}

# TRL 0.22.0 and 0.22.1 swap scale_rewards in `_generate_and_score_completions`: "group" (the
# default) computes the batch's std and divides by nothing, "batch" and "none" divide by the
# group's std (fixed in 0.22.2).
SWAPPED_0_22 = {"group": "none", "batch": "group", "none": "group"}


def _mapping_0_22(s: dict[str, Any]) -> ToyMapping:
    scale = {True: "group", False: "none"}.get(s["scale_rewards"], s["scale_rewards"])
    newer = {"scale_rewards": SWAPPED_0_22[scale], "use_bias_correction_kl": False, "entropy_coef": 0.0}
    mapped = _mapping(s | newer)  # 0.22 has neither the ratio-weighted KL nor the entropy bonus
    mapped.notes.append(
        f"scale_rewards={s['scale_rewards']!r}: this release's code swaps the modes, so it "
        f"{'divides by the group std' if SWAPPED_0_22[scale] == 'group' else 'divides by nothing'} "
        "(fixed in 0.22.2)"
    )
    if s["loss_type"] == "dapo" and s["mask_truncated_completions"]:
        mapped.unmodelled.append(
            "dapo with mask_truncated_completions: this release counts the truncated completions' tokens "
            "in the normaliser; the toy counts the tokens in the loss"
        )
    return mapped


def _own_objective(s: dict[str, Any]) -> list[str]:
    """The spec items of loss_type cispo (its weight clamp(rho, max=epsilon_high), detached: toyrl's
    cispo with no lower bound and cap 1 + epsilon_high), sapo (its gate's temperatures) or vespo
    (its Gamma weight's k and lambda; its sequence ratio is its own whatever the level says)."""
    loss = s["loss_type"]
    if loss == "vespo":
        spec = ["objective=vespo"]
        for key in VESPO_KEYS:
            if s["vespo_" + key] != SETTINGS_1_16_0["vespo_" + key].default:
                spec.append(f"{key}={s['vespo_' + key]}")
        return spec
    if s["importance_sampling_level"] == "sequence":
        raise not_modelled(
            "importance_sampling_level",
            "sequence",
            ["token"],
            f"with loss_type={loss!r}: toyrl's {loss} is per token",
        )
    if loss == "sapo":
        spec = ["objective=sapo"]
        for key, field in (("sapo_temperature_pos", "tau_pos"), ("sapo_temperature_neg", "tau_neg")):
            if s[key] != SETTINGS_1_16_0[key].default:
                spec.append(f"{field}={s[key]}")
        return spec
    cap = s["epsilon"] if s["epsilon_high"] is None else s["epsilon_high"]
    if cap <= 1:
        raise InvalidInput(
            f"loss_type='cispo' caps each token's weight at epsilon_high (or epsilon when it is None) = "
            f"{cap:g}, not above the on-policy ratio 1: even the first update's weights are {cap:g}, which "
            "toyrl's cispo does not model; set epsilon_high above 1 (TRL recommends 5.0)"
        )
    return ["objective=cispo", f"epsilon_high={cap - 1:g}"]


def _mapping(s: dict[str, Any]) -> ToyMapping:
    loss = s["loss_type"]
    if loss not in AGGREGATION:
        raise not_modelled("loss_type", loss, AGGREGATION)
    # GSPO: one ratio a completion (vespo takes its own sequence weight from the token ratios)
    sequence = s["importance_sampling_level"] == "sequence" and loss != "vespo"
    scale = {True: "group", False: "none"}.get(s["scale_rewards"], s["scale_rewards"])
    spec = [f"advantage={ADVANTAGE[scale]}", f"aggregation={AGGREGATION[loss]}"]
    notes: list[str] = []
    if scale != "none":
        spec.append("std_eps=0.0001")
    ppo = ppo_spec(
        s["epsilon"], s["epsilon_high"], s["num_iterations"], s["beta"], s["mask_truncated_completions"]
    )
    if loss in OWN_OBJECTIVE:
        spec += [item for item in ppo if not item.startswith("epsilon")] + _own_objective(s)
    else:
        spec += ppo
    if sequence:
        spec.append("objective=gspo")
        if s["epsilon_high"] is None:  # gspo's own default is not epsilon: spell TRL's
            spec.append(f"epsilon_high={s['epsilon']}")

    unmodelled = []
    if loss == "vespo" and s["importance_sampling_level"] == "sequence":
        unmodelled.append(
            "importance_sampling_level='sequence' with loss_type='vespo': VESPO's weight is its own sequence "
            "ratio either way; only the KL term's bias correction takes the level's ratio (TRL warns)"
        )
    if loss == "luspo" and not sequence:
        notes.append(
            "loss_type='luspo' with importance_sampling_level='token': PPO's token ratios, each completion's "
            "token sum (LUSPO's paper and TRL recommend 'sequence')"
        )
    if loss == "dr_grpo":
        unmodelled.append(
            constant_note("max_completion_length", s["max_completion_length"], "dr_grpo's constant")
        )
    # The generation batch (shuffled once) is cut into steps_per_generation micro-batches; an
    # optimiser step accumulates gradient_accumulation_steps of them. Only bnpo's normaliser is the
    # micro-batch's; the others' are the optimiser step's, which micro-batches do not change.
    accumulation = s["gradient_accumulation_steps"]
    steps = s["steps_per_generation"] or accumulation
    schedule, notes_of_schedule = schedule_spec(
        steps,
        accumulation,
        "once",
        "steps_per_generation / gradient_accumulation_steps",
        micro_batches=accumulation if loss == "bnpo" else 1,
    )
    spec += schedule
    unmodelled += notes_of_schedule
    if loss == "bnpo" and accumulation > 1:
        spec.append("per_micro_batch=True")
    if loss in ("dapo", "cispo", "vespo") and steps // accumulation > 1:
        # num_items_in_batch counts the generation batch's tokens: each step divides by its share
        spec.append("batch_tokens=True")
    delta, high = s["delta"], s["epsilon_high"] if s["epsilon_high"] is not None else s["epsilon"]
    if delta is not None and loss in OWN_OBJECTIVE:
        unmodelled.append(f"delta={delta}: TRL applies it to PPO's clip only, not to {loss}; left out")
    elif delta is not None and sequence:
        unmodelled.append(f"delta={delta} with the sequence ratio: the toy's gspo has no cap; left out")
    elif delta is not None and delta >= 1 + high:  # ratios capped at delta: dual-clip PPO's c
        spec.append(f"dual_clip={delta}")
    elif delta is not None:
        unmodelled.append(
            f"delta={delta} < 1 + epsilon_high: the cap also zeroes positive advantages' tokens between "
            "delta and 1 + epsilon_high; the toy's dual clip acts on negative ones only"
        )
    if s["top_entropy_quantile"] < 1:
        unmodelled.append(f"top_entropy_quantile={s['top_entropy_quantile']}: the toy has no token entropies")
    if s["entropy_coef"] != 0:
        unmodelled.append(f"entropy_coef={s['entropy_coef']}: the toy has no entropy bonus")
    if s["beta"] > 0 and s["use_bias_correction_kl"] and sequence:
        unmodelled.append(
            "use_bias_correction_kl with the sequence ratio: TRL multiplies each token's k3 by the "
            "sequence's ratio, the toy's ratio_weighted by the token's; the plain k3 is taken"
        )
    elif s["beta"] > 0 and s["use_bias_correction_kl"]:  # the k3 term times the differentiable ratio
        spec.append("ratio_weighted=True")
    if s["max_grad_norm"] > 0:
        unmodelled.append(grad_clip_note("max_grad_norm", s["max_grad_norm"]))
    step = s["per_device_train_batch_size"] * accumulation  # completions of one optimiser step (one process)
    group = {"group_size": ("num_generations", s["num_generations"])}
    return ToyMapping(",".join(spec), group, unmodelled, notes, step_responses=step)


# Names of `trl grpo --config FILE.yaml` files that only TRL has: its script, model and dataset
# arguments (trl/scripts/utils.py ScriptArguments, trl/trainer/model_config.py ModelConfig) and
# transformers' TrainingArguments, which GRPOConfig extends.
MARKS = (
    "model_name_or_path",
    "dataset_name",
    "dataset_config",
    "dataset_train_split",
    "dataset_test_split",
    "reward_funcs",
    "reward_weights",
    "use_vllm",
    "vllm_mode",
    "output_dir",
    "lr_scheduler_type",
    "warmup_ratio",
    "report_to",
    "run_name",
    "push_to_hub",
)
# GRPOConfig's and TrainingArguments' names spelt close to the ones toyrl reads.
OTHER_NAMES = frozenset(
    {
        "entropy_coef_delta",
        "entropy_coef_max",
        "entropy_coef_min",
        "eval_accumulation_steps",
        "num_generations_eval",
        "per_device_eval_batch_size",
        "per_gpu_train_batch_size",
    }
)

# Dr. GRPO's settings (0.22's code swaps scale_rewards' modes: every value is tried)
DR_GRPO: dict[str, Levers] = {
    "loss_type": ("dr_grpo",),
    "scale_rewards": ("none", "group", "batch"),
    "mask_truncated_completions": (False,),
    "importance_sampling_level": ("token",),
}

TRAINER = Trainer(
    name="TRL",
    distribution="trl",
    releases={
        "1.16.0": Release(
            SETTINGS_1_16_0,
            "trl/trainer/grpo_config.py, trl/trainer/grpo_trainer.py (_compute_loss, advantages)",
            _mapping,
            dr_grpo=DR_GRPO,
        ),
        **{
            version: Release(
                SETTINGS_0_22,
                "trl/trainer/grpo_config.py, trl/trainer/grpo_trainer.py (_compute_loss, "
                "_generate_and_score_completions)",
                _mapping_0_22,
                dr_grpo=DR_GRPO,
            )
            for version in ("0.22.1", "0.22.0")
        },
    },
    marks=MARKS,
    other_names=OTHER_NAMES,
)
