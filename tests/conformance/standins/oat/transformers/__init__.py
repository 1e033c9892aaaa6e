"""Stand-in for Hugging Face transformers: model, config and tokenizer loaders.

oat uses them to load the policy, reference, critic and reward models and the tokenizer from a
hub name (oat.model, oat.utils.data.get_tokenizer, oat.rm.backbone). The tests load no model (the
policy is a float64 leaf of per-token log-probs and the tokenizer's pad id a test double), so
none of these is called.
"""

from _oat_standin import standin_class

AutoConfig = standin_class("transformers", "AutoConfig")
AutoModel = standin_class("transformers", "AutoModel")
AutoModelForCausalLM = standin_class("transformers", "AutoModelForCausalLM")
AutoTokenizer = standin_class("transformers", "AutoTokenizer")
BitsAndBytesConfig = standin_class("transformers", "BitsAndBytesConfig")
