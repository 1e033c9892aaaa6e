"""The explorer's simulator under node: what the page refuses and how it says it, its layout, labels.

tests/sim_node.js runs the page's three simulator scripts (toyrl/explorer/kernels.js, random.js,
sim.js) in the order the page runs them, on the data `toyrl.explore.page_data` embeds. Here: the
page refuses what Python refuses in Python's words, from the rules and messages Python ships
(`toyrl.refusals`, the stages' declared ranges and refused combinations, the labels' rules),
sim.js holds no copy of those words, and its layout picks toyrl.layout's parts.

Which engine runs what: the agreement cases (tests/explorer_cases.py: every column of every step
`==` Python's) run once, in headless Chromium on the page `toyrl explore` builds
(tests/test_explorer.py), not here too. Node (V8 11 here) and Chromium (156 here, its own V8) compute the same
bits by the language's definition: a Number is an IEEE double, + - * / and Math.sqrt are correctly
rounded, and no engine may fuse a multiply-add; sim.js calls none of the engine's transcendental
functions (Math.exp, Math.log, Math.pow, ...), whose last bits are each engine's own, and draws
nothing from Math.random (the scan below, which needs no engine). Running the cases under node as
well would test V8 twice and toyrl once; Chromium also runs the built page (its data as embedded,
its scripts without comment lines), which node does not.
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
from typer.testing import CliRunner

from tests.explorer_cases import NUMBERS, first_difference
from tests.output import error_line
from toyrl import layout
from toyrl.cli import app
from toyrl.config import CONFIG_REFUSALS, Config, InvalidInput
from toyrl.expected import exact_support
from toyrl.experiment import RUN_REFUSALS, check_runs
from toyrl.explore import page_data
from toyrl.objective import KIND_KEYS, SPEC_MESSAGES, from_spec, parse_spec
from toyrl.refusals import Refusal, parts
from toyrl.stages import REGISTRY, declarations
from toyrl.stages.schedule import CUTS
from toyrl.train import VARIANT_REFUSALS

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


def refused_by_the_page(data: dict[str, Any], function: str, arguments: list[Any]) -> list[str]:
    """What `toyrl.<function>(argument)` throws in the page for each argument ('' where nothing),
    in one run of node."""
    return json.loads(
        node_evaluate(
            data,
            f"JSON.stringify({json.dumps(arguments)}.map((argument) => {{ try {{ toyrl.{function}(argument);"
            " return ''; } catch (e) { return e.message; } }))",
        )
    )


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
    page = refused_by_the_page(data, "resolve", [bad for bad, _ in cases])
    for (bad, _), said in zip(cases, page, strict=True):
        with pytest.raises(InvalidInput) as error:
            from_spec("", bad)
        assert said == str(error.value), (bad, said)
    good = "JSON.stringify(" + json.dumps([g for _, g in cases]) + ".map((s) => toyrl.resolve(s).name))"
    assert len(json.loads(node_evaluate(data, good))) == len(cases)


def _comparisons(tree: list[Any]) -> list[tuple[str, str, Any]]:
    """The (field, operator, value) comparisons a refusal's condition (`toyrl.refusals`) joins with
    `and`: what a stage's refused combination is made of."""
    if tree[0] == "and":
        return [c for operand in tree[1:] for c in _comparisons(operand)]
    operator, (name_head, field), (value_head, value) = tree
    assert (name_head, value_head) == ("name", "value"), tree
    return [(field, operator, value)]


def _meeting(condition: tuple[str, str, Any], rule: dict[str, Any] | None) -> Any:
    """A value that meets a refusal's condition (field, operator, value)."""
    _, operator, value = condition
    if operator in ("==", "<="):
        return value
    if operator == ">":
        return value + 1
    return next(choice for choice in rule["choices"] if choice != value) if rule else not value  # "!="


@needs_node
def test_the_page_refuses_the_combinations_python_refuses_in_the_same_words(data: dict[str, Any]) -> None:
    """Every combination a registered stage refuses (its `refuses`, `toyrl.refusals`, declared once as
    data): Python and the page refuse it with the same line, the rule's own."""
    kind_key = {kind: key for key, kind in KIND_KEYS.items()}
    cases = []
    for kind, stages in REGISTRY.items():
        for name, stage in stages.items():
            rules = declarations(type(stage))
            for refusal in getattr(stage, "refuses", ()):
                spec = {"advantage": "none", "aggregation": "token_mean", kind_key[kind]: name}
                spec |= {c[0]: _meeting(c, rules.get(c[0])) for c in _comparisons(refusal.tree)}
                cases.append((spec, refusal.message))
    assert len(cases) >= 4
    page = refused_by_the_page(data, "resolve", [bad for bad, _ in cases])
    for (bad, message), said in zip(cases, page, strict=True):
        with pytest.raises(InvalidInput) as error:
            from_spec("", bad)
        python = str(error.value)
        assert python.startswith(message.split("{")[0]), (bad, python)
        assert said == python, (bad, said)


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
    runs = [{"variants": variants, "seeds": 1, "steps": 1} for variants, _ in cases]
    for (variants, refuse), said in zip(cases, refused_by_the_page(data, "start", runs), strict=True):
        with pytest.raises(InvalidInput) as error:
            refuse()
        assert said == str(error.value), variants


@needs_node
def test_the_page_refuses_a_spec_s_keys_in_python_s_words(data: dict[str, Any]) -> None:
    """Each message toyrl.objective refuses a spec's keys with (`SPEC_MESSAGES`): the page says it
    from the data, word for word, as `from_spec` does; and every one of them is met here."""
    plain = {"advantage": "none", "aggregation": "token_mean"}
    specs = [
        {"mask_truncated": True, "selector": "all"},
        {"mask_truncated": "yes"},
        {"advantage": "custom:mine"},  # with the plugin hint
        {"aggregation": "mean"},
        plain | {"foo": 1},
        plain | {"alpha": 0.5},  # a parameter of another stage (not a parameter of ...)
        "advantage=none,aggregation",  # a text, as typed
    ]
    python = []
    for spec in specs:
        with pytest.raises(InvalidInput) as error:
            parse_spec(spec) if isinstance(spec, str) else from_spec("", spec)
        python.append(str(error.value))
    fixed = [text for template in SPEC_MESSAGES.values() for text, *_ in parts(template) if text.strip()]
    assert all(any(text in said for said in python) for text in fixed)
    assert refused_by_the_page(data, "resolve", specs) == python


def _refusal_cases() -> list[tuple[Refusal, dict[str, Any], dict[str, Any]]]:
    """(refusal, Config fields, spec): a variant in a configuration that each refusal toyrl ships
    the page (`toyrl.refusals`) refuses, the first to hold there."""
    plain = {"advantage": "none", "aggregation": "token_mean"}
    cuts = {refusal.message.split(" =")[0]: refusal for refusal in CUTS}
    gfpo = REGISTRY["sampler"]["gfpo"].checks
    per_micro, merges, sequence = VARIANT_REFUSALS
    big = {"prompts": 100_000, "batch_prompts": 100_000}
    # shares of 50,000 responses cut by a budget of 12 tokens (at least 2 each): about 2e9 merges,
    # in a step the page takes (about 1 s by its estimate)
    laid_out = {"prompts": 5000, "batch_prompts": 5000, "group_size": 10, "cap": 10, "min_length": 1}
    return [
        (CONFIG_REFUSALS[0], {"batch_prompts": 65}, plain),
        (CONFIG_REFUSALS[1], {"prompts": 100_000, "batch_prompts": 1000, "group_size": 10_000}, plain),
        (CONFIG_REFUSALS[2], {"cap": 50}, plain),
        (cuts["mini_batches x micro_batches"], {}, plain | {"mini_batches": 3}),
        (cuts["mini_batches x micro_batches x ranks"], {}, plain | {"mini_batches": 2, "ranks": 3}),
        (CUTS[2], {}, plain | {"token_budget": 100}),
        (gfpo[0], {}, plain | {"sampler": "gfpo", "draws": 8}),
        (gfpo[1], big, plain | {"sampler": "gfpo", "draws": 16}),
        (per_micro, {}, plain | {"ranks": 2, "per_micro_batch": True}),
        (
            merges,
            laid_out,
            plain
            | {"aggregation": "seq_mean_token_sum_longest", "token_budget": 12, "per_micro_batch": True},
        ),
        (sequence, {}, plain | {"objective": "gspo", "kl": "k1_reward", "beta": 0.1}),
        # 128 updates a step for a million rows (the page's most), in a step the page takes
        (
            RUN_REFUSALS[0],
            {"steps": 999_999, "batch_prompts": 1, "group_size": 2},
            plain | {"num_iterations": 64, "mini_batches": 2},
        ),
    ]


def _shipped(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every refusal in the page's data: the configuration's, the variant's, each stage's checks
    and its reasons to have no exact expected update."""
    stages = [entry for kind in data["registry"].values() for entry in kind.values()]
    return [
        *data["refusals"]["config"],
        *data["refusals"]["variant"],
        *data["refusals"]["runs"],
        *(refusal for entry in stages for refusal in entry["checks"] + entry["simulated_when"]),
    ]


@needs_node
def test_the_page_refuses_across_settings_in_python_s_words(data: dict[str, Any], tmp_path: Path) -> None:
    """Each refusal Python ships the page (`toyrl.refusals`: a Config's, a stage's `check`,
    `check_variant`'s, `check_runs`'), met by a variant in a configuration: `toyrl run` refuses it
    with the line Python raises (a Config field named as its option), writing nothing, and the page
    with the same line. Every refusal in the data has such a case (a new one fails here until it
    has one)."""
    cases = _refusal_cases()
    assert {json.dumps(r.data()) for r, _, _ in cases} == {
        json.dumps(r) for r in _shipped(data) if r not in [s.data() for s in SIMULATED_WHEN]
    }
    python = []
    for refusal, fields, spec in cases:
        text = ",".join(f"{key}={value}" for key, value in spec.items())
        given = {"seeds": 1, "steps": 1} | fields
        options = [x for key, value in given.items() for x in (f"--{key.replace('_', '-')}", str(value))]
        out = tmp_path / "run.csv"
        result = CliRunner().invoke(app, ["run", "--variant", text, *options, "--out", str(out)])
        try:
            check_runs(Config(**{"steps": 1} | fields), [from_spec("", spec)])
        except InvalidInput as error:
            said = str(error)
        else:
            raise AssertionError(f"{spec} in {fields} is not refused")
        assert next(text for text, *_ in parts(refusal.message) if text.strip()) in said, (said, refusal)
        option = f"--{refusal.field.replace('_', '-')}" if refusal.field else ""
        assert result.exit_code == 2 and error_line(result.stderr) == (
            f"toyrl: error: {option}{said[len(refusal.field) :]}"
        ), result.stderr
        assert not out.exists()
        python.append(said)
    runs = [{"variants": [spec], "seeds": 1, "steps": 1} | fields for _, fields, spec in cases]
    assert refused_by_the_page(data, "start", runs) == python


SIMULATED_WHEN = [
    refusal
    for kind in REGISTRY.values()
    for stage in kind.values()
    for refusal in getattr(stage, "simulated_when", ())
]


@needs_node
def test_the_page_says_why_a_variant_has_no_exact_update_in_python_s_words(data: dict[str, Any]) -> None:
    """Each reason a stage gives by its parameters (`simulated_when`), met by a spec: the page's
    reason is toyrl.expected.exact_support's, and each such reason Python ships has a spec."""
    plain = {"advantage": "none", "aggregation": "seq_mean_token_sum_norm"}
    specs = [
        plain | {"num_iterations": 2},
        plain | {"mini_batches": 2},
        plain | {"ranks": 2},
        plain | {"micro_batches": 2},
        plain | {"token_budget": 2000},
        plain | {"beta": 0.1},
        plain | {"kl": "k1_reward", "beta": 0.1},
        plain | {"aggregation": "token_mean", "mini_batches": 2},  # the first stage's reason, in step order
        plain,
    ]
    python = [exact_support(from_spec("", spec)) for spec in specs]
    assert {reason for reason in python if reason} >= {refusal.message for refusal in SIMULATED_WHEN}
    page = json.loads(
        node_evaluate(data, f"JSON.stringify({json.dumps(specs)}.map((spec) => toyrl.support(spec, true)))")
    )
    assert page == [f"no exact expected update: {reason}" if reason else "" for reason in python]


def test_the_page_s_scripts_hold_no_python_message() -> None:
    """No words of a message Python ships the page (a refusal's, a stage's refused combination's,
    a stage's reason to have no exact update, a normaliser's words for what it divides by, a
    label's, a spec key's) are written in sim.js or ui.js: the page formats them from the data."""
    data = page_data()
    stages = [entry for kind in data["registry"].values() for entry in kind.values()]
    texts = [text for refusal in _shipped(data) for text, *_ in refusal["message"]]
    texts += [text for entry in stages for rule in entry["refuses"] for text, *_ in rule["message"]]
    texts += [entry["simulated_only"] for entry in stages]
    texts += [entry["divides"] for entry in data["registry"]["normaliser"].values() if entry["divides"]]
    texts += [text for message in data["labels"]["messages"].values() for text, *_ in message]
    texts += [text for message in data["spec_messages"].values() for text, *_ in message]
    pieces = {text.strip() for text in texts if len(text.strip()) >= 16}
    assert len(pieces) >= 30
    for script in ("sim.js", "ui.js"):
        source = (ROOT / "toyrl" / "explorer" / script).read_text(encoding="utf-8")
        # a JavaScript string's \uXXXX as the character it stands for
        source = re.sub(r"\\u([0-9a-fA-F]{4})", lambda escape: chr(int(escape.group(1), 16)), source)
        assert not [piece for piece in pieces if piece in source], script
