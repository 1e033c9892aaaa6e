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
when s is far below machine epsilon; and every closed form holds its limit at any finite logit
(probabilities in [0, 1], lengths in [1, cap], never NaN or inf), where softplus(phi) underflows
(phi below about -745: s = 0 in float64) or n softplus(phi) overflows.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from toyrl import kernels

FloatArray = NDArray[np.float64]
IndexArray = NDArray[np.intp]

TINY = np.finfo(np.float64).tiny  # smallest normal float: a softplus below it is subnormal or 0
# Below this p_incorrect, E[L | incorrect] is taken from log-space weights (`_length_incorrect_tail`);
# at or above it, a weight that underflowed moves the direct ratio by less than cap TINY / 1e-200.
P_INCORRECT_DIRECT = 1e-200
# Above this logit x, a token score 1 - sigma(x) is taken as sigma(-x) (see TokenTable).
SCORE_EXACT_ABOVE = 12.0
# The per-step loops' compiled twins (`sample_batch`, `policy_gradient`), used when the compiled path is
# on (`toyrl.kernels.compiled_module`): the same bits.
COMPILED = "toyrl.policy_compiled"
_NO_N = np.empty(0)  # Coefficients.n None, for the compiled loops


expit = kernels.expit  # sigma(x) = 1 / (1 + e^-x)
log_expit = kernels.log_expit  # log sigma(x) = -softplus(-x)


def logit(p: FloatArray) -> FloatArray:
    """log(p / (1 - p)), the inverse of `expit` (for p in (0, 1))."""
    p = np.asarray(p, dtype=np.float64)
    return kernels.log(p / (1 - p))


def split(theta: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(psi [..., P], phi_right [...], phi_wrong [...]) as views of theta [..., P + 2]."""
    return theta[..., :-2], theta[..., -2], theta[..., -1]


def prompt_logits(psi: FloatArray, prompt_index: NDArray[np.intp]) -> FloatArray:
    """psi_j of each run's chosen prompts [R, B] (plain fancy indexing: cheaper than take_along_axis)."""
    return psi[np.arange(psi.shape[0])[:, None], prompt_index]


def log_continue(stop_logit: FloatArray) -> FloatArray:
    """log(1 - sigma(phi)) = -softplus(phi): log-probability that a ramble token is not the stop."""
    return -kernels.softplus(stop_logit)


def survival(n: FloatArray | int, stop_logit: FloatArray) -> FloatArray:
    """P(K > n) = (1 - s)^n."""
    with np.errstate(over="ignore"):  # n softplus(phi) = inf: the right limit, 0
        return kernels.exp(n * log_continue(stop_logit))


def stop_within(n: FloatArray | int, stop_logit: FloatArray) -> FloatArray:
    """P(K <= n) = 1 - (1 - s)^n, without cancellation for small s."""
    with np.errstate(over="ignore"):  # n softplus(phi) = inf: the right limit, 1
        return -kernels.expm1(n * log_continue(stop_logit))


def log_stop_within(n: FloatArray | int, stop_logit: FloatArray) -> FloatArray:
    """log P(K <= n) for n >= 1, finite where P(K <= n) itself underflows (phi -> -inf).

    With y = softplus(phi) and x = n y: log(1 - e^-x), except for x < e^-40, where it is log x to
    double precision (the next term is -x/2), and log y = phi for phi < -40 (the next term is
    -e^phi/2): so neither a subnormal nor a zero y is ever taken the log of.
    """
    deep = stop_logit < -40
    log_y = np.where(deep, stop_logit, kernels.log(np.where(deep, 1.0, kernels.softplus(stop_logit))))
    log_x = kernels.log(np.asarray(n, dtype=np.float64)) + log_y
    direct = kernels.log(stop_within(n, stop_logit))  # log(0) = -inf where x < e^-40, not selected
    return np.where(log_x < -40, log_x, direct)


def expected_length(stop_logit: FloatArray, cap: int) -> FloatArray:
    """E[min(K, cap)] = (1 - (1 - s)^cap) / s: sum over k < cap of P(K > k); in [1, cap].

    Where softplus(phi) < TINY (phi below about -708, up to a subnormal or zero s) the ratio would
    be 0/0 or lose digits; its limit cap is returned, exact to double precision there (the next
    term is cap (cap - 1) s / 2). Rounding never takes the value outside [1, cap].
    """
    tiny = kernels.softplus(stop_logit) < TINY
    ratio = stop_within(cap, stop_logit) / np.where(tiny, 1.0, stop_within(1, stop_logit))
    return np.clip(np.where(tiny, float(cap), ratio), 1.0, float(cap))


def truncated_mean(n: FloatArray | int, stop_logit: FloatArray) -> FloatArray:
    """E[K | K <= n] for n >= 1: 1/s - n / ((1 - s)^-n - 1), in [1, (n + 1)/2].

    The two terms cancel when x = n softplus(phi) is small (K then nearly uniform on 1..n); there
    the expansion (n + 1)/2 - (n^2 - 1) y / 12 + (n^4 - 1) y^3 / 720, y = softplus(phi), is used,
    whose truncation error is O(n x^5) and below 1e-14 relative for x < 1e-2. Its limits are
    (n + 1)/2 as phi -> -inf (y = 0 included) and 1 as phi -> +inf; the value is clipped to
    [1, (n + 1)/2] against rounding (n = 1 gives exactly 1).
    """
    y = kernels.softplus(stop_logit)
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(over="ignore"):  # x = inf for huge y: expm1(x) = inf gives the right limit, 0
        x = n * y
        small = x < 1e-2
        direct = 1.0 / -kernels.expm1(-np.where(small, 1.0, y)) - n / kernels.expm1(np.where(small, 1.0, x))
    y_small = np.where(small, y, 0.0)  # no overflow in y^3 where the series is not used
    n_squared = n * n  # products, not powers: the C library's pow rounds as each platform's does
    series = (
        (n + 1) / 2
        - (n_squared - 1) * y_small / 12
        + (n_squared * n_squared - 1) * (y_small * y_small * y_small) / 720
    )
    return np.clip(np.where(small, series, direct), 1.0, (n + 1) / 2)


def _log_mean_expit(logits: FloatArray) -> FloatArray:
    """log(mean_j sigma(logit_j)) over the last axis, finite for every finite logit: the largest
    log sigma plus the log of the mean of the others' exp relative to it."""
    logs = log_expit(logits)
    top = logs.max(axis=-1)
    return top + kernels.log(kernels.exp(logs - top[..., None]).mean(axis=-1))


def _length_incorrect_tail(
    psi: FloatArray,
    phi_right: FloatArray,
    cap: int,
    min_length: int,
    length_wrong: FloatArray,
    short_mean: FloatArray,
) -> FloatArray:
    """E[L | incorrect] from log-space weights, for when P(incorrect) underflows.

    The incorrect responses are a mixture of three parts, with log weights: wrong approach,
    log mean_j sigma(-psi_j), length E[L | wrong]; right approach stopped before m,
    log mean_j sigma(psi_j) + log P(K < m), length E[K | K < m] (no such part when m = 1); right
    approach truncated, log mean_j sigma(psi_j) - cap softplus(phi_right), length cap. The first
    log weight is finite for every finite psi, so the normalised mixture always is.
    """
    log_wrong = _log_mean_expit(-psi)
    log_right = _log_mean_expit(psi)
    y = kernels.softplus(phi_right)
    with np.errstate(over="ignore"):  # cap y = inf: the truncation weight is 0
        log_truncated = log_right - cap * y
    if min_length > 1:
        log_short = log_right + log_stop_within(min_length - 1, phi_right)
    else:
        log_short = np.full_like(log_right, -np.inf)
    top = np.maximum(log_wrong, np.maximum(log_short, log_truncated))
    w_wrong, w_short, w_truncated = (kernels.exp(v - top) for v in (log_wrong, log_short, log_truncated))
    total = w_wrong + w_short + w_truncated
    return (w_wrong * length_wrong + w_short * short_mean + w_truncated * cap) / total


def exact_metrics(
    theta: FloatArray, cap: int, min_length: int, sigma: tuple[FloatArray, FloatArray] | None = None
) -> dict[str, FloatArray]:
    """Exact expectations under the policy, prompts weighted uniformly; each value has shape [R]
    (theta [R, P + 2]; or [..., R] for theta [..., R, P + 2]). `sigma`, if given, is (sigma(theta),
    sigma(-theta)), a token table's (the same bits as taking them here).

    accuracy = mean_j sigma(psi_j) P_right(m <= K <= cap), m = min_length;
    length_mean = E[L]; length_correct = E[L | correct] = m - 1 + E[J | J <= cap - m + 1] by
    memorylessness (J = K - m + 1); length_right_approach and length_wrong_approach are
    E[L | approach] = E[min(K, cap)] on each branch; length_incorrect = E[L 1(incorrect)] /
    P(incorrect), where an incorrect response is a wrong approach, or a right one that stopped before
    m or was truncated.

    At every finite theta the values are finite, probabilities in [0, 1], lengths in [1, cap] and
    length_correct in [m, cap]. Every condition has positive probability at a finite theta, so no
    conditional expectation is undefined, even where its probability underflows to 0 in float64:
    length_correct depends on phi_right alone (not on P(correct)) and goes to (m + cap)/2 as
    phi_right -> -inf (the right approach rarely stops in the window, but uniformly when it does)
    and to m as phi_right -> +inf; where P(incorrect) < 1e-200 (psi_j all above about 460 and the
    right approach almost never short or truncated), length_incorrect is computed from log-space
    weights of its three parts (`_length_incorrect_tail`), so it stays the exact mixture of
    E[L | wrong], E[K | K < m] and cap that it is at that theta.
    """
    psi, phi_right, phi_wrong = split(theta)
    positive, negative = kernels.expit_pair(theta) if sigma is None else sigma
    p_right = positive[..., :-2].mean(axis=-1)
    p_wrong = negative[..., :-2].mean(axis=-1)
    window = cap - min_length + 1
    stop_in_window = survival(min_length - 1, phi_right) * stop_within(window, phi_right)
    short = stop_within(min_length - 1, phi_right)
    truncated = survival(cap, phi_right)
    length_right = expected_length(phi_right, cap)
    length_wrong = expected_length(phi_wrong, cap)
    # E[K | K < m] and E[K 1(K < m)] on the right approach; zero when min_length is 1 (no response is
    # too short).
    short_mean = truncated_mean(max(min_length - 1, 1), phi_right)
    short_length = np.where(min_length > 1, short * short_mean, 0.0)
    p_incorrect = p_wrong + p_right * (short + truncated)
    direct = p_incorrect >= P_INCORRECT_DIRECT
    with np.errstate(divide="ignore", invalid="ignore"):  # p_incorrect = 0: not selected
        length_incorrect = (p_wrong * length_wrong + p_right * (short_length + cap * truncated)) / p_incorrect
    if not direct.all():  # rare: only those runs go through log space
        tail = ~direct
        length_incorrect = np.asarray(length_incorrect)  # writable also for a theta without runs axis
        length_incorrect[tail] = _length_incorrect_tail(
            psi[tail], phi_right[tail], cap, min_length, length_wrong[tail], short_mean[tail]
        )
    return {
        "accuracy": p_right * stop_in_window,
        "length_mean": np.clip(p_right * length_right + p_wrong * length_wrong, 1.0, float(cap)),
        "length_correct": np.clip(min_length - 1 + truncated_mean(window, phi_right), min_length, cap),
        "length_incorrect": np.clip(length_incorrect, 1.0, float(cap)),
        "length_right_approach": length_right,
        "length_wrong_approach": length_wrong,
        "p_right_approach": p_right,
        "stop_prob_right": positive[..., -2],
        "stop_prob_wrong": positive[..., -1],
    }


def token_count(length: NDArray[np.int64] | FloatArray, approach_tokens: int = 1) -> FloatArray:
    """Tokens of a response of L ramble tokens: L and `approach_tokens` more (1: the approach token,
    so every generated token; 0: ramble tokens only). The |o_i| of GRPO's per-response mean and of
    token means, by `Config.approach_tokens` (see `toyrl.config`)."""
    return np.asarray(length + approach_tokens, dtype=np.float64)


@dataclass(frozen=True)
class Batch:
    """A sampled batch: the prompts chosen [R, B] and, for every response, [R, B, G] (runs, prompts,
    group members), its approach, its ramble length L and whether it stopped."""

    prompt_index: IndexArray
    right: NDArray[np.bool_]
    length: NDArray[np.int64]
    stopped: NDArray[np.bool_]

    def token_count(self, approach_tokens: int = 1) -> FloatArray:
        """Tokens of each response [R, B, G] (`token_count`)."""
        return token_count(self.length, approach_tokens)

    def rows(self, rows: IndexArray | slice) -> Batch:
        """The batch of some runs only (a view for a slice)."""
        return Batch(self.prompt_index[rows], self.right[rows], self.length[rows], self.stopped[rows])

    def token_index(self, width: int) -> IndexArray:
        """Where each response's three kinds of token [3, R, B, G] (approach, non-stop, stop) are in
        per-run tables of both outcomes of `width` logits, [R, 2 width] (positive outcomes, then
        negative) flattened: for `TokenTable.at_tokens`. Kept for the batch's next call."""
        kept = self.__dict__.get("_token_index")
        if kept is not None and kept[0] == width:
            return kept[1]
        base = (np.arange(len(self.right)) * 2 * width)[:, None, None]
        branch = base + np.where(self.right, width - 2, width - 1)
        index = np.empty((3, *self.right.shape), dtype=np.intp)
        index[0] = base + self.prompt_index[..., None] + np.where(self.right, 0, width)
        index[1] = branch + width  # a non-stop token is its phi's negative outcome
        index[2] = branch  # the stop token its positive one
        self.__dict__["_token_index"] = (width, index)  # a cache, not a field: the batch stays frozen
        return index


@dataclass(frozen=True)
class OwnLogits:
    """A batch on its own logits: the columns [R, B + 2] of theta [R, P + 2] that its tokens are on
    (its B prompts' psi_j, then phi_right and phi_wrong), and the batch with `prompt_index`
    pointing into those columns. A `TokenTable` of theta at the columns gives the batch the same
    values as one of all P + 2 logits (the same bits: all elementwise) at (B + 2) / (P + 2) of the
    cost; `scatter` puts a gradient on the columns back at its logits."""

    columns: IndexArray
    batch: Batch

    @classmethod
    def of(cls, batch: Batch, width: int) -> OwnLogits:
        runs, prompts = batch.prompt_index.shape
        columns = np.empty((runs, prompts + 2), dtype=np.intp)
        columns[:, :prompts], columns[:, prompts:] = batch.prompt_index, [width - 2, width - 1]
        own = np.broadcast_to(np.arange(prompts), (runs, prompts))
        return cls(columns, Batch(own, batch.right, batch.length, batch.stopped))

    def rows(self, rows: IndexArray | slice) -> OwnLogits:
        """Some runs only; every run (a slice) is this one, whose batch keeps its token index."""
        return self if isinstance(rows, slice) else OwnLogits(self.columns[rows], self.batch.rows(rows))

    def table(self, theta: FloatArray) -> TokenTable:
        """The token table of theta [R, P + 2] (these runs') at the columns."""
        return TokenTable.of(theta[np.arange(len(theta))[:, None], self.columns])

    def scatter(self, grad: FloatArray, width: int) -> FloatArray:
        """A gradient on the columns [R, B + 2] as one on all `width` logits [R, width]."""
        out = np.zeros((len(grad), width))
        out[np.arange(len(grad))[:, None], self.columns] = grad
        return out


def sample_batch(
    theta: FloatArray,
    prompt_index: IndexArray,
    approach_uniform: FloatArray,
    length_exponential: FloatArray,
    cap: int,
    table: TokenTable | None = None,
) -> Batch:
    """Sample G responses to each of the B chosen prompts of every run, by inversion.

    prompt_index [R, B]; approach_uniform ~ U(0, 1) and length_exponential ~ Exp(1), [R, B, G];
    `table`, if given, is theta's `TokenTable` with its rates, whose sigma and softplus are then
    not taken again. The approach is right iff u < sigma(psi_j). K = floor(E / softplus(phi)) + 1 has
    P(K > k) = exp(-k softplus(phi)) = (1 - s)^k, the geometric law; it is clipped at cap + 1 as a
    float before any integer conversion, so tiny stop probabilities cannot overflow.
    """
    psi, _, _ = split(theta)
    if table is None or table.rate is None:
        probability = expit(prompt_logits(psi, prompt_index))
        rate = kernels.softplus(theta[:, -2:])  # per run and branch: no transcendental per response
    else:
        probability = prompt_logits(table.probability[:, :-2], prompt_index)
        rate = table.rate
    compiled = kernels.compiled_module(COMPILED)
    if compiled is not None:  # the same operations, one loop (`toyrl.policy_compiled.sample`)
        right, stopped = np.empty(approach_uniform.shape, bool), np.empty(approach_uniform.shape, bool)
        length = np.empty(approach_uniform.shape, np.int64)
        compiled.sample(probability, rate, approach_uniform, length_exponential, cap, right, length, stopped)
        return Batch(prompt_index, right, length, stopped)
    right = approach_uniform < probability[..., None]
    rate = np.where(right, rate[:, 0, None, None], rate[:, 1, None, None])
    # rate = 0 (phi below about -745) never stops: E / 0 = inf, and 0 / 0 = NaN, which fmin drops.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rambled = np.fmin(np.floor(length_exponential / rate) + 1, cap + 1)
    return Batch(prompt_index, right, np.minimum(rambled, cap).astype(np.int64), rambled <= cap)


@dataclass(frozen=True, eq=False)
class TokenTable:
    """Every token's log-probability and score, one per run and logit: arrays [R, P + 2].

    A response has at most three kinds of token, each the outcome of one logit x of theta: the
    approach token is the *positive* outcome of psi_j when right, the *negative* one when wrong; a
    ramble token is on its branch's phi, positive for the stop token, negative for the others. A
    token's log-probability is log sigma(x) (positive) or log sigma(-x) (negative); its score
    d log pi / dx is 1 - sigma(x) or -sigma(x). So one table per policy, O(R (P + 2))
    transcendentals, gives every ratio and score of a batch by gathering (`at_prompts`, `at_branch`,
    `at_tokens`).

    1 - sigma(x) cancels to 0 once sigma(x) rounds to 1 (x above about 37): above
    `SCORE_EXACT_ABOVE` the positive score is taken as sigma(-x), exact at any x (below, the
    difference form's relative error, a few 2^-53 e^x, stays under 1e-10, and its bits are kept).
    """

    theta: FloatArray
    probability: FloatArray
    complement: FloatArray  # sigma(-x), taken with sigma(x) (`kernels.expit_pair`)
    extreme: bool  # some logit is above SCORE_EXACT_ABOVE
    rate: FloatArray | None = None  # softplus(phi) [R, 2], the lengths' geometric rates, if asked for

    @classmethod
    def of(cls, theta: FloatArray, rates: bool = False) -> TokenTable:
        """The table of theta [R, P + 2]; with `rates`, also the stop logits' softplus (a sampling
        step's, taken in the same kernel call as sigma)."""
        extreme = bool((theta > SCORE_EXACT_ABOVE).any())
        theta = theta.copy()  # theta may move on in place
        if rates:
            probability, complement, rate = kernels.expit_pair_softplus(theta, 2)
            return cls(theta, probability, complement, extreme, rate)
        return cls(theta, *kernels.expit_pair(theta), extreme)

    # The rest is taken when first asked for: an on-policy update needs sigma alone.
    @functools.cached_property
    def positive_score(self) -> FloatArray:
        """1 - sigma(x) of each logit [R, P + 2], the score of its positive outcome."""
        if self.extreme:
            return np.where(self.theta > SCORE_EXACT_ABOVE, self.complement, 1 - self.probability)
        return 1 - self.probability

    @functools.cached_property
    def log_both(self) -> FloatArray:
        """log sigma(x) and log sigma(-x) of each logit [2, R, P + 2], from one kernel call."""
        return log_expit(np.stack((self.theta, -self.theta)))

    @property
    def log_positive(self) -> FloatArray:
        """log sigma(x) of each logit [R, P + 2]."""
        return self.log_both[0]

    @property
    def log_negative(self) -> FloatArray:
        """log sigma(-x) of each logit [R, P + 2]."""
        return self.log_both[1]

    def rows(self, rows: IndexArray | slice) -> TokenTable:
        """The table of some runs only (log-probabilities, elementwise, are the same bits either way)."""
        rate = None if self.rate is None else self.rate[rows]
        table = TokenTable(
            self.theta[rows], self.probability[rows], self.complement[rows], self.extreme, rate
        )
        if "log_both" in self.__dict__:
            table.__dict__["log_both"] = self.__dict__["log_both"][:, rows]
        for name in ("positive_score",):
            if name in self.__dict__:
                table.__dict__[name] = self.__dict__[name][rows]
        return table

    @staticmethod
    def at_prompts(values: FloatArray, batch: Batch) -> FloatArray:
        """A per-logit quantity at each response's prompt psi_j, [R, B, 1]."""
        return prompt_logits(values[:, :-2], batch.prompt_index)[..., None]

    @staticmethod
    def at_branch(values: FloatArray, batch: Batch) -> FloatArray:
        """A per-logit quantity on each response's branch (phi_right if right, else phi_wrong), [R, B, G]."""
        return np.where(batch.right, values[:, -2, None, None], values[:, -1, None, None])

    @staticmethod
    def at_tokens(positive: FloatArray, negative: FloatArray, batch: Batch) -> FloatArray:
        """A per-logit quantity of the positive and of the negative outcome ([R, P + 2] each) at each
        response's three kinds of token [3, R, B, G]: approach, non-stop, stop. One gather."""
        both = np.concatenate((positive, negative), axis=1)
        return both.take(batch.token_index(positive.shape[-1]))

    def token_scores(self, batch: Batch) -> FloatArray:
        """d log pi / d x of each response's three kinds of token [3, R, B, G]: the approach token's
        1[right] - sigma(psi_j), a non-stop token's -s, the stop token's 1 - s."""
        return self.at_tokens(self.positive_score, -self.probability, batch)

    def approach_score(self, batch: Batch) -> FloatArray:
        """d log pi / d psi_j of each approach token [R, B, G]: 1[right] - sigma(psi_j)."""
        score = batch.right - self.at_prompts(self.probability, batch)
        if self.extreme:
            score = np.where(batch.right, self.at_prompts(self.positive_score, batch), score)
        return score

    def stop_probability(self, batch: Batch) -> FloatArray:
        """s = sigma(phi) on each response's branch [R, B, G]: minus a non-stop token's score."""
        return self.at_branch(self.probability, batch)

    def stop_score(self, batch: Batch) -> FloatArray:
        """d log pi / d phi of each response's stop token [R, B, G]: 1 - s."""
        return self.at_branch(self.positive_score, batch)

    def ramble_score(self, batch: Batch) -> FloatArray:
        """d log pi / d phi summed over each response's L ramble tokens [R, B, G]: 1[stopped] - L s
        (L - 1[stopped] non-stop tokens at -s, the stop token at 1 - s): O(1) per response."""
        score = batch.stopped - batch.length * self.stop_probability(batch)
        if self.extreme:  # a stopped one-token ramble is its stop token alone
            score = np.where(batch.stopped & (batch.length == 1), self.stop_score(batch), score)
        return score


@dataclass(frozen=True)
class Coefficients:
    """d objective / d log pi of a batch's tokens, [R, B, G] each: the one input of `policy_gradient`.

    `approach` is the approach token's; `non_stop` the sum over a response's non-stop ramble tokens,
    `stop` its stop token's. `non_stop` None means every token of a response has the coefficient
    `approach` (an on-policy update), so the ramble's scores are summed in closed form. `n` [R], if
    given, divides the gradient after the sum (the aggregation's 1/n, left out of the coefficients).
    """

    approach: FloatArray
    non_stop: FloatArray | None = None
    stop: FloatArray | None = None
    n: FloatArray | None = None


def policy_gradient(coefficients: Coefficients, batch: Batch, table: TokenTable) -> FloatArray:
    """The loss gradient [R, P + 2]: -sum over the batch's tokens of c d log pi(token) / d theta.

    `table` is the policy at which the gradient is taken. Each response costs O(1): its approach
    token moves its prompt's psi_j, its ramble tokens the phi of its branch, each kind of token
    with one coefficient and one score. Prompts are distinct within a run, so psi's gradient is
    one assignment per chosen prompt.
    """
    compiled = kernels.compiled_module(COMPILED)
    if compiled is not None:  # the same operations, one loop (`toyrl.policy_compiled`)
        return _compiled_gradient(compiled, coefficients, batch, table)
    c = coefficients
    if c.non_stop is None:
        approach = c.approach * table.approach_score(batch)
        ramble = c.approach * table.ramble_score(batch)
    else:
        assert c.stop is not None
        score = table.token_scores(batch)  # [3, R, B, G]
        approach, ramble = c.approach * score[0], c.non_stop * score[1] + c.stop * score[2]
    prompt_grad = -approach.sum(axis=-1)
    phi_right = -np.where(batch.right, ramble, 0.0).sum(axis=(1, 2))
    phi_wrong = -np.where(batch.right, 0.0, ramble).sum(axis=(1, 2))
    if c.n is not None:
        prompt_grad, phi_right, phi_wrong = prompt_grad / c.n[:, None], phi_right / c.n, phi_wrong / c.n
    grad = np.zeros((len(prompt_grad), table.probability.shape[-1]))
    grad[np.arange(len(grad))[:, None], batch.prompt_index] = prompt_grad
    grad[:, -2], grad[:, -1] = phi_right, phi_wrong
    return grad


def _compiled_gradient(compiled: Any, c: Coefficients, batch: Batch, table: TokenTable) -> FloatArray:
    """`policy_gradient` by `toyrl.policy_compiled`'s loops: the same operations, the same bits."""
    shape = batch.right.shape

    def full(values: FloatArray) -> FloatArray:  # a coefficient of every response, as numpy broadcasts it
        return values if values.shape == shape else np.broadcast_to(values, shape)

    grad = np.zeros((shape[0], table.probability.shape[-1]))
    n = _NO_N if c.n is None else c.n
    if c.non_stop is None:
        positive = table.positive_score if table.extreme else table.probability  # read if extreme only
        compiled.on_policy_gradient(
            full(c.approach),
            n,
            batch.right,
            batch.length,
            batch.stopped,
            batch.prompt_index,
            table.probability,
            positive,
            table.extreme,
            grad,
        )
    else:
        assert c.stop is not None
        compiled.token_gradient(
            full(c.approach),
            full(c.non_stop),
            full(c.stop),
            n,
            batch.right,
            batch.prompt_index,
            table.probability,
            table.positive_score,
            grad,
        )
    return grad
