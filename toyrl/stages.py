"""The stages of a training step, each a small frozen class registered by name.

A step (`toyrl.train.train_step`) runs, for every run of a chunk, reward -> selector -> advantage
(once per sampled batch) -> for each update of the schedule: normaliser -> objective (with the KL
term) -> gradient -> Adam. A variant (`toyrl.objective.Variant`) is one stage of each kind.

Each stage keeps its sampled form beside its exact-expected-update hook (`toyrl.expected`), as
micrograd keeps each backward beside its forward; a stage without an exact form says why in
`simulated_only`. Stages act on a group of runs at once (arrays with a leading runs axis); where
a stage has parameters, they are fields, so a new parametric stage needs no new `Variant` field.
Adding a mode is one registered class (docs/design.md shows how).

| kind       | registered                                                                   |
| ---------- | ---------------------------------------------------------------------------- |
| reward     | `window`: 1 iff right approach, stopped, L >= min_length (the article's);     |
|            | `soft_overlong`: DAPO's 1 / -1 with its soft overlong punishment              |
| sampler    | `once` (the article's); `filter_groups` (DAPO's dynamic sampling); `gfpo`       |
|            | (GFPO: G' draws a prompt, the G shortest or most reward per token kept)        |
| selector   | `all`; `stopped` (truncated responses masked out of the loss: mask_truncated) |
| advantage  | `group_std` (ddof 0), `group_std_sample` (ddof 1), `batch_std`, `none`, `rloo`,        |
|            | `batch_whiten`, `token_whiten`(`_sample`), `reinforce_pp`, `opo`, `gpg`         |
| normaliser | the six aggregations and `length_power`: D_i and n of w_i = A_i / D_i          |
| objective  | `ppo_clip`: min(rho A, clip(rho, 1 - epsilon, 1 + epsilon_high) A), dual_clip |
|            | `gspo`: the same with the sequence's ratio s_i (geometric mean of its tokens') |
|            | `cispo`: sg(clip(rho)) A log pi; `sapo`: a soft gate; `gpg`: A log pi          |
| kl         | `k3`: beta (pi_ref / pi - 1 - log(pi_ref / pi)), to the initial policy;       |
|            | `k1_reward`: beta k1 in each token's return (OpenRLHF's)                       |
| schedule   | `epochs`: num_iterations epochs of mini_batches updates on each sampled batch |

Advantages, with eps the std epsilon (the stage's `std_eps`, or the configuration's `std_eps`):

| advantage          | A_i                                                                   |
| ------------------ | --------------------------------------------------------------------- |
| `group_std`        | (r_i - group mean) / (group population std + eps)  (article, toy)      |
| `group_std_sample` | (r_i - group mean) / (group sample std + eps)  (TRL, verl, oat)        |
| `batch_std`        | (r_i - group mean) / (sample std of all the batch's rewards + eps)     |
| `none`             | r_i - group mean  (Dr. GRPO)                                          |
| `rloo`             | r_i - mean of the group's other G - 1 rewards  (RLOO)                 |
| `batch_whiten`     | a_i = r_i - group mean, then (a_i - mean(a)) / (sample std(a) + eps) over the batch |
| `token_whiten`(`_sample`), `reinforce_pp` | whitened over the batch's tokens (`TokenWhiten`)      |
| `opo`              | r_i - sum_j abs(o_j) r_j / sum_j abs(o_j) over the group  (OPO)                |
| `gpg`              | (N / M) (r_i - group mean), M the batch's nonzero rewards  (GPG)      |

Aggregations (N = B G responses, |o_i| the token count of response i, L_norm a constant, by
default the cap):

| aggregation               | D_i                   | n | trainer name                              |
| ------------------------- | --------------------- | - | ----------------------------------------- |
| `seq_mean_token_mean`     | abs(o_i)              | N | GRPO; verl `seq-mean-token-mean`          |
| `token_mean`              | sum_j abs(o_j), batch | 1 | DAPO, BNPO; verl `token-mean`             |
| `seq_mean_token_sum`      | 1                     | N | verl `seq-mean-token-sum`                 |
| `seq_mean_token_sum_norm` | L_norm                | N | Dr. GRPO; TRL `dr_grpo`, oat `drgrpo`     |
| `token_sum_norm`          | L_norm                | 1 | verl `seq-mean-token-sum-norm` (sum / L)  |
| `token_sum`               | 1                     | 1 | plain sum                                 |
| `length_power`            | abs(o_i)^(1-a) L^a    | N | the family between the two (alpha = a)    |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

import numpy as np
from numpy.typing import NDArray

from toyrl import kernels, noise
from toyrl.config import MAX_RESPONSES, Config, InvalidInput
from toyrl.policy import Batch, Coefficients, FloatArray, TokenTable, expit, sample_batch

KINDS = ("reward", "selector", "advantage", "normaliser", "objective", "kl", "schedule", "sampler")
REGISTRY: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}

Stage = TypeVar("Stage")
MAX_ITERATIONS = 64  # epochs per sampled batch; trainers use 1 to a few (TRL's mu, verl's ppo_epochs)
MAX_PARTS = 4096  # mini- or micro-batches of a batch
MAX_TOKENS = 1_000_000_000  # a token budget
MAX_PROMPT_TOKENS = 10_000_000  # a prompt's tokens


def declared(
    default: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
    integer: bool = False,
    choices: Sequence[str] = (),
) -> Any:
    """A stage parameter with its valid values, declared once: `check_declared` (each stage's
    __post_init__), the words of its error and the page (`toyrl.explore`, `declarations`) read
    them. An integer (an int default, or `integer`), a number in [low, high] (either end open), one
    of `choices`, each with None too where `optional`; a bool default is a flag without this."""
    if choices:
        kind = "choice"
    elif integer or (isinstance(default, int) and not isinstance(default, bool)):
        kind = "integer"
    else:
        kind = "number"
    rule = {"kind": kind, "low": low, "high": high, "low_open": low_open, "high_open": high_open}
    return field(
        default=default, metadata={"declared": rule | {"optional": optional, "choices": list(choices)}}
    )


def _shown(x: float) -> str:
    """A bound in words: 0.2, 1000, 1e6 (not 1e+06)."""
    text = f"{x:g}"
    mantissa, _, exponent = text.partition("e+")
    return f"{mantissa}e{int(exponent)}" if exponent else text


def _requirement(rule: dict[str, Any]) -> str:
    kind = rule["kind"]
    if kind == "boolean":
        return "must be true or false"
    if kind == "choice":
        text = f"must be one of {', '.join(rule['choices'])}"
    elif kind == "integer":
        text = f"must be an integer in {rule['low']:,}..{rule['high']:,}"
    else:
        opening, closing = "(" if rule["low_open"] else "[", ")" if rule["high_open"] else "]"
        text = f"must be a number in {opening}{_shown(rule['low'])}, {_shown(rule['high'])}{closing}"
    return text + (" or None" if rule["optional"] else "")


def declarations(stage_class: type) -> dict[str, dict[str, Any]]:
    """Each declared parameter of a stage class (`declared`, and every flag: a bool default) and its
    rule: kind, bounds, optional, choices, and `requirement`, the words of its error."""
    out = {}
    for f in fields(stage_class):
        rule = f.metadata.get("declared")
        if rule is None and not isinstance(f.default, bool):
            continue
        rule = dict(rule) if rule is not None else {"kind": "boolean", "optional": False}
        out[f.name] = rule | {"requirement": _requirement(rule)}
    return out


def _fits(value: object, rule: dict[str, Any]) -> bool:
    if value is None:
        return bool(rule["optional"])
    if rule["kind"] == "boolean":
        return isinstance(value, bool)
    if rule["kind"] == "choice":
        return value in rule["choices"]
    if isinstance(value, bool) or not isinstance(value, int if rule["kind"] == "integer" else int | float):
        return False
    above = value > rule["low"] if rule["low_open"] else value >= rule["low"]
    below = value < rule["high"] if rule["high_open"] else value <= rule["high"]
    return bool(above and below)


def check_declared(stage: Any) -> None:
    """InvalidInput, one line naming the parameter and its valid values, unless every declared
    parameter of the stage (`declarations`) holds a valid value."""
    for name, rule in declarations(type(stage)).items():
        value = getattr(stage, name)
        if not _fits(value, rule):
            raise InvalidInput(f"{name} {rule['requirement']} (got {value!r})")


def _std_eps() -> Any:
    return declared(None, 0.0, 1.0, high_open=True, optional=True)  # None: the configuration's std_eps


def register(kind: str, name: str, **defaults: Any) -> Callable[[type[Stage]], type[Stage]]:
    """Class decorator: register an instance of the class (built with `defaults`) as `name` of `kind`.

    One class may be registered under several names with other defaults (`group_std` and
    `group_std_sample` are one class with ddof 0 and 1); `stage_name` finds the name back.
    """

    def add(cls: type[Stage]) -> type[Stage]:
        if name in REGISTRY[kind]:
            raise ValueError(f"a {kind} named {name!r} is registered already")
        REGISTRY[kind][name] = cls(**defaults)
        return cls

    return add


def parameters(stage: Any) -> dict[str, Any]:
    """A stage's tunable parameters (fields not fixed by its registered name) and their values."""
    fixed = getattr(stage, "fixed", ())
    return {f.name: getattr(stage, f.name) for f in fields(stage) if f.name not in fixed}


def stage_name(kind: str, stage: Any) -> str:
    """The registered name of a stage: the entry of its class whose fixed fields it shares."""
    fixed = getattr(stage, "fixed", ())
    for name, registered in REGISTRY[kind].items():
        if type(registered) is type(stage) and all(
            getattr(registered, f) == getattr(stage, f) for f in fixed
        ):
            return name
    raise ValueError(f"{type(stage).__name__} is not a registered {kind}")


def simulated_only(stage: Any) -> str:
    """Why a stage has no exact expected-update form ('' if it has one)."""
    return str(getattr(stage, "simulated_only", ""))


# --- reward ---------------------------------------------------------------------------------


def correct(batch: Batch, config: Config) -> FloatArray:
    """1 for a correct response (right approach, stopped, at least min_length ramble tokens), else 0
    [R, B, G]: the article's verifiable reward, and what every accuracy counts."""
    return (batch.right & batch.stopped & (batch.length >= config.min_length)).astype(np.float64)


@register("reward", "window")
@dataclass(frozen=True)
class WindowReward:
    """The verifiable reward: 1 iff right approach, stopped and at least min_length ramble tokens."""

    def rewards(self, batch: Batch, config: Config) -> FloatArray:
        return correct(batch, config)

    def window(self, config: Config) -> tuple[int, int]:
        """Exact hook: the ramble lengths K, on the right approach, that earn reward 1."""
        return config.min_length, config.cap


@register("reward", "soft_overlong")
@dataclass(frozen=True)
class SoftOverlong:
    """DAPO's reward with its soft overlong punishment (Yu et al. 2025, "Overlong Reward Shaping";
    verl's DAPO reward manager with overlong_buffer; OpenRLHF's overlong_buffer_len): 1 for a
    correct response, `incorrect` else (DAPO's rule-based reward is 1 / -1; OpenRLHF's reward
    function's own, 0 for a 0/1 one), plus min(0, -(|o| - (L_max - b)) / b) x penalty_factor, |o| the
    response's tokens, L_max the longest response (the cap's ramble tokens and the approach token,
    `Config.approach_tokens`) and b = buffer x L_max: nothing up to L_max - b, then down linearly to
    -penalty_factor at L_max. `buffer` is the trainer's buffer length over its longest response,
    0.2 in DAPO's recipe (4,096 of 20,480 tokens)."""

    buffer: float = declared(0.2, 0.0, 1.0, low_open=True)
    penalty_factor: float = declared(1.0, 0.0, 1e6)
    incorrect: float = declared(-1.0, -1e6, 1e6)
    simulated_only: ClassVar[str] = "the shaped reward is not 0 or 1"

    def __post_init__(self) -> None:
        check_declared(self)

    def rewards(self, batch: Batch, config: Config) -> FloatArray:
        longest = config.cap + config.approach_tokens
        buffer = self.buffer * longest
        exceed = batch.token_count(config.approach_tokens) - (longest - buffer)
        penalty = np.minimum(-exceed / buffer * self.penalty_factor, 0.0)
        return np.where(correct(batch, config) > 0, 1.0, self.incorrect) + penalty


# --- sampler: which groups a batch holds ------------------------------------------------------
# `batch(batch, theta, config, refill)`: the batch a step trains on, from the batch drawn with the
# step's noise; `refill` is each run's own stream for any further draws (`toyrl.train.STREAMS`).


@register("sampler", "once")
@dataclass(frozen=True)
class OneDraw:
    """The batch as drawn: B distinct prompts, G responses each (the article's)."""

    def batch(
        self, batch: Batch, theta: FloatArray, config: Config, refill: Sequence[np.random.Generator]
    ) -> tuple[Batch, FloatArray]:
        return batch, generated(batch)


def worst_draws(sampler: Any, config: Config) -> int:
    """The most values a sampler draws in a step of one run (responses, and uniforms ordering
    prompts): its `worst_draws`, or the B x G responses of the step's own batch."""
    method = getattr(sampler, "worst_draws", None)
    return config.batch_prompts * config.group_size if method is None else int(method(config))


def refill_rounds(sampler: Any, config: Config) -> int:
    """The most refill rounds of a step of one run (each a few numpy calls): its `refills`, or 0."""
    method = getattr(sampler, "refills", None)
    return 0 if method is None else int(method(config))


def generated(batch: Batch) -> FloatArray:
    """Every token the batch's responses generated (approach and ramble), per run [R]: what a
    sampler's draws cost (`tokens_sampled`), whatever `approach_tokens` the loss counts."""
    return batch.token_count(1).sum(axis=(-2, -1))


@register("sampler", "filter_groups")
@dataclass(frozen=True)
class FilterGroups:
    """DAPO's dynamic sampling (Yu et al. 2025, "Dynamic Sampling"; verl's DAPO recipe with
    filter_groups on the metric acc): a group whose responses are all correct or all incorrect
    (`correct`, whatever the reward) is dropped, and rounds of `round_prompts` more prompts (B when
    0), drawn without replacement among the prompts not drawn yet this step, refill the batch until
    it holds B groups, the first B kept in the order drawn. After `max_rounds` rounds (the first
    one included), or when no prompt is left, the rest of the batch is the earliest dropped groups
    (where verl stops with an error): `zero_variance_fraction` shows how often. The first round is
    the step's own noise; further rounds draw from the run's `refill` stream (prompts, approaches,
    lengths, in that order), only for the runs that filter."""

    max_rounds: int = declared(10, 1, 100_000)
    round_prompts: int = declared(0, 0, 100_000)
    simulated_only: ClassVar[str] = "dynamic sampling changes which groups a batch holds"

    def __post_init__(self) -> None:
        check_declared(self)

    def refills(self, config: Config) -> int:
        """The most refill rounds of a step (after the first): `max_rounds` - 1, or fewer when
        the prompts not drawn yet run out first."""
        size = self.round_prompts or config.batch_prompts
        return min(self.max_rounds - 1, -(-(config.prompts - config.batch_prompts) // size))

    def worst_draws(self, config: Config) -> int:
        """The most values a step of one run draws (a batch that never fills): the B x G responses,
        then each refill round's uniforms over the prompts left (their order) and its responses."""
        size = self.round_prompts or config.batch_prompts
        left, n = config.prompts - config.batch_prompts, self.refills(config)
        orders = n * left - size * n * (n - 1) // 2
        return config.group_size * (config.batch_prompts + min(n * size, left)) + orders

    def check(self, config: Config) -> None:
        worst = self.worst_draws(config)
        if worst > MAX_RESPONSES:
            raise InvalidInput(
                f"sampler=filter_groups could draw {worst:,} values a step (up to {self.refills(config):,} "
                f"refill rounds of round_prompts={self.round_prompts or config.batch_prompts:,} over "
                f"prompts={config.prompts:,}, each ordering the prompts left); the limit is "
                f"{MAX_RESPONSES:,}: lower max_rounds or prompts, or raise round_prompts"
            )

    def batch(
        self, batch: Batch, theta: FloatArray, config: Config, refill: Sequence[np.random.Generator]
    ) -> tuple[Batch, FloatArray]:
        prompts, group = batch.right.shape[-2:]
        tokens = generated(batch)
        prompt_index, right = batch.prompt_index.copy(), batch.right.copy()
        length, stopped = batch.length.copy(), batch.stopped.copy()
        for run in range(len(theta)):
            drawn = batch.rows(slice(run, run + 1))
            kept: list[tuple[Any, ...]] = []
            dropped: list[tuple[Any, ...]] = []
            unused = np.ones(config.prompts, dtype=bool)
            unused[drawn.prompt_index[0]] = False
            for round_index in range(self.max_rounds):
                if round_index > 0:
                    pool = np.flatnonzero(unused)  # the prompts not drawn yet, in increasing order
                    if len(pool) == 0:
                        break
                    size = min(self.round_prompts or prompts, len(pool))
                    rng = refill[run]
                    choice = pool[noise.permutation_prefix(rng, (), len(pool), size)]
                    shape = (1, size, group)
                    approach = noise.uniform(rng, shape)
                    exponential = noise.standard_exponential(rng, shape)
                    drawn = sample_batch(
                        theta[run : run + 1], choice[None], approach, exponential, config.cap
                    )
                    tokens[run] += generated(drawn)[0]
                    unused[choice] = False
                counts = correct(drawn, config)[0].sum(axis=-1)
                for j in range(drawn.prompt_index.shape[1]):
                    item = (
                        drawn.prompt_index[0, j],
                        drawn.right[0, j],
                        drawn.length[0, j],
                        drawn.stopped[0, j],
                    )
                    (kept if 0 < counts[j] < group else dropped).append(item)
                if len(kept) >= prompts:
                    break
            chosen = (kept + dropped)[:prompts]
            prompt_index[run] = [item[0] for item in chosen]
            right[run], length[run], stopped[run] = (
                np.stack([item[k] for item in chosen]) for k in (1, 2, 3)
            )
        return Batch(prompt_index, right, length, stopped), tokens


GFPO_KEEPS = ("shortest", "reward_per_token")


@register("sampler", "gfpo")
@dataclass(frozen=True)
class GroupFilter:
    """GFPO (Shrivastava et al. 2025, "Sample More to Think Less: Group Filtered Policy
    Optimization", section 3): each prompt draws `draws` = G' > G responses and keeps G of them,
    the shortest (`keep='shortest'`) or those with the most reward per token (`'reward_per_token'`:
    correctness / |o|, |o| every generated token), ties going to the earlier draw. Only the kept
    ones enter the advantages (their group's statistics) and the loss: GFPO's zero advantage for the
    others. The first G draws of a prompt are the step's own noise, the other G' - G the run's
    refill stream's (approach uniforms, then length exponentials, [B, G' - G] each), so with
    draws = G it would be the article's batch; every draw counts in `tokens_sampled`."""

    draws: int = declared(16, 2, 4096)
    keep: str = declared("shortest", choices=GFPO_KEEPS)
    simulated_only: ClassVar[str] = "GFPO keeps the shortest (or most efficient) of more draws"

    def __post_init__(self) -> None:
        check_declared(self)

    def worst_draws(self, config: Config) -> int:
        """The responses a step of one run draws: G' for each of the B prompts."""
        return config.batch_prompts * self.draws

    def check(self, config: Config) -> None:
        if self.draws <= config.group_size:
            raise InvalidInput(
                f"sampler=gfpo keeps group_size = {config.group_size} of its draws: draws (G') must "
                f"exceed it (got draws={self.draws})"
            )
        if self.worst_draws(config) > MAX_RESPONSES:
            raise InvalidInput(
                f"sampler=gfpo draws batch_prompts x draws = {config.batch_prompts:,} x {self.draws:,} = "
                f"{self.worst_draws(config):,} responses a step; the limit is {MAX_RESPONSES:,}: use at "
                f"most batch_prompts={MAX_RESPONSES // self.draws:,} or fewer draws"
            )

    def batch(
        self, batch: Batch, theta: FloatArray, config: Config, refill: Sequence[np.random.Generator]
    ) -> tuple[Batch, FloatArray]:
        prompts, group = batch.right.shape[-2:]
        shape = (prompts, self.draws - group)
        extra = [(noise.uniform(rng, shape), noise.standard_exponential(rng, shape)) for rng in refill]
        more = sample_batch(
            theta,
            batch.prompt_index,
            np.stack([u for u, _ in extra]),
            np.stack([e for _, e in extra]),
            config.cap,
        )
        every = Batch(
            batch.prompt_index,
            *(
                np.concatenate([a, b], axis=-1)
                for a, b in (
                    (batch.right, more.right),
                    (batch.length, more.length),
                    (batch.stopped, more.stopped),
                )
            ),
        )
        tokens = every.token_count(1)
        if self.keep == "shortest":
            key = tokens
        else:  # the most correctness per token first
            key = -correct(every, config) / tokens
        kept = np.sort(np.argsort(key, axis=-1, kind="stable")[..., :group], axis=-1)

        def take(values: NDArray[Any]) -> NDArray[Any]:
            return np.take_along_axis(values, kept, axis=-1)

        return (
            Batch(batch.prompt_index, take(every.right), take(every.length), take(every.stopped)),
            generated(every),
        )


# --- selector: which responses enter the loss -----------------------------------------------


@register("selector", "all")
@dataclass(frozen=True)
class AllResponses:
    """Every response is in the loss."""

    keeps_truncated: ClassVar[bool] = True  # exact hook: a truncated response is in the loss

    def included(self, batch: Batch) -> NDArray[np.bool_]:
        return np.ones(batch.right.shape, dtype=bool)


@register("selector", "stopped")
@dataclass(frozen=True)
class StoppedResponses:
    """Truncated responses are masked out of the loss (TRL's mask_truncated_completions, DAPO's
    overlong filtering): weight 0, and no tokens in `token_mean`'s total. Their rewards still count
    in their group's advantages."""

    keeps_truncated: ClassVar[bool] = False

    def included(self, batch: Batch) -> NDArray[np.bool_]:
        return batch.stopped


# --- advantage ------------------------------------------------------------------------------
# `advantages(rewards, std_eps)`: [..., B, G] from rewards of that shape; a zero-variance group or
# batch gets zero advantage, even at std_eps = 0. Exact hook `conditional(r, others, G, std_eps)`: the
# advantage of a response with reward r whose group has `others` successes among the other G - 1.


def _scaled(centred: FloatArray, scale: FloatArray, std_eps: float) -> FloatArray:
    if std_eps > 0:  # every scale is positive
        return centred / scale
    return np.divide(
        centred, scale, out=np.zeros(np.broadcast_shapes(centred.shape, scale.shape)), where=scale > 0
    )


def _centred(rewards: FloatArray) -> FloatArray:
    group = rewards.shape[-1]
    return (
        rewards - np.add.reduce(rewards, axis=-1, keepdims=True) / group
    )  # numpy's mean, without its wrapper


@register("advantage", "group_std_sample", ddof=1)  # decorators apply bottom-up: group_std first
@register("advantage", "group_std", ddof=0)
@dataclass(frozen=True)
class GroupStd:
    """(r_i - group mean) / (group std + std_eps): GRPO's. ddof 0, the population std (the article's
    worked example and toy); ddof 1, the sample std (torch's default: TRL, verl, oat)."""

    ddof: int = 0
    std_eps: float | None = _std_eps()  # None: the configuration's std_eps
    fixed: ClassVar[tuple[str, ...]] = ("ddof",)

    def __post_init__(self) -> None:
        check_declared(self)

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        group = rewards.shape[-1]
        centred = _centred(rewards)
        # numpy's std, spelled out from the centred rewards (same operations, same bits, less overhead)
        squares = np.add.reduce(centred * centred, axis=-1, keepdims=True)
        return _scaled(centred, np.sqrt(squares / (group - self.ddof)) + std_eps, std_eps)

    def conditional(self, r: float, others: FloatArray, group: int, std_eps: float) -> FloatArray:
        k = r + others
        std = np.sqrt(k / group * (1 - k / group))
        if self.ddof == 1:
            std = std * np.sqrt(group / (group - 1))
        scale = std + std_eps
        return np.divide(r - k / group, scale, out=np.zeros(scale.shape), where=scale > 0)


@register("advantage", "batch_std")
@dataclass(frozen=True)
class BatchStd:
    """(r_i - group mean) / (sample std of all the batch's rewards + std_eps): TRL's scale_rewards='batch'."""

    std_eps: float | None = _std_eps()
    simulated_only: ClassVar[str] = "the batch's std couples its groups"

    def __post_init__(self) -> None:
        check_declared(self)

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        return _scaled(
            _centred(rewards), rewards.std(axis=(-2, -1), keepdims=True, ddof=1) + std_eps, std_eps
        )


@register("advantage", "none")
@dataclass(frozen=True)
class Centred:
    """r_i - group mean: Dr. GRPO's (no std)."""

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        return _centred(rewards)

    def conditional(self, r: float, others: FloatArray, group: int, std_eps: float) -> FloatArray:
        return r - (r + others) / group


@register("advantage", "rloo")
@dataclass(frozen=True)
class LeaveOneOut:
    """r_i minus the mean of the group's other G - 1 rewards (RLOO).

    Tutorial, section 4.1: r_i - mean(r) = ((G - 1) / G) (r_i - mean_{j != i} r_j), so the group
    mean scales the expected gradient by (G - 1) / G; leaving r_i out of its own baseline removes it.
    """

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        group = rewards.shape[-1]
        return rewards - (rewards.sum(axis=-1, keepdims=True) - rewards) / (group - 1)

    def conditional(self, r: float, others: FloatArray, group: int, std_eps: float) -> FloatArray:
        return r - others / (group - 1)


@register("advantage", "batch_whiten")
@dataclass(frozen=True)
class BatchWhiten:
    """a_i = r_i - group mean, then (a_i - mean(a)) / (sample std(a) + std_eps) over the batch
    (OpenRLHF's reinforce_baseline)."""

    std_eps: float | None = _std_eps()
    simulated_only: ClassVar[str] = "batch whitening couples the groups of a batch"

    def __post_init__(self) -> None:
        check_declared(self)

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        centred = _centred(rewards)
        centred = centred - centred.mean(axis=(-2, -1), keepdims=True)
        return _scaled(centred, centred.std(axis=(-2, -1), keepdims=True, ddof=1) + std_eps, std_eps)


@register(
    "advantage", "reinforce_pp", ddof=1, var_eps=1e-8, var_floor=0.0, float32_bessel=True, centred=False
)
@register("advantage", "token_whiten_sample", ddof=1, var_eps=1e-8, var_floor=0.0, float32_bessel=True)
@register("advantage", "token_whiten", ddof=0, var_eps=0.0, var_floor=1e-8)  # bottom-up: this one first
@dataclass(frozen=True)
class TokenWhiten:
    """a_i = r_i - group mean, then whitened over the batch's *tokens* (REINFORCE++-baseline): each
    response weighs |o_i| (its tokens, every response's), mean m = sum |o| a / sum |o|, variance
    v = sum |o| (a - m)^2 / (sum |o| - ddof), A_i = (a_i - m) / sqrt(max(v + var_eps, var_floor)).

    `token_whiten`: OpenRLHF's reinforce_baseline (population variance, var.clamp(min=1e-8).rsqrt());
    `token_whiten_sample`: verl's reinforce_plus_plus_baseline (masked_whiten: Bessel-corrected over
    tokens, rsqrt(var + 1e-8)), whose masked_var takes the Bessel factor n / (n - 1) from integer
    token counts, a division torch makes in float32: v = [sum |o| (a - m)^2 / n] fl32(n / (n - 1))
    (`float32_bessel`; the float32 rounding moves A by up to about 2e-8 relative). `reinforce_pp`:
    REINFORCE++ (Hu 2025; verl's reinforce_plus_plus at gamma 1, each token's return its response's
    reward), the same whitening of the rewards themselves, with no group mean (`centred` False).
    Longer responses weigh more in the batch's statistics."""

    ddof: int = 0
    var_eps: float = 0.0
    var_floor: float = 1e-8
    float32_bessel: bool = False
    centred: bool = True
    fixed: ClassVar[tuple[str, ...]] = ("ddof", "var_eps", "var_floor", "float32_bessel", "centred")
    uses_tokens: ClassVar[bool] = True
    simulated_only: ClassVar[str] = "token-weighted whitening couples the groups of a batch"

    def advantages(self, rewards: FloatArray, std_eps: float, tokens: FloatArray) -> FloatArray:
        centred = _centred(rewards) if self.centred else rewards
        total = tokens.sum(axis=(-2, -1), keepdims=True)
        mean = (centred * tokens).sum(axis=(-2, -1), keepdims=True) / total
        shifted = centred - mean
        squares = (shifted * shifted * tokens).sum(axis=(-2, -1), keepdims=True)
        if self.float32_bessel:
            bessel = (total.astype(np.float32) / (total - 1).astype(np.float32)).astype(np.float64)
            variance = squares / total * bessel
        else:
            variance = squares / (total - self.ddof)
        return shifted / np.sqrt(np.maximum(variance + self.var_eps, self.var_floor))


@register("advantage", "opo")
@dataclass(frozen=True)
class LengthWeightedBaseline:
    """OPO's optimal baseline (Hao et al. 2025, "On-Policy RL with Optimal Reward Baseline", arXiv
    2505.23585, eq. 7; verl's `opo` estimator): A_i = r_i - b, b = sum_j |o_j| r_j / sum_j |o_j|
    over the group, each reward weighed by its response's tokens, so a long wrong answer pulls the
    baseline down the most."""

    uses_tokens: ClassVar[bool] = True
    simulated_only: ClassVar[str] = "OPO's baseline weighs the group's rewards by their lengths"

    def advantages(self, rewards: FloatArray, std_eps: float, tokens: FloatArray) -> FloatArray:
        baseline = (tokens * rewards).sum(axis=-1, keepdims=True) / tokens.sum(axis=-1, keepdims=True)
        return rewards - baseline


@register("advantage", "gpg")
@dataclass(frozen=True)
class RescaledCentred:
    """GPG's advantage (Chu et al. 2025, eq. 9; verl's `gpg` estimator at f_norm 1):
    A_i = alpha (r_i - group mean), alpha = N / M, N the batch's responses and M how many of them
    have a nonzero reward (at least 1): with 0/1 rewards, the inverse of the batch's accuracy,
    which scales the gradient up when few answers are right. verl computes N / M in float32 (an
    int over an int64 tensor), here in float64: up to about 6e-8 relative apart where N / M is not
    a float32 number (the conformance suite records it)."""

    simulated_only: ClassVar[str] = "GPG's scale N / M counts the whole batch's nonzero rewards"

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        responses = rewards.shape[-2] * rewards.shape[-1]
        nonzero = np.maximum(np.count_nonzero(rewards, axis=(-2, -1)), 1)[..., None, None]
        return responses / nonzero * _centred(rewards)


@register("advantage", "passk")
@dataclass(frozen=True)
class BestOverSecond:
    """verl's grpo_passk (compute_grpo_passk_outcome_advantage, after Chen et al. 2025, "Pass@k
    Training", arXiv 2503.19595): only the best response of a group has an advantage, its margin
    over the second best, A = (r_max - r_second) / (group sample std + std_eps) on the first
    response with r_max (`std_scaled`: verl's norm_adv_by_std_in_grpo; else the margin alone), 0 on
    every other one. Tied best rewards give the group 0. With 0 / 1 rewards, the one correct
    response of a group with exactly one earns 1 / (std + eps), std = sqrt(1 / G): a credit for
    solving what the group's others did not."""

    std_eps: float | None = _std_eps()
    std_scaled: bool = True

    def __post_init__(self) -> None:
        check_declared(self)

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        group = rewards.shape[-1]
        ranked = np.sort(rewards, axis=-1)
        margin = ranked[..., -1:] - ranked[..., -2:-1]
        if self.std_scaled:  # GroupStd's sample std, the same operations
            centred = _centred(rewards)
            squares = np.add.reduce(centred * centred, axis=-1, keepdims=True)
            margin = _scaled(margin, np.sqrt(squares / (group - 1)) + std_eps, std_eps)
        best = np.arange(group) == np.argmax(rewards, axis=-1)[..., None]
        return np.where(best, margin, 0.0)

    def conditional(self, r: float, others: FloatArray, group: int, std_eps: float) -> FloatArray:
        alone = np.where(others == 0, r, 0.0)  # the group's one success: a margin of 1
        if not self.std_scaled:
            return alone
        k = r + others  # GroupStd's sample std, the same operations
        scale = np.sqrt(k / group * (1 - k / group)) * np.sqrt(group / (group - 1)) + std_eps
        return np.divide(alone, scale, out=np.zeros(scale.shape), where=scale > 0)


def std_eps_of(advantage: Any, config: Config | float) -> float:
    """The std epsilon an advantage stage uses: its own `std_eps`, or the configuration's `std_eps`
    (or the number given for it)."""
    own = getattr(advantage, "std_eps", None)
    if own is not None:
        return float(own)
    return config.std_eps if isinstance(config, Config) else float(config)


# --- normaliser: the aggregation of token losses --------------------------------------------
# `denominators(tokens, included, length_norm, members)`: (D [..., B, G], n [...]) of w_i = A_i / D_i,
# the loss of the responses `members` (one update's mini-batch or micro-batch; None: the whole
# batch) being -(1/n) sum_i w_i sum_t (token objective). `per_micro_batch`: the trainer computes
# the loss on each micro-batch of an optimiser step and averages those (gradient accumulation,
# `toyrl.train.Plan.denominators`), not on the step's whole mini-batch. Exact hook
# `response_denominator(tokens, length_norm)`: D of one response from its own token count, for
# aggregations whose D is.


def _members(tokens: FloatArray, members: NDArray[np.bool_] | None) -> FloatArray:
    """How many responses `members` holds per run [...] (None: all of them)."""
    if members is None:
        return np.full(tokens.shape[:-2], float(tokens.shape[-2] * tokens.shape[-1]))
    return members.sum(axis=(-2, -1)).astype(np.float64)


@dataclass(frozen=True)
class PerResponse:
    """D_i from the response alone: its token count (`by_tokens`), L_norm (`by_length_norm`) or 1;
    n = N, the batch's responses (`averaged`), or 1 (a sum over responses)."""

    by_tokens: bool = False
    by_length_norm: bool = False
    averaged: bool = True
    per_micro_batch: bool = False
    fixed: ClassVar[tuple[str, ...]] = ("by_tokens", "by_length_norm", "averaged")

    def __post_init__(self) -> None:
        check_declared(self)

    def response_denominator(self, tokens: FloatArray, length_norm: float) -> FloatArray:
        if self.by_tokens:
            return tokens
        if self.by_length_norm:
            return np.full(tokens.shape, length_norm)
        return np.ones(tokens.shape)

    def denominators(
        self,
        tokens: FloatArray,
        included: NDArray[np.bool_],
        length_norm: float,
        members: NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        n = _members(tokens, members) if self.averaged else np.ones(tokens.shape[:-2])
        return self.response_denominator(tokens, length_norm), n


register("normaliser", "seq_mean_token_mean", by_tokens=True)(PerResponse)


@register("normaliser", "token_mean")
@dataclass(frozen=True)
class TokenMean:
    """D_i = the total token count of the batch's (or mini-batch's) responses in the loss, n = 1:
    DAPO's token-level mean. With `per_micro_batch`, each micro-batch's own total (TRL's bnpo); with
    `batch_tokens`, the whole sampled batch's total over the number of mini-batches, the same for
    every mini-batch (TRL's dapo: num_items_in_batch counts the generation batch's tokens)."""

    per_micro_batch: bool = False
    batch_tokens: bool = False
    simulated_only: ClassVar[str] = "the batch's token total couples its responses"

    def __post_init__(self) -> None:
        check_declared(self)
        if self.per_micro_batch and self.batch_tokens:
            raise InvalidInput("per_micro_batch and batch_tokens are two scopes: choose one")

    def denominators(
        self,
        tokens: FloatArray,
        included: NDArray[np.bool_],
        length_norm: float,
        members: NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        counted = included if members is None else included & members
        total = np.where(counted, tokens, 0).sum(axis=(-2, -1), keepdims=True)
        return np.broadcast_to(total, tokens.shape), np.ones(tokens.shape[:-2])


@register("normaliser", "length_power")
@dataclass(frozen=True)
class LengthPower:
    """D_i = |o_i|^(1 - alpha) L_norm^alpha, n = N: per-token weights w_i = A_i / D_i, proportional
    to |o_i|^(alpha - 1), the parametric family from GRPO's per-response mean (alpha = 0, D_i =
    |o_i|: `seq_mean_token_mean`) to Dr. GRPO's constant (alpha = 1, D_i = L_norm:
    `seq_mean_token_sum_norm`), both to the bit. alpha in [0, 1]: beyond 1 longer responses would
    weigh more per token than shorter ones, below 0 less than GRPO's."""

    alpha: float = declared(0.5, 0.0, 1.0)
    averaged: ClassVar[bool] = True

    def __post_init__(self) -> None:
        check_declared(self)

    def response_denominator(self, tokens: FloatArray, length_norm: float) -> FloatArray:
        return kernels.power(tokens, 1 - self.alpha) * kernels.power(length_norm, self.alpha)

    def denominators(
        self,
        tokens: FloatArray,
        included: NDArray[np.bool_],
        length_norm: float,
        members: NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        return self.response_denominator(tokens, length_norm), _members(tokens, members)


@register("normaliser", "seq_mean_token_sum_longest")
@dataclass(frozen=True)
class LongestResponse:
    """D_i = the token count of the longest response the loss is taken over (every response of i's
    micro-batch with `per_micro_batch`, else of its mini-batch or the batch), n = N: a response's
    token sum over the padded width of its micro-batch. verl 0.9.1's seq-mean-token-sum-norm with
    loss_scale_factor unset (its default) in its V1 trainer (also its default): responses are kept
    unpadded until ppo_loss pads each micro-batch to its own longest one, and agg_loss divides by
    that width (verl/workers/utils/losses.py, verl/trainer/ppo/core_algos.py). One response per
    micro-batch makes it D_i = |o_i|, the per-response mean; one micro-batch, a divisor shared by
    the batch that moves with its longest response."""

    per_micro_batch: bool = False
    averaged: ClassVar[bool] = True
    simulated_only: ClassVar[str] = "the longest response couples the responses of its micro-batch"

    def __post_init__(self) -> None:
        check_declared(self)

    def denominators(
        self,
        tokens: FloatArray,
        included: NDArray[np.bool_],
        length_norm: float,
        members: NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        inside = tokens if members is None else np.where(members, tokens, 0.0)
        longest = inside.max(axis=(-2, -1), keepdims=True)
        return np.broadcast_to(longest, tokens.shape), _members(tokens, members)


register("normaliser", "seq_mean_token_sum")(PerResponse)
register("normaliser", "seq_mean_token_sum_norm", by_length_norm=True)(PerResponse)
register("normaliser", "token_sum_norm", by_length_norm=True, averaged=False)(PerResponse)
register("normaliser", "token_sum", averaged=False)(PerResponse)


def weights(advantage: FloatArray, denominator: FloatArray, included: NDArray[np.bool_]) -> FloatArray:
    """w = A / D where a response is in the loss, else 0: the per-token weight of an on-policy update."""
    if included.all():  # every denominator is then positive (token counts are >= 1)
        return advantage / denominator
    ratio = np.divide(advantage, denominator, out=np.zeros(advantage.shape), where=denominator > 0)
    return np.where(included, ratio, 0.0)


# --- objective and KL -----------------------------------------------------------------------


@register("kl", "k3")
@dataclass(frozen=True)
class K3:
    """beta k3(ref, theta) per token, k3 = pi_ref/pi - 1 - log(pi_ref/pi), to the initial policy;
    its gradient on a token is -beta (pi_ref/pi - 1) d log pi. beta = 0: no KL term.

    `ratio_weighted`: beta rho k3, the k3 times the (differentiable) ratio rho = pi / pi_old (TRL's
    use_bias_correction_kl, its default since 0.26): its gradient on a token is
    -beta rho log(pi_ref / pi) d log pi, since d(rho k3) / d log pi = rho (k3 + 1 - pi_ref / pi)."""

    beta: float = declared(0.0, 0.0, 1e6, high_open=True)
    ratio_weighted: bool = False

    def __post_init__(self) -> None:
        check_declared(self)

    @property
    def simulated_only(self) -> str:
        return "the KL term makes the update depend on more than the policy" if self.beta > 0 else ""


@dataclass(frozen=True)
class TokenAdvantage:
    """Per-token advantages that vary within a response, summed per token kind [3, R, B, G]
    (approach, non-stop, stop): the sums of the kind's positive and of its negative advantages, and
    how many of its tokens are positive and negative. What PPO's clip needs: all tokens of a kind
    share one ratio, so the clip acts on a kind's positive (or negative) tokens all at once."""

    positive: FloatArray
    negative: FloatArray
    positive_count: FloatArray
    negative_count: FloatArray


def _ramble_sums(c: FloatArray, d: FloatArray, n: FloatArray) -> tuple[FloatArray, ...]:
    """(sum of the positive values, of the negative ones, their counts) of a(m) = c - d m over
    m = 1..n, elementwise: a(m) is linear in m, so each sign holds on one run of m."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(d != 0, c / d, 0.0)  # a(m) = 0 at m = x
    below = np.clip(np.ceil(x) - 1, 0, n)  # m < x: m = 1..below
    above = n - np.clip(np.floor(x), 0, n)  # m > x: m = n - above + 1..n

    def run_sum(first: FloatArray, count: FloatArray) -> FloatArray:  # a(first) + ... (count terms)
        return count * c - d * count * (2 * first + count - 1) / 2

    low_sum, high_sum = run_sum(np.ones_like(n), below), run_sum(n - above + 1, above)
    flat = d == 0  # every value is c
    positive = np.where(flat, np.where(c > 0, n * c, 0.0), np.where(d > 0, low_sum, high_sum))
    negative = np.where(flat, np.where(c < 0, n * c, 0.0), np.where(d > 0, high_sum, low_sum))
    positive_count = np.where(flat, np.where(c > 0, n, 0.0), np.where(d > 0, below, above))
    negative_count = np.where(flat, np.where(c < 0, n, 0.0), np.where(d > 0, above, below))
    return positive, negative, positive_count, negative_count


@register("kl", "k1_reward")
@dataclass(frozen=True)
class K1Reward:
    """beta k1 in the reward (OpenRLHF's default KL: init_kl_coef 0.01, estimator k1, use_kl_loss
    off): each token t earns -beta k1_t, k1_t = log pi_old(t) - log pi_ref(t) at the sampling
    policy, and its advantage is its return (gamma 1, OpenRLHF's reinforce family):
    A_t = A_i - beta sum_{s >= t} k1_s, with A_i the response's advantage of its outcome reward. So
    the approach token has A_i - beta (k_a + n k_ns + s k_st), the m-th non-stop token from the end
    A_i - beta (s k_st + m k_ns) (m = 1..n, n non-stop tokens, s = 1 if the response stopped) and
    the stop token A_i - beta k_st: per kind, sums of a linear sequence (`TokenAdvantage`). Taken
    once a batch, at the sampling policy; the reference is the initial policy."""

    beta: float = declared(0.0, 0.0, 1e6, high_open=True)

    def __post_init__(self) -> None:
        check_declared(self)

    @property
    def simulated_only(self) -> str:
        return "the KL reward makes the update depend on more than the policy" if self.beta > 0 else ""

    def token_advantages(
        self, advantage: FloatArray, old: TokenTable, ref: TokenTable, batch: Batch, counts: FloatArray
    ) -> TokenAdvantage:
        """The batch's per-kind advantage sums, `old` and `ref` the sampling and reference policies'
        tables at the batch's logits, `counts` its tokens of each kind [3, R, B, G]."""
        k1 = TokenTable.at_tokens(
            old.log_positive - ref.log_positive, old.log_negative - ref.log_negative, batch
        )
        b = self.beta
        non_stop, stopped = counts[1], counts[2]
        tail = advantage - b * stopped * k1[2]  # c: the non-stop tokens' values are c - beta k_ns m
        approach = tail - b * (k1[0] + non_stop * k1[1])
        stop = (advantage - b * k1[2]) * stopped
        ramble = _ramble_sums(tail, b * k1[1], non_stop)

        def kinds(first: FloatArray, second: FloatArray, third: FloatArray) -> FloatArray:
            return np.stack([first, second, third])

        return TokenAdvantage(
            kinds(np.maximum(approach, 0.0), ramble[0], np.maximum(stop, 0.0)),
            kinds(np.minimum(approach, 0.0), ramble[1], np.minimum(stop, 0.0)),
            kinds((approach > 0) * 1.0, ramble[2], (stop > 0) * stopped),
            kinds((approach < 0) * 1.0, ramble[3], (stop < 0) * stopped),
        )


def _clip(default: float | None, optional: bool = False) -> Any:
    """A clip range's epsilon or epsilon_high: a number in (0, 10) (None too where `optional`: its
    class says what None is)."""
    return declared(default, 0.0, 10.0, low_open=True, high_open=True, optional=optional)


class ClipRange:
    """What the clipped objectives share (PPO's, GSPO's, GMPO's): `epsilon` and `epsilon_high`
    (None: epsilon) checked, and the upper bound `clip_high`."""

    epsilon: float
    epsilon_high: float | None

    def __post_init__(self) -> None:
        check_declared(self)

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high


def _kl(update: Update, beta: float) -> FloatArray:
    """The KL term's coefficient on each token of a kind, beta (pi_ref / pi - 1) [3, R, B, G]
    (rho log(pi_ref / pi) where the k3 is ratio-weighted: `Update.kl_positive`)."""
    return beta * update.gather(update.kl_positive, update.kl_negative)


@register("objective", "ppo_clip")
@dataclass(frozen=True)
class PPOClip(ClipRange):
    """PPO's clipped objective per token, min(rho A, clip(rho, 1 - epsilon, 1 + epsilon_high) A),
    rho = pi_theta / pi_old (DAPO's clip-higher: epsilon_high > epsilon); with `dual_clip` c, a
    negative advantage's objective is at least c A (dual-clip PPO, Ye et al. 2020; verl's
    clip_ratio_c, 3 by default, applied by its vanilla policy loss).

    Its gradient on a token is A u rho d log pi, u = 0 where the clip is active (rho > 1 +
    epsilon_high with A > 0, rho < 1 - epsilon or rho > c with A < 0), else 1; with the KL term, plus
    beta (pi_ref / pi - 1). All tokens of a kind share one ratio, so this stays closed-form. At
    ratio 1 without KL (an on-policy update) every token of a response has coefficient w_i = A_i / D_i
    and the loss gradient is -(1/n) sum_i w_i grad log pi(o_i), the score-function estimator that
    `toyrl.expected` takes the expectation of (its exact hook is that form).
    """

    epsilon: float = _clip(0.2)
    epsilon_high: float | None = _clip(None, optional=True)  # None: epsilon
    # None: no lower bound on a negative advantage's objective
    dual_clip: float | None = declared(None, 1.0, 1e6, low_open=True, high_open=True, optional=True)

    def coefficients(self, update: Update, beta: float | None) -> tuple[Coefficients, FloatArray]:
        """(coefficients, clipped tokens [R]) of every token of the batch, by kind (approach,
        non-stop, stop), with the KL coefficient `beta` (None: no KL term). Per kind:
        1/(D n) (u A rho + beta (pi_ref/pi - 1)) times the response's tokens of that kind."""
        ratio = update.gather(update.ratio_positive, update.ratio_negative)
        low, high = self.epsilon, self.clip_high
        dual = np.inf if self.dual_clip is None else self.dual_clip
        if update.token_advantage is not None:  # advantages that vary within a response, per kind
            return PPOClip._per_token(update, ratio, low, high, dual)
        advantage = update.advantage
        # rho > 1 + epsilon_high where A > 0; rho < 1 - epsilon or rho > c where A < 0 (never where A = 0)
        above = np.where(advantage > 0, 1 + high, np.where(advantage < 0, dual, np.inf))
        below = np.where(advantage < 0, 1 - low, -np.inf)
        clipped = (ratio > above) | (ratio < below)
        objective = np.where(clipped, 0.0, advantage * ratio)
        if beta is not None:
            objective = objective + _kl(update, beta)
        coefficient = update.scale * objective * update.counts
        clipped_tokens = ((clipped & update.included) * update.counts).sum(axis=(0, 2, 3))  # integers: exact
        return Coefficients(coefficient[0], coefficient[1], coefficient[2]), clipped_tokens

    @staticmethod
    def _per_token(
        update: Update, ratio: FloatArray, low: float, high: float, dual: float
    ) -> tuple[Coefficients, FloatArray]:
        """The same clip with per-token advantages (`TokenAdvantage`): a kind's positive tokens are
        unclipped while rho <= 1 + epsilon_high, its negative ones while 1 - epsilon <= rho <= c."""
        tokens = update.token_advantage
        assert tokens is not None
        positive_on, negative_on = ratio <= 1 + high, (ratio >= 1 - low) & (ratio <= dual)
        objective = ratio * (
            np.where(positive_on, tokens.positive, 0.0) + np.where(negative_on, tokens.negative, 0.0)
        )
        coefficient = update.scale * objective
        clipped = np.where(positive_on, 0.0, tokens.positive_count) + np.where(
            negative_on, 0.0, tokens.negative_count
        )
        return Coefficients(coefficient[0], coefficient[1], coefficient[2]), (clipped * update.included).sum(
            axis=(0, 2, 3)
        )


@register("objective", "gspo")
@dataclass(frozen=True)
class GSPO(ClipRange):
    """GSPO's sequence-level ratio (Zheng et al. 2025, "Group Sequence Policy Optimization"; TRL's
    importance_sampling_level="sequence"): s_i = exp(mean over the response's |o_i| tokens of
    log(pi_theta / pi_old)), one per response, in PPO's clipped objective
    min(s_i A_i, clip(s_i, 1 - epsilon, 1 + epsilon_high) A_i) on each of its tokens, aggregated by
    the variant's normaliser. d s_i / d log pi(t) = s_i / |o_i| for each of its tokens, so each token
    of response i has coefficient u_i A_i s_i / (D_i n), u_i = 0 where the sequence's clip is active:
    closed form per response from its three token kinds' counts and ratios. At ratio 1 it is the
    on-policy update. GSPO's paper clips at 3e-4 / 4e-4."""

    epsilon: float = _clip(3e-4)
    epsilon_high: float | None = _clip(4e-4, optional=True)

    def coefficients(self, update: Update, beta: float | None) -> tuple[Coefficients, FloatArray]:
        """(coefficients, clipped tokens [R]) by kind: 1/(D n) u A s times the kind's tokens, plus
        the per-token KL term as PPOClip adds it."""
        _sequence_only(update, "gspo")
        ratio = update.gather(update.ratio_positive, update.ratio_negative)  # [3, R, B, G]
        counts = update.counts
        tokens = counts.sum(axis=0)
        log_ratio = np.where(counts > 0, counts * kernels.log(ratio), 0.0)  # log 0 = -inf: not selected
        sequence = kernels.exp(log_ratio.sum(axis=0) / tokens)
        advantage = update.advantage
        low, high = self.epsilon, self.clip_high
        clipped = ((advantage > 0) & (sequence > 1 + high)) | ((advantage < 0) & (sequence < 1 - low))
        objective = np.where(clipped, 0.0, advantage * sequence) * counts
        if beta is not None:
            objective = objective + _kl(update, beta) * counts
        coefficient = update.scale * objective
        clipped_tokens = np.where(clipped & update.included, tokens, 0.0).sum(axis=(1, 2))
        return Coefficients(coefficient[0], coefficient[1], coefficient[2]), clipped_tokens


SEQUENCE_OBJECTIVES = ("gspo", "gmpo", "vespo")  # one ratio (or weight) a response: one advantage a response


def _sequence_only(update: Update, name: str) -> None:
    """One advantage a response: `toyrl.train.check_variant` refuses these objectives with a KL
    reward's per-token advantages, at the edge."""
    assert update.token_advantage is None, f"objective={name} with per-token advantages"


@register("objective", "gmpo")
@dataclass(frozen=True)
class GMPO(ClipRange):
    """GMPO, the geometric mean of the token ratios (Zhao et al. 2025, "Geometric-Mean Policy
    Optimization", arXiv 2507.20673; verl's `geo_mean` policy loss, compute_policy_loss_geo_mean):
    each token's log-ratio l = log(pi_theta / pi_old) clipped in log space on the advantage's side,
    l' = min(l, epsilon_high) where A > 0 and max(l, -epsilon) where A < 0, then the response's
    ratio g_i = exp(mean over its |o_i| tokens of l') in -A_i g_i, averaged over the responses
    (verl takes torch.mean of the sequences' losses whatever loss_agg_mode says:
    seq_mean_token_mean's 1 / (|o_i| N) here). d g_i / d log pi(t) = g_i / |o_i| on a token whose
    l' = l, 0 on a clipped one, so each token of response i has coefficient u_t A_i g_i / (D_i n):
    closed form per token kind. At ratio 1 it is the on-policy update. verl divides by |o_i| + 1e-8
    (a relative 1e-8 / |o_i| apart). GMPO's paper clips at epsilon = epsilon_high = 0.4."""

    epsilon: float = _clip(0.4)
    epsilon_high: float | None = _clip(0.4, optional=True)  # None: epsilon

    def coefficients(self, update: Update, beta: float | None) -> tuple[Coefficients, FloatArray]:
        """(coefficients, clipped tokens [R]) by kind: 1/(D n) u A g times the kind's tokens, plus
        the per-token KL term as PPOClip adds it."""
        _sequence_only(update, "gmpo")
        ratio = update.gather(update.ratio_positive, update.ratio_negative)  # [3, R, B, G]
        counts = update.counts
        advantage = update.advantage
        low, high = self.epsilon, self.clip_high
        log_ratio = np.where(counts > 0, kernels.log(ratio), 0.0)  # log 0 = -inf: not selected
        positive, negative = advantage > 0, advantage < 0
        clipped = (positive & (log_ratio > high)) | (negative & (log_ratio < -low))
        kept = np.where(
            positive, np.minimum(log_ratio, high), np.where(negative, np.maximum(log_ratio, -low), 0.0)
        )
        sequence = kernels.exp((counts * kept).sum(axis=0) / counts.sum(axis=0))
        objective = np.where(clipped, 0.0, advantage * sequence) * counts
        if beta is not None:
            objective = objective + _kl(update, beta) * counts
        coefficient = update.scale * objective
        clipped_tokens = np.where(clipped & update.included, counts, 0.0).sum(axis=(0, 2, 3))
        return Coefficients(coefficient[0], coefficient[1], coefficient[2]), clipped_tokens


VESPO_LOG_FLOOR = -18.420680743952367  # log(1e-8), TRL's lower clamp of log w


@register("objective", "vespo")
@dataclass(frozen=True)
class VESPO:
    """VESPO (Variational Sequence-Level Soft Policy Optimization, arXiv 2602.10693; TRL's
    loss_type='vespo', GRPOTrainer.get_gamma_weights): per token -phi(w_i) A_i log pi, the weight
    detached, w_i the response's sequence ratio prod_t pi_theta / pi_old (each token's log-ratio
    clamped to [-20, 20], their sum to [log 1e-8, 20]) and phi(w) = exp(lambda + k log w - lambda w)
    = e^lambda w^k e^(-lambda w), a Gamma-shaped soft gate with phi(1) = 1 (k_pos, lambda_pos where
    A >= 0, else k_neg, lambda_neg; lambda at least 1e-4). A token's coefficient is phi(w_i) A_i:
    at ratio 1 the on-policy update; off policy each response's weight fades smoothly as w leaves
    1, never clipped to 0. TRL aggregates it as dapo (token_mean)."""

    k_pos: float = declared(2.0, 0.0, 1000.0)
    lambda_pos: float = declared(3.0, 0.0, 1000.0)
    k_neg: float = declared(3.0, 0.0, 1000.0)
    lambda_neg: float = declared(2.0, 0.0, 1000.0)

    def __post_init__(self) -> None:
        check_declared(self)

    def coefficients(self, update: Update, beta: float | None) -> tuple[Coefficients, FloatArray]:
        _sequence_only(update, "vespo")
        ratio = update.gather(update.ratio_positive, update.ratio_negative)
        counts = update.counts
        log_ratio = np.where(counts > 0, counts * np.clip(kernels.log(ratio), -20.0, 20.0), 0.0)
        log_w = np.clip(log_ratio.sum(axis=0), VESPO_LOG_FLOOR, 20.0)
        nonnegative = update.advantage >= 0

        k = np.where(nonnegative, self.k_pos, self.k_neg)
        rate = np.maximum(np.where(nonnegative, self.lambda_pos, self.lambda_neg), 1e-4)
        weight = kernels.exp(rate + k * log_w - rate * kernels.exp(log_w))
        return _token_objective(update, weight, weight, beta), np.zeros(ratio.shape[1])


def _token_objective(
    update: Update, positive: FloatArray, negative: FloatArray, beta: float | None
) -> Coefficients:
    """Coefficients by kind from a token's weight on its advantage: `positive` (where A > 0) and
    `negative` (A <= 0) [3, R, B, G], the same weight for every token of a kind; with per-token
    advantages (`TokenAdvantage`), the kind's sums of each sign take their weight."""
    tokens = update.token_advantage
    if tokens is not None:  # the sums already count the kind's tokens
        objective = positive * tokens.positive + negative * tokens.negative
        if beta is not None:
            objective = objective + _kl(update, beta) * update.counts
        coefficient = update.scale * objective
    else:
        weight = np.where(update.advantage > 0, positive, negative)
        objective = weight * update.advantage
        if beta is not None:
            objective = objective + _kl(update, beta)
        coefficient = update.scale * objective * update.counts
    return Coefficients(coefficient[0], coefficient[1], coefficient[2])


@register("objective", "cispo")
@dataclass(frozen=True)
class CISPO:
    """CISPO (MiniMax-M1, Chen et al. 2025, eq. 4; verl's `cispo` policy loss, TRL's
    loss_type='cispo'): per token -sg(clip(rho, 1 - epsilon, 1 + epsilon_high)) A log pi, the
    importance weight clipped and detached. A token's coefficient is that weight times A: where
    PPO's clip zeroes a token's gradient, CISPO keeps the clipped weight's. `epsilon` None: no
    lower bound (the paper's; TRL's clamp(max=epsilon_high), whose epsilon_high is the cap itself,
    1 + epsilon_high here: its recommended 5.0 is epsilon_high = 4). verl's clip_ratio_low and
    clip_ratio_high are epsilon and epsilon_high. At ratio 1 the weight is 1: the on-policy update."""

    epsilon: float | None = _clip(None, optional=True)
    epsilon_high: float = _clip(4.0)

    def __post_init__(self) -> None:
        check_declared(self)
        if self.epsilon is not None and self.epsilon > 1:
            raise InvalidInput(f"epsilon must be in (0, 1] for objective=cispo (got {self.epsilon!r})")

    @property
    def clip_high(self) -> float:
        return self.epsilon_high

    def coefficients(self, update: Update, beta: float | None) -> tuple[Coefficients, FloatArray]:
        """(coefficients, clipped tokens [R]): clip(rho) A per token (a clipped token: its weight
        moved to a bound), plus the KL term as PPOClip adds it."""
        ratio = update.gather(update.ratio_positive, update.ratio_negative)
        low, high = 0.0 if self.epsilon is None else 1 - self.epsilon, 1 + self.epsilon_high
        weight = np.minimum(np.maximum(ratio, low), high)
        clipped = np.where(update.included & ((ratio < low) | (ratio > high)), update.counts, 0.0)
        return _token_objective(update, weight, weight, beta), clipped.sum(axis=(0, 2, 3))


@register("objective", "sapo")
@dataclass(frozen=True)
class SAPO:
    """SAPO (Gao et al. 2025, "Soft Adaptive Policy Optimization", arXiv 2511.20347; TRL's
    loss_type='sapo', verl's `sapo` policy loss): a soft gate in place of the clip, per token
    -f(rho) A with f(rho) = sigmoid(tau (rho - 1)) 4 / tau, tau = tau_pos where A > 0, else
    tau_neg. A token's coefficient d f / d log pi times A is 4 sigma (1 - sigma) rho A, sigma =
    sigmoid(tau (rho - 1)): A at rho = 1 (the on-policy update), fading smoothly as rho leaves 1,
    faster for negative advantages (tau_neg > tau_pos). verl averages it per response
    (seq-mean-token-mean, whatever loss_agg_mode says); TRL's sapo likewise. No token is clipped."""

    tau_pos: float = declared(1.0, 0.0, 1000.0, low_open=True)
    tau_neg: float = declared(1.05, 0.0, 1000.0, low_open=True)

    def __post_init__(self) -> None:
        check_declared(self)

    def coefficients(self, update: Update, beta: float | None) -> tuple[Coefficients, FloatArray]:
        ratio = update.gather(update.ratio_positive, update.ratio_negative)

        def gate_slope(tau: float) -> FloatArray:  # d f / d log pi = 4 sigma(x) sigma(-x) rho
            x = tau * (ratio - 1)
            return 4 * expit(x) * expit(-x) * ratio

        positive, negative = gate_slope(self.tau_pos), gate_slope(self.tau_neg)
        return _token_objective(update, positive, negative, beta), np.zeros(ratio.shape[1])


@register("objective", "gpg")
@dataclass(frozen=True)
class PlainPolicyGradient:
    """GPG's loss (Chu et al. 2025, "GPG: A Simple and Strong Reinforcement Learning Baseline";
    verl's `gpg` policy loss): -A log pi per token, no importance ratio and no clip. A token's
    coefficient is A at every update, whatever the ratio: later epochs repeat the on-policy
    gradient at the moved policy."""

    def coefficients(self, update: Update, beta: float | None) -> tuple[Coefficients, FloatArray]:
        ones = np.ones(update.counts.shape)
        return _token_objective(update, ones, ones, beta), np.zeros(len(update.advantage))


# --- schedule -------------------------------------------------------------------------------


SHUFFLES = ("none", "once", "epoch")


@register("schedule", "epochs")
@dataclass(frozen=True)
class Epochs:
    """The optimiser updates on each sampled batch: num_iterations epochs (PPO epochs, TRL's mu,
    verl's ppo_epochs) over the batch cut into `mini_batches` equal parts, one update each, in the
    batch's order (prompt by prompt, each group's responses together: verl's default) or in a
    random order of its responses (`shuffle`: 'once' per batch and kept for every epoch, as TRL
    does; 'epoch', anew each epoch, as OpenRLHF's and oat's data loaders and verl's shuffle=True
    do). Each mini-batch's loss is summed over `micro_batches` equal consecutive parts (gradient
    accumulation), which changes the update only for a normaliser with per_micro_batch.

    verl's V1 layout (`toyrl.layout`), where lengths decide it: `ranks` data-parallel ranks, each
    dealt an equal part of the batch balanced by workload, in the batch's order, and taking its
    consecutive share of each mini-batch, its micro-batches its own; `token_budget` (0: off), the
    micro-batches of each rank's share cut by tokens instead of `micro_batches` (use_dynamic_bsz
    with ppo_max_token_len_per_gpu); `prompt_tokens`, each prompt's tokens, counted in a sequence's
    length by both.

    The first update is on-policy; later ones are at the ratios the earlier ones moved to, against
    the sampling policy (the trainers' old log-probabilities, taken once per batch). The advantages
    are the whole batch's, taken once. `max_grad_norm`: each update's gradient is scaled down to
    at most that norm before Adam, as torch's clip_grad_norm_ does (max_norm / (norm + 1e-6), at
    most 1); the `grad_norm` column is the first update's norm before it."""

    num_iterations: int = declared(1, 1, MAX_ITERATIONS)
    mini_batches: int = declared(1, 1, MAX_PARTS)
    micro_batches: int = declared(1, 1, MAX_PARTS)
    shuffle: str = declared("none", choices=SHUFFLES)
    # None: no clipping
    max_grad_norm: float | None = declared(None, 0.0, 1e12, low_open=True, high_open=True, optional=True)
    ranks: int = declared(1, 1, MAX_PARTS)
    token_budget: int = declared(0, 0, MAX_TOKENS)
    prompt_tokens: int = declared(0, 0, MAX_PROMPT_TOKENS)

    def __post_init__(self) -> None:
        check_declared(self)
        if self.token_budget and self.micro_batches > 1:
            raise InvalidInput("token_budget and micro_batches are two ways to cut micro-batches: choose one")
        if self.ranks > 1 and self.shuffle != "none":
            raise InvalidInput(
                f"ranks > 1 takes the mini-batches in the ranks' order: not with shuffle={self.shuffle}"
            )
        if self.prompt_tokens and not (self.ranks > 1 or self.token_budget):
            raise InvalidInput(
                "prompt_tokens counts in the ranks' balance and the token budget: "
                "set ranks > 1 or token_budget"
            )

    @property
    def updates(self) -> int:
        """Optimiser updates per sampled batch."""
        return self.num_iterations * self.mini_batches

    @property
    def orders(self) -> int:
        """Random orders of a batch's responses drawn per batch."""
        return {"none": 0, "once": 1, "epoch": self.num_iterations}[self.shuffle]

    def check(self, config: Config) -> None:
        """InvalidInput unless the configuration's batches cut into equal mini- and micro-batches."""
        responses = config.batch_prompts * config.group_size
        parts = self.mini_batches * self.micro_batches * self.ranks
        if responses % parts:
            factors = "mini_batches x micro_batches" + (" x ranks" if self.ranks > 1 else "")
            raise InvalidInput(
                f"{factors} = {parts} must divide the batch's {responses} responses "
                "(batch_prompts x group_size)"
            )
        longest = self.prompt_tokens + config.cap + config.approach_tokens
        if self.token_budget and self.token_budget < longest:
            raise InvalidInput(
                f"token_budget must be at least the longest sequence, prompt_tokens + cap + approach_tokens "
                f"= {longest:,} (got {self.token_budget:,})"
            )

    @property
    def laid_out(self) -> bool:
        """Whether the responses' lengths decide the mini- or micro-batches (`toyrl.layout`)."""
        return self.ranks > 1 or self.token_budget > 0

    @property
    def simulated_only(self) -> str:
        if self.num_iterations > 1:
            return "later epochs make the update depend on more than the policy"
        if self.mini_batches > 1:
            return "later mini-batches make the update depend on more than the policy"
        if self.ranks > 1:
            return "the ranks' layout is simulated only"
        return "micro-batches are simulated only" if self.micro_batches > 1 or self.token_budget else ""


@dataclass
class Update:
    """What an objective sees at one update of a group of runs, [3, R, B, G] arrays stacked by token
    kind (approach, non-stop, stop) where marked; built by `toyrl.train`."""

    batch: Batch
    advantage: FloatArray  # [R, B, G]
    included: NDArray[np.bool_]  # [R, B, G]
    scale: FloatArray  # 1/(D n) where included, else 0, [R, B, G]
    counts: FloatArray  # tokens of each kind [3, R, B, G]
    ratio_positive: FloatArray  # pi_theta / pi_old of each logit's two outcomes, [R, C]: C = B + 2
    # logits, the batch's own (`toyrl.policy.OwnLogits`), or all P + 2; `gather` places them
    ratio_negative: FloatArray
    kl_positive: FloatArray | None  # pi_ref / pi - 1, likewise (rho log(pi_ref / pi) where the k3 is
    # ratio-weighted; None without a KL term)
    kl_negative: FloatArray | None
    token_advantage: TokenAdvantage | None = None  # per-token advantages (a KL reward), these runs'

    def gather(self, positive: FloatArray | None, negative: FloatArray | None) -> FloatArray:
        """Per-logit values of the two outcomes, at each response's three kinds of token [3, R, B, G]."""
        assert positive is not None and negative is not None
        return TokenTable.at_tokens(positive, negative, self.batch)
