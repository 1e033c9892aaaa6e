"""verl 0.9.1's default divisor on the toy: how far its Dr. GRPO settings drift, by micro-batch size.

    python scripts/verl_width_study.py [--out-dir results] [--seeds 20] [--n-jobs 2]

verl's seq-mean-token-sum-norm divides each response's token sum by `loss_scale_factor`, or, when
that is unset (its default), by the width of the micro-batch's loss mask; its V1 trainer (also the
default) pads each micro-batch to its own longest response, so the divisor is that length
(toyrl's `seq_mean_token_sum_longest` with per_micro_batch; the conformance suite checks it
against verl's installed code). With Dr. GRPO's other setting (norm_adv_by_std_in_grpo=False) this
trains, for each micro-batch size m of `SIZES` (ppo_micro_batch_size_per_gpu, in responses), the
toy's batch of B x G responses in B G / m micro-batches, one optimiser step per batch, beside Dr.
GRPO itself (the constant L_norm: what loss_scale_factor set gives), with seeds 0..N-1 at
`Config()`, and writes, under --out-dir:

- `verl_width.json`: `meta` (toyrl version, command, configuration, seeds and their count), then
  `sizes`, one per m: the variant's spec, the final step's accuracy (%), E[L | incorrect] and
  E[L | correct], each {mean, se} over seeds (exact expectations), and the paired difference of
  E[L | incorrect] from Dr. GRPO's {mean, se}; and `dr_grpo`, the reference's own numbers;
- `verl_width.md`: the same as a table.

With use_dynamic_bsz, verl cuts each rank's share into the fewest micro-batches within
ppo_max_token_len_per_gpu tokens, balanced by workload (toyrl's `token_budget`): `budgets`, one
per budget of `BUDGETS` (one GPU, prompts of data.max_prompt_length = 512 tokens, responses of up
to data.max_response_length = 512), each the variant `toyrl check` runs for those verl settings
(the budget and prompts scaled by the toy's longest response over 512), with the same numbers.

Every variant of a seed shares its noise with Dr. GRPO's (common random numbers), so the
differences are paired. m = 1 is each response's own length, the per-response mean of GRPO's
`length_only`; m = B G, one divisor for the whole batch, moving with its longest response.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from toyrl import __version__
from toyrl.config import Config
from toyrl.experiment import check_experiment, run_experiment
from toyrl.files import write_together
from toyrl.objective import Variant
from toyrl.trainers import resolve
from toyrl.trainers.check import toy_variant
from toyrl.trainers.verl import ACTOR
from toyrl.variants import VARIANTS, parse_variant

SIZES = (1, 2, 4, 8, 16, 32, 64, 128)  # ppo_micro_batch_size_per_gpu, responses
BUDGETS = (4096, 8192, 16384, 32768)  # ppo_max_token_len_per_gpu, tokens (16384: verl's default)
WIDTH = "advantage=none,aggregation=seq_mean_token_sum_longest,per_micro_batch=true"


def summary(values: np.ndarray, scale: float = 1.0) -> dict[str, float]:
    values = np.asarray(values, dtype=float) * scale
    return {"mean": float(values.mean()), "se": float(values.std(ddof=1) / math.sqrt(len(values)))}


def budget_variant(budget: int, config: Config) -> Variant:
    """The variant `toyrl check` runs for verl's Dr. GRPO settings with use_dynamic_bsz at
    ppo_max_token_len_per_gpu = `budget`, loss_scale_factor unset, one GPU, one optimiser step a
    batch, at `config`."""
    settings = {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": False,
        f"{ACTOR}loss_agg_mode": "seq-mean-token-sum-norm",
        f"{ACTOR}use_dynamic_bsz": True,
        f"{ACTOR}ppo_max_token_len_per_gpu": budget,
        f"{ACTOR}ppo_mini_batch_size": 1024,  # data.train_batch_size's default: one step a batch
        "trainer.n_gpus_per_node": 1,
    }
    variant, _ = toy_variant(resolve("verl", "0.9.1", settings), config)
    spec = variant.spec()
    spec.pop("dual_clip", None)  # at one step a batch the ratio is 1: the dual clip never acts
    return parse_variant(",".join(f"{key}={value}" for key, value in spec.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir", type=Path, default=Path("results"), help="output folder (default results)"
    )
    parser.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1 (default 20)")
    parser.add_argument("--n-jobs", type=int, default=2, help="joblib workers (default 2)")
    args = parser.parse_args()
    if args.seeds < 2:
        parser.error("--seeds must be at least 2 (a standard error needs two)")
    if not args.out_dir.is_dir():
        parser.error(f"--out-dir {args.out_dir} is not a folder")
    started = time.perf_counter()
    config, seeds = Config(), list(range(args.seeds))
    responses = config.batch_prompts * config.group_size
    sizes = [m for m in SIZES if responses % m == 0]
    reference = VARIANTS["dr_grpo"]
    variants = [reference] + [
        dataclasses.replace(parse_variant(f"{WIDTH},micro_batches={responses // m}"), name=f"verl_width_{m}")
        for m in sizes
    ]
    budgets = [dataclasses.replace(budget_variant(b, config), name=f"verl_budget_{b}") for b in BUDGETS]
    variants += budgets
    check_experiment(config, variants, seeds, args.n_jobs)
    frame = run_experiment(config, variants, seeds, n_jobs=args.n_jobs)
    last = frame[frame["step"] == config.steps].sort_values(["variant", "seed"])

    def column(name: str, metric: str) -> np.ndarray:
        return last.loc[last["variant"] == name, metric].to_numpy()

    def outcome(name: str) -> dict[str, Any]:
        return {
            "accuracy_pct": summary(column(name, "accuracy"), 100.0),
            "length_incorrect": summary(column(name, "length_incorrect")),
            "length_correct": summary(column(name, "length_correct")),
        }

    base = column(reference.name, "length_incorrect")
    table: dict[str, Any] = {}
    rows = []
    for m, variant in zip(sizes, variants[1 : 1 + len(sizes)], strict=True):
        difference = column(variant.name, "length_incorrect") - base
        entry = {
            "spec": variant.spec_text(),
            **outcome(variant.name),
            "difference_length_incorrect": summary(difference),
        }
        table[str(m)] = entry
        cells = [
            str(m),
            str(responses // m),
            f"{entry['accuracy_pct']['mean']:.1f} ± {entry['accuracy_pct']['se']:.1f}",
            f"{entry['length_incorrect']['mean']:.0f} ± {entry['length_incorrect']['se']:.0f}",
            "{mean:+.0f} ± {se:.0f}".format(**entry["difference_length_incorrect"]),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    by_budget: dict[str, Any] = {}
    budget_rows = []
    for b, variant in zip(BUDGETS, budgets, strict=True):
        difference = column(variant.name, "length_incorrect") - base
        entry = {
            "spec": variant.spec_text(),
            "token_budget": variant.schedule.token_budget,
            **outcome(variant.name),
            "difference_length_incorrect": summary(difference),
        }
        by_budget[str(b)] = entry
        cells = [
            f"{b:,}",
            f"{entry['token_budget']:,}",
            f"{entry['accuracy_pct']['mean']:.1f} ± {entry['accuracy_pct']['se']:.1f}",
            f"{entry['length_incorrect']['mean']:.0f} ± {entry['length_incorrect']['se']:.0f}",
            "{mean:+.0f} ± {se:.0f}".format(**entry["difference_length_incorrect"]),
        ]
        budget_rows.append("| " + " | ".join(cells) + " |")
    dr_grpo = {"spec": reference.spec_text(), **outcome(reference.name)}
    meta = {
        "toyrl_version": __version__,
        "command": "python scripts/verl_width_study.py"
        + (f" --seeds {args.seeds}" if args.seeds != 20 else ""),
        "config": config.to_dict(),
        "seeds": seeds,
        "seed_count": len(seeds),
    }
    text = json.dumps(
        {"meta": meta, "sizes": table, "budgets": by_budget, "dr_grpo": dr_grpo}, indent=1, allow_nan=False
    )
    text += "\n"
    note = (
        f"verl 0.9.1's Dr. GRPO settings (seq-mean-token-sum-norm, norm_adv_by_std_in_grpo=False) with "
        f"loss_scale_factor unset, on the toy's batch of {responses} responses cut into micro-batches of m "
        f"(one optimiser step a batch). Final step {config.steps}, exact expectations, mean ± SE over seeds "
        f"0–{len(seeds) - 1}; the difference is paired with Dr. GRPO (the constant L_norm: loss_scale_factor "
        f"set) on the same seeds and noise, whose E[L | incorrect] is "
        f"{dr_grpo['length_incorrect']['mean']:.0f} ± {dr_grpo['length_incorrect']['se']:.0f}. Made by "
        "`python scripts/verl_width_study.py`.\n\n"
    )
    header = (
        "| m (responses a micro-batch) | micro-batches | accuracy % | E[L \\| incorrect] "
        "| minus Dr. GRPO's (paired) |"
    )
    rule = "| ---: | ---: | ---: | ---: | ---: |"
    budget_note = (
        "\n\nWith use_dynamic_bsz instead (one GPU, prompts of 512 tokens and responses of up to 512, "
        "the budget and prompts scaled to the toy's longest response as `toyrl check` scales them), "
        "on the same seeds:\n\n"
    )
    budget_header = (
        "| ppo_max_token_len_per_gpu | the toy's budget | accuracy % | E[L \\| incorrect] "
        "| minus Dr. GRPO's (paired) |"
    )
    markdown = (
        note + "\n".join([header, rule, *rows]) + budget_note + "\n".join([budget_header, rule, *budget_rows])
    )
    write_together(
        [
            (args.out_dir / "verl_width.json", text),
            (args.out_dir / "verl_width.md", markdown + "\n"),
        ]
    )
    seconds = time.perf_counter() - started
    print(f"wrote {args.out_dir / 'verl_width.json'} and verl_width.md in {seconds:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
