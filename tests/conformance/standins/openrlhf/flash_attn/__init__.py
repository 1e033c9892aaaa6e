"""Stand-in for flash-attn (`flash_attn`), for the OpenRLHF conformance suite only.

Replaces: the `flash_attn` package, whose `bert_padding` and `utils.distributed` helpers
`openrlhf.models.ring_attn_utils` imports at load time. flash-attn is CUDA-only and not installable
here. Never called: those helpers serve packed samples and ring attention inside the actor's forward
pass, which the tests replace by a leaf tensor of log-probabilities. It has no `ops` module, so
`openrlhf.models.utils.log_probs_from_logits` would take its plain-torch fallback. See `_standin.py`.
"""
