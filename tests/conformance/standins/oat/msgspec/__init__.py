"""Stand-in for msgspec: oat's remote reward-model oracle client (oat.oracles.remote.client) encodes
its requests with `msgspec.msgpack`; the tests run no oracle. Any attribute use fails.
"""
