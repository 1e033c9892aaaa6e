"""Stand-in for DeepSpeed (`import deepspeed`), for the OpenRLHF conformance suite only.

Replaces: the `deepspeed` package, which `openrlhf.models.utils`, `openrlhf.models.model` and
`openrlhf.utils.deepspeed` import at load time. DeepSpeed builds CUDA ops and is not installable
here. Never called: the tested functions (`PolicyLoss`, `aggregate_loss`, the advantage estimators,
`ActorPPOTrainer.training_step` with a stand-in strategy) use no DeepSpeed engine, ZeRO partition or
optimiser; the module defines no attributes, so any use fails. See `_standin.py`.
"""
