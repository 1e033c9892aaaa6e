"""Stand-in for dm-tree (`tree`), nested-structure utilities.

oat uses `tree.map_structure` / `tree.flatten` in `PPOLearner.learn` (averaging the infos of a
learning round), the actors, collectors and oracles; `PPOLearner.learning_step`, the tested
function, does not, and the tests call it directly. Any attribute use fails.
"""
