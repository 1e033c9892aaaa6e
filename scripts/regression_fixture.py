"""The regression fixture: every variant and preset on small configurations, to hold the core to its numbers.

    python scripts/regression_fixture.py [--out tests/fixtures]

Written before the core is redesigned (issue: "one step, top to bottom"): after any change to the
simulator, `tests/test_regression.py` regenerates these runs and requires the same numbers, to the
bit on the machine that wrote them and within `toyrl.results.compare_results`'s rule elsewhere.
Covers every preset of `toyrl.variants.VARIANTS`, combinations the presets leave out (PPO
epochs with clip-higher, KL, masking, batch-level advantages, summed aggregations), both |o_i|
conventions, and mean-field runs of the variants that have an exact expected update.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from toyrl.config import Config
from toyrl.experiment import run_experiment
from toyrl.files import write_atomic
from toyrl.variants import VARIANTS

SMALL = Config(
    prompts=8,
    batch_prompts=4,
    group_size=4,
    steps=40,
    cap=60,
    min_length=5,
    stop_prob_right=1 / 20,
    stop_prob_wrong=1 / 30,
    lr=0.05,
)
SEEDS = [0, 1]
EXTRA = [  # spelled canonically (`Variant.spec_text`), so a variant's name is its spec
    "advantage=batch_whiten,aggregation=token_sum",
    "advantage=rloo,aggregation=seq_mean_token_sum",
    "advantage=batch_std,aggregation=token_sum_norm",
    "advantage=none,aggregation=seq_mean_token_sum_norm,num_iterations=4,epsilon_high=0.28",
    # clipping active
    "advantage=group_std,aggregation=seq_mean_token_sum_norm,num_iterations=3,epsilon=0.01,epsilon_high=0.02",
    "advantage=group_std,aggregation=token_mean,beta=0.04",
    "advantage=none,aggregation=seq_mean_token_sum_norm,mask_truncated=True",
    "advantage=group_std_sample,aggregation=seq_mean_token_sum_norm,num_iterations=2,beta=0.1,mask_truncated=True,"
    "std_eps=0.0001",
    "advantage=token_whiten_sample,aggregation=seq_mean_token_mean",  # added with the stage
    # added with the schedule's mini- and micro-batches, shuffles and the dual clip
    "advantage=group_std_sample,aggregation=token_mean,num_iterations=2,mini_batches=4,shuffle=epoch,"
    "dual_clip=1.2,std_eps=1e-06",
    "advantage=none,aggregation=token_mean,mini_batches=2,micro_batches=2,shuffle=once,per_micro_batch=True",
    "advantage=group_std_sample,aggregation=seq_mean_token_sum_norm,num_iterations=2,mini_batches=2",
    # added with the KL placements (k1 in the reward, the ratio-weighted k3) and gradient clipping
    "advantage=group_std_sample,aggregation=token_mean,kl=k1_reward,num_iterations=2,mini_batches=2,beta=0.05",
    "advantage=group_std_sample,aggregation=token_mean,num_iterations=2,beta=0.04,ratio_weighted=True,"
    "std_eps=0.0001",
    "advantage=none,aggregation=seq_mean_token_sum_norm,max_grad_norm=1e-05",
    "advantage=none,aggregation=length_power",  # added with the stage (alpha 0.5: pow's rounding)
    "advantage=group_std_sample,aggregation=token_mean,objective=gspo,num_iterations=2,epsilon=0.003,"
    "epsilon_high=0.004,std_eps=1e-06",
    "advantage=reinforce_pp,aggregation=token_mean",
]
MEAN_FIELD = [
    "grpo",
    "std_only",
    "length_only",
    "dr_grpo",
    "advantage=rloo,aggregation=token_sum_norm",
    "advantage=group_std_sample,aggregation=seq_mean_token_sum,mask_truncated=True",
    "advantage=none,aggregation=length_power",
    "advantage=max_rl,aggregation=seq_mean_token_sum_norm",  # added with the stage (its exact hook)
]


def every_mode(specs: list[str]) -> list[str]:
    """`specs`, then one spec for each registered advantage and aggregation none of them names
    (a new stage is covered without an edit here; the rows before it do not move)."""
    from toyrl.stages import KIND, REGISTRY
    from toyrl.variants import parse_variant

    named = [parse_variant(spec).names() for spec in specs]
    out = list(specs)
    for kind, other in (("advantage", "normaliser"), ("normaliser", "advantage")):
        for name in REGISTRY[kind]:
            if all(names[kind] != name for names in named):
                pair = {kind: name, other: KIND[other].default}
                out.append(f"advantage={pair['advantage']},aggregation={pair['normaliser']}")
    return out


# (file name, configuration, variants, mean-field)
CASES = [
    ("sampled.csv", SMALL, every_mode([*VARIANTS, *EXTRA]), False),
    ("sampled_ramble_tokens.csv", SMALL.replace(count_approach_token=False), ["grpo", "trl_default"], False),
    ("mean_field.csv", SMALL, MEAN_FIELD, True),
]


def make(config: Config, variants: list[str], mean_field: bool) -> pd.DataFrame:
    return run_experiment(config, variants, SEEDS, mean_field=mean_field)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tests/fixtures"), help="folder for the CSVs")
    args = parser.parse_args()
    for name, config, variants, mean_field in CASES:
        frame = make(config, variants, mean_field)
        write_atomic(args.out / name, frame.to_csv(index=False, lineterminator="\n"))
        print(f"wrote {args.out / name}: {len(frame):,} rows")


if __name__ == "__main__":
    main()
