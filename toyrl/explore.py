"""`toyrl explore`: one self-contained HTML page for a lecture, that works offline from disk.

The page (template `explorer.html` beside this file) computes the token weights and the difficulty
profile live, with the same formulas as `toyrl.objective` (checked in a real browser by the tests),
and draws the recorded curves of a results table, which are embedded in it as JSON.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pandas as pd

RECORDED = ["accuracy", "length_correct", "length_incorrect"]
PLACEHOLDER = "/*__RUN_DATA__*/null"


def run_data(frame: pd.DataFrame, cap: int, description: str) -> dict[str, Any]:
    """Mean over seeds, per variant and step, of the recorded curves (7 significant digits)."""
    variants = list(dict.fromkeys(frame["variant"]))
    means = frame.groupby(["variant", "step"], sort=False)[RECORDED].mean()
    curves = {
        variant: {name: [float(f"{value:.7g}") for value in means.loc[variant, name]] for name in RECORDED}
        for variant in variants
    }
    return {
        "steps": int(frame["step"].max()),
        "cap": cap,
        "variants": variants,
        "description": description,
        "curves": curves,
    }


def build_explorer(data: dict[str, Any]) -> str:
    """The page with `data` (from `run_data`) embedded; '<' is escaped so no string can end the script."""
    template = resources.files("toyrl").joinpath("explorer.html").read_text(encoding="utf-8")
    payload = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return template.replace(PLACEHOLDER, payload)
