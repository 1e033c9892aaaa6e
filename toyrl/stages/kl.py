"""KL: the KL term to the reference (initial) policy, in the loss or in the reward.

A KL stage has `beta`, its coefficient (0: no term), and gives either or both of:
- `loss(ratio, log_ref_ratio)`: the coefficient c of each logit's two outcomes [2, R, C] (ratio
  pi / pi_old, log_ref_ratio log(pi_ref / pi), both [2, R, C]) such that the term's gradient on a
  token is -beta c d log pi; None: no term in the loss;
- `token_advantages(advantage, old, ref, batch, counts)`: the per-token advantages a KL term in
  the reward gives (`TokenAdvantage`), taken once a batch at the sampling policy; None: none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from toyrl import kernels
from toyrl.policy import Batch, FloatArray, TokenTable
from toyrl.refusals import Refusal, refused_by, values
from toyrl.stages.registry import Kind, check_declared, declare, declared, register


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


@runtime_checkable
class KL(Protocol):
    """A KL term's coefficient, and its place: in the loss, in the reward, or both."""

    @property
    def beta(self) -> float: ...

    def loss(self, ratio: FloatArray, log_ref_ratio: FloatArray) -> FloatArray | None: ...

    def token_advantages(
        self, advantage: FloatArray, old: TokenTable, ref: TokenTable, batch: Batch, counts: FloatArray
    ) -> TokenAdvantage | None: ...


KIND = declare(
    Kind(
        name="kl",
        key="kl",
        default="k3",
        protocol=KL,
        step=5,
        spec_place=4,
        parameter_place=2,
        chunk=True,
        calls=("loss", "token_advantages"),
        no_exact_form="the exact update has no KL term",
        probe_input="policies",
    )
)


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

    # why the update has no exact expected form, as data (the page reads it)
    simulated_when: ClassVar[tuple[Refusal, ...]] = (
        Refusal("kl.beta > 0", "the KL term makes the update depend on more than the policy"),
    )

    @property
    def simulated_only(self) -> str:
        return refused_by(self.simulated_when, values(None, {"kl": self}))

    def loss(self, ratio: FloatArray, log_ref_ratio: FloatArray) -> FloatArray:
        """pi_ref / pi - 1 (rho log(pi_ref / pi) where ratio-weighted), of each logit's outcomes."""
        if self.ratio_weighted:
            return ratio * log_ref_ratio
        return kernels.exp(log_ref_ratio) - 1

    def token_advantages(
        self, advantage: FloatArray, old: TokenTable, ref: TokenTable, batch: Batch, counts: FloatArray
    ) -> None:
        return None


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

    # why the update has no exact expected form, as data (the page reads it)
    simulated_when: ClassVar[tuple[Refusal, ...]] = (
        Refusal("kl.beta > 0", "the KL reward makes the update depend on more than the policy"),
    )

    @property
    def simulated_only(self) -> str:
        return refused_by(self.simulated_when, values(None, {"kl": self}))

    def loss(self, ratio: FloatArray, log_ref_ratio: FloatArray) -> None:
        return None

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
