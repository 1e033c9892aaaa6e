"""toyrl: an exact toy simulation of GRPO's length bias and its removal by Dr. GRPO.

The pipeline, one module a step: `policy` (the ramble policy, in closed form) -> `objective` (the
loss variants as data) -> `train` (Adam on exact updates, many runs at once) -> `results` (tidy CSV
with its configuration) -> `cli` (the `toyrl` command).
"""

__version__ = "0.2.0"
