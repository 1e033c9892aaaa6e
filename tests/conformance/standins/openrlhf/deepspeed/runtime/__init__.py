"""Stand-in for `deepspeed.runtime` (a package level only; see `deepspeed/__init__.py`)."""
