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
OpenRLHF rollout 1024 samples / train batch 128, oat 128 x 2 / 128, TRL one step) on the toy's
16 prompts x 8 responses.
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
}


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
        }

        def cell(values: dict[str, float], digits: int) -> str:
            return f"{values['mean']:.{digits}f} ± {values['se']:.{digits}f}"

        cells = [
            label,
            cell(outcome["setting"]["accuracy_pct"], 1),
            cell(outcome["setting"]["length_incorrect"], 0),
            cell(outcome["dr_grpo"]["length_incorrect"], 0),
            f"{mean:+.0f} ± {se:.0f}",
            f"`{outcome['setting']['spec']}`",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    header = (
        "| settings | accuracy % | E[L \\| incorrect] | Dr. GRPO's, same schedule | difference (paired) "
        "| toyrl variant |"
    )
    rule = "| --- | ---: | ---: | ---: | ---: | --- |"
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
        "made by `python scripts/trainer_defaults_study.py` (what each case leaves out: `toyrl check`).\n\n"
    )
    write_together(
        [
            (args.out_dir / "trainer_defaults.json", text),
            (args.out_dir / "trainer_defaults.md", note + "\n".join([header, rule, *rows]) + "\n"),
        ]
    )
    print(
        f"wrote {args.out_dir / 'trainer_defaults.json'} and trainer_defaults.md in "
        f"{time.perf_counter() - started:.1f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
