"""Part of the DeepSpeed stand-in (see deepspeed/__init__.py): `deepspeed.runtime.zero`, a package
only traversed to reach `partition_parameters`.
"""
