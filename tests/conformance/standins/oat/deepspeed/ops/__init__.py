"""Part of the DeepSpeed stand-in (see deepspeed/__init__.py): `deepspeed.ops`, DeepSpeed's
compiled kernels; only its `adam` submodule is imported by oat, and nothing of it is called.
"""
