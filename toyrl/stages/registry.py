"""The kinds of stage and the registry of stages, and each stage parameter's valid values, declared once.

Each kind's module (`toyrl.stages.<kind>`) declares its `Kind` record (`declare`): its spec key,
default stage, Protocol, places in the orders, the configuration fields its stages see
(`Settings`), its exact hooks and the methods toyrl calls; `KIND` holds them in step order, and
everything else that depends on the kind (the spec's keys and order, the chunk's shared stages,
the plugin contract) is computed from them. `register(kind, name)` files an instance of a frozen
dataclass under `name` in `REGISTRY[kind]`; the type checker holds the class to its kind's
Protocol, and a plugin's stage is held to it when it loads (`toyrl.plugins`). `declared` gives a
field its valid values, which `check_declared` (each stage's __post_init__), the words of its
error and the page read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from toyrl.config import Config, InvalidInput
from toyrl.refusals import refused_by

if TYPE_CHECKING:
    from toyrl.stages.advantage import Advantage
    from toyrl.stages.kl import KL
    from toyrl.stages.normaliser import Normaliser
    from toyrl.stages.objective import Objective
    from toyrl.stages.reward import Reward
    from toyrl.stages.sampler import Sampler
    from toyrl.stages.schedule import Schedule
    from toyrl.stages.selector import Selector


@dataclass(frozen=True)
class Kind:
    """One kind of stage, declared once, in its own module (`declare`)."""

    name: str  # "normaliser"
    key: str  # its spec key ("aggregation": the trainers' word)
    default: str  # the registered stage a variant takes when its spec names none
    protocol: type  # the interface a training step calls (`register` and `toyrl.plugins` hold a stage to it)
    step: int  # its place in a training step (`KIND`'s order)
    spec_place: int  # its key's place in a spec (the advantage and the aggregation first)
    parameter_place: int  # the place of its stages' parameters in a spec (toyrl 0.2's order)
    shown: bool = False  # its key is in every spec, even at its default
    chunk: bool = False  # a chunk's runs share one (`toyrl.train.chunk_key`), else each run its own
    settings: tuple[str, ...] = ()  # the configuration's fields its stages see (`Settings`)
    # the methods toyrl calls on a stage, each held to its output contract at every call of a
    # plugin's (`toyrl.plugins.CONTRACTS`)
    calls: tuple[str, ...] = ()
    exact_hooks: tuple[str, ...] = ()  # what `toyrl.expected` asks a stage of the kind for
    # why a plugin stage of the kind is simulated only unless it says otherwise ('' if the exact
    # update has the kind: its exact hooks then decide)
    no_exact_form: str = ""
    # (flag, method, argument): a stage with the flag set takes one more argument in that method
    extra_argument: tuple[str, str, str] | None = None
    probe_input: str = ""  # what its plugin probe gives it, as a message names it ("a batch")

    def settings_of(self, config: Config | Settings) -> Settings:
        """The configuration as the kind's stages see it: its `settings` alone."""
        return Settings(self, config)


class Settings:
    """A kind's read-only view of the configuration (optax's transforms take only their own
    settings): `config.cap` reads the field where the kind declares it (`Kind.settings`), and any
    other field raises AttributeError naming the kind's settings."""

    __slots__ = ("_config", "_kind")

    def __init__(self, kind: Kind, config: Config | Settings) -> None:
        object.__setattr__(self, "_kind", kind)
        object.__setattr__(self, "_config", config)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # its own slots (unset while copied) and Python's protocols
            raise AttributeError(name)
        kind = self._kind
        if name not in kind.settings:
            seen = ", ".join(kind.settings) or "none"
            raise AttributeError(
                f"a {kind.name} stage sees the configuration's {seen} only, not {name!r} "
                f"(toyrl.stages.{kind.name}: its Kind's settings)"
            )
        return getattr(self._config, name)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"the configuration a {self._kind.name} stage sees is read-only")

    def __reduce__(self) -> tuple[Any, ...]:  # copied and pickled as a view of the same configuration
        return Settings, (self._kind, self._config)

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._kind.settings)
        return f"Settings({self._kind.name}: {values})"


KIND: dict[str, Kind] = {}  # every kind's record, in step order (`declare`)
REGISTRY: dict[str, dict[str, Any]] = {}  # each kind's registered stages by name, in step order


def declare(kind: Kind) -> Kind:
    """File a kind's record (its module's `KIND`), keeping `KIND` and `REGISTRY` in step order."""
    if kind.name in KIND:
        raise ValueError(f"the kind {kind.name!r} is declared already")
    KIND[kind.name] = kind
    REGISTRY[kind.name] = {}
    ordered = sorted(KIND.values(), key=lambda record: record.step)
    stages = {record.name: REGISTRY[record.name] for record in ordered}
    KIND.clear()  # the same dicts, which other modules hold, in the new order
    KIND.update((record.name, record) for record in ordered)
    REGISTRY.clear()
    REGISTRY.update(stages)
    return kind


Stage = TypeVar("Stage")


def declared(
    default: Any,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
    integer: bool = False,
    choices: Sequence[str] = (),
) -> Any:
    """A stage parameter with its valid values, declared once: `check_declared` (each stage's
    __post_init__), the words of its error and the page (`toyrl.explore`, `declarations`) read
    them. An integer (an int default, or `integer`), a number in [low, high] (either end open), one
    of `choices`, each with None too where `optional`; a bool default is a flag without this."""
    if choices:
        kind = "choice"
    elif integer or (isinstance(default, int) and not isinstance(default, bool)):
        kind = "integer"
    else:
        kind = "number"
    rule = {"kind": kind, "low": low, "high": high, "low_open": low_open, "high_open": high_open}
    return field(
        default=default, metadata={"declared": rule | {"optional": optional, "choices": list(choices)}}
    )


def _shown(x: float) -> str:
    """A bound in words: 0.2, 1000, 1e6 (not 1e+06)."""
    text = f"{x:g}"
    mantissa, _, exponent = text.partition("e+")
    return f"{mantissa}e{int(exponent)}" if exponent else text


def _requirement(rule: dict[str, Any]) -> str:
    kind = rule["kind"]
    if kind == "boolean":
        return "must be true or false"
    if kind == "choice":
        text = f"must be one of {', '.join(rule['choices'])}"
    elif kind == "integer":
        text = f"must be an integer in {rule['low']:,}..{rule['high']:,}"
    else:
        opening, closing = "(" if rule["low_open"] else "[", ")" if rule["high_open"] else "]"
        text = f"must be a number in {opening}{_shown(rule['low'])}, {_shown(rule['high'])}{closing}"
    return text + (" or None" if rule["optional"] else "")


def declarations(stage_class: type) -> dict[str, dict[str, Any]]:
    """Each declared parameter of a stage class (`declared`, and every flag: a bool default) and its
    rule: kind, bounds, optional, choices, and `requirement`, the words of its error."""
    out = {}
    for f in fields(stage_class):
        rule = f.metadata.get("declared")
        if rule is None and not isinstance(f.default, bool):
            continue
        rule = dict(rule) if rule is not None else {"kind": "boolean", "optional": False}
        out[f.name] = rule | {"requirement": _requirement(rule)}
    return out


def fits(value: object, rule: dict[str, Any]) -> bool:
    """Whether `value` holds to a declared rule (`declarations`)."""
    if value is None:
        return bool(rule["optional"])
    if rule["kind"] == "boolean":
        return isinstance(value, bool)
    if rule["kind"] == "choice":
        return value in rule["choices"]
    if isinstance(value, bool) or not isinstance(value, int if rule["kind"] == "integer" else int | float):
        return False
    above = value > rule["low"] if rule["low_open"] else value >= rule["low"]
    below = value < rule["high"] if rule["high_open"] else value <= rule["high"]
    return bool(above and below)


def check_declared(stage: Any) -> None:
    """InvalidInput, one line naming the parameter and its valid values, unless every declared
    parameter of the stage (`declarations`) holds a valid value and no combination of them it
    `refuses` holds: a tuple of `toyrl.refusals.Refusal` on its fields, declared once as data that
    the page (`toyrl.explore`) evaluates too, so both refuse with the same line."""
    for name, rule in declarations(type(stage)).items():
        value = getattr(stage, name)
        if not fits(value, rule):
            raise InvalidInput(f"{name} {rule['requirement']} (got {value!r})")
    message = refused_by(getattr(stage, "refuses", ()), lambda name: getattr(stage, name, None))
    if message:
        raise InvalidInput(message)


RewardT = TypeVar("RewardT", bound="Reward")
SelectorT = TypeVar("SelectorT", bound="Selector")
AdvantageT = TypeVar("AdvantageT", bound="Advantage")
NormaliserT = TypeVar("NormaliserT", bound="Normaliser")
ObjectiveT = TypeVar("ObjectiveT", bound="Objective")
KLT = TypeVar("KLT", bound="KL")
ScheduleT = TypeVar("ScheduleT", bound="Schedule")
SamplerT = TypeVar("SamplerT", bound="Sampler")


# One overload a kind: the type checker holds a registered class to its kind's Protocol.
@overload
def register(
    kind: Literal["reward"], name: str, **defaults: Any
) -> Callable[[type[RewardT]], type[RewardT]]: ...
@overload
def register(
    kind: Literal["selector"], name: str, **defaults: Any
) -> Callable[[type[SelectorT]], type[SelectorT]]: ...
@overload
def register(
    kind: Literal["advantage"], name: str, **defaults: Any
) -> Callable[[type[AdvantageT]], type[AdvantageT]]: ...
@overload
def register(
    kind: Literal["normaliser"], name: str, **defaults: Any
) -> Callable[[type[NormaliserT]], type[NormaliserT]]: ...
@overload
def register(
    kind: Literal["objective"], name: str, **defaults: Any
) -> Callable[[type[ObjectiveT]], type[ObjectiveT]]: ...
@overload
def register(kind: Literal["kl"], name: str, **defaults: Any) -> Callable[[type[KLT]], type[KLT]]: ...
@overload
def register(
    kind: Literal["schedule"], name: str, **defaults: Any
) -> Callable[[type[ScheduleT]], type[ScheduleT]]: ...
@overload
def register(
    kind: Literal["sampler"], name: str, **defaults: Any
) -> Callable[[type[SamplerT]], type[SamplerT]]: ...
@overload
def register(kind: str, name: str, **defaults: Any) -> Callable[[type[Stage]], type[Stage]]: ...
def register(kind: str, name: str, **defaults: Any) -> Callable[[type[Stage]], type[Stage]]:
    """Class decorator: register an instance of the class (built with `defaults`) as `name` of `kind`.

    One class may be registered under several names with other defaults (`group_std` and
    `group_std_sample` are one class with ddof 0 and 1); `stage_name` finds the name back.
    """
    if kind not in REGISTRY:
        raise ValueError(f"no stage kind {kind!r}: the kinds are {', '.join(KIND)}")

    def add(cls: type[Stage]) -> type[Stage]:
        if name in REGISTRY[kind]:
            raise ValueError(f"a {kind} named {name!r} is registered already")
        REGISTRY[kind][name] = cls(**defaults)
        return cls

    return add


def parameters(stage: Any) -> dict[str, Any]:
    """A stage's tunable parameters (fields not fixed by its registered name) and their values."""
    fixed = getattr(stage, "fixed", ())
    return {f.name: getattr(stage, f.name) for f in fields(stage) if f.name not in fixed}


def stage_name(kind: str, stage: Any) -> str:
    """The registered name of a stage: the entry of its class whose fixed fields it shares."""
    fixed = getattr(stage, "fixed", ())
    for name, registered in REGISTRY[kind].items():
        if type(registered) is type(stage) and all(
            getattr(registered, f) == getattr(stage, f) for f in fixed
        ):
            return name
    raise ValueError(f"{type(stage).__name__} is not a registered {kind}")


def simulated_only(stage: Any) -> str:
    """Why a stage has no exact expected-update form ('' if it has one)."""
    return str(getattr(stage, "simulated_only", ""))
