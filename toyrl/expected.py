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

from collections.abc import Sequence

import numpy as np
from scipy.special import expit, gammaln, log_expit, xlog1py, xlogy

from toyrl.config import Config, InvalidInput
from toyrl.objective import SUMMED_AGGREGATIONS, Variant, response_denominator, rows_by
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


SUPPORTED_ADVANTAGES = ("group_std", "group_std_sample", "none", "rloo")
SUPPORTED_AGGREGATIONS = (
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "seq_mean_token_sum_norm",
    "token_sum_norm",
    "token_sum",
)


def binomial_pmf(k: FloatArray, n: int, p: FloatArray) -> FloatArray:
    """P(Binomial(n, p) = k), in log space (scipy.special only: scipy.stats costs 0.4 s to import)."""
    log_choose = gammaln(n + 1) - gammaln(k + 1) - gammaln(n - k + 1)
    return np.exp(log_choose + xlogy(k, p) + xlog1py(n - k, -p))


def check_exact_supported(variants: Sequence[Variant]) -> None:
    """InvalidInput unless every variant's expected update has the exact form computed here.

    Covered: group-level advantages, per-response or constant denominators, truncated responses
    masked or not, one on-policy update without KL. Batch-level statistics (`batch_std`,
    `batch_whiten`, `token_mean`) couple the groups of a batch, and PPO epochs or the KL term make
    the update depend on more than the policy; those are simulated, not computed exactly.
    """
    for v in variants:
        if (
            v.advantage not in SUPPORTED_ADVANTAGES
            or v.aggregation not in SUPPORTED_AGGREGATIONS
            or v.num_iterations > 1
            or v.beta > 0
        ):
            raise InvalidInput(
                f"no exact expected update for variant {v.name!r}: it covers advantages "
                f"{', '.join(SUPPORTED_ADVANTAGES)}, aggregations {', '.join(SUPPORTED_AGGREGATIONS)}, "
                "num_iterations = 1 and beta = 0"
            )


def _mean_advantage(
    success_rate: FloatArray, group_size: int, variant: Variant, eps: float
) -> tuple[FloatArray, FloatArray]:
    """(abar(1), abar(0)) [..., P]: E[A_1 | r_1 = r] over k' ~ Binomial(G - 1, q) other successes.

    k = r + k'; std(k) = sqrt(k/G (1 - k/G)) is the population std (times sqrt(G/(G-1)) for the
    sample std); a zero-variance group has advantage 0; RLOO's baseline is k'/(G - 1).
    """
    others = np.arange(group_size, dtype=np.float64)
    pmf = binomial_pmf(others, group_size - 1, success_rate[..., None])
    eps = eps if variant.eps is None else variant.eps
    result = []
    for r in (1.0, 0.0):
        k = r + others
        if variant.advantage == "rloo":
            advantage = r - others / (group_size - 1)
        else:
            advantage = r - k / group_size
            if variant.advantage in ("group_std", "group_std_sample"):
                std = np.sqrt(k / group_size * (1 - k / group_size))
                if variant.advantage == "group_std_sample":
                    std = std * np.sqrt(group_size / (group_size - 1))
                scale = std + eps
                advantage = np.divide(advantage, scale, out=np.zeros(scale.shape), where=scale > 0)
        result.append((pmf * advantage).sum(axis=-1))
    return result[0], result[1]


def _branch_sums(
    stop_logit: FloatArray,
    config: Config,
    variants: Sequence[Variant],
    window: tuple[int, int] | None,
) -> dict[str, FloatArray]:
    """Sums over one branch's outcomes o of P(o)/D(o) and P(o) score(o)/D(o), [R] each.

    Outcomes: K = k <= cap (stopped, L = k, score 1 - k s) and K > cap (truncated, L = cap,
    score -cap s, weight 0 when the variant masks truncated responses). With `window` (a, b), the
    sums are split into outcomes with a <= K <= b ("in") and the rest ("out").
    """
    cap = config.cap
    k = np.arange(1, cap + 1, dtype=np.float64)
    log_q = log_expit(-stop_logit)[..., None]
    with np.errstate(over="ignore"):  # at logits near the float64 limit the pmf is 0, as it should be
        pmf = np.exp(log_expit(stop_logit)[..., None] + (k - 1) * log_q)  # [R, cap]
    tail = survival(cap, stop_logit)
    s = expit(stop_logit)[..., None]
    d_k = np.empty(pmf.shape)
    for aggregation, rows in rows_by([v.aggregation for v in variants]).items():
        d_k[rows] = response_denominator(aggregation, k + config.approach_tokens, config.length_norm_value)
    d_tail = d_k[:, -1]  # a truncated response has L = cap, the last stopped length's token count
    keep_tail = np.array([not v.mask_truncated for v in variants])
    # The number of responses N over the aggregation's n: token sums are not averaged over responses.
    responses = config.batch_prompts * config.group_size
    scale = np.array([responses if v.aggregation in SUMMED_AGGREGATIONS else 1.0 for v in variants])
    # A stopped one-token response scores 1 - s, which rounds to 0 above logit 37: sigma(-phi) there.
    score = np.where((k == 1) & (stop_logit[..., None] > 12), expit(-stop_logit)[..., None], 1 - k * s)
    weight, scored = scale[:, None] * pmf / d_k, scale[:, None] * pmf * score / d_k
    tail_weight = np.where(keep_tail, scale * tail / d_tail, 0.0)
    tail_scored = np.where(keep_tail, scale * tail * (-cap * s[..., 0]) / d_tail, 0.0)
    if window is None:
        return {"weight": weight.sum(-1) + tail_weight, "scored": scored.sum(-1) + tail_scored}
    inside = (k >= window[0]) & (k <= window[1])
    return {
        "weight_in": (weight * inside).sum(-1),
        "scored_in": (scored * inside).sum(-1),
        "weight_out": (weight * ~inside).sum(-1) + tail_weight,
        "scored_out": (scored * ~inside).sum(-1) + tail_scored,
    }


def expected_update(theta: FloatArray, config: Config, variants: Sequence[Variant]) -> FloatArray:
    """E[g] [R, P + 2], the ascent direction (minus the expected loss gradient) of each run's variant."""
    check_exact_supported(variants)
    psi, phi_right, phi_wrong = split(theta)
    p_right, p_wrong = expit(psi), expit(-psi)
    right = _branch_sums(phi_right, config, variants, (config.min_length, config.cap))
    wrong = _branch_sums(phi_wrong, config, variants, None)
    window = survival(config.min_length - 1, phi_right) * stop_within(
        config.cap - config.min_length + 1, phi_right
    )
    success = p_right * window[..., None]
    abar_correct, abar_incorrect = np.empty(success.shape), np.empty(success.shape)
    # Runs that share an advantage mode and epsilon are computed together: the same elementwise
    # arithmetic, one call instead of one per run.
    for rows in rows_by([(v.advantage, v.eps) for v in variants]).values():
        abar_correct[rows], abar_incorrect[rows] = _mean_advantage(
            success[rows], config.group_size, variants[rows[0]], config.std_eps
        )
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
