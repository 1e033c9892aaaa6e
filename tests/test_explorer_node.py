"""The explorer's simulator under node: the cases of tests/test_explorer.py without a browser.

tests/sim_node.js runs the page's three simulator scripts (toyrl/explorer/kernels.js, random.js,
sim.js) in the order the page runs them, on the data `toyrl.explore.page_data` embeds, and evaluates
the same expression the Chromium tests do; each case of tests/explorer_cases.py must then equal this
package's run value for value (`==`, NaN where NaN), every column of every step, and each step's loss
gradient where the case keeps them. The scan at the end needs no node: sim.js calls none of the
engine's transcendental functions (Math.exp, Math.log, Math.pow, ...), whose last bits are each
engine's own, and draws nothing from Math.random.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.explorer_cases import (
    CASES,
    NUMBERS,
    agreement_cases,
    check_case,
    first_difference,
    page_run,
    python_side,
    result_expression,
)
from toyrl import layout
from toyrl.config import InvalidInput
from toyrl.explore import page_data
from toyrl.objective import KIND_KEYS, from_spec
from toyrl.stages import REGISTRY, declarations
from toyrl.variants import ARTICLE

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "sim_node.js"
NODE = shutil.which("node")
if NODE is None and os.environ.get("CI"):
    raise RuntimeError("CI needs node for the simulator's node tests; .ci/run installs it")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed: the simulator cannot be run")


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return page_data()


class NodeFailed(Exception):
    """The driver's exception report: `answer` is what it printed ({error, input_error})."""

    def __init__(self, stdout: str, stderr: str) -> None:
        super().__init__(f"node: {stdout[:2000]} {stderr[:2000]}")
        self.answer = stdout


def node_evaluate(data: dict[str, Any], expression: str) -> str:
    """The string value of a JavaScript expression evaluated after the simulator's scripts."""
    assert NODE is not None
    answer = subprocess.run(
        [NODE, str(DRIVER)],
        input=json.dumps({"data": data, "expression": expression}),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if answer.returncode != 0:
        raise NodeFailed(answer.stdout, answer.stderr)
    return answer.stdout


@needs_node
@pytest.mark.parametrize("case", agreement_cases())
def test_the_simulator_under_node_computes_the_same_numbers_as_toyrl(data: dict[str, Any], case: str) -> None:
    spec = CASES[case]
    check_case(page_run(node_evaluate(data, result_expression(spec)), spec), spec, python_side(spec))


@needs_node
def test_the_article_set_under_node(data: dict[str, Any]) -> None:
    """Prints the time of 4 variants x 6 seeds x 400 sampled steps under node (a measurement)."""
    spec = {"variants": list(ARTICLE), "seeds": 6, "steps": 400}
    expression = (
        f"(() => {{ const s = performance.now(); const run = toyrl.start({json.dumps(spec)});"
        " run.advance(run.steps);"
        " return JSON.stringify([(performance.now() - s) / 1000, run.t, run.runs.length]); })()"
    )
    seconds, steps, runs = json.loads(node_evaluate(data, expression))
    print(f"the article set (4 variants x 6 seeds x 400 steps, sampled) under node: {seconds:.3f} s")
    assert (steps, runs) == (400, 24)


@needs_node
def test_a_bad_spec_is_one_input_error_under_node(data: dict[str, Any]) -> None:
    expression = "toyrl.simulate({variants: ['grpo'], seeds: [-1]})"
    with pytest.raises(NodeFailed) as error:
        node_evaluate(data, expression)
    assert json.loads(error.value.answer) == {
        "error": "seeds must be a count in 1..1,000,000 or a list of 1..1,000,000 integers in 0..2^53 - 1 "
        "(got [-1])",
        "input_error": True,
    }


@needs_node
def test_the_page_s_layout_picks_toyrl_layout_s_parts(data: dict[str, Any]) -> None:
    """sim.js's largest differencing method (verl's V1 layout) against toyrl.layout's on random
    lengths, many tied, equal-size and not, and the token budget's micro-batches; workloads past
    2^53 included (BigInts there). toyrl.layout itself is checked against verl's own functions in
    the conformance suite."""
    rng = np.random.default_rng(1)
    cases = []
    for trial in range(120):
        n = int(rng.integers(2, 40))
        high = 4 if trial % 3 == 0 else (300 if trial % 3 == 1 else 20_000_000)
        seq = rng.integers(1, high, size=n).tolist()
        k = int(rng.integers(1, n + 1))
        k_equal = max(d for d in range(1, min(k, 8) + 1) if n % d == 0)
        budget = max(seq) + int(rng.integers(0, sum(seq)))
        cases.append((seq, k, k_equal, budget))
    expression = (
        "JSON.stringify("
        + json.dumps([[seq, k, k_equal, budget] for seq, k, k_equal, budget in cases])
        + ".map(([seq, k, e, b]) => [toyrl.layout.balancedPartitions(seq, k, false), "
        "toyrl.layout.balancedPartitions(seq, e, true), toyrl.layout.tokenBudgetParts([seq], b)[0]]))"
    )
    page = json.loads(node_evaluate(data, expression))
    for (seq, k, k_equal, budget), (unequal, equal, budgeted) in zip(cases, page, strict=True):
        workloads = [layout.workload(s) for s in seq]
        assert unequal == layout.balanced_partitions(workloads, k, False)
        assert equal == layout.balanced_partitions(workloads, k_equal, True)
        assert budgeted == layout.token_budget_parts([seq], budget)[0]


def _outside(rule: dict[str, Any]) -> Any:
    """A value just outside a declared rule (toyrl.stages.declared)."""
    if rule["kind"] == "boolean":
        return 1
    if rule["kind"] == "choice":
        return "nope"
    if rule["kind"] == "integer":
        return rule["high"] + 1
    return rule["high"] + 0.5  # not a whole number: Python shows 3.0 where JavaScript shows 3


@needs_node
def test_the_page_refuses_what_python_refuses_in_the_same_words(data: dict[str, Any]) -> None:
    """Every declared parameter of every registered stage, one value past its range: Python and
    the page refuse it with the same line (both read the rule toyrl.stages declares once); and a
    value inside it both take."""
    kind_key = {kind: key for key, kind in KIND_KEYS.items()}
    cases = []
    for kind, stages in REGISTRY.items():
        for name, stage in stages.items():
            for key, rule in declarations(type(stage)).items():
                if key in getattr(stage, "fixed", ()):  # set by the stage's name, not by a spec
                    continue
                spec = {"advantage": "none", "aggregation": "token_mean", kind_key[kind]: name}
                cases.append((spec | {key: _outside(rule)}, spec | {key: getattr(stage, key)}))
    assert len(cases) >= 25
    for bad, _ in cases:
        with pytest.raises(InvalidInput) as error:
            from_spec("", bad)
        python = str(error.value)
        page = json.loads(
            node_evaluate(
                data,
                "JSON.stringify((() => { try { toyrl.resolve("
                + json.dumps(bad)
                + "); return ''; } catch (e) { return e.message; } })())",
            )
        )
        assert page == python, (bad, page, python)
    good = "JSON.stringify(" + json.dumps([g for _, g in cases]) + ".map((s) => toyrl.resolve(s).name))"
    assert len(json.loads(node_evaluate(data, good))) == len(cases)


def _meeting(condition: list[Any], rule: dict[str, Any] | None) -> Any:
    """A value that meets a refusal's condition (field, operator, value)."""
    _, operator, value = condition
    if operator in ("==", "<="):
        return value
    if operator == ">":
        return value + 1
    return next(choice for choice in rule["choices"] if choice != value) if rule else not value  # "!="


@needs_node
def test_the_page_refuses_the_combinations_python_refuses_in_the_same_words(data: dict[str, Any]) -> None:
    """Every combination a registered stage refuses (`toyrl.stages.refused`, declared once as
    data): Python and the page refuse it with the same line, the rule's own."""
    kind_key = {kind: key for key, kind in KIND_KEYS.items()}
    cases = []
    for kind, stages in REGISTRY.items():
        for name, stage in stages.items():
            rules = declarations(type(stage))
            for refusal in getattr(stage, "refuses", ()):
                spec = {"advantage": "none", "aggregation": "token_mean", kind_key[kind]: name}
                spec |= {c[0]: _meeting(c, rules.get(c[0])) for c in refusal["when"]}
                cases.append((spec, refusal["message"]))
    assert len(cases) >= 4
    for bad, message in cases:
        with pytest.raises(InvalidInput) as error:
            from_spec("", bad)
        python = str(error.value)
        assert python.startswith(message.split("{")[0]), (bad, python)
        page = json.loads(
            node_evaluate(
                data,
                "JSON.stringify((() => { try { toyrl.resolve("
                + json.dumps(bad)
                + "); return ''; } catch (e) { return e.message; } })())",
            )
        )
        assert page == python, (bad, page, python)


def test_one_bit_anywhere_is_a_difference() -> None:
    """The comparison the cases make is `==`: a last-bit change in any column at any step, or a NaN
    where Python has a number, is reported, with where it is first."""
    python = {name: np.linspace(1.0, 2.0, 2 * 11) for name in NUMBERS}
    runs, steps = ["(grpo, seed 0)", "(grpo, seed 1)"], 10

    def copy() -> dict[str, np.ndarray]:
        return {name: values.copy() for name, values in python.items()}

    assert first_difference(copy(), python, runs, steps) is None
    for name in NUMBERS:
        for row in (0, 13, 21):
            page = copy()
            page[name][row] = np.nextafter(page[name][row], np.inf)
            found = first_difference(page, python, runs, steps)
            assert found is not None and f"step {row % 11} of run {runs[row // 11]}: {name}" in found
    page = copy()
    page["grad_norm"][5] = np.nan
    assert first_difference(page, python, runs, steps) is not None
    python["batch_accuracy"][5] = np.nan  # NaN where NaN is the same
    assert first_difference(copy(), python, runs, steps) is None


ENGINE_MATH = {"sqrt", "floor", "ceil", "abs", "min", "max", "fround", "imul"}  # exact or correctly rounded


def test_the_simulator_calls_no_transcendental_of_the_engine() -> None:
    source = (ROOT / "toyrl" / "explorer" / "sim.js").read_text(encoding="utf-8")
    used = set(re.findall(r"\bMath\.(\w+)", source))
    assert used <= ENGINE_MATH, used - ENGINE_MATH
    assert "toyrlKernels" in source and "toyrlRandom" in source


@needs_node
def test_the_page_labels_variants_as_python_does(data: dict[str, Any]) -> None:
    """A label (`label=NAME` among a spec's pairs, NAME=SPEC or NAME=PRESET) names the variant in the
    page as in Python, and what Python refuses the page refuses in the same words: the rules are
    Python's, shipped with the page's data."""
    from toyrl.variants import parse_variant, parse_variants

    good = [
        "mine=advantage=none,aggregation=token_mean",
        "advantage=none,aggregation=token_mean,label=mine",
        "short=dr_grpo",
        "dr_grpo",
        "advantage=rloo,aggregation=seq_mean_token_sum",
    ]
    expression = f"JSON.stringify({json.dumps(good)}.map((v) => toyrl.resolve(v).name))"
    names = json.loads(node_evaluate(data, expression))
    assert names == [parse_variant(text).name for text in good]
    bad = [
        "label=1abc,advantage=none",
        "label=grpo,advantage=none",
        "label=alpha,advantage=none",
        "label=a,label=b,advantage=none",
        "label=mine",
        "a b=advantage=none,aggregation=token_mean",
    ]
    duplicated = [
        "a=advantage=none,aggregation=seq_mean_token_sum_norm",
        "a=advantage=rloo,aggregation=seq_mean_token_sum_norm",
    ]
    cases = [([text], lambda text=text: parse_variant(text)) for text in bad]
    cases.append((duplicated, lambda: parse_variants(duplicated)))
    for variants, refuse in cases:
        with pytest.raises(InvalidInput) as error:
            refuse()
        expression = (
            "JSON.stringify((() => { try { toyrl.start({variants: "
            + json.dumps(variants)
            + ", seeds: 1, steps: 1}); return ''; } catch (e) { return e.message; } })())"
        )
        assert json.loads(node_evaluate(data, expression)) == str(error.value), variants
