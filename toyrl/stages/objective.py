"""Objective: the surrogate each later update (and any update with a KL term) differentiates.

`coefficients(update, beta)` -> (`Coefficients` of [R, B, G] arrays, clipped tokens [R]): each
token kind's coefficient in the loss gradient at the update's ratios (`Update`), with the KL
term's coefficient `beta` (None: no KL term in the loss). A chunk's runs share one objective
(`toyrl.train.chunk_key`): its parameters are its own fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from toyrl import kernels
from toyrl.policy import COMPILED, Batch, Coefficients, FloatArray, TokenTable, expit
from toyrl.stages.kl import TokenAdvantage
from toyrl.stages.registry import Kind, check_declared, declare, declared, register


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


@runtime_checkable
class Objective(Protocol):
    """The coefficients of every token kind at an update, and the tokens clipped [R]."""

    def coefficients(self, update: Update, beta: float | None) -> tuple[Coefficients, FloatArray]: ...


# The exact update is one on-policy update, which no objective changes: it asks an objective for nothing.
KIND = declare(
    Kind(
        name="objective",
        key="objective",
        default="ppo_clip",
        protocol=Objective,
        step=4,
        spec_place=3,
        parameter_place=1,
        chunk=True,
        calls=("coefficients",),
        probe_input="an update",
    )
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
        compiled = None if update.token_advantage is not None else kernels.compiled_module(COMPILED)
        if compiled is not None:  # the same operations, one loop (`toyrl.policy_compiled.ppo_clip`)
            return self._compiled(compiled, update, beta)
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

    def _compiled(self, compiled: Any, update: Update, beta: float | None) -> tuple[Coefficients, FloatArray]:
        """`coefficients` by `toyrl.policy_compiled.ppo_clip`: the same bits."""
        dual = np.inf if self.dual_clip is None else self.dual_clip
        coefficient = np.empty(update.counts.shape)
        clipped = np.zeros(len(update.advantage))
        positive, negative = update.ratio_positive, update.ratio_negative
        kl = (positive, negative) if beta is None else (update.kl_positive, update.kl_negative)
        compiled.ppo_clip(
            update.advantage,
            positive,
            negative,
            *kl,
            0.0 if beta is None else beta,
            beta is not None,
            update.batch.right,
            update.batch.prompt_index,
            update.scale,
            update.counts,
            update.included,
            1 + self.clip_high,
            1 - self.epsilon,
            dual,
            coefficient,
            clipped,
        )
        return Coefficients(coefficient[0], coefficient[1], coefficient[2]), clipped

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

    epsilon: float | None = declared(None, 0.0, 1.0, low_open=True, optional=True)  # a weight >= 0
    epsilon_high: float = _clip(4.0)

    def __post_init__(self) -> None:
        check_declared(self)

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
