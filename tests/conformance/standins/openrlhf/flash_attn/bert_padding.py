"""Stand-in for `flash_attn.bert_padding` (see `flash_attn/__init__.py`): the four names
`openrlhf.models.ring_attn_utils` imports; each raises if called."""

from _standin import never_called

index_first_axis = never_called("flash_attn.bert_padding.index_first_axis")
pad_input = never_called("flash_attn.bert_padding.pad_input")
rearrange = never_called("flash_attn.bert_padding.rearrange")
unpad_input = never_called("flash_attn.bert_padding.unpad_input")
