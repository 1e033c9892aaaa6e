"""Part of the vLLM stand-in (see vllm/__init__.py): `LoRARequest`, which an actor builds to
generate with LoRA weights; the tests run no actor.
"""

from _oat_standin import standin_class

LoRARequest = standin_class("vllm.lora.request", "LoRARequest")
