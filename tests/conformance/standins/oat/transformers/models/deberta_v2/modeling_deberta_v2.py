"""Part of the transformers stand-in (see transformers/__init__.py): DeBERTa-v2, the backbone of
oat's PairRM preference reward model (oat.rm.backbone), a base class there; the tests use no
reward model (rewards are the toy batch's 0/1), so nothing of it is instantiated.
"""

from _oat_standin import standin_class

DebertaV2Model = standin_class("transformers.models.deberta_v2.modeling_deberta_v2", "DebertaV2Model")
DebertaV2PreTrainedModel = standin_class(
    "transformers.models.deberta_v2.modeling_deberta_v2", "DebertaV2PreTrainedModel"
)
SequenceClassifierOutput = standin_class(
    "transformers.models.deberta_v2.modeling_deberta_v2", "SequenceClassifierOutput"
)
