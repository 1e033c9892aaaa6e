"""Part of the PEFT stand-in (see peft/__init__.py): `LoraLayer`, checked with isinstance when oat.model
casts LoRA layers of a loaded model; the tests load no model.
"""

from _oat_standin import standin_class

LoraLayer = standin_class("peft.tuners.lora", "LoraLayer")
