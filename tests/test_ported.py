"""Every Python stage class has one JavaScript twin in the page, and every twin a Python class.

The page re-implements the simulator (toyrl/explorer/sim.js): each stage class of toyrl.stages has
one twin there, registered by `port(kind, "ClassName", {methods})` under its Python methods' names,
and the simulator calls a stage through its twin only. The page exposes the twins as
`window.toyrl.ports`; this test reads them by running the built page's simulator under node (its
data and simulator scripts, as `toyrl explore` writes them), not by reading sim.js, and holds them
to the registry: a stage registered in Python without a twin, a twin without a class, a twin's
method its class does not have, or a method the page calls on a kind's stages missing from the
twin of a class that has it, each fails, by name. The twins' numbers are held to Python's by the
agreement cases (tests/explorer_cases.py, run in headless Chromium by tests/test_explorer.py);
`test_every_twin_method_is_run_by_an_agreement_case` checks that they reach every method of every
twin.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from toyrl.explore import build_explorer
from toyrl.stages import REGISTRY

NODE = shutil.which("node")
if NODE is None and os.environ.get("CI"):
    raise RuntimeError("CI needs node for the page's tests; .ci/run installs it")
needs_node = pytest.mark.skipif(
    NODE is None, reason="node is not installed: the page's simulator cannot be run"
)

# Runs the scripts of stdin's {scripts, expression} in one context, as the page's <script> elements
# run, then prints the expression's value (a string).
DRIVER = """
const vm = require("vm");
const request = JSON.parse(require("fs").readFileSync(0, "utf8"));
globalThis.window = globalThis;
vm.runInThisContext(request.scripts.join("\\n"), { filename: "page.js" });
const value = vm.runInThisContext(request.expression, { filename: "expression.js" });
if (typeof value !== "string") throw new TypeError(`the expression must give a string (got ${typeof value})`);
process.stdout.write(value);
"""

# {kind: {class: [its twin's methods]}} of the page's twins
PORTS = (
    "JSON.stringify(Object.fromEntries(Object.entries(toyrl.ports).map(([kind, classes]) => [kind,"
    " Object.fromEntries(Object.entries(classes).map(([name, methods]) => [name, Object.keys(methods)]))])))"
)


class _Scripts(HTMLParser):
    """The texts of a page's <script> elements, in order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[str] = []
        self._inside = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self._inside = True
            self.scripts.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._inside = False

    def handle_data(self, data: str) -> None:
        if self._inside:
            self.scripts[-1] += data


def simulator_scripts(page: str) -> list[str]:
    """The page's data and simulator scripts: its first two <script> elements (the third is the
    interface, which needs a document)."""
    parser = _Scripts()
    parser.feed(page)
    parser.close()
    assert len(parser.scripts) == 3, (
        f"the page has {len(parser.scripts)} scripts, not data, simulator and interface"
    )
    assert "TOYRL_DATA" in parser.scripts[0] and "window.toyrl" in parser.scripts[1]
    return parser.scripts[:2]


def page_value(scripts: list[str], expression: str) -> str:
    """The string value of a JavaScript expression evaluated under node after `scripts`."""
    assert NODE is not None
    done = subprocess.run(
        [NODE, "-e", DRIVER],
        input=json.dumps({"scripts": scripts, "expression": expression}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"node: {done.stderr[-3000:]}"
    return done.stdout


def ported(scripts: list[str]) -> dict[str, dict[str, list[str]]]:
    """The page's twins: {kind: {Python class name: [its twin's methods]}}."""
    return json.loads(page_value(scripts, PORTS))


def stage_classes() -> dict[str, dict[str, type]]:
    """toyrl's own stage classes by kind and name (a plugin's stages are not the page's)."""
    return {
        kind: {
            type(stage).__name__: type(stage)
            for stage in stages.values()
            if type(stage).__module__.startswith("toyrl.stages.")
        }
        for kind, stages in REGISTRY.items()
    }


def mismatches(ports: dict[str, dict[str, list[str]]], classes: dict[str, dict[str, type]]) -> list[str]:
    """Where the page's twins and the Python stage classes are not one to one, in words."""
    found = []
    for kind in sorted(set(ports) | set(classes)):
        twins, own = ports.get(kind, {}), classes.get(kind, {})
        found += [
            f"the {kind} {name} has no twin in the page: port it in sim.js"
            for name in sorted(set(own) - set(twins))
        ]
        found += [
            f"the page's twin {kind} {name} has no Python class" for name in sorted(set(twins) - set(own))
        ]
        called = {
            method for methods in twins.values() for method in methods
        }  # what the page calls on the kind
        for name in sorted(set(twins) & set(own)):
            found += [
                f"the page's twin {kind} {name} has {method}, which its Python class does not"
                for method in twins[name]
                if not hasattr(own[name], method)
            ]
            found += [
                f"the page's twin {kind} {name} lacks {method}, which its Python class has"
                for method in sorted(called - set(twins[name]))
                if hasattr(own[name], method)
            ]
    return found


@pytest.fixture(scope="module")
def scripts() -> list[str]:
    return simulator_scripts(build_explorer())


@needs_node
def test_every_stage_class_has_one_twin_in_the_page(scripts: list[str]) -> None:
    ports = ported(scripts)
    assert mismatches(ports, stage_classes()) == []
    assert list(ports) == list(REGISTRY) and all(ports.values())  # every kind, in step order


@needs_node
def test_a_stage_without_its_twin_is_named(scripts: list[str]) -> None:
    """The check fails on a page built from a sim.js with one port left out, one renamed and one
    method left out."""
    simulator = scripts[1]
    removed, renamed = 'port("advantage", "MeanScaled", ', 'port("selector", "RewardSpread", '
    method = "conditional(stage, r, others, G, eps) { return r - others / (G - 1); },\n"
    for text in (removed, renamed, method):
        assert simulator.count(text) == 1, text
    edited = (
        simulator.replace(removed, "(")  # the twin's methods, registered nowhere
        .replace(renamed, 'port("selector", "RewardSpreads", ')
        .replace(method, "")  # LeaveOneOut's exact hook
    )
    assert mismatches(ported([scripts[0], edited]), stage_classes()) == [
        "the advantage MeanScaled has no twin in the page: port it in sim.js",
        "the page's twin advantage LeaveOneOut lacks conditional, which its Python class has",
        "the selector RewardSpread has no twin in the page: port it in sim.js",
        "the page's twin selector RewardSpreads has no Python class",
    ]


def test_a_twin_s_methods_are_its_class_s() -> None:
    """A method the class does not have, or lacks while its kind's twins call it, is named."""
    classes = {"advantage": {"Centred": REGISTRY["advantage"]["none"].__class__}}
    assert mismatches({"advantage": {"Centred": ["advantages", "conditional"]}}, classes) == []
    assert mismatches({"advantage": {"Centred": ["advantages", "centred"]}}, classes) == [
        "the page's twin advantage Centred has centred, which its Python class does not"
    ]
    both = {"advantage": {"Centred": ["advantages"], "BatchStd": ["advantages", "conditional"]}}
    classes["advantage"]["BatchStd"] = REGISTRY["advantage"]["batch_std"].__class__
    assert mismatches(both, classes) == [
        "the page's twin advantage BatchStd has conditional, which its Python class does not",
        "the page's twin advantage Centred lacks conditional, which its Python class has",
    ]


def _counting(expression: str) -> str:
    """`expression`, evaluated with every twin method counting its calls; its value the counts."""
    return (
        "(() => { const counts = {}; for (const [kind, classes] of Object.entries(toyrl.ports))"
        " for (const [name, methods] of Object.entries(classes))"
        " for (const [method, f] of Object.entries(methods)) {"
        " const key = `${kind} ${name}.${method}`; counts[key] = 0;"
        " methods[method] = function (...args) { counts[key] += 1; return f.apply(this, args); }; }"
        f" {expression}; return JSON.stringify(counts); }})()"
    )


@needs_node
def test_every_twin_method_is_run_by_an_agreement_case(scripts: list[str]) -> None:
    """The agreement cases (tests/explorer_cases.py), a few steps each, call every method of every
    twin: none is left unchecked against Python."""
    from tests.explorer_cases import CASES

    runs = [{**spec, "steps": min(spec.get("steps", 400), 3)} for spec in CASES.values()]
    counts = json.loads(
        page_value(scripts, _counting(";".join(f"toyrl.simulate({json.dumps(spec)})" for spec in runs)))
    )
    assert len(counts) > 50
    assert [key for key, calls in counts.items() if calls == 0] == []
