"""Schedule: the optimiser updates on each sampled batch.

A schedule is settings that `toyrl.train.Plan` reads: the epochs and the mini- and micro-batches
of each batch, the order they take its responses in, verl's V1 layout (`toyrl.layout`), and the
gradient's clip. `check(config)` refuses a configuration whose batches do not cut as it says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from toyrl.config import Config, InvalidInput
from toyrl.stages.registry import check_declared, declared, refused, register

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

    def check(self, config: Config) -> None: ...


SHUFFLES = ("none", "once", "epoch")


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

    refuses: ClassVar[tuple[dict[str, Any], ...]] = (
        refused(
            "token_budget and micro_batches are two ways to cut micro-batches: choose one",
            ("token_budget", ">", 0),
            ("micro_batches", ">", 1),
        ),
        refused(
            "ranks > 1 takes the mini-batches in the ranks' order: not with shuffle={shuffle}",
            ("ranks", ">", 1),
            ("shuffle", "!=", "none"),
        ),
        refused(
            "prompt_tokens counts in the ranks' balance and the token budget: set ranks > 1 or token_budget",
            ("prompt_tokens", ">", 0),
            ("ranks", "<=", 1),
            ("token_budget", "==", 0),
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

    def check(self, config: Config) -> None:
        """InvalidInput unless the configuration's batches cut into equal mini- and micro-batches."""
        check_cuts(self, config)

    @property
    def laid_out(self) -> bool:
        """Whether the responses' lengths decide the mini- or micro-batches (`toyrl.layout`)."""
        return self.ranks > 1 or self.token_budget > 0

    @property
    def simulated_only(self) -> str:
        if self.num_iterations > 1:
            return "later epochs make the update depend on more than the policy"
        if self.mini_batches > 1:
            return "later mini-batches make the update depend on more than the policy"
        if self.ranks > 1:
            return "the ranks' layout is simulated only"
        return "micro-batches are simulated only" if self.micro_batches > 1 or self.token_budget else ""


def check_cuts(schedule: Schedule, config: Config) -> None:
    """InvalidInput unless the configuration's batches cut as `schedule` says: mini_batches x
    micro_batches x ranks equal parts of the batch's responses, and a token budget (if any) that
    holds the longest sequence. Every schedule is held to it (a plugin's after its own check)."""
    responses = config.batch_prompts * config.group_size
    parts = schedule.mini_batches * schedule.micro_batches * schedule.ranks
    if responses % parts:
        factors = "mini_batches x micro_batches" + (" x ranks" if schedule.ranks > 1 else "")
        raise InvalidInput(
            f"{factors} = {parts} must divide the batch's {responses} responses (batch_prompts x group_size)"
        )
    longest = schedule.prompt_tokens + config.cap + config.approach_tokens
    if schedule.token_budget and schedule.token_budget < longest:
        raise InvalidInput(
            f"token_budget must be at least the longest sequence, prompt_tokens + cap + approach_tokens "
            f"= {longest:,} (got {schedule.token_budget:,})"
        )
