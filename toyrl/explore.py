"""`toyrl explore`: one self-contained HTML page for a lecture, that trains the toy live, offline.

The page is assembled from files beside this one (`explorer/`): the template `page.html`, the
simulator, which is three scripts inlined in order (`kernels.js`, toyrl.kernels' functions;
`random.js`, numpy's SeedSequence and PCG64 streams; `sim.js`, the ramble policy, the stages the
page runs, sampled and mean-field training, `window.toyrl.simulate`) and the interface `ui.js`.
What the simulator needs from the Python side is embedded as JSON (`page_data`): the
configuration's defaults, help texts and valid ranges, `toyrl run`'s bounds (`limits`, with the
page's own on what one tab holds), the kinds of stage (`toyrl.stages.KIND`: key, default, whether a
chunk shares one), the stage registry (each stage's class, parameters, declared ranges, refused
combinations, what its `check` refuses, why it has no exact update) and every preset's canonical
spec (so no variant is retyped in JavaScript), what toyrl refuses across settings and the words it
refuses a spec's keys and labels with (`toyrl.refusals`: conditions and messages as data, which
sim.js evaluates and formats, holding none of them), the figures' looks (`toyrl.plots`: each
variant's colour, line style and marker, the outcomes' colours and markers, the article's labels)
and where toyrl's documents are (`doc_links`: linked only where the page is written beside them),
and the recorded runs' mean curves (`run_data`: at the digits the page shows). The page draws
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

from toyrl.config import CONFIG_REFUSALS, MAX_RESPONSES, MAX_SEEDS, Config, field_bounds, field_help
from toyrl.experiment import MAX_ROWS, RUN_REFUSALS
from toyrl.looks import EXTRA_COLOURS
from toyrl.objective import SPEC_MESSAGES
from toyrl.plots import (
    ARTICLE_LOOKS,
    EXTRA_MARKERS,
    EXTRA_STYLES,
    MAX_BANDS,
    OUTCOME_COLOURS,
    OUTCOME_MARKERS,
    VARIANT_LABELS,
)
from toyrl.refusals import parts
from toyrl.stages import KIND, REGISTRY, declarations, parameters, simulated_only
from toyrl.train import VARIANT_REFUSALS
from toyrl.variants import ARTICLE, SOURCES, VARIANTS
from toyrl.version import __version__

RECORDED = ["accuracy", "length_correct", "length_incorrect"]
# What the page shows of a recorded mean, and so all it is shipped: accuracy to 0.1 % and a length to
# a token (its readouts' digits), as whole numbers of 1/unit. The article's 24 runs' curves then fit
# with the page in MAX_PAGE_BYTES.
RECORDED_UNITS = {"accuracy": 1000, "length_correct": 1, "length_incorrect": 1}
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
    """Mean over seeds, per variant and step, of the recorded curves, at the digits the page shows
    (`RECORDED_UNITS`): each step's mean rounded to a whole number of 1/unit, given as its change
    from the last finite step's (the page adds them up and divides by the unit; the first is from 0).

    A step where any seed's value is not finite (a run that diverged) has no mean: None, drawn as a
    gap, and the description says from which step each such variant has one."""
    variants = list(dict.fromkeys(frame["variant"]))
    groups = ["variant", "step"]
    means = frame.groupby(groups, sort=False)[RECORDED].mean()
    finite = pd.DataFrame(
        np.isfinite(frame[RECORDED].to_numpy(dtype=float)), columns=RECORDED, index=frame.index
    )
    means = means.where(finite.groupby([frame[g] for g in groups], sort=False).all())
    gaps = {}
    for variant in variants:
        missing = np.flatnonzero(means.loc[variant].isna().any(axis=1).to_numpy())
        if len(missing):
            gaps[variant] = int(missing[0])
    if gaps:
        where = ", ".join(f"{variant} from step {step}" for variant, step in gaps.items())
        description += f"; not finite (gaps): {where}"
    data = {
        "steps": int(frame["step"].max()),
        "cap": cap,
        "variants": variants,
        "seeds": int(frame["seed"].nunique()),
        "description": description,
        "units": RECORDED_UNITS,
        "curves": {
            variant: {name: _changes(means.loc[variant, name], RECORDED_UNITS[name]) for name in RECORDED}
            for variant in variants
        },
    }
    return data | ({"gaps": gaps} if gaps else {})


def _changes(values: pd.Series, unit: int) -> list[int | None]:
    """Each finite value as round(value x unit), less the last finite one's (None where not finite)."""
    out: list[int | None] = []
    last = 0
    for value in values:
        if not np.isfinite(value):
            out.append(None)
            continue
        whole = round(float(value) * unit)
        out.append(whole - last)
        last = whole
    return out


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
                # the combinations of its parameters it refuses (`check_declared`, `toyrl.refusals`)
                "refuses": [refusal.data() for refusal in getattr(stage, "refuses", ())],
                # what its `check` refuses in a configuration (`toyrl.refusals`)
                "checks": [refusal.data() for refusal in getattr(stage, "checks", ())],
                "simulated_only": simulated_only(stage),  # at its defaults; by its parameters:
                "simulated_when": [refusal.data() for refusal in getattr(stage, "simulated_when", ())],
                "divides": getattr(stage, "divides", None),  # a normaliser's, in words
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
            "max_responses": MAX_RESPONSES,
            "max_seeds": MAX_SEEDS,
            "page_rows": PAGE_MAX_ROWS,
            "page_bytes": PAGE_MAX_BYTES,
            "page_step_seconds": PAGE_MAX_STEP_SECONDS,
        },
        "kinds": [  # in step order (toyrl.stages.KIND)
            {
                "name": kind.name,
                "key": kind.key,
                "default": kind.default,
                "chunk": kind.chunk,
                "spec_place": kind.spec_place,
            }
            for kind in KIND.values()
        ],
        # what a spec's keys are refused with (toyrl.objective), formatted as `toyrl.refusals.say` does
        "spec_messages": {name: parts(template) for name, template in SPEC_MESSAGES.items()},
        "registry": _registry(),
        "refusals": {  # what no one stage refuses, across settings (`toyrl.refusals`)
            "config": [refusal.data() for refusal in CONFIG_REFUSALS],
            "variant": [refusal.data() for refusal in VARIANT_REFUSALS],
            "runs": [refusal.data() for refusal in RUN_REFUSALS],  # on `updates`, a run's most
        },
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
    hold labels to the same rules in the same words (`messages`, formatted as `toyrl.refusals.say`
    formats them)."""
    from toyrl.variants import LABEL_CHARACTERS, LABEL_FORM, LABEL_MAX, LABEL_MESSAGES

    taken = sorted({"all", *(variant.title for variant in VARIANTS.values())} - set(VARIANTS))
    return {
        "max": LABEL_MAX,
        "characters": "".join(sorted(LABEL_CHARACTERS)),
        "form": LABEL_FORM,
        "taken": taken,
        "messages": {name: parts(template) for name, template in LABEL_MESSAGES.items()},
    }


def _compacted(script: str, file: str) -> str:
    """The script without its lines that are only a `//` comment and without each line's leading
    spaces (the page is one small file; the sources in toyrl/explorer keep both). A line's start
    is outside any string as long as no string spans lines: JavaScript's quotes and regular
    expressions cannot, but a quoted string continued by a backslash, and a template literal (an
    odd number of backticks on a line), could, and are refused."""
    lines = script.split("\n")
    odd = next((number for number, line in enumerate(lines, 1) if line.count("`") % 2), None)
    if odd is not None:
        raise ValueError(f"explorer/{file}, line {odd}: a template literal must not span lines")
    continued = next((number for number, line in enumerate(lines, 1) if line.endswith("\\")), None)
    if continued is not None:
        raise ValueError(f"explorer/{file}, line {continued}: a string must not continue on the next line")
    return "\n".join(line.lstrip(" ") for line in lines if not line.lstrip().startswith("//"))


def build_explorer(recorded: dict[str, Any] | None = None, out: Path | None = None) -> str:
    """The page, with `page_data(recorded, out)` and the scripts inlined (the simulator's three in
    order, one script element). `out`: the path the page will be written to, if known; it decides
    only whether toyrl's documents are links (`doc_links`). '<' in the data is escaped so no string
    can end the script; the scripts are checked not to contain '</script', and their comment lines
    and indentation are left out (`_compacted`)."""
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
            scripts.append(_compacted(script, file))
        parts[key] = "\n".join(scripts)
    for placeholder in PLACEHOLDERS.values():
        if page.count(placeholder) != 1:
            raise ValueError(f"explorer/page.html must hold {placeholder} once")
    # one pass, so that no inlined text is searched for the next placeholder
    pattern = "|".join(re.escape(p) for p in PLACEHOLDERS.values())
    by_placeholder = {PLACEHOLDERS[key]: text for key, text in parts.items()}
    return re.sub(pattern, lambda match: by_placeholder[match.group(0)], page)
