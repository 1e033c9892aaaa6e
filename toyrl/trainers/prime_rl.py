"""prime-rl's RL settings on the toy (PrimeIntellect-ai/prime-rl v0.8.0, read from its source:
packages/prime-rl-configs/src/prime_rl/configs/algorithm.py (`GRPOAlgoConfig`, `MaxRLAlgoConfig`,
`LinearLengthPenaltyConfig`), orchestrator.py (`batch_size`, `group_size`) and trainer.py
(`DefaultLossConfig`, `IPOLossConfig`); src/prime_rl/orchestrator/algo/grpo.py and max_rl.py
(`score_group`); src/prime_rl/trainer/rl/loss.py (`default_loss_fn`, `ipo_loss_fn`, `compute_loss`)).
Settings are the paths of its `rl` entry's TOML (`orchestrator.algo.type`, `trainer.loss.kl_tau`);
its launch is `uv run rl @ FILE.toml --section.key value ...` (README.md, docs/configuration.md).

What the mapping follows:
- the advantage (`orchestrator.algo.type`): "grpo", the reward minus its group's mean, no std;
  with `orchestrator.algo.length_penalty` (None by default: an empty `[orchestrator.algo.
  length_penalty]` table or a bare `--orchestrator.algo.length-penalty` turns it on at its
  defaults) each reward less the group's pass rate times 0.25 |o| / max |o| + 0.1 + 0.1 on the
  toy (one prompt length, one turn) before the mean: reward=length_penalty; "max_rl", (r - mean)
  / mean;
- the loss: each token's -adv_tau A ratio (DPPO-Binary TV: tokens whose probability moved beyond
  `dppo_mask_low` / `_high` since sampling are masked) + kl_tau (log ratio)^2, summed over the
  step and divided by the step's global count of loss tokens (`compute_loss`'s rl_scale):
  token_mean. The toy's update is on-policy (the ratio is 1): the mask keeps every token and the
  squared log ratio has no gradient, so the loss is the plain policy gradient's;
- one optimiser step per `orchestrator.batch_size` samples of `orchestrator.group_size` per prompt;
  the rollouts of zero advantage are dropped from it (src/prime_rl/orchestrator/filters.py
  `ZeroAdvantageFilter`, in `post_batch_filters` and enforced by default: not sent to the
  trainer), so the token mean counts only the tokens of groups with a signal: selector=informative
  (a group of equal rewards out of the loss and its count; with 0/1 rewards, exactly the rollouts
  whose advantage is all 0). An enforced zero_advantage filter in `pre_batch_filters` (off by
  default) keeps such groups from taking a slot of the batch, which is refilled: not modelled.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from toyrl.config import InvalidInput
from toyrl.trainers import Entry, Release, Setting, ToyMapping, Trainer, not_modelled

if TYPE_CHECKING:
    from toyrl.trainers.launch import Launch
    from toyrl.trainers.shell import Word

ALGORITHMS = ("grpo", "echo", "max_rl", "rae", "hierarchical_grpo", "opd", "opsd", "sft")
ALGORITHM_REASONS = {
    "echo": "cross-entropy on the environment's tokens of later turns besides GRPO",
    "rae": "a per-agent moving baseline across steps",
    "hierarchical_grpo": "proposer-solver groups",
    "opd": "distillation: the reverse KL to a teacher as the signal",
    "opsd": "self-distillation: the reverse KL to the demonstration-conditioned policy",
    "sft": "cross-entropy on a frozen model's samples",
}
PENALTY = "orchestrator.algo.length_penalty"
PENALTY_WEIGHTS = {
    "num_output_tokens_weight": 0.25,
    "num_input_tokens_weight": 0.1,
    "num_turns_weight": 0.1,
}
LOSS = "trainer.loss."

SETTINGS_0_8_0 = {
    "orchestrator.algo.type": Setting("grpo", ALGORITHMS),
    PENALTY: Setting(False, kind=bool),
    PENALTY + ".type": Setting("linear", ("linear",)),
    **{
        f"{PENALTY}.{key}": Setting(value, kind=float, low=0.0, high=1e6)
        for key, value in PENALTY_WEIGHTS.items()
    },
    "orchestrator.group_size": Setting(1, kind=int, low=1, high=10_000),
    "orchestrator.batch_size": Setting(None, kind=int, low=1, optional=True),
    "orchestrator.token_batch_size": Setting(None, kind=int, low=1, optional=True),
    LOSS + "type": Setting("default", ("default", "ipo", "custom")),
    LOSS + "dppo_mask_low": Setting(0.2, kind=float, low=0.0),
    LOSS + "dppo_mask_high": Setting(0.2, kind=float, low=0.0),
    LOSS + "ipo_threshold": Setting(0.1, kind=float, low=0.0),
    LOSS + "adv_tau": Setting(1.0, kind=float, low=0.0),
    LOSS + "kl_tau": Setting(1e-3, kind=float, low=0.0),
    "orchestrator.max_off_policy_steps": Setting(8, kind=int, low=0),
    # None: prime-rl's default lists (orchestrator.py `OrchestratorConfig`): gibberish, repetition
    # and zero_advantage filters, enforced after the batch is assembled, monitored before it
    "orchestrator.pre_batch_filters": Setting(None, kind=list, optional=True),
    "orchestrator.post_batch_filters": Setting(None, kind=list, optional=True),
}
FILTERS = ("gibberish", "repetition", "zero_advantage")


def _zero_advantage_enforced(key: str, filters: list[Any] | None, default: bool) -> bool:
    """Whether a filter list (`orchestrator.pre_batch_filters` or `post_batch_filters`; None: its
    default) enforces the zero_advantage filter (`ZeroAdvantageFilterConfig.enforce`, True unless
    set)."""
    if filters is None:
        return default
    for entry in filters:
        if not isinstance(entry, dict) or entry.get("type") not in FILTERS:
            raise InvalidInput(
                f"{key}: each filter is a table whose type is one of {', '.join(map(repr, FILTERS))} "
                f"(got {entry!r})"
            )
    return any(entry["type"] == "zero_advantage" and entry.get("enforce", True) is True for entry in filters)


def _mapping(s: dict[str, Any]) -> ToyMapping:
    algorithm = s["orchestrator.algo.type"]
    if algorithm not in ("grpo", "max_rl"):
        raise not_modelled(
            "orchestrator.algo.type", algorithm, ["grpo", "max_rl"], ALGORITHM_REASONS[algorithm]
        )
    if s[LOSS + "type"] == "custom":
        raise not_modelled(LOSS + "type", "custom", ["default", "ipo"], "your own loss function")
    notes = [
        "the trainer's loss (DPPO's mask, or IPO's, and kl_tau's squared log ratio) acts only off-policy; "
        "on the toy's on-policy update it is the policy gradient's, over the step's tokens"
    ]
    unmodelled = [
        f"orchestrator.max_off_policy_steps={s['orchestrator.max_off_policy_steps']}: rollouts sampled by "
        "older policies (asynchronous training); the toy samples from the policy it updates",
    ]
    if _zero_advantage_enforced("orchestrator.pre_batch_filters", s["orchestrator.pre_batch_filters"], False):
        raise not_modelled(
            "orchestrator.pre_batch_filters",
            "[zero_advantage, enforce = true]",
            ["its default (monitored only)"],
            "groups without a signal never take a slot of the batch, which is filled with others",
        )
    filtered = _zero_advantage_enforced(
        "orchestrator.post_batch_filters", s["orchestrator.post_batch_filters"], True
    )
    if algorithm == "max_rl":
        if s[PENALTY]:
            raise InvalidInput(
                f"{PENALTY} is GRPO's (GRPOAlgoConfig): orchestrator.algo.type='max_rl' has no length "
                "penalty; valid with it: no [orchestrator.algo.length_penalty]"
            )
        spec = ["advantage=max_rl", "aggregation=token_mean"]
    else:
        spec = ["advantage=none", "aggregation=token_mean"]
        if s[PENALTY]:
            spec.append("reward=length_penalty")
            spec += [
                f"{key}={s[f'{PENALTY}.{key}']}"
                for key, default in PENALTY_WEIGHTS.items()
                if s[f"{PENALTY}.{key}"] != default
            ]
            notes.append(
                "the length penalty's input-token and turn terms are whole weights on the toy (one prompt "
                "length, one turn per group)"
            )
    if filtered:
        spec.append("selector=informative")
        notes.append(
            "orchestrator.post_batch_filters: its zero_advantage filter (enforced by default) drops the "
            "rollouts whose advantage is all 0 from the step (filters.py ZeroAdvantageFilter), so the token "
            "mean counts only the tokens of groups with a signal (selector=informative)"
        )
        if s[PENALTY]:
            unmodelled.append(
                "the zero_advantage filter with the length penalty: prime-rl also drops a rollout whose "
                "shaped reward equals its group's mean in a group that varies (advantage 0, so weight 0 "
                "either way); the toy keeps its tokens in the token mean's count"
            )
    if s[LOSS + "adv_tau"] != 1.0:
        notes.append(f"{LOSS}adv_tau={s[LOSS + 'adv_tau']}: scales the advantages, so only the learning rate")
    if s["orchestrator.token_batch_size"] is not None:
        unmodelled.append(
            f"orchestrator.token_batch_size={s['orchestrator.token_batch_size']}: steps of a token count; "
            "the toy takes a step a batch"
        )
    group = {"group_size": ("orchestrator.group_size", s["orchestrator.group_size"])}
    return ToyMapping(",".join(spec), group, unmodelled, notes, step_responses=s["orchestrator.batch_size"])


def _snake(flag: str) -> str:
    """A CLI flag's dotted path in the TOML's spelling: kebab-case parts in snake_case."""
    return flag.replace("-", "_")


def read_file(path: Path) -> dict[str, Any]:
    """An `rl` TOML file as flat settings (`reading.read_settings`), with an empty sub-config's
    table (`[orchestrator.algo.length_penalty]`: the length penalty at its defaults) read as that
    sub-config turned on, and any of its keys turning it on too (docs/configuration.md,
    "Optional Sub-Configs"); a `group_size` or `algo` that every `[[orchestrator.train.source]]`
    gives alike (each source's own, inherited from `orchestrator.` where unset) as the
    orchestrator's, and refused where the sources differ."""
    import tomllib

    from toyrl.trainers.reading import read_settings

    settings = read_settings(path)
    if path.suffix.lower() != ".toml":
        return _penalty_on(settings)
    data: Any = tomllib.loads(path.read_text(encoding="utf-8"))
    table = data
    for part in PENALTY.split("."):
        table = table.get(part) if isinstance(table, dict) else None
    sources = data.get("orchestrator", {}).get("train", {}).get("source", [])
    for key in ("group_size", "algo"):
        given = [source[key] for source in sources if isinstance(source, dict) and key in source]
        if not given:
            continue
        if len(given) < len(sources) or any(value != given[0] for value in given):
            raise InvalidInput(
                f"{path}: its [[orchestrator.train.source]] entries set {key} differently; toyrl checks one "
                f"{key} (give it as orchestrator.{key})"
            )
        nested = {f"orchestrator.{key}": given[0]}
        settings |= _flat(nested)
    return _penalty_on(settings) | ({PENALTY: True} if isinstance(table, dict) else {})


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(value, dict):
        return {prefix.removesuffix("."): value}
    flat: dict[str, Any] = {}
    for name, inner in value.items():
        flat |= _flat(inner, f"{prefix}{name}.")
    return flat


def _penalty_on(settings: dict[str, Any]) -> dict[str, Any]:
    """Settings with the length penalty on where any of its keys is given."""
    if any(key.startswith(PENALTY + ".") for key in settings) and PENALTY not in settings:
        return settings | {PENALTY: True}
    return settings


def read_command(words: list[Word], origin: str) -> Launch:
    """`uv run rl` arguments, as pydantic-config reads them: `@ FILE` (the whole configuration's
    TOML, left to right), `--section @ FILE` (one section's), `--a.b-c value` (a dotted path in
    kebab-case), a bare `--flag` (True) or `--no-flag` (False), several values (a list)."""
    from toyrl.trainers.launch import Launch, read_flags
    from toyrl.trainers.reading import read_settings

    files: list[str] = []
    sections: dict[str, Any] = {}
    flags: list[Word] = []
    texts = [word.text for word in words]
    i = 0
    while i < len(words):
        if texts[i] == "@" and i + 1 < len(words):
            section = flags.pop().text[2:] if flags and texts[i - 1].startswith("--") else ""
            if words[i + 1].unknown:
                raise InvalidInput(f"{origin}: @ {texts[i + 1]}: the file's path cannot be read")
            if section:
                prefix = _snake(section) + "."
                sections |= {prefix + key: value for key, value in read_settings(Path(texts[i + 1])).items()}
            else:
                files.append(texts[i + 1])
            i += 2
            continue
        flags.append(words[i])
        i += 1
    launch = read_flags(flags, origin, "prime-rl")
    settings: dict[str, Any] = {}
    for flag, value in launch.settings.items():
        if flag.startswith("no-") and value is True:
            settings[_snake(flag[3:])] = False
        else:
            settings[_snake(flag)] = value
    return Launch("prime-rl", _penalty_on(sections | settings), origin, launch.notes, files)


# Names of prime-rl's `rl` configuration (configs/rl.py `RLConfig`, configs/trainer.py `TrainerConfig`),
# each as a key and as a section: `orchestrator.*` and `deployment.*` only it has; its `trainer.*`
# names, `ckpt`, `output_dir`, `max_steps` other trainers' files have too, so they count for neither.
RL_CONFIG = (
    "trainer", "orchestrator", "inference", "env_vars", "output_dir", "clean_output_dir", "log", "ckpt",
    "wandb", "file_monitor", "model", "tokenizer", "max_steps", "seq_len", "weight_broadcast",
    "rollout_transport", "bench", "deployment", "slurm", "dry_run",
)  # fmt: skip
TRAINER_CONFIG = (
    "model", "tokenizer", "data", "loss", "optim", "scheduler", "ckpt", "weight_broadcast",
    "rollout_transport", "log", "wandb", "file_monitor", "output_dir", "matmul_precision", "max_steps",
    "enable_router_replay", "memory_profiler_path", "bench", "gc", "trace_path", "dist_timeout_seconds",
    "heartbeat", "metrics_server", "max_concurrent_runs", "enable_token_export", "env_vars",
)  # fmt: skip
MARKS = tuple(
    mark
    for name in (*(n for n in RL_CONFIG if n != "trainer"), *(f"trainer.{n}" for n in TRAINER_CONFIG))
    for mark in (name, name + ".")
)

TRAINER = Trainer(
    name="prime-rl",
    distribution="prime-rl",
    releases={
        "0.8.0": Release(
            SETTINGS_0_8_0,
            "PrimeIntellect-ai/prime-rl v0.8.0: packages/prime-rl-configs/src/prime_rl/configs/algorithm.py, "
            "orchestrator.py, trainer.py; src/prime_rl/orchestrator/algo/grpo.py, max_rl.py; "
            "src/prime_rl/trainer/rl/loss.py",
            _mapping,
            # no setting of prime-rl divides by a constant: its loss is over the step's token count
            dr_grpo={"orchestrator.algo.type": ("grpo",), PENALTY: (False,)},
            not_run="prime-rl is not installable from the package registry (no distribution of that name)",
        )
    },
    marks=MARKS,
    entries=(Entry(program=("uv", "run", "rl"), read=read_command),),
    read_file=read_file,
)
