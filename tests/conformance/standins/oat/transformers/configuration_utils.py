"""Part of the transformers stand-in (see transformers/__init__.py): `PretrainedConfig`, used
only in the signature of oat.rm.backbone's PairRM reward-model backbone, which the tests never build.
"""

from _oat_standin import standin_class

PretrainedConfig = standin_class("transformers.configuration_utils", "PretrainedConfig")
