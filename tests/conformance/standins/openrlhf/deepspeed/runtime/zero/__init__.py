"""Stand-in for `deepspeed.runtime.zero` (a package level only; see `deepspeed/__init__.py`)."""
