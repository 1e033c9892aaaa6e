"""Part of the vLLM stand-in (see vllm/__init__.py): `vllm.lora`, a package only traversed to reach
`vllm.lora.request`.
"""
