"""Stand-in for vLLM (`import vllm`), for the OpenRLHF conformance suite only.

Replaces: the `vllm` package, which `openrlhf.trainer.ray.vllm_engine` imports at load time (it is
loaded by `openrlhf/trainer/ray/__init__.py`, on the way to the experience maker and the actor
trainer). vLLM is a CUDA inference engine, not installable here. Never called: the tests generate no
text; their batches are toy batches. The module defines no attributes, so any use fails. See
`_standin.py`.
"""
