"""toyrl: an exact toy simulation of GRPO's length bias and its removal by Dr. GRPO.

Every number rests on `kernels` (exp, log and their kin in IEEE-754 basic arithmetic: the same bits
on every machine) and `noise` (the variates, from PCG64's raw stream). The pipeline, one module a
step: `policy` (the ramble policy in closed form, its token table and
the one gradient) -> `stages` (reward, selector, advantage, normaliser, objective, KL, schedule:
small registered classes, each with its exact hook) -> `objective` (a variant: one stage of each
kind, with one canonical spec) and `variants` (the named ones) -> `train` (one training step, top
to bottom, and the loop that records it) -> `expected` (exact expected updates, mean-field runs)
-> `experiment` (many runs over workers, the results table) -> `results` (CSV with its
configuration, written by `files`: whole or not at all) -> `plots` -> `cli` (the `toyrl` command:
its `commands`, `options` and `terminal` output). docs/design.md shows how they fit.
"""

__version__ = "0.4.0"
