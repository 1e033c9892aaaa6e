"""The training loop: one step of many runs, top to bottom, and the loop that records it.

Article, "Toy run": each step samples B distinct prompts and G responses to each, scores them, and
takes the variant's updates with Adam (one on-policy update for the article's variants).
`train_step` reads like cleanrl's loop: sample -> reward -> select -> advantage (once per sampled
batch) -> for each update of the schedule: normaliser -> objective -> gradient -> Adam. Every
stage is the variant's own (`toyrl.stages`); runs sharing a stage are computed together.

Randomness (the noise contract): every run (variant, seed) owns the streams of `STREAMS`, the
children of `SeedSequence(seed)` in that order. A run's numbers depend on its seed alone, not on
which runs share its array or its worker; the variants of one seed start from the same prompt
logits and draw the same noise (common random numbers), so their differences are the objective's.
A new sampler takes a new child (`SeedSequence.spawn` returns the first children unchanged when
more are spawned), so adding one changes no existing number.

Row `step` = t of the results describes the policy theta_t: its exact metrics, a batch sampled from
it, and the gradient that batch gives. theta_{t+1} follows from theta_t by the step's updates for
t < steps; the final row's batch and gradient are evaluated but not applied. `simulate` returns
arrays; the results table is built at the edge (`toyrl.experiment`). The mean-field algorithm is
its own function, `toyrl.expected.simulate_mean_field`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from toyrl import kernels, noise
from toyrl.config import Config, InvalidInput
from toyrl.layout import rank_order, token_budget_parts
from toyrl.objective import Variant, rows_by
from toyrl.policy import (
    Batch,
    Coefficients,
    FloatArray,
    IndexArray,
    OwnLogits,
    TokenTable,
    exact_metrics,
    logit,
    policy_gradient,
    sample_batch,
)
from toyrl.stages import (
    K3,
    SEQUENCE_OBJECTIVES,
    K1Reward,
    LongestResponse,
    OneDraw,
    TokenAdvantage,
    Update,
    correct,
    generated,
    std_eps_of,
    weights,
)

NOISE_BLOCK_STEPS = 50  # noise is drawn at most this many steps at a time ...
VALUES_PER_BLOCK = 2**22  # ... and at most about this many values per array (32 MB), to bound memory
# SeedSequence(seed)'s children, in this order
STREAMS = ("init", "prompts", "approach", "length", "shuffle", "refill")

EXACT_COLUMNS = [
    "accuracy",
    "length_mean",
    "length_correct",
    "length_incorrect",
    "length_right_approach",
    "length_wrong_approach",
    "p_right_approach",
    "stop_prob_right",
    "stop_prob_wrong",
]
SAMPLED_COLUMNS = [  # statistics of the sampled batch: NaN for mean-field runs, which draw none
    "batch_accuracy",
    "batch_length_mean",
    "batch_length_correct",
    "batch_length_incorrect",
    "zero_variance_fraction",
    "tokens_sampled",
]
BATCH_COLUMNS = [*SAMPLED_COLUMNS, "grad_norm", "clip_fraction"]
COLUMNS = ["variant", "seed", "step", *EXACT_COLUMNS, *BATCH_COLUMNS]

Rows = IndexArray | slice


def initial_theta(config: Config, rng: np.random.Generator) -> FloatArray:
    """theta_0 [P + 2]: psi_j ~ Normal(prompt_logit_mean, prompt_logit_std), phi at the set stops."""
    psi = config.prompt_logit_mean + config.prompt_logit_std * noise.standard_normal(rng, config.prompts)
    phi = logit(np.array([config.stop_prob_right, config.stop_prob_wrong]))
    return np.concatenate([psi, phi])


def _groups(keys: list[Any]) -> tuple[tuple[Any, Rows], ...]:
    """Runs grouped by key; one group spanning every run is a slice (no copies on the common path)."""
    return tuple(
        (key, slice(None) if len(rows) == len(keys) else rows) for key, rows in rows_by(keys).items()
    )


@dataclass(frozen=True)
class Plan:
    """The runs grouped by stage (each stage's runs computed together), and per-run settings [R]."""

    rewards_by: tuple[tuple[Any, Rows], ...]
    samplers_by: tuple[tuple[Any, Rows], ...]
    selectors_by: tuple[tuple[Any, Rows], ...]
    advantages_by: tuple[tuple[Any, Rows], ...]
    normalisers_by: tuple[tuple[Any, Rows], ...]
    objectives_by: tuple[tuple[Any, Rows], ...]  # by objective class, whose runs' parameters ...
    objective_parameters: dict[Any, dict[str, FloatArray]]  # ... are arrays [R] (`stack`)
    updates: NDArray[np.int64]  # optimiser updates per batch [R]: epochs x mini-batches
    mini_batches: NDArray[np.int64]
    micro_batches: NDArray[np.int64]
    ranks: NDArray[np.int64]  # verl's V1 layout (`toyrl.layout`): data-parallel ranks, ...
    token_budget: NDArray[np.int64]  # ... each micro-batch's tokens (0: micro_batches equal parts) ...
    prompt_tokens: NDArray[np.int64]  # ... and each prompt's tokens, counted in a sequence's length
    per_micro_batch: NDArray[np.bool_]  # whether the normaliser is taken on each micro-batch
    orders: NDArray[np.int64]  # random orders of the responses drawn per batch [R]
    max_grad_norm: FloatArray  # each update's gradient clipped to this norm [R] (inf: not clipped)
    beta: FloatArray  # the k3 term's coefficient in the loss [R]
    kl_reward: FloatArray  # the k1 term's coefficient in the reward [R]
    kl_ratio_weighted: NDArray[np.bool_]  # the KL term times the ratio (TRL's use_bias_correction_kl)

    @classmethod
    def of(cls, variants: Sequence[Variant]) -> Plan:
        objectives = [v.objective for v in variants]
        objectives_by = _groups([type(o) for o in objectives])
        return cls(
            rewards_by=_groups([v.reward for v in variants]),
            samplers_by=_groups([v.sampler for v in variants]),
            selectors_by=_groups([v.selector for v in variants]),
            advantages_by=_groups([v.advantage for v in variants]),
            normalisers_by=_groups([v.normaliser for v in variants]),
            objectives_by=objectives_by,
            objective_parameters={kind: kind.stack(objectives) for kind, _ in objectives_by},
            updates=np.array([v.updates for v in variants]),
            mini_batches=np.array([getattr(v.schedule, "mini_batches", 1) for v in variants]),
            micro_batches=np.array([getattr(v.schedule, "micro_batches", 1) for v in variants]),
            ranks=np.array([getattr(v.schedule, "ranks", 1) for v in variants]),
            token_budget=np.array([getattr(v.schedule, "token_budget", 0) for v in variants]),
            prompt_tokens=np.array([getattr(v.schedule, "prompt_tokens", 0) for v in variants]),
            per_micro_batch=np.array(
                [bool(getattr(v.normaliser, "per_micro_batch", False)) for v in variants]
            ),
            orders=np.array([getattr(v.schedule, "orders", 0) for v in variants]),
            max_grad_norm=np.array([getattr(v.schedule, "max_grad_norm", None) or np.inf for v in variants]),
            beta=np.array([float(v.kl.beta) if isinstance(v.kl, K3) else 0.0 for v in variants]),
            kl_reward=np.array([float(v.kl.beta) if isinstance(v.kl, K1Reward) else 0.0 for v in variants]),
            kl_ratio_weighted=np.array([bool(getattr(v.kl, "ratio_weighted", False)) for v in variants]),
        )

    @property
    def whole_batch(self) -> bool:
        """Whether every update of every run is on the whole batch, in one part (no mini- or
        micro-batches): its normalisers are then taken once a batch."""
        return bool(
            (self.mini_batches == 1).all() and (self.micro_batches == 1).all() and not self.laid_out.any()
        )

    @property
    def laid_out(self) -> NDArray[np.bool_]:
        """Which runs' mini- and micro-batches the responses' lengths decide [R] (`toyrl.layout`)."""
        return (self.ranks > 1) | ((self.token_budget > 0) & self.per_micro_batch)

    def clipped(self, grad: FloatArray, rows: Rows) -> FloatArray:
        """The runs' gradients [rows, P + 2] scaled to at most their max_grad_norm, as torch's
        clip_grad_norm_ (coefficient max_norm / (norm + 1e-6), at most 1); as they are if none clips."""
        limit = self.max_grad_norm[rows]
        if np.isinf(limit).all():
            return grad
        norm = np.sqrt((grad * grad).sum(axis=-1))
        return grad * np.minimum(1.0, limit / (norm + 1e-6))[:, None]

    def parts(
        self,
        update: int,
        positions: NDArray[np.intp] | None,
        tokens: FloatArray,
        dealt: dict[int, NDArray[np.intp]] | None = None,
    ) -> tuple[NDArray[np.bool_], NDArray[np.intp]]:
        """(which responses are in each run's mini-batch of update `update` [R, B, G], and each
        response's micro-batch within its mini-batch): the mini-batch is the update's part of the
        run's order (epoch update // mini_batches), the micro-batches consecutive parts of it; for
        a run laid out by lengths (`laid_out`), as `toyrl.layout` lays its tokens [R, B, G] out
        (`dealt`: each run's order over its ranks, kept across a step's updates, which share it)."""
        shape = tokens.shape
        mini = self.mini_batches[:, None, None]
        size = shape[-2] * shape[-1] // mini  # responses per mini-batch, [R, 1, 1]
        if positions is None:
            position = np.broadcast_to(np.arange(shape[-2] * shape[-1]).reshape(shape[-2:]), shape)
        else:
            epoch = np.minimum(update // self.mini_batches, positions.shape[1] - 1)
            position = positions[np.arange(len(positions)), epoch]
        members = position // size == update % mini
        micro = position % size // (size // self.micro_batches[:, None, None])
        for run in np.flatnonzero(self.laid_out):
            members[run], micro[run] = self._laid_out(
                int(run), update, position[run], tokens[run], {} if dealt is None else dealt
            )
        return members, micro

    def _laid_out(
        self,
        run: int,
        update: int,
        position: NDArray[np.intp],
        tokens: FloatArray,
        dealt: dict[int, NDArray[np.intp]],
    ) -> tuple[NDArray[np.bool_], NDArray[np.intp]]:
        """One run's mini-batch and micro-batches [B, G] in verl's V1 layout: the batch (in the
        run's order) dealt to the ranks, each rank's consecutive share of the mini-batch, cut into
        micro_batches equal parts or by the token budget; micro-batch m of rank q is q M + m."""
        ranks, mini = int(self.ranks[run]), int(self.mini_batches[run])
        seq = (tokens.ravel() + self.prompt_tokens[run]).astype(np.int64)
        if run not in dealt:  # the batch in the run's order (ranks > 1: the batch's own), dealt to ranks
            by_position = np.argsort(position.ravel(), kind="stable")
            dealt[run] = by_position[rank_order(seq[by_position].tolist(), ranks)]
        order = dealt[run]
        share = len(order) // ranks // mini  # a rank's responses in each mini-batch
        members, micro = np.zeros(len(seq), bool), np.zeros(len(seq), np.intp)
        shares = [order[(q * mini + update % mini) * share :][:share] for q in range(ranks)]
        budget = int(self.token_budget[run]) if self.per_micro_batch[run] else 0  # else no normaliser sees it
        if budget:
            layout = token_budget_parts([seq[s].tolist() for s in shares], budget)
            count = len(layout[0])
        else:
            count = int(self.micro_batches[run])
            each = share // count
            layout = [[list(range(m * each, (m + 1) * each)) for m in range(count)] for _ in shares]
        for q, (indices, parts) in enumerate(zip(shares, layout, strict=True)):
            members[indices] = True
            for m, part in enumerate(parts):
                micro[indices[part]] = q * count + m
        return members.reshape(position.shape), micro.reshape(position.shape)

    # Each stage is computed on the whole batch and kept for its own runs: on these small arrays
    # that is cheaper than gathering and scattering each group's rows, and a row's numbers do not
    # depend on the other rows.

    def sampled(
        self, batch: Batch, theta: FloatArray, config: Config, refill: Sequence[np.random.Generator] | None
    ) -> tuple[Batch, FloatArray]:
        """The batch every run trains on (its sampler's, from the batch drawn with the step's noise;
        `refill` is each run's refill stream, for samplers that draw more) and the tokens every
        run's sampler generated [R]."""
        tokens = generated(batch)
        if all(isinstance(stage, OneDraw) for stage, _ in self.samplers_by):
            return batch, tokens
        assert refill is not None, "a sampler that draws more needs the runs' refill streams"
        prompt_index, right = batch.prompt_index.copy(), batch.right.copy()
        length, stopped = batch.length.copy(), batch.stopped.copy()
        for stage, rows in self.samplers_by:
            if isinstance(stage, OneDraw):
                continue
            index = np.arange(len(theta))[rows]
            chosen, tokens[index] = stage.batch(
                batch.rows(index), theta[index], config, [refill[i] for i in index]
            )
            prompt_index[index], right[index] = chosen.prompt_index, chosen.right
            length[index], stopped[index] = chosen.length, chosen.stopped
        return Batch(prompt_index, right, length, stopped), tokens

    def rewards(self, batch: Batch, config: Config) -> FloatArray:
        return _per_run(self.rewards_by, lambda stage: stage.rewards(batch, config), batch.right.shape)

    def included(self, batch: Batch) -> NDArray[np.bool_]:
        return _per_run(self.selectors_by, lambda stage: stage.included(batch), batch.right.shape, bool)

    def advantages(self, rewards: FloatArray, config: Config, tokens: FloatArray | None = None) -> FloatArray:
        """Every run's advantages [R, B, G]; `tokens` (|o_i|, [R, B, G]) for stages that weigh
        responses by their tokens (`uses_tokens`)."""

        def advantage(stage: Any) -> FloatArray:
            if getattr(stage, "uses_tokens", False):
                if tokens is None:
                    raise ValueError(f"advantage stage {type(stage).__name__} needs the responses' tokens")
                return stage.advantages(rewards, std_eps_of(stage, config), tokens)
            return stage.advantages(rewards, std_eps_of(stage, config))

        return _per_run(self.advantages_by, advantage, rewards.shape)

    def denominators(
        self,
        batch: Batch,
        selected: NDArray[np.bool_],
        config: Config,
        parts: tuple[NDArray[np.bool_], NDArray[np.intp]] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        """(D [R, B, G], n [R]) of every run's normaliser over the responses `selected` into the
        loss, on the whole batch or, given `parts`, on each run's mini-batch (`Plan.parts`; D only
        meaningful there). A per_micro_batch normaliser is taken on each micro-batch, its n times
        the micro-batch count: the mini-batch's loss is the mean of its micro-batches' (each
        micro-batch holds as many responses). A batch_tokens one is the whole batch's, over the
        number of mini-batches."""
        tokens = batch.token_count(config.approach_tokens)
        length_norm = config.length_norm_value

        def of(stage: Any) -> tuple[FloatArray, FloatArray]:
            if parts is None:
                return stage.denominators(tokens, selected, length_norm)
            members, micro = parts
            included = selected & members
            if getattr(stage, "batch_tokens", False):
                denominator, n = stage.denominators(tokens, selected, length_norm)
                return denominator / self.mini_batches[:, None, None], n
            if not getattr(stage, "per_micro_batch", False):
                return stage.denominators(tokens, included, length_norm, members)
            denominator = np.ones(tokens.shape)
            for index in range(int(micro.max()) + 1):
                inside = members & (micro == index)
                denominator = np.where(
                    inside, stage.denominators(tokens, included, length_norm, inside)[0], denominator
                )
            n = stage.denominators(tokens, included, length_norm, members & (micro == 0))[1]
            if not self.laid_out.any():
                return denominator, n * self.micro_batches
            # micro-batches of unequal sizes: the mini-batch's count (a LongestResponse's n, `check_variant`)
            whole = stage.denominators(tokens, included, length_norm, members)[1]
            return denominator, np.where(self.laid_out, whole, n * self.micro_batches)

        def n_of(stage: Any) -> FloatArray:  # a normaliser may give n as one number for every run
            return np.broadcast_to(np.asarray(computed[stage][1], dtype=np.float64), (len(tokens),))

        computed = {stage: of(stage) for stage, _ in self.normalisers_by}
        denominator = _per_run(self.normalisers_by, lambda stage: computed[stage][0], tokens.shape)
        n = _per_run(self.normalisers_by, n_of, (len(tokens),))
        return denominator, n


def check_variant(variant: Variant, config: Config) -> None:
    """InvalidInput unless every stage of the variant fits the configuration (a stage's `check`:
    a schedule's parts divide the batch, a reward's buffer fits the cap)."""
    for kind in variant.names():
        check = getattr(variant.stage(kind), "check", None)
        if check is not None:
            check(config)
    if getattr(variant.schedule, "laid_out", False) and getattr(variant.normaliser, "per_micro_batch", False):
        if not isinstance(variant.normaliser, LongestResponse):
            raise InvalidInput(
                f"ranks and token_budget lay micro-batches out by length (verl's V1 layout): with "
                f"per_micro_batch only for aggregation=seq_mean_token_sum_longest (got "
                f"{variant.names()['normaliser']})"
            )
    objective = variant.names()["objective"]
    if objective in SEQUENCE_OBJECTIVES and variant.names()["kl"] == "k1_reward" and variant.kl.beta > 0:
        raise InvalidInput(
            f"objective={objective} takes one advantage a response: not with kl=k1_reward (per-token ones)"
        )


def _any(rows: Rows) -> bool:
    return isinstance(rows, slice) or len(rows) > 0


def _per_run(
    groups: tuple[tuple[Any, Rows], ...],
    compute: Callable[[Any], Any],
    shape: tuple[int, ...],
    dtype: Any = float,
) -> Any:
    """Each group's stage computed on the whole batch and kept for the group's runs; one group's
    result as it is (a row's numbers do not depend on the other rows either way)."""
    if len(groups) == 1:
        return compute(groups[0][0])
    out = np.empty(shape, dtype)
    for stage, rows in groups:
        out[rows] = compute(stage)[rows]
    return out


def _within(rows: Rows, group: Rows) -> Rows:
    """The runs in both `rows` and `group` (index arrays or slices of every run)."""
    if isinstance(group, slice):
        return rows
    if isinstance(rows, slice):
        return group
    return np.intersect1d(rows, group)


class Adam:
    """Adam (Kingma and Ba, bias-corrected) over every run's parameters, with a step count per run.

    The bias corrections 1 - beta^t (`kernels.power`, not the C library's pow) are taken from a
    table over t, grown as the counts grow (each entry is elementwise: the same bits whatever the
    table's size), so a run's numbers do not depend on how many runs share the array, and nothing
    is sized by the number of updates a run will take.
    """

    def __init__(self, theta: FloatArray, config: Config) -> None:
        self.config = config
        self.moment1, self.moment2 = np.zeros_like(theta), np.zeros_like(theta)
        self.count = np.zeros(theta.shape[0], dtype=np.int64)
        self.table = np.empty((2, 0))  # (1 - beta1^t, 1 - beta2^t) at t = 0, 1, ...

    def _corrections(self, counts: NDArray[np.int64]) -> tuple[FloatArray, FloatArray]:
        """(1 - beta1^t, 1 - beta2^t) [rows, 1] for each row's step count t (0-d when all share one)."""
        largest = int(counts.max())
        if largest >= self.table.shape[1]:
            t = np.arange(max(2 * largest, 1024), dtype=np.float64)
            betas = np.array([[self.config.adam_beta1], [self.config.adam_beta2]])
            self.table = 1 - kernels.power(betas, t)
        if counts[0] == counts[-1] and (counts == counts[0]).all():  # the common case: one count
            return self.table[0, counts[0]], self.table[1, counts[0]]
        return self.table[0, counts][:, None], self.table[1, counts][:, None]

    def step(self, theta: FloatArray, grad: FloatArray, rows: Rows) -> None:
        """One step of the runs `rows` of theta, in place; grad [rows, P + 2] is theirs."""
        c = self.config
        self.count[rows] += 1
        m = self.moment1[rows] * c.adam_beta1 + (1 - c.adam_beta1) * grad
        v = self.moment2[rows] * c.adam_beta2 + (1 - c.adam_beta2) * (grad * grad)
        self.moment1[rows], self.moment2[rows] = m, v
        correction1, correction2 = self._corrections(self.count[rows])
        theta[rows] -= c.lr * (m / correction1) / (np.sqrt(v / correction2) + c.adam_eps)


def batch_statistics(length: FloatArray, rewards: FloatArray, grad: FloatArray) -> dict[str, FloatArray]:
    """The sampled batches' own accuracy and lengths [...]; NaN where a batch has no such response.

    length, rewards [..., B, G], grad [..., P + 2], for any leading axes (runs, or steps and runs).
    `rewards` are each response's correctness (`toyrl.stages.correct`: 0/1, whatever reward the
    variant trains on) and lengths whole numbers, so every sum here is exact in float64: the means
    are derived from three sums (fewer passes over the batch than one reduction per statistic).
    """
    responses = rewards.shape[-2] * rewards.shape[-1]
    group_correct = rewards.sum(axis=-1)
    n_correct = group_correct.sum(axis=-1)
    n_incorrect = responses - n_correct
    length_sum = length.sum(axis=(-2, -1))
    correct_length_sum = (length * rewards).sum(axis=(-2, -1))
    with np.errstate(invalid="ignore", divide="ignore"):
        length_correct = correct_length_sum / n_correct
        length_incorrect = (length_sum - correct_length_sum) / n_incorrect
    uniform = (group_correct == 0) | (group_correct == rewards.shape[-1])
    return {
        "batch_accuracy": n_correct / responses,
        "batch_length_mean": length_sum / responses,
        "batch_length_correct": np.where(n_correct > 0, length_correct, np.nan),
        "batch_length_incorrect": np.where(n_incorrect > 0, length_incorrect, np.nan),
        "zero_variance_fraction": uniform.mean(axis=-1),
        "grad_norm": np.sqrt((grad * grad).sum(axis=-1)),
    }


def run_streams(seed: int) -> list[np.random.Generator]:
    """The run's independent streams, named by `STREAMS`: the first children of SeedSequence(seed)."""
    return [np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(len(STREAMS))]


def noise_block_steps(config: Config, n_runs: int) -> int:
    """Steps of noise drawn (and of metrics evaluated) at a time: NOISE_BLOCK_STEPS, or fewer when a
    step's arrays are large (many prompts, responses or runs), so that each stays near VALUES_PER_BLOCK."""
    per_step = n_runs * (config.prompts + config.batch_prompts * config.group_size)
    return max(1, min(NOISE_BLOCK_STEPS, VALUES_PER_BLOCK // per_step))


def step_noise(
    streams: list[list[np.random.Generator]], config: Config
) -> Iterator[tuple[NDArray[np.intp], FloatArray, FloatArray]]:
    """Each step's (prompt_index [R, B], approach_uniform, length_exponential [R, B, G]).

    Drawn `noise_block_steps` steps at a time per run and stream, so memory stays bounded; a
    stream's draws follow one another whatever their blocks, so a run's numbers do not depend on
    the block size.
    """
    shape = (config.batch_prompts, config.group_size)
    block = noise_block_steps(config, len(streams))
    for start in range(0, config.steps + 1, block):
        n = min(block, config.steps + 1 - start)
        # Every run's draws from its own streams, transformed together, [R, n, ...]: a uniformly
        # random permutation's first B entries (B distinct prompts), approach uniforms, exponentials.
        prompts = [run[1] for run in streams]
        prompt_index = noise.permutation_prefix(prompts, n, config.prompts, config.batch_prompts)
        approach = noise.uniform([run[2] for run in streams], (n, *shape))
        exponential = noise.standard_exponential([run[3] for run in streams], (n, *shape))
        # [R, n, ...] to [n, R, ...]
        prompt_index = np.moveaxis(prompt_index, 0, 1)
        approach, exponential = np.moveaxis(approach, 0, 1), np.moveaxis(exponential, 0, 1)
        for offset in range(n):
            yield prompt_index[offset], approach[offset], exponential[offset]


def step_orders(
    streams: list[list[np.random.Generator]], plan: Plan, config: Config
) -> Iterator[NDArray[np.intp] | None]:
    """Each step's positions of the responses in the orders its updates take them, [R, E, B, G]
    (E = the most orders a run draws per batch; a run that draws fewer repeats its last), or None
    when no run shuffles. Position p of the batch's order (prompt by prompt) is p itself; a
    shuffling run's orders are uniformly random permutations from its own `shuffle` stream, drawn
    only by the runs that shuffle."""
    draws = plan.orders
    if not draws.any():
        while True:
            yield None
    shape = (config.batch_prompts, config.group_size)
    responses = shape[0] * shape[1]
    natural = np.arange(responses).reshape(shape)
    while True:
        positions = np.broadcast_to(natural, (len(draws), int(draws.max()), *shape)).copy()
        for run in np.flatnonzero(draws):
            order = noise.permutation_prefix(streams[run][4], int(draws[run]), responses, responses)
            ranks = np.empty_like(order)
            np.put_along_axis(ranks, order, np.arange(responses)[None], axis=-1)
            positions[run] = ranks[np.minimum(np.arange(positions.shape[1]), len(ranks) - 1)].reshape(
                -1, *shape
            )
        yield positions


class Step(NamedTuple):
    """What one step leaves to the recorder, for every run: the token table of the policy it started
    from, the batch, its rewards, the gradient of the first update [R, P + 2], the fraction of
    tokens clipped, averaged over the updates [R], and the tokens the step's sampler generated [R]."""

    table: TokenTable
    batch: Batch
    rewards: FloatArray
    grad: FloatArray
    clip_fraction: FloatArray
    tokens_sampled: FloatArray


@dataclass(frozen=True)
class Part:
    """The responses one update's loss is over, for every run: which are in it [R, B, G] (selected,
    and in the update's mini-batch), their normaliser's D [R, B, G] and n [R], their scale 1/(D n)
    (0 where not in the loss) and the tokens in the loss [R]."""

    included: NDArray[np.bool_]
    denominator: FloatArray
    n: FloatArray
    scale: FloatArray
    tokens: FloatArray

    @classmethod
    def of(cls, batch: Batch, included: NDArray[np.bool_], denominator: FloatArray, n: FloatArray) -> Part:
        inverse = np.divide(1.0, denominator, out=np.zeros(denominator.shape), where=denominator > 0)
        scale = np.where(included, inverse, 0.0) / n[:, None, None]
        tokens = np.where(included, batch.token_count(1), 0.0).sum(axis=(1, 2))
        return cls(included, denominator, n, scale, tokens)

    def rows(self, rows: Rows) -> Part:
        return Part(*(getattr(self, f.name)[rows] for f in fields(self)))


@dataclass(frozen=True)
class Epoch:
    """What every update on one sampled batch shares: the batch on its own logits (`OwnLogits`:
    tables of its B + 2 logits, gradients scattered back to P + 2), its advantages, the tokens of
    each kind [3, R, B, G] (approach, non-stop, stop), and the token tables of the sampling policy
    (`old`, the ratios' reference) and of the KL's reference policy (`ref`), at those logits; with
    a KL reward (`kl_reward` [R]), the per-token advantages it gives (`token_advantage`)."""

    own: OwnLogits
    advantage: FloatArray
    counts: FloatArray
    old: TokenTable
    ref: TokenTable | None
    token_advantage: TokenAdvantage | None = None

    @classmethod
    def of(
        cls,
        own: OwnLogits,
        advantage: FloatArray,
        old: TokenTable,
        ref: TokenTable | None,
        kl_reward: FloatArray | None = None,
    ) -> Epoch:
        """The epoch of a batch (`own`) sampled from the policy whose table is `old`; `ref` the KL
        term's reference policy's (None: no run has a KL term); both at the batch's own logits."""
        batch = own.batch
        counts = np.empty((3, *batch.length.shape))  # tokens of each kind: 1, L - 1[stopped], 1[stopped]
        counts[0], counts[1], counts[2] = 1.0, batch.length - batch.stopped, batch.stopped
        for table in (old, ref):  # taken now, once, so that every update's rows share them
            if table is not None:
                table.log_both  # noqa: B018
        tokens = None
        if kl_reward is not None and (kl_reward > 0).any():
            assert ref is not None
            tokens = K1Reward.token_advantages(advantage, kl_reward, old, ref, batch, counts)
        return cls(own, advantage, counts, old, ref, tokens)

    def coefficients(
        self, objective: Any, rows: Rows, theta: FloatArray, plan: Plan, part: Part
    ) -> tuple[Coefficients, FloatArray, TokenTable]:
        """(coefficients of every token kind, tokens clipped [r], the token table) of the runs
        `rows`, which share the objective class `objective`, at the policy theta [r, P + 2], on the
        responses of `part` (these runs')."""
        own = self.own.rows(rows)
        table = own.table(theta)
        old, beta = self.old.rows(rows), plan.beta[rows]
        kl = bool((beta > 0).any())
        kl_positive = kl_negative = None
        if kl:
            assert self.ref is not None
            ref = self.ref.rows(rows)
            kl_positive, kl_negative = kernels.exp(ref.log_both - table.log_both) - 1
        ratio_positive, ratio_negative = kernels.exp(table.log_both - old.log_both)
        weighted = plan.kl_ratio_weighted[rows]
        if kl and weighted.any():  # d(rho k3) / d log pi = rho log(pi_ref / pi), per logit and outcome
            assert self.ref is not None and kl_positive is not None and kl_negative is not None
            ref = self.ref.rows(rows)
            kl_positive = np.where(
                weighted[:, None], ratio_positive * (ref.log_positive - table.log_positive), kl_positive
            )
            kl_negative = np.where(
                weighted[:, None], ratio_negative * (ref.log_negative - table.log_negative), kl_negative
            )
        per_token = None
        if self.token_advantage is not None and (plan.kl_reward[rows] > 0).all():
            per_token = self.token_advantage.rows(rows)
        update = Update(
            own.batch,
            self.advantage[rows],
            part.included,
            part.scale,
            self.counts[:, rows],
            ratio_positive,
            ratio_negative,
            kl_positive,
            kl_negative,
            per_token,
        )
        parameters = {key: values[rows] for key, values in plan.objective_parameters[objective].items()}
        coefficients, clipped = objective.coefficients(update, parameters, beta if kl else None)
        return coefficients, clipped, table

    def gradient(
        self, objective: Any, rows: Rows, theta: FloatArray, plan: Plan, part: Part
    ) -> tuple[FloatArray, FloatArray]:
        """(loss gradient [r, P + 2], fraction of the part's tokens clipped [r]) of the runs `rows`,
        which share the objective class `objective`, at the policy theta [r, P + 2] of those rows.
        Runs with a KL reward and runs without are computed apart (per-token advantages or not)."""
        if self.token_advantage is not None:
            index = np.arange(len(plan.kl_reward))[rows]
            per_token = plan.kl_reward[index] > 0
            if per_token.any() and not per_token.all():
                grad, fraction = np.empty(theta.shape), np.empty(len(index))
                for inside in (per_token, ~per_token):
                    grad[inside], fraction[inside] = self.gradient(
                        objective, index[inside], theta[inside], plan, part
                    )
                return grad, fraction
        part = part.rows(rows)
        coefficients, clipped, table = self.coefficients(objective, rows, theta, plan, part)
        fraction = np.divide(clipped, part.tokens, out=np.zeros(len(clipped)), where=part.tokens > 0)
        own = self.own.rows(rows)
        return own.scatter(policy_gradient(coefficients, own.batch, table), theta.shape[-1]), fraction


def train_step(
    theta: FloatArray,
    adam: Adam,
    noise: tuple[IndexArray, FloatArray, FloatArray],
    plan: Plan,
    config: Config,
    theta_ref: FloatArray,
    apply: bool = True,
    positions: NDArray[np.intp] | None = None,
    refill: Sequence[np.random.Generator] | None = None,
) -> Step:
    """One step of every run, in place on theta [R, P + 2] (unless not `apply`: the last row's batch
    and the gradient of its first update are evaluated, not applied). `noise` is the step's
    (prompt_index, approach uniforms, length exponentials); `theta_ref` the KL term's reference
    policy (the initial one); `positions` the step's orders of the responses (`step_orders`; None:
    the batch's own order); `refill` each run's refill stream (for a sampler that draws more)."""
    old = TokenTable.of(theta, rates=True)
    drawn = sample_batch(theta, *noise, config.cap, old)
    batch, tokens_sampled = plan.sampled(drawn, theta, config, refill)
    rewards = plan.rewards(batch, config)
    selected = plan.included(batch)
    advantage = plan.advantages(rewards, config, batch.token_count(config.approach_tokens))  # once a batch

    dealt: dict[int, NDArray[np.intp]] = {}  # the laid-out runs' orders over their ranks, this step's

    def part(update: int) -> Part:
        """The responses of update `update` (its mini-batch) and their normalisers."""
        if plan.whole_batch:
            denominator, n = plan.denominators(batch, selected, config)
            return Part.of(batch, selected, denominator, n)
        parts = plan.parts(update, positions, batch.token_count(config.approach_tokens), dealt)
        denominator, n = plan.denominators(batch, selected, config, parts)
        return Part.of(batch, selected & parts[0], denominator, n)

    first = part(0)
    clip_sum = np.zeros(len(theta))

    # The first update is on-policy: ratio 1, so every token of a response has weight w = A / D and
    # the ramble's scores sum in closed form; with a KL term, the general form at ratio 1.
    grad = policy_gradient(
        Coefficients(weights(advantage, first.denominator, first.included), n=first.n), batch, old
    )
    kl_runs = (plan.beta > 0) | (plan.kl_reward > 0)
    later = apply and (plan.updates > 1).any()
    if kl_runs.any() or later:
        own = OwnLogits.of(batch, theta.shape[-1])  # later tables: of the batch's B + 2 logits only
        ref = own.table(theta_ref) if kl_runs.any() else None
        epoch = Epoch.of(own, advantage, own.table(theta), ref, plan.kl_reward)
    if kl_runs.any():
        for objective, group in plan.objectives_by:
            rows = _within(slice(None) if kl_runs.all() else np.flatnonzero(kl_runs), group)
            if _any(rows):
                grad[rows], _ = epoch.gradient(objective, rows, theta[rows], plan, first)
    if not apply:
        return Step(old, batch, rewards, grad, clip_sum, tokens_sampled)
    adam.step(theta, plan.clipped(grad, slice(None)), slice(None))
    for update in range(1, int(plan.updates.max())):  # later updates: ratios move from 1
        active = plan.updates > update
        current = first if plan.whole_batch else part(update)
        for objective, group in plan.objectives_by:
            rows = _within(slice(None) if active.all() else np.flatnonzero(active), group)
            if not _any(rows):  # no run of this objective takes this many updates
                continue
            later_grad, clip_fraction = epoch.gradient(objective, rows, theta[rows], plan, current)
            clip_sum[rows] += clip_fraction
            adam.step(theta, plan.clipped(later_grad, rows), rows)
    return Step(old, batch, rewards, grad, clip_sum / plan.updates, tokens_sampled)


class Trajectory(NamedTuple):
    """Every run's recorded metrics: `columns[name]` [R, steps + 1] for each of EXACT_COLUMNS and
    BATCH_COLUMNS, run r being (names[r], seeds[r])."""

    names: list[str]
    seeds: list[int]
    columns: dict[str, FloatArray]


class Recorder:
    """Records every step's policy, gradient and batch, and turns them into metrics a block of steps
    at a time: exact metrics depend on theta alone, batch statistics on the batch and gradient
    alone, so both are evaluated for many steps in one call."""

    def __init__(self, config: Config, runs: Sequence[tuple[Variant, int]], sampled: bool) -> None:
        n_runs, self.steps, self.config, self.sampled = len(runs), config.steps, config, sampled
        self.names, self.seeds = [v.name for v, _ in runs], [seed for _, seed in runs]
        self.block = noise_block_steps(config, n_runs)
        theta_shape = (n_runs, config.prompts + 2)
        self.states, self.grads = np.empty((self.block, *theta_shape)), np.empty((self.block, *theta_shape))
        # sigma(theta_t) and sigma(-theta_t), from the step's token table (sampled runs only)
        self.sigma = np.empty((2, self.block, *theta_shape)) if sampled else None
        shape = (self.block, n_runs, config.batch_prompts, config.group_size)
        self.lengths, self.correct = np.zeros(shape), np.zeros(shape)  # batch statistics count correctness
        self.clip_fractions = np.zeros((self.block, n_runs))
        self.tokens_sampled = np.zeros((self.block, n_runs))
        self.columns = {name: np.empty((n_runs, self.steps + 1)) for name in EXACT_COLUMNS + BATCH_COLUMNS}

    def policy(self, step: int, theta: FloatArray) -> None:
        """Keep theta_t, the policy of row `step` (before the step changes it)."""
        self.states[step % self.block] = theta

    def record(self, step: int, grad: FloatArray, sampled: Step | None = None) -> None:
        """The step's gradient (of its first update) and, for a sampled step, its batch."""
        slot = step % self.block
        self.grads[slot] = grad
        if sampled is not None:
            assert self.sigma is not None
            self.sigma[0, slot], self.sigma[1, slot] = sampled.table.probability, sampled.table.complement
            self.lengths[slot], self.correct[slot] = sampled.batch.length, correct(sampled.batch, self.config)
            self.clip_fractions[slot] = sampled.clip_fraction
            self.tokens_sampled[slot] = sampled.tokens_sampled
        if slot == self.block - 1 or step == self.steps:
            first, used = step - slot, slot + 1
            sigma = None if self.sigma is None else (self.sigma[0, :used], self.sigma[1, :used])
            metrics = exact_metrics(self.states[:used], self.config.cap, self.config.min_length, sigma)
            metrics |= batch_statistics(self.lengths[:used], self.correct[:used], self.grads[:used])
            metrics["clip_fraction"] = self.clip_fractions[:used]
            metrics["tokens_sampled"] = self.tokens_sampled[:used]
            if not self.sampled:
                metrics |= {name: np.full((used, len(self.names)), np.nan) for name in SAMPLED_COLUMNS}
            for name, values in metrics.items():
                self.columns[name][:, first : step + 1] = values.T

    def trajectory(self) -> Trajectory:
        return Trajectory(self.names, self.seeds, self.columns)


def simulate(
    config: Config,
    runs: Sequence[tuple[Variant, int]],
    on_step: Callable[[int, FloatArray], None] | None = None,
) -> Trajectory:
    """Train every (variant, seed) of `runs` together, `train_step` after `train_step`.

    `on_step(step, theta)` is called with every policy state theta_t [R, P + 2] (do not modify it).
    """
    for variant, _ in runs:
        check_variant(variant, config)
    plan = Plan.of([variant for variant, _ in runs])
    streams = [run_streams(seed) for _, seed in runs]
    theta = np.stack([initial_theta(config, init) for init, *_ in streams])
    theta_ref = theta.copy()  # the KL term's reference: the initial policy
    adam = Adam(theta, config)
    recorder = Recorder(config, runs, sampled=True)
    draws, orders = step_noise(streams, config), step_orders(streams, plan, config)
    with np.errstate(all="ignore"):  # a run that leaves finite numbers is stopped by check_finite
        for step in range(config.steps + 1):
            if on_step is not None:
                on_step(step, theta)
            recorder.policy(step, theta)
            sampled = train_step(
                theta,
                adam,
                next(draws),
                plan,
                config,
                theta_ref,
                apply=step < config.steps,
                positions=next(orders),
                refill=[run[5] for run in streams],
            )
            check_finite(step, theta, sampled.grad, runs, config)
            recorder.record(step, sampled.grad, sampled)
    return recorder.trajectory()


LOGIT_OVERFLOW = 700.0  # exp(x) overflows float64 beyond x = 709.78


class Diverged(InvalidInput):
    """A run whose policy or gradient left finite numbers (`check_finite`)."""


def check_finite(
    step: int, theta: FloatArray, grad: FloatArray, runs: Sequence[tuple[Variant, int]], config: Config
) -> None:
    """Diverged, naming the first such run, the step and the likely cause, unless the gradient of
    step `step` (and its square) and the policy after its update are finite for every run: once a
    step, over the [R, P + 2] arrays only, changing no number."""
    # the square too: Adam's second moment, where a gradient beyond 1e154 leaves the policy unmoved
    with np.errstate(over="ignore"):
        finite_grad = np.asarray(np.isfinite(np.square(grad)).all(axis=-1))
    finite_theta = np.asarray(np.isfinite(theta).all(axis=-1))
    if finite_grad.all() and finite_theta.all():
        return
    run = int(np.flatnonzero(~(finite_grad & finite_theta))[0])
    variant, seed = runs[run]
    what = (
        "its policy is not finite after the update"
        if finite_grad[run]
        else "its gradient (or its square, Adam's second moment) is not finite"
    )
    lr = f"a learning rate too large for this objective (--lr {config.lr:g}"
    if not finite_theta[run]:
        cause = f"{lr})"
    elif (largest := float(np.abs(theta[run]).max())) > LOGIT_OVERFLOW:  # exp of the logits overflows
        cause = f"{lr}; logits up to {largest:.3g})"
    else:
        cause = (
            "a normaliser or an advantage scale too small for float64 "
            f"(--length-norm {config.length_norm:g}, --std-eps {config.std_eps:g})"
        )
    raise Diverged(
        f"variant {variant.name}, seed {seed} diverged at step {step}: {what}; likely cause: {cause}"
    )
