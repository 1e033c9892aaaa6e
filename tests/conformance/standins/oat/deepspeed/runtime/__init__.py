"""Part of the DeepSpeed stand-in (see deepspeed/__init__.py): `deepspeed.runtime`, a package
only traversed to reach `deepspeed.runtime.zero.partition_parameters`.
"""
