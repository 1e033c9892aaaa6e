"""Stand-in for Ray (`import ray`), for the OpenRLHF conformance suite only.

Replaces: the `ray` package, which `openrlhf.trainer.ppo_utils.experience_maker`,
`openrlhf.trainer.ray.launcher`, `openrlhf.trainer.ray.vllm_engine` and
`openrlhf.trainer.ray.ppo_actor` import at load time. Ray is the trainer's cluster runtime (actors,
placement groups, object store): a multi-GB install whose actors would need GPUs. Never called: the
tests call `RemoteExperienceMaker.compute_advantages_and_returns` and
`ActorPPOTrainer.training_step` directly, on toy experiences in this process, which touch no Ray
object. `remote` is the one name used at load time, as a class decorator (`@ray.remote`,
`@ray.remote(num_gpus=1)`): it returns the class unchanged, so the decorated actor classes have no
`.remote` and cannot be started. `put`, `get` and `is_initialized` raise if called. See
`_standin.py`.
"""

from typing import Any

from _standin import never_called

put = never_called("ray.put")
get = never_called("ray.get")
is_initialized = never_called("ray.is_initialized")


def remote(*args: Any, **kwargs: Any) -> Any:
    """`@ray.remote` / `@ray.remote(...)` at class definition: the class itself, not a Ray actor."""
    if len(args) == 1 and not kwargs and isinstance(args[0], type):
        return args[0]
    return lambda cls: cls
