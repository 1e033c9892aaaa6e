"""Schedule: the optimiser updates on each sampled batch.

A schedule is settings that `toyrl.train.Plan` reads: the epochs and the mini- and micro-batches
of each batch, the order they take its responses in, verl's V1 layout (`toyrl.layout`), and the
gradient's clip. `check(config)` refuses a configuration whose batches do not cut as it says
(`config`: what a schedule sees of the configuration, `KIND.settings`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

from toyrl.config import Config, InvalidInput
from toyrl.refusals import Refusal, refused_by, values
from toyrl.stages.registry import Kind, Settings, check_declared, declare, declared, register

MAX_ITERATIONS = 64  # epochs per sampled batch; trainers use 1 to a few (TRL's mu, verl's ppo_epochs)
MAX_PARTS = 4096  # mini- or micro-batches of a batch
MAX_TOKENS = 1_000_000_000  # a token budget
MAX_PROMPT_TOKENS = 10_000_000  # a prompt's tokens


@runtime_checkable
class Schedule(Protocol):
    """The updates on each batch: `updates` of them, each on a mini-batch (one of `mini_batches`,
    its loss summed over `micro_batches`), `orders` random orders of the responses drawn a batch;
    `ranks`, `token_budget`, `prompt_tokens`: verl's V1 layout (1, 0, 0: none); `max_grad_norm`:
    each update's gradient clipped to that norm (None: not clipped)."""

    @property
    def updates(self) -> int: ...
    @property
    def mini_batches(self) -> int: ...
    @property
    def micro_batches(self) -> int: ...
    @property
    def orders(self) -> int: ...
    @property
    def ranks(self) -> int: ...
    @property
    def token_budget(self) -> int: ...
    @property
    def prompt_tokens(self) -> int: ...
    @property
    def max_grad_norm(self) -> float | None: ...
    @property
    def laid_out(self) -> bool: ...

    def check(self, config: Settings) -> None: ...


KIND = declare(
    Kind(
        name="schedule",
        key="schedule",
        default="epochs",
        protocol=Schedule,
        step=6,
        spec_place=5,
        parameter_place=0,
        chunk=True,
        settings=("batch_prompts", "group_size", "cap", "approach_tokens"),
        calls=("check",),
        no_exact_form="the exact update is one on-policy update a batch",
        probe_input="a batch",
    )
)


SHUFFLES = ("none", "once", "epoch")

# what every schedule's batches must hold to (`check_cuts`), declared once as data (`toyrl.refusals`;
# the page evaluates them too)
_PARTS = "schedule.mini_batches * schedule.micro_batches * schedule.ranks"
_DIVIDE = "= {%s} must divide the batch's {batch_prompts * group_size} responses (batch_prompts x group_size)"
_LONGEST = "schedule.prompt_tokens + cap + approach_tokens"
CUTS = (
    Refusal(
        f"schedule.ranks <= 1 and (batch_prompts * group_size) % ({_PARTS}) != 0",
        "mini_batches x micro_batches " + _DIVIDE % _PARTS,
    ),
    Refusal(
        f"schedule.ranks > 1 and (batch_prompts * group_size) % ({_PARTS}) != 0",
        "mini_batches x micro_batches x ranks " + _DIVIDE % _PARTS,
    ),
    Refusal(
        f"schedule.token_budget > 0 and schedule.token_budget < {_LONGEST}",
        "token_budget must be at least the longest sequence, prompt_tokens + cap + approach_tokens = "
        f"{{{_LONGEST}:,}} (got {{schedule.token_budget:,}})",
    ),
)


@register("schedule", "epochs")
@dataclass(frozen=True)
class Epochs:
    """The optimiser updates on each sampled batch: num_iterations epochs (PPO epochs, TRL's mu,
    verl's ppo_epochs) over the batch cut into `mini_batches` equal parts, one update each, in the
    batch's order (prompt by prompt, each group's responses together: verl's default) or in a
    random order of its responses (`shuffle`: 'once' per batch and kept for every epoch, as TRL
    does; 'epoch', anew each epoch, as OpenRLHF's and oat's data loaders and verl's shuffle=True
    do). Each mini-batch's loss is summed over `micro_batches` equal consecutive parts (gradient
    accumulation), which changes the update only for a normaliser with per_micro_batch.

    verl's V1 layout (`toyrl.layout`), where lengths decide it: `ranks` data-parallel ranks, each
    dealt an equal part of the batch balanced by workload, in the batch's order, and taking its
    consecutive share of each mini-batch, its micro-batches its own; `token_budget` (0: off), the
    micro-batches of each rank's share cut by tokens instead of `micro_batches` (use_dynamic_bsz
    with ppo_max_token_len_per_gpu); `prompt_tokens`, each prompt's tokens, counted in a sequence's
    length by both.

    The first update is on-policy; later ones are at the ratios the earlier ones moved to, against
    the sampling policy (the trainers' old log-probabilities, taken once per batch). The advantages
    are the whole batch's, taken once. `max_grad_norm`: each update's gradient is scaled down to
    at most that norm before Adam, as torch's clip_grad_norm_ does (max_norm / (norm + 1e-6), at
    most 1); the `grad_norm` column is the first update's norm before it."""

    num_iterations: int = declared(1, 1, MAX_ITERATIONS)
    mini_batches: int = declared(1, 1, MAX_PARTS)
    micro_batches: int = declared(1, 1, MAX_PARTS)
    shuffle: str = declared("none", choices=SHUFFLES)
    # None: no clipping
    max_grad_norm: float | None = declared(None, 0.0, 1e12, low_open=True, high_open=True, optional=True)
    ranks: int = declared(1, 1, MAX_PARTS)
    token_budget: int = declared(0, 0, MAX_TOKENS)
    prompt_tokens: int = declared(0, 0, MAX_PROMPT_TOKENS)

    checks: ClassVar[tuple[Refusal, ...]] = CUTS  # `check`'s refusals (`check_cuts`)
    refuses: ClassVar[tuple[Refusal, ...]] = (
        Refusal(
            "token_budget > 0 and micro_batches > 1",
            "token_budget and micro_batches are two ways to cut micro-batches: choose one",
        ),
        Refusal(
            "ranks > 1 and shuffle != 'none'",
            "ranks > 1 takes the mini-batches in the ranks' order: not with shuffle={shuffle}",
        ),
        Refusal(
            "prompt_tokens > 0 and ranks <= 1 and token_budget == 0",
            "prompt_tokens counts in the ranks' balance and the token budget: set ranks > 1 or token_budget",
        ),
    )

    def __post_init__(self) -> None:
        check_declared(self)

    @property
    def updates(self) -> int:
        """Optimiser updates per sampled batch."""
        return self.num_iterations * self.mini_batches

    @property
    def orders(self) -> int:
        """Random orders of a batch's responses drawn per batch."""
        return {"none": 0, "once": 1, "epoch": self.num_iterations}[self.shuffle]

    def check(self, config: Settings) -> None:
        """InvalidInput unless the configuration's batches cut into equal mini- and micro-batches."""
        check_cuts(self, config)

    @property
    def laid_out(self) -> bool:
        """Whether the responses' lengths decide the mini- or micro-batches (`toyrl.layout`)."""
        return self.ranks > 1 or self.token_budget > 0

    # why the update has no exact expected form: the first that holds, as data (the page reads it)
    simulated_when: ClassVar[tuple[Refusal, ...]] = (
        Refusal("schedule.num_iterations > 1", "later epochs make the update depend on more than the policy"),
        Refusal(
            "schedule.mini_batches > 1", "later mini-batches make the update depend on more than the policy"
        ),
        Refusal("schedule.ranks > 1", "the ranks' layout is simulated only"),
        Refusal(
            "schedule.micro_batches > 1 or schedule.token_budget > 0", "micro-batches are simulated only"
        ),
    )

    @property
    def simulated_only(self) -> str:
        return refused_by(self.simulated_when, values(None, {"schedule": self}))


def check_cuts(schedule: Schedule, config: Config | Settings) -> None:
    """InvalidInput unless the configuration's batches cut as `schedule` says: mini_batches x
    micro_batches x ranks equal parts of the batch's responses, and a token budget (if any) that
    holds the longest sequence. Every schedule is held to it (a plugin's after its own check)."""
    message = refused_by(CUTS, values(config, {"schedule": schedule}))
    if message:
        raise InvalidInput(message)
