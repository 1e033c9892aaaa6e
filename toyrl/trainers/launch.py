"""The trainers' launch commands, read as their own parsers read them: which trainer a command
starts, and its settings.

- verl: `python3 -m verl.trainer.main_ppo key=value ...` (also its experimental entry points and
  the recipes' `recipe.NAME.main_NAME`), each argument a Hydra override, parsed by Hydra's own
  override grammar (hydra-core: `key=value`, `+key=value`, `++key=value`, `~key`, quoted values,
  lists `[a,b]`, `null`); `--config-name` and the other Hydra flags are noted;
- OpenRLHF: `python3 -m openrlhf.cli.train_ppo_ray --flag value ...` (or `deepspeed --module`, or
  the script's path), read as argparse reads it;
- TRL: `trl grpo --flag value ...`, and any Python script launched by `python`, `accelerate
  launch`, `torchrun` or `deepspeed` whose flags are a trainer's (HfArgumentParser reads them as
  argparse does; `--config FILE` is TRL's YAML file, its settings under the flags').

Commands come from a shell script (`toyrl.trainers.shell`) or from the command line after `--`;
the words before the anchor (`ray job submit ... --`, `accelerate launch --num_processes 8`,
`CUDA_VISIBLE_DEVICES=0 nohup`) are the launcher's. A word the script leaves unknown becomes an
`Unresolved` value; `$@` (the script's own arguments) is named in a note.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from toyrl import install
from toyrl.config import InvalidInput, shown
from toyrl.trainers import Unresolved, registry
from toyrl.trainers.shell import Command, Word

OPENRLHF_MODULE = "openrlhf.cli.train_ppo_ray"
OPENRLHF_SCRIPT = "openrlhf/cli/train_ppo_ray.py"
VERL_MODULE = "verl.trainer.main_ppo"
LAUNCHERS = ("python", "python3", "accelerate", "torchrun", "deepspeed")
HYDRA_FLAGS_WITH_VALUE = ("--config-path", "--config-name", "--config-dir", "-cp", "-cn", "-cd")
# Hydra's parser takes time growing with the square of an override's length (a list of 10,000
# numbers: 15 s): an override longer than MAX_OVERRIDE is not parsed (its value unknown, refused
# where toyrl reads it), and a command whose overrides hold more than MAX_OVERRIDES characters is
# refused. verl's launch scripts: overrides of tens of characters, a few thousand in all.
MAX_OVERRIDE = 1_000
MAX_OVERRIDES = 20_000
FORMS = (
    "verl's python3 -m verl.trainer.main_ppo key=value ..., TRL's trl grpo --flag value ... or a script "
    "launched by python or accelerate launch, OpenRLHF's python3 -m openrlhf.cli.train_ppo_ray --flag "
    "value ..."
)


@dataclass
class Launch:
    """A launch command read: the trainer it starts (a registry name; None for a Python script
    whose flags say whose they are), its settings (name -> value: text, or a Hydra override's
    typed value, or `Unresolved`), what was read (for messages) and what could not be (`notes`)."""

    trainer: str | None
    settings: dict[str, Any]
    origin: str
    notes: list[str] = field(default_factory=list)
    # configuration files the command names (`--config FILE`), read under its settings, a later
    # file over an earlier one (`toyrl.trainers.reading`)
    files: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Anchor:
    """Where a command's trainer starts: the trainer, the index of its first argument, the entry
    point's name, and how its arguments are read."""

    trainer: str | None
    start: int
    entry: str
    read: Callable[[list[Word], str], Launch]


def _verl_entry(module: str) -> bool:
    """verl's training entry points: main_ppo, the experimental ones and the recipes' main_*."""
    parts = module.split(".")
    if parts[0] == "verl":
        return module == VERL_MODULE or (parts[1:2] == ["experimental"] and "main" in parts[-1])
    return parts[0] == "recipe" and len(parts) >= 3 and parts[-1].startswith("main")


def _as_module(path: str) -> str:
    """`verl/trainer/main_ppo.py` as its module's name (the part from `verl/` or `recipe/` on)."""
    parts = path.removesuffix(".py").split("/")
    for i, part in enumerate(parts):
        if part in ("verl", "recipe"):
            return ".".join(parts[i:])
    return ""


def anchor(words: list[Word]) -> _Anchor | None:
    """The trainer a command starts, if it starts one: verl's or OpenRLHF's module or script, TRL's
    `trl grpo`, or a Python script after a launcher (whose trainer its flags tell)."""
    texts = [word.text for word in words]
    for i, text in enumerate(texts):
        module = texts[i + 1] if text in ("-m", "--module") and i + 1 < len(texts) else ""
        if text.endswith(".py"):
            module = _as_module(text) or (OPENRLHF_MODULE if text.endswith(OPENRLHF_SCRIPT) else "")
        start = i + (1 if text.endswith(".py") else 2)  # after the script, or after -m MODULE
        if module == OPENRLHF_MODULE:
            return _Anchor("openrlhf", start, module, partial(read_flags, trainer="openrlhf"))
        if module and _verl_entry(module):
            return _Anchor("verl", start, module, read_overrides)
        if Path(text).name == "trl" and texts[i + 1 : i + 2] == ["grpo"]:
            return _Anchor("trl", i + 2, "trl grpo", partial(read_flags, trainer="trl"))
        for name, trainer in registry().items():
            for entry in trainer.entries:
                first = entry.starts(texts, i)
                if first is not None:
                    named = texts[i + 1 : first] if text in ("-m", "--module") else texts[i:first]
                    return _Anchor(name, first, " ".join(named), _reader(entry.read, name))
    launcher = next((i for i, text in enumerate(texts) if Path(text).name.startswith(LAUNCHERS)), None)
    if launcher is not None:  # python, accelerate launch ..., also after a wrapper (srun, nohup)
        for i, text in enumerate(texts[launcher + 1 :], start=launcher + 1):
            option_value = texts[i - 1].startswith("--config") and "=" not in texts[i - 1]
            if text.endswith(".py") and not option_value:
                return _Anchor(None, i + 1, text, _script_arguments)
    return None


Reader = Callable[[list[Word], str], "Launch"]


def _reader(read: str | Reader, trainer: str) -> Reader:
    """An entry's reader of its arguments (`Entry.read`) as a function (words, origin) -> Launch."""
    if read == "flags":
        return partial(read_flags, trainer=trainer)
    if read == "overrides":
        return partial(read_overrides, trainer=trainer)
    if isinstance(read, str):
        raise ValueError(f"an entry of {trainer} reads its arguments as {read!r}; valid: flags, overrides")
    return read


def _script_arguments(words: list[Word], origin: str) -> Launch:
    """A Python script's arguments, whose trainer its keys tell: Hydra overrides when the first
    is `key=value` (a script of verl's configuration), else flags."""
    first = next((word.text for word in words if not word.spread), "")
    if "=" in first and not first.startswith("-"):
        return read_overrides(words, origin, trainer=None)
    return read_flags(words, origin, None)


def read_command(command: Command, origin: str) -> Launch | None:
    """The launch command's settings, or None when the command starts no trainer."""
    found = anchor(command.words)
    if found is None:
        return None
    launch = found.read(command.words[found.start :], f"{origin}: {found.entry}")
    if found.trainer == "verl" and found.entry != VERL_MODULE:
        launch.notes.append(
            f"{found.entry} is read against verl.trainer.main_ppo's configuration and defaults; the entry "
            "point's own configuration may set others (give them with --set)"
        )
    return launch


def _unknown(word: Word, text: str | None = None) -> Unresolved:
    """What a word the script leaves unknown gives a setting (`text`: the value's part of it)."""
    return Unresolved(word.text if text is None else text, "; ".join(word.unknown), at_run=True)


def _spread_note(word: Word, origin: str) -> str:
    return f"{word.text} in {origin}: {word.unknown[0]}; settings given there are not read (--set gives them)"


def read_flags(words: list[Word], origin: str, trainer: str | None) -> Launch:
    """Arguments as argparse reads them: `--name value` or `--name=value` (text), a flag alone
    (True: store_true, or HfArgumentParser's bare boolean), several values (a list of texts,
    nargs); given twice, the later. A word before any `--name` is refused (a positional argument
    these parsers do not take)."""
    settings: dict[str, Any] = {}
    notes: list[str] = []
    name = ""
    for word in words:
        if word.spread:
            notes.append(_spread_note(word, origin))
            name = ""
            continue
        text = word.text
        if text.startswith("--") and not word.unknown:
            name, equals, value = text[2:].partition("=")
            if not name:
                raise InvalidInput(f"{origin}: a bare '--' among its arguments")
            settings.pop(name, None)
            settings[name] = value if equals else True
        elif not name:
            shown = text if len(text) <= 60 else text[:57] + "..."
            raise InvalidInput(f"{origin}: {shown!r} follows no --argument")
        else:
            argument: Any = _unknown(word) if word.unknown else text
            previous = settings[name]
            if previous is True:
                settings[name] = argument
            elif isinstance(previous, list):
                previous.append(argument)
            else:
                settings[name] = [previous, argument]
    return Launch(trainer, settings, origin, notes)


def read_overrides(words: list[Word], origin: str, trainer: str | None = "verl") -> Launch:
    """Hydra's arguments (verl's, and those of other trainers' entries that read "overrides"):
    Hydra's flags, then one override a word, parsed by Hydra's own grammar."""
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import HydraException
    except ImportError:
        raise InvalidInput(
            f"{origin}: reading Hydra's overrides needs hydra-core: {install.hint('check')}"
        ) from None
    parser = OverridesParser.create()
    settings: dict[str, Any] = {}
    notes: list[str] = []
    pending_flag = ""
    parsed = 0  # characters given to Hydra's parser
    for word in words:
        text = word.text
        if pending_flag:
            notes.append(_hydra_flag_note(pending_flag, text))
            pending_flag = ""
            continue
        if word.spread:
            notes.append(_spread_note(word, origin))
            continue
        if text.startswith("-"):
            flag, equals, value = text.partition("=")
            if flag in HYDRA_FLAGS_WITH_VALUE and not equals:
                pending_flag = flag
            else:
                notes.append(_hydra_flag_note(flag, value) if equals else f"Hydra's {flag}: not read")
            continue
        if word.unknown and "=" not in text.split("$", 1)[0]:
            notes.append(f"{text} in {origin}: {word.unknown[0]}; this override is not read")
            continue
        parsed += min(len(text), MAX_OVERRIDE)
        if parsed > MAX_OVERRIDES:
            raise InvalidInput(
                f"{origin}: its Hydra overrides hold more than {MAX_OVERRIDES:,} characters; a verl "
                "command's hold a few thousand"
            )
        if len(text) > MAX_OVERRIDE:
            key, _, value = text.partition("=")
            try:
                key = parser.parse_override(f"{key[:MAX_OVERRIDE]}=0").key_or_group
            except HydraException:
                raise InvalidInput(f"{origin}: {shown(text)} is not a Hydra override") from None
            settings[key] = Unresolved(
                shown(value),
                f"an override of more than {MAX_OVERRIDE:,} characters, which toyrl does not parse",
            )
            continue
        try:
            override = parser.parse_override(text)
        except HydraException as error:
            # a value Hydra's grammar does not read (a placeholder such as <path>, or what the
            # script leaves unknown): refused only where toyrl reads the key
            key, equals, value = text.partition("=")
            try:
                if not equals or not key.lstrip("+"):
                    raise error
                key = parser.parse_override(f"{key}=0").key_or_group
            except HydraException:
                problem = str(error).splitlines()[0]
                raise InvalidInput(f"{origin}: {text!r} is not a Hydra override ({problem})") from None
            problem = str(error).splitlines()[0]
            settings[key] = (
                _unknown(word, value)
                if word.unknown
                else Unresolved(value, f"Hydra cannot read this value ({problem}), so verl refuses it")
            )
            continue
        key = override.key_or_group
        if key.startswith("hydra.") or key == "hydra":
            continue
        if override.is_delete():
            settings.pop(key, None)
            notes.append(f"~{key}: deleted, so the check takes verl's default")
            continue
        if override.is_sweep_override():
            settings[key] = Unresolved(text, "a Hydra sweep (--multirun) of several values; toyrl checks one")
        elif word.unknown:
            settings[key] = _unknown(word, text.partition("=")[2])
        else:
            settings |= _leaves(key, override.value())
    return Launch(trainer, settings, origin, notes)


def _leaves(key: str, value: Any) -> dict[str, Any]:
    """An override's value as the settings it gives: a mapping (`algorithm={adv_estimator:grpo}`)
    merged into its section as Hydra merges it, so each of its values under its dotted key."""
    if not isinstance(value, dict) or not value:
        return {key: value}
    leaves: dict[str, Any] = {}
    for name, inner in value.items():
        leaves |= _leaves(f"{key}.{name}", inner)
    return leaves


def _hydra_flag_note(flag: str, value: str) -> str:
    if flag in ("--config-name", "-cn"):
        return (
            f"Hydra's {flag} {value}: read against verl's ppo_trainer configuration and its defaults; "
            "settings that configuration changes are not read (give them with --set)"
        )
    return f"Hydra's {flag} {value}: not read"
