"""A sampled step's loops compiled by numba: the same operations in the same order, the same bits.

A sampled step draws a batch (`toyrl.policy.sample_batch`), takes its gradient
(`toyrl.policy.policy_gradient`), PPO's clipped coefficients on later epochs
(`toyrl.stages.objective.PPOClip`) and Adam's update (`toyrl.train.Adam`), checks its numbers
(`toyrl.train.check_finite`) and, once a block of steps, their batch statistics
(`toyrl.train.batch_statistics`), each with a dozen small numpy calls whose per-call cost is most of
their time at toyrl's sizes. Here each is one loop (over runs x prompts x group members), in the
operations of the numpy code, element by element and in its order, compiled as
`toyrl.kernels_compiled` is (fastmath off: no fused multiply-add, no reassociation), so every
result is the same double. Sums are numpy's own: `x.sum(axis=-1)` and `x.sum(axis=(1, 2))` of a
contiguous [R, B, G] array add each run's (or group's) elements as 0.0 + numpy's pairwise sum of
them (`_sum`; numpy/_core/src/umath/loops_utils.h.src); sums of whole numbers are exact in any order.
tests/test_policy_compiled.py compares the bits with the numpy code on many shapes and values. The
callers use these when the compiled path is on (`toyrl.kernels.compiled_module`); never imported by
``import toyrl``.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from toyrl.kernels_compiled import OPTIONS, PAIRWISE_BLOCK, STACK, _block_sum, row_sum

jit = numba.njit(**OPTIONS)


@jit
def _sum(values: Any, n: int) -> float:
    """numpy's add.reduce of values[:n] along a contiguous axis (`toyrl.kernels_compiled.row_sum`): its
    identity 0.0 plus the pairwise sum; the split's workspace is made only for rows that split."""
    if n <= PAIRWISE_BLOCK:
        return 0.0 + _block_sum(values, 0, n)
    return row_sum(values[:n], np.empty((STACK, 3), np.int64), np.empty(STACK))


@jit
def sample(
    prompt_probability: Any,
    rate: Any,
    approach_uniform: Any,
    length_exponential: Any,
    cap: int,
    right: Any,
    length: Any,
    stopped: Any,
) -> None:
    """`toyrl.policy.sample_batch`'s draws into right, length and stopped [R, B, G]: right iff
    u < sigma(psi_j) (prompt_probability [R, B]); K = fmin(floor(E / rate) + 1, cap + 1) with the
    branch's rate (rate [R, 2]: right, wrong), a nan quotient (0 / 0) giving cap + 1 as fmin does;
    L = min(K, cap) and stopped iff K <= cap."""
    runs, prompts, group = approach_uniform.shape
    top = float(cap + 1)
    for r in range(runs):
        for b in range(prompts):
            p = prompt_probability[r, b]
            for g in range(group):
                is_right = approach_uniform[r, b, g] < p
                k = np.floor(length_exponential[r, b, g] / (rate[r, 0] if is_right else rate[r, 1])) + 1.0
                if not k < top:  # fmin: the bound for a nan too
                    k = top
                right[r, b, g] = is_right
                length[r, b, g] = np.int64(k) if k < cap else cap
                stopped[r, b, g] = k <= cap


@jit
def _gradient(terms: Any, count: int, n: Any, r: int) -> float:
    """A logit's gradient from its terms[:count]: their sum as numpy sums them, negated, divided by
    run r's n (an empty n: not divided), as `toyrl.policy.policy_gradient` takes it."""
    total = -_sum(terms, count)
    return total / n[r] if n.size else total


@jit
def on_policy_gradient(
    weight: Any,
    n: Any,
    right: Any,
    length: Any,
    stopped: Any,
    prompt_index: Any,
    probability: Any,
    positive_score: Any,
    extreme: bool,
    grad: Any,
) -> None:
    """`toyrl.policy.policy_gradient` with Coefficients(approach=weight, n=n), every token of a
    response at its weight [R, B, G], into grad [R, C] (zeros; C the table's logits): per response
    w (1[right] - sigma(psi_j)) on psi_j and w (1[stopped] - L s) on its branch's phi, with
    `TokenTable.approach_score`'s and `ramble_score`'s extreme cases; each summed as numpy sums
    them, negated, divided by n [R] (an empty n: none)."""
    runs, prompts, group = right.shape
    columns = grad.shape[1]
    approach = np.empty(group)
    on_right = np.empty(prompts * group)
    on_wrong = np.empty(prompts * group)
    for r in range(runs):
        stop_right, stop_wrong = probability[r, columns - 2], probability[r, columns - 1]
        for b in range(prompts):
            j = prompt_index[r, b]
            p = probability[r, j]
            for g in range(group):
                is_right = right[r, b, g]
                w = weight[r, b, g]
                score = (1.0 if is_right else 0.0) - p
                if extreme and is_right:
                    score = positive_score[r, j]
                approach[g] = w * score
                ended = stopped[r, b, g]
                s = stop_right if is_right else stop_wrong
                ramble = (1.0 if ended else 0.0) - float(length[r, b, g]) * s
                if extreme and ended and length[r, b, g] == 1:
                    ramble = positive_score[r, columns - 2] if is_right else positive_score[r, columns - 1]
                at = b * group + g
                on_right[at] = w * ramble if is_right else 0.0
                on_wrong[at] = 0.0 if is_right else w * ramble
            grad[r, j] = _gradient(approach, group, n, r)
        grad[r, columns - 2] = _gradient(on_right, prompts * group, n, r)
        grad[r, columns - 1] = _gradient(on_wrong, prompts * group, n, r)


@jit
def token_gradient(
    approach_weight: Any,
    non_stop_weight: Any,
    stop_weight: Any,
    n: Any,
    right: Any,
    prompt_index: Any,
    probability: Any,
    positive_score: Any,
    grad: Any,
) -> None:
    """`toyrl.policy.policy_gradient` with coefficients of each token kind (approach, non-stop sum,
    stop [R, B, G]) into grad [R, C] (zeros): the approach token's c (1 - sigma(psi_j)) if right,
    c (-sigma(psi_j)) if not (`TokenTable.token_scores`, positive_score its 1 - sigma), the ramble's
    c_non_stop (-s) + c_stop (1 - s) on its branch; summed as numpy sums them, negated, over n."""
    runs, prompts, group = right.shape
    columns = grad.shape[1]
    approach = np.empty(group)
    on_right = np.empty(prompts * group)
    on_wrong = np.empty(prompts * group)
    for r in range(runs):
        for b in range(prompts):
            j = prompt_index[r, b]
            for g in range(group):
                is_right = right[r, b, g]
                score = positive_score[r, j] if is_right else -probability[r, j]
                approach[g] = approach_weight[r, b, g] * score
                branch = columns - 2 if is_right else columns - 1
                ramble = (
                    non_stop_weight[r, b, g] * -probability[r, branch]
                    + stop_weight[r, b, g] * (positive_score[r, branch])
                )
                at = b * group + g
                on_right[at] = ramble if is_right else 0.0
                on_wrong[at] = 0.0 if is_right else ramble
            grad[r, j] = _gradient(approach, group, n, r)
        grad[r, columns - 2] = _gradient(on_right, prompts * group, n, r)
        grad[r, columns - 1] = _gradient(on_wrong, prompts * group, n, r)


@jit
def ppo_clip(
    advantage: Any,
    ratio_positive: Any,
    ratio_negative: Any,
    kl_positive: Any,
    kl_negative: Any,
    beta: float,
    with_kl: bool,
    right: Any,
    prompt_index: Any,
    scale: Any,
    counts: Any,
    included: Any,
    high: float,
    low: float,
    dual: float,
    coefficient: Any,
    clipped_tokens: Any,
) -> None:
    """`toyrl.stages.objective.PPOClip.coefficients` (one advantage a response) into coefficient
    [3, R, B, G] and clipped_tokens [R] (zeros): each token kind's ratio rho gathered from its
    logit's outcome (`TokenTable.at_tokens`); clipped iff rho > 1 + epsilon_high (`high`) for
    A > 0, rho > c (`dual`) or rho < 1 - epsilon (`low`) for A < 0; (scale (u A rho + beta kl))
    counts; the clipped tokens of the included responses counted (whole numbers: exact in any order)."""
    runs, prompts, group = advantage.shape
    columns = ratio_positive.shape[1]
    for r in range(runs):
        for b in range(prompts):
            j = prompt_index[r, b]
            for g in range(group):
                a = advantage[r, b, g]
                is_right = right[r, b, g]
                above = high if a > 0 else (dual if a < 0 else np.inf)
                below = low if a < 0 else -np.inf
                branch = columns - 2 if is_right else columns - 1
                for kind in range(3):
                    if kind == 0:  # the approach token: its prompt's positive outcome if right
                        column, positive = j, is_right
                    else:  # a non-stop token (negative outcome), the stop token (positive)
                        column, positive = branch, kind == 2
                    rho = ratio_positive[r, column] if positive else ratio_negative[r, column]
                    clipped = rho > above or rho < below
                    objective = 0.0 if clipped else a * rho
                    if with_kl:
                        kl = kl_positive[r, column] if positive else kl_negative[r, column]
                        objective = objective + beta * kl
                    count = counts[kind, r, b, g]
                    coefficient[kind, r, b, g] = (scale[r, b, g] * objective) * count
                    if clipped and included[r, b, g]:
                        clipped_tokens[r] += count


@jit
def adam(
    theta: Any,
    moment1: Any,
    moment2: Any,
    grad: Any,
    beta1: float,
    beta2: float,
    lr: float,
    correction1: float,
    correction2: float,
    eps: float,
) -> None:
    """`toyrl.train.Adam.step` in place on theta, moment1 and moment2 [R, P + 2]: m1 = m1 beta1 +
    (1 - beta1) g, m2 = m2 beta2 + (1 - beta2) g g, theta -= lr (m1 / c1) / (sqrt(m2 / c2) + eps)."""
    keep1, keep2 = 1 - beta1, 1 - beta2
    runs, width = theta.shape
    for r in range(runs):
        for i in range(width):
            g = grad[r, i]
            m1 = moment1[r, i] * beta1 + keep1 * g
            m2 = moment2[r, i] * beta2 + keep2 * (g * g)
            moment1[r, i], moment2[r, i] = m1, m2
            theta[r, i] -= lr * (m1 / correction1) / (np.sqrt(m2 / correction2) + eps)


@jit
def batch_statistics(length: Any, rewards: Any, grad: Any, out: Any) -> None:
    """`toyrl.train.batch_statistics` of length, rewards [N, B, G] and grad [N, C] into out [6, N]
    (its keys in order: batch_accuracy, batch_length_mean, batch_length_correct,
    batch_length_incorrect, zero_variance_fraction, grad_norm). Lengths are whole numbers and
    rewards 0 or 1, so their sums are exact in any order; the gradient's squares are summed as
    numpy sums them."""
    rows, prompts, group = length.shape
    responses = prompts * group
    squares = np.empty(grad.shape[1])
    for i in range(rows):
        n_correct = length_sum = correct_length_sum = uniform = 0.0
        for b in range(prompts):
            group_correct = 0.0
            for g in range(group):
                reward = rewards[i, b, g]
                group_correct += reward
                length_sum += length[i, b, g]
                correct_length_sum += length[i, b, g] * reward
            n_correct += group_correct
            if group_correct == 0 or group_correct == group:
                uniform += 1.0
        n_incorrect = responses - n_correct
        out[0, i] = n_correct / responses
        out[1, i] = length_sum / responses
        out[2, i] = correct_length_sum / n_correct if n_correct > 0 else np.nan
        out[3, i] = (length_sum - correct_length_sum) / n_incorrect if n_incorrect > 0 else np.nan
        out[4, i] = uniform / prompts
        for c in range(grad.shape[1]):
            squares[c] = grad[i, c] * grad[i, c]
        out[5, i] = np.sqrt(_sum(squares, grad.shape[1]))


@jit
def finite(theta: Any, grad: Any) -> bool:
    """Whether every theta and every grad * grad [R, C] is finite (`toyrl.train.check_finite`'s test)."""
    for r in range(theta.shape[0]):
        for i in range(theta.shape[1]):
            square = grad[r, i] * grad[r, i]
            if not (np.isfinite(theta[r, i]) and np.isfinite(square)):
                return False
    return True
