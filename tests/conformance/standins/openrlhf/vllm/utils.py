"""Stand-in for `vllm.utils` (see `vllm/__init__.py`): `random_uuid`, imported by
`openrlhf.trainer.ray.vllm_engine`; raises if called."""

from _standin import never_called

random_uuid = never_called("vllm.utils.random_uuid")
