"""Stand-in for DeepSpeed (`deepspeed`): ZeRO training engine, fused CUDA optimisers and kernels.

oat calls it to build and step its training engine (`deepspeed.initialize`, `init_distributed`,
`zero.Init`, `zero.GatheredParameters`, `DeepSpeedEngine` in oat.utils.deepspeed and oat.model) and,
in `PPOLearner.get_batch_logps`, to gather the fused LM head's weights. None of it runs in the
tests: the learner's strategy and model engine are test doubles (tests/conformance/test_oat.py:
backward and step of a float64 leaf of per-token log-probs), and `get_batch_logps`, the model's
forward, is the test's. Names accessed on this module at run time do not exist, so any use fails.
"""
