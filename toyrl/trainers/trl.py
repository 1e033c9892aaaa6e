"""TRL's `GRPOTrainer` settings on the toy, per release (each release's own
trl/trainer/grpo_config.py, grpo_trainer.py's advantage computation and `_compute_loss`, and
trl/scripts/grpo.py for what `trl grpo` takes besides GRPOConfig). `RELEASES` names, newest
first, one release for each behaviour of the settings toyrl reads, with what changed.

What the mapping follows, per setting (1.16.0; the releases' differences are in `RELEASES`):
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
- `num_generations`: the group size G;
- `reward_funcs` naming `get_soft_overlong_punishment` (trl/rewards; `trl grpo` builds it with
  max_completion_len=1280, soft_punish_cache=256: 0 up to 1024 tokens, then down by 1/256 a token,
  -1 beyond 1280), with the task's reward functions (the toy's 0/1 correctness) and
  `reward_weights`: the toy's soft_overlong reward (incorrect=0; its ramp over the toy's longest
  response as the punishment's over max_completion_length);
- `multi_objective_aggregation="normalize_then_sum"`: each reward function's rewards divided by
  their group's sample std + 1e-4 whatever scale_rewards says, summed, then divided by the batch's
  std (a factor common to the batch, left out).
"""

from __future__ import annotations

from functools import partial
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
    soft_overlong_spec,
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

# The releases modelled, newest first, each standing for the releases that behave alike for the
# settings toyrl reads (read in each release's own wheel): version -> (the releases, what changed
# from the one before).
RELEASES = {
    "1.16.0": ("1.10.0-1.16.0", "use_bias_correction_kl defaults to True, max_completion_length to 512"),
    "1.9.2": ("1.9.1-1.9.2", "dapo over several optimiser steps divides each by its share of the tokens"),
    "1.9.0": ("1.9.0", "dapo's normaliser leaves out the tokens of masked truncated completions"),
    "1.8.0": ("1.8.0", "entropy_coef"),
    "1.7.1": ("1.0.0-1.7.1", "loss_type vespo"),
    "0.29.1": ("0.28.0-0.29.1", "loss_type luspo"),
    "0.27.2": ("0.27.0-0.27.2", "multi_objective_aggregation"),
    "0.26.2": ("0.26.0-0.26.2", "loss_type cispo and sapo; use_bias_correction_kl, False by default"),
    "0.25.1": ("0.23.0-0.25.1", "trl grpo builds get_soft_overlong_punishment"),
    "0.22.2": ("0.22.2", "scale_rewards' modes as named"),
    "0.22.1": ("0.22.1", "as 0.22.0"),
    "0.22.0": ("0.22.0", "loss_type dapo, the default; scale_rewards 'group', 'batch' or 'none', swapped"),
    "0.21.0": ("0.20.0-0.21.0", "importance_sampling_level, top_entropy_quantile"),
    "0.19.1": ("0.19.0-0.19.1", "beta defaults to 0.0"),
    "0.18.0": ("0.18.0-0.18.2", "delta, steps_per_generation; the generation batch shuffled once"),
    "0.17.0": ("0.17.0", "loss_type grpo, bnpo (the default) or dr_grpo; mask_truncated_completions"),
    "0.16.1": ("0.16.0-0.16.1", "scale_rewards, epsilon, num_iterations; each micro-batch's token mean"),
    "0.15.2": ("0.15.0-0.15.2", "per_device_train_batch_size counts completions; reward_weights"),
    "0.14.0": ("0.14.0", "GRPOTrainer: each completion's token mean, the group std, on policy"),
}

OVERLONG = "get_soft_overlong_punishment"
# trl/scripts/grpo.py (0.23.0 on) registers get_soft_overlong_punishment(max_completion_len=1280,
# soft_punish_cache=256): 0 up to 1024 tokens, then down by 1/256 a token to -1 at 1280, -1 beyond.
OVERLONG_LONGEST, OVERLONG_CACHE = 1280, 256


class Names(Setting):
    """A list setting (`reward_funcs`, `reward_weights`): a list as a file gives it, or text from
    `--set` with its items separated by commas (brackets allowed); items of `kind`."""

    def describe(self) -> str:
        return f"a list of {self.kind.__name__}s" + (" or None" if self.optional else "")

    def parse(self, name: str, value: Any) -> Any:
        if isinstance(value, str) and value.strip().lower() not in ("none", "null"):
            value = [item.strip() for item in value.strip().strip("[]").split(",") if item.strip()]
        if value is None or isinstance(value, str):
            return Setting.parse(self, name, value)
        if not isinstance(value, list | tuple):
            raise InvalidInput(f"{name}={value!r} is not valid; valid: {self.describe()}")
        item = Setting(None, kind=self.kind)
        return [item.parse(name, entry) for entry in value]


SETTINGS_1_16_0 = {
    "loss_type": Setting("dapo", LOSS_TYPES),
    "scale_rewards": Setting("group", ("group", "batch", "none", True, False)),
    "beta": Setting(0.0, kind=float, low=0.0),
    # GRPOConfig checks neither: the mapping says what the toy makes of any value (`clip_range`)
    "epsilon": Setting(0.2, kind=float),
    "epsilon_high": Setting(None, kind=float, optional=True),
    "num_iterations": Setting(1, kind=int, low=1, high=64),
    "mask_truncated_completions": Setting(False, kind=bool),
    "num_generations": Setting(8, kind=int, low=2, high=10_000),  # GRPOConfig: "at least 2 generations"
    "max_completion_length": Setting(512, kind=int, low=1, optional=True),
    "importance_sampling_level": Setting("token", ("token", "sequence")),
    "delta": Setting(None, kind=float, optional=True),
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
    "multi_objective_aggregation": Setting(
        "sum_then_normalize", ("sum_then_normalize", "normalize_then_sum")
    ),
    "reward_weights": Names(None, kind=float, optional=True),
    # `trl grpo`'s script arguments (trl/scripts/grpo.py GRPOScriptArguments): the reward model
    # comes first among the reward functions
    "reward_model_name_or_path": Setting(None, kind=str, optional=True),
    "reward_funcs": Names(None, kind=str, optional=True),
}
VESPO_KEYS = ("k_pos", "lambda_pos", "k_neg", "lambda_neg")

# The first release with each setting (the others: 0.14.0) and each loss type.
SINCE = {
    "loss_type": "0.17.0",
    "scale_rewards": "0.16.0",
    "epsilon": "0.16.0",
    "epsilon_high": "0.16.0",
    "num_iterations": "0.16.0",
    "mask_truncated_completions": "0.17.0",
    "importance_sampling_level": "0.20.0",
    "delta": "0.18.0",
    "top_entropy_quantile": "0.20.0",
    "entropy_coef": "1.8.0",
    "use_bias_correction_kl": "0.26.0",
    "steps_per_generation": "0.18.0",
    "sapo_temperature_pos": "0.26.0",
    "sapo_temperature_neg": "0.26.0",
    **{f"vespo_{key}": "1.0.0" for key in VESPO_KEYS},
    "multi_objective_aggregation": "0.27.0",
    "reward_weights": "0.15.0",
    "reward_funcs": "0.18.0",
}
LOSS_SINCE = {"dapo": "0.22.0", "cispo": "0.26.0", "sapo": "0.26.0", "luspo": "0.28.0", "vespo": "1.0.0"}


def _at(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def release_settings(version: str) -> dict[str, Setting]:
    """The settings of a release, with its defaults (its grpo_config.py; TrainingArguments' for the
    batch sizes and max_grad_norm, which GRPOConfig 0.14.0 overrides)."""
    at = _at(version)
    settings = {key: s for key, s in SETTINGS_1_16_0.items() if at >= _at(SINCE.get(key, "0.14.0"))}
    losses = tuple(loss for loss in LOSS_TYPES if at >= _at(LOSS_SINCE.get(loss, "0.17.0")))
    older = {
        "loss_type": Setting("dapo" if at >= (0, 22) else "bnpo", losses),
        "scale_rewards": SETTINGS_1_16_0["scale_rewards"] if at >= (0, 22) else Setting(True, (True, False)),
        "beta": Setting(0.0 if at >= (0, 19) else 0.04, kind=float, low=0.0),
        "max_completion_length": Setting(512 if at >= (1, 10) else 256, kind=int, low=1, optional=True),
        "use_bias_correction_kl": Setting(at >= (1, 10), kind=bool),
    }
    if at < (0, 15):  # per_device_train_batch_size counts prompts
        older |= {
            "per_device_train_batch_size": Setting(1, kind=int, low=1),
            "gradient_accumulation_steps": Setting(8, kind=int, low=1),
        }
    return settings | {key: s for key, s in older.items() if key in settings}


# TRL 0.22.0 and 0.22.1 swap scale_rewards in `_generate_and_score_completions`: "group" (the
# default) computes the batch's std and divides by nothing, "batch" and "none" divide by the
# group's std (fixed in 0.22.2).
SWAPPED_0_22 = {"group": "none", "batch": "group", "none": "group"}


CLIP_LIMIT = 10.0  # the toy's clip ranges stop below 1 + CLIP_LIMIT (toyrl.stages.objective)


def beyond_bound(name: str, value: float, bound: float) -> InvalidInput:
    """The one-line refusal of a bound on the ratio at `bound`, beyond the toy's clip ranges."""
    return InvalidInput(
        f"{name}={value:g} bounds the ratio at {bound:g}, beyond the toy's clip ranges (below "
        f"{1 + CLIP_LIMIT:g}), and ratios move here (num_iterations > 1 or several optimiser steps a "
        f"generation); valid here: a bound below {1 + CLIP_LIMIT:g}"
    )


def _own_objective(s: dict[str, Any], on_policy: bool) -> list[str]:
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
    if cap - 1 >= CLIP_LIMIT and on_policy:  # the weight is 1, below any cap: the toy's own cap
        return ["objective=cispo"]
    if cap - 1 >= CLIP_LIMIT:
        raise beyond_bound("epsilon_high", cap, cap)
    return ["objective=cispo", f"epsilon_high={cap - 1:g}"]


def clip_range(s: dict[str, Any], on_policy: bool, notes: list[str]) -> tuple[float, float | None]:
    """The toy's (epsilon, epsilon_high) of TRL's clamp(rho, 1 - epsilon, 1 + epsilon_high): a bound
    that cannot bind is no bound (epsilon >= 1: 1 - epsilon <= 0 < rho, the toy's epsilon 1; the
    upper bound on policy, where rho = 1: the toy's default)."""
    low, high = s["epsilon"], s["epsilon_high"]  # at or below 0: the toy's clip refuses it, as the user's
    upper = low if high is None else high
    if low >= 1:
        notes.append(f"epsilon={low:g}: the lower bound 1 - {low:g} <= 0 never binds (ratios are positive)")
        low = 1.0
    if upper >= CLIP_LIMIT and not on_policy:
        raise beyond_bound("epsilon_high" if high is not None else "epsilon", upper, 1 + upper)
    if upper >= CLIP_LIMIT:
        notes.append(f"epsilon_high={upper:g}: the upper bound never binds on policy (every ratio is 1)")
        return low, None
    return low, upper


def _weighed(s: dict[str, Any]) -> tuple[list[str], float, float]:
    """`trl grpo`'s reward functions (reward_model_name_or_path first, then reward_funcs), and the
    weights (reward_weights, else 1 each) of the task's (the toy's 0/1 correctness: every one but
    the overlong punishment) and of the overlong punishment."""
    funcs = [s["reward_model_name_or_path"]] if s.get("reward_model_name_or_path") else []
    funcs += s.get("reward_funcs") or []
    weights = s.get("reward_weights")
    if weights is not None and funcs and len(weights) != len(funcs):
        raise InvalidInput(
            f"reward_weights has {len(weights)} weights for {len(funcs)} reward functions "
            f"({', '.join(funcs)}); TRL refuses it; valid: one weight a function"
        )
    weights = weights if weights is not None and funcs else [1.0] * len(funcs)
    overlong = sum(w for name, w in zip(funcs, weights, strict=True) if name == OVERLONG)
    return funcs, sum(weights) - overlong, overlong


def _reward(s: dict[str, Any], version: str, notes: list[str]) -> list[str]:
    """The spec items of the reward functions: the soft overlong punishment as the toy's
    soft_overlong reward beside the task's reward, the toy's 0/1 correctness; nothing without it."""
    funcs, task, overlong = _weighed(s)
    if OVERLONG not in funcs:
        if task <= 0 and funcs:
            raise InvalidInput(
                f"reward_weights={s['reward_weights']}: the task's reward weighs {task:g}, so wrong answers "
                "would earn at least as much as right ones; valid: a positive total weight"
            )
        return []
    if _at(version) < (0, 23):
        raise InvalidInput(
            f"reward_funcs names {OVERLONG!r}, which TRL {version}'s trl grpo "
            + (
                "registers unbuilt, so its first reward call fails"
                if _at(version) >= (0, 22)
                else "does not know"
            )
            + "; valid from TRL 0.23.0"
        )
    if task <= 0:
        raise InvalidInput(
            f"reward_funcs={funcs} weighs the task's reward {task:g}: the toy's reward is 0/1 correctness; "
            f"valid: a reward function beside {OVERLONG!r}, of positive weight"
        )
    if s.get("multi_objective_aggregation") == "normalize_then_sum":
        raise not_modelled(
            "multi_objective_aggregation",
            "normalize_then_sum",
            ["sum_then_normalize"],
            f"with {OVERLONG}: each function's rewards are normalised in their group before the sum; "
            "the toy's soft_overlong sums first",
        )
    longest, start = s["max_completion_length"], OVERLONG_LONGEST - OVERLONG_CACHE
    if longest is None or longest > OVERLONG_LONGEST:
        raise InvalidInput(
            f"{OVERLONG} with max_completion_length={longest}: it gives -1 to every completion past "
            f"{OVERLONG_LONGEST} tokens, a floor the toy's ramp to its longest response does not have; "
            f"valid: max_completion_length up to {OVERLONG_LONGEST}"
        )
    if longest <= start:
        notes.append(
            f"reward_funcs {OVERLONG}: trl grpo's punishes completions past {start} tokens, and "
            f"max_completion_length={longest} stops them before: it never applies"
        )
        return []
    return soft_overlong_spec(longest, start, OVERLONG_CACHE, overlong, task)


def toy_mapping(s: dict[str, Any], version: str = "1.16.0") -> ToyMapping:
    at = _at(version)
    # the settings a release does not have, as it behaves: one loss before loss_type (the
    # completions' token means until 0.15, the micro-batch's token mean in 0.16), no clip before
    # 0.16 (one update on policy), the plain k3 before use_bias_correction_kl
    absent = {key: setting.default for key, setting in SETTINGS_1_16_0.items() if key not in s}
    s = absent | {"loss_type": "grpo" if at < (0, 16) else "bnpo", "use_bias_correction_kl": False} | s
    loss = s["loss_type"]
    if loss not in AGGREGATION:
        raise not_modelled("loss_type", loss, AGGREGATION)
    if loss == "luspo" and at < (1, 10):
        raise not_modelled(
            "loss_type",
            "luspo",
            [name for name in AGGREGATION if name != "luspo"],
            f"TRL {version} weights each token by its completion's length and averages over the padding too",
        )
    scale = {True: "group", False: "none"}.get(s["scale_rewards"], s["scale_rewards"])
    notes: list[str] = []
    unmodelled: list[str] = []
    if version in ("0.22.0", "0.22.1"):
        notes.append(
            f"scale_rewards={s['scale_rewards']!r}: this release's code swaps the modes, so it "
            f"{'divides by the group std' if SWAPPED_0_22[scale] == 'group' else 'divides by nothing'} "
            "(fixed in 0.22.2)"
        )
        scale = SWAPPED_0_22[scale]
    if s["multi_objective_aggregation"] == "normalize_then_sum":
        scale = "group"
        notes.append(
            f"multi_objective_aggregation='normalize_then_sum' divides each reward by its group's std + 1e-4 "
            f"whatever scale_rewards={s['scale_rewards']!r} says"
        )
        unmodelled.append(
            "normalize_then_sum then divides the summed advantages by their std over the batch: a factor "
            "common to the batch (its step size, not its direction); left out"
        )
    # GSPO: one ratio a completion (vespo takes its own sequence weight from the token ratios)
    sequence = s["importance_sampling_level"] == "sequence" and loss != "vespo"
    spec = [f"advantage={ADVANTAGE[scale]}", f"aggregation={AGGREGATION[loss]}"]
    if scale != "none":
        spec.append("std_eps=0.0001")
    accumulation = s["gradient_accumulation_steps"]
    steps = s["steps_per_generation"] or accumulation
    on_policy = s["num_iterations"] == 1 and steps // accumulation <= 1
    # cispo's cap is its own (`_own_objective`); sapo and vespo have no clip
    low, high = (
        (s["epsilon"], s["epsilon_high"]) if loss in OWN_OBJECTIVE else clip_range(s, on_policy, notes)
    )
    ppo = ppo_spec(low, high, s["num_iterations"], s["beta"], s["mask_truncated_completions"])
    if loss in OWN_OBJECTIVE:
        spec += [item for item in ppo if not item.startswith("epsilon")] + _own_objective(s, on_policy)
    else:
        spec += ppo
    if sequence:
        spec.append("objective=gspo")
        if s["epsilon_high"] is None and high is not None:  # gspo's own default is not epsilon: spell TRL's
            spec.append(f"epsilon_high={high}")
    spec += _reward(s, version, notes)
    task = _weighed(s)[1]
    if scale == "none" and s["reward_weights"] is not None and task != 1:
        unmodelled.append(
            f"reward_weights: without a std the task's weight {task:g} rescales the learning rate; left out"
        )

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
    # The generation batch (shuffled once from 0.18.0; before, in the order generated) is cut into
    # steps_per_generation micro-batches; an optimiser step accumulates gradient_accumulation_steps
    # of them. Only bnpo's normaliser is the micro-batch's; the others' are the optimiser step's,
    # which micro-batches do not change.
    schedule, notes_of_schedule = schedule_spec(
        steps,
        accumulation,
        "once" if at >= (0, 18) else "none",
        "steps_per_generation / gradient_accumulation_steps",
        micro_batches=accumulation if loss == "bnpo" else 1,
    )
    spec += schedule
    unmodelled += notes_of_schedule
    if loss == "bnpo" and accumulation > 1:
        spec.append("per_micro_batch=True")
    dapo_like = loss in ("dapo", "cispo", "vespo")
    if dapo_like and steps // accumulation > 1:
        # num_items_in_batch counts the generation batch's tokens: each step divides by its share
        spec.append("batch_tokens=True")
        if at < (1, 9, 1):
            unmodelled.append(
                f"{loss} over {steps // accumulation} optimiser steps a generation: TRL {version} divides "
                "each by all the generation batch's tokens, not its share: a learning rate that many times "
                "smaller (fixed in 1.9.1); left out"
            )
    if dapo_like and s["mask_truncated_completions"] and at < (1, 9):
        unmodelled.append(
            f"{loss} with mask_truncated_completions: this release counts the truncated completions' tokens "
            "in the normaliser; the toy counts the tokens in the loss"
        )
    delta = s["delta"]
    if delta is not None and loss in OWN_OBJECTIVE:
        unmodelled.append(f"delta={delta}: TRL applies it to PPO's clip only, not to {loss}; left out")
    elif delta is not None and sequence:
        unmodelled.append(f"delta={delta} with the sequence ratio: the toy's gspo has no cap; left out")
    elif delta is not None and delta >= 1 + (high if high is not None else low):  # dual-clip PPO's c
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
    # completions of one optimiser step (one process); 0.14's batch size counts prompts
    step = s["per_device_train_batch_size"] * accumulation * (s["num_generations"] if at < (0, 15) else 1)
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
    "use_vllm",
    "vllm_mode",
    "output_dir",
    "lr_scheduler_type",
    "warmup_ratio",
    "report_to",
    "run_name",
    "push_to_hub",
)
# GRPOConfig's, TrainingArguments' and `trl grpo`'s names spelt close to the ones toyrl reads
# (tests/conformance/test_trl.py walks them all).
OTHER_NAMES = frozenset(
    {
        "entropy_coef_delta",
        "entropy_coef_max",
        "entropy_coef_min",
        "generation_batch_size",  # GRPOConfig's (ms-swift's configuration has it too, extending TRL's)
        "local_rank",  # TrainingArguments' (OpenRLHF's parser has one too: it tells neither)
        "model_name_or_path",
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
    "multi_objective_aggregation": ("sum_then_normalize",),
}
# GRPOTrainer draws its batches with its own RepeatSampler from 0.15.0 (`_get_train_sampler`)
IGNORES = {
    "group_by_length": "GRPOTrainer draws whole groups with its own sampler, never batches by length",
    "length_column_name": "GRPOTrainer draws whole groups with its own sampler, never batches by length",
}


def _release(version: str) -> Release:
    covers, changed = RELEASES[version]
    settings = release_settings(version)
    later = {
        key: f"a setting of TRL {SINCE[key]} and later; this release has no such name"
        for key in SETTINGS_1_16_0
        if key not in settings
    }
    return Release(
        settings,
        f"trl/trainer/grpo_config.py, grpo_trainer.py (_compute_loss, advantages) of {covers}: {changed}",
        partial(toy_mapping, version=version),
        dr_grpo={key: levers for key, levers in DR_GRPO.items() if key in settings},
        ignores=later | (IGNORES if _at(version) >= (0, 15) else {}),
    )


TRAINER = Trainer(
    name="TRL",
    distribution="trl",
    releases={version: _release(version) for version in RELEASES},
    marks=MARKS,
    other_names=OTHER_NAMES,
)
