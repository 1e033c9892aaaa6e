"""NeMo-RL's GRPO settings on the toy (NVIDIA-NeMo/RL v0.7.0, commit 81aa43dd, read from the
repository: the registry's nemo-rl 0.0.0 is a placeholder, so no conformance suite runs its code).

Files read: nemo_rl/algorithms/loss/loss_functions.py (`ClippedPGLossConfig`, `ClippedPGLossFn`),
nemo_rl/algorithms/advantage_estimator.py (`GRPOAdvantageEstimator`), nemo_rl/algorithms/utils.py
(`calculate_baseline_and_std_per_prompt`), nemo_rl/algorithms/grpo.py (`grpo_train`,
`_create_advantage_estimator`, `_clip_grpo_advantages`), nemo_rl/models/policy/workers/
dtensor_policy_worker_v2.py (`train`: one optimiser step per `train_global_batch_size` responses,
normalised by the valid tokens or sequences of that whole global batch), nemo_rl/utils/config.py
(`load_config_with_inheritance`: `defaults:`), examples/run_grpo.py (`--config FILE` then Hydra
overrides) and examples/configs/grpo_math_1B.yaml (the configuration every GRPO example inherits,
whose values are the defaults here where the code has none).

What the mapping follows:
- `loss_fn.token_level_loss` (true): every token of the global batch over its valid tokens
  (token_mean); false: each response's token mean, averaged over its valid responses
  (seq_mean_token_mean). No setting divides by a constant: Dr. GRPO's loss is not reachable;
- `grpo.normalize_rewards` and `grpo.use_leave_one_out_baseline` (both true in grpo_math_1B.yaml;
  `grpo.adv_estimator.*` follows them by interpolation): the baseline is the group's mean, or the
  mean of the other G - 1 rewards; the std is the sample std of the same rewards (of the other
  G - 1 with leave-one-out: advantage=rloo_std), 1e-6 added, and a response whose std is 0 is
  not divided;
- `loss_fn.ratio_clip_min` / `ratio_clip_max`, `ratio_clip_c` (dual clip, > 1);
  `loss_fn.reference_policy_kl_penalty` (0.01, k3 in the loss, aggregated like it);
- `grpo.overlong_filtering`: truncated responses out of the loss;
- `grpo.num_prompts_per_step` x `num_generations_per_prompt` / `policy.train_global_batch_size`:
  optimiser steps per batch, in the batch's order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toyrl.config import InvalidInput
from toyrl.trainers import (
    Entry,
    Release,
    Setting,
    ToyMapping,
    Trainer,
    grad_clip_note,
    not_modelled,
    ppo_spec,
    reading,
    schedule_spec,
)
from toyrl.trainers.launch import Launch, read_overrides
from toyrl.trainers.shell import Word

SOURCE = (
    "NVIDIA-NeMo/RL v0.7.0: nemo_rl/algorithms/loss/loss_functions.py, advantage_estimator.py, utils.py, "
    "grpo.py; examples/configs/grpo_math_1B.yaml"
)
STD_EPS = 1e-6  # GRPOAdvantageEstimator.compute_advantage's epsilon

SETTINGS_0_7_0 = {
    "grpo.num_prompts_per_step": Setting(32, kind=int, low=1),
    "grpo.num_generations_per_prompt": Setting(16, kind=int, low=1, high=10_000),
    "grpo.normalize_rewards": Setting(True, kind=bool),
    "grpo.use_leave_one_out_baseline": Setting(True, kind=bool),
    "grpo.adv_estimator.name": Setting("grpo", ("grpo", "gdpo", "reinforce_plus_plus", "opd")),
    # None: as grpo.normalize_rewards / use_leave_one_out_baseline (grpo_math_1B.yaml interpolates them)
    "grpo.adv_estimator.normalize_rewards": Setting(None, kind=bool, optional=True),
    "grpo.adv_estimator.use_leave_one_out_baseline": Setting(None, kind=bool, optional=True),
    "grpo.overlong_filtering": Setting(False, kind=bool),
    "grpo.advantage_clip_low": Setting(None, kind=float, optional=True),
    "grpo.advantage_clip_high": Setting(None, kind=float, optional=True),
    "grpo.use_dynamic_sampling": Setting(False, kind=bool),
    "grpo.reward_shaping.enabled": Setting(False, kind=bool),
    "grpo.reward_scaling.enabled": Setting(False, kind=bool),
    "grpo.async_grpo.enabled": Setting(False, kind=bool),
    "loss_fn.reference_policy_kl_penalty": Setting(0.01, kind=float, low=0.0),
    "loss_fn.reference_policy_kl_type": Setting("k3", ("k1", "k2", "k3")),
    "loss_fn.ratio_clip_min": Setting(0.2, kind=float, low=0.0, high=1.0),
    "loss_fn.ratio_clip_max": Setting(0.2, kind=float, low=0.0, high=10.0),
    "loss_fn.ratio_clip_c": Setting(None, kind=float, low=1.0, optional=True),
    "loss_fn.token_level_loss": Setting(True, kind=bool),
    "loss_fn.sequence_level_importance_ratios": Setting(False, kind=bool),
    "loss_fn.use_kl_in_reward": Setting(False, kind=bool),
    "loss_fn.use_cispo": Setting(False, kind=bool),
    "loss_fn.disable_ppo_ratio": Setting(False, kind=bool),
    "loss_fn.force_on_policy_ratio": Setting(False, kind=bool),
    "loss_fn.positive_example_nll_weight": Setting(0.0, kind=float, low=0.0),
    "policy.train_global_batch_size": Setting(512, kind=int, low=1),
    "policy.max_grad_norm": Setting(1.0, kind=float, low=0.0, optional=True),
}


def _advantage(normalize: bool, leave_one_out: bool) -> str:
    """The advantage's spec items (GRPOAdvantageEstimator.compute_advantage)."""
    if not normalize:
        return "advantage=rloo" if leave_one_out else "advantage=none"
    if leave_one_out:  # the mean and sample std of the other G - 1 rewards, undivided where it is 0
        return f"advantage=rloo_std,std_eps={STD_EPS:g}"
    # the group's sample std; a zero std has a zero centred reward too
    return f"advantage=group_std_sample,std_eps={STD_EPS:g}"


def _mapping(s: dict[str, Any]) -> ToyMapping:
    estimator = s["grpo.adv_estimator.name"]
    if estimator != "grpo":
        raise not_modelled("grpo.adv_estimator.name", estimator, ["grpo"])
    for key, why in (
        ("loss_fn.use_cispo", "CISPO's clipped weight"),
        ("loss_fn.disable_ppo_ratio", "REINFORCE without the ratio"),
        ("grpo.reward_shaping.enabled", "DAPO's overlong reward with a buffer in tokens"),
    ):
        if s[key]:
            raise not_modelled(key, True, [False], why)
    if s["loss_fn.positive_example_nll_weight"] > 0:
        raise not_modelled(
            "loss_fn.positive_example_nll_weight",
            s["loss_fn.positive_example_nll_weight"],
            [0.0],
            "VAPO's NLL term on correct responses",
        )
    if s["loss_fn.reference_policy_kl_type"] != "k3":
        raise not_modelled("loss_fn.reference_policy_kl_type", s["loss_fn.reference_policy_kl_type"], ["k3"])
    clip_c = s["loss_fn.ratio_clip_c"]
    if clip_c is not None and clip_c <= 1:
        raise InvalidInput(f"loss_fn.ratio_clip_c={clip_c} is not valid; valid: a float > 1 or None")
    token_level = s["loss_fn.token_level_loss"]
    sequence_ratio = s["loss_fn.sequence_level_importance_ratios"]
    if sequence_ratio and token_level:
        raise InvalidInput(
            "loss_fn.sequence_level_importance_ratios=True needs loss_fn.token_level_loss=False "
            "(NeMo-RL asserts it)"
        )
    normalize = s["grpo.adv_estimator.normalize_rewards"]
    normalize = s["grpo.normalize_rewards"] if normalize is None else normalize
    leave_one_out = s["grpo.adv_estimator.use_leave_one_out_baseline"]
    leave_one_out = s["grpo.use_leave_one_out_baseline"] if leave_one_out is None else leave_one_out
    advantage = _advantage(normalize, leave_one_out)
    spec = [advantage, "aggregation=token_mean" if token_level else "aggregation=seq_mean_token_mean"]
    if sequence_ratio:
        spec.append("objective=gspo")
    beta = 0.0 if s["loss_fn.use_kl_in_reward"] else s["loss_fn.reference_policy_kl_penalty"]
    spec += ppo_spec(s["loss_fn.ratio_clip_min"], s["loss_fn.ratio_clip_max"], 1, beta, False, clip_c)
    if s["grpo.overlong_filtering"]:
        spec.append("mask_truncated=True")
    notes = []
    if normalize and leave_one_out:
        notes.append(
            "grpo.normalize_rewards=True with grpo.use_leave_one_out_baseline=True: each response's baseline "
            "and sample std are of the other G - 1 rewards of its group, 1e-6 added to the std; a response "
            "whose others all agree (std 0) keeps r_i - baseline undivided, so a group's one correct "
            "answer earns 1 (advantage=rloo_std)"
        )
    if beta > 0:
        notes.append(
            f"loss_fn.reference_policy_kl_penalty={beta}: a k3 KL term in the loss, aggregated like it "
            "(grpo_math_1B.yaml's default is 0.01; NeMo-RL clamps the log-ratio at 20 and each token's k3 "
            "at 10, which the toy leaves out)"
        )
    if s["loss_fn.use_kl_in_reward"]:
        notes.append(
            "loss_fn.use_kl_in_reward=True: the GRPO estimator adds no KL to the reward, and the loss none"
        )
    generated = s["grpo.num_prompts_per_step"] * s["grpo.num_generations_per_prompt"]
    schedule, notes_of_schedule = schedule_spec(
        generated,
        s["policy.train_global_batch_size"],
        "none",
        "grpo.num_prompts_per_step x grpo.num_generations_per_prompt / policy.train_global_batch_size",
    )
    spec += schedule
    unmodelled = list(notes_of_schedule)
    for key, what in (
        ("grpo.advantage_clip_low", "clamps the advantages from below"),
        ("grpo.advantage_clip_high", "clamps the advantages from above"),
    ):
        if s[key] is not None:
            unmodelled.append(f"{key}={s[key]}: {what}; left out")
    for key, what in (
        (
            "grpo.use_dynamic_sampling",
            "keeps only groups whose rewards differ, refilled from further batches",
        ),
        ("grpo.reward_scaling.enabled", "maps the rewards linearly"),
        ("grpo.async_grpo.enabled", "trains on responses of older policies"),
        ("loss_fn.force_on_policy_ratio", "sets the ratio to 1 (one optimiser step a batch)"),
    ):
        if s[key]:
            unmodelled.append(f"{key}=True: {what}; left out")
    if s["policy.max_grad_norm"]:
        unmodelled.append(grad_clip_note("policy.max_grad_norm", s["policy.max_grad_norm"]))
    group = {"group_size": ("grpo.num_generations_per_prompt", s["grpo.num_generations_per_prompt"])}
    return ToyMapping(
        ",".join(spec), group, unmodelled, notes, step_responses=s["policy.train_global_batch_size"]
    )


def read_config(path: Path) -> dict[str, Any]:
    """A NeMo-RL configuration file as flat settings: its `defaults:` (a file, or a list of files,
    relative to its folder) read first, each under the next and the file over them all, a section
    marked `_override_: true` replacing the one it inherits (nemo_rl/utils/config.py); then the
    `${...}` interpolations toyrl reads are resolved over the merged configuration, as OmegaConf
    resolves NeMo-RL's. `grpo.adv_estimator.normalize_rewards: ${grpo.normalize_rewards}` (and
    use_leave_one_out_baseline's) are left to follow the grpo setting, which a command's override
    may change."""
    nested = _inherited(path, ())
    flat = reading.flat_settings(nested)
    for key in ("normalize_rewards", "use_leave_one_out_baseline"):
        if flat.get(f"grpo.adv_estimator.{key}") == f"${{grpo.{key}}}":
            del flat[f"grpo.adv_estimator.{key}"]
    return reading.interpolated(path, nested, flat)


MAX_INHERITANCE = 20  # files in a chain of defaults: NeMo-RL's recipes go 3 deep


def _inherited(path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    """The file's nested settings over those of its `defaults:`."""
    if len(chain) >= MAX_INHERITANCE:
        raise InvalidInput(f"{chain[0]}: its defaults go more than {MAX_INHERITANCE} files deep")
    if path.resolve() in chain:
        raise InvalidInput(f"{chain[0]}: its defaults come back to {path}")
    data = reading.parse_yaml(path, reading.file_text(path))
    if not isinstance(data, dict):
        raise InvalidInput(f"{path}: expected a mapping of settings at the top level")
    reading.check_bounded(path, data)
    nested = reading.sections_of(path, data)
    defaults = nested.pop("defaults", None)
    parents = [defaults] if isinstance(defaults, str) else defaults or []
    if not isinstance(parents, list) or not all(isinstance(parent, str) for parent in parents):
        raise InvalidInput(f"{path}: defaults is {defaults!r}; expected a file, or a list of files")
    merged: dict[str, Any] = {}
    for parent in parents:
        found = Path(parent) if parent.startswith("/") else path.parent / parent
        if not found.exists():
            raise InvalidInput(f"{path}: its defaults name {parent}, which is not found beside it")
        merged = _merge(merged, _inherited(found, (*chain, path.resolve())))
    return _merge(merged, nested)


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged into `base` as OmegaConf.merge does, a section with `_override_: true` replacing."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and value.get("_override_"):
            merged[key] = {name: inner for name, inner in value.items() if name != "_override_"}
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def read_launch(words: list[Word], origin: str) -> Launch:
    """examples/run_grpo.py's arguments: `--config FILE` (argparse's parse_known_args; without it,
    examples/configs/grpo_math_1B.yaml, beside the script), the rest Hydra overrides
    (parse_hydra_overrides)."""
    config = ""
    rest: list[Word] = []
    pending = False
    for word in words:
        if pending:
            config, pending = word.text, False
            if word.unknown:
                raise InvalidInput(f"{origin}: --config {word.text}: the file's path cannot be read")
        elif word.text == "--config":
            pending = True
        elif word.text.startswith("--config="):
            config = word.text.partition("=")[2]
        else:
            rest.append(word)
    if pending:
        raise InvalidInput(f"{origin}: --config without a file")
    launch = read_overrides(rest, origin, trainer="nemo-rl")
    launch.files = [config or "examples/configs/grpo_math_1B.yaml"]
    return launch


# Sections only NeMo-RL's configurations have (examples/configs/grpo_math_1B.yaml); `logger.` is
# OpenRLHF's too, so that it counts for neither.
MARKS = (
    "grpo.",
    "loss_fn.",
    "policy.dtensor_cfg.",
    "policy.megatron_cfg.",
    "policy.generation.",
    "cluster.",
    "logger.",
)
# names of its configuration spelt like a setting toyrl reads: the micro-batch size does not change
# the loss (every micro-batch is divided by the global batch's valid tokens or sequences)
OTHER_NAMES = frozenset(
    {
        "grpo.max_num_steps",
        "grpo.max_num_epochs",
        "grpo.max_rollout_turns",
        "policy.train_micro_batch_size",
        "policy.logprob_batch_size",
        "policy.generation_batch_size",
    }
)

TRAINER = Trainer(
    name="NeMo-RL",
    distribution="nemo-rl",
    releases={
        "0.7.0": Release(
            SETTINGS_0_7_0,
            SOURCE,
            _mapping,
            dr_grpo={
                "grpo.normalize_rewards": (False,),
                "grpo.use_leave_one_out_baseline": (False,),
                "loss_fn.token_level_loss": (True, False),
                "grpo.overlong_filtering": (False,),
            },
            not_run=(
                "nemo-rl is not installable from the package registry (its 0.0.0 is NVIDIA's placeholder, "
                "with no code); "
                "read from NVIDIA-NeMo/RL v0.7.0 (commit 81aa43dd)"
            ),
        )
    },
    marks=MARKS,
    other_names=OTHER_NAMES,
    entries=tuple(
        Entry(module=f"examples.{name}", read=read_launch)
        for name in ("run_grpo", "run_grpo_math", "run_grpo_rm", "run_grpo_sliding_puzzle")
    ),
    read_file=read_config,
)
