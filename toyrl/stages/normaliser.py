"""Normaliser: the aggregation of token losses, D_i and n of w_i = A_i / D_i.

`denominators(tokens, included, length_norm, members)`: (D [..., B, G], n [...] or one number),
the loss of the responses `members` (one update's mini-batch or micro-batch; None: the whole
batch) being -(1/n) sum_i w_i sum_t (token objective). Optional flags (False when absent):
`per_micro_batch`, the trainer computes the loss on each micro-batch of an optimiser step and
averages those (gradient accumulation), not on the step's whole mini-batch; `batch_tokens`, D is
the whole sampled batch's. `part_denominators` takes any normaliser (a plugin's too) on one
update's part by these flags: the training loop asks it, and reads neither. A per_micro_batch
normaliser may own how it is taken on every micro-batch at once: `micro_denominators(tokens,
included, length_norm, members, micro)`, D [..., B, G] of each response of `members` from its
micro-batch (`micro` [..., B, G]: each response's micro-batch index); without it
`part_denominators` calls `denominators` once a micro-batch. Exact hooks:
`response_denominator(tokens, length_norm)`, D of one response from its own token count, for
aggregations whose D is, and `averaged`, whether n counts the responses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from toyrl import kernels
from toyrl.policy import FloatArray
from toyrl.refusals import Refusal
from toyrl.stages.registry import Kind, check_declared, declare, declared, register


@runtime_checkable
class Normaliser(Protocol):
    """(D [..., B, G], n [...] or one number) of the responses `members` (None: all)."""

    def denominators(
        self,
        tokens: FloatArray,
        included: NDArray[np.bool_],
        length_norm: float,
        members: NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, FloatArray | float]: ...


KIND = declare(
    Kind(
        name="normaliser",
        key="aggregation",
        default="seq_mean_token_sum_norm",
        protocol=Normaliser,
        step=3,
        spec_place=1,
        parameter_place=5,
        shown=True,
        settings=("approach_tokens", "length_norm_value"),  # its tokens |o| and its L_norm
        calls=("denominators", "micro_denominators", "response_denominator"),
        exact_hooks=("response_denominator", "averaged"),
        probe_input="tokens",
    )
)


def per_micro_batch(stage: Normaliser) -> bool:
    """Whether a normaliser is taken on each micro-batch (its flag; False without one)."""
    return bool(getattr(stage, "per_micro_batch", False))


def part_denominators(
    stage: Normaliser,
    tokens: FloatArray,
    selected: NDArray[np.bool_],
    length_norm: float,
    parts: tuple[NDArray[np.bool_], NDArray[np.intp]] | None,
    mini_batches: int,
    micro_batches: int,
    unequal: NDArray[np.bool_],
) -> tuple[FloatArray, FloatArray | float]:
    """(D [R, B, G], n [R] or one number) of the normaliser over the responses `selected` into the
    loss, on the whole batch or, given `parts` (which responses are in each run's mini-batch, and
    each one's micro-batch), on each run's mini-batch of `mini_batches` (D only meaningful there).
    A per_micro_batch normaliser is taken on each micro-batch, its n times `micro_batches`: the
    mini-batch's loss is the mean of its micro-batches' (each holds as many responses), or, for
    the runs whose micro-batches are `unequal` (laid out by lengths, `toyrl.layout`), n the
    mini-batch's (a LongestResponse's, `toyrl.train.check_variant`). A batch_tokens one is the
    whole batch's, over the number of mini-batches."""
    if parts is None:
        return stage.denominators(tokens, selected, length_norm)
    members, micro = parts
    included = selected & members
    if getattr(stage, "batch_tokens", False):
        denominator, n = stage.denominators(tokens, selected, length_norm)
        return denominator / mini_batches, n
    if not per_micro_batch(stage):
        return stage.denominators(tokens, included, length_norm, members)
    if _micro_hook(type(stage)):  # every micro-batch at once
        own = cast(Any, stage).micro_denominators(tokens, included, length_norm, members, micro)
        denominator = np.where(members, own, 1.0)
    else:
        denominator = np.ones(tokens.shape)
        for index in range(int(micro.max()) + 1):
            inside = members & (micro == index)
            denominator = np.where(
                inside, stage.denominators(tokens, included, length_norm, inside)[0], denominator
            )
    n = stage.denominators(tokens, included, length_norm, members & (micro == 0))[1]
    if not unequal.any():
        return denominator, n * micro_batches
    whole = stage.denominators(tokens, included, length_norm, members)[1]
    return denominator, np.where(unequal, whole, n * micro_batches)


def _micro_hook(stage_class: type) -> bool:
    """Whether a normaliser class's `micro_denominators` belongs with its `denominators`: defined
    by the class that defines `denominators` or by one below it (a subclass that overrides only
    `denominators`, as a plugin may, is taken once a micro-batch with its own)."""
    owner = {
        name: next((c for c in stage_class.__mro__ if name in vars(c)), None)
        for name in ("denominators", "micro_denominators")
    }
    hook, plain = owner["micro_denominators"], owner["denominators"]
    return hook is not None and plain is not None and issubclass(hook, plain)


def _members(tokens: FloatArray, members: NDArray[np.bool_] | None) -> FloatArray:
    """How many responses `members` holds per run [...] (None: all of them)."""
    if members is None:
        return np.full(tokens.shape[:-2], float(tokens.shape[-2] * tokens.shape[-1]))
    return members.sum(axis=(-2, -1)).astype(np.float64)


def _by_micro_batch(
    values: FloatArray, members: NDArray[np.bool_], micro: NDArray[np.intp], reduce: np.ufunc
) -> FloatArray:
    """`reduce` (np.add or np.maximum) of `values` over each run's micro-batches, [..., B, G]: each
    response's micro-batch's, 0 outside `members`. On integer token counts both are exact, so the
    order of the reduction is immaterial: the same bits as one reduction a micro-batch."""
    runs = int(np.prod(values.shape[:-2], dtype=np.int64))
    count = int(micro.max()) + 1
    key = (np.arange(runs)[:, None] * count + micro.reshape(runs, -1)).ravel()
    out = np.zeros(runs * count)
    reduce.at(out, key, np.where(members, values, 0.0).ravel())
    return np.where(members, out[key].reshape(values.shape), 0.0)


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

    @property
    def divides(self) -> str:
        """What a token's weight A is divided by, in words (the page's causal chain shows it)."""
        if self.by_tokens:
            return "\u00f7 |o\u1d62| (its own length)"
        return "\u00f7 L_norm (a constant)" if self.by_length_norm else "no division (token sum)"

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

    def micro_denominators(
        self,
        tokens: FloatArray,
        included: NDArray[np.bool_],
        length_norm: float,
        members: NDArray[np.bool_],
        micro: NDArray[np.intp],
    ) -> FloatArray:
        return self.response_denominator(tokens, length_norm)


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
    divides: ClassVar[str] = "\u00f7 the batch's token total"  # a token's weight A, in words (the page's)

    refuses: ClassVar[tuple[Refusal, ...]] = (
        Refusal(
            "per_micro_batch == True and batch_tokens == True",
            "per_micro_batch and batch_tokens are two scopes: choose one",
        ),
    )

    def __post_init__(self) -> None:
        check_declared(self)

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

    def micro_denominators(
        self,
        tokens: FloatArray,
        included: NDArray[np.bool_],
        length_norm: float,
        members: NDArray[np.bool_],
        micro: NDArray[np.intp],
    ) -> FloatArray:
        return _by_micro_batch(np.where(included, tokens, 0.0), members, micro, np.add)


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

    def micro_denominators(
        self,
        tokens: FloatArray,
        included: NDArray[np.bool_],
        length_norm: float,
        members: NDArray[np.bool_],
        micro: NDArray[np.intp],
    ) -> FloatArray:
        return _by_micro_batch(tokens, members, micro, np.maximum)


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


@register("normaliser", "prompt_mean")
@dataclass(frozen=True)
class PromptMean:
    """D_i = the tokens in the loss of i's group among the responses `members` (at least 1), n = the
    number of prompts with a response among them: the token mean within each prompt's group, then
    the mean over prompts, so every prompt weighs the same whatever its responses' lengths. SkyRL's
    loss_reduction='prompt_mean' (skyrl-v0.3.0, skyrl/backends/skyrl_train/utils/ppo_utils.py,
    apply_loss_reduction_to_advantages_minibatch: token t of prompt p scaled by 1 / (num_prompts
    x tokens_in_prompt_p), tokens counted by the loss mask with clamp(min=1), once per mini-batch;
    SkyRL's mini-batches hold whole groups, here a group split by a mini-batch counts its part)."""

    simulated_only: ClassVar[str] = "the group's token total couples its responses"

    def denominators(
        self,
        tokens: FloatArray,
        included: NDArray[np.bool_],
        length_norm: float,
        members: NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        counted = included if members is None else included & members
        group_tokens = np.maximum(np.where(counted, tokens, 0.0).sum(axis=-1, keepdims=True), 1.0)
        if members is None:
            prompts = np.full(tokens.shape[:-2], float(tokens.shape[-2]))
        else:
            prompts = members.any(axis=-1).sum(axis=-1).astype(np.float64)
        return np.broadcast_to(group_tokens, tokens.shape), prompts


@register("normaliser", "delta_l")
@dataclass(frozen=True)
class DeltaL:
    """ΔL Normalization (He et al. 2025, arXiv 2509.07558): per-token weights proportional to
    |o_i|^-alpha / sum_j |o_j|^-alpha over the sampled batch, the minimum-variance unbiased
    combination of the responses' gradients when Var(g_i) grows as |o_i| (alpha = 1; alpha < 1
    keeps more of the long responses' signal). As the authors' code takes it (Delta-L-Normalization
    repository, README "Implementation of ∆L Normalization"; verl/trainer/ppo/core_algos.py,
    compute_grpo_outcome_advantage with use_grpopp: A_i times |o_i|^-alpha / mean_j |o_j|^-alpha
    over the whole batch, then masked_mean_allavg, the token sum over the responses times the
    padded width): D_i = L_norm |o_i|^alpha mean_j(|o_j|^-alpha), the mean over the sampled batch,
    n = N. alpha = 0 is Dr. GRPO's constant L_norm (the authors' "Dr. GRPO Norm" runs)."""

    alpha: float = declared(1.0, 0.0, 1.0)
    simulated_only: ClassVar[str] = "the batch's mean of |o|^-alpha couples its responses"

    def __post_init__(self) -> None:
        check_declared(self)

    def denominators(
        self,
        tokens: FloatArray,
        included: NDArray[np.bool_],
        length_norm: float,
        members: NDArray[np.bool_] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        inverse = kernels.power(tokens, -self.alpha)  # |o|^-alpha [..., B, G]
        responses = tokens.shape[-2] * tokens.shape[-1]
        mean = np.add.reduce(inverse.reshape(*tokens.shape[:-2], responses), axis=-1) / responses
        return length_norm * mean[..., None, None] / inverse, _members(tokens, members)
