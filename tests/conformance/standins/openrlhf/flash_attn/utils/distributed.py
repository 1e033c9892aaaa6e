"""Stand-in for `flash_attn.utils.distributed` (see `flash_attn/__init__.py`): `all_gather`,
imported by `openrlhf.models.ring_attn_utils` for ring attention; raises if called."""

from _standin import never_called

all_gather = never_called("flash_attn.utils.distributed.all_gather")
