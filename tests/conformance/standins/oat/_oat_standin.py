"""Shared by the oat stand-ins in this directory (tests/conformance/standins/oat), not a stand-in itself.

oat's modules import GPU stacks, services and model loaders that `PPOLearner.learning_step` never
calls. Each stand-in module defines only the names oat imports from it, made by `standin_class` or
`standin_function`: importing them works, using them raises `StandInCalled`, so a test that
reached one would fail loudly instead of running something that is not the real package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn


class StandInCalled(RuntimeError):
    """A conformance stand-in was used: the tested code was expected never to reach it."""


def _refuse(module: str, name: str) -> NoReturn:
    raise StandInCalled(
        f"{module}.{name} is a conformance stand-in (tests/conformance/standins/oat): "
        "the real package is not installed, and the tested oat code should never call it"
    )


def standin_class(module: str, name: str) -> type:
    """A class standing for `module.name`: importable, usable as a base class or in an annotation,
    but instantiating it raises."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _refuse(module, name)

    return type(
        name, (), {"__init__": __init__, "__module__": module, "__doc__": f"Stand-in for {module}.{name}."}
    )


def standin_function(module: str, name: str) -> Callable[..., NoReturn]:
    """A function standing for `module.name`: calling it raises."""

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        _refuse(module, name)

    refuse.__name__ = refuse.__qualname__ = name
    refuse.__module__ = module
    return refuse
