"""slime's GRPO settings on the toy (THUDM/slime v0.3.1, read from its source: slime/utils/arguments.py,
the flags and `slime_validate_args`; slime/ray/rollout.py, `_post_process_rewards` and
`_convert_samples_to_train_data`; slime/backends/megatron_utils/loss.py, `compute_advantages_and_returns`,
`policy_loss_function` and `loss_function`; slime/backends/megatron_utils/cp_utils.py,
`get_sum_of_sample_mean`; slime/utils/ppo_utils.py, `compute_policy_loss`, `compute_cispo_loss`,
`compute_approx_kl`). Settings are the flags as its launch scripts write them (`--eps-clip-high`);
its launch is `python3 train.py --flag value ...` (scripts/run-*.sh), read as argparse reads it and
told apart by its flags.

What the mapping follows:
- the advantage: the rollout's rewards minus their group's mean, over the group's sample std
  (torch.std, Bessel-corrected) + 1e-6, unless `--disable-grpo-std-normalization` (Dr. GRPO's,
  says its help); `--n-samples-per-prompt 1` (its default) leaves each group one response, whose
  advantage is 0 (`slime_validate_args` turns the std off too): refused, asking for the group's size;
  estimators "grpo", "gspo" (the sequence ratio) and "cispo" (the detached clipped ratio times
  log pi) share it;
- the loss: each sample's token mean (`sum_of_sample_mean`: each sample its own rollout, so its
  own mask's sum), summed over the micro-batch and scaled by num_microbatches / the step's global
  batch size, so over the step's samples whatever the micro-batch layout: seq_mean_token_mean;
  `--calculate-per-token-loss`: every token's loss summed, Megatron dividing by the step's token
  count: token_mean over the step;
- one optimiser step per `--global-batch-size` samples (or `--num-steps-per-rollout` steps) of the
  rollout's `--rollout-batch-size` x `--n-samples-per-prompt`, in the rollout's order, one pass;
- `--eps-clip` / `--eps-clip-high` (the latter the former when unset); `--use-kl-loss` with
  `--kl-loss-coef` and `--kl-loss-type` (k3 / low_var_kl: k3 in the loss, times the ratio with
  `--use-unbiased-kl`), aggregated as the policy loss.
"""

from __future__ import annotations

from typing import Any

from toyrl.config import InvalidInput
from toyrl.trainers import (
    Release,
    Setting,
    ToyMapping,
    Trainer,
    not_modelled,
    ppo_spec,
    schedule_spec,
)
from toyrl.trainers.verl import ratio_clip

ESTIMATORS = ("grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo")
MODELLED_ESTIMATORS = ("grpo", "gspo", "cispo")
ESTIMATOR_REASONS = {
    "ppo": "a value model",
    "reinforce_plus_plus": "the KL-shaped returns whitened over the batch's tokens (--normalize-advantages)",
    "reinforce_plus_plus_baseline": "the group mean, then whitened over the batch's tokens with the KL",
}
OFF = Setting(False, kind=bool)
NONZERO_STD = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"
UNCAPPED = 100_000  # the toy's largest max_rounds: slime refills until the batch is full

SETTINGS_0_3_1 = {
    "advantage-estimator": Setting("grpo", ESTIMATORS),
    "disable-grpo-std-normalization": OFF,
    "disable-rewards-normalization": OFF,
    "normalize-advantages": OFF,
    "calculate-per-token-loss": OFF,
    "custom-pg-loss-reducer-function-path": Setting(None, optional=True),
    "custom-advantage-function-path": Setting(None, optional=True),
    "loss-type": Setting("policy_loss", ("policy_loss", "sft_loss", "custom_loss")),
    "eps-clip": Setting(0.2, kind=float, low=0.0),
    "eps-clip-high": Setting(None, kind=float, low=0.0, optional=True),
    "eps-clip-c": Setting(None, kind=float, optional=True),
    "use-kl-loss": OFF,
    "kl-loss-coef": Setting(0.0, kind=float, low=0.0),
    "kl-loss-type": Setting("k1", ("k1", "k2", "k3", "low_var_kl")),
    "use-unbiased-kl": OFF,
    "kl-coef": Setting(0.0, kind=float, low=0.0),
    "entropy-coef": Setting(0.0, kind=float),
    "n-samples-per-prompt": Setting(1, kind=int, low=1, high=10_000),
    "rollout-batch-size": Setting(None, kind=int, low=1, optional=True),
    "global-batch-size": Setting(None, kind=int, low=1, optional=True),
    "num-steps-per-rollout": Setting(None, kind=int, low=1, optional=True),
    "dynamic-sampling-filter-path": Setting(None, optional=True),
    "use-tis": OFF,
    "use-opsm": OFF,
}


def _advantage(s: dict[str, Any], notes: list[str]) -> str:
    """The advantage spec: `_post_process_rewards`' group mean, its std unless switched off."""
    estimator = s["advantage-estimator"]
    if estimator not in MODELLED_ESTIMATORS:
        raise not_modelled(
            "advantage-estimator", estimator, MODELLED_ESTIMATORS, ESTIMATOR_REASONS[estimator]
        )
    if s["custom-advantage-function-path"] is not None:
        raise not_modelled(
            "custom-advantage-function-path", s["custom-advantage-function-path"], [None], "your own code"
        )
    if s["disable-rewards-normalization"]:
        raise not_modelled(
            "disable-rewards-normalization", True, [False], "the raw rewards as advantages, no baseline"
        )
    if s["normalize-advantages"]:
        raise not_modelled(
            "normalize-advantages", True, [False], "the advantages whitened again over the rollout's tokens"
        )
    if s["n-samples-per-prompt"] == 1:  # slime's default, which its GRPO scripts always raise
        raise not_modelled(
            "n-samples-per-prompt",
            1,
            ["an integer in [2, 10000]"],
            "a group of one response, whose GRPO advantage r - its group's mean is 0 (slime_validate_args "
            "also switches the std off); give yours with --set n-samples-per-prompt=N",
        )
    std = not s["disable-grpo-std-normalization"]
    return "advantage=group_std_sample,std_eps=1e-06" if std else "advantage=none"


def _objective(s: dict[str, Any], notes: list[str]) -> list[str]:
    """The policy loss: PPO's clip (grpo), GSPO's sequence ratio clipped (gspo), CISPO's detached
    clipped ratio (cispo), each at --eps-clip / --eps-clip-high; --eps-clip-c is never passed to
    compute_policy_loss in v0.3.1 (loss.py), so no dual clip."""
    high = s["eps-clip"] if s["eps-clip-high"] is None else s["eps-clip-high"]
    high_name = "eps-clip-high" if s["eps-clip-high"] is not None else "eps-clip"
    if s["eps-clip"] == 0:
        raise not_modelled(
            "eps-clip",
            0.0,
            ["a value above 0"],
            "the ratio's lower clip at 1 itself, which the toy's clip ranges exclude",
        )
    low, high = ratio_clip("eps-clip", s["eps-clip"], high_name, high, notes)
    beta = 0.0
    if s["use-kl-loss"] and s["kl-loss-coef"] > 0:
        if s["kl-loss-type"] in ("k3", "low_var_kl"):
            beta = s["kl-loss-coef"]
        else:
            notes.append(f"kl-loss-type={s['kl-loss-type']!r}: toyrl's KL term is k3 (low_var_kl); left out")
    estimator = s["advantage-estimator"]
    if estimator == "grpo":
        spec = ppo_spec(1.0 if low is None else low, high, beta=beta)
    else:
        spec = [item for item in ppo_spec(0.2, None, beta=beta) if not item.startswith("epsilon")]
        spec.append(f"objective={estimator}")
        if low is not None or estimator != "cispo":
            spec.append(f"epsilon={1.0 if low is None else low}")
        spec.append(f"epsilon_high={high}")
    if beta > 0 and s["use-unbiased-kl"]:
        spec.append("ratio_weighted=True")
    return spec


def _sampler(path: str | None, unmodelled: list[str]) -> list[str]:
    """--dynamic-sampling-filter-path: slime's own check_reward_nonzero_std (slime/rollout/filter_hub/
    dynamic_sampling_filters.py) drops a group whose rewards all agree and samples more prompts
    until the batch is full, without a cap (slime/rollout/sglang_rollout.py): DAPO's dynamic
    sampling, its rounds bounded here only by the toy's prompts; any other filter is left out."""
    if path is None:
        return []
    if path == NONZERO_STD:
        return ["sampler=filter_groups", f"max_rounds={UNCAPPED}"]
    unmodelled.append(
        f"dynamic-sampling-filter-path={path}: a dynamic-sampling filter toyrl does not know; left out"
    )
    return []


def _mapping(s: dict[str, Any]) -> ToyMapping:
    if s["loss-type"] != "policy_loss":
        raise not_modelled("loss-type", s["loss-type"], ["policy_loss"], "not a policy-gradient loss")
    if s["custom-pg-loss-reducer-function-path"] is not None:
        raise not_modelled(
            "custom-pg-loss-reducer-function-path",
            s["custom-pg-loss-reducer-function-path"],
            [None],
            "your own reducer: the loss's divisor is what your code makes it",
        )
    notes: list[str] = []
    unmodelled: list[str] = []
    spec = [_advantage(s, notes)]
    spec.append(
        "aggregation=token_mean" if s["calculate-per-token-loss"] else "aggregation=seq_mean_token_mean"
    )
    spec += _objective(s, notes)
    generated = (s["rollout-batch-size"] or 0) * s["n-samples-per-prompt"]
    step = s["global-batch-size"]
    if s["num-steps-per-rollout"] is not None and generated:
        step = generated // s["num-steps-per-rollout"]
        if s["global-batch-size"] is not None and s["global-batch-size"] != step:
            raise InvalidInput(
                f"global-batch-size={s['global-batch-size']} is not rollout-batch-size x "
                f"n-samples-per-prompt // num-steps-per-rollout = {step}: slime_validate_args refuses it"
            )
    if generated and step:
        schedule, notes_of_schedule = schedule_spec(
            generated, step, "none", "rollout-batch-size x n-samples-per-prompt / global-batch-size"
        )
        spec += schedule
        unmodelled += notes_of_schedule
    else:
        unmodelled.append(
            "global-batch-size or rollout-batch-size not given: Megatron's global batch then follows its "
            "micro-batch size and data-parallel size, unknown here; the toy takes one optimiser step a batch"
        )
    if s["eps-clip-c"] is not None:
        notes.append(
            f"eps-clip-c={s['eps-clip-c']}: slime v0.3.1's policy loss never passes it to "
            "compute_policy_loss, so there is no dual clip"
        )
    if s["kl-coef"] > 0:
        notes.append(
            f"kl-coef={s['kl-coef']}: the reward's KL penalty, which get_grpo_returns (grpo, gspo, cispo) "
            "never reads"
        )
    spec += _sampler(s["dynamic-sampling-filter-path"], unmodelled)
    if s["entropy-coef"] != 0:
        unmodelled.append(f"entropy-coef={s['entropy-coef']}: an entropy bonus in the loss; left out")
    for key, why in (
        ("use-tis", "truncated importance sampling of the rollout engine's log-probs"),
        ("use-opsm", "off-policy sequence masking"),
    ):
        if s[key]:
            unmodelled.append(
                f"{key}: {why}; the toy's rollouts are the trainer's policy's, so it has nothing to do"
            )
    group = {"group_size": ("n-samples-per-prompt", s["n-samples-per-prompt"])}
    return ToyMapping(",".join(spec), group, unmodelled, notes, step_responses=step)


# Flags of slime's (slime/utils/arguments.py) and of the Megatron and SGLang arguments its
# launch scripts pass, spelt with hyphens as only its command lines spell them.
MARKS = (
    "actor-num-nodes",
    "actor-num-gpus-per-node",
    "rollout-num-gpus",
    "rollout-num-gpus-per-engine",
    "hf-checkpoint",
    "ref-load",
    "prompt-data",
    "input-key",
    "label-key",
    "rm-type",
    "num-rollout",
    "rollout-max-response-len",
    "rollout-temperature",
    "rollout-shuffle",
    "sglang-mem-fraction-static",
    "colocate",
    "balance-data",
    "use-dynamic-batch-size",
    "max-tokens-per-gpu",
    "tensor-model-parallel-size",
    "eval-prompt-data",
    "n-samples-per-eval-prompt",
    "eval-max-response-len",
    "apply-chat-template",
)
# slime's flags spelt close to the ones toyrl reads
OTHER_NAMES = frozenset(
    {
        "eval-max-response-len",
        "n-samples-per-eval-prompt",
        "rollout-max-prompt-len",
        "over-sampling-batch-size",
        "use-rollout-logprobs",
        "custom-loss-function-path",
        "custom-tis-function-path",
        "custom-generate-function-path",
        "custom-rm-path",
        "custom-reward-post-process-path",
        "custom-convert-samples-to-train-data-path",
        "rollout-function-path",
        "eval-function-path",
    }
)

TRAINER = Trainer(
    name="slime",
    distribution="slime",
    releases={
        "0.3.1": Release(
            SETTINGS_0_3_1,
            "THUDM/slime v0.3.1: slime/utils/arguments.py, slime/ray/rollout.py (_post_process_rewards), "
            "slime/backends/megatron_utils/loss.py and cp_utils.py (get_sum_of_sample_mean), "
            "slime/utils/ppo_utils.py",
            _mapping,
            # none of slime's own flags divides by a constant: only --custom-pg-loss-reducer-function-path,
            # your own code, does (its help); the std goes with --disable-grpo-std-normalization
            dr_grpo={"disable-grpo-std-normalization": (True,)},
            not_run="slime is not installable from the package registry (a 0.0.0 placeholder)",
        )
    },
    marks=MARKS,
    other_names=OTHER_NAMES,
)
