"""Stand-in for `vllm.inputs` (see `vllm/__init__.py`): `TokensPrompt`, imported by
`openrlhf.trainer.ray.vllm_engine`; raises if instantiated."""

from _standin import never_instantiated

TokensPrompt = never_instantiated("vllm.inputs.TokensPrompt")
