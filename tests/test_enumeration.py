"""The simulated-only families against exhaustive enumeration on tiny configurations.

Advantages `opo`, `gpg`, `batch_std`, `batch_whiten`, `token_whiten(_sample)`, `reinforce_pp`, the
normaliser `token_mean`, the samplers `gfpo` and `filter_groups` and the reward `soft_overlong` have
no exact expected update in toyrl. Here every batch a tiny configuration can sample is listed with
its exact probability, and its first, on-policy update g = (1/n) sum_i (A_i / D_i) score_i is
computed by this file's own plain formulas (from the stages' docstrings and the papers), never
by toyrl's stages. So

- sum_batch P(batch) g(batch), the exact E[g], is checked against the mean of many of toyrl's
  sampled first updates (`train_step`, refill streams included), within 5 standard errors;
- toyrl's update on a given batch (its noise built so that `sample_batch` draws exactly that batch,
  and the refill draws scripted) equals this file's g of that batch to 1e-12, for every batch of
  the once-drawn families and for a sample of the samplers' draws;
- on an exact-capable variant the enumeration equals `toyrl.expected.expected_update` to 1e-12,
  which checks the enumeration machinery itself.

A response is one of 2 (cap + 1) outcomes: right or wrong approach, then K = 1..cap (stopped,
L = K) or truncated (L = cap, cap non-stop tokens). Its score is d log pi / d psi_j = 1[right] -
sigma(psi_j) on its prompt's logit and, on its branch's stop logit, 1 - L s if it stopped (L - 1
non-stop tokens at -s, the stop token at 1 - s) or -cap s if truncated.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from tests.configs import TINY
from toyrl import noise
from toyrl.config import Config
from toyrl.expected import expected_update
from toyrl.objective import Variant, parse_spec
from toyrl.stages import simulated_only
from toyrl.train import Adam, Drawn, Plan, train_step

CONFIG = TINY
RAMBLE_ONLY = CONFIG.replace(count_approach_token=False)  # |o| = L
ONE_PROMPT = CONFIG.replace(batch_prompts=1)  # for filter_groups at max_rounds 2, the rounds run out first


def _logit(p: float) -> float:
    return float(np.log(p / (1 - p)))


# Two policies with every probability well inside (0, 1): P(right) from 0.31 to 0.73, stop
# probabilities 0.25 to 0.55 (so truncation at cap 3 has probability 0.09 to 0.42).
THETAS = {
    "a": np.array([0.3, -0.5, 1.0, _logit(0.4), _logit(0.25)]),
    "b": np.array([-0.8, 0.6, 0.1, _logit(0.55), _logit(0.35)]),
}


def sigmoid(x: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=np.float64)))


# --- this file's own model of a variant ----------------------------------------------------------


@dataclass(frozen=True)
class Mine:
    """A variant as this file computes it: the names of its stages and their parameters."""

    advantage: str
    aggregation: str
    reward: str = "window"
    buffer: float = 0.2
    penalty_factor: float = 1.0
    incorrect: float = -1.0
    sampler: str = "once"
    draws: int = 0
    keep: str = "shortest"
    max_rounds: int = 10
    round_prompts: int = 0


def outcome_table(cap: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(right, L, stopped) of each response outcome code 0 .. 2 (cap + 1) - 1: codes below cap + 1
    are right, the others wrong; within a branch, K = 1..cap stopped, then the truncated one."""
    code = np.arange(2 * (cap + 1))
    within = code % (cap + 1)
    stopped = within < cap
    return code < cap + 1, np.where(stopped, within + 1, cap), stopped


def outcome_probabilities(theta: np.ndarray, cap: int) -> np.ndarray:
    """P(outcome code | prompt j) [P, 2 (cap + 1)]: sigma(psi_j) or 1 - sigma(psi_j), times
    s (1 - s)^(K - 1) for K = 1..cap or (1 - s)^cap for the truncation, s the branch's stop."""
    psi, phi = theta[:-2], theta[-2:]
    p_right = sigmoid(psi)
    rows = []
    for branch, p_branch in ((0, p_right), (1, 1 - p_right)):
        s = float(sigmoid(phi[branch]))
        lengths = [s * (1 - s) ** (k - 1) for k in range(1, cap + 1)] + [(1 - s) ** cap]
        rows.append(p_branch[:, None] * np.array(lengths)[None, :])
    return np.concatenate(rows, axis=1)


@dataclass
class Batches:
    """Every batch the sampler can train on, with its probability: prob [N], prompt [N, B] and the
    responses' outcome codes [N, B, G]."""

    prob: np.ndarray
    prompt: np.ndarray
    code: np.ndarray

    def merged(self) -> Batches:
        """The same distribution with equal batches merged (their probabilities summed)."""
        prompts = int(self.prompt.max()) + 1
        codes = int(self.code.max()) + 1
        key = np.zeros(len(self.prob), dtype=np.int64)
        for column in self.prompt.T:
            key = key * prompts + column
        for column in self.code.reshape(len(self.prob), -1).T:
            key = key * codes + column
        unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        prob = np.bincount(inverse.ravel(), weights=self.prob, minlength=len(unique))
        return Batches(prob, self.prompt[first], self.code[first])


def prompt_draws(config: Config, count: int) -> list[tuple[int, ...]]:
    """Every ordered draw of `count` distinct prompts: each has probability 1 / len(...)."""
    return list(itertools.permutations(range(config.prompts), count))


def every_code_tuple(codes: int, slots: int) -> np.ndarray:
    """All codes^slots assignments of outcome codes to `slots` responses [codes^slots, slots]."""
    return np.indices((codes,) * slots).reshape(slots, -1).T


def group_distribution(theta: np.ndarray, config: Config, mine: Mine) -> tuple[np.ndarray, np.ndarray]:
    """(the G responses' codes of each possible group [C^G, G], in the order the sampler keeps
    them, and P(group | prompt j) [P, C^G]), C = 2 (cap + 1) outcomes. Once drawn, the group is
    its G draws; GFPO's group is what it keeps of G' draws: each of the C^G' draws adds its
    probability to the group it keeps."""
    table = outcome_probabilities(theta, config.cap)
    groups = every_code_tuple(table.shape[1], config.group_size)
    if mine.sampler != "gfpo":
        return groups, table[:, groups].prod(axis=-1)
    drawn = every_code_tuple(table.shape[1], mine.draws)
    kept = gfpo_kept(drawn[:, None, :], config, mine.keep)[:, 0, :]
    index = np.zeros(len(drawn), dtype=np.int64)
    for column in kept.T:
        index = index * table.shape[1] + column  # the kept group's row of `groups`
    draw_prob = table[:, drawn].prod(axis=-1)  # [P, C^G']
    prob = np.stack([np.bincount(index, weights=row, minlength=len(groups)) for row in draw_prob])
    return groups, prob


def enumerate_groups(theta: np.ndarray, config: Config, mine: Mine) -> Batches:
    """Every ordered draw of B distinct prompts (uniform) and every group of each, with its
    probability: the groups of distinct prompts are independent."""
    b = config.batch_prompts
    groups, group_prob = group_distribution(theta, config, mine)
    assert np.allclose(group_prob.sum(axis=-1), 1, rtol=0, atol=1e-14)
    ids = every_code_tuple(len(groups), b)  # [C^(G B), B]: each prompt's group
    draws = prompt_draws(config, b)
    probs = []
    for draw in draws:
        p = np.ones(len(ids))
        for slot, j in enumerate(draw):
            p = p * group_prob[j, ids[:, slot]]
        probs.append(p / len(draws))
    prompt = np.repeat(np.array(draws), len(ids), axis=0)
    return Batches(np.concatenate(probs), prompt, groups[np.tile(ids, (len(draws), 1))])


def enumerate_draws(theta: np.ndarray, config: Config, per_prompt: int) -> Batches:
    """Every draw of B distinct prompts and `per_prompt` responses to each, unmerged [N, B, per_prompt]
    (for scripting draws; the expectations use `enumerate_groups`)."""
    b = config.batch_prompts
    table = outcome_probabilities(theta, config.cap)
    codes = every_code_tuple(table.shape[1], b * per_prompt).reshape(-1, b, per_prompt)
    draws = prompt_draws(config, b)
    probs = []
    for draw in draws:
        p = np.ones(len(codes))
        for slot, j in enumerate(draw):
            p = p * table[j][codes[:, slot]].prod(axis=-1)
        probs.append(p / len(draws))
    prompt = np.repeat(np.array(draws), len(codes), axis=0)
    return Batches(np.concatenate(probs), prompt, np.tile(codes, (len(draws), 1, 1)))


def correctness(code: np.ndarray, config: Config) -> np.ndarray:
    right, length, stopped = (t[code] for t in outcome_table(config.cap))
    return right & stopped & (length >= config.min_length)


def gfpo_kept(code: np.ndarray, config: Config, keep: str) -> np.ndarray:
    """GFPO's kept responses [N, B, G] of the G' drawn [N, B, G']: draw i is kept iff fewer than G
    draws come before it, a draw coming before when its key is smaller, or equal and drawn
    earlier; the key is |o| (every generated token: L + 1), or -correctness / |o|."""
    _, length, _ = outcome_table(config.cap)
    tokens = (length[code] + 1).astype(np.float64)
    key = tokens if keep == "shortest" else -correctness(code, config).astype(np.float64) / tokens
    draws = code.shape[-1]
    before = np.zeros(code.shape, dtype=np.int64)
    for i in range(draws):
        for j in range(draws):
            earlier = (key[..., j] < key[..., i]) | ((key[..., j] == key[..., i]) & (j < i))
            before[..., i] += earlier
    kept = before < config.group_size
    assert (kept.sum(axis=-1) == config.group_size).all()
    return code[kept].reshape(*code.shape[:-1], config.group_size)  # in draw order


@dataclass
class FilterDraws:
    """Every outcome of a filter_groups step: the order in which all P prompts would be drawn
    (round after round: a uniform permutation's consecutive parts are the rounds' uniform ordered
    draws without replacement) [N, P], the group drawn for the prompt at each position of that
    order (a row of `groups` [C^G, G]) [N, P], and the probability of each [N]. The groups of
    prompts a step never reaches are summed out with the rest."""

    prob: np.ndarray
    order: np.ndarray
    group: np.ndarray
    groups: np.ndarray

    @property
    def code(self) -> np.ndarray:
        return self.groups[self.group]  # [N, P, G]


def enumerate_filter_draws(theta: np.ndarray, config: Config) -> FilterDraws:
    p = config.prompts
    groups, group_prob = group_distribution(theta, config, Mine("", ""))
    ids = every_code_tuple(len(groups), p)  # [C^(G P), P]: the group of each prompt j
    orders = prompt_draws(config, p)
    probs, group = [], []
    for order in orders:
        prob = np.ones(len(ids))
        for j in range(p):
            prob = prob * group_prob[j, ids[:, j]]
        probs.append(prob / len(orders))
        group.append(ids[:, list(order)])  # by position in the order
    order_rows = np.repeat(np.array(orders), len(ids), axis=0)
    return FilterDraws(np.concatenate(probs), order_rows, np.concatenate(group), groups)


def filter_rounds(config: Config, mine: Mine) -> list[int]:
    """How many prompts have been drawn after each round the sampler may take: B, then
    round_prompts (B when 0) more per round, at most max_rounds rounds, until none is left."""
    size, drawn, ends = mine.round_prompts or config.batch_prompts, config.batch_prompts, []
    while len(ends) < mine.max_rounds:
        ends.append(drawn)
        if drawn == config.prompts:
            break
        drawn = min(drawn + size, config.prompts)
    return ends


def filter_select(draws: FilterDraws, config: Config, mine: Mine) -> tuple[np.ndarray, np.ndarray]:
    """(positions in the draw order of the B groups the step trains on [N, B], prompts drawn [N]).

    Rounds are taken until B groups are mixed (0 < correct < G) or no round is left; the batch is
    the mixed groups in the order drawn, then the earliest non-mixed ones."""
    g, b = config.group_size, config.batch_prompts
    count = correctness(draws.groups, config).sum(axis=-1)
    mixed = ((count > 0) & (count < g))[draws.group]  # [N, P]
    ends = filter_rounds(config, mine)
    consumed = np.full(len(draws.prob), ends[-1])
    for end in reversed(ends):  # the first round after which B groups are mixed
        enough = mixed[:, :end].sum(axis=-1) >= b
        consumed = np.where(enough, end, consumed)
    position = np.arange(config.prompts)
    rank = np.where(mixed, 0, config.prompts) + position  # mixed first, each kind in drawn order
    rank = np.where(position[None] < consumed[:, None], rank, 10 * config.prompts)  # not drawn
    return np.argsort(rank, axis=-1)[:, :b], consumed


def enumerate_filter(theta: np.ndarray, config: Config, mine: Mine) -> Batches:
    draws = enumerate_filter_draws(theta, config)
    chosen, _ = filter_select(draws, config, mine)
    rows = np.arange(len(draws.prob))[:, None]
    by_id = Batches(draws.prob, draws.order[rows, chosen], draws.group[rows, chosen][..., None]).merged()
    return Batches(by_id.prob, by_id.prompt, draws.groups[by_id.code[..., 0]])


def enumerate_batches(theta: np.ndarray, config: Config, mine: Mine) -> Batches:
    if mine.sampler == "filter_groups":
        batches = enumerate_filter(theta, config, mine)
    else:
        batches = enumerate_groups(theta, config, mine)
    assert abs(batches.prob.sum() - 1) < 1e-13, batches.prob.sum()
    return batches.merged()


# --- this file's own update of one batch ---------------------------------------------------------


def rewards_of(code: np.ndarray, config: Config, mine: Mine) -> np.ndarray:
    correct = correctness(code, config)
    if mine.reward == "window":
        return correct.astype(np.float64)
    # DAPO: 1 / `incorrect`, plus min(0, -(|o| - (L_max - b)) / b) x factor, L_max = the longest |o|
    _, length, _ = outcome_table(config.cap)
    tokens = length[code] + config.approach_tokens
    longest = config.cap + config.approach_tokens
    buffer = mine.buffer * longest
    penalty = np.minimum(0.0, -(tokens - (longest - buffer)) / buffer) * mine.penalty_factor
    return np.where(correct, 1.0, mine.incorrect) + penalty


def advantages_of(r: np.ndarray, tokens: np.ndarray, config: Config, mine: Mine) -> np.ndarray:
    """A [N, B, G] of rewards r and token counts |o| [N, B, G], from the papers' formulas."""
    eps = config.std_eps
    n_batch = r.shape[1] * r.shape[2]
    group_mean = r.mean(axis=-1, keepdims=True)
    name = mine.advantage
    if name == "none":
        return r - group_mean
    if name in ("group_std", "group_std_sample"):
        ddof = 1 if name.endswith("sample") else 0
        return (r - group_mean) / (r.std(axis=-1, ddof=ddof, keepdims=True) + eps)
    if name == "opo":  # b = sum_j |o_j| r_j / sum_j |o_j| over the group
        baseline = (tokens * r).sum(axis=-1, keepdims=True) / tokens.sum(axis=-1, keepdims=True)
        return r - baseline
    if name == "gpg":  # N / max(1, M) (r_i - group mean), M the batch's nonzero rewards
        nonzero = np.maximum((r != 0).sum(axis=(1, 2)), 1)[:, None, None]
        return n_batch / nonzero * (r - group_mean)
    flat = r.reshape(len(r), -1)
    if name == "batch_std":  # the sample std of all B G rewards
        return (r - group_mean) / (flat.std(axis=-1, ddof=1)[:, None, None] + eps)
    if name == "batch_whiten":
        a = (r - group_mean).reshape(len(r), -1)
        a = a - a.mean(axis=-1, keepdims=True)
        return (a / (a.std(axis=-1, ddof=1, keepdims=True) + eps)).reshape(r.shape)
    # token-weighted whitening (REINFORCE++): each response's a_i counted |o_i| times
    a = r if name == "reinforce_pp" else r - group_mean
    w = tokens.reshape(len(r), -1)
    a = a.reshape(len(r), -1)
    total = w.sum(axis=-1, keepdims=True)
    m = (w * a).sum(axis=-1, keepdims=True) / total
    second = (w * (a - m) ** 2).sum(axis=-1, keepdims=True)
    if name == "token_whiten":  # OpenRLHF: population variance, clamped at 1e-8
        scale = np.sqrt(np.maximum(second / total, 1e-8))
    else:  # verl: (sum / n) times n / (n - 1) as float32 computes it, plus 1e-8
        bessel = (total.astype(np.float32) / (total - 1).astype(np.float32)).astype(np.float64)
        scale = np.sqrt(second / total * bessel + 1e-8)
    return ((a - m) / scale).reshape(r.shape)


def updates_of(theta: np.ndarray, config: Config, mine: Mine, batches: Batches) -> np.ndarray:
    """g [N, P + 2] of each batch: (1/n) sum_i (A_i / D_i) score_i, the ascent direction."""
    right_of, length_of, stopped_of = outcome_table(config.cap)
    code = batches.code
    right, length, stopped = right_of[code], length_of[code], stopped_of[code]
    tokens = (length + config.approach_tokens).astype(np.float64)  # |o_i|
    a = advantages_of(rewards_of(code, config, mine), tokens, config, mine)
    n_batch = code.shape[1] * code.shape[2]
    if mine.aggregation == "token_mean":  # D = the batch's tokens, n = 1
        d, n = tokens.sum(axis=(1, 2), keepdims=True), 1.0
    elif mine.aggregation == "seq_mean_token_mean":  # D = |o_i|, n = N
        d, n = tokens, float(n_batch)
    elif mine.aggregation == "seq_mean_token_sum_norm":  # D = L_norm, n = N
        d, n = np.full(tokens.shape, config.length_norm or config.cap), float(n_batch)
    else:
        raise AssertionError(mine.aggregation)
    w = a / d / n
    psi_batch = theta[:-2][batches.prompt][..., None]  # [N, B, 1]
    approach = np.where(right, 1.0, 0.0) - sigmoid(psi_batch)
    s = sigmoid(np.where(right, theta[-2], theta[-1]))
    ramble = np.where(stopped, 1.0 - length * s, -config.cap * s)
    g = np.zeros((len(code), len(theta)))
    per_group = (w * approach).sum(axis=-1)  # [N, B]
    for j in range(config.prompts):
        g[:, j] = np.where(batches.prompt == j, per_group, 0.0).sum(axis=-1)
    g[:, -2] = np.where(right, w * ramble, 0.0).sum(axis=(1, 2))
    g[:, -1] = np.where(right, 0.0, w * ramble).sum(axis=(1, 2))
    return g


def enumerated_expectation(theta: np.ndarray, config: Config, mine: Mine) -> np.ndarray:
    batches = enumerate_batches(theta, config, mine)
    return batches.prob @ updates_of(theta, config, mine, batches)


# --- toyrl's side --------------------------------------------------------------------------------


def toyrl_updates(
    theta: np.ndarray,
    config: Config,
    variant: Variant,
    noise: tuple[np.ndarray, np.ndarray, np.ndarray],
    refill: Sequence[Any] | None,
) -> np.ndarray:
    """The ascent directions [R, P + 2] of one first update per row of noise, at theta [P + 2]."""
    runs = len(noise[0])
    thetas = np.repeat(theta[None], runs, axis=0)
    plan = Plan.of([variant] * runs)
    step = train_step(
        thetas,
        Adam(thetas, config),
        Drawn.of(thetas, noise, config),
        plan,
        config,
        thetas.copy(),
        apply=False,
        refill=refill,
    )
    assert (thetas == theta[None]).all()
    return -step.grad


def sampled_first_updates(
    theta: np.ndarray, config: Config, variant: Variant, n: int, seed: int
) -> np.ndarray:
    """n independent first updates through `train_step`; samplers that draw more take their draws
    from a refill stream (one generator shared by the runs: their draws follow one another, so
    they are independent as each run's own stream's would be)."""
    rng = np.random.default_rng(seed)
    shape = (n, config.batch_prompts, config.group_size)
    noise = (
        rng.random((n, config.prompts)).argsort(axis=-1)[:, : config.batch_prompts],
        rng.random(shape),
        rng.standard_exponential(shape),
    )
    refill = np.random.default_rng([seed, 1])
    return toyrl_updates(theta, config, variant, noise, [refill] * n)


def response_noise(
    theta: np.ndarray, prompt: np.ndarray, code: np.ndarray, cap: int
) -> tuple[np.ndarray, ...]:
    """(approach uniforms, length exponentials), shaped as `code`, under which `sample_batch` draws
    exactly those outcomes: u = sigma(psi_j) / 2 (right) or (1 + sigma(psi_j)) / 2 (wrong), and
    E = (K - 1/2) softplus(phi), K = cap + 1 for a truncated one (floor(E / softplus) + 1 = K)."""
    right_of, length_of, stopped_of = outcome_table(cap)
    right = right_of[code]
    p = sigmoid(theta[:-2][prompt])[..., None]
    uniform = np.where(right, p / 2, (1 + p) / 2)
    rambled = np.where(stopped_of[code], length_of[code], cap + 1)
    rate = np.logaddexp(0.0, np.where(right, theta[-2], theta[-1]))
    return uniform, (rambled - 0.5) * rate


class Scripted:
    """A refill stream whose draws are set in advance: `random` and `standard_exponential` hand
    out the queued arrays in order, checking the shape asked for (a permutation's uniforms are
    made when asked, from the pool size: see `FilterScript`)."""

    def __init__(self, queue: list[np.ndarray]) -> None:
        self.queue = list(queue)

    def _next(self, shape: Any) -> np.ndarray:
        assert self.queue, "the sampler drew more than was scripted"
        value = self.queue.pop(0)
        assert value.shape == tuple(np.atleast_1d(shape)), (value.shape, shape)
        return value

    def random(self, shape: Any = None) -> np.ndarray:
        return self._next(shape)

    def standard_exponential(self, shape: Any = None) -> np.ndarray:
        return self._next(shape)


@pytest.fixture
def scripted_exponentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stages draw their exponentials through `toyrl.noise` (from the stream's raw bits); a
    `Scripted` stream hands out its queued ones instead."""
    original = noise.standard_exponential

    def draw(rng: Any, shape: Any) -> np.ndarray:
        return rng.standard_exponential(shape) if isinstance(rng, Scripted) else original(rng, shape)

    monkeypatch.setattr(noise, "standard_exponential", draw)


class FilterScript(Scripted):
    """filter_groups' refill stream: each round asks for uniforms over the pool of prompts not
    drawn yet (sorted), whose argsort is the round's draw order, then the round's approach
    uniforms and length exponentials; this one continues the scripted order of the prompts."""

    def __init__(self, order: np.ndarray, uniforms: np.ndarray, exponentials: np.ndarray, first: int) -> None:
        super().__init__([])
        self.order, self.uniforms, self.exponentials, self.drawn = order, uniforms, exponentials, first
        self.expect = "pool"

    def random(self, shape: Any = None) -> np.ndarray:
        if self.expect == "pool":
            rest = self.order[self.drawn :]
            pool = np.sort(rest)
            assert tuple(np.atleast_1d(shape)) == (len(pool),), (shape, pool)
            value = np.empty(len(pool))
            value[np.searchsorted(pool, rest)] = (np.arange(len(rest)) + 1) / (len(rest) + 1)
            self.expect = "approach"
            return value
        _, size, _ = shape
        self.size = size
        self.expect = "exponential"
        return self.uniforms[None, self.drawn : self.drawn + size]

    @property
    def bit_generator(self) -> FilterScript:
        return self

    def random_raw(self, shape: Any = None) -> np.ndarray:
        """The 64-bit outputs whose uniforms ((x >> 11) 2^-53) are `random`'s, as a bit generator's."""
        return (self.random(shape) * 2.0**53).astype(np.uint64) << np.uint64(11)

    def standard_exponential(self, shape: Any = None) -> np.ndarray:
        assert self.expect == "exponential"
        value = self.exponentials[None, self.drawn : self.drawn + self.size]
        assert value.shape == tuple(shape)
        self.drawn += self.size
        self.expect = "pool"
        return value


def relative_difference(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| over each row's largest |want| (a coordinate that cancels to near 0 is
    measured against its row's scale, not its own; a row of zeros, against the largest row's)."""
    scale = np.abs(want).max(axis=-1, keepdims=True)
    assert scale.max() > 0
    scale = np.where(scale > 0, scale, scale.max())
    return float((np.abs(got - want) / scale).max())


# --- the cases -----------------------------------------------------------------------------------

G = "advantage=group_std_sample,aggregation=token_mean"
CASES: dict[str, tuple[str, Config, Mine]] = {
    "opo,token_mean": ("advantage=opo,aggregation=token_mean", CONFIG, Mine("opo", "token_mean")),
    "opo,seq_mean_token_mean,|o|=L": (
        "advantage=opo,aggregation=seq_mean_token_mean",
        RAMBLE_ONLY,
        Mine("opo", "seq_mean_token_mean"),
    ),
    "gpg,token_mean": ("advantage=gpg,aggregation=token_mean", CONFIG, Mine("gpg", "token_mean")),
    "none,token_mean": ("advantage=none,aggregation=token_mean", CONFIG, Mine("none", "token_mean")),
    "none,token_mean,|o|=L": (
        "advantage=none,aggregation=token_mean",
        RAMBLE_ONLY,
        Mine("none", "token_mean"),
    ),
    "batch_std": (
        "advantage=batch_std,aggregation=seq_mean_token_mean",
        CONFIG,
        Mine("batch_std", "seq_mean_token_mean"),
    ),
    "batch_whiten": (
        "advantage=batch_whiten,aggregation=seq_mean_token_sum_norm",
        CONFIG,
        Mine("batch_whiten", "seq_mean_token_sum_norm"),
    ),
    "token_whiten": (
        "advantage=token_whiten,aggregation=token_mean",
        CONFIG,
        Mine("token_whiten", "token_mean"),
    ),
    "token_whiten_sample": (
        "advantage=token_whiten_sample,aggregation=seq_mean_token_mean",
        CONFIG,
        Mine("token_whiten_sample", "seq_mean_token_mean"),
    ),
    "reinforce_pp": (
        "advantage=reinforce_pp,aggregation=token_mean",
        CONFIG,
        Mine("reinforce_pp", "token_mean"),
    ),
    "soft_overlong": (
        f"{G},reward=soft_overlong,buffer=0.5,penalty_factor=0.5",
        CONFIG,
        Mine("group_std_sample", "token_mean", reward="soft_overlong", buffer=0.5, penalty_factor=0.5),
    ),
    "gfpo,shortest": (
        f"{G},sampler=gfpo,draws=3",
        CONFIG,
        Mine("group_std_sample", "token_mean", sampler="gfpo", draws=3),
    ),
    "gfpo,reward_per_token": (
        f"{G},sampler=gfpo,draws=3,keep=reward_per_token",
        CONFIG,
        Mine("group_std_sample", "token_mean", sampler="gfpo", draws=3, keep="reward_per_token"),
    ),
    "filter_groups": (
        f"{G},sampler=filter_groups",
        CONFIG,
        Mine("group_std_sample", "token_mean", sampler="filter_groups"),
    ),
    "filter_groups,max_rounds=2,B=1": (
        f"{G},sampler=filter_groups,max_rounds=2",
        ONE_PROMPT,
        Mine("group_std_sample", "token_mean", sampler="filter_groups", max_rounds=2),
    ),
}


def case(name: str) -> tuple[Variant, Config, Mine]:
    spec, config, mine = CASES[name]
    variant = parse_spec(spec)
    names = variant.names()
    assert (names["advantage"], names["normaliser"], names["reward"], names["sampler"]) == (
        mine.advantage,
        mine.aggregation,
        mine.reward,
        mine.sampler,
    )
    return variant, config, mine


def test_every_family_here_is_simulated_only() -> None:
    """The families checked here are the ones toyrl cannot compute exactly (if one gains an exact
    form, compare it with the enumeration instead)."""
    for name in CASES:
        variant, _, _ = case(name)
        stages = [variant.advantage, variant.normaliser, variant.reward, variant.sampler]
        assert any(simulated_only(stage) for stage in stages), name


# --- the enumeration machinery itself ------------------------------------------------------------

EXACT_CAPABLE = {
    "none,seq_mean_token_sum_norm": (
        "advantage=none,aggregation=seq_mean_token_sum_norm",
        Mine("none", "seq_mean_token_sum_norm"),
    ),
    "group_std,seq_mean_token_mean": (
        "advantage=group_std,aggregation=seq_mean_token_mean",
        Mine("group_std", "seq_mean_token_mean"),
    ),
}


@pytest.mark.parametrize("theta_name", list(THETAS))
@pytest.mark.parametrize("name", list(EXACT_CAPABLE))
def test_the_enumeration_equals_the_exact_expected_update(name: str, theta_name: str) -> None:
    """Where toyrl has an exact E[g], the enumeration gives it to 1e-12: the prompt draw, the
    outcome probabilities, the scores and the sum over batches are right (L_norm 5 and the cap's
    default both; |o| with and without the approach token)."""
    spec, mine = EXACT_CAPABLE[name]
    theta = THETAS[theta_name]
    for config in (CONFIG, RAMBLE_ONLY.replace(length_norm=5.0), ONE_PROMPT):
        exact = expected_update(theta[None], config, [parse_spec(spec)])[0]
        enumerated = enumerated_expectation(theta, config, mine)
        assert np.abs(exact).max() > 1e-3
        # relative to the largest coordinate: Dr. GRPO's phi_wrong one is 0, up to rounding
        assert relative_difference(enumerated[None], exact[None]) < 1e-12
    # and it tells variants apart: another aggregation (at the last configuration) moves E[g] by more
    other = Mine(mine.advantage, "token_mean")
    assert np.abs(enumerated_expectation(theta, ONE_PROMPT, other) - exact).max() > 1e-3


def test_the_enumeration_lists_each_sampler_s_batches() -> None:
    """The samplers' enumerations by hand on small facts: gfpo keeps G of its G' draws by its key,
    ties to the earlier; filter_groups' batches hold distinct prompts, mixed groups first, and
    its rounds stop as FilterGroups says."""
    right_of, length_of, _ = outcome_table(CONFIG.cap)
    code = {(True, 1): 0, (True, 2): 1, (True, 3): 2, (True, "cut"): 3}
    code |= {(False, 1): 4, (False, 2): 5, (False, 3): 6, (False, "cut"): 7}
    assert right_of[code[True, "cut"]] and length_of[code[True, "cut"]] == 3
    drawn = np.array(
        [[[code[False, 3], code[True, 2], code[False, 1]], [code[True, 3], code[True, 1], code[False, 3]]]]
    )
    np.testing.assert_array_equal(
        gfpo_kept(drawn, CONFIG, "shortest"),
        [[[code[True, 2], code[False, 1]], [code[True, 3], code[True, 1]]]],
    )
    # reward per token: the correct (right, stopped, L >= 2) first, the rest (key 0) by draw order
    np.testing.assert_array_equal(
        gfpo_kept(drawn, CONFIG, "reward_per_token"),
        [[[code[False, 3], code[True, 2]], [code[True, 3], code[True, 1]]]],
    )
    assert filter_rounds(CONFIG, Mine("none", "token_mean", sampler="filter_groups")) == [2, 3]
    assert filter_rounds(ONE_PROMPT, Mine("none", "token_mean", max_rounds=2)) == [1, 2]
    assert filter_rounds(ONE_PROMPT, Mine("none", "token_mean")) == [1, 2, 3]
    mixed = [code[True, 2], code[False, 1]]
    plain = [code[False, 2], code[True, 1]]
    groups = np.array([plain, mixed])
    draws = FilterDraws(
        np.ones(3), np.array([[2, 0, 1]] * 3), np.array([[0, 1, 0], [1, 1, 0], [0, 0, 1]]), groups
    )
    chosen, consumed = filter_select(draws, CONFIG, Mine("none", "token_mean", sampler="filter_groups"))
    np.testing.assert_array_equal(chosen, [[1, 0], [0, 1], [2, 0]])
    np.testing.assert_array_equal(consumed, [3, 2, 3])
    theta = THETAS["a"]
    for name in ("filter_groups", "filter_groups,max_rounds=2,B=1", "gfpo,shortest"):
        _, config, mine = case(name)
        batches = enumerate_batches(theta, config, mine)
        assert abs(batches.prob.sum() - 1) < 1e-13
        for prompt in batches.prompt:
            assert len(set(prompt.tolist())) == config.batch_prompts
    # filter_groups moves probability to mixed groups; gfpo to short responses
    once = enumerate_batches(theta, CONFIG, Mine("none", "token_mean"))
    filtered = enumerate_batches(theta, CONFIG, Mine("none", "token_mean", sampler="filter_groups"))

    def p_mixed(b: Batches) -> float:
        count = correctness(b.code, CONFIG).sum(axis=-1)
        return float(b.prob @ ((count > 0) & (count < 2)).mean(axis=-1))

    assert p_mixed(filtered) > p_mixed(once) + 0.05
    short = enumerate_batches(theta, CONFIG, Mine("none", "token_mean", sampler="gfpo", draws=3))
    assert (
        short.prob @ length_of[short.code].mean(axis=(1, 2))
        < once.prob @ length_of[once.code].mean(axis=(1, 2)) - 0.1
    )


# --- toyrl's update on given batches -------------------------------------------------------------

ONCE = [name for name, (_, _, mine) in CASES.items() if mine.sampler == "once"]


@pytest.mark.parametrize("name", ONCE)
def test_toyrl_s_update_on_every_batch_is_this_file_s(name: str) -> None:
    """Every batch of the configuration (ordered prompt draws x 8^4 outcomes), drawn through
    `train_step` from noise built for it: toyrl's first update equals g(batch) to 1e-12."""
    variant, config, mine = case(name)
    theta = THETAS["a"]
    batches = enumerate_batches(theta, config, mine)
    uniform, exponential = response_noise(theta, batches.prompt, batches.code, config.cap)
    got = toyrl_updates(theta, config, variant, (batches.prompt, uniform, exponential), None)
    want = updates_of(theta, config, mine, batches)
    assert relative_difference(got, want) < 1e-12, relative_difference(got, want)


@pytest.mark.usefixtures("scripted_exponentials")
def test_toyrl_s_gfpo_update_on_scripted_draws_is_this_file_s() -> None:
    """GFPO on 4,000 of its draws (of 6 x 8^6): the first G draws per prompt from the step's noise,
    the other G' - G scripted on the refill stream (approach uniforms, then exponentials)."""
    for name in ("gfpo,shortest", "gfpo,reward_per_token"):
        variant, config, mine = case(name)
        theta = THETAS["b"]
        drawn = enumerate_draws(theta, config, mine.draws)
        rows = np.random.default_rng(5).choice(len(drawn.prob), 4000, replace=False)
        prompt, code = drawn.prompt[rows], drawn.code[rows]
        uniform, exponential = response_noise(theta, prompt, code, config.cap)
        g = config.group_size
        refill = [Scripted([uniform[r, :, g:], exponential[r, :, g:]]) for r in range(len(rows))]
        noise = (prompt, uniform[..., :g], exponential[..., :g])
        got = toyrl_updates(theta, config, variant, noise, refill)
        kept = Batches(np.ones(len(rows)), prompt, gfpo_kept(code, config, mine.keep))
        want = updates_of(theta, config, mine, kept)
        assert relative_difference(got, want) < 1e-12, (name, relative_difference(got, want))
        assert all(not stream.queue for stream in refill)  # every scripted draw was taken


@pytest.mark.usefixtures("scripted_exponentials")
def test_toyrl_s_filter_groups_update_on_scripted_rounds_is_this_file_s() -> None:
    """filter_groups on 3,000 of its draws per configuration: the first round from the step's
    noise, later rounds scripted on the refill stream (the pool's order, then the responses);
    toyrl's update is g of the batch this file's rounds select, and it draws exactly the rounds
    this file says it does."""
    for name in ("filter_groups", "filter_groups,max_rounds=2,B=1"):
        variant, config, mine = case(name)
        theta = THETAS["a"]
        draws = enumerate_filter_draws(theta, config)
        rows = np.random.default_rng(6).choice(len(draws.prob), 3000, replace=False)
        order, code = draws.order[rows], draws.code[rows]
        chosen, consumed = filter_select(
            FilterDraws(draws.prob[rows], order, draws.group[rows], draws.groups), config, mine
        )
        assert (consumed > config.batch_prompts).any() and (consumed == config.batch_prompts).any()
        uniform, exponential = response_noise(theta, order, code, config.cap)
        b = config.batch_prompts
        refill = [FilterScript(order[r], uniform[r], exponential[r], b) for r in range(len(rows))]
        noise = (order[:, :b], uniform[:, :b], exponential[:, :b])
        got = toyrl_updates(theta, config, variant, noise, refill)
        np.testing.assert_array_equal([stream.drawn for stream in refill], consumed)
        index = np.arange(len(rows))[:, None]
        want = updates_of(
            theta, config, mine, Batches(np.ones(len(rows)), order[index, chosen], code[index, chosen])
        )
        assert relative_difference(got, want) < 1e-12, (name, relative_difference(got, want))


# --- toyrl's simulator against the enumeration ---------------------------------------------------

DRAWS = {"filter_groups": 10_000, "filter_groups,max_rounds=2,B=1": 10_000}  # a Python loop per run
# Each case without its simulated-only stage: its E[g] is far from the case's (the check's power).
WITHOUT = {
    "opo,token_mean": {"advantage": "none"},
    "opo,seq_mean_token_mean,|o|=L": {"advantage": "none"},
    "gpg,token_mean": {"advantage": "none"},
    "none,token_mean": {"aggregation": "seq_mean_token_mean"},
    "none,token_mean,|o|=L": {"aggregation": "seq_mean_token_mean"},
    "batch_std": {"advantage": "group_std_sample"},
    "batch_whiten": {"advantage": "none"},
    "token_whiten": {"advantage": "none"},
    "token_whiten_sample": {"advantage": "group_std_sample"},
    "reinforce_pp": {"advantage": "none"},
    "soft_overlong": {"reward": "window"},
    "gfpo,shortest": {"sampler": "once"},
    "gfpo,reward_per_token": {"sampler": "once"},
    "filter_groups": {"sampler": "once"},
    "filter_groups,max_rounds=2,B=1": {"sampler": "once"},
}


@pytest.mark.slow
@pytest.mark.parametrize("theta_name", list(THETAS))
@pytest.mark.parametrize("name", list(CASES))
def test_the_mean_of_toyrl_s_sampled_updates_is_the_enumerated_expectation(
    name: str, theta_name: str
) -> None:
    """2 x 25,000 independent first updates through `train_step` (2 x 10,000 for filter_groups,
    whose sampler loops over runs): every coordinate of their mean within 5 standard errors of the
    enumerated E[g]. The same draws are more than 10 standard errors from the E[g] of the variant
    without its simulated-only stage in some coordinate (so the check has power)."""
    variant, config, mine = case(name)
    theta = THETAS[theta_name]
    exact = enumerated_expectation(theta, config, mine)
    n = DRAWS.get(name, 25_000)
    g = np.concatenate([sampled_first_updates(theta, config, variant, n, seed) for seed in (11, 12)])
    mean, se = g.mean(axis=0), g.std(axis=0, ddof=1) / np.sqrt(len(g))
    assert (se > 0).all()
    z = np.abs(mean - exact) / se
    assert (z < 5).all(), f"{name} at theta {theta_name}: z = {np.round(z, 2)}"
    without = enumerated_expectation(theta, config, dataclasses.replace(mine, **WITHOUT[name]))
    assert (np.abs(mean - without) / se).max() > 10, f"{name}: the check cannot tell {WITHOUT[name]}"
