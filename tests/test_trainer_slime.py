"""slime (THUDM/slime v0.3.1) on the toy: its flags mapped as its source reads them, its launch
scripts read, its flags told apart from the other trainers', `toyrl check` end to end.

The mapping was read from slime's source, not run against it (slime is not installable from the
package registry): each expected spec below cites the lines it follows."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from toyrl.cli import app
from toyrl.config import InvalidInput
from toyrl.trainers import resolve
from toyrl.trainers.reading import detect, read_input
from toyrl.variants import VARIANTS, parse_variant

SMALL = ["--steps", "3", "--prompts", "8", "--batch-prompts", "4", "--seeds", "2", "--quiet"]
GROUP = {"n-samples-per-prompt": "8", "rollout-batch-size": "32", "global-batch-size": "256"}


def spec(settings: dict) -> str:
    return parse_variant(resolve("slime", None, settings).mapping.spec).spec_text()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        # rollout.py _post_process_rewards: (r - mean) / (torch.std + 1e-6), Bessel-corrected; loss.py
        # loss_function: sum_of_sample_mean (each sample's own mask sum, rollout_mask_sums of a rollout
        # of one sample) x num_microbatches / step_global_batch_size: each sample's token mean over the step
        ({}, VARIANTS["verl_seq_mean_token_mean"].spec_text()),
        # --disable-grpo-std-normalization (store_false into grpo_std_normalization): no std, the per-sample
        # mean kept: the article's "length_only", not Dr. GRPO
        ({"disable-grpo-std-normalization": True}, VARIANTS["length_only"].spec_text()),
        # --calculate-per-token-loss: sum_of_token, Megatron divides by the step's token count
        (
            {"calculate-per-token-loss": True},
            "advantage=group_std_sample,aggregation=token_mean,std_eps=1e-06",
        ),
        (
            {"calculate-per-token-loss": True, "disable-grpo-std-normalization": True},
            VARIANTS["openrlhf_dr_grpo"].spec_text(),
        ),
    ],
)
def test_the_loss_and_advantage_follow_slime_s_code(settings: dict, expected: str) -> None:
    assert spec({**GROUP, **settings}) == parse_variant(expected).spec_text()


def test_a_group_of_one_has_no_std_and_steps_follow_the_global_batch() -> None:
    # slime's default n_samples_per_prompt 1: each group one response, whose advantage r - its mean
    # is 0 whatever the std (slime_validate_args also sets grpo_std_normalization False): refused
    with pytest.raises(
        InvalidInput, match=r"n-samples-per-prompt=1 is not modelled by toyrl yet \(a group of one"
    ):
        resolve("slime", None, {})
    assert resolve("slime", None, {"n-samples-per-prompt": "2"}).mapping.spec.startswith(
        "advantage=group_std_sample"
    )
    # 32 x 8 responses a rollout, 64 a step: 4 optimiser steps, in the rollout's order
    settings = {**GROUP, "global-batch-size": "64"}
    assert "mini_batches=4" in spec(settings) and "shuffle" not in spec(settings)
    assert "mini_batches=4" in spec({**GROUP, "global-batch-size": None, "num-steps-per-rollout": "4"})
    with pytest.raises(InvalidInput, match=r"slime_validate_args refuses it"):
        resolve("slime", None, {**GROUP, "num-steps-per-rollout": "4"})


def test_objectives_clip_and_kl() -> None:
    # --eps-clip-high defaults to --eps-clip (slime_validate_args); --eps-clip-c is never passed to
    # compute_policy_loss by policy_loss_function in v0.3.1: no dual clip
    resolved = resolve("slime", None, {**GROUP, "eps-clip-high": "0.28", "eps-clip-c": "3"})
    assert "epsilon_high=0.28" in resolved.mapping.spec and "dual_clip" not in resolved.mapping.spec
    assert any("no dual clip" in note for note in resolved.mapping.notes)
    # gspo and cispo: the same advantage, their own ratio
    assert "objective=gspo" in spec(
        {**GROUP, "advantage-estimator": "gspo", "eps-clip": "3e-4", "eps-clip-high": "4e-4"}
    )
    assert "objective=cispo" in spec({**GROUP, "advantage-estimator": "cispo", "eps-clip-high": "2"})
    # --use-kl-loss with low_var_kl: k3 in the loss; --use-unbiased-kl multiplies it by the ratio
    kl = {**GROUP, "use-kl-loss": True, "kl-loss-coef": "0.01", "kl-loss-type": "low_var_kl"}
    assert "beta=0.01" in spec(kl) and "ratio_weighted=True" in spec({**kl, "use-unbiased-kl": True})
    # the default kl-loss-type is k1, which the toy's k3 is not
    assert "beta" not in spec({**kl, "kl-loss-type": "k1"})


def test_dynamic_sampling_by_slime_s_own_filter() -> None:
    path = "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std"
    assert "sampler=filter_groups" in spec({**GROUP, "dynamic-sampling-filter-path": path})
    unknown = resolve("slime", None, {**GROUP, "dynamic-sampling-filter-path": "my.filter"}).mapping
    assert "sampler" not in unknown.spec and any("my.filter" in item for item in unknown.unmodelled)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"advantage-estimator": "ppo"},
            "advantage-estimator='ppo' is not modelled by toyrl yet (a value model)",
        ),
        ({"advantage-estimator": "grpoo"}, "did you mean 'grpo'?"),
        ({"normalize-advantages": True}, "normalize-advantages=True is not modelled"),
        ({"custom-pg-loss-reducer-function-path": "my.reducer"}, "your own reducer"),
        ({"eps-clip": "-1"}, "eps-clip=-1.0 is not valid; valid: a float in [0, inf]"),
        ({"kl-loss-type": "k4"}, "'k1', 'k2', 'k3', 'low_var_kl'"),
    ],
)
def test_bad_values_name_the_valid_ones(settings: dict, message: str) -> None:
    with pytest.raises(InvalidInput) as error:
        resolve("slime", None, {**GROUP, **settings})
    assert message in str(error.value) and "\n" not in str(error.value)


def test_slime_s_flags_are_told_apart() -> None:
    assert detect(["advantage-estimator", "n-samples-per-prompt", "rollout-batch-size"], "x")[0] == "slime"
    assert detect(["loss_type", "num_generations", "output_dir"], "x")[0] == "trl"
    assert detect(["actor_rollout_ref.actor.loss_agg_mode", "trainer.n_gpus_per_node"], "x")[0] == "verl"


SCRIPT = """#!/bin/bash
SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)"
source "${SCRIPT_DIR}/models/qwen3-4B.sh"

ROLLOUT_ARGS=(
   --prompt-data /root/dapo-math-17k/dapo-math-17k.jsonl
   --rollout-batch-size 32
   --n-samples-per-prompt 8
   --global-batch-size 256
)

GRPO_ARGS=(
   --advantage-estimator grpo
   --disable-grpo-std-normalization
   --calculate-per-token-loss
   --use-kl-loss
   --kl-loss-coef 0.00
   --kl-loss-type low_var_kl
   --eps-clip 0.2
   --eps-clip-high 0.28
)

ray job submit --address="http://127.0.0.1:8265" \\
   --runtime-env-json="${RUNTIME_ENV_JSON}" \\
   -- python3 train.py \\
   --actor-num-nodes 1 \\
   --actor-num-gpus-per-node 8 \\
   --colocate \\
   ${MODEL_ARGS[@]} \\
   ${ROLLOUT_ARGS[@]} \\
   ${GRPO_ARGS[@]}
"""


def test_a_launch_script_as_slime_s_scripts_write_it(tmp_path: Path) -> None:
    """scripts/run-qwen3-4B.sh's form: flag arrays spread into `ray job submit -- python3 train.py`."""
    script = tmp_path / "run-qwen3-4B.sh"
    script.write_text(SCRIPT)
    read = read_input([str(script)])
    assert read.settings["disable-grpo-std-normalization"] is True
    assert read.settings["rollout-batch-size"] == "32" and read.settings["eps-clip-high"] == "0.28"
    assert any("MODEL_ARGS" in note for note in read.notes)
    trainer, _ = detect(list(read.settings), str(script))
    assert trainer == "slime"
    resolved = resolve(trainer, None, read.settings, frozenset(read.settings))
    assert (
        parse_variant(resolved.mapping.spec).spec_text()
        == parse_variant("advantage=none,aggregation=token_mean,epsilon_high=0.28").spec_text()
    )


def test_check_end_to_end(tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT)
    result = CliRunner().invoke(app, ["check", str(script), *SMALL])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("read as slime (keys ")
    assert "not run against its code: slime is not installable" in result.stdout
    assert sum(line.startswith("verdict: ") for line in lines) == 1
    assert (
        "to Dr. GRPO: no setting of slime 0.3.1 that toyrl models makes these settings Dr. GRPO's loss"
        in lines
    )
