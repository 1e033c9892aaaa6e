"""What `toyrl check` is given, as flat settings, and whose configuration it is.

`read_input` takes a JSON or YAML file (nested keys joined with dots, as verl's Hydra paths
`actor_rollout_ref.actor.loss_agg_mode`; `${...}` interpolations resolved with OmegaConf, as
Hydra resolves verl's), a trainer's launch command line (verl's Hydra overrides, TRL's and
OpenRLHF's flags: `toyrl.trainers.launch`) or a shell script holding one (read with bash's
grammar, never run: `toyrl.trainers.shell`), or Python source holding a `GRPOConfig(...)` call
(read with `ast`, never imported: `toyrl.trainers.pyconfig`). `detect` names the trainer whose
configuration a set of keys is, and only when the keys fit exactly one (`Trainer.knows`); it never
guesses.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from toyrl import install
from toyrl.config import InvalidInput, shown
from toyrl.inputs import CONFIG, check_regular, json_problem, read_bytes
from toyrl.trainers import Unresolved, misspelt, registry, shell
from toyrl.trainers.launch import FORMS, Launch, anchor, read_command
from toyrl.trainers.pyconfig import notebook_source, read_python
from toyrl.trainers.shell import Command, Word

SCRIPT_SUFFIXES = (".sh", ".bash")


@dataclass(frozen=True)
class Input:
    """Settings read (name -> value; text from a command line), the trainer the input's form
    names (a launch command), else None, what was read, for messages, and what could not be read
    (`notes`: a script's `$@`, Hydra's flags, a Python call's `**` arguments)."""

    settings: dict[str, Any]
    trainer: str | None
    origin: str
    notes: tuple[str, ...] = ()


def read_input(arguments: list[str], trainer: str | None = None) -> Input:
    """One argument: a configuration file (.json, .yaml, .yml, .toml: read as `trainer`'s, else as
    the trainer its keys fit, `read_config`), a shell script (.sh, .bash) holding a trainer's
    launch command (`toyrl.trainers.launch`), or Python source or a Jupyter notebook holding a
    trainer's configuration call (.py, .ipynb: `toyrl.trainers.pyconfig`); several: a launch
    command line; none: no settings."""
    if not arguments:
        return Input({}, None, "")
    if len(arguments) > 1:
        command = Command(1, [Word(argument) for argument in arguments])
        launch = read_command(command, "the command line")
        if launch is None:
            raise InvalidInput(
                f"the command line after --: no trainer's launch command in it; toyrl reads {FORMS}"
            )
        return _input(launch, Path.cwd())
    path = Path(arguments[0])
    suffix = path.suffix.lower()
    if suffix in SCRIPT_SUFFIXES:
        return _input(read_script(path), path.parent)
    if suffix in (".py", ".ipynb"):
        text = file_text(path) if suffix == ".py" else notebook_source(file_text(path), str(path))
        trainer, read, line = read_python(text, str(path))
        settings, notes = _python_settings(read)
        return Input(settings, trainer, f"{path}, line {line}", notes)
    return Input(read_config(path, trainer), None, str(path))


def _python_settings(settings: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A Python call's keyword arguments, its `**` splats apart as notes."""
    notes = tuple(f"{key}: {value.why}" for key, value in settings.items() if key.startswith("**"))
    return {key: value for key, value in settings.items() if not key.startswith("**")}, notes


def read_script(path: Path) -> Launch:
    """The one launch command of a shell script (`toyrl.trainers.shell` reads it, never runs it):
    a trainer's own (verl's, OpenRLHF's, `trl grpo`), else the one Python script launched whose
    flags are a trainer's (a script may also prepare data). Several: refused, naming their lines."""
    script = shell.read_script(file_text(path), str(path))
    launches = []
    for command in script.commands:
        where = f"{path}, line {command.line}"
        found = anchor(command.words)
        if found is None:
            continue
        if command.broken or any(command.line <= line <= command.last for line in script.broken):
            raise InvalidInput(f"{where}: {BROKEN}")
        try:
            launch = read_command(command, where)
        except InvalidInput:
            if found.trainer is not None:
                raise
            continue  # a Python script of positional arguments: not a trainer's (data preparation)
        if launch is not None:
            launches.append((command.line, launch))
    own = [(line, launch) for line, launch in launches if launch.trainer is not None]
    if not own:
        own = [(line, launch) for line, launch in launches if _fits_a_trainer(launch.settings)]
    if not own and script.broken:
        raise InvalidInput(f"{path}, line {script.broken[0]}: {BROKEN}")
    if not own and launches:  # Python scripts launched, with no trainer's flags: settings in the script
        line, launch = launches[0]
        flags = (
            f"flags of no trainer toyrl models ({', '.join(launch.settings)})"
            if launch.settings
            else "no flags"
        )
        script_name = launch.origin.rpartition(": ")[2]
        raise InvalidInput(
            f"{path}, line {line}: {script_name} is launched with {flags}; where its settings are in the "
            f"script, toyrl check {script_name} reads its GRPOConfig(...) call"
        )
    if not own:
        raise InvalidInput(f"{path}: no trainer's launch command in it; toyrl reads {FORMS}")
    if len(own) > 1:
        lines = ", ".join(str(line) for line, _ in own)
        raise InvalidInput(
            f"{path}: {len(own)} launch commands (lines {lines}); toyrl checks one: keep one in the script, "
            "or give it after --"
        )
    launch = own[0][1]
    before = [line for line in script.broken if line < own[0][0]]
    if before:
        launch.notes.append(
            f"{path}: bash's grammar cannot read line{'s' if len(before) > 1 else ''} "
            f"{', '.join(map(str, before))} (a placeholder such as <path>?); read past, so what "
            f"{'they assign' if len(before) > 1 else 'it assigns'} is unknown to the launch command"
        )
    return launch


BROKEN = (
    "bash's grammar cannot read the launch command (an unclosed quote, bracket or $( ... ), or a "
    "placeholder such as <path>?)"
)


def _fits_a_trainer(settings: dict[str, Any]) -> bool:
    try:
        detect(list(settings), "")
    except InvalidInput:
        return False
    return True


def _input(launch: Launch, folder: Path) -> Input:
    """A launch command's settings over those of the configuration files it names (`Launch.files`,
    a later one over an earlier; TRL's `--config FILE`), each found as given, else from the
    script's folder or one above it (`_find`)."""
    settings, notes = launch.settings, tuple(launch.notes)
    config = settings.get("config") if launch.trainer in ("trl", None) else None
    if config is not None:
        if isinstance(config, Unresolved) or not isinstance(config, str):
            shown_value = config.text if isinstance(config, Unresolved) else repr(config)
            raise InvalidInput(f"{launch.origin}: --config {shown_value}: the file's path cannot be read")
        settings = read_settings(_find(config, folder, launch.origin)) | {
            key: value for key, value in settings.items() if key != "config"
        }
    files: dict[str, Any] = {}
    own = registry().get(launch.trainer or "")
    for name in launch.files:
        path = _find(name, folder, launch.origin)
        # as written: a `${...}` is resolved once the command's settings are over the files'
        files |= (
            own.read_file(path) if own is not None and own.read_file else read_settings(path, resolve=False)
        )
    settings = files | settings
    if any(isinstance(v, str) and "${" in v for v in settings.values()):
        if launch.trainer == "verl":
            settings = interpolated(launch.origin, _nested(settings), settings)
        elif launch.files:  # AReaL's `group_size: ${gconfig.n_samples}` with the command's n_samples
            settings = interpolated(launch.origin, _nested(settings, {}), settings)
    return Input(settings, launch.trainer, launch.origin, notes)


def _find(name: str, folder: Path, origin: str) -> Path:
    """The configuration file a command names: its path as given (from the current folder), else
    from the script's folder or one above it (a repository's examples are run from its root)."""
    path = Path(name)
    if path.exists() or path.is_absolute():
        return path
    for place in (folder.resolve(), *folder.resolve().parents):
        if (place / path).exists():
            return place / path
    raise InvalidInput(
        f"{origin}: its configuration file {name} is not found (from the current folder, nor from "
        f"{folder} or a folder above it); run toyrl check where the command runs"
    )


def _inherited(path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """A file whose own keys fit no one trainer, read with the files it inherits: by the one
    trainer whose reading of it (`Trainer.read_file`) gives keys that fit that trainer (a NeMo-RL
    configuration that changes only keys other trainers have too, over its `defaults:`); else its
    own keys, for `detect` to refuse."""
    fits = {}
    for name, trainer in registry().items():
        if trainer.read_file is None:
            continue
        try:
            merged = trainer.read_file(path)
            if detect(list(merged), str(path))[0] == name:
                fits[name] = merged
        except InvalidInput:
            continue
    return next(iter(fits.values())) if len(fits) == 1 else settings


def read_config(path: Path, trainer: str | None = None) -> dict[str, Any]:
    """A configuration file as flat settings, read as `trainer`'s files are (`Trainer.read_file`:
    a `defaults:` list of files it inherits), else as the trainer its keys fit; `read_settings`
    where that trainer's files hold nothing more."""
    own = registry().get(trainer) if trainer is not None else None
    if own is not None and own.read_file is not None:
        return own.read_file(path)
    settings = read_settings(path)
    if trainer is not None:
        return settings
    try:
        trainer, _ = detect(list(settings), str(path))
    except InvalidInput:
        return _inherited(path, settings)
    own = registry()[trainer]
    return settings if own.read_file is None else own.read_file(path)


def _nested(settings: dict[str, Any], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Settings (dotted keys) over `defaults` (None: verl's as toyrl knows them), as one nested
    mapping, against which their `${...}` interpolations are resolved."""
    if defaults is None:
        verl = registry()["verl"]
        defaults = {key: setting.default for key, setting in verl.releases[verl.latest].settings.items()}
    flat = defaults
    nested: dict[str, Any] = {}
    for key, value in (flat | settings).items():
        *sections, leaf = key.split(".")
        place = nested
        for section in sections:
            inner = place.setdefault(section, {})
            if not isinstance(inner, dict):  # a value and a section of one name: the value is kept
                break
            place = inner
        else:
            place[leaf] = value
    return nested


def file_text(path: Path) -> str:
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


def read_settings(path: Path, resolve: bool = True) -> dict[str, Any]:
    """A trainer configuration file as flat settings: JSON, or YAML (with PyYAML installed: the
    optional extra yaml; a date is text, as OmegaConf and so Hydra read it). Nested mappings are
    flattened with dots (verl's `actor_rollout_ref.actor.loss_agg_mode`), and a dotted key is read
    as the same path. A setting given twice is refused: a key twice in one mapping (JSON and YAML
    keep the last without a word), or one path both nested and dotted, or both a value and a
    section (`sections_of`); so is a file nested deeper than MAX_DEPTH or of more than MAX_VALUES
    values once YAML's aliases are expanded (`check_bounded`). The `${...}` interpolations of the
    settings toyrl reads are resolved (`interpolated`); others are left as written."""
    suffix = path.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml", ".toml"):
        if os.path.lexists(path):
            check_regular(path, CONFIG)  # a folder, FIFO or device is named as such first
        raise InvalidInput(
            f"{path}: expected a trainer's configuration (.json, .yaml, .yml, .toml), launch script (.sh) or "
            "Python configuration (.py)"
        )
    text = file_text(path)
    try:
        readers = {".json": _json, ".toml": _toml}
        data = readers.get(suffix, parse_yaml)(path, text)
    except RecursionError:
        raise InvalidInput(f"{path}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    except InvalidInput:
        raise
    except ValueError as error:  # an integer of more digits than Python converts
        raise InvalidInput(f"{path}: {json_problem(error)}") from None
    if not isinstance(data, dict):
        kind = "nothing" if data is None else f"a {type(data).__name__}"
        raise InvalidInput(f"{path}: expected a mapping of settings at the top level, got {kind}")
    check_bounded(path, data)
    nested = sections_of(path, data)
    return interpolated(path, nested, flat_settings(nested)) if resolve else flat_settings(nested)


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


def _toml(path: Path, text: str) -> Any:
    """TOML (prime-rl's configurations), by the standard library's reader (tomli before Python
    3.11); a key given twice is TOML's own error."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        try:
            import tomli as tomllib
        except ImportError:
            raise InvalidInput(f"{path}: reading TOML needs tomli: {install.hint('check')}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InvalidInput(f"{path}: not valid TOML ({str(error).splitlines()[0]})") from None


def parse_yaml(path: Path, text: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise InvalidInput(f"{path}: reading YAML needs PyYAML: {install.hint('yaml')}") from None

    class Loader(yaml.SafeLoader):
        """PyYAML's safe loader, refusing a key given twice in one mapping (keys merged in with
        `<<:` may be given again: YAML's merge lets the mapping's own keys override them), and
        reading dates as text."""

        # a date is text, as OmegaConf's loader (and so Hydra's) reads it
        yaml_implicit_resolvers: ClassVar[dict[Any, Any]] = {
            first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
        }

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


def check_bounded(path: Path, data: dict[Any, Any]) -> None:
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


def sections_of(path: Path | str, data: dict[Any, Any]) -> dict[str, Any]:
    """`data` with each dotted key split into its sections (`a.b: 1` as `a: {b: 1}`), as toyrl
    reads the paths; InvalidInput, naming the path, where two keys give one path (nested and
    dotted) or one path is both a value and a section."""
    nested: dict[str, Any] = {}
    pending: list[tuple[dict[str, Any], str, dict[Any, Any]]] = [(nested, "", data)]
    while pending:
        into, prefix, mapping = pending.pop()
        for key, value in mapping.items():
            *sections, leaf = str(key).split(".")
            place, name = into, prefix
            for section in sections:
                name += f"{section}."
                inner = place.setdefault(section, {})
                if not isinstance(inner, dict):
                    raise InvalidInput(
                        f"{path}: {name[:-1]} is given both as a value and as a section; keep one"
                    )
                place = inner
            name += leaf
            if leaf in place and not (isinstance(value, dict) and isinstance(place[leaf], dict)):
                twice = isinstance(value, dict) == isinstance(place[leaf], dict)
                what = "twice (nested and as a dotted key)" if twice else "both as a value and as a section"
                raise InvalidInput(f"{path}: {name} is given {what}; keep one")
            if isinstance(value, dict):
                pending.append((place.setdefault(leaf, {}), f"{name}.", value))
            else:
                place[leaf] = value
    return nested


def flat_settings(data: dict[Any, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= flat_settings(value, f"{name}.")
        else:
            out[name] = value
    return out


def _interpolated(value: Any) -> bool:
    """Whether `value` holds a `${...}` interpolation (in a list or mapping too)."""
    if isinstance(value, dict):
        return any(_interpolated(item) for item in value.values())
    if isinstance(value, list):
        return any(_interpolated(item) for item in value)
    return isinstance(value, str) and "${" in value


def _read_keys() -> frozenset[str]:
    """The names toyrl reads a value of: every setting, and another name of one, of every
    release of every trainer modelled (the values of other keys are never used)."""
    return frozenset(
        name
        for trainer in registry().values()
        for release in trainer.releases.values()
        for name in (*release.settings, *release.aliases)
    )


MAX_EXPANSION = 1_000_000  # characters and interpolations a setting's value expands to: verl's, tens
MAX_INTERPOLATIONS = 20  # interpolations inside one another: verl's go 2 deep


def interpolated(path: Path | str, nested: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The settings with the `${...}` interpolations of those toyrl reads (`_read_keys`:
    `${data.max_response_length}`, `${oc.select:key,default}`, `${oc.env:NAME}`) resolved by
    OmegaConf against the whole file (`nested`, its dotted keys as sections), as Hydra resolves
    verl's configuration; other keys are left as written. What resolving a setting takes is
    counted first (`_Expansion`), and a setting that would expand beyond MAX_EXPANSION characters
    or MAX_INTERPOLATIONS levels is refused, naming it. One that cannot be resolved (a key the
    file does not have) becomes `Unresolved`: refused if toyrl reads it, listed if not."""
    read = _read_keys()
    interpolated = [key for key, value in settings.items() if key in read and _interpolated(value)]
    if not interpolated:
        return settings
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf
        from omegaconf.errors import OmegaConfBaseException
    except ImportError:
        key = interpolated[0]
        raise InvalidInput(
            f"{path}: {key}: {settings[key]} is an interpolation; resolving it needs OmegaConf: "
            + install.hint("yaml")
        ) from None
    try:
        config = OmegaConf.create(nested)
    except OmegaConfBaseException as error:
        raise InvalidInput(f"{path}: OmegaConf cannot read it ({str(error).splitlines()[0]})") from None
    expansion = _Expansion(path, nested)
    resolved = dict(settings)
    for key in interpolated:
        uncertain = expansion.check(key)
        if uncertain:
            resolved[key] = Unresolved(str(settings[key]), uncertain)
            continue
        try:
            value = OmegaConf.select(config, key, throw_on_resolution_failure=True)
            if isinstance(value, DictConfig | ListConfig):
                value = OmegaConf.to_container(value, resolve=True)
        except OmegaConfBaseException as error:
            reason = str(error).splitlines()[0]
            resolved[key] = Unresolved(str(settings[key]), f"the interpolation cannot be resolved ({reason})")
            continue
        resolved[key] = value
    return resolved


# what a key built by another interpolation stands for is known only by resolving it
_COMPUTED = "\0"
_REFERRING = ("oc.select", "oc.deprecated", "oc.dict.keys", "oc.dict.values")  # their first argument is a key


class _Expansion:
    """What OmegaConf's resolving of a value costs, counted before it runs: the value's characters,
    one for each value of a section, and, for each interpolation in it, one plus what the value it
    refers to costs (OmegaConf resolves a value again at each use, so twenty levels of
    `a_i: ${a_j}${a_j}` cost a million). Each value's cost is counted once, in time linear in the
    file; the references are found by OmegaConf's own grammar (`omegaconf.grammar_parser`)."""

    def __init__(self, path: Path | str, nested: dict[str, Any]) -> None:
        self.path = path
        self.nested = nested
        self.costs: dict[tuple[str, ...], tuple[int, int]] = {}  # path -> (cost, interpolation levels)
        self.visiting: set[tuple[str, ...]] = set()
        self.key = ""

    def check(self, key: str) -> str:
        """ "" when resolving `key` is within the bounds; why not, when what it refers to cannot be
        known without resolving it (a key built by an interpolation). InvalidInput beyond a bound."""
        self.key = key
        self.visiting = set()
        try:
            self._cost(tuple(key.split(".")), 0, 0)
        except _Computed as computed:
            return f"{computed} refers to a key built by another interpolation, which toyrl does not follow"
        return ""

    def _refuse(self, what: str) -> InvalidInput:
        return InvalidInput(f"{self.path}: {self.key}: its interpolations {what}; verl's have a few")

    def _cost(self, parts: tuple[str, ...], levels: int, depth: int) -> tuple[int, int]:
        """(cost, interpolation levels) of the value at `parts`, reached through `levels`
        interpolations and `depth` sections and references in all."""
        if levels > MAX_INTERPOLATIONS:
            raise self._refuse(f"go more than {MAX_INTERPOLATIONS} levels deep")
        if depth > MAX_DEPTH:
            raise self._refuse(f"go more than {MAX_DEPTH} sections and references deep")
        if parts in self.costs:
            cost, below = self.costs[parts]
            if levels + below > MAX_INTERPOLATIONS:
                raise self._refuse(f"go more than {MAX_INTERPOLATIONS} levels deep")
            return cost, below
        if parts in self.visiting:  # a cycle: OmegaConf names it
            return 0, 0
        self.visiting.add(parts)
        value = self._at(parts)
        cost, below = 1, 0
        if isinstance(value, dict | list):
            keys = value if isinstance(value, dict) else range(len(value))
            for child in keys:
                child_cost, child_below = self._cost((*parts, str(child)), levels, depth + 1)
                cost, below = self._add(cost, child_cost), max(below, child_below)
        elif isinstance(value, str) and "${" in value:
            cost = self._add(cost, len(value))
            for reference in self._references(value):
                if _COMPUTED in reference:
                    raise _Computed(value)
                target = self._target(parts, reference)
                target_cost, target_below = self._cost(target, levels + 1, depth + 1)
                cost, below = self._add(cost, 1 + target_cost), max(below, target_below + 1)
        elif value is not None:
            cost = self._add(cost, len(str(value)))
        self.visiting.discard(parts)
        self.costs[parts] = (cost, below)
        return cost, below

    def _add(self, cost: int, more: int) -> int:
        if cost + more > MAX_EXPANSION:
            raise self._refuse(f"expand to more than {MAX_EXPANSION:,} characters")
        return cost + more

    def _at(self, parts: tuple[str, ...]) -> Any:
        """The value at `parts` in the file, or None where there is none (OmegaConf then names it)."""
        value: Any = self.nested
        for part in parts:
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
                value = value[int(part)]
            else:
                return None
        return value

    @staticmethod
    def _references(text: str) -> list[str]:
        """The keys an interpolation refers to, as written (`a.b`, `.sibling`, `..c[d]`), each
        computed part `_COMPUTED`; none when OmegaConf's grammar does not read it (it then names why)."""
        from omegaconf import grammar_parser
        from omegaconf.errors import OmegaConfBaseException
        from omegaconf.grammar_visitor import GrammarVisitor

        found: list[str] = []

        def node(key: str, memo: Any) -> Any:
            found.append(key)
            return _COMPUTED

        def resolver(name: str, args: tuple[Any, ...], args_str: tuple[str, ...]) -> str:
            if name in _REFERRING and args and isinstance(args[0], str):
                found.append(args[0])
            elif any(isinstance(arg, str) and "${" in arg for arg in args):  # oc.decode of an interpolation
                found.append(_COMPUTED)
            return _COMPUTED

        try:
            GrammarVisitor(node, resolver, memo=None).visit(grammar_parser.parse(text))
        except OmegaConfBaseException:
            return []
        return found

    @staticmethod
    def _target(parts: tuple[str, ...], reference: str) -> tuple[str, ...]:
        """The path a reference made at `parts` names: from the top, or, with leading dots, from
        the value's own section (`.x`) or the one above it (`..x`), as OmegaConf reads it."""
        from omegaconf._utils import split_key

        keys = split_key(reference)
        ups = 0
        while ups < len(keys) and keys[ups] == "":
            ups += 1
        if ups == 0:
            return tuple(keys)
        base = parts[: max(0, len(parts) - ups)]
        return (*base, *keys[ups:])


class _Computed(Exception):
    pass


def detect(keys: Collection[str], origin: str) -> tuple[str, str]:
    """The trainer (its registry name) whose configuration `keys` are, and why: the keys that only
    it knows (`Trainer.knows`). Keys that several trainers know (`beta`, `data.*`) count for none;
    keys of a trainer and of one that extends its configuration (`Trainer.extends`: TRL's and
    ms-swift's) are the extending one's. Refused, naming the candidates, when no trainer or
    several have such keys."""
    trainers = registry()
    knowers = {key: [name for name, t in trainers.items() if t.knows(key)] for key in keys}
    own = {name: [key for key, names in knowers.items() if names == [name]] for name in trainers}
    fits = {name: found for name, found in own.items() if found}
    extended = {trainers[name].extends for name in fits}
    if len(fits) == 2 and extended & set(fits):  # ms-swift's own names and TRL's: ms-swift's GRPOConfig
        fits = {
            name: [*found, *own[trainers[name].extends]]
            for name, found in fits.items()
            if name not in extended
        }
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
