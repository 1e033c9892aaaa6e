"""Part of the DeepSpeed stand-in (see deepspeed/__init__.py): `deepspeed.utils`.
oat calls `safe_get_full_grad` in `DeepspeedStrategy.get_gradient_norm`; the tests' strategy is a
test double with its own gradient norm, so it is never called.
"""

from _oat_standin import standin_function

safe_get_full_grad = standin_function("deepspeed.utils", "safe_get_full_grad")
