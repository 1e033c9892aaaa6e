"""Stand-in for `ray` (Ray, the distributed runtime), for verl's conformance environment only.

verl's package `__init__` imports `verl.protocol`, which imports `ray` and names `ray.ObjectRef` in
a class annotation (`DataProtoFuture.futures`) at import time; nothing else in the modules that
the conformance tests import touches Ray at import. The functions under test
(`verl.trainer.ppo.core_algos`'s advantage estimators, `agg_loss` and policy losses,
`verl.workers.utils.losses.ppo_loss`, `verl.workers.utils.padding`, `verl.utils.tensordict_utils`)
are single-process tensor code that never calls Ray: Ray only schedules verl's workers across
processes and GPUs. So this module provides the one name read at import, and any other use
fails loudly instead of pretending to work. Installing Ray for real would add a cluster runtime
(with its dashboard and agent dependencies) to an environment that runs none.
"""

from __future__ import annotations

__version__ = "0.0.0+toyrl-standin"


class ObjectRef:
    """Placeholder for `ray.ObjectRef`, used by verl only in a type annotation."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("ray is a stand-in in toyrl's verl conformance environment: no ObjectRef exists")


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"ray.{name}: ray is a stand-in in toyrl's verl conformance environment "
        "(tests/conformance/standins/verl/ray); the tested verl functions never use Ray"
    )
