"""The ramble policy: closed-form length distribution, exact metrics, sampling and score functions.

Article, "Toy run: a policy that can choose how long to ramble". A response to prompt j is

1. one *approach token*: the right approach with probability sigma(psi_j), a wrong one otherwise;
2. a *ramble*: tokens until the stop token, which has probability s = sigma(phi_right) on the right
   approach and sigma(phi_wrong) on a wrong one (both shared by all prompts). The ramble length K,
   stop token included, is geometric on {1, 2, ...}: P(K = k) = s (1 - s)^(k - 1).

The response keeps L = min(K, cap) ramble tokens; it *stopped* iff K <= cap, otherwise it was
truncated. It is correct (reward 1) iff right approach, stopped and L >= min_length.

Lengths reported everywhere are ramble tokens L: with s = 1/300 and 1/700 and cap 1,500 their
expectations are the article's 298.0 and 618.0. A response has L + 1 tokens in all (the approach
token too); that count is the |o_i| of GRPO's per-response mean (see `toyrl.objective`).

Parameters of a run are one vector theta = (psi_1 .. psi_P, phi_right, phi_wrong); functions take a
leading runs axis, theta of shape [R, P + 2], so that many runs advance together.
All geometric quantities are computed from log(1 - s) = -softplus(phi), which keeps them accurate
when s is far below machine epsilon.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit, log_expit

FloatArray = NDArray[np.float64]


def split(theta: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(psi [..., P], phi_right [...], phi_wrong [...]) as views of theta [..., P + 2]."""
    return theta[..., :-2], theta[..., -2], theta[..., -1]


def prompt_logits(psi: FloatArray, prompt_index: NDArray[np.intp]) -> FloatArray:
    """psi_j of each run's chosen prompts [R, B] (plain fancy indexing: cheaper than take_along_axis)."""
    return psi[np.arange(psi.shape[0])[:, None], prompt_index]


def log_continue(stop_logit: FloatArray) -> FloatArray:
    """log(1 - sigma(phi)) = -softplus(phi): log-probability that a ramble token is not the stop."""
    return -np.logaddexp(0.0, stop_logit)


def survival(n: FloatArray | int, stop_logit: FloatArray) -> FloatArray:
    """P(K > n) = (1 - s)^n."""
    return np.exp(n * log_continue(stop_logit))


def stop_within(n: FloatArray | int, stop_logit: FloatArray) -> FloatArray:
    """P(K <= n) = 1 - (1 - s)^n, without cancellation for small s."""
    return -np.expm1(n * log_continue(stop_logit))


def expected_length(stop_logit: FloatArray, cap: int) -> FloatArray:
    """E[min(K, cap)] = (1 - (1 - s)^cap) / s: sum over k < cap of P(K > k)."""
    return stop_within(cap, stop_logit) / stop_within(1, stop_logit)


def truncated_mean(n: FloatArray | int, stop_logit: FloatArray) -> FloatArray:
    """E[K | K <= n] for n >= 1: 1/s - n / ((1 - s)^-n - 1).

    The two terms cancel when x = n softplus(phi) is small (K then nearly uniform on 1..n); there
    the expansion (n + 1)/2 - (n^2 - 1) y / 12 + (n^4 - 1) y^3 / 720, y = softplus(phi), is used,
    whose truncation error is O(n x^5) and below 1e-14 relative for x < 1e-2.
    """
    y = np.logaddexp(0.0, stop_logit)
    n = np.asarray(n, dtype=np.float64)
    x = n * y
    small = x < 1e-2
    with np.errstate(over="ignore"):  # expm1(x) = inf for huge x gives the right limit, 0
        direct = 1.0 / -np.expm1(-np.where(small, 1.0, y)) - n / np.expm1(np.where(small, 1.0, x))
    series = (n + 1) / 2 - (n**2 - 1) * y / 12 + (n**4 - 1) * y**3 / 720
    return np.where(small, series, direct)


def exact_metrics(theta: FloatArray, cap: int, min_length: int) -> dict[str, FloatArray]:
    """Exact expectations under the policy, prompts weighted uniformly; each value has shape [R].

    accuracy = mean_j sigma(psi_j) P_right(m <= K <= cap), m = min_length;
    length_mean = E[L]; length_correct = E[L | correct] = m - 1 + E[J | J <= cap - m + 1] by
    memorylessness (J = K - m + 1); length_right_approach and length_wrong_approach are
    E[L | approach] = E[min(K, cap)] on each branch; length_incorrect = E[L 1(incorrect)] /
    P(incorrect), where an incorrect response is a wrong approach, or a right one that stopped before
    m or was truncated.
    """
    psi, phi_right, phi_wrong = split(theta)
    p_right = expit(psi).mean(axis=-1)
    p_wrong = expit(-psi).mean(axis=-1)
    window = cap - min_length + 1
    stop_in_window = survival(min_length - 1, phi_right) * stop_within(window, phi_right)
    short = stop_within(min_length - 1, phi_right)
    truncated = survival(cap, phi_right)
    length_right = expected_length(phi_right, cap)
    length_wrong = expected_length(phi_wrong, cap)
    # E[K 1(K < m)] on the right approach; zero when min_length is 1 (no response is too short).
    short_length = np.where(min_length > 1, short * truncated_mean(max(min_length - 1, 1), phi_right), 0.0)
    p_incorrect = p_wrong + p_right * (short + truncated)
    length_incorrect = (p_wrong * length_wrong + p_right * (short_length + cap * truncated)) / p_incorrect
    return {
        "accuracy": p_right * stop_in_window,
        "length_mean": p_right * length_right + p_wrong * length_wrong,
        "length_correct": min_length - 1 + truncated_mean(window, phi_right),
        "length_incorrect": length_incorrect,
        "length_right_approach": length_right,
        "length_wrong_approach": length_wrong,
        "p_right_approach": p_right,
        "stop_prob_right": expit(phi_right),
        "stop_prob_wrong": expit(phi_wrong),
    }


@dataclass(frozen=True)
class Batch:
    """A sampled batch; every array has shape [R, B, G] (runs, prompts, group members)."""

    right: NDArray[np.bool_]
    length: NDArray[np.int64]
    stopped: NDArray[np.bool_]

    def rewards(self, min_length: int) -> FloatArray:
        """Verifiable reward: 1 iff right approach, stopped and at least min_length tokens."""
        return (self.right & self.stopped & (self.length >= min_length)).astype(np.float64)


def sample_batch(
    theta: FloatArray,
    prompt_index: NDArray[np.intp],
    approach_uniform: FloatArray,
    length_exponential: FloatArray,
    cap: int,
) -> Batch:
    """Sample G responses to each of the B chosen prompts of every run, by inversion.

    prompt_index [R, B]; approach_uniform ~ U(0, 1) and length_exponential ~ Exp(1), [R, B, G].
    The approach is right iff u < sigma(psi_j). K = floor(E / softplus(phi)) + 1 has
    P(K > k) = exp(-k softplus(phi)) = (1 - s)^k, the geometric law; it is clipped at cap + 1 as a
    float before any integer conversion, so tiny stop probabilities cannot overflow.
    """
    psi, phi_right, phi_wrong = split(theta)
    psi_batch = prompt_logits(psi, prompt_index)
    right = approach_uniform < expit(psi_batch)[..., None]
    # softplus per run and branch, then selected: no transcendental per response.
    rate = np.where(
        right, np.logaddexp(0.0, phi_right)[:, None, None], np.logaddexp(0.0, phi_wrong)[:, None, None]
    )
    rambled = np.minimum(np.floor(length_exponential / rate) + 1, cap + 1)
    return Batch(right=right, length=np.minimum(rambled, cap).astype(np.int64), stopped=rambled <= cap)


def response_scores(
    theta: FloatArray, prompt_index: NDArray[np.intp], batch: Batch
) -> tuple[FloatArray, FloatArray]:
    """Per-response sums of the exact per-token score functions, each [R, B, G].

    approach token: d/dpsi_j log pi = 1[right] - sigma(psi_j);
    ramble tokens, on the branch's own phi: each non-stop token -sigma(phi), the stop token
    1 - sigma(phi); summed over the L tokens of a response: 1[stopped] - L sigma(phi).
    Returns (score_approach, score_stop); score_stop belongs to phi_right where batch.right, else
    to phi_wrong.
    """
    psi, phi_right, phi_wrong = split(theta)
    psi_batch = prompt_logits(psi, prompt_index)
    stop_prob = np.where(batch.right, expit(phi_right)[:, None, None], expit(phi_wrong)[:, None, None])
    score_approach = batch.right - expit(psi_batch)[..., None]
    score_stop = batch.stopped - batch.length * stop_prob
    return score_approach, score_stop


def log_likelihood(theta: FloatArray, prompt_index: NDArray[np.intp], batch: Batch) -> FloatArray:
    """log pi(response) [R, B, G]: approach token, L - 1[stopped] non-stop tokens, the stop token."""
    psi, phi_right, phi_wrong = split(theta)
    psi_batch = prompt_logits(psi, prompt_index)[..., None]
    stop_logit = np.where(batch.right, phi_right[:, None, None], phi_wrong[:, None, None])
    approach = np.where(batch.right, log_expit(psi_batch), log_expit(-psi_batch))
    return (
        approach
        + (batch.length - batch.stopped) * log_expit(-stop_logit)
        + batch.stopped * log_expit(stop_logit)
    )
