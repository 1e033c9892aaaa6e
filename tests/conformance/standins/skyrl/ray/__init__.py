"""Stand-in for `ray` (Ray, the distributed runtime), for SkyRL's conformance environment only.

SkyRL's skyrl/backends/skyrl_train/utils/ppo_utils.py imports `ray` and decorates its
`RegistryActor` with `ray.remote` at import time; its function registries
(`AdvantageEstimatorRegistry`, `PolicyLossRegistry`) ask `ray.is_initialized()` when a function is
registered (at import) and keep the function locally when Ray is not initialised, which in one
process, with no cluster, it is not. The functions under test (the advantage estimators,
`apply_loss_reduction_to_advantages_minibatch`, the policy losses, `reduce_loss`) are
single-process tensor code that never calls Ray: Ray only schedules SkyRL's workers. So this
module gives `remote` (the class back, never instantiated as an actor here) and
`is_initialized` (False: no Ray runtime exists in this environment); any other use fails loudly.
Installing Ray for real would add a cluster runtime to an environment that runs none.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.0.0+toyrl-standin"


def remote(cls: Any) -> Any:
    """`@ray.remote` on SkyRL's RegistryActor: the class itself (no actor is ever started)."""
    return cls


def is_initialized() -> bool:
    """No Ray runtime runs in this environment: SkyRL's registries keep their functions locally."""
    return False


def __getattr__(name: str) -> object:
    raise AttributeError(
        f"ray.{name}: ray is a stand-in in toyrl's SkyRL conformance environment "
        "(tests/conformance/standins/skyrl/ray); the tested SkyRL functions never use Ray"
    )
