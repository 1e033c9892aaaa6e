"""Stand-in for `deepspeed.runtime.zero.partition_parameters`: `ZeroParamStatus`, which
`openrlhf.utils.deepspeed.deepspeed_utils` imports at load time and reads only inside ZeRO-3
parameter gathering (never reached by the conformance tests: no DeepSpeed engine exists)."""

from _standin import never_instantiated

ZeroParamStatus = never_instantiated("deepspeed.runtime.zero.partition_parameters.ZeroParamStatus")
