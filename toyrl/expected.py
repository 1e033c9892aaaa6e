"""Exact expected updates: each variant's E[g] against the true gradient of expected accuracy.

Paper's claim, made exact: GRPO's normalisations make the expected update differ from the gradient
of expected reward J; Dr. GRPO's is parallel to it, scaled by (G - 1) / (G L_norm).

The estimator (toyrl.train, ascent direction) is g = (1/(B G)) sum_i w_i s_i, with w_i = A_i / D_i
the per-token weight and s_i the response's summed score. Prompts are drawn uniformly without
replacement, so each is in the batch with probability B/P, and the G responses of a group are
exchangeable; hence

    E[g] = (1/P) sum_j E_j[w_1 s_1],

independent of B. Given its own response o (reward r), response 1's advantage depends on the other
G - 1 rewards only through their number of successes k' ~ Binomial(G - 1, q_j), q_j = P(correct |
prompt j). So E_j[w_1 s_1] = sum_o P(o) abar_j(r(o)) s(o) / D(o), with abar_j(r) = E[A_1 | r] a finite
sum over k', and the sum over o an exact finite sum over the ramble length K = 1..cap plus the
truncation atom K > cap, on each branch. Everything is vectorised over runs [R] and prompts [P].
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, log_expit
from scipy.stats import binom

from toyrl.config import Config
from toyrl.policy import FloatArray, split, stop_within, survival


def true_gradient(theta: FloatArray, cap: int, min_length: int) -> FloatArray:
    """grad J [R, P + 2] of J = mean_j sigma(psi_j) P_c, P_c = P(m <= K <= cap | right).

    dJ/dpsi_j = sigma'(psi_j) P_c / P; dJ/dphi_right = mean_j sigma(psi_j) dP_c/dphi with
    P_c = q^(m-1) - q^cap, dq/dphi = -s q; dJ/dphi_wrong = 0: a wrong approach earns nothing.
    """
    psi, phi_right, _ = split(theta)
    prompts = psi.shape[-1]
    window = survival(min_length - 1, phi_right) * stop_within(cap - min_length + 1, phi_right)
    s = expit(phi_right)
    d_window = -s * ((min_length - 1) * survival(min_length - 1, phi_right) - cap * survival(cap, phi_right))
    grad = np.zeros_like(theta)
    grad[..., :-2] = expit(psi) * expit(-psi) * window[..., None] / prompts
    grad[..., -2] = expit(psi).mean(axis=-1) * d_window
    return grad


def _mean_advantage(
    success_rate: FloatArray, group_size: int, std_scaled: FloatArray, eps: float
) -> tuple[FloatArray, FloatArray]:
    """(abar(1), abar(0)) [R, P]: E[A_1 | r_1 = r] over the other G - 1 rewards.

    A_1 = (r - k/G) / (std(k) + eps) or r - k/G, k = r + k' successes, std(k) = sqrt(k/G (1 - k/G))
    (population std, as the simulator); a zero-variance group has advantage 0.
    """
    others = np.arange(group_size)  # k' = 0 .. G - 1
    pmf = binom.pmf(others, group_size - 1, success_rate[..., None])  # [R, P, G]
    result = []
    for r in (1.0, 0.0):
        k = r + others
        centred = r - k / group_size
        std = np.sqrt(k / group_size * (1 - k / group_size))
        scale = np.where(std_scaled[..., None, None], std + eps, 1.0)
        advantage = np.divide(
            centred, scale, out=np.zeros(np.broadcast_shapes(centred.shape, scale.shape)), where=scale > 0
        )
        result.append((pmf * advantage).sum(axis=-1))
    return result[0], result[1]


def _branch_sums(
    stop_logit: FloatArray, config: Config, length_mean: FloatArray, window: tuple[int, int] | None
) -> dict[str, FloatArray]:
    """Sums over one branch's outcomes o of P(o)/D(o) and P(o) score(o)/D(o), [R] each.

    Outcomes: K = k <= cap (stopped, L = k, score 1 - k s) and K > cap (truncated, L = cap,
    score -cap s). D = L + 1 (the token count) where `length_mean`, else L_norm. With `window`
    (a, b), the sums are split into outcomes with a <= K <= b ("in") and the rest ("out").
    """
    cap = config.cap
    k = np.arange(1, cap + 1, dtype=np.float64)
    log_q = log_expit(-stop_logit)[..., None]
    pmf = np.exp(log_expit(stop_logit)[..., None] + (k - 1) * log_q)  # [R, cap]
    tail = survival(cap, stop_logit)
    s = expit(stop_logit)[..., None]
    divide = length_mean[..., None]
    d_k = np.where(divide, k + 1, config.length_norm_value)
    d_tail = np.where(length_mean, cap + 1, config.length_norm_value)
    weight, scored = pmf / d_k, pmf * (1 - k * s) / d_k
    tail_weight, tail_scored = tail / d_tail, tail * (-cap * s[..., 0]) / d_tail
    if window is None:
        return {"weight": weight.sum(-1) + tail_weight, "scored": scored.sum(-1) + tail_scored}
    inside = (k >= window[0]) & (k <= window[1])
    return {
        "weight_in": (weight * inside).sum(-1),
        "scored_in": (scored * inside).sum(-1),
        "weight_out": (weight * ~inside).sum(-1) + tail_weight,
        "scored_out": (scored * ~inside).sum(-1) + tail_scored,
    }


def expected_update(
    theta: FloatArray, config: Config, std_scaled: FloatArray, length_mean: FloatArray
) -> FloatArray:
    """E[g] [R, P + 2], the ascent direction (minus the expected loss gradient) of each run.

    `std_scaled`, `length_mean`: the variant's switches per run, bool [R].
    """
    psi, phi_right, phi_wrong = split(theta)
    p_right, p_wrong = expit(psi), expit(-psi)
    right = _branch_sums(phi_right, config, length_mean, (config.min_length, config.cap))
    wrong = _branch_sums(phi_wrong, config, length_mean, None)
    window = survival(config.min_length - 1, phi_right) * stop_within(
        config.cap - config.min_length + 1, phi_right
    )
    success = p_right * window[..., None]
    abar_correct, abar_incorrect = _mean_advantage(success, config.group_size, std_scaled, config.std_eps)
    prompts = psi.shape[-1]
    # Right approach: correct iff in the window; the approach score is 1 - sigma(psi) there, and
    # -sigma(psi) on a wrong approach, whose responses are all incorrect.
    on_right = abar_correct * right["weight_in"][..., None] + abar_incorrect * right["weight_out"][..., None]
    on_wrong = abar_incorrect * wrong["weight"][..., None]
    grad = np.zeros_like(theta)
    grad[..., :-2] = p_right * p_wrong * (on_right - on_wrong) / prompts
    grad[..., -2] = (
        p_right
        * (abar_correct * right["scored_in"][..., None] + abar_incorrect * right["scored_out"][..., None])
    ).mean(axis=-1)
    grad[..., -1] = (p_wrong * abar_incorrect * wrong["scored"][..., None]).mean(axis=-1)
    return grad


def variant_switches(names: list[str]) -> tuple[FloatArray, FloatArray]:
    """The (std_scaled, length_mean) switches [R] of variants given by name."""
    from toyrl.objective import VARIANTS

    return (
        np.array([VARIANTS[name].std_scaled for name in names]),
        np.array([VARIANTS[name].length_mean for name in names]),
    )
