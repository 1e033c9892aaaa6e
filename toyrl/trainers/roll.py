"""ROLL's RLVR pipeline settings on the toy (alibaba/ROLL v0.3.0 + 9 commits, commit 8eb27cc2,
read from the repository: the registry's `roll` is another project, so no conformance suite runs
ROLL's code).

Files read: roll/utils/functionals.py (`agg_loss`, `reward_norm`, `reward_postprocess`,
`get_sample_level_mask`, `compute_advantage`, `masked_whiten`), roll/pipeline/rlvr/actor_worker.py
(`ActorWorker.loss_func`), roll/pipeline/base_worker.py (`ActorWorker.train_step`: mini-batches of
per_device_train_batch_size x gradient_accumulation_steps per rank, reshuffled each of
`ppo_epochs`), roll/distributed/strategy/megatron_strategy.py and strategy.py (`train_step`: each
micro-batch's loss times num_microbatches x data-parallel size, so a step's gradient is the sum of
its micro-batches' losses; `batch_num_tokens` and `global_valid_samples` counted over the step on
every rank), roll/utils/dynamic_batching.py, roll/configs/base_config.py (`PPOConfig`),
roll/configs/worker_config.py, roll/pipeline/rlvr/rlvr_config.py (`RLVRConfig`) and
examples/start_rlvr_pipeline.py (`--config_path D --config_name N`, Hydra's compose).

What the mapping follows:
- `loss_agg_mode` (default seq-mean-token-mean): token-mean (the step's tokens), seq-mean-token-mean,
  seq-mean-token-sum (over the step's responses) and seq-mean-token-sum-norm: each micro-batch's
  token sums over its padded width (loss_mask.shape[-1], the sequence_length - 1 of prompt and
  response the batch is padded to), never over N, summed over the step's micro-batches: N x
  L_norm / (sequence_length - 1) times Dr. GRPO's loss, a constant while the width is; with
  dynamic batching or sequence packing the width is each micro-batch's own, which toyrl lacks;
- `adv_estimator` grpo: the group's mean and sample std + 1e-6 (`reward_postprocess` sets both
  norm types to group); reinforce: `norm_mean_type` / `norm_std_type`, each token's return the
  response's reward (gamma 1); `whiten_advantages`: whitened over the batch's tokens (Bessel,
  rsqrt(var + 1e-8));
- `pg_clip` (or `pg_clip_low` / `pg_clip_high` with `use_pg_clip_range`), `dual_clip_loss` (c = 1 +
  2 pg_clip), `ppo_epochs`, `use_kl_loss` with `kl_loss_coef` (k3 aggregated like the loss),
  `max_len_mask` (responses that fill the response width out of the loss); `difficulty_mask`
  (`difficulty_mask`, `get_sample_level_mask`: the groups whose mean score is not strictly between
  `difficulty_low_threshold` and `difficulty_high_threshold`, 0 and 1 by default, out of
  final_response_mask, not refilled: selector=difficulty; with max_len_mask, drop_truncated). The
  loss's counts follow that mask:
  token-mean's tokens, and seq-mean's responses (`global_valid_samples` counts the responses with a
  token in it), which the toy's per-response means do not (told in the report).
"""

from __future__ import annotations

import ast
import math
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
from toyrl.trainers.launch import Launch, read_flags
from toyrl.trainers.shell import Word

SOURCE = (
    "alibaba/ROLL 8eb27cc2 (v0.3.0 + 9): roll/utils/functionals.py, roll/pipeline/rlvr/actor_worker.py, "
    "roll/pipeline/base_worker.py, roll/configs/base_config.py"
)
NORMS = ("batch", "group", "running")
TRAIN = "actor_train."
TRAIN_ARGS = "actor_train.training_args."
STRATEGY = "actor_train.strategy_args.strategy_config."

SETTINGS_0_3_0 = {
    "adv_estimator": Setting(
        "gae", ("gae", "reinforce", "grpo", "gigpo", "step_reinforce", "agentic_reinforce")
    ),
    "norm_mean_type": Setting(None, NORMS, optional=True),
    "norm_std_type": Setting(None, NORMS, optional=True),
    "whiten_advantages": Setting(False, kind=bool),
    "whiten_rewards": Setting(False, kind=bool),
    "loss_agg_mode": Setting(
        "seq-mean-token-mean",
        ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
    ),
    "pg_clip": Setting(0.2, kind=float, low=0.0, high=1.0),
    "use_pg_clip_range": Setting(False, kind=bool),
    "pg_clip_low": Setting(0.2, kind=float, low=0.0, high=1.0),
    "pg_clip_high": Setting(0.2, kind=float, low=0.0, high=10.0),
    "dual_clip_loss": Setting(False, kind=bool),
    "ppo_epochs": Setting(1, kind=int, low=1, high=64),
    "use_kl_loss": Setting(False, kind=bool),
    "kl_loss_coef": Setting(0.0, kind=float, low=0.0),
    "add_token_level_kl": Setting(False, kind=bool),
    "importance_sampling": Setting("token", ("token", "seq")),
    "max_len_mask": Setting(False, kind=bool),
    "difficulty_mask": Setting(False, kind=bool),
    "difficulty_low_threshold": Setting(0.0, kind=float, low=-10.0, high=10.0),
    "difficulty_high_threshold": Setting(1.0, kind=float, low=-10.0, high=10.0),
    "error_max_len_clip": Setting(False, kind=bool),
    "length_loss_weight": Setting(False, kind=bool),
    "difficulty_loss_weight": Setting(False, kind=bool),
    "advantage_clip": Setting(None, kind=float, low=0.0, optional=True),
    "reward_clip": Setting(None, kind=float, low=0.0, optional=True),
    "entropy_loss_coef": Setting(0.0, kind=float),
    "async_generation_ratio": Setting(0.0, kind=float, low=0.0),
    "max_grad_norm": Setting(1.0, kind=float, low=0.0),
    "rollout_batch_size": Setting(128, kind=int, low=1),
    "num_return_sequences_in_group": Setting(1, kind=int, low=1, high=10_000),
    "prompt_length": Setting(1024, kind=int, low=1, optional=True),
    "response_length": Setting(None, kind=int, low=1, optional=True),
    "sequence_length": Setting(None, kind=int, low=2, optional=True),
    f"{TRAIN_ARGS}per_device_train_batch_size": Setting(8, kind=int, low=1),
    f"{TRAIN_ARGS}gradient_accumulation_steps": Setting(1, kind=int, low=1),
    f"{TRAIN}device_mapping": Setting(None, optional=True),
    f"{STRATEGY}tensor_model_parallel_size": Setting(1, kind=int, low=1),
    f"{STRATEGY}pipeline_model_parallel_size": Setting(1, kind=int, low=1),
    f"{STRATEGY}context_parallel_size": Setting(1, kind=int, low=1),
    f"{TRAIN}use_dynamic_batching_in_train": Setting(False, kind=bool),
    f"{TRAIN}use_sequence_packing": Setting(False, kind=bool),
}


def _advantage(s: dict[str, Any]) -> tuple[str, list[str]]:
    """The advantage's spec item (`reward_postprocess`, `reward_norm`, `compute_advantage`) and what
    differs from ROLL's."""
    estimator = s["adv_estimator"]
    if estimator == "gae":
        raise not_modelled("adv_estimator", estimator, ["grpo", "reinforce"], "a value model")
    if estimator not in ("grpo", "reinforce"):
        raise not_modelled("adv_estimator", estimator, ["grpo", "reinforce"], "the agentic pipeline's")
    if s["whiten_rewards"]:
        raise not_modelled("whiten_rewards", True, [False])
    mean, std = ("group", "group") if estimator == "grpo" else (s["norm_mean_type"], s["norm_std_type"])
    whiten = s["whiten_advantages"]
    named = "adv_estimator=grpo" if estimator == "grpo" else f"norm_mean_type={mean}, norm_std_type={std}"
    if "running" in (mean, std):
        raise not_modelled(
            "norm_mean_type" if mean == "running" else "norm_std_type", "running", ["group", "batch", None]
        )
    if whiten:
        if (mean, std) == ("group", None):
            return "advantage=token_whiten_sample", []
        if (mean, std) in ((None, None), ("batch", None), ("batch", "batch")):
            affine = (
                []
                if (mean, std) == (None, None)
                else [
                    f"{named}: an affine map of the rewards, which whitening over the tokens undoes (up "
                    "to its 1e-8 variance epsilon): the toy whitens the rewards themselves"
                ]
            )
            return "advantage=reinforce_pp", affine
        raise not_modelled("whiten_advantages", True, [False], f"after {named}")
    if (mean, std) == ("group", None):
        return "advantage=none", []
    if (mean, std) == ("group", "group"):
        return "advantage=group_std_sample,std_eps=1e-06", []
    if (mean, std) == ("group", "batch"):
        return "advantage=batch_std,std_eps=1e-06", []
    raise not_modelled("norm_mean_type", mean, ["group"], f"{named} without whiten_advantages")


MAX_DEVICES = 1_000_000  # device ids toyrl reads in a device_mapping


def _gpus(mapping: str | None) -> int:
    """The training GPUs of `device_mapping` as ROLL writes it (`list(range(0, 16))`, `[0, 1]`),
    read with Python's grammar, never evaluated; 1 without one."""
    if mapping is None:
        return 1
    try:
        tree = ast.parse(str(mapping), mode="eval").body
    except SyntaxError:
        tree = None
    if isinstance(tree, ast.List) and tree.elts:
        return len(tree.elts)
    if (
        isinstance(tree, ast.Call)
        and isinstance(tree.func, ast.Name)
        and tree.func.id == "list"
        and len(tree.args) == 1
        and isinstance(inner := tree.args[0], ast.Call)
        and isinstance(inner.func, ast.Name)
        and inner.func.id == "range"
        and all(isinstance(arg, ast.Constant) and isinstance(arg.value, int) for arg in inner.args)
    ):
        bounds = []
        for arg in inner.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, int):
                bounds.append(arg.value)
        step = bounds[2] if len(bounds) == 3 else 1
        if 1 <= len(bounds) <= 3 and step != 0 and all(abs(bound) <= MAX_DEVICES for bound in bounds):
            gpus = len(range(*bounds))
            if gpus > 0:
                return gpus
    raise InvalidInput(
        f"actor_train.device_mapping={mapping!r} is not read by toyrl; it reads a list of device ids or "
        "list(range(a, b))"
    )


def _mapping(s: dict[str, Any]) -> ToyMapping:
    for key, why in (
        ("add_token_level_kl", "a KL penalty in each token's reward"),
        ("error_max_len_clip", "wrong responses longer than a threshold out of the loss"),
        ("length_loss_weight", "each response weighed by its length in the batch"),
    ):
        if s[key]:
            raise not_modelled(key, True, [False], why)
    advantage, unmodelled = _advantage(s)
    masks = [key for key in ("max_len_mask", "difficulty_mask") if s[key]]
    if s["whiten_advantages"] and masks:
        unmodelled.append(
            f"whiten_advantages=True with {' and '.join(f'{key}=True' for key in masks)}: ROLL whitens over "
            "the tokens of the responses left in the loss (compute_advantage's response_mask is "
            "final_response_mask); the toy over every response's"
        )
    mode = s["loss_agg_mode"]
    layout_by_length = s[f"{TRAIN}use_dynamic_batching_in_train"] or s[f"{TRAIN}use_sequence_packing"]
    notes: list[str] = []
    if mode == "seq-mean-token-sum-norm":
        if layout_by_length:
            raise not_modelled(
                "loss_agg_mode",
                mode,
                ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"],
                "with dynamic batching or sequence packing it divides by each micro-batch's own padded "
                "width, never by N",
            )
        width = s["sequence_length"]
        if width is None and (s["prompt_length"] is None or s["response_length"] is None):
            raise InvalidInput(
                "loss_agg_mode=seq-mean-token-sum-norm divides by sequence_length - 1: give "
                "sequence_length, or prompt_length and response_length (ROLL asserts one of them)"
            )
        width = width or s["prompt_length"] + s["response_length"]
        unmodelled.append(
            f"loss_agg_mode=seq-mean-token-sum-norm: each micro-batch's token sums over the padded width "
            f"{width - 1} (sequence_length - 1, prompt and response), never over N, summed over the "
            "step: N x L_norm / (sequence_length - 1) times Dr. GRPO's loss, a constant that only "
            "rescales the learning rate; the toy divides by N x its own cap (Config.length_norm)"
        )
    aggregation = {
        "token-mean": "token_mean",
        "seq-mean-token-mean": "seq_mean_token_mean",
        "seq-mean-token-sum": "seq_mean_token_sum",
        "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
    }[mode]
    spec = [advantage, f"aggregation={aggregation}"]
    if s["importance_sampling"] == "seq":
        spec.append("objective=gspo")
    low, high = (
        (s["pg_clip_low"], s["pg_clip_high"]) if s["use_pg_clip_range"] else (s["pg_clip"], s["pg_clip"])
    )
    beta = s["kl_loss_coef"] if s["use_kl_loss"] else 0.0
    dual = 1 + 2 * s["pg_clip"] if s["dual_clip_loss"] else None
    spec += ppo_spec(low, high, s["ppo_epochs"], beta, s["max_len_mask"] and not s["difficulty_mask"], dual)
    if s["difficulty_mask"]:
        spec += [
            "selector=difficulty",
            f"low={s['difficulty_low_threshold']}",
            f"high={s['difficulty_high_threshold']}",
        ]
        if s["max_len_mask"]:  # both in final_response_mask: the selector drops truncated responses too
            spec.append("drop_truncated=True")
        notes.append(
            f"difficulty_mask=True: a group whose mean score is not strictly between "
            f"difficulty_low_threshold={s['difficulty_low_threshold']} and difficulty_high_threshold="
            f"{s['difficulty_high_threshold']} is masked out of the loss (final_response_mask), not refilled"
        )
    if (s["difficulty_mask"] or s["max_len_mask"]) and mode in ("seq-mean-token-mean", "seq-mean-token-sum"):
        unmodelled.append(
            f"loss_agg_mode={mode} with a mask (max_len_mask, difficulty_mask): ROLL divides by the "
            "responses left in final_response_mask (global_valid_samples), the toy by every response: "
            "ROLL's step is larger by N / (responses in the loss), a factor that moves from step to step"
        )
    if dual is not None:
        notes.append(f"dual_clip_loss=True: dual clip at c = 1 + 2 x pg_clip = {dual:g}")
    if beta > 0:
        notes.append(f"use_kl_loss=True, kl_loss_coef={beta}: a k3 KL term in the loss, aggregated like it")
    gpus = _gpus(s[f"{TRAIN}device_mapping"])
    model_parallel = (
        s[f"{STRATEGY}tensor_model_parallel_size"]
        * s[f"{STRATEGY}pipeline_model_parallel_size"]
        * s[f"{STRATEGY}context_parallel_size"]
    )
    ranks = max(1, gpus // model_parallel)
    step = (
        s[f"{TRAIN_ARGS}per_device_train_batch_size"] * s[f"{TRAIN_ARGS}gradient_accumulation_steps"] * ranks
    )
    group_size = s["num_return_sequences_in_group"]
    schedule, notes_of_schedule = schedule_spec(
        s["rollout_batch_size"] * group_size,
        step,
        "epoch",
        "rollout_batch_size x num_return_sequences_in_group / (per_device_train_batch_size x "
        f"gradient_accumulation_steps x {ranks} data-parallel ranks)",
    )
    spec += schedule
    unmodelled += notes_of_schedule
    if ranks > 1 and len(schedule) > 0:
        unmodelled.append(
            f"each of the {ranks} data-parallel ranks shuffles its own share (dealt by batch_balance); "
            "the toy shuffles the whole batch"
        )
    # a group-std advantage of 0/1 rewards is at most (G - 1) / sqrt(G) in size (one success among G)
    largest = None
    if advantage.startswith("advantage=group_std"):
        largest = (group_size - 1) / math.sqrt(group_size)
    for key, what in (
        ("advantage_clip", "clamps the advantages to [-C, C]"),
        ("reward_clip", "clamps the normalised rewards to [-C, C]"),
    ):
        if s[key] is not None and largest is not None and s[key] >= largest:
            notes.append(f"{key}={s[key]}: cannot act on the toy, whose advantages are at most {largest:.3g}")
        elif s[key] is not None:
            unmodelled.append(f"{key}={s[key]}: {what}; left out")
    if s["entropy_loss_coef"]:
        unmodelled.append(f"entropy_loss_coef={s['entropy_loss_coef']}: an entropy bonus; left out")
    if s["difficulty_loss_weight"]:
        unmodelled.append(
            "difficulty_loss_weight=True: weighs responses by the data's difficulty field; left out"
        )
    if s["async_generation_ratio"] > 0:
        unmodelled.append(
            f"async_generation_ratio={s['async_generation_ratio']}: responses of older policies; left out"
        )
    if s["max_grad_norm"] > 0:
        unmodelled.append(grad_clip_note("max_grad_norm", s["max_grad_norm"]))
    group = {"group_size": ("num_return_sequences_in_group", group_size)}
    return ToyMapping(",".join(spec), group, unmodelled, notes, step_responses=step)


def read_config(path: Path) -> dict[str, Any]:
    """A ROLL configuration file as flat settings, as Hydra composes it: its `defaults:` list read
    first (each entry a file relative to its folder, `.yaml` added; `NAME` and `NAME@_here_` merged
    at the top, `NAME@PKG` under PKG, a `group: option` entry as group/option.yaml under `group`),
    the file's own settings where `_self_` stands (last when it is not listed); then the `${...}`
    interpolations toyrl reads are resolved over the composed configuration. A YAML list of device
    ids in `actor_train.device_mapping` is read as the text of that list (ROLL takes either)."""
    nested = _composed(path, ())
    flat = reading.flat_settings(nested)
    mapping = flat.get(f"{TRAIN}device_mapping")
    if isinstance(mapping, list):  # WorkerConfig takes a list of ids as well as the text of one
        flat[f"{TRAIN}device_mapping"] = repr(mapping)
    return reading.interpolated(path, nested, flat)


MAX_DEFAULTS = 20  # files in a chain of defaults lists


def _composed(path: Path, chain: tuple[Path, ...]) -> dict[str, Any]:
    if len(chain) >= MAX_DEFAULTS or path.resolve() in chain:
        raise InvalidInput(f"{chain[0] if chain else path}: its defaults lists go in a cycle or too deep")
    data = reading.parse_yaml(path, reading.file_text(path))
    if not isinstance(data, dict):
        raise InvalidInput(f"{path}: expected a mapping of settings at the top level")
    reading.check_bounded(path, data)
    defaults = data.pop("defaults", None)
    own = reading.sections_of(path, data)
    entries = defaults if isinstance(defaults, list) else [] if defaults is None else None
    if entries is None:
        raise InvalidInput(f"{path}: defaults is {defaults!r}; Hydra's defaults is a list")
    if "_self_" not in entries:
        entries = [*entries, "_self_"]
    merged: dict[str, Any] = {}
    for entry in entries:
        if entry == "_self_":
            merged = _merge(merged, own)
            continue
        if isinstance(entry, dict) and len(entry) == 1:
            group, option = (str(part) for part in next(iter(entry.items())))
            folder, _, package = group.partition("@")
            name, package = f"{folder}/{option}", package or folder
        elif isinstance(entry, str):
            name, _, package = entry.partition("@")
        else:
            raise InvalidInput(f"{path}: the defaults entry {entry!r} is not read by toyrl")
        found = path.parent / (name if name.endswith(".yaml") else f"{name}.yaml")
        if not found.exists():
            raise InvalidInput(f"{path}: its defaults name {name}, which is not found beside it")
        inner = _composed(found, (*chain, path.resolve()))
        for section in reversed(package.split(".") if package and package != "_here_" else []):
            inner = {section: inner}
        merged = _merge(merged, inner)
    return merged


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def read_launch(words: list[Word], origin: str) -> Launch:
    """examples/start_rlvr_pipeline.py's (and start_rlvr_vl_pipeline.py's) arguments (argparse):
    `--config_path D` (relative to the
    script's folder, as Hydra's initialize takes it; default "config") and `--config_name N`
    (default "sppo_config"): the file D/N.yaml."""
    launch = read_flags(words, origin, "roll")
    path = launch.settings.pop("config_path", "config")
    name = launch.settings.pop("config_name", "sppo_config")
    for flag, value in (("--config_path", path), ("--config_name", name)):
        if not isinstance(value, str):
            shown = getattr(value, "text", value)
            raise InvalidInput(f"{origin}: {flag} {shown}: the configuration's path cannot be read")
    if launch.settings:
        raise InvalidInput(
            f"{origin}: --{next(iter(launch.settings))} is not an argument of ROLL's RLVR pipeline script; "
            "it takes --config_path and --config_name"
        )
    launch.files = [f"examples/{path}/{name if name.endswith('.yaml') else name + '.yaml'}"]
    return launch


# Names and sections only ROLL's configurations have (examples/*-rlvr_*/*.yaml); not `pretrain`, which
# OpenRLHF's older flags share.
MARKS = (
    "actor_train.",
    "actor_infer.",
    "num_return_sequences_in_group",
    "rewards.",
    "pg_clip",
    "dual_clip_loss",
)
# also names other trainers have (prime-rl's max_steps, OpenRLHF's init_kl_coef and reward_pretrain, oat's
# reward_scale): known by both, they count for neither
OTHER_NAMES = frozenset(
    {"val_n_sample", "critic_warmup", "max_steps", "init_kl_coef", "reward_scale", "reward_pretrain"}
)

# Sections of ROLL's configuration with no bearing on the actor's loss, some of whose names are
# spelt like the actor_train settings toyrl reads.
IGNORES = {
    "reference.": "the reference model's workers (their parallel layout does not change the actor's loss)",
    "actor_infer.": "the generation workers",
    "critic.": "the value model's workers (GAE, which toyrl does not model)",
    "validation.": "validation",
    f"{STRATEGY}expert_model_parallel_size": "experts split over ranks: the data-parallel ranks stay",
}

TRAINER = Trainer(
    name="ROLL",
    distribution="roll",
    releases={
        "0.3.0": Release(
            SETTINGS_0_3_0,
            SOURCE,
            _mapping,
            dr_grpo={
                "adv_estimator": ("reinforce", "grpo"),
                "norm_mean_type": ("group",),
                "norm_std_type": (None,),
                "whiten_advantages": (False,),
                "loss_agg_mode": ("seq-mean-token-sum-norm",),
                "max_len_mask": (False,),
            },
            ignores=IGNORES,
            not_run=(
                "the package registry's roll is an unrelated project (pyrates/roll 0.13.4, an HTTP "
                "framework), and ROLL is not published there; read from alibaba/ROLL commit 8eb27cc2 "
                "(v0.3.0 + 9 commits)"
            ),
        )
    },
    marks=MARKS,
    other_names=OTHER_NAMES,
    entries=(
        Entry(module="examples.start_rlvr_pipeline", read=read_launch),
        Entry(module="examples.start_rlvr_vl_pipeline", read=read_launch),  # the same RLVRConfig and loss
    ),
    read_file=read_config,
)
