"""Part of the PEFT stand-in (see peft/__init__.py): `peft.tuners`, a package only traversed to
reach `peft.tuners.lora`.
"""
