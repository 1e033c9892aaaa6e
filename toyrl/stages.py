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
| reward     | `window`: 1 iff right approach, stopped, L >= min_length (the article's)      |
| selector   | `all`; `stopped` (truncated responses masked out of the loss: mask_truncated) |
| advantage  | `group_std` (ddof 0), `group_std_sample` (ddof 1), `batch_std`, `none`, `rloo`,        |
|            | `batch_whiten`                                                               |
| normaliser | the six aggregations: D_i and n of w_i = A_i / D_i, loss -(1/n) sum ...       |
| objective  | `ppo_clip`: min(rho A, clip(rho, 1 - epsilon, 1 + epsilon_high) A)            |
| kl         | `k3`: beta (pi_ref / pi - 1 - log(pi_ref / pi)), to the initial policy        |
| schedule   | `epochs`: num_iterations updates on each sampled batch                        |

Advantages, with eps the std epsilon (the stage's `std_eps`, or the configuration's `std_eps`):

| advantage          | A_i                                                                   |
| ------------------ | --------------------------------------------------------------------- |
| `group_std`        | (r_i - group mean) / (group population std + eps)  (article, toy)      |
| `group_std_sample` | (r_i - group mean) / (group sample std + eps)  (TRL, verl, oat)        |
| `batch_std`        | (r_i - group mean) / (sample std of all the batch's rewards + eps)     |
| `none`             | r_i - group mean  (Dr. GRPO)                                          |
| `rloo`             | r_i - mean of the group's other G - 1 rewards  (RLOO)                 |
| `batch_whiten`     | a_i = r_i - group mean, then (a_i - mean(a)) / (sample std(a) + eps) over the batch |

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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

import numpy as np
from numpy.typing import NDArray

from toyrl.config import Config, InvalidInput
from toyrl.policy import Batch, Coefficients, FloatArray, TokenTable

KINDS = ("reward", "selector", "advantage", "normaliser", "objective", "kl", "schedule")
REGISTRY: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}

Stage = TypeVar("Stage")
MAX_ITERATIONS = 64  # updates per sampled batch; trainers use 1 to a few (TRL's mu, verl's ppo_epochs)


def _check_std_eps(std_eps: object) -> None:
    if std_eps is not None and not (
        isinstance(std_eps, int | float) and not isinstance(std_eps, bool) and 0 <= std_eps < 1
    ):
        raise InvalidInput(f"std_eps must be a number in [0, 1) (got {std_eps!r})")


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


@register("reward", "window")
@dataclass(frozen=True)
class WindowReward:
    """The verifiable reward: 1 iff right approach, stopped and at least min_length ramble tokens."""

    def rewards(self, batch: Batch, config: Config) -> FloatArray:
        return (batch.right & batch.stopped & (batch.length >= config.min_length)).astype(np.float64)

    def window(self, config: Config) -> tuple[int, int]:
        """Exact hook: the ramble lengths K, on the right approach, that earn reward 1."""
        return config.min_length, config.cap


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
    std_eps: float | None = None  # None: the configuration's std_eps
    fixed: ClassVar[tuple[str, ...]] = ("ddof",)

    def __post_init__(self) -> None:
        _check_std_eps(self.std_eps)

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

    std_eps: float | None = None
    simulated_only: ClassVar[str] = "the batch's std couples its groups"

    def __post_init__(self) -> None:
        _check_std_eps(self.std_eps)

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

    std_eps: float | None = None
    simulated_only: ClassVar[str] = "batch whitening couples the groups of a batch"

    def __post_init__(self) -> None:
        _check_std_eps(self.std_eps)

    def advantages(self, rewards: FloatArray, std_eps: float) -> FloatArray:
        centred = _centred(rewards)
        centred = centred - centred.mean(axis=(-2, -1), keepdims=True)
        return _scaled(centred, centred.std(axis=(-2, -1), keepdims=True, ddof=1) + std_eps, std_eps)


@register("advantage", "token_whiten_sample", ddof=1, var_eps=1e-8, var_floor=0.0)
@register("advantage", "token_whiten", ddof=0, var_eps=0.0, var_floor=1e-8)  # bottom-up: this one first
@dataclass(frozen=True)
class TokenWhiten:
    """a_i = r_i - group mean, then whitened over the batch's *tokens* (REINFORCE++-baseline): each
    response weighs |o_i| (its tokens, every response's), mean m = sum |o| a / sum |o|, variance
    v = sum |o| (a - m)^2 / (sum |o| - ddof), A_i = (a_i - m) / sqrt(max(v + var_eps, var_floor)).

    `token_whiten`: OpenRLHF's reinforce_baseline (population variance, var.clamp(min=1e-8).rsqrt());
    `token_whiten_sample`: verl's reinforce_plus_plus_baseline (masked_whiten: Bessel-corrected over
    tokens, rsqrt(var + 1e-8)). Longer responses weigh more in the batch's statistics."""

    ddof: int = 0
    var_eps: float = 0.0
    var_floor: float = 1e-8
    fixed: ClassVar[tuple[str, ...]] = ("ddof", "var_eps", "var_floor")
    uses_tokens: ClassVar[bool] = True
    simulated_only: ClassVar[str] = "token-weighted whitening couples the groups of a batch"

    def advantages(self, rewards: FloatArray, std_eps: float, tokens: FloatArray) -> FloatArray:
        centred = _centred(rewards)
        total = tokens.sum(axis=(-2, -1), keepdims=True)
        mean = (centred * tokens).sum(axis=(-2, -1), keepdims=True) / total
        shifted = centred - mean
        variance = (shifted * shifted * tokens).sum(axis=(-2, -1), keepdims=True) / (total - self.ddof)
        return shifted / np.sqrt(np.maximum(variance + self.var_eps, self.var_floor))


def std_eps_of(advantage: Any, config: Config) -> float:
    """The std epsilon an advantage stage uses: its own `std_eps`, or the configuration's `std_eps`."""
    own = getattr(advantage, "std_eps", None)
    return config.std_eps if own is None else float(own)


# --- normaliser: the aggregation of token losses --------------------------------------------
# `denominators(tokens, included, length_norm)`: (D [..., B, G], n) of w_i = A_i / D_i, the loss
# being -(1/n) sum_i w_i sum_t (token objective). Exact hook `response_denominator(tokens,
# length_norm)`: D of one response from its own token count, for aggregations whose D is.


@dataclass(frozen=True)
class PerResponse:
    """D_i from the response alone: its token count (`by_tokens`), L_norm (`by_length_norm`) or 1;
    n = N, the batch's responses (`averaged`), or 1 (a sum over responses)."""

    by_tokens: bool = False
    by_length_norm: bool = False
    averaged: bool = True
    fixed: ClassVar[tuple[str, ...]] = ("by_tokens", "by_length_norm", "averaged")

    def response_denominator(self, tokens: FloatArray, length_norm: float) -> FloatArray:
        if self.by_tokens:
            return tokens
        if self.by_length_norm:
            return np.full(tokens.shape, length_norm)
        return np.ones(tokens.shape)

    def denominators(
        self, tokens: FloatArray, included: NDArray[np.bool_], length_norm: float
    ) -> tuple[FloatArray, float]:
        n = float(tokens.shape[-2] * tokens.shape[-1]) if self.averaged else 1.0
        return self.response_denominator(tokens, length_norm), n


register("normaliser", "seq_mean_token_mean", by_tokens=True)(PerResponse)


@register("normaliser", "token_mean")
@dataclass(frozen=True)
class TokenMean:
    """D_i = the batch's total token count (of the responses in the loss), n = 1: DAPO's token-level mean."""

    simulated_only: ClassVar[str] = "the batch's token total couples its responses"

    def denominators(
        self, tokens: FloatArray, included: NDArray[np.bool_], length_norm: float
    ) -> tuple[FloatArray, float]:
        total = np.where(included, tokens, 0).sum(axis=(-2, -1), keepdims=True)
        return np.broadcast_to(total, tokens.shape), 1.0


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
    its gradient on a token is -beta (pi_ref/pi - 1) d log pi. beta = 0: no KL term."""

    beta: float = 0.0

    def __post_init__(self) -> None:
        if not (
            isinstance(self.beta, int | float) and not isinstance(self.beta, bool) and 0 <= self.beta < 1e6
        ):
            raise InvalidInput(f"beta must be a number in [0, 1e6) (got {self.beta!r})")

    @property
    def simulated_only(self) -> str:
        return "the KL term makes the update depend on more than the policy" if self.beta > 0 else ""


@register("objective", "ppo_clip")
@dataclass(frozen=True)
class PPOClip:
    """PPO's clipped objective per token, min(rho A, clip(rho, 1 - epsilon, 1 + epsilon_high) A),
    rho = pi_theta / pi_old (DAPO's clip-higher: epsilon_high > epsilon).

    Its gradient on a token is A u rho d log pi, u = 0 where the clip is active (rho > 1 +
    epsilon_high with A > 0, rho < 1 - epsilon with A < 0), else 1; with the KL term, plus
    beta (pi_ref / pi - 1). All tokens of a kind share one ratio, so this stays closed-form. At
    ratio 1 without KL (an on-policy update) every token of a response has coefficient w_i = A_i / D_i
    and the loss gradient is -(1/n) sum_i w_i grad log pi(o_i), the score-function estimator that
    `toyrl.expected` takes the expectation of (its exact hook is that form).
    """

    epsilon: float = 0.2
    epsilon_high: float | None = None  # None: epsilon

    def __post_init__(self) -> None:
        for name in ("epsilon", "epsilon_high"):
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 10
            ):
                raise InvalidInput(f"{name} must be a number in (0, 10) (got {value!r})")

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    @staticmethod
    def stack(objectives: Sequence[Any]) -> dict[str, FloatArray]:
        """The clip ranges of a chunk's runs, [R] (NaN for runs with another objective)."""

        def values(name: str) -> FloatArray:
            return np.array([getattr(o, name) if isinstance(o, PPOClip) else np.nan for o in objectives])

        return {"low": values("epsilon"), "high": values("clip_high")}

    @staticmethod
    def coefficients(
        update: Update, parameters: dict[str, FloatArray], beta: FloatArray | None
    ) -> tuple[Coefficients, FloatArray]:
        """(coefficients, clipped tokens [R]) of every token of the batch, by kind (approach,
        non-stop, stop), with the runs' clip ranges `parameters` (`stack`) and KL coefficients
        `beta` [R] (None: no run has a KL term). Per kind: 1/(D n) (u A rho + beta (pi_ref/pi - 1))
        times the response's tokens of that kind."""
        advantage = update.advantage
        ratio = update.gather(update.ratio_positive, update.ratio_negative)
        low, high = parameters["low"][:, None, None], parameters["high"][:, None, None]
        # rho > 1 + epsilon_high where A > 0, rho < 1 - epsilon where A < 0 (never where A = 0)
        above = np.where(advantage > 0, 1 + high, np.inf)
        below = np.where(advantage < 0, 1 - low, -np.inf)
        clipped = (ratio > above) | (ratio < below)
        objective = np.where(clipped, 0.0, advantage * ratio)
        if beta is not None:
            objective = objective + beta[:, None, None] * update.gather(
                update.kl_positive, update.kl_negative
            )
        coefficient = update.scale * objective * update.counts
        clipped_tokens = ((clipped & update.included) * update.counts).sum(axis=(0, 2, 3))  # integers: exact
        return Coefficients(coefficient[0], coefficient[1], coefficient[2]), clipped_tokens


# --- schedule -------------------------------------------------------------------------------


@register("schedule", "epochs")
@dataclass(frozen=True)
class Epochs:
    """num_iterations optimiser updates on each sampled batch (PPO epochs, TRL's mu): the first
    on-policy, the later ones at the ratios the earlier ones moved to."""

    num_iterations: int = 1

    def __post_init__(self) -> None:
        n = self.num_iterations
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_ITERATIONS:
            raise InvalidInput(f"num_iterations must be an integer in 1..{MAX_ITERATIONS} (got {n!r})")

    @property
    def simulated_only(self) -> str:
        return (
            "later epochs make the update depend on more than the policy" if self.num_iterations > 1 else ""
        )


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
    kl_positive: FloatArray | None  # pi_ref / pi - 1, likewise (None without a KL term)
    kl_negative: FloatArray | None

    def gather(self, positive: FloatArray | None, negative: FloatArray | None) -> FloatArray:
        """Per-logit values of the two outcomes, at each response's three kinds of token [3, R, B, G]."""
        assert positive is not None and negative is not None
        return TokenTable.at_tokens(positive, negative, self.batch)
