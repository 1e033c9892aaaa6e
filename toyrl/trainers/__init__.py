"""From a trainer's own settings to a toyrl variant: what `toyrl check` reads.

Each trainer module (`toyrl.trainers.trl`, ...) describes one trainer: per release, its settings
with their defaults and valid values (`Setting`), and a function that maps a full set of settings
to a toyrl spec, the toy configuration fields they set, the settings toyrl does not model and
what the release does that its names do not say (`ToyMapping`). The mapping follows the
trainer's loss and advantage code of that release (the module names the files); the conformance
suite (tests/conformance) checks the presets it lands on against the installed trainer.

`resolve(trainer, version, settings)` validates user settings (an unknown `--set` key or a bad
value gets one line naming the valid ones, with a close match; a file's keys toyrl does not read
are listed, those close to a setting it reads first, as probable misspellings), fills in the
release's defaults, and maps them. `toyrl.trainers.reading` reads files and command lines and
tells whose configuration they are (`detect`).
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toyrl.config import InvalidInput, finite, shown
from toyrl.values import BOOLEAN_SPELLINGS, parse_as

if TYPE_CHECKING:
    from toyrl.trainers.launch import Launch
    from toyrl.trainers.shell import Word


@dataclass(frozen=True)
class Unresolved:
    """A value toyrl cannot know from what it read: a `${...}` interpolation OmegaConf cannot
    resolve, or a script's word built from what the script does not say (a variable it never
    assigns, a command substitution, `$@`): its text, and why (`toyrl.trainers.reading`)."""

    text: str
    why: str
    # set only when the script runs (by its environment or arguments): the check takes the default
    at_run: bool = False


# a trainer's integers are 64-bit where they are used (torch, numpy): a larger one in any input
# form (--set, YAML, JSON, Python, a command line) is refused, not carried into the toy's arithmetic
INT_LIMIT = 2**63 - 1


@dataclass(frozen=True)
class Setting:
    """One trainer setting in one release: its default, and its valid values: `choices` (a closed
    set), or values of `kind` (bool, int, float or str) within [low, high]; `optional`: None is
    valid too."""

    default: Any
    choices: tuple[Any, ...] = ()
    kind: type = str
    low: float | None = None
    high: float | None = None
    optional: bool = False

    def describe(self) -> str:
        """The valid values, for an error message."""
        if self.choices:
            return ", ".join(repr(c) for c in self.choices)
        if self.kind is bool:
            return BOOLEAN_SPELLINGS
        bounds = ""
        if self.low is not None or self.high is not None or self.kind is int:
            unbounded = ("-inf", "inf") if self.kind is not int else (f"{-INT_LIMIT - 1}", f"{INT_LIMIT}")
            low = unbounded[0] if self.low is None else f"{self.low:g}"
            high = unbounded[1] if self.high is None else f"{self.high:g}"
            bounds = f" in [{low}, {high}]"
        return f"{'a ' if self.kind is not int else 'an '}{self.kind.__name__}{bounds}" + (
            " or None" if self.optional else ""
        )

    def parse(self, name: str, value: Any) -> Any:
        """The value as the trainer takes it (text from `--set` is read as this setting's kind or
        choices by `toyrl.values`), or InvalidInput."""
        if isinstance(value, Unresolved):
            raise InvalidInput(f"{name}={value.text} cannot be read: {value.why}")
        if isinstance(value, str) and value.strip().lower() in ("none", "null") and self.kind is not str:
            value = None
        elif self.optional and value in ("None", "null"):
            value = None
        if value is None:
            if self.optional:
                return None
            raise InvalidInput(f"{name}: None is not valid; valid: {self.describe()}")
        if self.choices:
            for choice in self.choices:  # `--set scale_rewards=false` is the choice False
                candidate = _as_kind_of(name, value, choice)
                if candidate == choice and type(candidate) is type(choice):
                    return choice
            close = difflib.get_close_matches(str(value), [str(c) for c in self.choices], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidInput(f"{name}={shown(value)} is not valid{hint}; valid: {self.describe()}")
        if self.kind is not str:
            value = _as_kind_of(name, value, self.kind())
        ok = isinstance(value, self.kind) and not (self.kind is not bool and isinstance(value, bool))
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok = finite(value)  # not an int beyond a float's range
            value = float(value) if ok else value
        if ok and self.kind is float:
            ok = value == value  # not NaN (a setting without bounds would take it)
        if ok and self.kind in (int, float):
            ok = (self.low is None or value >= self.low) and (self.high is None or value <= self.high)
        if ok and self.kind is int:
            ok = -INT_LIMIT - 1 <= value <= INT_LIMIT
        if not ok:
            raise InvalidInput(f"{name}={shown(value)} is not valid; valid: {self.describe()}")
        return value


def _as_kind_of(name: str, value: Any, like: Any) -> Any:
    """`value` as `like`'s kind when it is text (`toyrl.values.parse_as`), or as it is when it is not
    text or does not read as that kind (the caller then says what is valid)."""
    if not isinstance(value, str) or isinstance(like, str):
        return value
    try:
        return parse_as(name, value, like)
    except InvalidInput:
        return value


Levers = tuple[Any, ...] | Callable[[dict[str, Any]], tuple[Any, ...]]


@dataclass(frozen=True)
class MicroLayout:
    """How a trainer lays its optimiser steps out over ranks and micro-batches by length (verl's
    V1 trainer, `toyrl.layout`): the data-parallel ranks it deals each batch to balanced by
    workload, a micro-batch token budget (0: micro-batches of a fixed size), and the prompt and
    response lengths in the trainer's tokens (data.max_prompt_length, max_response_length), by
    which `toyrl.trainers.check` scales the budget and the prompt to the toy's lengths."""

    ranks: int = 1
    token_budget: int = 0
    prompt_tokens: int = 0
    response_tokens: int = 1


@dataclass(frozen=True)
class ToyMapping:
    """What a trainer's settings are on the toy: a spec (`toyrl.objective`), the configuration
    fields they set (field -> (setting, value); applied when the user gave that setting), and each
    setting toyrl does not model, with why it matters or not."""

    spec: str
    config: dict[str, tuple[str, Any]] = field(default_factory=dict)
    unmodelled: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the release does that its names do not say
    step_responses: int | None = None  # responses in one of the trainer's optimiser steps
    # responses in one of the trainer's micro-batches, where the normaliser's scope is the
    # micro-batch and its size matters (the check cuts the toy's optimiser steps to match)
    micro_batch_responses: int | None = None
    layout: MicroLayout = field(default_factory=MicroLayout)  # ranks and token budget, where they matter


@dataclass(frozen=True)
class Release:
    """A trainer release: its settings (name -> Setting), the files the mapping follows, the
    mapping of a full set of settings (every name present, validated) to the toy, and the other
    names its settings go by in other releases (other name -> this release's name, with why)."""

    settings: dict[str, Setting]
    source: str
    mapping: Callable[[dict[str, Any]], ToyMapping]
    aliases: dict[str, tuple[str, str]] = field(default_factory=dict)
    # the settings that can make a run Dr. GRPO's loss, each with the values to try (or a function
    # of the run's settings giving them): `toyrl.trainers.check.dr_grpo_settings` searches them
    dr_grpo: dict[str, Levers] = field(default_factory=dict)
    # names of its configuration that this release accepts and never reads (a key, or a section
    # ending in "."), with what that means for length: told in the report, not taken for misspellings
    ignores: dict[str, str] = field(default_factory=dict)
    # names of the trainer's other releases that this release's own parser refuses, with why: a
    # --set of one is refused, a file's is told in the report (its launch would stop at it)
    refuses: dict[str, str] = field(default_factory=dict)
    # why the mapping is not run against the trainer's code ("" when the conformance suite runs it):
    # it was read from the trainer's source (`source`), and `toyrl check` says so
    not_run: str = ""

    def ignoring(self, key: str) -> str | None:
        """Why this release ignores `key` (`ignores`), or None when it does not."""
        if key in self.ignores:
            return self.ignores[key]
        sections = [name for name in self.ignores if name.endswith(".") and key.startswith(name)]
        return self.ignores[max(sections, key=len)] if sections else None


@dataclass(frozen=True)
class Entry:
    """A command that starts a trainer's training, and how its arguments are read.

    It starts with `program` (its words, the first matched by its file's name: `swift rlhf`, `uv
    run rl`), or runs `module` (`python -m MODULE`, or the module's file `a/b/c.py`; `pkg.*`: any
    module under pkg), or launches a Python script whose file's name matches `script` (an fnmatch
    pattern, `run_grpo*.py`). `read` reads its arguments: "flags" (as argparse), "overrides"
    (Hydra's override grammar) or the trainer's own function (words, origin) -> Launch."""

    program: tuple[str, ...] = ()
    module: str = ""
    script: str = ""
    read: str | Callable[[list[Word], str], Launch] = "flags"

    def starts(self, texts: list[str], i: int) -> int | None:
        """The index of the entry's first argument when the command's words start it at `i`."""
        text = texts[i]
        if self.program:
            words = texts[i : i + len(self.program)]
            if len(words) == len(self.program) and Path(words[0]).name == self.program[0]:
                if words[1:] == list(self.program[1:]):
                    return i + len(self.program)
            return None
        if self.module:
            name = texts[i + 1] if text in ("-m", "--module") and i + 1 < len(texts) else ""
            if text.endswith(".py"):
                name = text.removesuffix(".py").replace("/", ".")
            if self.module.endswith(".*"):
                prefix = self.module[:-1]
                hit = name.startswith(prefix) or f".{prefix}" in name
            else:
                hit = name == self.module or name.endswith(f".{self.module}")
            if hit:
                return i + (1 if text.endswith(".py") else 2)
            return None
        if self.script and text.endswith(".py") and fnmatch.fnmatch(Path(text).name, self.script):
            return i + 1
        return None


@dataclass(frozen=True)
class Trainer:
    """A trainer: its name as printed, the distribution on PyPI, its releases by version (the first
    is the default); `marks`: names, and sections ending in ".", that only its configurations
    have, besides its settings (what `toyrl.trainers.reading.detect` goes by); `other_names`: names
    of its configurations that toyrl does not read and that are spelt close to a setting it
    reads, so that they are not taken for misspellings of it."""

    name: str
    distribution: str
    releases: dict[str, Release]
    marks: tuple[str, ...] = ()
    other_names: frozenset[str] = frozenset()
    entries: tuple[Entry, ...] = ()  # how its launch commands start (verl's, TRL's, OpenRLHF's: launch.py)
    # its configuration file as flat dotted settings, where its format holds more than one
    # file's keys (a `defaults:` list of files it inherits); None: `reading.read_settings`
    read_file: Callable[[Path], dict[str, Any]] | None = None
    # the trainer (registry name) whose configuration class this one's extends (ms-swift's and
    # Unsloth's GRPO configurations are TRL's GRPOConfig and more): the names they share are the
    # other's evidence, and a configuration with names of both is this one's (`reading.detect`)
    extends: str = ""

    def knows(self, key: str) -> bool:
        """Whether `key` is a name of this trainer's configurations: a setting or another name of
        one in any release modelled, one of its other names, or under one of its sections; for a
        trainer that extends another's configuration, not one of the other's names."""
        known = (
            key in self.other_names
            or any(key in release.settings or key in release.aliases for release in self.releases.values())
            or any(key == mark or (mark.endswith(".") and key.startswith(mark)) for mark in self.marks)
        )
        return known and not (self.extends and registry()[self.extends].knows(key))

    @property
    def latest(self) -> str:
        return next(iter(self.releases))

    def release(self, version: str | None) -> tuple[str, Release]:
        chosen = self.latest if version is None else version
        if chosen not in self.releases:
            named = chosen if chosen.strip() else repr(chosen)
            raise InvalidInput(
                f"--version {named} of {self.name} is not modelled; modelled: {', '.join(self.releases)}"
            )
        return chosen, self.releases[chosen]


def not_modelled(setting: str, value: Any, modelled: Iterable[Any], why: str = "") -> InvalidInput:
    """The one-line refusal of a setting's value that toyrl does not model (`why`, if given, in
    brackets), naming the values it does."""
    reason = f" ({why})" if why else ""
    valid = ", ".join(map(repr, modelled))
    return InvalidInput(f"{setting}={shown(value)} is not modelled by toyrl yet{reason}; modelled: {valid}")


def ppo_spec(
    epsilon: float,
    epsilon_high: float | None = None,
    epochs: int = 1,
    beta: float = 0.0,
    mask_truncated: bool = False,
    dual_clip: float | None = None,
) -> list[str]:
    """The spec items of PPO's clip range, its epochs, the k3 KL term, masking truncated responses
    and the dual clip, each only where it is not toyrl's default."""
    spec = [f"epsilon={epsilon}"]
    if epsilon_high is not None and epsilon_high != epsilon:
        spec.append(f"epsilon_high={epsilon_high}")
    if epochs > 1:
        spec.append(f"num_iterations={epochs}")
    if beta > 0:
        spec.append(f"beta={beta}")
    if mask_truncated:
        spec.append("mask_truncated=True")
    if dual_clip is not None:
        spec.append(f"dual_clip={dual_clip}")
    return spec


def schedule_spec(
    generated: int,
    step: int,
    shuffle: str,
    what: str,
    micro_batches: int = 1,
) -> tuple[list[str], list[str]]:
    """(spec items, unmodelled notes) of a trainer's optimiser steps per generated batch: the
    batch of `generated` responses (or prompts) cut into mini-batches of `step` for one optimiser
    step each (`what` names the settings), in the trainer's order (`shuffle`, toyrl's name), with
    `micro_batches` gradient-accumulation steps each (given only where the normaliser's scope is
    the micro-batch). A step that does not divide the batch is named, and its whole mini-batches taken."""
    mini_batches = max(1, generated // step)
    unmodelled = []
    if generated % step and generated > step:
        unmodelled.append(
            f"{what}: {generated} is not a multiple of {step}; the toy takes {mini_batches} "
            "equal mini-batches"
        )
    spec = []
    if mini_batches > 1:
        spec.append(f"mini_batches={mini_batches}")
    if micro_batches > 1:
        spec.append(f"micro_batches={micro_batches}")
    if shuffle != "none" and (mini_batches > 1 or micro_batches > 1):
        spec.append(f"shuffle={shuffle}")
    return spec, unmodelled


def soft_overlong_spec(longest: int, start: int, cache: int, penalty: float, task: float) -> list[str]:
    """The spec items of DAPO's soft overlong punishment (`reward=soft_overlong`) as a trainer's
    reward function adds it to the task's 0/1 reward of weight `task` (`incorrect=0`): nothing up
    to `start` tokens, then `penalty` more per `cache` tokens, up to the longest response
    `longest`; in the toy's units of the task's reward."""
    depth = (longest - start) / cache * penalty / task  # the penalty at the longest response
    buffer = (longest - start) / longest
    return ["reward=soft_overlong", f"buffer={buffer}", f"penalty_factor={depth}", "incorrect=0"]


def grad_clip_note(setting: str, value: Any) -> str:
    """What a trainer's gradient-norm clipping is on the toy: left out, since a bound on the norm
    over an LLM's parameters says nothing about one over the toy's P + 2 logits (the toy's own
    clip is a variant key of `toyrl run`, not a trainer setting)."""
    return (
        f"{setting}={value}: gradient-norm clipping; a bound on the norm over an LLM's parameters says "
        "nothing about the toy's P + 2 logits, so it is left out (toyrl run --variant SPEC,max_grad_norm=C "
        "clips the toy's own gradient)"
    )


def constant_note(setting: str, value: Any, what: str) -> str:
    """What a Dr. GRPO loss's constant denominator is on the toy."""
    return (
        f"{setting}={value}: {what}; it only rescales the learning rate, and the toy divides by its own "
        "cap (Config.length_norm)"
    )


# the trainers modelled: the name `--trainer` takes -> the module that describes it
MODULES = {
    "trl": "trl",
    "verl": "verl",
    "openrlhf": "openrlhf",
    "oat": "oat",
    "ms-swift": "swift",
    "unsloth": "unsloth",
    "skyrl": "skyrl",
    "areal": "areal",
    "nemo-rl": "nemo_rl",
    "roll": "roll",
    "slime": "slime",
    "prime-rl": "prime_rl",
    "easyr1": "easyr1",
}


def registry() -> dict[str, Trainer]:
    """The trainers modelled, by the name `--trainer` takes."""
    modules = {name: importlib.import_module(f"toyrl.trainers.{module}") for name, module in MODULES.items()}
    return {name: module.TRAINER for name, module in modules.items()}


def trainer(name: str) -> Trainer:
    trainers = registry()
    if name not in trainers:
        close = difflib.get_close_matches(name, list(trainers), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidInput(f"--trainer {name!r} is not modelled{hint}; modelled: {', '.join(trainers)}")
    return trainers[name]


def misspelt(key: str, names: Collection[str]) -> str | None:
    """The name among `names` (dotted paths, or flat) that `key` probably misspells, or None: one
    with the same last part in a section spelt alike, or one level up or down (verl's
    `actor.policy_loss.tau_pos` for `actor.tau_pos`), or at the top level when the key has no
    section; else one in the same section whose last part is within difflib's ratio 0.8."""
    section, _, leaf = key.rpartition(".")
    for name in names:
        other_section, _, other_leaf = name.rpartition(".")
        if other_leaf == leaf and name != key:
            nested = section.startswith(other_section + ".") or other_section.startswith(section + ".")
            alike = difflib.SequenceMatcher(None, section, other_section).ratio() >= 0.8
            if not section or not other_section or nested or alike:
                return name
    siblings = {name.rpartition(".")[2]: name for name in names if name.rpartition(".")[0] == section}
    close = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.8)
    return siblings[close[0]] if close else None


@dataclass(frozen=True)
class Resolved:
    """A trainer's settings on the toy: the release, every setting's value (defaults filled in),
    which of them the user gave (by the release's names), and the mapping; of a file's keys, those
    toyrl does not read (`ignored`) and those that look like misspellings of a setting it reads
    (`misspelt`: key -> that setting); `renamed`: keys given by another release's name (key ->
    this release's name, why); `read_as`: whose configuration this is, and why (`detect`)."""

    trainer: Trainer
    version: str
    release: Release
    values: dict[str, Any]
    given: dict[str, Any]
    mapping: ToyMapping
    ignored: list[str] = field(default_factory=list)
    misspelt: dict[str, str] = field(default_factory=dict)
    renamed: dict[str, tuple[str, str]] = field(default_factory=dict)
    read_as: str = ""
    unused: dict[str, str] = field(default_factory=dict)  # keys the release ignores -> what that means
    unread: tuple[str, ...] = ()  # what the input holds that could not be read (a script's $@, ...)
    # settings whose value is set only when the script runs (key -> what it depends on): the
    # check takes the release's default in their place
    unknown: dict[str, str] = field(default_factory=dict)


def resolve(
    name: str,
    version: str | None,
    settings: Mapping[str, Any],
    from_file: frozenset[str] = frozenset(),
    read_as: str = "",
) -> Resolved:
    """Validate `settings` (name -> value, text or typed) against the release, fill in its
    defaults and map them to the toy.

    A `--set` setting toyrl does not know is refused (one line, with a close match). One read from
    a configuration file or command line (`from_file`) is not: a trainer's file holds many
    settings (paths, learning rates, logging, its micro-batch sizes) with no bearing on the toy's
    gradients. Those spelt close to a setting toyrl reads (`misspelt`, by this release's name of
    it, also where the key is spelt like another release's name), and not another name of the
    trainer's (`Trainer.other_names`), are kept apart from the rest (`ignored`), to be shown first.
    A setting's name in another release (OpenRLHF's before and after 0.10.2) is read as this
    release's (given by both names, the later counts). Every value of a setting toyrl reads is
    validated either way."""
    chosen = trainer(name)
    version, release = chosen.release(version)
    given: dict[str, Any] = {}
    ignored: list[str] = []
    typos: dict[str, str] = {}
    renamed: dict[str, tuple[str, str]] = {}
    unused: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for key, value in settings.items():
        setting_name = key
        if key in release.refuses:
            if key not in from_file:
                why = release.refuses[key]
                raise InvalidInput(
                    f"{chosen.name} {version} has no setting {key!r}: its parser refuses it ({why})"
                )
            unused[key] = release.refuses[key]
            continue
        why_unused = release.ignoring(key)
        if why_unused is not None and key not in release.settings:
            unused[key] = why_unused
            continue
        if key in release.aliases:
            setting_name, why = release.aliases[key]
            renamed[key] = (setting_name, why)
        if setting_name not in release.settings:
            names = [*release.settings, *release.aliases]
            nearest = None if key in chosen.other_names else misspelt(key, names)
            if nearest in release.aliases:  # another release's name: told as this release's
                nearest = release.aliases[nearest][0]
            if key in from_file and nearest is None:
                ignored.append(key)
                continue
            if key in from_file and nearest is not None:
                typos[key] = nearest
                continue
            hint = f" (did you mean {nearest!r}?)" if nearest else ""
            raise InvalidInput(
                f"{chosen.name} {version} has no setting {key!r} that toyrl knows{hint}; "
                f"known: {', '.join(release.settings)}"
            )
        given.pop(setting_name, None)  # given twice, by two names: the later, as argparse takes it
        unknown.pop(setting_name, None)
        if isinstance(value, Unresolved) and value.at_run:
            unknown[setting_name] = f"{key}={value.text}: {value.why}"
            continue
        given[setting_name] = release.settings[setting_name].parse(key, value)
    values = {key: given.get(key, setting.default) for key, setting in release.settings.items()}
    mapping = release.mapping(values)
    return Resolved(
        chosen,
        version,
        release,
        values,
        given,
        mapping,
        ignored,
        typos,
        renamed,
        read_as,
        unused,
        unknown=unknown,
    )


def parse_sets(items: list[str]) -> dict[str, str]:
    """`--set KEY=VALUE` items as a dict (a key given twice: the last one)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"--set {item!r}: expected KEY=VALUE, e.g. --set loss_type=dr_grpo")
        out[key.strip()] = value.strip()
    return out
