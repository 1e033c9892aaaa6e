"""Unsloth's GRPO settings on the toy (unsloth 2026.10.9 with unsloth_zoo 2026.10.9).

Unsloth trains GRPO with TRL's `GRPOConfig` and `GRPOTrainer` (it requires trl >= 0.18.2, != 0.19.0,
<= 1.15.0), rewritten when `unsloth` is imported: unsloth/models/rl.py builds `UnslothGRPOConfig`
with its own defaults and checks, and unsloth_zoo/rl_replacements.py's `grpo_compute_loss` replaces
TRL's loss. The mapping is TRL's (`toyrl.trainers.trl`, release 1.16.0, which stands for TRL 1.10.0
to 1.16.0: Unsloth's newest TRL, 1.15.0, among them) after Unsloth's rewrites of the settings
(`_unsloth_settings`, read from unsloth/models/rl.py `_patch_trl_rl_trainers`):
- `loss_type` defaults to None, taken as "dapo" (TRL's default), and `beta` to None: 0.0 for dapo
  and dr_grpo, else 0.001 (TRL: 0.0);
- loss_type "dr_grpo" turns `scale_rewards` "group" (or True, the default) into False: no std;
- loss_type "dapo" given explicitly sets `mask_truncated_completions` (default None) to True and
  `epsilon_high` (None) to 0.28; "cispo" sets epsilon_high None to 5.0;
- `per_device_train_batch_size` 4 and `gradient_accumulation_steps` 2 by default; without
  steps_per_generation, a batch size whose `per_device_train_batch_size x gradient_accumulation_steps`
  (one process) is not a multiple of `num_generations` becomes num_generations.
`grpo_compute_loss` (unsloth_zoo/rl_replacements.py) has TRL 1.10's normalisers (grpo and sapo: each
response's token mean; bnpo: the micro-batch's tokens; dr_grpo: responses x max_completion_length;
dapo, cispo, vespo: the generation batch's tokens over steps_per_generation / accumulation steps),
PPO's clip and delta, and k3 times the ratio with `use_bias_correction_kl`, clamped to [-10, 10].
Its environment variables UNSLOTH_GRPO_ZERO_VARIANCE_EXCLUDE and UNSLOTH_GRPO_LOSS_AGGREGATION=prompt
(per-completion weights in place of the normaliser) are not settings and are not read.
"""

from __future__ import annotations

from typing import Any

from toyrl.trainers import Levers, Release, Setting, ToyMapping, Trainer
from toyrl.trainers import trl as trl_trainer

TRL_RELEASE = "1.16.0"  # toyrl's TRL release standing for TRL 1.10.0-1.16.0

SETTINGS_2026_10_9 = trl_trainer.release_settings(TRL_RELEASE) | {
    "loss_type": Setting(None, trl_trainer.LOSS_TYPES, optional=True),
    "beta": Setting(None, kind=float, low=0.0, optional=True),
    "mask_truncated_completions": Setting(None, kind=bool, optional=True),
    "per_device_train_batch_size": Setting(4, kind=int, low=1),
    "gradient_accumulation_steps": Setting(2, kind=int, low=1),
}


def _unsloth_settings(s: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The settings as UnslothGRPOConfig hands them to TRL's GRPOConfig (unsloth/models/rl.py, the
    checks `_patch_trl_rl_trainers` writes into its __init__), each rewrite told in `notes`."""
    s = dict(s)
    default_loss = s["loss_type"] is None
    loss = s["loss_type"] = "dapo" if default_loss else s["loss_type"]
    if s["beta"] is None:
        s["beta"] = 0.0 if loss in ("dapo", "dr_grpo") else 0.001
        if s["beta"]:
            notes.append(f"beta=None: Unsloth takes 0.001 for loss_type={loss!r} (TRL's default is 0.0)")
    if loss == "dr_grpo" and s["scale_rewards"] in (True, "group"):
        notes.append(
            f"loss_type='dr_grpo' with scale_rewards={s['scale_rewards']!r}: Unsloth sets scale_rewards=False"
        )
        s["scale_rewards"] = False
    elif loss == "dapo" and not default_loss:
        if s["mask_truncated_completions"] is None:
            notes.append("loss_type='dapo' given: Unsloth sets mask_truncated_completions=True")
            s["mask_truncated_completions"] = True
        if s["epsilon_high"] is None:
            notes.append("loss_type='dapo' given: Unsloth sets epsilon_high=0.28")
            s["epsilon_high"] = 0.28
    elif loss == "cispo" and s["epsilon_high"] is None:
        notes.append("loss_type='cispo': Unsloth sets epsilon_high=5.0")
        s["epsilon_high"] = 5.0
    if s["mask_truncated_completions"] is None:
        s["mask_truncated_completions"] = False
    batch, group = s["per_device_train_batch_size"], s["num_generations"]
    if s["steps_per_generation"] is None and (s["gradient_accumulation_steps"] * batch) % group:
        notes.append(
            f"per_device_train_batch_size={batch} x gradient_accumulation_steps="
            f"{s['gradient_accumulation_steps']} is not a multiple of num_generations={group}: Unsloth sets "
            f"per_device_train_batch_size={group}"
        )
        s["per_device_train_batch_size"] = group
    return s


def _mapping(s: dict[str, Any]) -> ToyMapping:
    notes: list[str] = []
    mapping = trl_trainer.toy_mapping(_unsloth_settings(s, notes), TRL_RELEASE)
    if s["beta"] != 0.0:
        mapping.unmodelled.append(
            "the k3 term: Unsloth clamps it to [-10, 10] (TRL does not); on the toy's small steps it never "
            "binds"
        )
    mapping.notes[:0] = notes
    return mapping


# Names of UnslothGRPOConfig's own fields (unsloth/models/rl.py): the only names that tell an
# Unsloth configuration from TRL's. The rest are TRL's, so Unsloth is named by its import.
MARKS = (
    "unsloth_num_chunks",
    "unsloth_logit_chunk_multiplier",
    "unsloth_grpo_mini_batch",
    "vllm_sampling_params",
)


# TRL's settings, so TRL's levers (those of its release that Unsloth's settings have)
DR_GRPO: dict[str, Levers] = {
    key: levers for key, levers in trl_trainer.DR_GRPO.items() if key in SETTINGS_2026_10_9
}

TRAINER = Trainer(
    name="Unsloth",
    distribution="unsloth",
    releases={
        "2026.10.9": Release(
            SETTINGS_2026_10_9,
            "unsloth/models/rl.py (UnslothGRPOConfig's defaults and checks) of unsloth 2026.10.9, "
            "unsloth_zoo/rl_replacements.py (grpo_compute_loss) of unsloth_zoo 2026.10.9, over TRL "
            "1.10.0-1.15.0's GRPOTrainer",
            _mapping,
            dr_grpo=DR_GRPO,
            ignores=trl_trainer.IGNORES,
        )
    },
    marks=MARKS,
    extends="trl",
)
