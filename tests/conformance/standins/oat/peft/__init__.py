"""Stand-in for Hugging Face PEFT (`peft`): LoRA adapters.

oat wraps a model with LoRA when lora_rank > 0 (oat.model) and saves adapter weights
(oat.utils.deepspeed.save_model); the tests load no model and save nothing.
"""

from _oat_standin import standin_class, standin_function

LoraConfig = standin_class("peft", "LoraConfig")
PeftModel = standin_class("peft", "PeftModel")
TaskType = standin_class("peft", "TaskType")
get_peft_model = standin_function("peft", "get_peft_model")
get_peft_model_state_dict = standin_function("peft", "get_peft_model_state_dict")
