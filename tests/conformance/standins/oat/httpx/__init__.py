"""Stand-in for httpx: oat's remote reward-model oracle client (oat.oracles.remote.client) posts to
a reward server with it; the tests run no oracle. Any attribute use fails.
"""
