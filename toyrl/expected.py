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

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from toyrl import kernels
from toyrl.config import Config, InvalidInput
from toyrl.objective import Variant, rows_by
from toyrl.policy import (
    SCORE_EXACT_ABOVE,
    FloatArray,
    expit,
    log_expit,
    split,
    stop_within,
    survival,
    token_count,
)
from toyrl.stages import KIND, REGISTRY, simulated_only, stage_name, std_eps_of
from toyrl.train import Adam, Recorder, Trajectory, check_finite, initial_theta, run_streams


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


@functools.cache
def log_factorials(n: int) -> FloatArray:
    """log k! for k = 0..n [n + 1]: log 1 + log 2 + ... + log k, summed in that order. Kept per n
    (read-only): a mean-field run asks for the same table at every step."""
    logs = np.zeros(n + 1)
    logs[1:] = kernels.log(np.arange(1, n + 1, dtype=np.float64))
    table = np.cumsum(logs)
    table.flags.writeable = False
    return table


def binomial_pmf(k: FloatArray, n: int, p: FloatArray) -> FloatArray:
    """P(Binomial(n, p) = k) [..., len(k)] for whole numbers k in 0..n and p [..., 1], in log space:
    exp(log n! - log k! - log (n - k)! + k log p + (n - k) log(1 - p)), log p and log1p(-p) taken
    once per p, not once per k."""
    with np.errstate(invalid="ignore"):  # log 0 = -inf, times 0 = NaN: not selected
        successes = np.where(k == 0, 0.0, k * kernels.log(p))
        failures = np.where(n - k == 0, 0.0, (n - k) * kernels.log1p(-p))
    return kernels.exp(log_choose(k, n) + successes + failures)


def log_choose(k: FloatArray, n: int) -> FloatArray:
    """log C(n, k) = log n! - log k! - log (n - k)! for whole numbers k in 0..n, any shape."""
    factorials = log_factorials(n)
    whole = k.astype(np.intp)
    return factorials[n] - factorials[whole] - factorials[n - whole]


def exact_support(variant: Variant) -> str:
    """Why a variant has no exact expected update ('' if it has one): the first of its stages that
    is simulated only (`toyrl.stages.simulated_only`) or lacks an exact hook its kind's record
    names (`Kind.exact_hooks`)."""
    for kind in KIND.values():
        stage = variant.stage(kind.name)
        reason = simulated_only(stage)
        if reason:
            return reason
        missing = [hook for hook in kind.exact_hooks if not hasattr(stage, hook)]
        if missing:
            name = stage_name(kind.name, stage)
            return f"{kind.name} {name} has no exact hook: it lacks {' and '.join(missing)}"
    return ""


def check_exact_supported(variants: Sequence[Variant]) -> None:
    """InvalidInput unless every variant's expected update has the exact form computed here.

    Covered: group-level advantages, per-response or constant denominators, truncated responses
    masked or not, one on-policy update without KL. Batch-level statistics (`batch_std`,
    `batch_whiten`, `token_mean`) couple the groups of a batch, and PPO epochs or the KL term make
    the update depend on more than the policy; those are simulated, not computed exactly.
    """
    for v in variants:
        reason = exact_support(v)
        if reason:
            exact = {
                kind: [name for name, stage in REGISTRY[kind].items() if not simulated_only(stage)]
                for kind in ("advantage", "normaliser")
            }
            raise InvalidInput(
                f"no exact expected update for variant {v.name!r} ({reason}): it covers advantages "
                f"{', '.join(exact['advantage'])}, aggregations {', '.join(exact['normaliser'])}, "
                "num_iterations = 1 and beta = 0"
            )


def _hook(stage: object, name: str) -> Any:
    """A stage's exact hook (its kind's `Kind.exact_hooks`), which `check_exact_supported` has found."""
    return getattr(stage, name)


def _mean_advantage(
    success_rate: FloatArray, group_size: int, advantage: object, std_eps: float, selector: object = None
) -> tuple[FloatArray, FloatArray]:
    """(abar(1), abar(0)) [..., P]: E[A_1 | r_1 = r] over k' ~ Binomial(G - 1, q) other successes,
    from the advantage stage's exact hook `conditional(r, k', G, std_eps)`; with a selector by the
    group's rewards (its hook `keeps_group`), the advantage of a group out of the loss counts 0
    (its weight is 0; a per-response mean's N still counts it)."""
    others = np.arange(group_size, dtype=np.float64)
    own = advantage.conditional  # type: ignore[attr-defined]
    if selector is None:
        conditional = own
    else:

        def conditional(r: float, others: FloatArray, group: int, std_eps: float) -> FloatArray:
            kept = selector.keeps_group(r + others, group)  # type: ignore[attr-defined]
            return np.where(kept, own(r, others, group, std_eps), 0.0)

    compiled = kernels.compiled_module("toyrl.expected_compiled")
    if compiled is not None:
        values = [conditional(r, others, group_size, std_eps) for r in (1.0, 0.0)]
        return compiled.mean_advantage(others, group_size - 1, success_rate, *values)
    pmf = binomial_pmf(others, group_size - 1, success_rate[..., None])
    result = [(pmf * conditional(r, others, group_size, std_eps)).sum(axis=-1) for r in (1.0, 0.0)]
    return result[0], result[1]


@dataclass(frozen=True)
class ExactPlan:
    """The runs' stages as the exact update needs them, grouped once: runs sharing a stage are
    computed together (the same elementwise arithmetic, one call instead of one per run)."""

    normalisers: dict[Any, NDArray[np.intp]]
    advantages: dict[Any, NDArray[np.intp]]  # by (advantage, selector by the group's rewards or None)
    keep_tail: NDArray[np.bool_]  # a truncated response is in the loss (the selector's hook)
    scale: FloatArray  # N / n: 1 for a mean over responses, B G for a sum over them
    reward: Any
    buffers: dict[tuple[int, int], FloatArray] = field(default_factory=dict)

    def workspace(self, runs: int, cap: int) -> FloatArray:
        """Three scratch arrays [R, cap] for the sums over lengths, kept for the next call."""
        if (runs, cap) not in self.buffers:
            self.buffers.clear()
            self.buffers[runs, cap] = np.empty((3, runs, cap))
        return self.buffers[runs, cap]

    @classmethod
    def of(cls, variants: Sequence[Variant], config: Config) -> ExactPlan:
        check_exact_supported(variants)
        rewards = rows_by([v.reward for v in variants])
        if len(rewards) > 1:
            raise InvalidInput("the runs of one exact update must share their reward")
        responses = config.batch_prompts * config.group_size
        return cls(
            normalisers=rows_by([v.normaliser for v in variants]),
            advantages=rows_by([(v.advantage, _group_selector(v.selector)) for v in variants]),
            keep_tail=np.array([_hook(v.selector, "keeps_truncated") for v in variants]),
            scale=np.array([1.0 if _hook(v.normaliser, "averaged") else responses for v in variants]),
            reward=next(iter(rewards)),
        )


def _group_selector(selector: object) -> object:
    """The selector if it selects by its group's rewards (its exact hook `keeps_group`), else None."""
    return selector if hasattr(selector, "keeps_group") else None


PMF_BLOCK = 64  # lengths per block of `geometric_pmf`


def geometric_pmf(stop_logit: FloatArray, cap: int) -> FloatArray:
    """P(K = k) = s q^(k - 1) for k = 1..cap [R, cap], s = sigma(phi), q = 1 - s, by blocks: with
    k - 1 = PMF_BLOCK j + i, the product of exp(log s + PMF_BLOCK j log q) [R, blocks] and
    exp(i log q) [R, PMF_BLOCK] (two roundings more than one exp per length: a few ulp, at a
    PMF_BLOCK-th of the exps). log q = log sigma(-phi), so tiny stop probabilities keep their
    digits; 0 where the probability underflows."""
    log_s, log_q = log_expit(stop_logit)[:, None], log_expit(-stop_logit)[:, None]
    blocks = -(-cap // PMF_BLOCK)
    offsets = np.arange(PMF_BLOCK, dtype=np.float64)
    starts = np.arange(blocks, dtype=np.float64) * PMF_BLOCK
    with np.errstate(over="ignore"):  # log q near -1e308 (phi near +1e308): i log q is -inf, q^i 0
        within = kernels.exp(offsets * log_q)  # q^i [R, PMF_BLOCK]
        first = kernels.exp(log_s + starts * log_q)  # s q^(PMF_BLOCK j) [R, blocks]
    return (first[:, :, None] * within[:, None, :]).reshape(len(stop_logit), -1)[:, :cap]


def _branch_sums(
    stop_logit: FloatArray, config: Config, plan: ExactPlan, window: tuple[int, int] | None
) -> dict[str, FloatArray]:
    """Sums over one branch's outcomes o of P(o)/D(o) and P(o) score(o)/D(o), [R] each.

    Outcomes: K = k <= cap (stopped, L = k, score 1 - k s) and K > cap (truncated, L = cap,
    score -cap s, weight 0 when the variant's selector drops truncated responses). D is the
    normaliser's exact hook `response_denominator`. With `window` (a, b), the sums are split into
    outcomes with a <= K <= b ("in") and the rest ("out"). The sums over k run compiled when the
    kernels do (`toyrl.expected_compiled`, the same bits), else in numpy (`_length_sums`).
    """
    cap, runs = config.cap, len(stop_logit)
    k = np.arange(1, cap + 1, dtype=np.float64)
    tail = survival(cap, stop_logit)
    s = expit(stop_logit)[..., None]
    tokens = token_count(k, config.approach_tokens)
    if len(plan.normalisers) == 1:  # one normaliser: D depends on k alone
        d_k = next(iter(plan.normalisers)).response_denominator(tokens, config.length_norm_value)
        d_tail = np.full(runs, d_k[-1])
    else:
        d_k = np.empty((runs, cap))
        for normaliser, rows in plan.normalisers.items():
            d_k[rows] = normaliser.response_denominator(tokens, config.length_norm_value)
        d_tail = d_k[:, -1]  # a truncated response has L = cap, the last stopped length's token count
    scale, keep_tail = plan.scale, plan.keep_tail
    compiled = kernels.compiled_module("toyrl.expected_compiled")
    if compiled is not None:
        sums = compiled.branch_sums(stop_logit, d_k, scale, window)
    else:
        sums = _length_sums(stop_logit, k, s, d_k, plan, window)
    tail_weight = np.where(keep_tail, scale * tail / d_tail, 0.0)
    tail_scored = np.where(keep_tail, scale * tail * (-cap * s[..., 0]) / d_tail, 0.0)
    if window is None:
        return {"weight": sums["weight"] + tail_weight, "scored": sums["scored"] + tail_scored}
    outside = {"weight_out": sums["weight_out"] + tail_weight, "scored_out": sums["scored_out"] + tail_scored}
    return sums | outside


def _length_sums(
    stop_logit: FloatArray,
    k: FloatArray,
    s: FloatArray,
    d_k: FloatArray,
    plan: ExactPlan,
    window: tuple[int, int] | None,
) -> dict[str, FloatArray]:
    """`_branch_sums`' sums over the stopped lengths k = 1..cap [R] each, without the truncation atom,
    in numpy: s = sigma(phi) [R, 1], D(k) d_k [cap] or [R, cap]."""
    cap = len(k)
    # Three [R, cap] arrays, reused from step to step: allocating them anew each time costs more
    # than the arithmetic (fresh pages).
    pmf, score, spare = plan.workspace(len(stop_logit), cap)
    pmf[...] = geometric_pmf(stop_logit, cap)
    scale = plan.scale
    np.subtract(1.0, np.multiply(k, s, out=score), out=score)  # 1 - k s
    # a stopped one-token response scores 1 - s, which rounds to 0 above x = 37: sigma(-x) there
    if (stop_logit > SCORE_EXACT_ABOVE).any():
        score[:, 0] = np.where(stop_logit > SCORE_EXACT_ABOVE, expit(-stop_logit), score[:, 0])
    if not (scale == 1.0).all():  # multiplying by a scale of 1 would change no bit
        np.multiply(scale[:, None], pmf, out=pmf)
    scored = np.divide(np.multiply(pmf, score, out=score), d_k, out=score)  # scale P(o) score(o) / D(o)
    weight = np.divide(pmf, d_k, out=pmf)  # scale P(o) / D(o)
    if window is None:
        return {"weight": weight.sum(-1), "scored": scored.sum(-1)}
    inside = (k >= window[0]) & (k <= window[1])
    outside = ~inside

    def masked_sum(values: FloatArray, mask: NDArray[np.bool_]) -> FloatArray:
        return np.multiply(values, mask, out=spare).sum(-1)

    return {
        "weight_in": masked_sum(weight, inside),
        "scored_in": masked_sum(scored, inside),
        "weight_out": masked_sum(weight, outside),
        "scored_out": masked_sum(scored, outside),
    }


def expected_update(theta: FloatArray, config: Config, variants: Sequence[Variant]) -> FloatArray:
    """E[g] [R, P + 2], the ascent direction (minus the expected loss gradient) of each run's variant."""
    return _expected_update(theta, config, ExactPlan.of(variants, config))


def _expected_update(theta: FloatArray, config: Config, plan: ExactPlan) -> FloatArray:
    psi, phi_right, phi_wrong = split(theta)
    p_right, p_wrong = kernels.expit_pair(psi)
    low, high = plan.reward.window(KIND["reward"].settings_of(config))
    right = _branch_sums(phi_right, config, plan, (low, high))
    wrong = _branch_sums(phi_wrong, config, plan, None)
    window = survival(low - 1, phi_right) * stop_within(high - low + 1, phi_right)
    success = p_right * window[..., None]
    abar_correct, abar_incorrect = np.empty(success.shape), np.empty(success.shape)
    for (advantage, selector), rows in plan.advantages.items():
        abar_correct[rows], abar_incorrect[rows] = _mean_advantage(
            success[rows],
            config.group_size,
            advantage,
            std_eps_of(advantage, KIND["advantage"].settings_of(config)),
            selector,
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


def simulate_mean_field(
    config: Config,
    runs: Sequence[tuple[Variant, int]],
    on_step: Callable[[int, FloatArray], None] | None = None,
) -> Trajectory:
    """The mean-field trajectories: Adam driven by the exact expected update E[g] instead of a
    sampled one, every run at once, without noise (the sampled-batch columns are NaN, the clip
    fraction 0; one update per step). Each run starts where its sampled twin does (the seed's
    initial prompt logits). `on_step(step, theta)` as in `toyrl.train.simulate`."""
    plan = ExactPlan.of([variant for variant, _ in runs], config)
    theta = np.stack([initial_theta(config, run_streams(seed)[0]) for _, seed in runs])
    adam = Adam(theta, config)
    recorder = Recorder(config, runs, sampled=False)
    with np.errstate(all="ignore"):  # a run that leaves finite numbers is stopped by check_finite
        for step in range(config.steps + 1):
            if on_step is not None:
                on_step(step, theta)
            recorder.policy(step, theta)
            grad = -_expected_update(theta, config, plan)
            recorder.record(step, grad)
            if step < config.steps:
                adam.step(theta, grad)
            check_finite(step, theta, grad, runs, config)
            recorder.done(step)
    return recorder.trajectory()
