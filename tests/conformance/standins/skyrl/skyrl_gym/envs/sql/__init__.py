"""Stand-in package: see skyrl_gym/__init__.py."""
