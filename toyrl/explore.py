"""`toyrl explore`: one self-contained HTML page for a lecture, that trains the toy live, offline.

The page is assembled from files beside this one (`explorer/`): the template `page.html`, the
simulator, which is three scripts inlined in order (`kernels.js`, toyrl.kernels' functions;
`random.js`, numpy's SeedSequence and PCG64 streams; `sim.js`, the ramble policy, the stages the
page runs, sampled and mean-field training, `window.toyrl.simulate`) and the interface `ui.js`.
What the simulator needs from the Python side is embedded as JSON (`page_data`): the
configuration's defaults, help texts and valid ranges, `toyrl run`'s bounds (`limits`, with the
page's own on what one tab holds), the stage registry and every preset's canonical spec (so no
variant is retyped in JavaScript), the figures' looks (`toyrl.plots`: each variant's colour, line
style and marker, the outcomes' colours and markers, the article's labels) and where toyrl's
documents are (`doc_links`: linked only where the page is written beside them). The page draws
each seed's numbers itself, from the same streams as `toyrl run`, and computes the same bits:
tests/test_explorer.py checks it against this package in headless Chromium.
"""

from __future__ import annotations

import dataclasses
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from toyrl import __version__
from toyrl.config import MAX_RESPONSES, MAX_SEEDS, Config, field_bounds, field_help
from toyrl.experiment import MAX_ROWS, MAX_UPDATES
from toyrl.looks import EXTRA_COLOURS
from toyrl.objective import DEFAULTS, KIND_KEYS
from toyrl.plots import (
    ARTICLE_LOOKS,
    EXTRA_MARKERS,
    EXTRA_STYLES,
    MAX_BANDS,
    OUTCOME_COLOURS,
    OUTCOME_MARKERS,
    VARIANT_LABELS,
)
from toyrl.stages import REGISTRY, declarations, parameters, simulated_only
from toyrl.train import MAX_LAYOUT_MERGES
from toyrl.variants import ARTICLE, SOURCES, VARIANTS

RECORDED = ["accuracy", "length_correct", "length_incorrect"]
PLACEHOLDERS = {"data": "/*__TOYRL_DATA__*/null", "sim": "/*__SIM_JS__*/", "ui": "/*__UI_JS__*/"}
MAX_PAGE_BYTES = 300_000
# The simulator's scripts, in the order they run: sim.js uses the globals the other two define.
SIMULATOR = ("kernels.js", "random.js", "sim.js")
# The page keeps every column of every run and step (17 doubles a row) and every run's batch at
# once, in one tab: it holds fewer rows than toyrl run (whose table may take 4 GB), and all its
# runs' responses of a step within the bound toyrl run puts on one run's.
PAGE_MAX_ROWS = 1_000_000  # about 140 MB
# ... and what it holds in all (every run's state and batch besides its rows: about 15 KB a run at
# least, measured in node), and a step's time: the page computes a step of all its runs at once
# (sim.js's `footprint` estimates both, before anything is allocated).
PAGE_MAX_BYTES = 1_000_000_000
PAGE_MAX_STEP_SECONDS = 2.0
# toyrl's documents the page names, (path in the repository, what it is about), in reading order.
DOCS = [
    ("README.md", "README"),
    ("docs/bias.md", "exact expected updates"),
    ("docs/variants.md", "variants"),
    ("docs/trainers.md", "trainers"),
    ("docs/design.md", "design"),
    ("docs/reproducibility.md", "reproducibility"),
    ("docs/explorer.md", "this page and its simulator"),
]


def run_data(frame: pd.DataFrame, cap: int, description: str) -> dict[str, Any]:
    """Mean over seeds, per variant and step, of the recorded curves (7 significant digits).

    A step where any seed's value is not finite (a run that diverged) has no mean: None, drawn as a
    gap, and the description says from which step each such variant has one."""
    variants = list(dict.fromkeys(frame["variant"]))
    groups = ["variant", "step"]
    means = frame.groupby(groups, sort=False)[RECORDED].mean()
    finite = pd.DataFrame(
        np.isfinite(frame[RECORDED].to_numpy(dtype=float)), columns=RECORDED, index=frame.index
    )
    means = means.where(finite.groupby([frame[g] for g in groups], sort=False).all())
    curves = {
        variant: {
            name: [
                float(f"{value:.7g}") if np.isfinite(value) else None for value in means.loc[variant, name]
            ]
            for name in RECORDED
        }
        for variant in variants
    }
    gaps = {
        variant: min(values.index(None) for values in curves[variant].values() if None in values)
        for variant in variants
        if any(None in values for values in curves[variant].values())
    }
    if gaps:
        where = ", ".join(f"{variant} from step {step}" for variant, step in gaps.items())
        description += f"; not finite (gaps): {where}"
    data = {
        "steps": int(frame["step"].max()),
        "cap": cap,
        "variants": variants,
        "seeds": int(frame["seed"].nunique()),
        "description": description,
        "curves": curves,
    }
    return data | ({"gaps": gaps} if gaps else {})


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
                "declared": declarations(type(stage)),  # the valid values, as the stage checks them
                "refuses": list(getattr(stage, "refuses", ())),  # combinations it refuses (`refused`)
                "simulated_only": simulated_only(stage),
            }
    return out


def _source(name: str) -> str:
    """Which entry of `toyrl.variants.SOURCES` a preset was read from ('' for the article's)."""
    if name in ARTICLE:
        return ""
    for key in sorted((key for key in SOURCES if key != "families"), key=len, reverse=True):
        if name.startswith(key):
            return key
    return "families"


def _dashes(linestyle: Any) -> list[float]:
    """A matplotlib line style as an SVG dash pattern in line widths (matplotlib scales dashes by
    the line's width, and so does the page): "-" is [], (offset, (on, off, ...)) its sequence."""
    if linestyle == "-":
        return []
    offset, sequence = linestyle
    if offset != 0:
        raise ValueError(f"the page draws dash patterns from offset 0 (got {linestyle!r})")
    return [float(length) for length in sequence]


def _looks() -> dict[str, Any]:
    """The figures' looks (toyrl.plots), for the page to draw as they do: the article's four
    variants' fixed (colour, dashes, marker), the pool every other variant takes the next free one
    of (`variant_looks`: markers slowest, then line styles, then colours), and the outcomes'."""
    return {
        "article": {
            name: {"colour": look.colour, "dashes": _dashes(look.linestyle), "marker": look.marker}
            for name, look in ARTICLE_LOOKS.items()
        },
        "extra": {
            "colours": EXTRA_COLOURS,
            "dashes": [_dashes(style) for style in EXTRA_STYLES],
            "markers": EXTRA_MARKERS,
        },
        "outcomes": {
            outcome: {"colour": OUTCOME_COLOURS[outcome], "marker": OUTCOME_MARKERS[outcome]}
            for outcome in OUTCOME_COLOURS
        },
        "labels": VARIANT_LABELS,
        "max_bands": MAX_BANDS,
    }


def doc_links(out: Path | None = None) -> list[dict[str, Any]]:
    """toyrl's documents as the page names them: each with a link relative to the page (`href`)
    only when `out`, the page's path, is the figures/ folder of a toyrl repository that holds the
    document; otherwise None, and the page names the document in plain text. No public address is
    declared in pyproject.toml, and a relative link from a page written anywhere else would break."""
    beside: set[str] = set()
    folder = out.resolve().parent if out is not None else None
    if folder is not None and folder.name == "figures":
        root = folder.parent
        if all((root / marker).is_file() for marker in ("pyproject.toml", "toyrl/explore.py")):
            beside = {path for path, _ in DOCS if (root / path).is_file()}
    return [
        {"path": path, "title": title, "href": f"../{path}" if path in beside else None}
        for path, title in DOCS
    ]


def page_data(recorded: dict[str, Any] | None = None, out: Path | None = None) -> dict[str, Any]:
    """What the page's simulator and interface read: see the module docstring. `out`: where the page
    is written, if known (for `doc_links`)."""
    config = Config()
    return {
        "version": __version__,
        "config": {
            f.name: {
                "default": getattr(config, f.name),
                "help": field_help(f.name),
                "bounds": field_bounds(f.name),
            }
            for f in dataclasses.fields(Config)
        },
        "limits": {  # toyrl run's bounds, and the page's own on what one tab holds
            "max_rows": MAX_ROWS,
            "max_updates": MAX_UPDATES,
            "max_responses": MAX_RESPONSES,
            "max_seeds": MAX_SEEDS,
            "page_rows": PAGE_MAX_ROWS,
            "page_bytes": PAGE_MAX_BYTES,
            "page_step_seconds": PAGE_MAX_STEP_SECONDS,
            "max_layout_merges": MAX_LAYOUT_MERGES,
        },
        "registry": _registry(),
        "defaults": DEFAULTS,
        "kind_keys": KIND_KEYS,
        "article": list(ARTICLE),
        "looks": _looks(),
        "docs": doc_links(out),
        "sources": SOURCES,
        "variants": [
            {
                "name": v.name,
                # Python's text (3.0 stays 3.0, which JSON makes 3); the page parses its spec from it
                "spec_text": v.spec_text(),
                "summary": v.summary,
                "stands_for": v.stands_for,
                "source": _source(v.name),
            }
            for v in VARIANTS.values()
        ],
        "recorded": recorded,
        "labels": _labels(),
    }


def _labels() -> dict[str, Any]:
    """What a label may be (`toyrl.variants.check_label`) beyond what the page's data holds (the
    presets' names, the spec keys: `taken` adds their display texts and "all"), for the page to
    hold labels to the same rules in the same words."""
    from toyrl.variants import LABEL_CHARACTERS, LABEL_FORM, LABEL_MAX

    taken = sorted({"all", *(variant.title for variant in VARIANTS.values())} - set(VARIANTS))
    return {
        "max": LABEL_MAX,
        "characters": "".join(sorted(LABEL_CHARACTERS)),
        "form": LABEL_FORM,
        "taken": taken,
    }


def _without_comment_lines(script: str, file: str) -> str:
    """The script without its lines that are only a `//` comment (the page is one small file; the
    sources in toyrl/explorer keep them). Such a line is a comment wherever it stands as long as no
    string spans lines: JavaScript's quotes and regular expressions cannot, and a template literal
    could only with an odd number of backticks on a line, which is refused."""
    lines = script.split("\n")
    odd = next((number for number, line in enumerate(lines, 1) if line.count("`") % 2), None)
    if odd is not None:
        raise ValueError(f"explorer/{file}, line {odd}: a template literal must not span lines")
    return "\n".join(line for line in lines if not line.lstrip().startswith("//"))


def build_explorer(recorded: dict[str, Any] | None = None, out: Path | None = None) -> str:
    """The page, with `page_data(recorded, out)` and the scripts inlined (the simulator's three in
    order, one script element). `out`: the path the page will be written to, if known; it decides
    only whether toyrl's documents are links (`doc_links`). '<' in the data is escaped so no string
    can end the script; the scripts are checked not to contain '</script', and their comment lines
    are left out (`_without_comment_lines`)."""
    folder = resources.files("toyrl").joinpath("explorer")
    page = folder.joinpath("page.html").read_text(encoding="utf-8")
    data = page_data(recorded, out)
    payload = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    parts = {"data": payload}
    for key, files in (("sim", SIMULATOR), ("ui", ("ui.js",))):
        scripts = []
        for file in files:
            script = folder.joinpath(file).read_text(encoding="utf-8")
            if "</script" in script.lower():
                raise ValueError(f"explorer/{file} must not contain '</script'")
            scripts.append(_without_comment_lines(script, file))
        parts[key] = "\n".join(scripts)
    for placeholder in PLACEHOLDERS.values():
        if page.count(placeholder) != 1:
            raise ValueError(f"explorer/page.html must hold {placeholder} once")
    # one pass, so that no inlined text is searched for the next placeholder
    pattern = "|".join(re.escape(p) for p in PLACEHOLDERS.values())
    by_placeholder = {PLACEHOLDERS[key]: text for key, text in parts.items()}
    return re.sub(pattern, lambda match: by_placeholder[match.group(0)], page)
