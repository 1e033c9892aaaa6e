"""SkyRL's trainer settings on the toy (skyrl 0.3.0, tag skyrl-v0.3.0 of NovaSky-AI/SkyRL:
skyrl/train/config/config.py, the dataclasses `AlgorithmConfig`, `TrainerConfig`,
`GeneratorConfig` whose fields are the command line's dotted keys; skyrl/train/trainer.py,
`RayPPOTrainer._normalize_advantages` and `_execute_training_step`;
skyrl/backends/skyrl_train/utils/ppo_utils.py, the advantage estimators, the policy losses and
`apply_loss_reduction_to_advantages_minibatch`; skyrl/backends/skyrl_train/workers/worker.py, the
KL term). Settings are the dotted paths, e.g. `trainer.algorithm.loss_reduction`.

What the mapping follows:
- `trainer.algorithm.advantage_estimator`: "grpo" (the default: r - group mean, divided by the
  group's torch.std, the sample std, + 1e-6 unless `grpo_norm_by_std` is false), "rloo" ((r -
  mean) G / (G - 1), the leave-one-out baseline), "maxrl" ((r - mean) / (mean + 1e-6)),
  "reinforce++" (the rewards whitened over the batch's tokens, masked_whiten); "gae" needs a
  value model;
- `trainer.algorithm.loss_reduction`, applied by scaling the advantages of each mini-batch before
  the policy loss is summed over tokens (reduce_loss): "token_mean" (the default: the mini-batch's
  tokens), "token_mean_legacy" (each micro-batch of micro_train_batch_size_per_gpu responses of the
  mini-batch by its own tokens, divided by their number), "sequence_mean" (each response's token
  mean, averaged over the mini-batch), "seq_mean_token_sum_norm" (each response's token sum over
  the constant `max_seq_len`, averaged over the mini-batch: Dr. GRPO's), "prompt_mean" (the token
  mean within each prompt's group, averaged over the prompts);
- `trainer.algorithm.policy_loss_type`: "regular" (PPO's clip at eps_clip_low / eps_clip_high, no
  dual clip), "dual_clip" (and clip_ratio_c), "gspo", "cispo" (cispo.cispo_eps_clip_low / _high),
  "sapo" (sapo.tau_pos / tau_neg);
- the KL term (`use_kl_loss`, true by default, `kl_loss_coef` 0.001, `kl_estimator_type` k3): the
  worker averages it per response over its tokens and over the responses (masked_mean, then the
  mean), whatever loss_reduction says;
- `trainer.train_batch_size` / `policy_mini_batch_size` (prompts; 1024 / 256 by default): optimiser
  steps per batch, in the batch's order, `update_epochs_per_batch` passes;
- `generator.apply_overlong_filtering`: truncated responses out of the loss;
  `trainer.algorithm.dynamic_sampling.type` "filter": DAPO's dynamic sampling;
- `generator.n_samples_per_prompt`: the group size G.
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
)
from toyrl.trainers.verl import NO_CAP, ratio_clip

ALGORITHM = "trainer.algorithm."
ESTIMATORS = ("grpo", "rloo", "maxrl", "reinforce++")
ESTIMATOR_REASONS = {"gae": "GAE needs a value model"}
REDUCTIONS = ("token_mean", "token_mean_legacy", "sequence_mean", "seq_mean_token_sum_norm", "prompt_mean")
LOSSES = ("regular", "dual_clip", "gspo", "cispo", "sapo")
LOSS_REASONS = {
    "rollout_is": "its ratio is to the sampler's log-probs, truncated",
    "dppo": "a divergence-masked loss",
    "clip_cov": "clips tokens by the covariance of log-prob and advantage",
    "kl_cov": "penalises tokens by the covariance of log-prob and advantage",
    "cross_entropy": "a supervised loss",
    "importance_sampling": "its ratio is to the sampler's log-probs",
}
KL_ESTIMATORS = ("k1", "k2", "k3", "abs")

SETTINGS_0_3_0 = {
    # the estimators and policy losses are registries a script may add to: any name is taken
    # here, and those toyrl does not model are refused by the mapping
    ALGORITHM + "advantage_estimator": Setting("grpo", kind=str),
    ALGORITHM + "grpo_norm_by_std": Setting(True, kind=bool),
    ALGORITHM + "advantage_batch_normalize": Setting(False, kind=bool),
    ALGORITHM + "loss_reduction": Setting("token_mean", REDUCTIONS),
    ALGORITHM + "max_seq_len": Setting(None, kind=int, low=1, optional=True),
    ALGORITHM + "policy_loss_type": Setting("regular", kind=str),
    ALGORITHM + "eps_clip_low": Setting(0.2, kind=float, low=0.0),
    ALGORITHM + "eps_clip_high": Setting(0.2, kind=float, low=0.0),
    ALGORITHM + "clip_ratio_c": Setting(3.0, kind=float, low=1.0),
    ALGORITHM + "cispo.cispo_eps_clip_low": Setting(0.0, kind=float, low=0.0),
    ALGORITHM + "cispo.cispo_eps_clip_high": Setting(5.0, kind=float, low=0.0),
    ALGORITHM + "sapo.tau_pos": Setting(1.0, kind=float, low=0.0, high=1000.0),
    ALGORITHM + "sapo.tau_neg": Setting(1.05, kind=float, low=0.0, high=1000.0),
    ALGORITHM + "use_kl_loss": Setting(True, kind=bool),
    ALGORITHM + "kl_loss_coef": Setting(0.001, kind=float, low=0.0),
    ALGORITHM + "kl_estimator_type": Setting("k3", KL_ESTIMATORS),
    ALGORITHM + "use_kl_in_reward": Setting(False, kind=bool),
    ALGORITHM + "use_entropy_loss": Setting(False, kind=bool),
    ALGORITHM + "zero_variance_filter": Setting(False, kind=bool),
    ALGORITHM + "zero_variance_filter_tol": Setting(1e-6, kind=float, low=0.0, high=10.0),
    ALGORITHM + "dynamic_sampling.type": Setting(None, ("filter", "replace"), optional=True),
    ALGORITHM + "dynamic_sampling.max_sample_batches": Setting(30, kind=int, low=-1),
    ALGORITHM + "gamma": Setting(1.0, kind=float, low=0.0, high=1.0),
    "trainer.update_epochs_per_batch": Setting(1, kind=int, low=1, high=64),
    "trainer.train_batch_size": Setting(1024, kind=int, low=1),
    "trainer.policy_mini_batch_size": Setting(256, kind=int, low=1),
    "trainer.micro_train_batch_size_per_gpu": Setting(1, kind=int, low=1),
    "trainer.policy.optimizer_config.max_grad_norm": Setting(1.0, kind=float, low=0.0),
    "generator.n_samples_per_prompt": Setting(5, kind=int, low=1, high=10_000),
    "generator.apply_overlong_filtering": Setting(False, kind=bool),
    "generator.zero_reward_on_non_stop": Setting(False, kind=bool),
    "generator.sampling_params.max_generate_length": Setting(1024, kind=int, low=1),
}


def _advantage(s: dict[str, Any], notes: list[str]) -> str:
    estimator = s[ALGORITHM + "advantage_estimator"]
    if estimator not in ESTIMATORS:
        why = ESTIMATOR_REASONS.get(estimator, "not one of SkyRL's built-in estimators")
        raise not_modelled(ALGORITHM + "advantage_estimator", estimator, ESTIMATORS, why)
    if s[ALGORITHM + "advantage_batch_normalize"]:
        raise not_modelled(
            ALGORITHM + "advantage_batch_normalize",
            True,
            [False],
            "z-scores the batch's advantages with a mean over the padded tensor",
        )
    if estimator == "grpo":
        return "group_std_sample,std_eps=1e-06" if s[ALGORITHM + "grpo_norm_by_std"] else "none"
    if estimator == "rloo":
        return "rloo"
    if estimator == "maxrl":
        notes.append(
            "advantage_estimator='maxrl' divides by the group's mean reward + 1e-6; the toy's max_rl by "
            "the mean itself (advantages about 1e-6 relative apart)"
        )
        return "max_rl"
    if s[ALGORITHM + "gamma"] != 1:
        raise not_modelled(ALGORITHM + "gamma", s[ALGORITHM + "gamma"], [1.0], "discounted per-token returns")
    notes.append(
        "advantage_estimator='reinforce++': masked_whiten over the batch's tokens, the Bessel factor in "
        "the tokens' dtype (the toy's reinforce_pp takes it in float32, as verl)"
    )
    return "reinforce_pp"


def _objective(s: dict[str, Any], beta: float, notes: list[str]) -> list[str]:
    loss = s[ALGORITHM + "policy_loss_type"]
    if loss not in LOSSES:
        why = LOSS_REASONS.get(loss, "not one of SkyRL's built-in losses")
        raise not_modelled(ALGORITHM + "policy_loss_type", loss, LOSSES, why)
    epochs = s["trainer.update_epochs_per_batch"]
    low_name, high_name = ALGORITHM + "eps_clip_low", ALGORITHM + "eps_clip_high"
    if loss == "cispo":
        low_name, high_name = ALGORITHM + "cispo.cispo_eps_clip_low", ALGORITHM + "cispo.cispo_eps_clip_high"
        if s[low_name] == 0:
            raise not_modelled(
                low_name,
                0.0,
                ["a number in (0, 1]", "above 1 (no lower bound)"],
                "clamp(ratio, 1, ...) keeps every weight at 1 or more; the toy's CISPO weight is "
                "clip(ratio, 1 - epsilon, 1 + epsilon_high)",
            )
    low, high = ratio_clip(low_name, s[low_name], high_name, s[high_name], notes)
    if loss in ("regular", "dual_clip"):
        dual = s[ALGORITHM + "clip_ratio_c"] if loss == "dual_clip" else None
        return ppo_spec(1.0 if low is None else low, high, epochs, beta, dual_clip=dual)
    spec = [item for item in ppo_spec(0.2, None, epochs, beta) if not item.startswith("epsilon")]
    if loss == "sapo":
        spec.append("objective=sapo")
        for key, toy_default in (("tau_pos", 1.0), ("tau_neg", 1.05)):
            if s[ALGORITHM + "sapo." + key] != toy_default:
                spec.append(f"{key}={s[ALGORITHM + 'sapo.' + key]}")
        return spec
    spec.append(f"objective={loss}")
    if low is not None or loss != "cispo":  # CISPO without a lower bound: no epsilon
        spec.append(f"epsilon={1.0 if low is None else low}")
    return [*spec, f"epsilon_high={high}"]


def _mapping(s: dict[str, Any]) -> ToyMapping:
    notes: list[str] = []
    unmodelled: list[str] = []
    advantage = _advantage(s, notes)
    reduction = s[ALGORITHM + "loss_reduction"]
    aggregation = {
        "token_mean": "token_mean",
        "token_mean_legacy": "token_mean",
        "sequence_mean": "seq_mean_token_mean",
        "seq_mean_token_sum_norm": "seq_mean_token_sum_norm",
        "prompt_mean": "prompt_mean",
    }[reduction]
    spec = [f"advantage={advantage}", f"aggregation={aggregation}"]
    beta = 0.0
    if s[ALGORITHM + "use_kl_loss"] and s[ALGORITHM + "kl_loss_coef"] > 0:
        estimator = s[ALGORITHM + "kl_estimator_type"]
        coef = s[ALGORITHM + "kl_loss_coef"]
        if estimator != "k3":
            unmodelled.append(f"kl_estimator_type={estimator!r}: toyrl's KL term is k3; left out")
        elif reduction == "sequence_mean":
            beta = coef
        else:
            unmodelled.append(
                f"use_kl_loss=True, kl_loss_coef={coef}: SkyRL averages the k3 term per response over its "
                f"tokens and then over the responses, whatever loss_reduction={reduction!r} says; the toy "
                "aggregates its KL term like the policy loss, so it is left out (its gradient is zero on "
                "the first update of a batch)"
            )
    spec += _objective(s, beta, notes)
    if s["generator.apply_overlong_filtering"]:
        spec.append("mask_truncated=True")
    if reduction == "seq_mean_token_sum_norm":
        if s[ALGORITHM + "max_seq_len"] is None:
            raise InvalidInput(
                f"{ALGORITHM}max_seq_len is unset: SkyRL requires it with loss_reduction="
                "'seq_mean_token_sum_norm' (validate_cfg); an integer >= 1"
            )
        unmodelled.append(
            constant_note(ALGORITHM + "max_seq_len", s[ALGORITHM + "max_seq_len"], "the constant divisor")
        )
    group = s["generator.n_samples_per_prompt"]
    mini = s["trainer.policy_mini_batch_size"]
    step = mini * group
    schedule, notes_of_schedule = schedule_spec(
        s["trainer.train_batch_size"],
        mini,
        "none",
        "trainer.train_batch_size / trainer.policy_mini_batch_size",
    )
    spec += schedule
    unmodelled += notes_of_schedule
    micro = None
    if reduction == "token_mean_legacy":
        micro = s["trainer.micro_train_batch_size_per_gpu"]
        count = step // micro
        if count > 1:
            spec.append("per_micro_batch=True")
            notes.append(
                f"loss_reduction='token_mean_legacy': each micro-batch of micro_train_batch_size_per_gpu="
                f"{micro} responses of the mini-batch is normalised by its own tokens and divided by the "
                f"{count} micro-batches"
            )
        else:
            micro = None
        if step % s["trainer.micro_train_batch_size_per_gpu"]:
            unmodelled.append(
                f"policy_mini_batch_size x n_samples_per_prompt = {step} is not a multiple of "
                f"micro_train_batch_size_per_gpu={s['trainer.micro_train_batch_size_per_gpu']}: SkyRL gives "
                "the last responses zero advantages; the toy takes equal micro-batches"
            )
    sampling = s[ALGORITHM + "dynamic_sampling.type"]
    if sampling == "replace":
        raise not_modelled(
            ALGORITHM + "dynamic_sampling.type",
            "replace",
            ["filter", None],
            "replaces groups by copies of others",
        )
    if sampling == "filter":
        batches = s[ALGORITHM + "dynamic_sampling.max_sample_batches"]
        rounds = NO_CAP if batches <= 0 else min(batches, NO_CAP)
        spec += ["sampler=filter_groups", f"max_rounds={rounds}"]
        unmodelled.append(
            "dynamic_sampling.type='filter': SkyRL stops with an error after max_sample_batches batches "
            "without a full batch; the toy then fills the batch with dropped groups"
        )
    if s[ALGORITHM + "zero_variance_filter"]:
        if s["generator.apply_overlong_filtering"]:
            raise not_modelled(
                ALGORITHM + "zero_variance_filter",
                True,
                [False],
                "with apply_overlong_filtering, SkyRL takes the spread over the responses left and keeps "
                "groups of one or none; the toy's one selector takes either mask, not both",
            )
        # skyrl/train/utils/trainer_utils.py: a group whose rewards' max - min is not above the
        # tolerance leaves the loss mask, and with it token_mean's count
        spec += ["selector=informative", f"tol={s[ALGORITHM + 'zero_variance_filter_tol']}"]
    for key, what in (
        ("use_kl_in_reward", "a KL penalty in the reward"),
        ("use_entropy_loss", "an entropy bonus in the loss"),
    ):
        if s[ALGORITHM + key]:
            unmodelled.append(f"{key}=True: {what}; left out")
    if s["generator.zero_reward_on_non_stop"]:
        notes.append(
            "zero_reward_on_non_stop=True: a truncated response's reward is 0, as the toy's already is"
        )
    clip = s["trainer.policy.optimizer_config.max_grad_norm"]
    if clip > 0:
        unmodelled.append(grad_clip_note("trainer.policy.optimizer_config.max_grad_norm", clip))
    return ToyMapping(
        ",".join(spec),
        {"group_size": ("generator.n_samples_per_prompt", group)},
        unmodelled,
        notes,
        step_responses=step,
        micro_batch_responses=micro,
    )


# The sections of SkyRL's configuration (SkyRLTrainConfig: data, trainer, generator, environment;
# verl's also has data. and trainer.: keys under those two count for neither), and its names that
# toyrl does not read, spelt close to ones it reads (skyrl/train/config/config.py).
MARKS = ("generator.", "environment.", "trainer.", "data.")
OTHER_NAMES = frozenset(
    {
        "trainer.critic_mini_batch_size",
        "trainer.eval_batch_size",
        "trainer.micro_forward_batch_size_per_gpu",
        "generator.eval_n_samples_per_prompt",
        "trainer.max_prompt_length",
        "trainer.critic.optimizer_config.max_grad_norm",
    }
)
DR_GRPO: dict[str, Levers] = {
    ALGORITHM + "advantage_estimator": ("grpo",),
    ALGORITHM + "grpo_norm_by_std": (False,),
    ALGORITHM + "loss_reduction": ("seq_mean_token_sum_norm",),
    ALGORITHM + "max_seq_len": lambda s: (
        s[ALGORITHM + "max_seq_len"] or s["generator.sampling_params.max_generate_length"],
    ),
    ALGORITHM + "policy_loss_type": ("regular",),
    ALGORITHM + "use_kl_loss": (False,),
    ALGORITHM + "dynamic_sampling.type": (None,),
}

TRAINER = Trainer(
    name="SkyRL",
    distribution="skyrl",
    releases={
        "0.3.0": Release(
            SETTINGS_0_3_0,
            "skyrl/train/config/config.py, skyrl/train/trainer.py (_normalize_advantages), "
            "skyrl/backends/skyrl_train/utils/ppo_utils.py (advantages, policy losses, "
            "apply_loss_reduction_to_advantages_minibatch), skyrl/backends/skyrl_train/workers/worker.py "
            "(the KL term) of skyrl 0.3.0",
            _mapping,
            dr_grpo=DR_GRPO,
        )
    },
    marks=MARKS,
    other_names=OTHER_NAMES,
    entries=(
        Entry(module="skyrl.train.entrypoints.*", read="overrides"),
        Entry(module="skyrl_train.entrypoints.*", read="overrides"),
    ),
)
