"""Shared helper of the OpenRLHF conformance stand-ins (tests/conformance/standins/openrlhf/).

OpenRLHF's modules import DeepSpeed, flash-attn, vLLM and Ray at load time, though the functions
the conformance suite calls (`PolicyLoss`, `aggregate_loss`, `RemoteExperienceMaker.
compute_advantages_and_returns`, `ActorPPOTrainer.training_step`, `iter_grad_accum_global_norm`)
never use them: they are GPU-only (DeepSpeed, flash-attn, vLLM: CUDA builds, not installable on
these CPU machines) or a cluster runtime (Ray: the trainer's actors and object store, a multi-GB
install with nothing of it on the tested path). Each stand-in module exports exactly the names
that are imported at module load, and each of those raises `StandInCalled` when used, so a call
that reached one would fail loudly instead of computing anything. The stand-ins carry no package
metadata, so transformers, accelerate and peft see these packages as not installed.
"""

from __future__ import annotations

from typing import Any, NoReturn


class StandInCalled(RuntimeError):
    """A conformance stand-in was used: the tested code path reached a GPU-only or Ray module."""


def never_called(name: str) -> Any:
    """A function standing in for `name` that raises if it is ever called."""

    def stand_in(*args: Any, **kwargs: Any) -> NoReturn:
        raise StandInCalled(f"{name} is a conformance stand-in and must never be called")

    stand_in.__name__ = stand_in.__qualname__ = name.rsplit(".", 1)[-1]
    return stand_in


def never_instantiated(name: str) -> type:
    """A class standing in for `name` (usable in annotations) that raises if it is instantiated."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        raise StandInCalled(f"{name} is a conformance stand-in and must never be instantiated")

    return type(name.rsplit(".", 1)[-1], (), {"__init__": __init__, "__module__": name.rsplit(".", 1)[0]})
