"""Sampler: which groups a batch holds.

`batch(batch, theta, config, refill)`: the batch a step trains on and the tokens its draws
generated [R], from the batch drawn with the step's noise at the policies theta [R, P + 2];
`refill` is each run's own stream for any further draws (`toyrl.train.STREAMS`). `worst_draws`
and `refills` bound what a step of one run draws, so that `toyrl.experiment` can size its work.
`config` is what a sampler sees of the configuration (`KIND.settings`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from toyrl import noise
from toyrl.config import MAX_RESPONSES, InvalidInput
from toyrl.policy import Batch, FloatArray, sample_batch
from toyrl.refusals import Refusal, refused_by, values
from toyrl.stages.registry import Kind, Settings, check_declared, declare, declared, register
from toyrl.stages.reward import correct


@runtime_checkable
class Sampler(Protocol):
    """The batch a step trains on, and what its draws cost."""

    def batch(
        self, batch: Batch, theta: FloatArray, config: Settings, refill: Sequence[np.random.Generator]
    ) -> tuple[Batch, FloatArray]: ...

    def worst_draws(self, config: Settings) -> int:
        """The most values a step of one run draws (responses, and uniforms ordering prompts)."""
        ...

    def refills(self, config: Settings) -> int:
        """The most refill rounds of a step of one run (each a few numpy calls)."""
        ...


KIND = declare(
    Kind(
        name="sampler",
        key="sampler",
        default="once",
        protocol=Sampler,
        step=7,
        spec_place=7,
        parameter_place=7,
        chunk=True,
        settings=("prompts", "batch_prompts", "group_size", "cap", "min_length"),
        calls=("batch", "worst_draws", "refills", "check"),
        no_exact_form="the exact update draws the article's batch",
        probe_input="a batch",
    )
)


@register("sampler", "once")
@dataclass(frozen=True)
class OneDraw:
    """The batch as drawn: B distinct prompts, G responses each (the article's)."""

    def batch(
        self, batch: Batch, theta: FloatArray, config: Settings, refill: Sequence[np.random.Generator]
    ) -> tuple[Batch, FloatArray]:
        return batch, generated(batch)

    def worst_draws(self, config: Settings) -> int:
        """The B x G responses of the step's own batch."""
        return config.batch_prompts * config.group_size

    def refills(self, config: Settings) -> int:
        return 0


def generated(batch: Batch) -> FloatArray:
    """Every token the batch's responses generated (approach and ramble), per run [R]: what a
    sampler's draws cost (`tokens_sampled`), whatever `approach_tokens` the loss counts."""
    return batch.token_count(1).sum(axis=(-2, -1))


@register("sampler", "filter_groups")
@dataclass(frozen=True)
class FilterGroups:
    """DAPO's dynamic sampling (Yu et al. 2025, "Dynamic Sampling"; verl's DAPO recipe with
    filter_groups on the metric acc): a group whose responses are all correct or all incorrect
    (`correct`, whatever the reward) is dropped, and rounds of `round_prompts` more prompts (B when
    0), drawn without replacement among the prompts not drawn yet this step, refill the batch until
    it holds B groups, the first B kept in the order drawn. After `max_rounds` rounds (the first
    one included), or when no prompt is left, the rest of the batch is the earliest dropped groups
    (where verl's DAPO recipe stops with an error; verl 0.9.x's V1 trainer keeps generating):
    `zero_variance_fraction` shows how often. The first round is the step's own noise; further
    rounds draw from the run's `refill` stream (prompts, approaches, lengths, in that order), only
    for the runs that filter."""

    max_rounds: int = declared(10, 1, 100_000)
    round_prompts: int = declared(0, 0, 100_000)
    simulated_only: ClassVar[str] = "dynamic sampling changes which groups a batch holds"

    def __post_init__(self) -> None:
        check_declared(self)

    def refills(self, config: Settings) -> int:
        """The most refill rounds of a step (after the first): `max_rounds` - 1, or fewer when
        the prompts not drawn yet run out first."""
        size = self.round_prompts or config.batch_prompts
        return min(self.max_rounds - 1, -(-(config.prompts - config.batch_prompts) // size))

    def worst_draws(self, config: Settings) -> int:
        """The most values a step of one run draws (a batch that never fills): the B x G responses,
        then each refill round's uniforms over the prompts left (their order) and its responses."""
        size = self.round_prompts or config.batch_prompts
        left, n = config.prompts - config.batch_prompts, self.refills(config)
        orders = n * left - size * n * (n - 1) // 2
        return config.group_size * (config.batch_prompts + min(n * size, left)) + orders

    def check(self, config: Settings) -> None:
        worst = self.worst_draws(config)
        if worst > MAX_RESPONSES:
            raise InvalidInput(
                f"sampler=filter_groups could draw {worst:,} values a step (up to {self.refills(config):,} "
                f"refill rounds of round_prompts={self.round_prompts or config.batch_prompts:,} over "
                f"prompts={config.prompts:,}, each ordering the prompts left); the limit is "
                f"{MAX_RESPONSES:,}: lower max_rounds or prompts, or raise round_prompts"
            )

    def batch(
        self, batch: Batch, theta: FloatArray, config: Settings, refill: Sequence[np.random.Generator]
    ) -> tuple[Batch, FloatArray]:
        prompts, group = batch.right.shape[-2:]
        tokens = generated(batch)
        prompt_index, right = batch.prompt_index.copy(), batch.right.copy()
        length, stopped = batch.length.copy(), batch.stopped.copy()
        for run in range(len(theta)):
            drawn = batch.rows(slice(run, run + 1))
            kept: list[tuple[Any, ...]] = []
            dropped: list[tuple[Any, ...]] = []
            unused = np.ones(config.prompts, dtype=bool)
            unused[drawn.prompt_index[0]] = False
            for round_index in range(self.max_rounds):
                if round_index > 0:
                    pool = np.flatnonzero(unused)  # the prompts not drawn yet, in increasing order
                    if len(pool) == 0:
                        break
                    size = min(self.round_prompts or prompts, len(pool))
                    rng = refill[run]
                    choice = pool[noise.permutation_prefix(rng, (), len(pool), size)]
                    shape = (1, size, group)
                    approach = noise.uniform(rng, shape)
                    exponential = noise.standard_exponential(rng, shape)
                    drawn = sample_batch(
                        theta[run : run + 1], choice[None], approach, exponential, config.cap
                    )
                    tokens[run] += generated(drawn)[0]
                    unused[choice] = False
                counts = correct(drawn, config)[0].sum(axis=-1)
                for j in range(drawn.prompt_index.shape[1]):
                    item = (
                        drawn.prompt_index[0, j],
                        drawn.right[0, j],
                        drawn.length[0, j],
                        drawn.stopped[0, j],
                    )
                    (kept if 0 < counts[j] < group else dropped).append(item)
                if len(kept) >= prompts:
                    break
            chosen = (kept + dropped)[:prompts]
            prompt_index[run] = [item[0] for item in chosen]
            right[run], length[run], stopped[run] = (
                np.stack([item[k] for item in chosen]) for k in (1, 2, 3)
            )
        return Batch(prompt_index, right, length, stopped), tokens


GFPO_KEEPS = ("shortest", "reward_per_token")


@register("sampler", "gfpo")
@dataclass(frozen=True)
class GroupFilter:
    """GFPO (Shrivastava et al. 2025, "Sample More to Think Less: Group Filtered Policy
    Optimization", section 3): each prompt draws `draws` = G' > G responses and keeps G of them,
    the shortest (`keep='shortest'`) or those with the most reward per token (`'reward_per_token'`:
    correctness / |o|, |o| every generated token), ties going to the earlier draw. Only the kept
    ones enter the advantages (their group's statistics) and the loss: GFPO's zero advantage for the
    others. The first G draws of a prompt are the step's own noise, the other G' - G the run's
    refill stream's (approach uniforms, then length exponentials, [B, G' - G] each), so with
    draws = G it would be the article's batch; every draw counts in `tokens_sampled`."""

    draws: int = declared(16, 2, 4096)
    keep: str = declared("shortest", choices=GFPO_KEEPS)
    simulated_only: ClassVar[str] = "GFPO keeps the shortest (or most efficient) of more draws"

    def __post_init__(self) -> None:
        check_declared(self)

    def worst_draws(self, config: Settings) -> int:
        """The responses a step of one run draws: G' for each of the B prompts."""
        return config.batch_prompts * self.draws

    def refills(self, config: Settings) -> int:
        """No rounds: the further G' - G draws of each prompt are one draw of the refill stream."""
        return 0

    # what `check` refuses, declared once as data (`toyrl.refusals`; the page evaluates it too)
    checks: ClassVar[tuple[Refusal, ...]] = (
        Refusal(
            "sampler.draws <= group_size",
            "sampler=gfpo keeps group_size = {group_size} of its draws: draws (G') must exceed it "
            "(got draws={sampler.draws})",
        ),
        Refusal(
            f"batch_prompts * sampler.draws > {MAX_RESPONSES}",
            "sampler=gfpo draws batch_prompts x draws = {batch_prompts:,} x {sampler.draws:,} = "
            f"{{batch_prompts * sampler.draws:,}} responses a step; the limit is {MAX_RESPONSES:,}: use "
            f"at most batch_prompts={{{MAX_RESPONSES} // sampler.draws:,}} or fewer draws",
        ),
    )

    def check(self, config: Settings) -> None:
        message = refused_by(self.checks, values(config, {"sampler": self}))
        if message:
            raise InvalidInput(message)

    def batch(
        self, batch: Batch, theta: FloatArray, config: Settings, refill: Sequence[np.random.Generator]
    ) -> tuple[Batch, FloatArray]:
        prompts, group = batch.right.shape[-2:]
        shape = (prompts, self.draws - group)
        extra = [(noise.uniform(rng, shape), noise.standard_exponential(rng, shape)) for rng in refill]
        more = sample_batch(
            theta,
            batch.prompt_index,
            np.stack([u for u, _ in extra]),
            np.stack([e for _, e in extra]),
            config.cap,
        )
        every = Batch(
            batch.prompt_index,
            *(
                np.concatenate([a, b], axis=-1)
                for a, b in (
                    (batch.right, more.right),
                    (batch.length, more.length),
                    (batch.stopped, more.stopped),
                )
            ),
        )
        tokens = every.token_count(1)
        if self.keep == "shortest":
            key = tokens
        else:  # the most correctness per token first
            key = -correct(every, config) / tokens
        kept = np.sort(np.argsort(key, axis=-1, kind="stable")[..., :group], axis=-1)

        def take(values: NDArray[Any]) -> NDArray[Any]:
            return np.take_along_axis(values, kept, axis=-1)

        return (
            Batch(batch.prompt_index, take(every.right), take(every.length), take(every.stopped)),
            generated(every),
        )
