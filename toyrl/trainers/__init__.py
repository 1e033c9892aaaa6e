"""From a trainer's own settings to a toyrl variant: what `toyrl check` reads.

Each trainer module (`toyrl.trainers.trl`, ...) describes one trainer: per release, its settings
with their defaults and valid values (`Setting`), and a function that maps a full set of settings
to a toyrl spec, the toy configuration fields they set, the settings toyrl does not model and
what the release does that its names do not say (`ToyMapping`). The mapping follows the
trainer's loss and advantage code of that release (the module names the files); the conformance
suite (tests/conformance) checks the presets it lands on against the installed trainer.

`resolve(trainer, version, settings)` validates user settings (an unknown `--set` key or a bad
value gets one line naming the valid ones, with a close match; a file's keys toyrl does not read
are listed), fills in the release's defaults, and maps them.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toyrl.config import InvalidInput


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
        bounds = ""
        if self.low is not None or self.high is not None:
            low = "-inf" if self.low is None else f"{self.low:g}"
            high = "inf" if self.high is None else f"{self.high:g}"
            bounds = f" in [{low}, {high}]"
        return f"{'a ' if self.kind is not int else 'an '}{self.kind.__name__}{bounds}" + (
            " or None" if self.optional else ""
        )

    def parse(self, name: str, value: Any) -> Any:
        """The value as the trainer takes it (text from `--set` is converted), or InvalidInput."""
        if (isinstance(value, str) and self.kind is not str) or (self.optional and value in ("None", "null")):
            value = _from_text(value)
        if value is None:
            if self.optional:
                return None
            raise InvalidInput(f"{name}: None is not valid; valid: {self.describe()}")
        if self.choices:
            candidates = [value, _from_text(value)] if isinstance(value, str) else [value]
            for candidate in candidates:  # `--set scale_rewards=false` is the choice False
                for choice in self.choices:
                    if candidate == choice and type(candidate) is type(choice):
                        return choice
            close = difflib.get_close_matches(str(value), [str(c) for c in self.choices], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidInput(f"{name}={value!r} is not valid{hint}; valid: {self.describe()}")
        ok = isinstance(value, self.kind) and not (self.kind is not bool and isinstance(value, bool))
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if ok and self.kind in (int, float):
            ok = (self.low is None or value >= self.low) and (self.high is None or value <= self.high)
        if not ok:
            raise InvalidInput(f"{name}={value!r} is not valid; valid: {self.describe()}")
        return value


def _from_text(text: str) -> Any:
    """A `--set` value: true/false, none/null, a number, or the text itself."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("none", "null"):
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


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


@dataclass(frozen=True)
class Release:
    """A trainer release: its settings (name -> Setting), the files the mapping follows, and the
    mapping of a full set of settings (every name present, validated) to the toy."""

    settings: dict[str, Setting]
    source: str
    mapping: Callable[[dict[str, Any]], ToyMapping]


@dataclass(frozen=True)
class Trainer:
    """A trainer: its name as printed, the distribution on PyPI, its releases by version (the first
    is the default)."""

    name: str
    distribution: str
    releases: dict[str, Release]

    @property
    def latest(self) -> str:
        return next(iter(self.releases))

    def release(self, version: str | None) -> tuple[str, Release]:
        chosen = version or self.latest
        if chosen not in self.releases:
            raise InvalidInput(
                f"--version {chosen} of {self.name} is not modelled; modelled: {', '.join(self.releases)}"
            )
        return chosen, self.releases[chosen]


def not_modelled(setting: str, value: Any, modelled: Iterable[Any], why: str = "") -> InvalidInput:
    """The one-line refusal of a setting's value that toyrl does not model (`why`, if given, in
    brackets), naming the values it does."""
    reason = f" ({why})" if why else ""
    valid = ", ".join(map(repr, modelled))
    return InvalidInput(f"{setting}={value!r} is not modelled by toyrl yet{reason}; modelled: {valid}")


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


def grad_clip_note(setting: str, value: Any) -> str:
    """What a trainer's gradient-norm clipping is on the toy: left out, since a bound on the norm
    over an LLM's parameters says nothing about one over the toy's P + 2 logits."""
    return (
        f"{setting}={value}: gradient-norm clipping; a bound on the norm over an LLM's parameters says "
        "nothing about the toy's P + 2 logits, so it is left out (spell max_grad_norm=... to clip the toy's)"
    )


def constant_note(setting: str, value: Any, what: str) -> str:
    """What a Dr. GRPO loss's constant denominator is on the toy."""
    return (
        f"{setting}={value}: {what}; it only rescales the learning rate, and the toy divides by its own "
        "cap (Config.length_norm)"
    )


def _registry() -> dict[str, Trainer]:
    from toyrl.trainers import oat, openrlhf, trl, verl

    return {"trl": trl.TRAINER, "verl": verl.TRAINER, "openrlhf": openrlhf.TRAINER, "oat": oat.TRAINER}


def trainer(name: str) -> Trainer:
    registry = _registry()
    if name not in registry:
        close = difflib.get_close_matches(name, list(registry), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidInput(f"--trainer {name!r} is not modelled{hint}; modelled: {', '.join(registry)}")
    return registry[name]


@dataclass(frozen=True)
class Resolved:
    """A trainer's settings on the toy: the release, every setting's value (defaults filled in),
    which of them the user gave, and the mapping."""

    trainer: Trainer
    version: str
    release: Release
    values: dict[str, Any]
    given: dict[str, Any]
    mapping: ToyMapping
    ignored: list[str] = field(default_factory=list)


def resolve(
    name: str, version: str | None, settings: Mapping[str, Any], from_file: frozenset[str] = frozenset()
) -> Resolved:
    """Validate `settings` (name -> value, text or typed) against the release, fill in its
    defaults and map them to the toy.

    A `--set` setting toyrl does not know is refused (one line, with a close match). One read from
    a configuration file (`from_file`) is listed in `ignored` instead: a trainer's file holds many
    settings (paths, learning rates, logging, its micro-batch sizes) with no bearing on the toy's
    gradients, some named much like the ones toyrl reads, so a typo there shows in that list
    rather than as an error. Every value of a setting toyrl reads is validated either way."""
    chosen = trainer(name)
    version, release = chosen.release(version)
    given: dict[str, Any] = {}
    ignored: list[str] = []
    for key, value in settings.items():
        if key not in release.settings:
            if key in from_file:
                ignored.append(key)
                continue
            close = difflib.get_close_matches(key, list(release.settings), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidInput(
                f"{chosen.name} {version} has no setting {key!r} that toyrl knows{hint}; "
                f"known: {', '.join(release.settings)}"
            )
        given[key] = release.settings[key].parse(key, value)
    values = {key: given.get(key, setting.default) for key, setting in release.settings.items()}
    return Resolved(chosen, version, release, values, given, release.mapping(values), ignored)


def parse_sets(items: list[str]) -> dict[str, str]:
    """`--set KEY=VALUE` items as a dict (a key given twice: the last one)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInput(f"--set {item!r}: expected KEY=VALUE, e.g. --set loss_type=dr_grpo")
        out[key.strip()] = value.strip()
    return out


def read_settings(path: Path) -> dict[str, Any]:
    """A trainer configuration file as flat settings: JSON, or YAML (with PyYAML installed: pip
    install 'toyrl[yaml]'). Nested mappings are flattened with dots (verl's
    `actor_rollout_ref.actor.loss_agg_mode`)."""
    if not path.is_file():
        raise InvalidInput(f"{path}: no such file")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise InvalidInput(f"{path}: not valid JSON ({error.msg}, line {error.lineno})") from None
    elif path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise InvalidInput(f"{path}: reading YAML needs PyYAML: pip install 'toyrl[yaml]'") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise InvalidInput(f"{path}: not valid YAML ({str(error).splitlines()[0]})") from None
    else:
        raise InvalidInput(f"{path}: expected a .json, .yaml or .yml file")
    if not isinstance(data, dict):
        raise InvalidInput(f"{path}: expected a mapping of settings at the top level")
    return _flatten(data)


def _flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= _flatten(value, f"{name}.")
        else:
            out[name] = value
    return out
