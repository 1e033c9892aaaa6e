"""Each trainer's defaults on the toy, as `toyrl check` runs them: the numbers README and docs quote.

    python scripts/trainer_defaults_study.py [--out-dir results] [--seeds 6] [--n-jobs 2]

For each case below (a trainer, the settings given on top of its release's defaults, with its
batch sizes at the toy's scale: `TOY_SCALE`), resolves the settings as `toyrl check` does
(`toyrl.trainers.resolve`), trains the variant and Dr. GRPO's loss in the same schedule
(`toyrl.trainers.check.run_check`) with seeds 0..N-1 at `Config()`, and writes, under --out-dir:

- `trainer_defaults.json`: `meta` (toyrl version, command, configuration, seeds), then `cases`,
  one per case by its key: trainer, version, given settings, the variant's spec, the reference's
  spec, the final step's accuracy (%), E[L | incorrect] and E[L | correct] of both, each as
  {mean, se} over seeds (the exact expectations), the paired difference of E[L | incorrect]
  {mean, se}, and the verdict;
- `trainer_defaults.md`: the same as a table.

Both variants of a seed share their noise (common random numbers), so the differences are paired.
A trainer's settings that the toy leaves out are in `toyrl check`'s output, not here. The batch
sizes keep each trainer's default ratio of optimiser steps to generated batch (verl 1024 / 256,
OpenRLHF rollout 1024 samples / train batch 128, oat 128 x 2 / 128, TRL one step, and the later
trainers' as `TOY_SCALE` notes) on the toy's 16 prompts x 8 responses. Each case's row also gives
`toyrl check`'s "what to change" (the fewest of the trainer's own settings that make it Dr.
GRPO's loss, or that none does) and whether its mapping was run against the trainer's code.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from toyrl import __version__
from toyrl.config import Config
from toyrl.files import write_together
from toyrl.trainers import resolve
from toyrl.trainers.check import run_check

VERL = "actor_rollout_ref.actor."
# Each trainer's default number of optimiser steps per generated batch, at the toy's batch of 16
# prompts x 8 responses: the steps hold as many responses as the trainer's would at that scale
# (`toyrl check` notes where the sizes differ).
TOY_SCALE = {
    "verl": {"data.train_batch_size": 16, VERL + "ppo_mini_batch_size": 4, "actor_rollout_ref.rollout.n": 8},
    "openrlhf": {"rollout.batch_size": 16, "rollout.n_samples_per_prompt": 8, "train.batch_size": 16},
    "oat": {"rollout_batch_size": 16, "num_samples": 8, "train_batch_size": 64},
    "trl": {"per_device_train_batch_size": 128},
    "ms-swift": {"per_device_train_batch_size": 128, "num_generations": 8},
    "unsloth": {"per_device_train_batch_size": 64, "gradient_accumulation_steps": 2, "num_generations": 8},
    "skyrl": {
        "trainer.train_batch_size": 16,
        "trainer.policy_mini_batch_size": 4,
        "generator.n_samples_per_prompt": 8,
    },
    "areal": {
        "train_dataset.batch_size": 16,
        "gconfig.n_samples": 8,
        "actor.reward_norm.group_size": 8,
        "actor.ppo_n_minibatches": 1,
    },
    "nemo-rl": {
        "grpo.num_prompts_per_step": 16,
        "grpo.num_generations_per_prompt": 8,
        "policy.train_global_batch_size": 128,
    },
    "roll": {
        "rollout_batch_size": 16,
        "num_return_sequences_in_group": 8,
        "actor_train.training_args.per_device_train_batch_size": 128,
        "sequence_length": 1501,
    },
    "slime": {"rollout-batch-size": 16, "n-samples-per-prompt": 8, "global-batch-size": 128},
    "prime-rl": {"orchestrator.batch_size": 128, "orchestrator.group_size": 8},
    "easyr1": {"data.rollout_batch_size": 16, "worker.actor.global_batch_size": 4, "worker.rollout.n": 8},
}
# AReaL's GSM8K examples (examples/math/gsm8k_grpo.yaml, gsm8k_drgrpo.yaml), what its users run: its
# dataclasses' own defaults have no baseline, which the toy refuses
AREAL_GSM8K = {
    "actor.eps_clip": 0.4,
    "actor.reward_scaling": 10.0,
    "actor.reward_bias": -0.5,
    "actor.kl_ctl": 0.0,
    "actor.adv_norm.mean_level": "batch",
    "actor.adv_norm.std_level": "batch",
    "actor.reward_norm.mean_level": "group",
}
CASES: dict[str, tuple[str, dict[str, Any], str]] = {
    "trl_default": ("trl", {}, "TRL: the defaults (loss_type dapo, scale_rewards group; 1 step)"),
    "trl_dr_grpo": ("trl", {"loss_type": "dr_grpo", "scale_rewards": "none"}, "TRL: Dr. GRPO's two settings"),
    "verl_grpo": (
        "verl",
        {"algorithm.adv_estimator": "grpo"},
        "verl: GRPO, the defaults (4 steps, dual clip)",
    ),
    "verl_dr_grpo": (
        "verl",
        {
            "algorithm.adv_estimator": "grpo",
            "algorithm.norm_adv_by_std_in_grpo": False,
            VERL + "loss_agg_mode": "seq-mean-token-sum-norm",
            VERL + "ppo_micro_batch_size_per_gpu": 16,
        },
        "verl: Dr. GRPO's two settings (loss_scale_factor unset, micro-batches of 16)",
    ),
    "verl_dr_grpo_constant": (
        "verl",
        {
            "algorithm.adv_estimator": "grpo",
            "algorithm.norm_adv_by_std_in_grpo": False,
            VERL + "loss_agg_mode": "seq-mean-token-sum-norm",
            VERL + "loss_scale_factor": 1500,
        },
        "verl: the same with loss_scale_factor = 1500 (the toy's cap)",
    ),
    "openrlhf_group_norm": (
        "openrlhf",
        {"algo.advantage.estimator": "group_norm"},
        "OpenRLHF: group_norm, the defaults (8 steps, k1 KL 0.01 in the reward)",
    ),
    "openrlhf_dr_grpo": (
        "openrlhf",
        {"algo.advantage.estimator": "dr_grpo"},
        "OpenRLHF: dr_grpo, the defaults",
    ),
    "oat_default": ("oat", {}, "oat: the defaults (critic_type drgrpo, beta 0.1; 2 steps)"),
    "oat_grpo": ("oat", {"critic_type": "grpo"}, "oat: critic_type grpo"),
    "ms_swift_default": (
        "ms-swift",
        {},
        "ms-swift: the defaults (loss_type grpo, scale_rewards group, beta 0.04)",
    ),
    "ms_swift_dr_grpo": (
        "ms-swift",
        {"loss_type": "dr_grpo", "scale_rewards": "none"},
        "ms-swift: Dr. GRPO's two settings (beta left at 0.04)",
    ),
    "unsloth_default": ("unsloth", {}, "Unsloth: the defaults (loss_type None read as dapo, beta None as 0)"),
    "unsloth_dr_grpo": (
        "unsloth",
        {"loss_type": "dr_grpo"},
        "Unsloth: loss_type dr_grpo (scale_rewards off by itself)",
    ),
    "skyrl_default": ("skyrl", {}, "SkyRL: the defaults (grpo, token_mean over the mini-batch; 4 steps)"),
    "skyrl_dr_grpo": (
        "skyrl",
        {
            "trainer.algorithm.grpo_norm_by_std": False,
            "trainer.algorithm.loss_reduction": "seq_mean_token_sum_norm",
            "trainer.algorithm.max_seq_len": 1500,
            "trainer.algorithm.use_kl_loss": False,
        },
        "SkyRL: its Dr. GRPO example (grpo_norm_by_std false, seq_mean_token_sum_norm, max_seq_len the cap)",
    ),
    "areal_grpo": (
        "areal",
        AREAL_GSM8K | {"actor.reward_norm.std_level": "group"},
        "AReaL: gsm8k_grpo.yaml (group mean and std, then whitened over the batch's tokens; 1 step)",
    ),
    "areal_dr_grpo": (
        "areal",
        AREAL_GSM8K | {"actor.reward_norm.std_level": None},
        "AReaL: gsm8k_drgrpo.yaml (group mean, then whitened over the batch's tokens)",
    ),
    "areal_no_adv_norm": (
        "areal",
        AREAL_GSM8K | {"actor.reward_norm.std_level": None, "actor.adv_norm": None},
        "AReaL: gsm8k_drgrpo.yaml with adv_norm null (r - group mean, the token mean)",
    ),
    "nemo_rl_default": (
        "nemo-rl",
        {},
        "NeMo-RL: grpo_math_1B.yaml (token mean, leave-one-out baseline and std, k3 0.01)",
    ),
    "nemo_rl_no_std": (
        "nemo-rl",
        {"grpo.normalize_rewards": False, "grpo.use_leave_one_out_baseline": False},
        "NeMo-RL: no std, no leave-one-out (its nearest to Dr. GRPO)",
    ),
    "roll_grpo": (
        "roll",
        {"adv_estimator": "grpo"},
        "ROLL: adv_estimator grpo with the defaults (seq-mean-token-mean)",
    ),
    "roll_dr_grpo": (
        "roll",
        {"adv_estimator": "reinforce", "norm_mean_type": "group", "loss_agg_mode": "seq-mean-token-sum-norm"},
        "ROLL: reinforce, group mean without std, seq-mean-token-sum-norm (Dr. GRPO up to a constant)",
    ),
    "slime_default": ("slime", {}, "slime: the defaults (per-sample token mean, group std)"),
    "slime_no_std": (
        "slime",
        {"disable-grpo-std-normalization": True},
        "slime: --disable-grpo-std-normalization (its Dr. GRPO flag; the per-sample mean stays)",
    ),
    "prime_rl_default": ("prime-rl", {}, "prime-rl: the defaults (r - group mean, the step's token mean)"),
    "prime_rl_length_penalty": (
        "prime-rl",
        {"orchestrator.algo.length_penalty": True},
        "prime-rl: [orchestrator.algo.length_penalty] at its defaults",
    ),
    "easyr1_default": (
        "easyr1",
        {"algorithm.disable_kl": True},
        "EasyR1: grpo, loss_avg_mode token, no KL (4 steps)",
    ),
}


# the short table: one row a trainer, its default (the first of its cases), which the README quotes
SHORT = (
    "Each trainer's default (its first case above): wrong answers' length against Dr. GRPO's in the "
    "same schedule, and what makes it Dr. GRPO's loss."
)
SHORT_HEADER = (
    "| trainer | its default on the toy | E[L \\| incorrect] − Dr. GRPO's (paired) | to Dr. GRPO's loss "
    "| mapping checked against |"
)


def to_dr_grpo(fix: dict[str, Any] | None) -> str:
    """The fewest of the trainer's own settings that make the case Dr. GRPO's loss (`toyrl check`'s
    "to Dr. GRPO" line), or that none does."""
    if fix is None:
        return "no setting does"
    if not fix:
        return "already is"
    return ", ".join(f"`{name}={value!r}`" for name, value in fix.items())


def summary(values: np.ndarray, scale: float = 1.0) -> dict[str, float]:
    values = np.asarray(values, dtype=float) * scale
    return {"mean": float(values.mean()), "se": float(values.std(ddof=1) / math.sqrt(len(values)))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir", type=Path, default=Path("results"), help="output folder (default results)"
    )
    parser.add_argument("--seeds", type=int, default=6, help="seeds 0..N-1 (default 6, the article's)")
    parser.add_argument("--n-jobs", type=int, default=2, help="joblib workers (default 2)")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error("--seeds must be at least 2 (a standard error needs two)")
    if not args.out_dir.is_dir():
        parser.error(f"--out-dir {args.out_dir} is not a folder")
    started = time.perf_counter()
    config, seeds = Config(), list(range(args.seeds))
    cases: dict[str, Any] = {}
    rows = []
    defaults: dict[str, str] = {}  # trainer -> its default's row of the short table
    for index, (key, (trainer, settings, label)) in enumerate(CASES.items()):
        print(f"[{index + 1}/{len(CASES)}] {label}", file=sys.stderr)
        resolved = resolve(trainer, None, TOY_SCALE[trainer] | settings)
        check = run_check(resolved, config, seeds, n_jobs=args.n_jobs)
        mean, se = check.difference
        outcome = {}
        for name, result in (("setting", check.setting), ("dr_grpo", check.reference)):
            outcome[name] = {
                "spec": result.variant.spec_text(),
                "accuracy_pct": summary(result.accuracy, 100.0),
                "length_incorrect": summary(result.incorrect),
                "length_correct": summary(result.correct),
            }
        cases[key] = {
            "label": label,
            "trainer": resolved.trainer.name,
            "version": resolved.version,
            "given": resolved.given,
            **outcome,
            "difference_length_incorrect": {"mean": mean, "se": se},
            "verdict": check.verdict(),
            "to_dr_grpo": check.fix,
            "run_against_the_trainer": not resolved.release.not_run,
        }

        def cell(values: dict[str, float], digits: int) -> str:
            return f"{values['mean']:.{digits}f} ± {values['se']:.{digits}f}"

        cells = [
            label,
            cell(outcome["setting"]["accuracy_pct"], 1),
            cell(outcome["setting"]["length_incorrect"], 0),
            cell(outcome["dr_grpo"]["length_incorrect"], 0),
            f"{mean:+.0f} ± {se:.0f}",
            to_dr_grpo(check.fix),
            "its code" if not resolved.release.not_run else "its source",
            f"`{outcome['setting']['spec']}`",
        ]
        rows.append("| " + " | ".join(cells) + " |")
        if resolved.trainer.name not in defaults:  # the first case of each trainer is its default
            defaults[resolved.trainer.name] = (
                "| "
                + " | ".join(
                    [
                        f"{resolved.trainer.name} {resolved.version}",
                        label.partition(": ")[2],
                        f"{mean:+.0f} ± {se:.0f}",
                        to_dr_grpo(check.fix),
                        "its code" if not resolved.release.not_run else "its source",
                    ]
                )
                + " |"
            )
    header = (
        "| settings | accuracy % | E[L \\| incorrect] | Dr. GRPO's, same schedule | difference (paired) "
        "| to Dr. GRPO's loss | mapping checked against | toyrl variant |"
    )
    rule = "| --- | ---: | ---: | ---: | ---: | --- | --- | --- |"
    meta = {
        "toyrl_version": __version__,
        "command": "python scripts/trainer_defaults_study.py"
        + (f" --seeds {args.seeds}" if args.seeds != 6 else ""),
        "config": config.to_dict(),
        "seeds": seeds,
    }
    text = json.dumps({"meta": meta, "cases": cases}, indent=1, allow_nan=False) + "\n"
    note = (
        f"Final step {config.steps}, exact expectations, mean ± SE over seeds 0–{len(seeds) - 1}; Dr. GRPO "
        "is its advantage and loss in the same schedule, clip and KL term, on the same seeds and noise; "
        "made by `python scripts/trainer_defaults_study.py` (what each case leaves out: `toyrl check`). "
        "\"To Dr. GRPO's loss\": the fewest of the trainer's own settings that make the case Dr. GRPO's "
        "advantage and loss (`toyrl check`'s search over the release's settings), \"already is\" when it is, "
        '"no setting does" when none of them can; "mapping checked against": the trainer\'s code (the '
        "conformance suite runs it) or its source (read from its repository: it does not install).\n\n"
    )
    write_together(
        [
            (args.out_dir / "trainer_defaults.json", text),
            (
                args.out_dir / "trainer_defaults.md",
                note
                + "\n".join([header, rule, *rows])
                + "\n\n"
                + SHORT
                + "\n\n"
                + "\n".join([SHORT_HEADER, "| --- | --- | ---: | --- | --- |", *defaults.values()])
                + "\n",
            ),
        ]
    )
    print(
        f"wrote {args.out_dir / 'trainer_defaults.json'} and trainer_defaults.md in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
