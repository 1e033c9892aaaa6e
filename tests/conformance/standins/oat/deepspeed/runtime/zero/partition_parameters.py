"""Part of the DeepSpeed stand-in (see deepspeed/__init__.py): ZeRO-3 parameter partitioning.
oat reads `ZeroParamStatus` when it saves or averages ZeRO-3 models (oat.utils.deepspeed), which
the tests never do.
"""

from _oat_standin import standin_class

ZeroParamStatus = standin_class("deepspeed.runtime.zero.partition_parameters", "ZeroParamStatus")
