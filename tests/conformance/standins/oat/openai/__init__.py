"""Stand-in for the OpenAI client: oat's GPT-judge oracle (oat.oracles.gpt) calls a remote API with
it; the tests' rewards are the toy batch's own and no oracle runs.
"""

from _oat_standin import standin_class

OpenAI = standin_class("openai", "OpenAI")
