"""Stand-in for `flash_attn.utils` (a package level only; see `flash_attn/__init__.py`)."""
