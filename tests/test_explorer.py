"""The page's simulator against this package, in a real headless Chromium.

The page's simulator is three scripts (toyrl/explorer/): kernels.js, toyrl.kernels' functions
operation for operation; random.js, numpy's SeedSequence and PCG64 streams bit for bit; and sim.js,
the port of toyrl.policy, toyrl.stages, toyrl.train and toyrl.expected, which draws what Python
draws from each run's streams, in the same order, and keeps Python's order of operations, numpy's
pairwise sums included. So the page computes the same bits as the package, and every check here is
equality: for each case of tests/explorer_cases.py (the article's set as `toyrl run` makes it, every
preset sampled at a small configuration and at the article's, every mean-field preset, specs over
the other stages, KL terms far from their reference, extreme logits, seeds and prompt counts beyond
the defaults), every column of every step of every run is `==` Python's (NaN where NaN), and where
the case keeps them, each step's loss gradient too.

The cases run here only, in the engine the page is for and on the page `toyrl explore` builds (its
data as embedded, its scripts as inlined), not under node too: both engines compute the same bits
by the language's definition, as tests/test_explorer_node.py says, which runs there what needs no
page (the refusals and their words, the layout, the labels). The article's set is a case: a test
that only printed its time is gone (timings are benchmarks, not tests).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.browser import Browser, find_chromium
from tests.explorer_cases import (
    CASES,
    SPECS,
    agreement_cases,
    check_case,
    page_run,
    python_side,
    result_expression,
)
from toyrl.cli import app
from toyrl.config import Config
from toyrl.expected import exact_support
from toyrl.explore import build_explorer, run_data
from toyrl.objective import KIND_KEYS
from toyrl.results import load_results
from toyrl.stages import REGISTRY, parameters
from toyrl.variants import ARTICLE, VARIANTS

CHROMIUM = find_chromium()
if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium for the page tests; .ci/run installs it")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("explorer") / "explorer.html"
    result = CliRunner().invoke(app, ["explore", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def browser(page: Path) -> Iterator[Browser]:
    assert CHROMIUM is not None
    session = Browser(CHROMIUM, timeout=300.0)
    try:
        session.open(page)
        yield session
    finally:
        session.close()


def in_page(browser: Browser, expression: str) -> Any:
    """The JSON value of a page expression (NaN arrives as None)."""
    return json.loads(browser.evaluate(f"JSON.stringify({expression})"))


# --- the page computes what toyrl computes -----------------------------------------------------------


@pytest.mark.parametrize("case", agreement_cases())
def test_the_page_computes_the_same_numbers_as_toyrl(browser: Browser, case: str) -> None:
    """Every column of every step of every run, `==` (NaN where NaN), and each step's loss gradient
    where the case keeps them; Python's side is the package itself (`tests.explorer_cases.python_side`:
    `toyrl run`'s run_experiment, or toyrl.train's loop where a case keeps gradients or sets theta0)."""
    spec = CASES[case]
    check_case(page_run(browser.evaluate(result_expression(spec)), spec), spec, python_side(spec))


# --- the registry, the specs and bad input -----------------------------------------------------------


def test_the_page_holds_every_preset_and_runs_the_ones_it_says(browser: Browser) -> None:
    presets = in_page(browser, "toyrl.presets")
    assert [p["name"] for p in presets] == list(VARIANTS)
    for preset in presets:
        variant = VARIANTS[preset["name"]]
        assert preset["spec"] == variant.spec()  # parsed by the page from Python's spec_text
        assert preset["page"] == "", preset["name"]
        assert (preset["page_mean_field"] == "") == (not exact_support(variant)), preset["name"]


def test_the_page_trains_every_registered_stage(browser: Browser) -> None:
    """Each registered stage, in a spec that takes the defaults for the rest: the page ports it."""
    for kind, stages in REGISTRY.items():
        key = next(k for k, v in KIND_KEYS.items() if v == kind)
        for name in stages:
            spec = {"advantage": "none", "aggregation": "token_mean", key: name}
            assert in_page(browser, f"toyrl.support({json.dumps(spec)}, false)") == "", (kind, name)


def test_the_page_resolves_specs_as_python_does(browser: Browser) -> None:
    for name, variant in VARIANTS.items():
        stages = in_page(browser, f"toyrl.resolve({json.dumps(variant.spec_text())}).stages")
        for kind, stage_name in variant.names().items():
            assert stages[kind]["name"] == stage_name, (name, kind)
            for key, value in parameters(variant.stage(kind)).items():
                assert stages[kind][key] == value, (name, kind, key)
        # a spec is named after the first preset that has it (dr_grpo's is trl_dr_grpo's)
        first = next(other for other, v in VARIANTS.items() if v.spec() == variant.spec())
        assert in_page(browser, f"toyrl.resolve({json.dumps(variant.spec())}).name") == first


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"variants": ["grpo"], "lr": -1}, "lr must be a finite number > 0 (got -1)"),
        ({"variants": ["grpo"], "group_size": 1}, "group_size must be an integer in 2..10,000 (got 1)"),
        ({"variants": ["grpo"], "min_length": 2000}, "cap must be at least min_length = 2000 (got 1500)"),
        (
            {"variants": ["grpo"], "seeds": [-1]},
            "seeds must be a count in 1..1,000,000 or a list of 1..1,000,000 integers in 0..2^53",
        ),
        (
            {"variants": ["grpo"], "seeds": [0.5]},
            "seeds must be a count in 1..1,000,000 or a list of 1..1,000,000 integers in 0..2^53",
        ),
        ({"variants": ["grpo"], "prompts": 100001}, "prompts must be an integer in 1..100,000 (got 100001)"),
        (
            {"variants": ["grpo"], "seeds": 2, "theta0": [[0.0] * 66]},
            "theta0 must hold one policy per seed (2)",
        ),
        (
            {"variants": ["grpo"], "theta0": [[0.0] * 65]},
            "theta0 must hold prompts + 2 = 66 finite logits per seed",
        ),
        ({"variants": ["grpo"], "noise": []}, 'unknown spec key "noise"; valid: variants'),
        (
            {"variants": ["grpo", "dr_grpo"], "seeds": 10**9},
            "seeds must be a count in 1..1,000,000 or a list of 1..1,000,000 integers in 0..2^53 - 1 "
            "(got 1000000000)",
        ),
        (
            {"variants": ["grpo", "dr_grpo"], "seeds": 1000, "steps": 1000},
            "2 variants x 1000 seeds x 1,001 steps would be 2,002,000 rows; the page holds at most 1,000,000",
        ),
        (
            {
                "variants": [
                    {
                        "advantage": "none",
                        "aggregation": "token_mean",
                        "num_iterations": 64,
                        "mini_batches": 2,
                    }
                ],
                "steps": 999_999,
            },
            "999,999 steps x num_iterations x mini_batches would be 127,999,872 updates per run; "
            "the limit is 100,000,000",
        ),
        (  # the page refuses what Python refuses (it once trained 65 and 100)
            {"variants": [{"advantage": "none", "aggregation": "token_mean", "num_iterations": 65}]},
            "num_iterations must be an integer in 1..64 (got 65)",
        ),
        (
            {"variants": ["grpo"], "seeds": 100, "batch_prompts": 64, "group_size": 200},
            "100 runs x batch_prompts x group_size would be 1,280,000 responses a step; the page holds "
            "at most 1,000,000",
        ),
        ({"variants": ["nope"]}, 'unknown variant "nope"; valid: grpo, std_only'),
        (
            {
                "variants": [{"advantage": "none", "aggregation": "seq_mean_token_sum_norm", "beta": 0.04}],
                "mean_field": True,
            },
            "no exact expected update: the KL term makes the update depend on more than the policy",
        ),
        (
            {"variants": ["gspo"], "mean_field": True},
            "variant gspo: no exact expected update: later mini-batches",
        ),
        ({"variants": ["trl_default"], "mean_field": True}, "variant trl_default: no exact expected update"),
        ({"variants": [{"advantage": "none", "aggregation": "mean"}]}, "aggregation must be one of"),
        (
            {"variants": [{"advantage": "custom:mine", "aggregation": "token_mean"}]},
            "advantage must be one of",
        ),
        (
            {"variants": [{"advantage": "none", "aggregation": "length_power", "alpha": 2}]},
            "alpha must be a number in [0, 1] (got 2)",
        ),
        ({"variants": ["grpo"], "temperature": 1}, 'unknown spec key "temperature"; valid: variants'),
    ],
)
def test_bad_specs_get_one_line_errors(browser: Browser, spec: dict[str, Any], message: str) -> None:
    answer = in_page(
        browser,
        f"(() => {{ try {{ toyrl.simulate({json.dumps(spec)}); return null; }}"
        " catch (e) { return [e instanceof toyrl.InputError, e.message]; } })()",
    )
    assert answer is not None, spec
    is_input_error, text = answer
    assert is_input_error and message in text and "\n" not in text, text


NUMBER_WORDS = (
    "no one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four twenty-five"
).split()


def test_docs_explorer_says_what_the_page_runs(browser: Browser) -> None:
    text = " ".join((Path(__file__).parents[1] / "docs" / "explorer.md").read_text().split())
    presets = in_page(browser, "toyrl.presets")
    assert all(p["page"] == "" for p in presets)
    mean_field = sum(p["page_mean_field"] == "" for p in presets)
    assert f"all {len(presets)} presets sampled" in text
    assert f"mean-field the {mean_field} presets that have an exact expected update" in text
    assert f"{NUMBER_WORDS[len(SPECS)]} specs over the other stages" in text


def test_the_committed_page_is_the_one_reproduce_writes() -> None:
    """figures/explorer.html is `toyrl reproduce`'s page of the committed results (compared by digest)."""
    root = Path(__file__).parents[1]
    frame, _ = load_results(root / "results" / "article.csv")
    description = f"the article's toy run, {len(ARTICLE)} variants x {frame['seed'].nunique()} seeds"
    page = build_explorer(run_data(frame, Config().cap, description), root / "figures" / "explorer.html")
    committed = (root / "figures" / "explorer.html").read_bytes()
    assert hashlib.sha256(committed).hexdigest() == hashlib.sha256(page.encode()).hexdigest(), (
        "figures/explorer.html is stale: run toyrl reproduce"
    )


def test_the_page_leaves_out_comment_lines_and_indentation_and_refuses_a_string_over_lines() -> None:
    """The inlined scripts drop their `//` lines and each line's leading spaces only (a line of code
    with a trailing comment, a URL in a string, spaces inside a line, stay); a template literal or a
    string continued by a backslash over lines, inside which either would be text, is refused
    rather than cut."""
    from toyrl.explore import _compacted

    script = "const a = 1; // kept: code first\n  // dropped\n    const url = 'https://x';  /* kept */\n"
    kept = "const a = 1; // kept: code first\nconst url = 'https://x';  /* kept */\n"
    assert _compacted(script, "x.js") == kept
    with pytest.raises(ValueError, match="line 1: a template literal must not span lines"):
        _compacted("const t = `first\n// text, not a comment\n`;", "x.js")
    with pytest.raises(ValueError, match="line 1: a string must not continue on the next line"):
        _compacted("const t = 'first \\\n   text';", "x.js")
