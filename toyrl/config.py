"""The one configuration of a toy run: every default is the article's, or says why it is not.

The article (section "Toy run: a policy that can choose how long to ramble") fixes everything but
the initial prompt logits; `prompt_logit_mean` and `prompt_logit_std` make that choice explicit.
Each field's `help` is the CLI's `--help` text, so the two cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from toyrl.refusals import Refusal, first_refused


class InvalidInput(ValueError):
    """Input a user can fix (a value, a name, a file); the CLI prints it as a one-line error."""


class ConfigError(InvalidInput):
    """A configuration value outside its valid range; `field` names the offending option."""

    def __init__(self, field_name: str, requirement: str, got: object) -> None:
        self.field = field_name
        self.detail = f"{requirement} (got {shown(got)})"
        super().__init__(f"{field_name} {self.detail}")


SHOWN_CHARACTERS = 60  # a longer value is cut in a message, which stays one readable line


def plain(value: Any) -> Any:
    """A numpy scalar (or 0-d array) as the Python value it holds (np.int64(2) -> 2, np.bool_ ->
    bool); any other value as it is."""
    item = getattr(value, "item", None)
    return item() if callable(item) and getattr(value, "shape", None) == () else value


def shown(value: object) -> str:
    """A value as a message shows it: its repr, a numpy scalar as the Python number it holds
    (-1.0, not np.float64(-1.0)), a repr longer than SHOWN_CHARACTERS cut in its middle (an
    integer of 400 digits)."""
    text = repr(plain(value))
    if len(text) > SHOWN_CHARACTERS:
        half = SHOWN_CHARACTERS // 2 - 2
        text = f"{text[:half]}...{text[-half:]} ({len(text):,} characters)"
    return text


MAX_RESPONSES = 1_000_000  # sampled per step and run (B x G): 8 MB per array of a step, at most
MAX_SEEDS = 1_000_000  # seeds of each variant (toyrl run) or grid point (toyrl sweep)
MAX_LENGTH_NORM = 1e9  # Dr. GRPO's constant denominator, in tokens
MAX_SEED = 2**63 - 1  # a seed is stored in the results' int64 column


# What no field's range can say, declared once as data (`toyrl.refusals`; the page evaluates it too).
CONFIG_REFUSALS = (
    Refusal("batch_prompts > prompts", "must be at most prompts = {prompts}", "batch_prompts"),
    Refusal(
        f"batch_prompts * group_size > {MAX_RESPONSES}",
        f"times batch_prompts must be at most {MAX_RESPONSES:,} responses per step (batch_prompts = "
        "{batch_prompts:,})",
        "group_size",
    ),
    Refusal("min_length > cap", "must be at least min_length = {min_length}", "cap"),
)


def _describe(
    default: Any,
    text: str,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    zero: str = "",
) -> Any:
    """A field with its help text and its valid range (None: unbounded), declared once: the checks,
    the CLI's messages and the page (`toyrl.explore.page_data`) all read them from here. `zero`:
    what 0 means where 0 is also valid outside the range (length_norm's "the cap")."""
    bounds = {"low": low, "high": high, "low_open": low_open, "high_open": high_open, "zero": zero}
    return field(default=default, metadata={"help": text, "bounds": bounds})


@dataclass(frozen=True)
class Config:
    """Settings of the ramble-policy experiment (defaults: the article's toy run)."""

    prompts: int = _describe(64, "Number of prompts P, each with its own approach logit psi_j.", 1, 100_000)
    batch_prompts: int = _describe(16, "Distinct prompts B sampled per step (without replacement).", 1)
    group_size: int = _describe(8, "Responses G sampled per prompt; GRPO's group.", 2, 10_000)
    steps: int = _describe(400, "Optimiser steps per run.", 1, 10_000_000)
    lr: float = _describe(0.02, "Adam learning rate.", 0.0, low_open=True)
    adam_beta1: float = _describe(0.9, "Adam's first-moment decay.", 0.0, 1.0, high_open=True)
    adam_beta2: float = _describe(0.999, "Adam's second-moment decay.", 0.0, 1.0, high_open=True)
    adam_eps: float = _describe(1e-8, "Adam's denominator epsilon.", 0.0, low_open=True)
    cap: int = _describe(
        1500, "Generation cap on ramble tokens; longer responses are truncated.", 1, 10_000_000
    )
    min_length: int = _describe(100, "Fewest ramble tokens a correct response needs.", 1)
    stop_prob_right: float = _describe(
        1 / 300, "Initial per-token stop probability on the right approach.", 0.0, 1.0, True, True
    )
    stop_prob_wrong: float = _describe(
        1 / 700, "Initial per-token stop probability on a wrong approach.", 0.0, 1.0, True, True
    )
    # The article does not say how psi starts. N(-1, 1) spreads the initial pass rates (sigma(psi)
    # from 7% to 67% between the 5th and 95th percentiles; initial accuracy 22%), and its mean is
    # the one whose final GRPO accuracy over seeds 0-5 matched the article's 27.4% with toyrl 0.3's
    # noise: calibrated on that figure, at those seeds, with |o_i| = L + 1; with the portable noise
    # of toyrl 0.4 they end within one standard error of it (docs/initialisation.md has the scan).
    prompt_logit_mean: float = _describe(-1.0, "Mean of the initial prompt logits psi_j ~ Normal.")
    prompt_logit_std: float = _describe(1.0, "Std of the initial prompt logits (0: all equal the mean).", 0.0)
    std_eps: float = _describe(1e-6, "Epsilon added to the group reward std (std-scaled variants).", 0.0)
    # a token count: below one token the weights A_i / L_norm overflow float64, far above it they
    # underflow, and either way Adam leaves the policy where it is
    length_norm: float = _describe(
        0.0, "Dr. GRPO's constant denominator L_norm; 0 means the cap.", 1.0, MAX_LENGTH_NORM, zero="the cap"
    )
    # A trainer's completion mask covers every generated token, and the approach token is one, so
    # GRPO's per-response mean divides by L + 1. The article's worked example divides by the length
    # alone; the choice moves GRPO's final accuracy by more than 2 points (docs/initialisation.md).
    count_approach_token: bool = _describe(
        True,
        "Count the approach token in |o_i|, the token count of GRPO's per-response mean and of token "
        "means: L + 1; with --no-count-approach-token, |o_i| = L (ramble tokens only).",
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            # a numpy integer is an integer, as for the CLI's digits: steps=np.int64(2) means 2
            object.__setattr__(self, f.name, plain(getattr(self, f.name)))
            _check_field(self, f.name)
        values = self.to_dict()
        refusal = first_refused(CONFIG_REFUSALS, values.get)
        if refusal is not None:
            raise ConfigError(refusal.field, refusal.says(values.get), values[refusal.field])

    @property
    def length_norm_value(self) -> float:
        """L_norm actually used: `length_norm`, or the cap when it is 0 (the paper's choice)."""
        return float(self.length_norm) if self.length_norm > 0 else float(self.cap)

    @property
    def approach_tokens(self) -> int:
        """Tokens of a response counted in |o_i| besides its L ramble tokens: 1 (the approach token) or 0."""
        return int(self.count_approach_token)

    def replace(self, **changes: Any) -> Config:
        """A copy with some fields changed (validated like any Config)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError("config", f"has unknown fields; valid: {sorted(known)}", unknown)
        return cls(**values)


def field_help(name: str) -> str:
    """The one-line description of a Config field (the CLI's help text)."""
    return str(next(f for f in fields(Config) if f.name == name).metadata["help"])


def field_bounds(name: str) -> dict[str, Any]:
    """A Config field's valid range as declared: kind ('integer', 'number' or 'boolean'), low and
    high (None: unbounded), whether each end is open, and `requirement`, the words of its error."""
    f = next(f for f in fields(Config) if f.name == name)
    kind = {bool: "boolean", int: "integer", float: "number"}[type(f.default)]
    bounds = dict(f.metadata["bounds"])
    low, high = bounds["low"], bounds["high"]
    if kind == "boolean":
        requirement = "must be true or false"
    elif kind == "integer":
        requirement = "must be an integer " + (f">= {low}" if high is None else f"in {low}..{high:,}")
    else:
        ends = [
            f"{'>' if bounds['low_open'] else '>='} {low:g}" if low is not None else "",
            f"{'<' if bounds['high_open'] else '<='} {high:g}" if high is not None else "",
        ]
        requirement = f"must be a finite number {' and '.join(e for e in ends if e)}".rstrip()
        if bounds["zero"]:
            requirement = f"must be 0 ({bounds['zero']}) or a number of tokens in [{low:g}, {high:g}]"
    return {"kind": kind, **bounds, "requirement": requirement}


def finite(value: float) -> bool:
    """Whether a number is finite as a float: not inf or NaN, nor an int beyond a float's range
    (10**400, which math.isfinite cannot take)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _check_field(config: Config, name: str) -> None:
    """ConfigError unless the field's value is of its kind and within its declared range."""
    value, bounds = getattr(config, name), field_bounds(name)
    if bounds["kind"] == "boolean":
        ok = isinstance(value, bool)
    elif bounds["kind"] == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and finite(value)
    low, high = bounds["low"], bounds["high"]
    if ok and low is not None:
        ok = value > low if bounds["low_open"] else value >= low
    if ok and high is not None:
        ok = value < high if bounds["high_open"] else value <= high
    if not ok and bounds["zero"] and value == 0 and not isinstance(value, bool):
        ok = True
    if not ok:
        raise ConfigError(name, bounds["requirement"], value)
