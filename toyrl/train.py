"""The training loop: one step of many runs, top to bottom, and the loop that records it.

Article, "Toy run": each step samples B distinct prompts and G responses to each, scores them, and
takes the variant's updates with Adam (one on-policy update for the article's variants).
`train_step` reads like cleanrl's loop: sample -> reward -> select -> advantage (once per sampled
batch) -> for each update of the schedule: normaliser -> objective -> gradient -> Adam. Every
stage is the variant's own (`toyrl.stages`), and sees its kind's settings of the configuration
alone (`toyrl.stages.Settings`). A chunk's runs share one sampler, objective, KL term and schedule
(the kinds whose record says so: `chunk_key`), called once with their own parameters; the reward,
selector, advantage and normaliser may differ from run to run, runs sharing one computed together.

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

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from toyrl import kernels, noise
from toyrl.config import Config, InvalidInput
from toyrl.layout import equal_cuts, rank_order, token_budget_parts, worst_tries
from toyrl.objective import Variant, rows_by
from toyrl.policy import (
    COMPILED,
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
from toyrl.refusals import Refusal, refused_by, values
from toyrl.stages import (
    KIND,
    KL,
    SEQUENCE_OBJECTIVES,
    Objective,
    Sampler,
    TokenAdvantage,
    Update,
    advantages_of,
    correct,
    included_of,
    std_eps_of,
    weights,
)
from toyrl.stages.normaliser import part_denominators, per_micro_batch

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
ALL = slice(None)  # every run


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


def _stage_groups(keys: list[Any]) -> tuple[tuple[Any, Rows], ...]:
    """`_groups` for `_per_run`: a group of consecutive runs (the runs of a variant, say) as the slice
    of them, which `_per_run` reads and writes without a gather (the same numbers)."""

    def consecutive(rows: Rows) -> Rows:
        if isinstance(rows, slice) or int(rows[-1]) - int(rows[0]) + 1 != len(rows):  # rows increase
            return rows
        return slice(int(rows[0]), int(rows[-1]) + 1)

    return tuple((key, consecutive(rows)) for key, rows in _groups(keys))


def chunk_key(variant: Variant) -> dict[str, Any]:
    """The stages a chunk's runs share, by kind (the kinds whose record says `chunk`: sampler,
    objective, KL term, schedule): a chunk calls them once, with their own parameters; the stages
    of the other kinds may differ from run to run. The KL term and the objective count only where
    they act (None elsewhere): a run without a KL term that takes one update a batch is never
    handed to its objective (its update is the on-policy one, in closed form), so such runs share
    a chunk whatever objective they name."""
    kl = variant.kl if variant.kl.beta > 0 else None
    acting = {"kl": kl, "objective": variant.objective if kl is not None or variant.updates > 1 else None}
    return {
        kind.name: acting[kind.name] if kind.name in acting else variant.stage(kind.name)
        for kind in KIND.values()
        if kind.chunk
    }


def chunks_of(variants: Sequence[Variant]) -> list[Rows]:
    """The runs grouped into chunks of one `chunk_key`, in the order of their first runs (a slice
    when every run shares one)."""
    return [rows for _, rows in _groups([tuple(chunk_key(v).values()) for v in variants])]


@dataclass(frozen=True)
class Plan:
    """One chunk of runs: the sampler, objective and KL term they share, the settings of their
    schedule, and the runs grouped by their stage of each kind a run has its own of (each group's
    stage computed together)."""

    sampler: Sampler
    objective: Objective | None  # None where the runs name several (they never act: `chunk_key`)
    kl: KL | None  # None: no KL term (beta 0)
    updates: int  # optimiser updates per batch: epochs x mini-batches
    mini_batches: int
    micro_batches: int
    ranks: int  # verl's V1 layout (`toyrl.layout`): data-parallel ranks, ...
    token_budget: int  # ... each micro-batch's tokens (0: micro_batches equal parts) ...
    prompt_tokens: int  # ... and each prompt's tokens, counted in a sequence's length
    orders: int  # random orders of the responses drawn per batch
    max_grad_norm: float  # each update's gradient clipped to this norm (inf: not clipped)
    groups: dict[str, tuple[tuple[Any, Rows], ...]]  # by kind not shared by the chunk: (stage, its runs)
    per_micro_batch: NDArray[np.bool_]  # whether each run's normaliser is taken on each micro-batch [R]

    @classmethod
    def of(cls, variants: Sequence[Variant]) -> Plan:
        shared = chunk_key(variants[0])
        if len({tuple(chunk_key(v).values()) for v in variants}) != 1:
            raise ValueError(f"the runs of a chunk share their {', '.join(shared)} (`chunks_of`)")
        schedule = shared["schedule"]
        objectives = {v.objective for v in variants}  # one, or several that never act (`chunk_key`)
        return cls(
            sampler=shared["sampler"],
            objective=objectives.pop() if len(objectives) == 1 else None,
            kl=shared["kl"],
            updates=schedule.updates,
            mini_batches=schedule.mini_batches,
            micro_batches=schedule.micro_batches,
            ranks=schedule.ranks,
            token_budget=schedule.token_budget,
            prompt_tokens=schedule.prompt_tokens,
            orders=schedule.orders,
            max_grad_norm=schedule.max_grad_norm or np.inf,
            groups={
                kind: _stage_groups([v.stage(kind) for v in variants]) for kind in KIND if kind not in shared
            },
            per_micro_batch=np.array([per_micro_batch(v.normaliser) for v in variants]),
        )

    @functools.cached_property  # the plan is frozen: taken once (each step asks)
    def whole_batch(self) -> bool:
        """Whether every update is on the whole batch, in one part (no mini- or micro-batches): its
        normalisers are then taken once a batch."""
        return self.mini_batches == 1 and self.micro_batches == 1 and not self.laid_out.any()

    @property
    def laid_out(self) -> NDArray[np.bool_]:
        """Which runs' mini- and micro-batches the responses' lengths decide [R] (`toyrl.layout`):
        the ranks' dealing decides a mini-batch's responses when there are several, a micro-batch's
        only for a normaliser that sees it (one mini-batch holds every response, however dealt)."""
        dealt = (self.ranks > 1) & ((self.mini_batches > 1) | self.per_micro_batch)
        return dealt | ((self.token_budget > 0) & self.per_micro_batch)

    def clipped(self, grad: FloatArray) -> FloatArray:
        """The runs' gradients [R, P + 2] scaled to at most max_grad_norm, as torch's
        clip_grad_norm_ (coefficient max_norm / (norm + 1e-6), at most 1); as they are if none."""
        if np.isinf(self.max_grad_norm):
            return grad
        norm = np.sqrt((grad * grad).sum(axis=-1))
        return grad * np.minimum(1.0, self.max_grad_norm / (norm + 1e-6))[:, None]

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
        size = shape[-2] * shape[-1] // self.mini_batches  # responses per mini-batch
        if positions is None:
            position = np.broadcast_to(np.arange(shape[-2] * shape[-1]).reshape(shape[-2:]), shape)
        else:
            position = positions[:, min(update // self.mini_batches, positions.shape[1] - 1)]
        members = position // size == update % self.mini_batches
        micro = position % size // (size // self.micro_batches)
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
        ranks, mini = self.ranks, self.mini_batches
        budget = self.token_budget if self.per_micro_batch[run] else 0  # else no normaliser sees it
        if run not in dealt or budget:  # the lengths matter
            seq = (tokens.ravel() + self.prompt_tokens).astype(np.int64)
        if run not in dealt:  # the batch in the run's order (ranks > 1: the batch's own), dealt to ranks
            by_position = np.argsort(position.ravel(), kind="stable")
            dealt[run] = by_position[rank_order(seq[by_position], ranks)]
        # Rank q's share of the mini-batch [ranks, share]: its part's (update % mini)-th cut.
        shares = dealt[run].reshape(ranks, mini, -1)[:, update % mini]
        if budget:
            layout = token_budget_parts(seq[shares].tolist(), budget)
            count = len(layout[0])
            micro_of = np.empty(shares.shape, np.intp)
            for q, parts in enumerate(layout):
                for m, part in enumerate(parts):
                    micro_of[q, part] = q * count + m
        else:
            micro_of = equal_cuts(ranks, shares.shape[1], self.micro_batches)
        members, micro = np.zeros(position.size, bool), np.zeros(position.size, np.intp)
        members[shares] = True
        micro[shares] = micro_of
        return members.reshape(position.shape), micro.reshape(position.shape)

    # Each of the stages that vary along the runs is computed on the whole batch and kept for its
    # own runs: on these small arrays that is cheaper than gathering and scattering each group's
    # rows, and a row's numbers do not depend on the other rows. Each stage sees its kind's own
    # settings of the configuration (`toyrl.stages.Settings`).

    def sampled(
        self, batch: Batch, theta: FloatArray, config: Config, refill: Sequence[np.random.Generator] | None
    ) -> tuple[Batch, FloatArray]:
        """The batch the runs train on (the sampler's, from the batch drawn with the step's noise;
        `refill` is each run's refill stream, for samplers that draw more) and the tokens it
        generated [R]."""
        settings = KIND["sampler"].settings_of(config)
        return self.sampler.batch(batch, theta, settings, () if refill is None else refill)

    def rewards(self, batch: Batch, config: Config) -> FloatArray:
        settings = KIND["reward"].settings_of(config)
        return _per_run(
            self.groups["reward"], lambda stage: stage.rewards(batch, settings), batch.right.shape
        )

    def included(self, batch: Batch, rewards: FloatArray | None = None) -> NDArray[np.bool_]:
        """Every run's responses in the loss [R, B, G]; `rewards` [R, B, G] for selectors by them
        (`uses_rewards`)."""
        return _per_run(
            self.groups["selector"], lambda stage: included_of(stage, batch, rewards), batch.right.shape, bool
        )

    def advantages(self, rewards: FloatArray, config: Config, tokens: FloatArray | None = None) -> FloatArray:
        """Every run's advantages [R, B, G]; `tokens` (|o_i|, [R, B, G]) for stages that weigh
        responses by their tokens (`uses_tokens`)."""
        settings = KIND["advantage"].settings_of(config)

        def advantage(stage: Any) -> FloatArray:
            return advantages_of(stage, rewards, std_eps_of(stage, settings), tokens)

        return _per_run(self.groups["advantage"], advantage, rewards.shape)

    def denominators(
        self,
        batch: Batch,
        selected: NDArray[np.bool_],
        config: Config,
        parts: tuple[NDArray[np.bool_], NDArray[np.intp]] | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        """(D [R, B, G], n [R]) of every run's normaliser over the responses `selected` into the
        loss, on the whole batch or, given `parts`, on each run's mini-batch (`Plan.parts`; D only
        meaningful there), as the normaliser takes itself on them (`part_denominators`: per
        micro-batch, or the whole batch's tokens, by its own flags)."""
        settings = KIND["normaliser"].settings_of(config)
        tokens = batch.token_count(settings.approach_tokens)
        length_norm = settings.length_norm_value
        groups = self.groups["normaliser"]
        cuts, laid_out = (self.mini_batches, self.micro_batches), self.laid_out

        def of(stage: Any) -> tuple[FloatArray, FloatArray | float]:
            return part_denominators(stage, tokens, selected, length_norm, parts, *cuts, laid_out)

        def n_of(stage: Any) -> FloatArray:  # a normaliser may give n as one number for every run
            return np.broadcast_to(np.asarray(computed[stage][1], dtype=np.float64), (len(tokens),))

        computed = {stage: of(stage) for stage, _ in groups}
        denominator = _per_run(groups, lambda stage: computed[stage][0], tokens.shape)
        n = _per_run(groups, n_of, (len(tokens),))
        return denominator, n


# verl's V1 layout (`toyrl.layout`), measured on a 2-core x86-64 machine: dealing a batch to its
# ranks about 9 us a response (once a step), each count the token budget tries about 16 us a
# response of the mini-batch; an update's tries at worst are bounded (MAX_LAYOUT_MERGES, about
# 30 minutes at worst, a few seconds typically), before any work.
DEAL_SECONDS = 9e-6
MERGE_SECONDS = 16e-6
MAX_LAYOUT_MERGES = 100_000_000


def layout_work(variant: Variant, config: Config) -> tuple[int, int, int]:
    """(responses a run's step deals to its ranks, responses a run's update lays out by the token
    budget at best (one count tried) and at worst (`toyrl.layout.worst_tries`)): the work of
    verl's V1 layout, which `Plan.parts` does for every update of a laid-out run."""
    schedule = variant.schedule
    responses = config.batch_prompts * config.group_size
    micro = per_micro_batch(variant.normaliser)
    dealt = responses if schedule.ranks > 1 and (schedule.mini_batches > 1 or micro) else 0
    if not (schedule.token_budget and micro):
        return dealt, 0, 0  # micro-batches no normaliser sees are not laid out
    share = responses // schedule.ranks // schedule.mini_batches
    shortest = schedule.prompt_tokens + 1 + config.approach_tokens  # a response has a token at least
    tries = worst_tries(share, schedule.token_budget, shortest)
    laid_out = responses // schedule.mini_batches  # every rank's share, each count tried
    return dealt, laid_out, tries * laid_out


def layout_seconds(variant: Variant, config: Config) -> tuple[float, float]:
    """Rough core-seconds a run's step spends laying its batch out (`layout_work`): at best and at
    worst (every update's token budget trying every count it may)."""
    dealt, best, worst = layout_work(variant, config)
    updates = variant.updates
    return (
        DEAL_SECONDS * dealt + MERGE_SECONDS * best * updates,
        DEAL_SECONDS * dealt + MERGE_SECONDS * worst * updates,
    )


def check_variant(variant: Variant, config: Config) -> None:
    """InvalidInput unless every stage of the variant fits the configuration (a stage's `check`:
    a schedule's parts divide the batch, a reward's buffer fits the cap) and its layout's work at
    worst fits its bound (`layout_work`)."""
    for kind in KIND.values():  # in step order
        check = getattr(variant.stage(kind.name), "check", None)
        if check is not None:
            check(kind.settings_of(config))
    schedule = variant.schedule
    share = config.batch_prompts * config.group_size // schedule.ranks // schedule.mini_batches
    names = variant.names()
    stages = {kind: variant.stage(kind) for kind in names}
    computed = names | {"merges": layout_work(variant, config)[2], "share": share}
    message = refused_by(VARIANT_REFUSALS, values(config, stages, computed))
    if message:
        raise InvalidInput(message)


# `check_variant`'s refusals across a variant's stages, declared once as data (`toyrl.refusals`;
# the page evaluates them too, with the layout's `merges` and `share`, which both compute)
VARIANT_REFUSALS = (
    Refusal(
        "(schedule.ranks > 1 or schedule.token_budget > 0) and normaliser.per_micro_batch == True "
        "and normaliser != 'seq_mean_token_sum_longest'",
        "ranks and token_budget lay micro-batches out by length (verl's V1 layout): with per_micro_batch "
        "only for aggregation=seq_mean_token_sum_longest (got {normaliser})",
    ),
    Refusal(
        f"merges > {MAX_LAYOUT_MERGES}",
        "token_budget={schedule.token_budget} lays out shares of {share:,} responses: up to {merges:,} "
        f"merges an update; the limit is {MAX_LAYOUT_MERGES:,}: use fewer responses a rank's "
        "mini-batch (batch_prompts x group_size / (ranks x mini_batches))",
    ),
    Refusal(
        f"objective in {SEQUENCE_OBJECTIVES!r} and kl == 'k1_reward' and kl.beta > 0",
        "objective={objective} takes one advantage a response: not with kl=k1_reward (per-token ones)",
    ),
)


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


class Adam:
    """Adam (Kingma and Ba, bias-corrected) over a chunk's parameters [R, P + 2], whose runs take
    their updates together.

    The bias corrections 1 - beta^t (`kernels.power`, not the C library's pow) are taken from a
    table over t, grown as the count grows (each entry is elementwise: the same bits whatever the
    table's size), so nothing is sized by the number of updates a run will take.
    """

    def __init__(self, theta: FloatArray, config: Config) -> None:
        self.config = config
        self.moment1, self.moment2 = np.zeros_like(theta), np.zeros_like(theta)
        self.count = 0
        self.table = np.empty((2, 0))  # (1 - beta1^t, 1 - beta2^t) at t = 0, 1, ...

    def step(self, theta: FloatArray, grad: FloatArray) -> None:
        """One step of theta, in place, along grad [R, P + 2]."""
        c = self.config
        self.count += 1
        if self.count >= self.table.shape[1]:
            t = np.arange(max(2 * self.count, 1024), dtype=np.float64)
            betas = np.array([[c.adam_beta1], [c.adam_beta2]])
            self.table = 1 - kernels.power(betas, t)
        correction1, correction2 = self.table[0, self.count], self.table[1, self.count]
        compiled = kernels.compiled_module(COMPILED)
        if compiled is not None and grad.shape == theta.shape:  # the same operations, one loop
            compiled.adam(
                theta,
                self.moment1,
                self.moment2,
                grad,
                c.adam_beta1,
                c.adam_beta2,
                c.lr,
                correction1,
                correction2,
                c.adam_eps,
            )
            return
        self.moment1 = self.moment1 * c.adam_beta1 + (1 - c.adam_beta1) * grad
        self.moment2 = self.moment2 * c.adam_beta2 + (1 - c.adam_beta2) * (grad * grad)
        theta -= c.lr * (self.moment1 / correction1) / (np.sqrt(self.moment2 / correction2) + c.adam_eps)


BATCH_STATISTICS = (  # `batch_statistics`'s keys, in order
    "batch_accuracy",
    "batch_length_mean",
    "batch_length_correct",
    "batch_length_incorrect",
    "zero_variance_fraction",
    "grad_norm",
)


def batch_statistics(length: FloatArray, rewards: FloatArray, grad: FloatArray) -> dict[str, FloatArray]:
    """The sampled batches' own accuracy and lengths [...]; NaN where a batch has no such response.

    length, rewards [..., B, G], grad [..., P + 2], for any leading axes (runs, or steps and runs).
    `rewards` are each response's correctness (`toyrl.stages.correct`: 0/1, whatever reward the
    variant trains on) and lengths whole numbers, so every sum here is exact in float64: the means
    are derived from three sums (fewer passes over the batch than one reduction per statistic).
    """
    compiled = kernels.compiled_module(COMPILED)
    if compiled is not None:  # the same numbers, one pass (`toyrl.policy_compiled.batch_statistics`)
        leading, (prompts, group), width = length.shape[:-2], length.shape[-2:], grad.shape[-1]
        out = np.empty((6, int(np.prod(leading))))
        compiled.batch_statistics(
            np.ascontiguousarray(length).reshape(-1, prompts, group),
            np.ascontiguousarray(rewards).reshape(-1, prompts, group),
            np.ascontiguousarray(grad).reshape(-1, width),
            out,
        )
        return dict(zip(BATCH_STATISTICS, out.reshape(6, *leading), strict=True))
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
    """Each step's positions of the chunk's responses in the orders its updates take them,
    [R, E, B, G] (E = the orders the schedule draws per batch), or None when it does not shuffle.
    Position p of the batch's order (prompt by prompt) is p itself; a run's orders are uniformly
    random permutations from its own `shuffle` stream."""
    if not plan.orders:
        while True:
            yield None
    shape = (config.batch_prompts, config.group_size)
    responses = shape[0] * shape[1]
    while True:
        positions = np.empty((len(streams), plan.orders, *shape), dtype=np.intp)
        for run, streams_of_run in enumerate(streams):
            order = noise.permutation_prefix(streams_of_run[4], plan.orders, responses, responses)
            ranks = np.empty_like(order)
            np.put_along_axis(ranks, order, np.arange(responses)[None], axis=-1)
            positions[run] = ranks.reshape(-1, *shape)
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
    (0 where not in the loss) and the tokens in the loss [R] (these two taken when first asked for:
    an on-policy update needs neither)."""

    batch: Batch
    included: NDArray[np.bool_]
    denominator: FloatArray
    n: FloatArray

    @classmethod
    def of(cls, batch: Batch, included: NDArray[np.bool_], denominator: FloatArray, n: FloatArray) -> Part:
        return cls(batch, included, denominator, n)

    @functools.cached_property
    def scale(self) -> FloatArray:
        denominator = self.denominator
        inverse = np.divide(1.0, denominator, out=np.zeros(denominator.shape), where=denominator > 0)
        return np.where(self.included, inverse, 0.0) / self.n[:, None, None]

    @functools.cached_property
    def tokens(self) -> FloatArray:
        return np.where(self.included, self.batch.token_count(1), 0.0).sum(axis=(1, 2))

    def rows(self, rows: Rows) -> Part:
        return Part(self.batch.rows(rows), self.included[rows], self.denominator[rows], self.n[rows])


@dataclass(frozen=True)
class Epoch:
    """What every update on one sampled batch shares: the batch on its own logits (`OwnLogits`:
    tables of its B + 2 logits, gradients scattered back to P + 2), its advantages, the tokens of
    each kind [3, R, B, G] (approach, non-stop, stop), and the token tables of the sampling policy
    (`old`, the ratios' reference) and of the KL's reference policy (`ref`), at those logits; with
    a KL reward, the per-token advantages it gives (`token_advantage`)."""

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
        kl: KL | None = None,
    ) -> Epoch:
        """The epoch of a batch (`own`) sampled from the policy whose table is `old`; `ref` the KL
        term's reference policy's (None: no KL term); both at the batch's own logits. A KL term in
        the reward (`kl`) gives its per-token advantages here, once a batch."""
        batch = own.batch
        counts = np.empty((3, *batch.length.shape))  # tokens of each kind: 1, L - 1[stopped], 1[stopped]
        counts[0], counts[1], counts[2] = 1.0, batch.length - batch.stopped, batch.stopped
        tokens = None
        if kl is not None:
            assert ref is not None
            tokens = kl.token_advantages(advantage, old, ref, batch, counts)
        return cls(own, advantage, counts, old, ref, tokens)

    def coefficients(
        self, theta: FloatArray, plan: Plan, part: Part
    ) -> tuple[Coefficients, FloatArray, TokenTable]:
        """(coefficients of every token kind, tokens clipped [R], the token table) at the policy
        theta [R, P + 2], on the responses of `part`."""
        table = self.own.table(theta)
        ratio = kernels.exp(table.log_both - self.old.log_both)
        loss = None  # the KL term's coefficient of each logit's outcomes (None: none in the loss)
        if plan.kl is not None:
            assert self.ref is not None
            loss = plan.kl.loss(ratio, self.ref.log_both - table.log_both)
        ratio_positive, ratio_negative = ratio
        kl_positive, kl_negative = (None, None) if loss is None else loss
        update = Update(
            self.own.batch,
            self.advantage,
            part.included,
            part.scale,
            self.counts,
            ratio_positive,
            ratio_negative,
            kl_positive,
            kl_negative,
            self.token_advantage,
        )
        assert plan.objective is not None, "the runs of a chunk whose objective acts share one (`chunk_key`)"
        beta = None if loss is None or plan.kl is None else plan.kl.beta
        coefficients, clipped = plan.objective.coefficients(update, beta)
        return coefficients, clipped, table

    def gradient(self, theta: FloatArray, plan: Plan, part: Part) -> tuple[FloatArray, FloatArray]:
        """(loss gradient [R, P + 2], fraction of the part's tokens clipped [R]) at the policy theta."""
        coefficients, clipped, table = self.coefficients(theta, plan, part)
        fraction = np.divide(clipped, part.tokens, out=np.zeros(len(clipped)), where=part.tokens > 0)
        return self.own.scatter(
            policy_gradient(coefficients, self.own.batch, table), theta.shape[-1]
        ), fraction


class Drawn(NamedTuple):
    """The batch drawn from the policies theta [R, P + 2] with a step's noise, and their token table."""

    table: TokenTable
    batch: Batch

    @classmethod
    def of(cls, theta: FloatArray, noise: tuple[IndexArray, FloatArray, FloatArray], config: Config) -> Drawn:
        """`noise` is the step's (prompt_index, approach uniforms, length exponentials)."""
        table = TokenTable.of(theta, rates=True)
        return cls(table, sample_batch(theta, *noise, config.cap, table))

    def rows(self, rows: Rows) -> Drawn:
        """Some runs' draws (the same bits: a row's draw depends on its own policy and noise)."""
        return self if isinstance(rows, slice) else Drawn(self.table.rows(rows), self.batch.rows(rows))


def train_step(
    theta: FloatArray,
    adam: Adam,
    drawn: Drawn,
    plan: Plan,
    config: Config,
    theta_ref: FloatArray,
    apply: bool = True,
    positions: NDArray[np.intp] | None = None,
    refill: Sequence[np.random.Generator] | None = None,
) -> Step:
    """One step of a chunk's runs, in place on theta [R, P + 2] (unless not `apply`: the last row's
    batch and the gradient of its first update are evaluated, not applied). `drawn` is the batch
    drawn from theta with the step's noise; `theta_ref` the KL term's reference policy (the initial
    one); `positions` the step's orders of the responses (`step_orders`; None: the batch's own
    order); `refill` each run's refill stream (for a sampler that draws more)."""
    old = drawn.table
    batch, tokens_sampled = plan.sampled(drawn.batch, theta, config, refill)
    rewards = plan.rewards(batch, config)
    selected = plan.included(batch, rewards)
    tokens = batch.token_count(config.approach_tokens)
    advantage = plan.advantages(rewards, config, tokens)  # once a batch
    dealt: dict[int, NDArray[np.intp]] = {}  # the laid-out runs' orders over their ranks, this step's

    def part(update: int) -> Part:
        """The responses of update `update` (its mini-batch) and their normalisers."""
        if plan.whole_batch:
            return Part.of(batch, selected, *plan.denominators(batch, selected, config))
        parts = plan.parts(update, positions, tokens, dealt)
        return Part.of(batch, selected & parts[0], *plan.denominators(batch, selected, config, parts))

    first = part(0)
    kl = plan.kl is not None
    if kl or (apply and plan.updates > 1):
        own = OwnLogits.of(batch, theta.shape[-1])  # later tables: of the batch's B + 2 logits only
        ref = own.table(theta_ref) if kl else None
        epoch = Epoch.of(own, advantage, own.table(theta), ref, plan.kl)
    if kl:  # the first update at ratio 1, in the general form
        grad, _ = epoch.gradient(theta, plan, first)
    else:  # ratio 1: every token of a response has weight w = A / D, the ramble's scores in closed form
        grad = policy_gradient(
            Coefficients(weights(advantage, first.denominator, first.included), n=first.n), batch, old
        )
    clip_sum = np.zeros(len(theta))
    if not apply:
        return Step(old, batch, rewards, grad, clip_sum, tokens_sampled)
    adam.step(theta, plan.clipped(grad))
    for update in range(1, plan.updates):  # later updates: ratios move from 1
        later, clip_fraction = epoch.gradient(theta, plan, first if plan.whole_batch else part(update))
        clip_sum += clip_fraction
        adam.step(theta, plan.clipped(later))
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
    alone, so both are evaluated for many steps (and every chunk's runs) in one call."""

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

    def record(self, step: int, grad: FloatArray, sampled: Step | None = None, rows: Rows = ALL) -> None:
        """The step's gradient (of its first update) of the runs `rows` and, for a sampled step,
        their batch."""
        slot = step % self.block
        self.grads[slot, rows] = grad
        if sampled is not None:
            assert self.sigma is not None
            self.sigma[0, slot, rows] = sampled.table.probability
            self.sigma[1, slot, rows] = sampled.table.complement
            self.lengths[slot, rows] = sampled.batch.length
            self.correct[slot, rows] = correct(sampled.batch, self.config)
            self.clip_fractions[slot, rows] = sampled.clip_fraction
            self.tokens_sampled[slot, rows] = sampled.tokens_sampled

    def grad(self, step: int) -> FloatArray:
        """The step's recorded gradients [R, P + 2]."""
        return self.grads[step % self.block]

    def done(self, step: int) -> None:
        """The step is recorded for every run: at the end of a block, evaluate its metrics."""
        slot = step % self.block
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
    """Train every (variant, seed) of `runs`, `train_step` after `train_step`, each chunk of runs
    sharing a sampler, objective, KL term and schedule (`chunks_of`) together, the chunks in step.

    `on_step(step, theta)` is called with every policy state theta_t [R, P + 2] (do not modify it).
    InvalidInput first unless every run's variant fits the configuration (`check_variant`).
    """
    for variant, _ in runs:
        check_variant(variant, config)
    return train_runs(config, runs, on_step)


def train_runs(
    config: Config,
    runs: Sequence[tuple[Variant, int]],
    on_step: Callable[[int, FloatArray], None] | None = None,
) -> Trajectory:
    """`simulate` for runs already checked at the edge (`toyrl.experiment.check_experiment`)."""
    streams = [run_streams(seed) for _, seed in runs]
    theta = np.stack([initial_theta(config, init) for init, *_ in streams])
    theta_ref = theta.copy()  # the KL term's reference: the initial policy
    chunks = []  # (rows, indices, plan, adam, orders) of each chunk
    for rows in chunks_of([variant for variant, _ in runs]):
        indices = list(range(len(runs))[rows]) if isinstance(rows, slice) else [int(i) for i in rows]
        plan = Plan.of([runs[i][0] for i in indices])
        orders = step_orders([streams[i] for i in indices], plan, config)
        chunks.append((rows, indices, plan, Adam(theta[rows], config), orders))
    recorder = Recorder(config, runs, sampled=True)
    draws = step_noise(streams, config)
    with np.errstate(all="ignore"):  # a run that leaves finite numbers is stopped by check_finite
        for step in range(config.steps + 1):
            if on_step is not None:
                on_step(step, theta)
            recorder.policy(step, theta)
            drawn = Drawn.of(theta, next(draws), config)  # every run's batch, drawn together
            for rows, indices, plan, adam, orders in chunks:
                own = theta[rows]  # a view for a slice (one chunk), else a copy written back
                sampled = train_step(
                    own,
                    adam,
                    drawn.rows(rows),
                    plan,
                    config,
                    theta_ref[rows],
                    apply=step < config.steps,
                    positions=next(orders),
                    refill=[streams[i][5] for i in indices],
                )
                if not isinstance(rows, slice):  # a slice's runs were trained in place, in the view
                    theta[rows] = own
                recorder.record(step, sampled.grad, sampled, rows)
            check_finite(step, theta, recorder.grad(step), runs, config)
            recorder.done(step)
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
    compiled = kernels.compiled_module(COMPILED)
    if compiled is not None and compiled.finite(theta, grad):  # one pass, the common case
        return
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
