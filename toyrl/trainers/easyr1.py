"""EasyR1's GRPO settings on the toy (hiyouga/EasyR1 0.3.3.dev0, commit b44b311, read from its
source: verl/trainer/config.py (`AlgorithmConfig`, `DataConfig`), verl/workers/actor/config.py
(`ActorConfig`), verl/workers/rollout/config.py (`n`), verl/trainer/core_algos.py (the advantage
estimators, `average_loss`, `compute_policy_loss`, `compute_kl`), verl/workers/actor/dp_actor.py
(`update_policy`), verl/trainer/main.py (`OmegaConf.from_cli` over `config=FILE` over the
dataclasses' defaults)). EasyR1's package is also named `verl`, but its configuration is its own:
`worker.actor.*`, `worker.rollout.n`, `algorithm.*`, `data.rollout_batch_size`; its launch is
`python3 -m verl.trainer.main config=examples/config.yaml key=value ...` (examples/*.sh).

What the mapping follows:
- `algorithm.adv_estimator`: "grpo" (the reward minus its group's mean over the group's sample std
  + 1e-6, always: no setting removes the std), "rloo" (leave-one-out), "grpo_passk" (the best
  response's margin over the second, over the group's std);
- `worker.actor.loss_avg_mode`: "token" (the micro-batch's token mean times its share of the
  mini-batch's tokens on the device, so the mini-batch's token mean: token_mean); "seq" is each
  micro-batch's mean of its responses' token means weighted by the micro-batch's share of the
  tokens, which no toyrl aggregation is (refused);
- `worker.actor.loss_type`: "default" (PPO's clip at `clip_ratio_low` / `_high` with the dual clip
  `clip_ratio_dual`), "gspo", "cispo", "sapo" (`tau_positive` / `tau_negative`);
- `algorithm.use_kl_loss` with `kl_penalty` "low_var_kl": k3 to the reference in the loss at
  `kl_coef`, averaged as the policy loss; `algorithm.disable_kl` turns the reference off;
- `data.rollout_batch_size` / `worker.actor.global_batch_size` (both in prompts): optimiser steps
  per batch, in the batch's order, `worker.actor.ppo_epochs` epochs; `worker.rollout.n`: G.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toyrl.config import InvalidInput, shown
from toyrl.trainers import (
    Entry,
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

if TYPE_CHECKING:
    from toyrl.trainers.launch import Launch
    from toyrl.trainers.shell import Word

ACTOR = "worker.actor."
ESTIMATORS = ("gae", "grpo", "grpo_passk", "reinforce_plus_plus", "remax", "rloo")
MODELLED_ESTIMATORS = ("grpo", "grpo_passk", "rloo")
ESTIMATOR_REASONS = {
    "gae": "a value model",
    "remax": "a greedy rollout's reward as the baseline",
    "reinforce_plus_plus": "the returns whitened over the batch's tokens (masked_whiten), not mapped",
}
LOSS_TYPES = ("default", "gspo", "gspo_token", "cispo", "sapo")

SETTINGS_0_3_3 = {
    "algorithm.adv_estimator": Setting("grpo", ESTIMATORS),
    "algorithm.disable_kl": Setting(False, kind=bool),
    "algorithm.use_kl_loss": Setting(False, kind=bool),
    "algorithm.kl_penalty": Setting("kl", ("kl", "abs", "mse", "low_var_kl", "full")),
    "algorithm.kl_coef": Setting(1e-3, kind=float, low=0.0),
    "algorithm.online_filtering": Setting(False, kind=bool),
    ACTOR + "loss_avg_mode": Setting("token", ("token", "seq")),
    ACTOR + "loss_type": Setting("default", LOSS_TYPES),
    ACTOR + "clip_ratio_low": Setting(0.2, kind=float, low=0.0),
    ACTOR + "clip_ratio_high": Setting(0.3, kind=float, low=0.0),
    ACTOR + "clip_ratio_dual": Setting(3.0, kind=float, low=1.0),
    ACTOR + "tau_positive": Setting(1.0, kind=float, low=0.0),
    ACTOR + "tau_negative": Setting(1.05, kind=float, low=0.0),
    ACTOR + "ppo_epochs": Setting(1, kind=int, low=1, high=64),
    ACTOR + "global_batch_size": Setting(256, kind=int, low=1),
    ACTOR + "max_grad_norm": Setting(1.0, kind=float, low=0.0),
    "data.rollout_batch_size": Setting(512, kind=int, low=1),
    "worker.rollout.n": Setting(1, kind=int, low=1, high=10_000),
}


def _advantage(estimator: str) -> str:
    if estimator not in MODELLED_ESTIMATORS:
        raise not_modelled(
            "algorithm.adv_estimator", estimator, MODELLED_ESTIMATORS, ESTIMATOR_REASONS[estimator]
        )
    return {
        "grpo": "advantage=group_std_sample,std_eps=1e-06",
        "grpo_passk": "advantage=passk,std_eps=1e-06",
        "rloo": "advantage=rloo",
    }[estimator]


def _objective(s: dict[str, Any], beta: float, notes: list[str]) -> list[str]:
    """compute_policy_loss: PPO's clip with the dual clip, GSPO's sequence ratio, CISPO's detached
    clipped ratio times log pi, SAPO's gate."""
    mode = s[ACTOR + "loss_type"]
    if mode == "gspo_token":
        raise not_modelled(ACTOR + "loss_type", mode, [m for m in LOSS_TYPES if m != mode], "GSPO-token")
    epochs = s[ACTOR + "ppo_epochs"]
    if s[ACTOR + "clip_ratio_low"] == 0:
        raise not_modelled(
            ACTOR + "clip_ratio_low",
            0.0,
            ["a value above 0"],
            "the ratio's lower clip at 1 itself, which the toy's clip ranges exclude",
        )
    low, high = ratio_clip(
        ACTOR + "clip_ratio_low",
        s[ACTOR + "clip_ratio_low"],
        ACTOR + "clip_ratio_high",
        s[ACTOR + "clip_ratio_high"],
        notes,
    )
    if mode == "default":
        return ppo_spec(
            1.0 if low is None else low, high, epochs, beta, dual_clip=s[ACTOR + "clip_ratio_dual"]
        )
    spec = [item for item in ppo_spec(0.2, None, epochs, beta) if not item.startswith("epsilon")]
    spec.append(f"objective={mode}")
    if mode == "sapo":
        for key, name, default in (("tau_pos", "tau_positive", 1.0), ("tau_neg", "tau_negative", 1.05)):
            if s[ACTOR + name] != default:
                spec.append(f"{key}={s[ACTOR + name]}")
        return spec
    spec += [f"epsilon={1.0 if low is None else low}", f"epsilon_high={high}"]
    return spec


def _mapping(s: dict[str, Any]) -> ToyMapping:
    if s[ACTOR + "loss_avg_mode"] == "seq":
        raise not_modelled(
            ACTOR + "loss_avg_mode",
            "seq",
            ["token"],
            "each micro-batch's mean of sequence means, weighted by its share of the device's tokens",
        )
    if s["algorithm.online_filtering"]:
        raise not_modelled(
            "algorithm.online_filtering",
            True,
            [False],
            "groups filtered by filter_key's mean and refilled up to trainer.max_try_make_batch, not mapped",
        )
    notes: list[str] = []
    unmodelled: list[str] = [
        "each data-parallel device's token mean, averaged over the devices (dp_actor.update_policy): the toy "
        "takes one device"
    ]
    beta = 0.0
    if not s["algorithm.disable_kl"]:
        if not s["algorithm.use_kl_loss"]:
            unmodelled.append(
                f"algorithm.use_kl_loss=False: a KL penalty ({s['algorithm.kl_penalty']!r}, kl_coef "
                f"{s['algorithm.kl_coef']}) in the reward; left out"
            )
        elif s["algorithm.kl_penalty"] == "low_var_kl":
            beta = s["algorithm.kl_coef"]
        else:
            unmodelled.append(
                f"algorithm.kl_penalty={s['algorithm.kl_penalty']!r}: toyrl's KL term is k3 (low_var_kl); "
                "left out"
            )
    spec = [_advantage(s["algorithm.adv_estimator"]), "aggregation=token_mean"]
    spec += _objective(s, beta, notes)
    step = s[ACTOR + "global_batch_size"]
    if s["data.rollout_batch_size"] % step:
        raise InvalidInput(
            f"data.rollout_batch_size={s['data.rollout_batch_size']} is not a multiple of "
            f"worker.actor.global_batch_size={step}: EasyR1's trainer refuses it"
        )
    schedule, notes_of_schedule = schedule_spec(
        s["data.rollout_batch_size"], step, "none", "data.rollout_batch_size / worker.actor.global_batch_size"
    )
    spec += schedule
    unmodelled += notes_of_schedule
    if s[ACTOR + "max_grad_norm"] > 0:
        unmodelled.append(grad_clip_note(ACTOR + "max_grad_norm", s[ACTOR + "max_grad_norm"]))
    group = {"group_size": ("worker.rollout.n", s["worker.rollout.n"])}
    return ToyMapping(",".join(spec), group, unmodelled, notes, step_responses=step * s["worker.rollout.n"])


def read_command(words: list[Word], origin: str) -> Launch:
    """`python3 -m verl.trainer.main` arguments as verl/trainer/main.py reads them:
    `OmegaConf.from_cli`, each `key=value` word by OmegaConf's dotlist parser (the value read as
    YAML); `config=FILE` is the configuration file, under the other words."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from toyrl.trainers.launch import Launch

    settings: dict[str, Any] = {}
    files: list[str] = []
    notes: list[str] = []
    for word in words:
        if word.spread:
            notes.append(f"{word.text} in {origin}: {word.unknown[0]}; settings given there are not read")
            continue
        key, equals, value = word.text.partition("=")
        if not equals:
            raise InvalidInput(
                f"{origin}: {shown(word.text)} is not key=value, as OmegaConf.from_cli reads it"
            )
        if word.unknown:
            settings[key] = Unresolved(value, "; ".join(word.unknown), at_run=True)
            continue
        try:
            parsed = OmegaConf.to_container(OmegaConf.from_dotlist([word.text]))
        except OmegaConfBaseException as error:
            raise InvalidInput(f"{origin}: {shown(word.text)}: {str(error).splitlines()[0]}") from None
        if key == "config":
            files.append(str(value))
            continue
        settings |= _leaves("", parsed)
    return Launch("easyr1", settings, origin, notes, files)


def _leaves(prefix: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not value:
        return {prefix.removesuffix("."): value}
    leaves: dict[str, Any] = {}
    for name, inner in value.items():
        leaves |= _leaves(f"{prefix}{name}.", inner)
    return leaves


# EasyR1's configuration (verl/trainer/config.py `PPOConfig`): `worker.*` only it has; its
# `algorithm.*`, `data.*` and `trainer.*` names (the dataclasses' fields, which OmegaConf's structured
# merge holds it to) verl's files have too, so they count for neither; verl's own names under those
# sections (`algorithm.norm_adv_by_std_in_grpo`) still tell verl's files.
DATA_CONFIG = (
    "train_files", "val_files", "prompt_key", "answer_key", "image_key", "video_key", "image_dir",
    "video_fps", "max_prompt_length", "max_response_length", "rollout_batch_size", "mini_rollout_batch_size",
    "val_batch_size", "format_prompt", "override_chat_template", "shuffle", "seed", "min_pixels",
    "max_pixels", "filter_overlong_prompts", "filter_overlong_prompts_workers",
)  # fmt: skip
ALGORITHM_CONFIG = (
    "gamma", "lam", "adv_estimator", "disable_kl", "use_kl_loss", "kl_penalty", "kl_coef", "kl_type",
    "kl_horizon", "kl_target", "online_filtering", "filter_key", "filter_low", "filter_high",
)  # fmt: skip
TRAINER_CONFIG = (
    "total_epochs", "max_steps", "project_name", "experiment_name", "logger", "nnodes", "n_gpus_per_node",
    "max_try_make_batch", "critic_warmup", "val_freq", "val_before_train", "val_only",
    "val_generations_to_log", "save_freq", "save_limit", "save_model_only", "save_checkpoint_path",
    "load_checkpoint_path", "ray_timeline", "find_last_checkpoint",
)  # fmt: skip
MARKS = (
    "worker.",
    *(f"data.{name}" for name in DATA_CONFIG),
    *(f"algorithm.{name}" for name in ALGORITHM_CONFIG),
    *(f"trainer.{name}" for name in TRAINER_CONFIG),
)

# EasyR1's names spelt close to the ones toyrl reads: the prompts generated at a time, validation's n
OTHER_NAMES = frozenset({"data.mini_rollout_batch_size", "worker.rollout.val_override_config.n"})

TRAINER = Trainer(
    name="EasyR1",
    distribution="easyr1",
    releases={
        "0.3.3.dev0": Release(
            SETTINGS_0_3_3,
            "hiyouga/EasyR1 0.3.3.dev0 (commit b44b311): verl/trainer/config.py, verl/trainer/core_algos.py, "
            "verl/workers/actor/config.py, verl/workers/actor/dp_actor.py",
            _mapping,
            # GRPO always divides by the group's std and the loss is a token mean: no setting makes it
            # Dr. GRPO's
            dr_grpo={ACTOR + "loss_avg_mode": ("token",)},
            not_run="EasyR1 is not installable from the package registry (no distribution named easyr1)",
        )
    },
    marks=MARKS,
    other_names=OTHER_NAMES,
    entries=(Entry(module="verl.trainer.main", read=read_command),),
)
