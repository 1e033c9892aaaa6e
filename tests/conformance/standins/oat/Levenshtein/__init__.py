"""Stand-in for python-Levenshtein: oat's feedback collector (oat.collectors.base) measures the edit
distance of preference pairs with it; PPO has no preference pairs and the tests run no collector.
Any attribute use fails.
"""
