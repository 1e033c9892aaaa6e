"""`toyrl explore`: one self-contained HTML page for a lecture, that trains the toy live, offline.

The page is assembled from three files beside this one (`explorer/`): the template `page.html`,
the simulator `sim.js` (the ramble policy, the stages the page runs, sampled and mean-field
training, `window.toyrl.simulate`) and the interface `ui.js`. What the simulator needs from the
Python side is embedded as JSON (`page_data`): the configuration's defaults and help texts, the
stage registry and every preset's canonical spec (so no variant is retyped in JavaScript), and the
standard normals that the initial prompt logits of seeds 0..15 are made of (`toyrl.train.
initial_theta`), so a page run starts where `toyrl run` does. tests/test_explorer.py checks the
page's numbers against this package's in headless Chromium.
"""

from __future__ import annotations

import dataclasses
import json
import re
from importlib import resources
from typing import Any

import numpy as np
import pandas as pd

from toyrl import __version__
from toyrl.config import Config, field_help
from toyrl.expected import exact_support
from toyrl.objective import DEFAULTS, KIND_KEYS
from toyrl.stages import REGISTRY, parameters, simulated_only
from toyrl.train import run_streams
from toyrl.variants import ARTICLE, SOURCES, VARIANTS

RECORDED = ["accuracy", "length_correct", "length_incorrect"]
PAGE_SEEDS = 16  # seeds whose initial prompt logits the page holds (its seed control: 1-16 seeds)
PAGE_PROMPTS = 64  # ... for up to this many prompts (the first P normals of a seed are its P logits')
PLACEHOLDERS = {"data": "/*__TOYRL_DATA__*/null", "sim": "/*__SIM_JS__*/", "ui": "/*__UI_JS__*/"}
MAX_PAGE_BYTES = 300_000


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
        "seeds": int(frame["seed"].nunique()),
        "description": description,
        "curves": curves,
    }


def _plain(value: Any) -> Any:
    """A stage parameter as JSON (numbers, booleans, strings and None pass as they are)."""
    return value.item() if isinstance(value, np.generic) else value


def _registry() -> dict[str, dict[str, Any]]:
    """Every registered stage: its class, fixed fields and tunable parameters with their defaults."""
    out: dict[str, dict[str, Any]] = {}
    for kind, stages in REGISTRY.items():
        out[kind] = {}
        for name, stage in stages.items():
            fixed = getattr(stage, "fixed", ())
            out[kind][name] = {
                "class": type(stage).__name__,
                "fixed": {f: _plain(getattr(stage, f)) for f in fixed},
                "parameters": {key: _plain(value) for key, value in parameters(stage).items()},
                "simulated_only": simulated_only(stage),
            }
    return out


def _source(name: str) -> str:
    """Which entry of `toyrl.variants.SOURCES` a preset was read from ('' for the article's)."""
    if name in ARTICLE:
        return ""
    for key in ("trl", "verl", "oat", "openrlhf", "dapo"):
        if name.startswith(key):
            return key
    return "families"


def page_data(recorded: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the page's simulator and interface read: see the module docstring."""
    config = Config()
    normals = [run_streams(seed)[0].standard_normal(PAGE_PROMPTS).tolist() for seed in range(PAGE_SEEDS)]
    return {
        "version": __version__,
        "config": {
            f.name: {"default": getattr(config, f.name), "help": field_help(f.name)}
            for f in dataclasses.fields(Config)
        },
        "initial_normals": normals,
        "registry": _registry(),
        "defaults": DEFAULTS,
        "kind_keys": KIND_KEYS,
        "article": list(ARTICLE),
        "sources": SOURCES,
        "variants": [
            {
                "name": v.name,
                "spec": v.spec(),
                "summary": v.summary,
                "stands_for": v.stands_for,
                "source": _source(v.name),
                "exact": exact_support(v),
            }
            for v in VARIANTS.values()
        ],
        "recorded": recorded,
    }


def build_explorer(recorded: dict[str, Any] | None = None) -> str:
    """The page, with `page_data(recorded)` and the two scripts inlined. '<' in the data is escaped
    so no string can end the script; the scripts are checked not to contain '</script'."""
    folder = resources.files("toyrl").joinpath("explorer")
    page = folder.joinpath("page.html").read_text(encoding="utf-8")
    payload = json.dumps(page_data(recorded), separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    parts = {"data": payload}
    for key, file in (("sim", "sim.js"), ("ui", "ui.js")):
        script = folder.joinpath(file).read_text(encoding="utf-8")
        if "</script" in script.lower():
            raise ValueError(f"explorer/{file} must not contain '</script'")
        parts[key] = script
    for placeholder in PLACEHOLDERS.values():
        if page.count(placeholder) != 1:
            raise ValueError(f"explorer/page.html must hold {placeholder} once")
    # one pass, so that no inlined text is searched for the next placeholder
    pattern = "|".join(re.escape(p) for p in PLACEHOLDERS.values())
    by_placeholder = {PLACEHOLDERS[key]: text for key, text in parts.items()}
    return re.sub(pattern, lambda match: by_placeholder[match.group(0)], page)
