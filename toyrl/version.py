"""toyrl's version, in a module of its own: the package's modules read it from here, not from
`toyrl` itself, whose `__init__` imports them (an import cycle; tests/test_layers.py)."""

__version__ = "0.4.0"
