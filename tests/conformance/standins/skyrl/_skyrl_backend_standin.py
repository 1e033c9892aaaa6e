"""Stand-in for `skyrl.backends.backend`, for SkyRL's conformance environment only; the test
(tests/conformance/test_skyrl.py) puts it in `sys.modules` under that name before importing
SkyRL's ppo_utils.

Importing any of skyrl.backends (ppo_utils, the module under test, lives there) runs
skyrl/backends/__init__.py, whose one line imports `AbstractBackend` from skyrl/backends/backend.py,
the interface of SkyRL's Tinker API server, which imports skyrl/tinker/types.py: the server's
request and response models, pydantic models built at import. On Python 3.11 (this machine's;
SkyRL's own environments run 3.12) pydantic refuses them at class creation (`typing.TypedDict` in a
model needs Python 3.12), so the package cannot be imported here as it is. The functions under
test (the advantage estimators, `apply_loss_reduction_to_advantages_minibatch`, the policy
losses, `reduce_loss`) never use the Tinker backend. So this module gives the one name
skyrl/backends/__init__.py imports, a class that fails loudly if it is ever instantiated.
"""

from __future__ import annotations

from typing import Any


class AbstractBackend:
    """SkyRL's Tinker backend interface: never instantiated by the tested code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            "skyrl.backends.backend is a stand-in in toyrl's SkyRL conformance environment "
            "(tests/conformance/standins/skyrl/_skyrl_backend_standin.py); the tested functions never use it"
        )
