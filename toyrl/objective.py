"""Loss variants as data: how advantages are computed and how token losses are aggregated.

Article, "The two biases" and "The Dr. GRPO objective". At ratio 1 (the first, on-policy update of
a batch, clipping inactive) every variant's loss gradient is

    grad = -(1 / n) sum_i w_i sum_t grad log pi(o_i,t),    w_i = A_i / D_i,

a per-token weight w_i shared by the tokens of response i. The advantage A_i and the aggregation
(D_i, n) are the two switches; N = B G responses, |o_i| the token count of response i (approach
token included, L + 1), L_norm a constant (by default the cap).

| advantage          | A_i                                                                   |
| ------------------ | --------------------------------------------------------------------- |
| `group_std`        | (r_i - group mean) / (group population std + eps)  (article, toy)      |
| `group_std_sample` | (r_i - group mean) / (group sample std + eps)  (TRL, verl, oat)        |
| `batch_std`        | (r_i - group mean) / (sample std of all the batch's rewards + eps)     |
| `none`             | r_i - group mean  (Dr. GRPO)                                          |
| `rloo`             | r_i - mean of the group's other G - 1 rewards  (RLOO)                 |
| `batch_whiten`     | a_i = r_i - group mean, then (a_i - mean(a)) / (sample std(a) + eps) over the batch |

| aggregation               | D_i                   | n | trainer name                              |
| ------------------------- | --------------------- | - | ----------------------------------------- |
| `seq_mean_token_mean`     | abs(o_i)              | N | GRPO; verl `seq-mean-token-mean`          |
| `token_mean`              | sum_j abs(o_j), batch | 1 | DAPO, BNPO; verl `token-mean`             |
| `seq_mean_token_sum`      | 1                     | N | verl `seq-mean-token-sum`                 |
| `seq_mean_token_sum_norm` | L_norm                | N | Dr. GRPO; TRL `dr_grpo`, oat `drgrpo`     |
| `token_sum_norm`          | L_norm                | 1 | verl `seq-mean-token-sum-norm` (sum / L)  |
| `token_sum`               | 1                     | 1 | plain sum                                 |

A variant also carries its PPO settings (`num_iterations` updates per batch, clip range
`epsilon`/`epsilon_high`, k3 KL coefficient `beta` to the initial policy, `mask_truncated`), which
`toyrl.train` applies. The four article variants are named combinations; the trainer presets are in
`toyrl.presets`; any combination can be spelled `key=value,...` (see `parse_variant`).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from toyrl.config import InvalidInput

FloatArray = NDArray[np.float64]

ADVANTAGES = ("group_std", "group_std_sample", "batch_std", "none", "rloo", "batch_whiten")
AGGREGATIONS = (
    "seq_mean_token_mean",
    "token_mean",
    "seq_mean_token_sum",
    "seq_mean_token_sum_norm",
    "token_sum_norm",
    "token_sum",
)


MAX_ITERATIONS = 64  # updates per sampled batch; trainers use 1 to a few (TRL's mu, verl's ppo_epochs)


@dataclass(frozen=True)
class Variant:
    """A loss variant: the two switches, PPO settings, and what it stands for."""

    name: str
    advantage: str = "none"
    aggregation: str = "seq_mean_token_sum_norm"
    num_iterations: int = 1  # optimiser updates per sampled batch (PPO epochs, TRL's mu)
    epsilon: float = 0.2  # lower clip range: ratios below 1 - epsilon are clipped
    epsilon_high: float | None = None  # upper clip range (None: epsilon); DAPO's clip-higher
    beta: float = 0.0  # coefficient of the k3 KL estimate to the initial policy
    mask_truncated: bool = False  # drop truncated responses from the loss
    eps: float | None = None  # std epsilon; None: the configuration's std_eps
    summary: str = ""

    def __post_init__(self) -> None:
        if self.advantage not in ADVANTAGES:
            raise InvalidInput(f"advantage must be one of {', '.join(ADVANTAGES)} (got {self.advantage!r})")
        if self.aggregation not in AGGREGATIONS:
            raise InvalidInput(
                f"aggregation must be one of {', '.join(AGGREGATIONS)} (got {self.aggregation!r})"
            )
        if (
            isinstance(self.num_iterations, bool)
            or not isinstance(self.num_iterations, int)
            or not 1 <= self.num_iterations <= MAX_ITERATIONS
        ):
            raise InvalidInput(
                f"num_iterations must be an integer in 1..{MAX_ITERATIONS} (got {self.num_iterations!r})"
            )
        for name in ("epsilon", "epsilon_high"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, int | float) and 0 < value < 10):
                raise InvalidInput(f"{name} must be a number in (0, 10) (got {value!r})")
        if not (isinstance(self.beta, int | float) and 0 <= self.beta < 1e6):
            raise InvalidInput(f"beta must be a number >= 0 (got {self.beta!r})")
        if self.eps is not None and not (isinstance(self.eps, int | float) and 0 <= self.eps < 1):
            raise InvalidInput(f"eps must be a number in [0, 1) (got {self.eps!r})")

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high

    def describe(self) -> str:
        """The variant's settings as a `key=value,...` spec (defaults left out)."""
        defaults = Variant("default")
        parts = [
            f"{field.name}={getattr(self, field.name)}"
            for field in dataclasses.fields(self)
            if (
                field.name not in ("name", "summary")
                and getattr(self, field.name) != getattr(defaults, field.name)
            )
            or field.name in ("advantage", "aggregation")
        ]
        return ",".join(parts)


ARTICLE_VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "grpo",
            "group_std",
            "seq_mean_token_mean",
            summary="GRPO: std-scaled advantage, per-response mean",
        ),
        Variant(
            "std_only", "group_std", "seq_mean_token_sum_norm", summary="std division only, constant L_norm"
        ),
        Variant(
            "length_only",
            "none",
            "seq_mean_token_mean",
            summary="length mean only: centred, per-response mean",
        ),
        Variant(
            "dr_grpo",
            "none",
            "seq_mean_token_sum_norm",
            summary="Dr. GRPO: centred advantage, constant L_norm",
        ),
    )
}
VARIANTS = ARTICLE_VARIANTS  # the four of the article; toyrl.presets adds the trainers'


def advantages(rewards: ArrayLike, mode: str, eps: float) -> FloatArray:
    """Advantages [..., B, G] (or [..., G] for group-level modes) of rewards of the same shape.

    Batch-level modes (`batch_std`, `batch_whiten`) reduce over the last two axes (the batch).
    A zero-variance group or batch gets zero advantage, even at eps = 0.
    """
    r = np.asarray(rewards, dtype=np.float64)
    group = r.shape[-1]
    centred = r - np.add.reduce(r, axis=-1, keepdims=True) / group  # numpy's mean, without its wrapper
    if mode == "none":
        return centred
    if mode == "rloo":
        return r - (r.sum(axis=-1, keepdims=True) - r) / (group - 1)
    if mode in ("group_std", "group_std_sample"):
        # numpy's std, spelled out from the centred rewards (same operations, same bits, less overhead)
        squares = np.add.reduce(centred * centred, axis=-1, keepdims=True)
        scale = np.sqrt(squares / (group - 1 if mode == "group_std_sample" else group)) + eps
    elif mode == "batch_std":
        scale = r.std(axis=(-2, -1), keepdims=True, ddof=1) + eps
    elif mode == "batch_whiten":
        centred = centred - centred.mean(axis=(-2, -1), keepdims=True)
        scale = centred.std(axis=(-2, -1), keepdims=True, ddof=1) + eps
    else:
        raise InvalidInput(f"advantage must be one of {', '.join(ADVANTAGES)} (got {mode!r})")
    if eps > 0:  # every scale is positive
        return centred / scale
    return np.divide(
        centred, scale, out=np.zeros(np.broadcast_shapes(centred.shape, scale.shape)), where=scale > 0
    )


def rows_by(keys: Sequence[Hashable]) -> dict[Any, NDArray[np.intp]]:
    """The row indices of each distinct key (a run's mode, say), in order of first appearance: runs
    that share a mode are computed together."""
    rows: dict[Any, list[int]] = {}
    for i, key in enumerate(keys):
        rows.setdefault(key, []).append(i)
    return {key: np.array(index) for key, index in rows.items()}


SUMMED_AGGREGATIONS = ("token_sum_norm", "token_sum")  # n = 1: summed over responses, not averaged


def response_denominator(aggregation: str, token_count: FloatArray, length_norm: float) -> FloatArray:
    """D of a per-response aggregation (all but `token_mean`): the token count, L_norm, or 1."""
    if aggregation == "seq_mean_token_mean":
        return token_count
    if aggregation in ("seq_mean_token_sum_norm", "token_sum_norm"):
        return np.full(token_count.shape, length_norm)
    return np.ones(token_count.shape)


def token_denominators(
    aggregation: str, token_count: FloatArray, included: NDArray[np.bool_], length_norm: float
) -> tuple[FloatArray, float]:
    """(D [..., B, G], n) of an aggregation; `included` marks responses that count (not masked out)."""
    responses = token_count.shape[-2] * token_count.shape[-1]
    if aggregation == "token_mean":
        total = np.where(included, token_count, 0).sum(axis=(-2, -1), keepdims=True)
        return np.broadcast_to(total, token_count.shape), 1.0
    n = 1.0 if aggregation in SUMMED_AGGREGATIONS else responses
    return response_denominator(aggregation, token_count, length_norm), n


class Weights(NamedTuple):
    """A batch's per-token weights under one variant: w = A / D where included, else 0, and n."""

    advantage: FloatArray
    denominator: FloatArray
    n: FloatArray | float  # one per run where runs are stacked
    included: NDArray[np.bool_]

    @property
    def weight(self) -> FloatArray:
        if self.included.all():  # every denominator is then positive (token counts are >= 1)
            return self.advantage / self.denominator
        ratio = np.divide(
            self.advantage, self.denominator, out=np.zeros(self.advantage.shape), where=self.denominator > 0
        )
        return np.where(self.included, ratio, 0.0)


def token_weights(
    variant: Variant,
    rewards: ArrayLike,
    token_count: ArrayLike,
    stopped: ArrayLike,
    eps: float,
    length_norm: float,
) -> Weights:
    """The per-token weights [..., B, G] of one variant (see the module docstring).

    Masked-out responses (truncated ones, with `mask_truncated`) get weight 0 and do not count in
    `token_mean`'s token total.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    tokens = np.asarray(token_count, dtype=np.float64)
    included = ~(variant.mask_truncated & ~np.asarray(stopped, dtype=bool))
    included = np.broadcast_to(included, rewards.shape)
    advantage = advantages(rewards, variant.advantage, eps if variant.eps is None else variant.eps)
    denominator, n = token_denominators(variant.aggregation, tokens, included, length_norm)
    return Weights(advantage, denominator, n, included)


def variant_weights(
    variant: Variant, rewards: ArrayLike, token_count: ArrayLike, eps: float, length_norm: float
) -> FloatArray:
    """Per-token weights of one group (or batch) of stopped responses: A_i / D_i (without 1/n)."""
    rewards = np.asarray(rewards, dtype=np.float64)
    tokens = np.broadcast_to(np.asarray(token_count, dtype=np.float64), rewards.shape)
    batch_rewards, batch_tokens = np.atleast_2d(rewards), np.atleast_2d(tokens)
    weights = token_weights(variant, batch_rewards, batch_tokens, True, eps, length_norm)
    return weights.weight.reshape(rewards.shape)


def leave_one_out_advantages(rewards: ArrayLike) -> FloatArray:
    """RLOO's advantages [..., G]: r_i minus the mean of the other G - 1 rewards of its group.

    Tutorial, section 4.1: r_i - mean(r) = ((G - 1) / G) (r_i - mean_{j != i} r_j), so the group
    mean scales the expected gradient by (G - 1) / G; leaving r_i out of its own baseline removes it.
    """
    return advantages(rewards, "rloo", 0.0)


SPEC_KEYS = (
    "advantage",
    "aggregation",
    "num_iterations",
    "epsilon",
    "epsilon_high",
    "beta",
    "mask_truncated",
    "eps",
)


def parse_variant(text: str, known: dict[str, Variant]) -> Variant:
    """A variant by name, or spelled `key=value,...` over SPEC_KEYS (others at their defaults).

    e.g. `advantage=rloo,aggregation=token_mean,num_iterations=2,epsilon_high=0.28`.
    """
    if text in known:
        return known[text]
    if "=" not in text:
        close = difflib.get_close_matches(text, list(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidInput(
            f"unknown variant {text!r}{hint}; valid: {', '.join(ARTICLE_VARIANTS)}, all, a trainer preset "
            f"('toyrl variants' lists them), or a spec key=value,... over {', '.join(SPEC_KEYS)}"
        )
    values: dict[str, object] = {}
    for part in text.split(","):
        key, _, raw = part.partition("=")
        key, raw = key.strip(), raw.strip()
        if key not in SPEC_KEYS:
            raise InvalidInput(f"variant spec {text!r}: unknown key {key!r}; valid: {', '.join(SPEC_KEYS)}")
        if key in ("advantage", "aggregation"):
            values[key] = raw
        elif key == "num_iterations":
            values[key] = _number(text, key, raw, int)
        elif key == "mask_truncated":
            if raw.lower() not in ("true", "false", "1", "0"):
                raise InvalidInput(
                    f"variant spec {text!r}: mask_truncated must be true or false (got {raw!r})"
                )
            values[key] = raw.lower() in ("true", "1")
        else:
            values[key] = None if raw.lower() == "none" else _number(text, key, raw, float)
    return Variant(name=text, **values)  # type: ignore[arg-type]


def _number(text: str, key: str, raw: str, kind: type) -> object:
    try:
        value = kind(raw)
    except ValueError:
        raise InvalidInput(f"variant spec {text!r}: {key} must be a number (got {raw!r})") from None
    if value != value:  # NaN
        raise InvalidInput(f"variant spec {text!r}: {key} must be a finite number (got {raw!r})")
    return value


def parse_variants(names: Sequence[str], known: dict[str, Variant] | None = None) -> list[Variant]:
    """Variants by name or spec, without repeats; 'all' stands for the four article variants."""
    known = ARTICLE_VARIANTS if known is None else known
    chosen: dict[str, Variant] = {}
    for text in names:
        if text == "all":
            chosen |= ARTICLE_VARIANTS
        else:
            variant = parse_variant(text, known)
            chosen[variant.name] = variant
    return list(chosen.values())
