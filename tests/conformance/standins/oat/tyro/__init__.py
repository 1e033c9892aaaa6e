"""Stand-in for tyro: oat parses its command line into its argument dataclasses with it
(oat.args.get_default_args); the tests build `PPOArgs` directly, so it is never called. Any
attribute use fails.
"""
