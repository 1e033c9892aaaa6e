"""`toyrl check`: a trainer's settings run on the toy beside Dr. GRPO, and a verdict on length drift.

The trainer's settings become one variant (`toyrl.trainers.resolve`); it and Dr. GRPO (its
advantage and loss in the settings' schedule and clip, `dr_grpo_in`) train on the same seeds with
the same noise (a seed's variants share their noise streams), so their final
lengths are compared per seed: the difference of E[L | incorrect] at the last step, its mean and
standard error over seeds, and its 95% percentile-bootstrap interval (`toyrl.spread`), which the
verdict quotes. The verdict says "longer" or "shorter" only when the difference is beyond 4
standard errors and 2% of Dr. GRPO's length, and "no more than Dr. GRPO" otherwise (the rule
uses the standard error, not the interval: with 6 seeds a percentile interval is too narrow).
Lengths are the exact expectations at each seed's policy (`toyrl.policy.exact_metrics`).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from toyrl.config import Config, ConfigError, InvalidInput
from toyrl.experiment import check_experiment, run_experiment
from toyrl.objective import Variant
from toyrl.spread import RESAMPLES, Difference, describe, format_mean_sd, over_seeds, paired_difference
from toyrl.stages import parameters
from toyrl.trainers import Resolved, resolve
from toyrl.trainers import trainer as named_trainer
from toyrl.trainers.reading import detect, read_input
from toyrl.variants import VARIANTS, parse_variant

MARGIN_SE = 4.0
MARGIN_RELATIVE = 0.02


@dataclass(frozen=True)
class Outcome:
    """Final-step metrics per seed of one variant: accuracy, E[L | incorrect], E[L | correct] [seeds],
    and E[L | incorrect] at step 0 (the same for every variant of a seed)."""

    variant: Variant
    accuracy: np.ndarray
    incorrect: np.ndarray
    correct: np.ndarray
    incorrect_start: np.ndarray


@dataclass(frozen=True)
class Check:
    resolved: Resolved
    config: Config
    seeds: list[int]
    setting: Outcome
    reference: Outcome
    same_variant: bool
    preset: str | None  # the named preset the settings land on, if any
    loss_preset: str | None  # else the preset with their loss and advantage (one step per batch)
    kept: list[str] = dataclasses.field(default_factory=list)  # toy fields kept against the defaults
    # the fewest settings that make these Dr. GRPO's loss in this trainer and release ({} when
    # they are already; None when no setting toyrl models does: `dr_grpo_settings`)
    fix: dict[str, Any] | None = None

    @property
    def difference(self) -> tuple[float, float]:
        """Mean and standard error over seeds of E[L | incorrect] (settings) - (Dr. GRPO)."""
        d = self.setting.incorrect - self.reference.incorrect
        se = float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")
        return float(d.mean()), se

    @property
    def paired(self) -> Difference:
        """The paired difference of E[L | incorrect] (settings) - (Dr. GRPO) with its 95% interval."""
        seeds = sorted(self.seeds)  # the order of the Outcomes' values
        return paired_difference(self.setting.incorrect, self.reference.incorrect, seeds, seeds)

    def __str__(self) -> str:
        """The report `toyrl check` prints."""
        return "\n".join(report(self))

    @property
    def direction(self) -> int:
        """+1 when wrong answers end longer than under Dr. GRPO beyond both margins (MARGIN_SE
        standard errors and MARGIN_RELATIVE of Dr. GRPO's length), -1 when shorter, else 0 (and
        for Dr. GRPO itself)."""
        if self.same_variant:
            return 0
        mean, se = self.difference
        reference = float(self.reference.incorrect.mean())
        beyond = abs(mean) > MARGIN_SE * se and abs(mean) > MARGIN_RELATIVE * reference
        return int(np.sign(mean)) if beyond else 0

    def verdict(self) -> str:
        """The verdict on length drift, in words."""
        if self.same_variant:
            return "these settings are Dr. GRPO itself (the same variant): the reference, by construction"
        mean, se = self.difference
        beyond = self.direction != 0
        start = float(self.setting.incorrect_start.mean())
        end = float(self.setting.incorrect.mean())
        by = describe(self.paired, "tokens")
        if beyond and mean > 0 and end > start:
            return (
                f"length drift: wrong answers end longer than under Dr. GRPO by {by}; E[L | incorrect] "
                f"{start:.0f} at step 0, {end:.0f} at the end (means over seeds)"
            )
        if beyond and mean > 0:
            return (
                f"wrong answers end longer than under Dr. GRPO by {by}, though shorter than at the start: "
                f"E[L | incorrect] {start:.0f} at step 0, {end:.0f} at the end (means over seeds)"
            )
        if beyond:
            return f"wrong answers end shorter than under Dr. GRPO: {by}"
        return (
            f"no more length drift than Dr. GRPO: the difference, {by}, is within {MARGIN_SE:g} standard "
            f"errors (SE {se:.0f}) or {MARGIN_RELATIVE:.0%} of Dr. GRPO's length"
        )


def _outcome(frame: Any, variant: Variant) -> Outcome:
    rows = frame[frame["variant"] == variant.name].sort_values(["seed", "step"])
    last = rows[rows["step"] == rows["step"].max()]
    first = rows[rows["step"] == 0]
    return Outcome(
        variant,
        last["accuracy"].to_numpy(),
        last["length_incorrect"].to_numpy(),
        last["length_correct"].to_numpy(),
        first["length_incorrect"].to_numpy(),
    )


SCHEDULE_KEYS = (
    "num_iterations",
    "mini_batches",
    "micro_batches",
    "shuffle",
    "dual_clip",
    "ranks",
    "token_budget",
    "prompt_tokens",
)
LOSS_KEYS = (
    "advantage",
    "aggregation",
    "std_eps",
    "per_micro_batch",
    "batch_tokens",
    "mask_truncated",
    "selector",
    "reward",
    "buffer",
    "penalty_factor",
    "incorrect",
    "sampler",
    "max_rounds",
    "round_prompts",
)

LOSS_KINDS = ("reward", "selector", "advantage", "normaliser", "sampler")  # the stages Dr. GRPO's replace


def _loss(spec: dict[str, Any]) -> dict[str, Any]:
    """A spec without its schedule (epochs, mini- and micro-batches, shuffle, the layout by length)
    and dual clip."""
    return {key: value for key, value in spec.items() if key not in SCHEDULE_KEYS}


def _preset(spec: dict[str, Any], trainer: str) -> str | None:
    """The named variant with this spec (its dual clip aside, which acts only off policy), the
    trainer's own first (named after it: `ms_swift_grpo` for ms-swift's)."""
    same = [
        name
        for name, v in VARIANTS.items()
        if {k: x for k, x in v.spec().items() if k != "dual_clip"} == spec
    ]
    own = [name for name in same if name.startswith(trainer.lower().replace("-", "_") + "_")]
    return (own or same)[0] if same else None


def dr_grpo_in(variant: Variant) -> Variant:
    """The reference: Dr. GRPO's advantage and loss (no std, the constant L_norm, every response in
    the loss, the 0/1 reward, the batch as drawn) in the variant's schedule, clip and KL term, so
    that the comparison is of what the variant changes in the loss and the batch; `dr_grpo` itself
    when the variant has the defaults' schedule."""
    # and every parameter of the variant's own loss stages (a selector's thresholds, a reward's weights)
    own = {name for kind in LOSS_KINDS for name in parameters(variant.stage(kind))}
    spec = {key: value for key, value in variant.spec().items() if key not in LOSS_KEYS and key not in own}
    spec = VARIANTS["dr_grpo"].spec() | spec
    if spec == VARIANTS["dr_grpo"].spec():
        return VARIANTS["dr_grpo"]
    return parse_variant(",".join(f"{key}={value}" for key, value in spec.items()))


def toy_micro_batches(step: int, micro: int) -> int:
    """How many equal micro-batches the toy cuts an optimiser step of `step` responses into for a
    trainer's micro-batches of `micro` responses: step / micro, or the nearest count at or below it
    that divides the step (at least 1)."""
    count = max(1, min(step, step // micro))
    while step % count:
        count -= 1
    return count


def _parsed(resolved: Resolved, spec: str) -> Variant:
    """The variant of the settings' spec; a value the toy refuses is told as the user's settings
    (what they gave), not as toyrl's spec keys."""
    try:
        return parse_variant(spec)
    except InvalidInput as error:
        problem = str(error).split("': ", 1)[-1]
        given = ", ".join(f"{key}={value!r}" for key, value in resolved.given.items()) or "the defaults"
        raise InvalidInput(
            f"{resolved.trainer.name} {resolved.version} with {given}: the toy cannot take it ({problem})"
        ) from None


def toy_variant(resolved: Resolved, config: Config) -> tuple[Variant, list[str]]:
    """The settings' variant on the toy at `config`, and notes where its layout differs from the
    trainer's: the mapping's spec, with micro-batches of the trainer's size cut from the toy's
    optimiser steps where the normaliser's scope is the micro-batch and its size matters
    (`ToyMapping.micro_batch_responses`), and the trainer's layout by length (`ToyMapping.layout`:
    its ranks, where the toy's steps divide among them, and its token budget and prompts scaled by
    the toy's longest response over the trainer's)."""
    mapping = resolved.mapping
    variant = _parsed(resolved, mapping.spec)
    layout, micro = mapping.layout, mapping.micro_batch_responses
    if micro is None and layout.ranks == 1 and not layout.token_budget:
        return variant, []
    step = config.batch_prompts * config.group_size // getattr(variant.schedule, "mini_batches", 1)
    scale = (config.cap + config.approach_tokens) / layout.response_tokens  # toy tokens a trainer's
    prompt = round(layout.prompt_tokens * scale)
    # a rank's share of a step must hold a micro-batch of the trainer's size (at least as many of
    # the longest sequences as the token budget takes): the micro-batch's size sets the divisor's
    # spread, which ranks only reshuffle; fewer ranks than the trainer's where the toy's steps are small
    need = micro or 1
    if layout.token_budget:
        need = max(
            1, math.ceil(layout.token_budget * scale) // (prompt + config.cap + config.approach_tokens)
        )
    fits = [r for r in range(1, min(layout.ranks, step) + 1) if step % r == 0 and step // r >= need]
    ranks = max(fits, default=1)
    keys, notes = [], []
    if ranks != layout.ranks:
        notes.append(
            f"the toy deals its optimiser steps of {step} responses to {ranks} data-parallel rank"
            f"{'s' if ranks > 1 else ''}, the trainer to {layout.ranks}, so that a rank's share holds "
            "a micro-batch of the trainer's size"
        )
    if ranks > 1 or layout.token_budget:
        keys.append(f"prompt_tokens={prompt}")
    if ranks > 1:
        keys.append(f"ranks={ranks}")
    share = step // ranks
    if layout.token_budget:
        budget = math.ceil(layout.token_budget * scale)
        keys.append(f"token_budget={budget}")
        notes.append(
            f"the token budget of {layout.token_budget:,} and prompts of {layout.prompt_tokens:,} tokens "
            f"(the longest the trainer takes: real prompts are often shorter) are the toy's {budget:,} "
            f"and {prompt:,}, in proportion to its longest response"
        )
    elif micro is not None:
        count = toy_micro_batches(share, micro)
        keys.append(f"micro_batches={count}")
        if share != count * micro:
            notes.append(
                f"the toy's micro-batches hold {share // count} responses ({share} a step"
                + (" and rank" if ranks > 1 else "")
                + f" in {count}), the trainer's {micro}"
            )
    return _parsed(resolved, ",".join([mapping.spec, *keys])), notes


def resolve_input(
    arguments: list[str], trainer: str | None, sets: dict[str, Any], version: str | None = None
) -> Resolved:
    """The settings `toyrl check` checks: read from `arguments` (a configuration file, a launch
    script or command line, Python source: `read_input`), the `sets` over them, as `trainer`'s (else
    as the trainer the input's form names, else the one its keys fit: `detect`) in `version`
    (default: the newest modelled). InvalidInput when there is nothing to check or `trainer`
    cannot read the input."""
    given = read_input(arguments, trainer)
    if trainer is not None:
        name, read_as = trainer, f"read as {named_trainer(trainer).name} (--trainer {trainer})"
        if given.trainer is not None and given.trainer != trainer:
            owner = named_trainer(given.trainer).name
            raise InvalidInput(f"{given.origin} is {owner}'s; --trainer {trainer} does not read it")
    elif given.trainer is not None:
        name, read_as = given.trainer, f"read as {named_trainer(given.trainer).name} ({given.origin})"
    elif given.settings or sets:
        name, read_as = detect([*given.settings, *sets], given.origin or "the --set settings")
    else:
        raise InvalidInput(
            "nothing to check: give a trainer's configuration file or launch script, a launch command line "
            "after --, or --set KEY=VALUE; --trainer NAME alone checks its defaults"
        )
    if version is None:  # the input does not say which release it is for
        releases = list(named_trainer(name).releases)
        read_as += (
            f"; release {releases[0]} assumed, the newest of the {len(releases)} modelled ({releases[-1]} to "
            f"{releases[0]}; --version RELEASE for another)"
            if len(releases) > 1
            else f"; release {releases[0]} assumed, the one modelled"
        )
    from_file = frozenset(given.settings) - set(sets)
    resolved = resolve(name, version, given.settings | sets, from_file, read_as)
    return dataclasses.replace(resolved, unread=given.notes)


def run_check(
    resolved: Resolved,
    config: Config,
    seeds: list[int],
    n_jobs: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> Check:
    """Train the settings' variant and Dr. GRPO on `seeds` and compare them."""
    kept = []
    for field_name, (setting, value) in resolved.mapping.config.items():
        if setting in resolved.given:
            try:
                config = dataclasses.replace(config, **{field_name: value})
            except ConfigError as error:
                why = f"{setting}={value!r} sets the toy's {field_name}, which {error.detail}"
                raise InvalidInput(why) from None
        elif getattr(config, field_name) != value:
            kept.append(
                f"{field_name} = {getattr(config, field_name)} is the toy's; {setting} defaults to {value} "
                f"(--set {setting}=... to use yours)"
            )
    variant, sizes = toy_variant(resolved, config)
    kept += sizes
    step = resolved.mapping.step_responses
    toy_step = config.batch_prompts * config.group_size // getattr(variant.schedule, "mini_batches", 1)
    if step is not None and not step / 2 <= toy_step <= 2 * step:
        kept.append(
            f"the toy's optimiser steps hold {toy_step} responses (B x G / mini_batches), the trainer's "
            f"{step}: "
            "the number of steps per generated batch is the trainer's, their size is not (a token mean over "
            "fewer responses is closer to a per-response mean); the trainer's batch sizes at the toy's "
            "scale, or --batch-prompts, make both agree"
        )
    reference = dr_grpo_in(variant)
    same = variant.spec() == reference.spec()
    variants = [reference] if same else [variant, reference]
    workers = check_experiment(config, variants, seeds, n_jobs)
    frame = run_experiment(config, variants, seeds, n_jobs=n_jobs, progress=progress, workers=workers)
    preset = _preset(variant.spec(), resolved.trainer.name)
    loss_preset = None if preset else _preset(_loss(variant.spec()), resolved.trainer.name)
    return Check(
        resolved,
        config,
        seeds,
        _outcome(frame, reference if same else variant),
        _outcome(frame, reference),
        same,
        preset,
        loss_preset,
        kept,
        {} if same else dr_grpo_settings(resolved, config),
    )


def dr_grpo_settings(resolved: Resolved, config: Config) -> dict[str, Any] | None:
    """The fewest of the release's Dr. GRPO settings (`Release.dr_grpo`), set on top of the given
    ones, under which the toy runs the settings as Dr. GRPO's loss in their own schedule, clip and
    KL term (the variant is its own `dr_grpo_in`: the same run as the check's reference); {} when
    they are already, None when no such set exists. Smaller sets are tried first, each setting's
    values in their order; a set the release refuses (a value another setting rules out) is skipped."""
    variant, _ = toy_variant(resolved, config)
    if variant.spec() == dr_grpo_in(variant).spec():
        return {}
    options: dict[str, list[Any]] = {}
    for name, values in resolved.release.dr_grpo.items():
        tried = values(resolved.values) if callable(values) else values
        options[name] = [value for value in tried if value != resolved.values[name]]
    levers = [name for name, values in options.items() if values]
    for size in range(1, len(levers) + 1):
        for names in itertools.combinations(levers, size):
            for values in itertools.product(*(options[name] for name in names)):
                change = dict(zip(names, values, strict=True))
                try:
                    trial = resolve(resolved.trainer.name.lower(), resolved.version, resolved.given | change)
                    variant, _ = toy_variant(trial, config)
                except InvalidInput:
                    continue
                if variant.spec() == dr_grpo_in(variant).spec():
                    return change
    return None


def report(check: Check) -> list[str]:
    """The lines `toyrl check` prints."""
    r = check.resolved
    given = ", ".join(f"{key}={value!r}" for key, value in r.given.items()) or "the defaults"
    lines = [r.read_as] if r.read_as else []
    lines += misspelt_warning(r)
    if r.unknown:
        lines.append(
            f"warning: {len(r.unknown)} setting{'s' if len(r.unknown) > 1 else ''} the script leaves to when "
            "it runs; checked with the release's default (--set KEY=VALUE gives yours):"
        )
        lines += [f"  - {why} (checked with {key}={r.values[key]!r})" for key, why in r.unknown.items()]
    lines += [f"note: {item}" for item in r.unread]
    lines += [
        f"{r.trainer.name} {r.version} ({r.release.source}): {given}",
        f"toyrl variant: {check.setting.variant.spec_text()}"
        + (f"  (preset {check.preset})" if check.preset else "")
        + (
            f"  (the loss and advantage of preset {check.loss_preset}, at one optimiser step a batch)"
            if check.loss_preset
            else ""
        ),
    ]
    if check.reference.variant.name != "dr_grpo":
        lines.append(
            f"Dr. GRPO here: {check.reference.variant.spec_text()} (its advantage and loss, in these "
            "settings' schedule and clip)"
        )
    if r.release.not_run:
        lines.append(
            f"note: this mapping was read from {r.trainer.name} {r.version}'s source ({r.release.source}), "
            f"not run against its code: {r.release.not_run}"
        )
    lines += [f"note: {key} is {name} ({why})" for key, (name, why) in r.renamed.items()]
    lines += [f"note: {item}" for item in r.mapping.notes + check.kept]
    release = f"{r.trainer.name} {r.version}"
    lines += [
        f"note: {key}: {release} {'refuses' if key in r.release.refuses else 'ignores'} it ({why})"
        for key, why in r.unused.items()
    ]
    if r.mapping.unmodelled:
        lines.append("not modelled:")
        lines += [f"  - {item}" for item in r.mapping.unmodelled]
    if r.ignored:
        shown = ", ".join(r.ignored[:8]) + (
            f" and {len(r.ignored) - 8} more (--json lists them all)" if len(r.ignored) > 8 else ""
        )
        lines.append(f"not read (no bearing on the toy's gradients, or unknown to toyrl): {shown}")
    c = check.config
    lines.append(
        f"on the toy: {len(check.seeds)} seeds x {c.steps} steps, B = {c.batch_prompts}, "
        f"G = {c.group_size}, cap {c.cap}; final step, {over_seeds(len(check.seeds))} (exact expectations):"
    )
    header = ("", "accuracy %", "E[L | incorrect]", "E[L | correct]")
    rows = [
        ("these settings", check.setting),
        ("Dr. GRPO", check.reference),
    ]
    table = [header] + [
        (label, format_mean_sd(o.accuracy, 100, 1), format_mean_sd(o.incorrect), format_mean_sd(o.correct))
        for label, o in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines += ["  " + "  ".join(cell.rjust(w) for cell, w in zip(row, widths, strict=True)) for row in table]
    lines.append(f"verdict: {check.verdict()}")
    lines.append(fix_line(check))
    lines.append(
        "(the same seeds and noise for both; conclusions hold for the toy's conventions, docs/trainers.md)"
    )
    if r.misspelt or r.unknown:
        count = len(r.misspelt) + len(r.unknown)
        what = " and ".join((["misspelt"] if r.misspelt else []) + (["unknown"] if r.unknown else []))
        lines.append(
            f"warning: the verdict takes the defaults in place of the {count} {what} "
            f"key{'s' if count > 1 else ''} above (exit status 1)"
        )
    return lines


def fix_line(check: Check) -> str:
    """What to set for Dr. GRPO in this trainer and release (`Check.fix`), with what the toy then
    gives: the reference's numbers, its run being the same variant's."""
    r = check.resolved
    if check.fix is None:
        return (
            f"to Dr. GRPO: no setting of {r.trainer.name} {r.version} that toyrl models makes these settings "
            "Dr. GRPO's loss"
        )
    if not check.fix:
        return "to Dr. GRPO: nothing to change"
    settings = ", ".join(f"{name}={value!r}" for name, value in check.fix.items())
    return (
        f"to Dr. GRPO: set {settings}; the toy then runs these settings as the Dr. GRPO row above "
        f"(the same variant): wrong answers end at {format_mean_sd(check.reference.incorrect)} tokens "
        "(mean ± sd over seeds)"
    )


def misspelt_warning(resolved: Resolved) -> list[str]:
    """The report's first lines when a file's keys look misspelt: each with the setting it is
    spelt like, and that setting's value in the check (the default, unless given)."""
    if not resolved.misspelt:
        return []
    count = len(resolved.misspelt)
    lines = [
        f"warning: {count} key{'s' if count > 1 else ''} {'look' if count > 1 else 'looks'} misspelt; "
        f"toyrl does not read {'them' if count > 1 else 'it'}:"
    ]
    for key, name in resolved.misspelt.items():
        value = resolved.values[name]
        taken = "given" if name in resolved.given else "its default"
        lines.append(f"  - {key}: did you mean {name}? (checked with {name}={value!r}, {taken})")
    return lines


def as_json(check: Check) -> dict[str, Any]:
    mean, se = check.difference
    paired = check.paired
    return {
        "trainer": check.resolved.trainer.name,
        "version": check.resolved.version,
        "settings": check.resolved.values,
        "given": check.resolved.given,
        "spec": check.setting.variant.spec_text(),
        "preset": check.preset,
        "loss_preset": check.loss_preset,
        "notes": check.resolved.mapping.notes,
        "unmodelled": check.resolved.mapping.unmodelled,
        "ignored": check.resolved.ignored,
        "ignored_by_the_trainer": check.resolved.unused,
        "misspelt": check.resolved.misspelt,
        "renamed": {key: name for key, (name, _) in check.resolved.renamed.items()},
        "read_as": check.resolved.read_as,
        "source": check.resolved.release.source,
        "run_against_the_trainer": not check.resolved.release.not_run,
        "unread": list(check.resolved.unread),
        "unknown": check.resolved.unknown,
        "seeds": check.seeds,
        "config": dataclasses.asdict(check.config),
        "setting": {
            "accuracy": check.setting.accuracy.tolist(),
            "length_incorrect": check.setting.incorrect.tolist(),
            "length_correct": check.setting.correct.tolist(),
        },
        "dr_grpo": {
            "accuracy": check.reference.accuracy.tolist(),
            "length_incorrect": check.reference.incorrect.tolist(),
            "length_correct": check.reference.correct.tolist(),
        },
        "dr_grpo_spec": check.reference.variant.spec_text(),
        "difference_length_incorrect": {
            "mean": mean,
            "se": se,
            "ci95": None if paired.low is None else [paired.low, paired.high],
            "ci_method": f"percentile bootstrap over {paired.seeds} paired seeds, {RESAMPLES:,} resamples",
        },
        "verdict": check.verdict(),
        "dr_grpo_settings": check.fix,
    }
