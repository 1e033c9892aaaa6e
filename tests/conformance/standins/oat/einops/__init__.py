"""Stand-in for einops: oat's epistemic reward-model ensemble (oat.rm, oat.exploration) rearranges
tensors with it; the tests use no reward model. Any attribute use fails.
"""
