"""Stand-in for vLLM (`vllm`), the GPU inference engine of oat's actors.

oat's actors generate responses with it (oat.actors: `vllm.LLM`, `SamplingParams`); the tests
generate nothing: the responses, their log-probs and rewards are a toy batch of the ramble policy
given to the learner directly. `SamplingParams` is also read in an annotation at import.
"""

from _oat_standin import standin_class

SamplingParams = standin_class("vllm", "SamplingParams")
