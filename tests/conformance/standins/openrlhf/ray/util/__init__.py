"""Stand-in for `ray.util` (a package level only; see `ray/__init__.py`)."""
