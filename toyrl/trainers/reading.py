"""What `toyrl check` is given, as flat settings, and whose configuration it is.

`read_input` takes a JSON or YAML file (nested keys joined with dots, as verl's Hydra paths
`actor_rollout_ref.actor.loss_agg_mode`; `${...}` interpolations resolved with OmegaConf, as
Hydra resolves verl's), an OpenRLHF command line (`python -m openrlhf.cli.train_ppo_ray --flag
value ...`, its wrappers `ray job submit ... --` or `deepspeed --module` before it), or a shell
script holding one. `detect` names the trainer whose configuration a set of keys is, and only when
the keys fit exactly one (`Trainer.knows`); it never guesses.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toyrl.config import InvalidInput, shown
from toyrl.inputs import CONFIG, check_regular, json_problem, read_bytes
from toyrl.trainers import Unresolved, misspelt, registry

OPENRLHF_MODULE = "openrlhf.cli.train_ppo_ray"
OPENRLHF_SCRIPT = "openrlhf/cli/train_ppo_ray.py"


@dataclass(frozen=True)
class Input:
    """Settings read (name -> value; text from a command line), the trainer the input's form
    names (an OpenRLHF command line), else None, and what was read, for messages."""

    settings: dict[str, Any]
    trainer: str | None
    origin: str


def read_input(arguments: list[str]) -> Input:
    """One argument: a configuration file (.json, .yaml, .yml) or a shell script (.sh) holding an
    OpenRLHF command; several: an OpenRLHF command line; none: no settings."""
    if not arguments:
        return Input({}, None, "")
    if len(arguments) > 1:
        return Input(
            read_command(arguments, "the command line"), "openrlhf", f"the command line of {OPENRLHF_MODULE}"
        )
    path = Path(arguments[0])
    if path.suffix.lower() == ".sh":
        line, settings = read_script(path)
        return Input(settings, "openrlhf", f"{path}, line {line}: {OPENRLHF_MODULE}")
    return Input(read_settings(path), None, str(path))


def _text(path: Path) -> str:
    """The file's text (`toyrl.inputs`: a regular file of at most CONFIG's cap), refused if it is
    not UTF-8 text or empty."""
    try:
        text = read_bytes(path, CONFIG).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{path}: not a text file (expected a trainer's configuration)") from None
    if "\0" in text:
        raise InvalidInput(f"{path}: not a text file (expected a trainer's configuration)")
    if not text.strip():
        raise InvalidInput(f"{path}: empty; expected a trainer's settings")
    return text


def read_settings(path: Path) -> dict[str, Any]:
    """A trainer configuration file as flat settings: JSON, or YAML (with PyYAML installed: pip
    install 'toyrl[yaml]'). Nested mappings are flattened with dots (verl's
    `actor_rollout_ref.actor.loss_agg_mode`); YAML's `${...}` interpolations are resolved
    (`_resolve`). A key given twice in one mapping is refused (JSON and YAML keep the last without
    a word), and so is a file nested deeper than MAX_DEPTH or of more than MAX_VALUES values
    once YAML's aliases are expanded (`_bounded`)."""
    suffix = path.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        if os.path.lexists(path):
            check_regular(path, CONFIG)  # a folder, FIFO or device is named as such first
        raise InvalidInput(
            f"{path}: expected a .json, .yaml or .yml file, or an OpenRLHF command in a .sh file"
        )
    text = _text(path)
    try:
        data = _json(path, text) if suffix == ".json" else _yaml(path, text)
    except RecursionError:
        raise InvalidInput(f"{path}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    except InvalidInput:
        raise
    except ValueError as error:  # an integer of more digits than Python converts
        raise InvalidInput(f"{path}: {json_problem(error)}") from None
    if not isinstance(data, dict):
        kind = "nothing" if data is None else f"a {type(data).__name__}"
        raise InvalidInput(f"{path}: expected a mapping of settings at the top level, got {kind}")
    _bounded(path, data)
    settings = _flatten(data)
    if any(isinstance(value, str) and "${" in value for value in settings.values()):
        settings = _resolve(path, data, settings)
    return settings


def _json(path: Path, text: str) -> Any:
    def once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        mapping: dict[str, Any] = {}
        for key, value in pairs:
            if key in mapping:
                raise InvalidInput(f"{path}: the key {shown(key)} is given twice in one object; keep one")
            mapping[key] = value
        return mapping

    try:
        return json.loads(text, object_pairs_hook=once)
    except json.JSONDecodeError as error:
        raise InvalidInput(f"{path}: not valid JSON ({error.msg}, line {error.lineno})") from None


def _yaml(path: Path, text: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise InvalidInput(f"{path}: reading YAML needs PyYAML: pip install 'toyrl[yaml]'") from None

    class Loader(yaml.SafeLoader):
        """PyYAML's safe loader, refusing a key given twice in one mapping (keys merged in with
        `<<:` may be given again: YAML's merge lets the mapping's own keys override them)."""

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node)
                if key in seen:
                    line = key_node.start_mark.line + 1
                    raise InvalidInput(
                        f"{path}, line {line}: the key {shown(key)} is given twice in one mapping; keep one"
                    )
                seen.add(key)
            return super().construct_mapping(node, deep)

    try:
        return yaml.load(text, Loader=Loader)
    except yaml.YAMLError as error:
        raise InvalidInput(f"{path}: not valid YAML ({str(error).splitlines()[0]})") from None


MAX_DEPTH = 100  # levels of nesting: verl's configuration has 6
MAX_VALUES = 100_000  # keys and list items, each alias counted where it is used: verl's has about 700


def _bounded(path: Path, data: dict[Any, Any]) -> None:
    """InvalidInput if `data` nests deeper than MAX_DEPTH or holds more than MAX_VALUES keys and
    list items, counting what a YAML alias stands for at each of its uses (twenty levels of
    `b: &b [*a, *a]` are a file of 600 bytes and a million values). The walk stops at the limit."""
    values = 0
    pending: list[tuple[Any, int]] = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise InvalidInput(f"{path}: nested more than {MAX_DEPTH} levels deep")
        children = list(value.values()) if isinstance(value, dict) else value
        values += len(children)
        if values > MAX_VALUES:
            raise InvalidInput(
                f"{path}: more than {MAX_VALUES:,} keys and list items (YAML aliases counted at each use); "
                "a trainer's configuration has a few hundred"
            )
        pending.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def _flatten(data: dict[Any, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= _flatten(value, f"{name}.")
        else:
            out[name] = value
    return out


def _resolve(path: Path, data: dict[Any, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The settings with their `${...}` interpolations (`${data.max_response_length}`,
    `${oc.select:key,default}`, `${oc.env:NAME}`) resolved by OmegaConf against the whole file, as
    Hydra resolves verl's configuration. One that cannot be resolved (a key the file does not have)
    becomes `Unresolved`: refused if toyrl reads it, listed if not."""
    interpolated = [key for key, value in settings.items() if isinstance(value, str) and "${" in value]
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
        from omegaconf.errors import OmegaConfBaseException
    except ImportError:
        key = interpolated[0]
        raise InvalidInput(
            f"{path}: {key}: {settings[key]} is an interpolation; resolving it needs OmegaConf: "
            "pip install 'toyrl[yaml]'"
        ) from None
    try:
        config = OmegaConf.create(data)
    except OmegaConfBaseException as error:
        raise InvalidInput(f"{path}: OmegaConf cannot read it ({str(error).splitlines()[0]})") from None
    resolved = dict(settings)
    for key in interpolated:
        try:
            value = OmegaConf.select(config, key, throw_on_resolution_failure=True)
        except OmegaConfBaseException as error:
            reason = str(error).splitlines()[0]
            resolved[key] = Unresolved(settings[key], f"the interpolation cannot be resolved ({reason})")
            continue
        if isinstance(value, DictConfig | ListConfig):
            value = OmegaConf.to_container(value, resolve=True)
        resolved[key] = value
    return resolved


def read_command(tokens: list[str], origin: str) -> dict[str, str | bool | list[str]]:
    """The arguments of the OpenRLHF command among `tokens` (`python -m openrlhf.cli.train_ppo_ray`,
    `deepspeed --module ...` or the script's path, after whatever launches it), as argparse reads
    them: `--name value` or `--name=value` (text), a flag alone (True: store_true), several values
    (a list of texts, nargs)."""
    starts = [
        i for i, token in enumerate(tokens) if token == OPENRLHF_MODULE or token.endswith(OPENRLHF_SCRIPT)
    ]
    if not starts:
        raise InvalidInput(
            f"{origin}: no OpenRLHF command in it (python -m {OPENRLHF_MODULE} ...); toyrl reads "
            "OpenRLHF's command lines, and the other trainers' configuration files"
        )
    settings: dict[str, str | bool | list[str]] = {}
    name = ""
    for token in tokens[starts[0] + 1 :]:
        if token.startswith("--"):
            name, equals, value = token[2:].partition("=")
            if not name:
                raise InvalidInput(f"{origin}: a bare '--' among {OPENRLHF_MODULE}'s arguments")
            settings.pop(name, None)  # given twice: the later, as argparse takes it
            settings[name] = value if equals else True
        elif not name:
            raise InvalidInput(f"{origin}: {token!r} follows no --argument of {OPENRLHF_MODULE}")
        else:
            previous = settings[name]
            if previous is True:
                settings[name] = token
            elif isinstance(previous, list):
                previous.append(token)
            else:
                settings[name] = [str(previous), token]
    return settings


def _is_openrlhf(word: str) -> bool:
    return word == OPENRLHF_MODULE or word.endswith(OPENRLHF_SCRIPT)


def read_script(path: Path) -> tuple[int, dict[str, str | bool | list[str]]]:
    """The line and the arguments of the one OpenRLHF command in a shell script: lines continued
    with a backslash joined, comments dropped, `$NAME` and `${NAME}` replaced by the script's own
    assignments before that line (`NAME=value`, `export NAME=value`), the command ending where a
    pipe, a `;`, `&&` or a redirection begins."""
    variables: dict[str, str] = {}
    commands: list[tuple[int, list[str]]] = []
    for number, line in _logical_lines(_text(path)):
        expanded = re.sub(r"\$\{?([A-Za-z_]\w*)\}?", lambda m: variables.get(m.group(1), m.group(0)), line)
        try:
            words = _words(expanded)
        except ValueError as error:  # an unclosed quote
            raise InvalidInput(f"{path}, line {number}: cannot be split into words ({error})") from None
        assignment = words[1:] if words[:1] == ["export"] else words
        if len(assignment) == 1 and re.fullmatch(r"[A-Za-z_]\w*=.*", assignment[0]):
            key, _, value = assignment[0].partition("=")
            variables[key] = value
        elif any(_is_openrlhf(word) for word in words):
            commands.append((number, words))
    if not commands:
        raise InvalidInput(f"{path}: no OpenRLHF command in it (python -m {OPENRLHF_MODULE} ...)")
    if len(commands) > 1:
        lines = ", ".join(str(number) for number, _ in commands)
        raise InvalidInput(
            f"{path}: {len(commands)} OpenRLHF commands (lines {lines}); toyrl checks one: keep one in the "
            "script, or give it after --"
        )
    number, words = commands[0]
    return number, read_command(words, f"{path}, line {number}")


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(number of the first line, text) of each command line, backslash continuations joined."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 1
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        if line.rstrip().endswith("\\"):
            pending.append(line.rstrip()[:-1])
            continue
        out.append((start, " ".join([*pending, line])))
        pending = []
    if pending:
        out.append((start, " ".join(pending)))
    return out


def _words(line: str) -> list[str]:
    """The words of a shell line up to its first operator (|, ;, &&, a redirection), comments out."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words: list[str] = []
    for word in lexer:
        if word and all(char in "();<>|&" for char in word):
            if word.startswith((">", "<")) and words and words[-1].isdigit():
                words.pop()  # the descriptor of a redirection, 2>&1
            break
        words.append(word)
    return words


def detect(keys: Collection[str], origin: str) -> tuple[str, str]:
    """The trainer (its registry name) whose configuration `keys` are, and why: the keys that only
    it knows (`Trainer.knows`). Keys that several trainers know (`beta`, `data.*`) count for none.
    Refused, naming the candidates, when no trainer or several have such keys."""
    trainers = registry()
    knowers = {key: [name for name, t in trainers.items() if t.knows(key)] for key in keys}
    own = {name: [key for key, names in knowers.items() if names == [name]] for name in trainers}
    fits = {name: found for name, found in own.items() if found}
    if len(fits) == 1:
        name, found = next(iter(fits.items()))
        return name, f"read as {trainers[name].name} ({_describe(found)})"
    if fits:
        candidates = "; ".join(f"{trainers[name].name} ({_describe(found)})" for name, found in fits.items())
        options = " or ".join(f"--trainer {name}" for name in fits)
        raise InvalidInput(f"{origin} fits several trainers: {candidates}; pass {options}")
    shared = [name for name in trainers if any(name in names for names in knowers.values())]
    if shared:
        common = ", ".join(sorted(key for key, names in knowers.items() if names))
        options = " or ".join(f"--trainer {name}" for name in shared)
        raise InvalidInput(f"{origin}: its keys ({common}) are several trainers' alike; pass {options}")
    close = {}
    for key in sorted(keys):
        for t in trainers.values():
            nearest = misspelt(
                key, [n for release in t.releases.values() for n in (*release.settings, *release.aliases)]
            )
            if nearest and key not in close:
                close[key] = f"{key}: did you mean {t.name}'s {nearest}?"
    some = "; ".join(close.values()) or ", ".join(sorted(keys)[:4]) + (", ..." if len(keys) > 4 else "")
    raise InvalidInput(
        f"{origin}: no key of a trainer toyrl models ({some}); pass --trainer "
        f"{' | '.join(trainers)} to read it as one"
    )


def _describe(keys: list[str]) -> str:
    """Keys as evidence: sections for dotted ones (`keys under actor_rollout_ref.*`), names for
    flat ones, a few of each."""
    sections = sorted({key.split(".")[0] + ".*" for key in keys if "." in key})
    names = sorted(key for key in keys if "." not in key)
    parts = []
    if sections:
        parts.append("keys under " + ", ".join(sections[:3]) + (", ..." if len(sections) > 3 else ""))
    if names:
        parts.append(
            ("key " if len(names) == 1 else "keys ")
            + ", ".join(names[:3])
            + (", ..." if len(names) > 3 else "")
        )
    return "; ".join(parts)
