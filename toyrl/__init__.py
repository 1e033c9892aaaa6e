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

For notebooks and scripts (`toyrl.api`, docs/api.md): `toyrl.run` (the results table, its
configuration attached), `toyrl.plot` (its figures), `toyrl.expected_update`, `toyrl.check`, and
`toyrl.save` / `toyrl.load`.
"""

from typing import TYPE_CHECKING, Any

from toyrl.api import check, expected_update, load, run, save
from toyrl.config import Config
from toyrl.version import __version__ as __version__  # the package modules read it from there

if TYPE_CHECKING:
    from toyrl import plot

__all__ = ["Config", "check", "expected_update", "load", "plot", "run", "save"]


def __getattr__(name: str) -> Any:
    """`toyrl.plot`, imported on first use (it imports matplotlib, which most commands never need)."""
    if name == "plot":
        import importlib

        return importlib.import_module("toyrl.plot")
    raise AttributeError(f"module 'toyrl' has no attribute {name!r}")
