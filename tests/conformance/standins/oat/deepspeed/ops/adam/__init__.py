"""Part of the DeepSpeed stand-in (see deepspeed/__init__.py): `deepspeed.ops.adam`, DeepSpeed's
CPU and fused CUDA Adam. oat builds them in `DeepspeedStrategy.create_optimizer`, which the tests
never call (their optimiser step is a test double).
"""

from _oat_standin import standin_class

DeepSpeedCPUAdam = standin_class("deepspeed.ops.adam", "DeepSpeedCPUAdam")
FusedAdam = standin_class("deepspeed.ops.adam", "FusedAdam")
