"""`toyrl explore`: the page's interface in a real headless Chromium.

Panels 1 and 2 are held to toyrl.objective.advantages and toyrl.examples.group_mass; the charts'
readouts to the means of Python's own mean-field runs; and the page to what a lecture needs: it
trains live without blocking, a link reproduces the view, every control works from the keyboard,
nothing scrolls sideways from 360 to 1920 px, every text has a contrast of at least 4.5:1, each chart
exports as SVG and PNG, and the one file (at most 300 KB) requests nothing but itself.
(tests/test_explorer.py checks the simulator itself against Python.)
"""

import base64
import io
import json
import math
import os
import re
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.browser import Browser, find_chromium
from toyrl import looks
from toyrl.cli import app
from toyrl.config import Config
from toyrl.examples import group_mass, length_example
from toyrl.experiment import run_experiment
from toyrl.explore import MAX_PAGE_BYTES, PLACEHOLDERS, RECORDED_UNITS, build_explorer, run_data
from toyrl.objective import advantages
from toyrl.plots import variant_looks
from toyrl.results import load_results
from toyrl.variants import VARIANTS, display_name

CHROMIUM = find_chromium()
if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium for the page tests; .ci/run installs it")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)

TEMPLATE = Path(__file__).parents[1] / "toyrl" / "explorer" / "page.html"
SVG = "{http://www.w3.org/2000/svg}"
SHIFT = 8  # CDP's modifier bit for Shift


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    """A page built with a results CSV (its curves are the optional overlay)."""
    folder = tmp_path_factory.mktemp("explorer")
    csv = folder / "run.csv"
    runner = CliRunner()
    assert runner.invoke(app, ["run", "--seeds", "2", "--steps", "150", "--out", str(csv)]).exit_code == 0
    page = folder / "explorer.html"
    result = runner.invoke(app, ["explore", "--out", str(page), "--results", str(csv)])
    assert result.exit_code == 0, result.output
    return page, pd.read_csv(csv)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A page without recorded curves, as `toyrl explore` writes it by default."""
    page = tmp_path_factory.mktemp("plain") / "explorer.html"
    page.write_text(build_explorer(), encoding="utf-8")
    return page


@pytest.fixture(scope="module")
def browser(built: tuple[Path, pd.DataFrame]) -> Iterator[Browser]:
    assert CHROMIUM is not None
    session = Browser(CHROMIUM)
    try:
        session.open(built[0])
        yield session
    finally:
        session.close()


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[Browser]:
    """A second browser, for pages built by a test itself: the first one's requests stay its two pages'."""
    assert CHROMIUM is not None
    session = Browser(CHROMIUM)
    try:
        yield session
    finally:
        session.close()


@pytest.fixture
def page(browser: Browser, built: tuple[Path, pd.DataFrame]) -> Path:
    """The built page, loaded afresh at its first view (no hash) for the test."""
    browser.open(built[0])
    return built[0]


# --- helpers -----------------------------------------------------------------------------------------


def set_sliders(browser: Browser, **values: float) -> None:
    for element, value in values.items():
        slider = f"document.getElementById('{element.replace('_', '-')}')"
        browser.evaluate(
            f"(() => {{ const s = {slider}; s.value = '{value}';"
            " s.dispatchEvent(new Event('input', {bubbles: true})); })()"
        )


def set_setting(browser: Browser, key: str, value: object) -> None:
    """Type a value into a training setting and commit it, as a change event does."""
    browser.evaluate(
        f"(() => {{ const s = document.getElementById('set-{key}'); s.value = {json.dumps(str(value))};"
        " s.dispatchEvent(new Event('change', {bubbles: true})); })()"
    )


def text(browser: Browser, element: str) -> str:
    return str(browser.evaluate(f"document.getElementById({json.dumps(element)}).textContent"))


def focus(browser: Browser, selector: str) -> None:
    browser.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")


def shown(browser: Browser, element: str) -> tuple[float, float]:
    """(full-precision value, displayed value) of an output element."""
    value, shown_text = browser.evaluate(
        f"(() => {{ const e = document.getElementById('{element}');"
        " return [e.dataset.value, e.textContent]; })()"
    )
    return float(value), float(shown_text)


def assert_shows(browser: Browser, element: str, expected: float) -> None:
    value, shown_text = shown(browser, element)
    assert value == pytest.approx(expected, rel=1e-12, abs=1e-15), element
    assert shown_text == pytest.approx(expected, rel=6e-4, abs=1e-12), element  # 4 significant digits


def readouts(browser: Browser) -> dict[str, float]:
    """Every value under the charts, by cell id (full precision)."""
    cells = browser.evaluate(
        "Object.fromEntries([...document.querySelectorAll('table.readout td[id]')]"
        ".map((c) => [c.id, c.dataset.value]))"
    )
    return {key: float(value) for key, value in cells.items()}


def page_columns(browser: Browser, column: str) -> np.ndarray:
    """The page's run: one column, [runs, steps + 1] (NaN beyond the trained step)."""
    values = browser.evaluate(
        f"toyrl.ui.run.column('{column}').map((v) => Array.from(v, (x) => isNaN(x) ? null : x))"
    )
    return np.array(values, dtype=float)


def tokens(value: float) -> str:
    """A length as the page writes it: rounded half up (JavaScript's Math.round), thousands separated."""
    return f"{math.floor(value + 0.5):,}"


def chart_svg(browser: Browser, chart: str) -> ET.Element:
    return ET.fromstring(browser.evaluate(f"toyrl.exportChart('{chart}', 'svg')"))


# --- panel 1: token weights -------------------------------------------------------------------------


def expected_weights(
    len_correct: int, len_wrong: int, len_short: int, group: int, correct: int, lnorm: int
) -> dict[str, float]:
    """The Python side: toyrl.objective's advantages, at std_eps = 0 as on the page."""
    rewards = (np.arange(group) < correct).astype(float)
    scaled, centred = advantages(rewards, "group_std", std_eps=0.0), advantages(rewards, "none", std_eps=0.0)
    return {
        "group-mean": rewards.mean(),
        "group-std": rewards.std(),
        "grpo-adv-correct": scaled[0],
        "grpo-adv-wrong": scaled[-1],
        "grpo-adv-short": scaled[-1],
        "grpo-w-correct": scaled[0] / len_correct,
        "grpo-w-wrong": scaled[-1] / len_wrong,
        "grpo-w-short": scaled[-1] / len_short,
        "grpo-total-correct": scaled[0],
        "grpo-total-wrong": scaled[-1],
        "grpo-total-short": scaled[-1],
        "dr-adv-correct": centred[0],
        "dr-w-correct": centred[0] / lnorm,
        "dr-w-wrong": centred[-1] / lnorm,
        "dr-total-correct": centred[0] / lnorm * len_correct,
        "dr-total-wrong": centred[-1] / lnorm * len_wrong,
        "dr-total-short": centred[-1] / lnorm * len_short,
        "grpo-ratio": (scaled[0] / len_correct) / (-scaled[-1] / len_wrong),
        "dr-ratio": centred[0] / -centred[-1],
        "grpo-push-ratio": 1.0,  # GRPO: a wrong answer's total push-down is its advantage, at any length
        "dr-push-ratio": len_wrong / len_short,
    }


@pytest.mark.parametrize(
    "setting",
    [
        (200, 800, 200, 8, 2, 2000),
        (37, 2900, 5, 64, 1, 1500),
        (1, 1, 1, 2, 1, 100),
        (500, 100, 3000, 16, 15, 4000),
    ],
)
def test_token_weights_match_python(browser: Browser, setting: tuple[int, int, int, int, int, int]) -> None:
    len_correct, len_wrong, len_short, group, correct, lnorm = setting
    set_sliders(browser, group=group)  # first, so that the k slider's range allows `correct`
    set_sliders(
        browser,
        len_correct=len_correct,
        len_wrong=len_wrong,
        len_short=len_short,
        correct=correct,
        lnorm=lnorm,
    )
    for element, expected in expected_weights(*setting).items():
        assert_shows(browser, element, expected)


def test_article_worked_example_on_the_page(browser: Browser) -> None:
    set_sliders(browser, group=8)
    set_sliders(browser, len_correct=200, len_wrong=800, len_short=200, correct=2, lnorm=2000)
    assert text(browser, "grpo-w-correct") == "0.00866"
    assert text(browser, "dr-w-wrong") == "-0.000125"
    assert shown(browser, "grpo-ratio")[1] == 12
    # the lesson: the short wrong answer of `toyrl examples length`, and both methods on one scale
    numbers = length_example().numbers
    assert_shows(browser, "grpo-push-ratio", numbers["grpo_push_down_800_vs_200"])
    assert_shows(browser, "dr-push-ratio", numbers["dr_push_down_800_vs_200"])
    lesson = text(browser, "push-lesson")
    assert "800-token wrong answer gets 1 times the total push-down of the 200-token one" in lesson
    assert "Under Dr. GRPO it gets 4 times as much" in lesson
    bars = browser.evaluate(
        "['grpo-short', 'grpo-long', 'dr-short', 'dr-long']"
        ".map((k) => document.getElementById('bar-' + k).getBoundingClientRect().width)"
    )
    assert bars[0] == pytest.approx(bars[1]) == pytest.approx(bars[2])  # one scale: 1 = the short answer
    assert bars[3] == pytest.approx(4 * bars[2])


def test_a_real_key_press_moves_a_slider(browser: Browser) -> None:
    set_sliders(browser, group=8)
    set_sliders(browser, len_correct=200, len_wrong=800, len_short=200, correct=2, lnorm=2000)
    focus(browser, "#correct")
    browser.press("ArrowRight", 39)
    assert text(browser, "correct-out") == "3"
    for element, expected in expected_weights(200, 800, 200, 8, 3, 2000).items():
        assert_shows(browser, element, expected)


def test_shrinking_the_group_keeps_k_in_range_and_says_so(browser: Browser) -> None:
    set_sliders(browser, group=16)
    set_sliders(browser, correct=12)
    assert text(browser, "weights-messages") == ""
    set_sliders(browser, group=4)
    assert text(browser, "correct-out") == "3"
    assert "k = 12 does not fit a group of 4" in text(browser, "weights-messages")
    assert_shows(browser, "grpo-adv-correct", expected_weights(1, 1, 1, 4, 3, 100)["grpo-adv-correct"])
    set_sliders(browser, group=16)  # the asked k comes back when it fits again
    assert text(browser, "correct-out") == "12"
    assert text(browser, "weights-messages") == ""


def test_an_l_norm_below_the_lengths_is_said_in_words(browser: Browser) -> None:
    set_sliders(browser, group=8)
    set_sliders(browser, len_correct=200, len_wrong=3000, len_short=200, correct=2, lnorm=100)
    assert "L_norm = 100 is below the lengths it divides (up to 3000 tokens)" in text(
        browser, "weights-messages"
    )
    set_sliders(browser, lnorm=4000)
    assert text(browser, "weights-messages") == ""


# --- panel 2: difficulty ----------------------------------------------------------------------------


@pytest.mark.parametrize("group", [3, 8, 16, 64])
def test_difficulty_panel_matches_python(browser: Browser, group: int) -> None:
    set_sliders(browser, d_group=group)
    for k in sorted({0, 1, group // 2, group - 1, group}):
        set_sliders(browser, d_correct=k)
        p = k / group
        rewards = (np.arange(group) < k).astype(float)
        scaled, centred = (
            advantages(rewards, "group_std", std_eps=0.0),
            advantages(rewards, "none", std_eps=0.0),
        )
        grpo, dr = float(group_mass(k, group, True)), float(group_mass(k, group, False))
        assert_shows(browser, "d-fraction-out", p)
        assert_shows(browser, "d-grpo-mass", grpo)
        assert_shows(browser, "d-dr-mass", dr)
        assert_shows(browser, "d-grpo-rel", grpo / group)  # a 50/50 group's mass: G, and G/2
        assert_shows(browser, "d-dr-rel", dr / (group / 2))
        assert_shows(browser, "d-gradient-rel", p * (1 - p) / 0.25)
        if 0 < k < group:
            assert_shows(browser, "d-grpo-adv-correct", scaled[0])
            assert_shows(browser, "d-dr-adv-wrong", centred[-1])
    assert_shows(browser, "d-rare-grpo", 100 * float(group_mass(1, group, True)) / group)
    assert_shows(browser, "d-rare-dr", 100 * float(group_mass(1, group, False)) / (group / 2))


@pytest.mark.parametrize("group", [4, 16, 64])
def test_the_difficulty_profile_follows_g(browser: Browser, group: int) -> None:
    set_sliders(browser, d_group=group, d_correct=1)
    points = browser.evaluate(
        "[...document.querySelectorAll('#difficulty-plot .mass-point')]"
        ".map((c) => [c.dataset.method, +c.dataset.k, +c.dataset.value, +c.getAttribute('cx')])"
    )
    for method, std_scaled, half in (("grpo", True, group), ("dr", False, group / 2)):
        mine = [point for point in points if point[0] == method]
        assert [point[1] for point in mine] == list(range(group + 1))  # one point per possible k
        expected = group_mass(np.arange(group + 1), group, std_scaled) / half
        np.testing.assert_allclose([point[2] for point in mine], expected, rtol=1e-12, atol=1e-15)
        assert np.all(np.diff([point[3] for point in mine]) > 0)  # placed at k/G, in order
    assert text(browser, "d-chart-g") == str(group)


# --- panel 3: controls, training and charts ---------------------------------------------------------


def test_the_first_view_is_the_article_run_at_step_zero(browser: Browser, page: Path) -> None:
    pressed = browser.evaluate(
        "Object.fromEntries([...document.querySelectorAll('.switch')]"
        ".map((b) => [b.dataset.variant, b.getAttribute('aria-pressed')]))"
    )
    assert pressed == {"grpo": "true", "std_only": "true", "length_only": "true", "dr_grpo": "true"}
    grid = browser.evaluate(
        "[...document.querySelectorAll('.switches > *')].map((e) => e.dataset.variant || '')"
    )
    assert [name for name in grid if name] == [
        "grpo",
        "std_only",
        "length_only",
        "dr_grpo",
    ]  # rows: std on, off
    runs = browser.evaluate("toyrl.ui.run.runs")
    assert [r["variant"] for r in runs] == [
        v for v in ["grpo", "std_only", "length_only", "dr_grpo"] for _ in range(6)
    ]
    assert text(browser, "step-counter") == "step 0 / 400"
    lesson = text(browser, "lesson")  # predict first: no answer before the run
    assert lesson.startswith("Predict, then press play: over 400 steps, what happens to wrong answers")
    assert lesson.endswith("under GRPO and under Dr. GRPO?")
    notes = browser.evaluate("[...document.querySelectorAll('.band-note')].map((n) => n.textContent)")
    assert notes == ["lines: mean over 6 seeds; bands: mean \u00b1 1 sd over 6 seeds (sample sd)"] * 3
    # the switches show the names to read, with the names to type under them
    switches = browser.evaluate("[...document.querySelectorAll('.switch')].map((b) => b.innerText)")
    assert switches == [f"{display_name(n)}\n{n}" for n in ["grpo", "std_only", "length_only", "dr_grpo"]]
    chain = browser.evaluate(
        "[...document.querySelectorAll('#causal-chain > li')].map((li) => li.textContent)"
    )
    for link, words in zip(
        chain,
        [
            "Per-token weight",
            "stop-token score",
            "drifts",
            "Wrong answers grow",
            "truncated",
            "Accuracy stalls",
        ],
        strict=True,
    ):
        assert words in link
    assert browser.evaluate(
        "document.getElementById('causal-chain').closest('.chart-wide').contains("
        "document.getElementById('chart-length'))"
    )  # beside the length chart


def test_mean_field_readouts_and_answers_equal_pythons_run(
    browser: Browser, built: tuple[Path, pd.DataFrame]
) -> None:
    config = Config(steps=30, cap=300, min_length=30)
    frame = run_experiment(config, ["grpo", "dr_grpo"], [0, 1], mean_field=True)
    fragment = "variants=grpo,dr_grpo&cap=300&min_length=30&steps=30&seeds=2&mode=mean_field&t=30&cursor=17"
    browser.open(built[0], fragment)
    assert browser.evaluate("document.getElementById('mode-mean-field').checked")
    means = frame.groupby(["variant", "step"]).mean(numeric_only=True)
    values = readouts(browser)
    for index, variant in enumerate(["grpo", "dr_grpo"]):
        for chart, column in [
            ("length", "length_correct"),
            ("length", "length_incorrect"),
            ("accuracy", "accuracy"),
            ("stop", "stop_prob_right"),
            ("stop", "stop_prob_wrong"),
        ]:
            expected = means.loc[(variant, 17), column]
            assert values[f"readout-{chart}-{index}-{column}"] == pytest.approx(expected, rel=1e-9), (
                variant,
                column,
            )
    lesson = text(browser, "lesson")  # at the cursor's step, of the exact expected update
    assert lesson.startswith("After 17 steps of the exact expected update, wrong answers under GRPO")
    for variant in ["grpo", "dr_grpo"]:
        assert f" {tokens(means.loc[(variant, 17), 'length_incorrect'])} " in lesson


ARTICLE_ORDER = ["grpo", "std_only", "length_only", "dr_grpo"]


def test_play_trains_live_without_blocking_and_answers_from_the_run(browser: Browser, page: Path) -> None:
    browser.evaluate("document.getElementById('play').click()")
    assert text(browser, "play") == "pause"
    seen = set()
    while not browser.evaluate("toyrl.ui.run.done"):
        seen.add(browser.evaluate("toyrl.ui.run.t"))
        time.sleep(0.02)
    # The page answered between its frames at several steps of the run: it trains a few steps a frame
    # instead of blocking until the end (how long a frame takes depends on the machine, so is not tested).
    assert len([t for t in seen if 0 < t < 400]) >= 3  # and the charts followed the training
    assert text(browser, "step-counter") == "step 400 / 400"
    assert text(browser, "play") == "play"
    assert browser.evaluate("document.getElementById('play').disabled")
    incorrect = page_columns(browser, "length_incorrect").reshape(4, 6, 401).mean(axis=1)
    correct = page_columns(browser, "length_correct").reshape(4, 6, 401).mean(axis=1)
    longest, shortest = np.argmax(incorrect[:, 400]), np.argmin(incorrect[:, 400])
    assert (longest, shortest) == (0, 3)  # the length bias itself, in this sampled run: grpo, dr_grpo
    wrong, right = [tokens(v) for v in incorrect[:, 400]], [tokens(v) for v in correct[:, 400]]
    assert text(browser, "lesson") == (
        f"After 400 steps, wrong answers under GRPO have grown to {wrong[0]} tokens against {right[0]} for "
        f"right ones; under Dr. GRPO they have shrunk to {wrong[3]} against {right[3]} (all from "
        f"{tokens(incorrect[0, 0])} and {tokens(correct[0, 0])} at step 0; the other two end between them)."
    )
    difficulty = text(browser, "answer-difficulty")
    rare = 100 * float(group_mass(1, 8, True)) / 8, 100 * float(group_mass(1, 8, False)) / 4
    assert (
        f"gets {rare[0]:.0f}% of a half-right group's update mass under GRPO and {rare[1]:.0f}%" in difficulty
    )
    # the pair that differs by the std term, by the names a person reads
    accuracy = page_columns(browser, "accuracy").reshape(4, 6, 401).mean(axis=1)[:, 400]
    for a, b in [(0, 2), (1, 3)]:  # grpo against length_only, std_only against dr_grpo
        pair = (
            f"{display_name(ARTICLE_ORDER[a])} {100 * accuracy[a]:.1f}% vs {display_name(ARTICLE_ORDER[b])}"
        )
        assert f"{pair} {100 * accuracy[b]:.1f}% accuracy" in difficulty, difficulty
    assert "length_only" not in difficulty and "std_only" not in difficulty


def test_step_reset_and_a_control_change_restart_the_run(browser: Browser, page: Path) -> None:
    for _ in range(3):
        browser.evaluate("document.getElementById('step-once').click()")
    assert text(browser, "step-counter") == "step 3 / 400"
    browser.evaluate("document.getElementById('reset').click()")
    assert text(browser, "step-counter") == "step 0 / 400"
    browser.evaluate("document.getElementById('step-once').click()")
    set_setting(browser, "steps", 50)
    assert text(browser, "step-counter") == "step 0 / 50"
    assert browser.evaluate("toyrl.ui.run.steps") == 50


def test_a_bad_value_is_refused_in_words_and_never_clamped(browser: Browser, page: Path) -> None:
    set_setting(browser, "group_size", 1)
    assert browser.evaluate("document.getElementById('set-group_size').value") == "1"
    assert "Not started: group_size must be an integer in 2..10,000 (got 1)" in text(browser, "run-messages")
    assert browser.evaluate("toyrl.ui.run") is None
    assert browser.evaluate("document.getElementById('play').disabled")
    set_setting(browser, "group_size", 8)
    assert text(browser, "run-messages") == ""
    assert browser.evaluate("toyrl.ui.run.steps") == 400


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("lr", 0.2, "lr = 0.2 is 10 times the article's 0.02"),
        ("lr", 0.0005, "lr = 0.0005 is 40 times below the article's 0.02"),
        ("length_norm", 100, "L_norm = 100 is below the lengths it divides (up to the cap, 1,500 tokens)"),
        ("min_length", 1200, "min_length = 1200 is near the cap (1500)"),
        (
            "prompt_logit_mean",
            -5,
            "\u03c8 mean = -5: a typical prompt takes the right approach 0.67% of the time",
        ),
    ],
)
def test_values_outside_the_meaningful_range_are_warned(
    browser: Browser, page: Path, key: str, value: float, words: str
) -> None:
    set_setting(browser, key, value)
    assert words in text(browser, "run-messages")
    assert browser.evaluate("toyrl.ui.run !== null")  # a warning, not a refusal


def test_switches_and_presets_by_real_key_presses(browser: Browser, page: Path) -> None:
    focus(browser, '.switch[data-variant="dr_grpo"]')
    browser.press("Enter", 13, text="\r")
    assert (
        browser.evaluate(
            "document.querySelector('.switch[data-variant=dr_grpo]').getAttribute('aria-pressed')"
        )
        == "false"
    )
    assert "dr_grpo" not in {r["variant"] for r in browser.evaluate("toyrl.ui.run.runs")}
    browser.press(" ", 32, text=" ")
    assert browser.evaluate("toyrl.ui.state.variants") == ["grpo", "std_only", "length_only", "dr_grpo"]
    # the picker: arrow keys choose the first preset the page runs, Tab and Enter add it
    focus(browser, "#preset-picker")
    browser.press("ArrowDown", 40)
    chosen = browser.evaluate("document.getElementById('preset-picker').value")
    first = next(p["name"] for p in browser.evaluate("toyrl.presets") if p["source"] and not p["page"])
    assert chosen == first
    browser.press("Tab", 9)
    assert browser.evaluate("document.activeElement.id") == "preset-add"
    browser.press("Enter", 13, text="\r")
    assert browser.evaluate("toyrl.ui.state.variants")[-1] == first
    assert browser.evaluate("toyrl.ui.run.runs.length") == 5 * 6
    focus(browser, f'#preset-chips button[aria-label="remove {first}"]')
    browser.press("Enter", 13, text="\r")
    assert browser.evaluate("toyrl.ui.state.variants") == ["grpo", "std_only", "length_only", "dr_grpo"]
    # a number by its arrow key, the mode by the radio group's
    focus(browser, "#set-group_size")
    browser.press("ArrowUp", 38)
    assert browser.evaluate("toyrl.ui.spec.group_size") == 9
    focus(browser, "#mode-sampled")
    browser.press("ArrowRight", 39)
    assert browser.evaluate("toyrl.ui.state.mode") == "mean_field"


def test_the_picker_lists_every_preset_and_why_some_cannot_run(browser: Browser, page: Path) -> None:
    options = browser.evaluate(
        "[...document.querySelectorAll('#preset-picker optgroup option')]"
        ".map((o) => [o.value, o.disabled, o.textContent, o.parentElement.label])"
    )
    presets = {p["name"]: p for p in browser.evaluate("toyrl.presets")}
    others = [
        name for name, v in VARIANTS.items() if name not in ("grpo", "std_only", "length_only", "dr_grpo")
    ]
    assert sorted(o[0] for o in options) == sorted(others)
    for name, disabled, label, group in options:
        assert group == presets[name]["source"]
        assert disabled == bool(presets[name]["page"])
        if disabled:
            assert label == f"{name} (not on this page: {presets[name]['page']})"
        elif presets[name]["page_mean_field"]:
            assert label == f"{name} (sampled only)"
        else:
            assert label == name
    assert not all(o[1] for o in options)


def test_the_preset_table_is_the_python_registry(browser: Browser, page: Path) -> None:
    rows = browser.evaluate(
        "[...document.querySelectorAll('#preset-table tbody tr')]"
        ".map((r) => [...r.cells].map((c) => c.textContent))"
    )
    assert [row[0] for row in rows] == list(VARIANTS)
    for row in rows:
        variant = VARIANTS[row[0]]
        assert row[1] == variant.spec_text()
        assert row[2] == (variant.stands_for or variant.summary)
    assert browser.evaluate("document.getElementById('preset-table').closest('details') !== null")


def test_the_recorded_overlay_is_the_results_means(
    browser: Browser, built: tuple[Path, pd.DataFrame]
) -> None:
    frame = built[1]
    browser.open(built[0], "steps=150&seeds=1&t=150&overlay=1")
    label = browser.evaluate("document.getElementById('overlay').parentElement.textContent")
    assert "run.csv, 4 variants x 2 seeds" in label  # said from the data's description, not a fixed text
    for step in (0, 37, 150):
        focus(browser, "#chart-length")
        browser.press("Home", 36)
        for _ in range(step // 10):
            browser.press("ArrowRight", 39, modifiers=SHIFT)
        for _ in range(step % 10):
            browser.press("ArrowRight", 39)
        means = frame[frame.step == step].groupby("variant").mean(numeric_only=True)
        values = readouts(browser)
        for variant in frame.variant.unique():
            for chart, column in [
                ("accuracy", "accuracy"),
                ("length", "length_correct"),
                ("length", "length_incorrect"),
            ]:
                value = values[f"readout-{chart}-recorded-{variant}-{column}"]
                # shipped at the digits the page shows: 0.1 % of accuracy, a token of length
                within = 0.5 / RECORDED_UNITS[column]
                assert abs(value - means.loc[variant, column]) <= within, (step, variant, column)
    assert len(chart_svg(browser, "chart-length").findall(f".//{SVG}path[@class='recorded']")) == 8


def test_results_that_are_not_finite_are_drawn_with_gaps(
    elsewhere: Browser, built: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    """A diverged run (NaN, inf) in the results: the page is written, its curves break where a mean is
    not finite and its readout says so; `toyrl explore` says where, on stderr."""
    frame = built[1].copy()
    frame.loc[frame["step"] >= 100, "accuracy"] = np.nan
    grpo_seed_0 = (frame["variant"] == "grpo") & (frame["seed"] == 0)
    frame.loc[grpo_seed_0 & (frame["step"] >= 120), "length_incorrect"] = np.inf
    frame.to_csv(tmp_path / "diverged.csv", index=False)
    page = tmp_path / "explorer.html"
    result = CliRunner().invoke(
        app, ["explore", "--out", str(page), "--results", str(tmp_path / "diverged.csv")]
    )
    assert result.exit_code == 0, result.output
    assert "grpo from step 100" in result.stderr and "draws them as gaps" in result.stderr
    elsewhere.open(page, "variants=grpo&seeds=1&steps=150&t=150&cursor=130&overlay=1")
    drawn = elsewhere.evaluate(
        "Object.fromEntries([...document.querySelectorAll('path.recorded')]"
        ".map((p) => [p.dataset.column, p.getAttribute('d')]))"
    )
    assert drawn["accuracy"].count("M") == 1 and drawn["accuracy"].count("L") == 99  # steps 0..99
    assert drawn["length_incorrect"].count("L") == 119  # the mean over seeds: none where one seed has inf
    assert drawn["length_correct"].count("L") == 150  # whole
    assert text(elsewhere, "readout-accuracy-recorded-grpo-accuracy") == "not finite"
    assert "not finite (gaps): grpo from step 100" in text(elsewhere, "overlay-box")
    assert elsewhere.page_errors() == []


def test_a_page_without_results_has_no_overlay(browser: Browser, plain: Path) -> None:
    browser.open(plain)
    assert browser.evaluate("document.getElementById('overlay')") is None
    assert browser.evaluate("toyrl.data.recorded") is None


def test_the_step_cursor_by_keys_mouse_and_touch(browser: Browser, built: tuple[Path, pd.DataFrame]) -> None:
    browser.open(built[0], "steps=50&seeds=2&t=50")
    focus(browser, "#chart-length")
    browser.press("ArrowLeft", 37)
    incorrect = page_columns(browser, "length_incorrect")
    values = readouts(browser)
    assert "at step 49" in browser.evaluate("document.querySelector('#readout-length caption').textContent")
    # what the readouts' ± is, once per table: the sample sd over the run's seeds
    captions = browser.evaluate(
        "['length', 'accuracy', 'stop']"
        ".map((k) => document.querySelector(`#readout-${k} caption`).textContent)"
    )
    assert captions == [
        "at step 49 (trained: 50 of 50); mean \u00b1 1 sd over 2 seeds (sample sd)",
        "at step 49 (trained: 50 of 50); mean \u00b1 1 sd over 2 seeds (sample sd)",
        "at step 49 (trained: 50 of 50); mean \u00b1 1 sd over 2 seeds (sample sd, as a share of the mean)",
    ]
    shown_sd = browser.evaluate("document.getElementById('readout-length-0-length_incorrect').dataset.sd")
    assert float(shown_sd) == pytest.approx(incorrect[:2, 49].std(ddof=1), rel=1e-12)  # sample sd, as said
    for index in range(4):
        expected = incorrect[2 * index : 2 * index + 2, 49].mean()
        assert values[f"readout-length-{index}-length_incorrect"] == pytest.approx(expected, rel=1e-12)
    browser.press("Home", 36)
    assert browser.evaluate("toyrl.ui.state.cursor") == 0
    browser.press("End", 35)
    assert browser.evaluate("toyrl.ui.state.cursor") is None  # at the last step: follows the training

    def tick_centre(chart: str, label: str) -> tuple[float, float]:
        return tuple(
            browser.evaluate(
                f"(() => {{ const t = [...document.querySelectorAll('#{chart} .tick-x')]"
                f".find((e) => e.textContent === '{label}'); const r = t.getBoundingClientRect();"
                " return [r.x + r.width / 2, r.y - 30]; })()"
            )
        )

    x, y = tick_centre("chart-accuracy", "20")
    browser.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y}, session=browser.session)
    assert browser.evaluate("toyrl.ui.state.cursor") == 20
    x, y = tick_centre("chart-stop", "40")
    for kind, points in (("touchStart", [{"x": x, "y": y}]), ("touchEnd", [])):
        browser.send(
            "Input.dispatchTouchEvent", {"type": kind, "touchPoints": points}, session=browser.session
        )
    assert browser.evaluate("toyrl.ui.state.cursor") == 40
    # the length chart's panels: the mouse over the last panel's middle tick puts the cursor there too
    x, y, step = browser.evaluate(
        "(() => { const ticks = [...document.querySelectorAll('#chart-length g.panel')].at(-1)"
        ".querySelectorAll('.tick-x'); const t = ticks[1]; const r = t.getBoundingClientRect();"
        " return [r.x + r.width / 2, r.y - 30, +t.textContent]; })()"
    )
    browser.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y}, session=browser.session)
    assert 0 < step < 50 and browser.evaluate("toyrl.ui.state.cursor") == step
    assert browser.evaluate("document.querySelectorAll('#chart-length g.panel').length") == 4
    cursor_lines = browser.evaluate(
        "[...document.querySelectorAll('.plot line.cursor')].map((l) => l.closest('.plot').id)"
    )
    # one cursor, on every chart: in each of the length chart's panels
    assert sorted(cursor_lines) == ["chart-accuracy", *["chart-length"] * 4, "chart-stop"]


def test_a_link_reproduces_the_view(browser: Browser, page: Path) -> None:
    for name in ("std_only", "length_only"):
        browser.evaluate(f"document.querySelector('.switch[data-variant={name}]').click()")
    browser.evaluate(
        "(() => { const p = document.getElementById('preset-picker'); p.value = 'trl_grpo';"
        " document.getElementById('preset-add').click(); })()"
    )
    for key, value in [
        ("lr", 0.03),
        ("group_size", 4),
        ("seeds", 3),
        ("steps", 60),
        ("prompt_logit_mean", -0.5),
    ]:
        set_setting(browser, key, value)
    for _ in range(45):
        browser.evaluate("document.getElementById('step-once').click()")
    focus(browser, "#chart-accuracy")
    browser.press("Home", 36)
    browser.press("ArrowRight", 39, modifiers=SHIFT)
    for _ in range(3):
        browser.press("ArrowRight", 39)
    browser.evaluate(
        "(() => { const f = document.getElementById('length-focus'); f.value = 'dr_grpo';"
        " f.dispatchEvent(new Event('change')); })()"
    )
    hash_text = browser.wait_for(
        "location.hash.includes('cursor=13') && location.hash.includes('focus=') && location.hash"
    )

    def view() -> dict[str, Any]:
        return browser.evaluate(
            "({settings: Object.fromEntries([...document.querySelectorAll('#settings input')]"
            ".map((i) => [i.id, i.value])),"
            " pressed: [...document.querySelectorAll('.switch')].map((b) => b.getAttribute('aria-pressed')),"
            " chips: [...document.querySelectorAll('#preset-chips li')].map((l) => l.firstChild.textContent),"
            " mode: document.querySelector('input[name=mode]:checked').value,"
            " focus: document.getElementById('length-focus').value,"
            " counter: document.getElementById('step-counter').textContent})"
        )

    before, numbers = view(), readouts(browser)
    assert before["counter"] == "step 45 / 60" and before["chips"] == ["trl_grpo"]
    browser.open(page, hash_text.lstrip("#"))
    assert view() == before
    assert readouts(browser) == numbers  # the same run, the same numbers at the cursor
    assert browser.evaluate("toyrl.ui.state.cursor") == 13
    # the focused view: one variant's correct against incorrect length, the article's cheapest look
    curves = chart_svg(browser, "chart-length").findall(f".//{SVG}path[@class='curve']")
    assert [(c.get("data-variant"), c.get("data-column")) for c in curves] == [
        ("dr_grpo", "length_correct"),
        ("dr_grpo", "length_incorrect"),
    ]


# Each field of a link out of its range, as the issue found them and around: the page refuses it in
# one line that names the field, its range and what the link says, and trains nothing.
BAD_LINKS = [
    (
        "steps=10000000&t=10000000&seeds=16",
        "4 variants x 16 seeds x 10,000,001 steps would be 640,000,064 rows; the page holds at most "
        "1,000,000",
    ),
    (  # within toyrl run's 20,000,000 rows, but about 2 GB in a tab
        "variants=grpo&steps=1000000&t=1000000&seeds=16",
        "1 variant x 16 seeds x 1,000,001 steps would be 16,000,016 rows; the page holds at most 1,000,000",
    ),
    ("seeds=16000", "4 variants x 16000 seeds x 401 steps would be 25,664,000 rows"),
    ("seeds=2000000", "seeds must be an integer in 1..1,000,000 (got 2000000)"),
    ("seeds=", 'seeds must be an integer in 1..1,000,000 (got "")'),
    ("seeds=1.5", "seeds must be an integer in 1..1,000,000 (got 1.5)"),
    ("steps=abc", 'steps must be an integer in 1..10,000,000 (got "abc")'),
    ("steps=1e9", "steps must be an integer in 1..10,000,000 (got 1e9)"),
    ("steps=0", "steps must be an integer in 1..10,000,000 (got 0)"),
    ("lr=abc", 'lr must be a finite number > 0 (got "abc")'),
    ("length_norm=0.5", "length_norm must be 0 (the cap) or a number of tokens in [1, 1e+09] (got 0.5)"),
    ("lr=-1", "lr must be a finite number > 0 (got -1)"),
    ("group_size=1", "group_size must be an integer in 2..10,000 (got 1)"),
    ("cap=20000000", "cap must be an integer in 1..10,000,000 (got 20000000)"),
    ("prompt_logit_std=-0.5", "prompt_logit_std must be a finite number >= 0 (got -0.5)"),
    (
        "group_size=10000&batch_prompts=64",
        "24 runs x batch_prompts x group_size would be 15,360,000 responses",
    ),
    (  # within both counts (rows, responses a step), but 5.4 GB in a tab: the page's bound by memory
        "seeds=125000&batch_prompts=1&group_size=2&steps=1",
        "500,000 runs x 2 steps would hold about 6,",
    ),
    (  # 21-48 s a step, the page frozen without a message: its bound on a step's time
        "mode=mean_field&cap=10000000&seeds=16&t=1",
        "a step of 64 runs would take about ",
    ),
    ("variants=grpo&steps=100&t=101", "t must be an integer in 0..100, the steps of the run (got 101)"),
    ("t=-5", "t must be an integer in 0..400, the steps of the run (got -5)"),
    ("t=x", 't must be an integer in 0..400, the steps of the run (got "x")'),
    ("steps=20&t=5&cursor=6", "cursor must be an integer in 0..5, the step t trained to (got 6)"),
    ("mode=exact", 'mode must be sampled or mean_field (got "exact")'),
    ("variants=grpo&focus=dr_grpo", 'focus must be all or a chosen variant (grpo) (got "dr_grpo")'),
    ("overlay=yes", 'overlay must be 0 or 1 (got "yes")'),
    ("step=5", 'unknown link field "step"; valid: variants, lr, group_size'),
    ("t=5&t=6", "t must be given once in a link (got 2 values)"),
    ("variants=nothing", 'unknown variant "nothing"; valid: grpo'),
]


@pytest.mark.parametrize(("fragment", "words"), BAD_LINKS)
def test_a_link_out_of_range_is_refused_in_one_line(
    browser: Browser, built: tuple[Path, pd.DataFrame], fragment: str, words: str
) -> None:
    browser.open(built[0], fragment)
    errors = browser.evaluate(
        "[...document.querySelectorAll('#run-messages .error')].map((p) => p.textContent)"
    )
    assert len(errors) == 1 and errors[0].startswith("Not started: ") and "\n" not in errors[0], errors
    assert words in errors[0]
    assert browser.evaluate("toyrl.ui.run") is None  # nothing allocated, nothing trains
    assert browser.evaluate("document.getElementById('play').disabled")


# Links with several bad fields, the first: every one is in the one message, so one edit
# of the link fixes them all (a misspelt variant no longer waits for the other fields).
SEVERAL_BAD = [
    (
        "variants=grpoo,dr_grpo&t=5000&colour=red",
        [
            'unknown link field "colour"; valid: variants, lr',
            'unknown variant "grpoo"; valid: grpo',
            "t must be an integer in 0..400, the steps of the run (got 5000)",
        ],
    ),
    (
        "variants=grpo,advantage=bogus&seeds=0&mode=exact",
        [
            "seeds must be an integer in 1..1,000,000 (got 0)",
            "advantage must be one of group_std, group_std_sample, batch_std, none, rloo",
            'mode must be sampled or mean_field (got "exact")',
        ],
    ),
]


@pytest.mark.parametrize(("fragment", "reasons"), SEVERAL_BAD)
def test_every_bad_field_of_a_link_is_in_one_message(
    browser: Browser, built: tuple[Path, pd.DataFrame], fragment: str, reasons: list[str]
) -> None:
    browser.open(built[0], fragment)
    errors = browser.evaluate(
        "[...document.querySelectorAll('#run-messages .error')].map((p) => p.textContent)"
    )
    assert len(errors) == 1 and errors[0].startswith("Not started: (1) ") and "\n" not in errors[0], errors
    for number, reason in enumerate(reasons, start=1):
        assert f"({number}) {reason}" in errors[0], (reason, errors[0])
    assert f"({len(reasons) + 1}) " not in errors[0]
    assert browser.evaluate("toyrl.ui.run") is None


def test_a_links_variant_order_is_kept(browser: Browser, built: tuple[Path, pd.DataFrame]) -> None:
    """The variants show in the link's order (not the article's four first), and the page's own
    link writes them back in that order."""
    order = ["dr_grpo", "trl_grpo", "length_only", "grpo"]
    browser.open(built[0], f"variants={','.join(order)}&steps=20&seeds=2&t=10")
    assert browser.evaluate("toyrl.ui.state.variants") == order
    assert browser.evaluate("toyrl.ui.run.variants.map((v) => v.name)") == order
    focus = browser.evaluate("[...document.getElementById('length-focus').options].map((o) => o.value)")
    assert focus == ["all", *order]
    legend = chart_svg(browser, "chart-accuracy").findall(f".//{SVG}g[@class='legend']/{SVG}text")
    assert [t.text for t in legend][: len(order)] == [display_name(name) for name in order]
    browser.evaluate("history.replaceState(null, '', '#'); document.getElementById('step-once').click()")
    assert browser.wait_for("location.hash.includes('variants=') && location.hash").startswith(
        "#variants=" + "%2C".join(order)
    )


def test_a_run_whose_steps_take_long_says_so(browser: Browser, built: tuple[Path, pd.DataFrame]) -> None:
    """The page computes a step of all its runs at once: where that takes over a quarter of a
    second by its estimate (sim.js's `footprint`; here the mean field at a cap of 1,000,000), it
    says so as the run starts, instead of freezing at each step without a word."""
    browser.open(built[0], "variants=grpo&mode=mean_field&cap=1000000&seeds=2&steps=10")
    assert browser.evaluate("toyrl.ui.run.steps") == 10
    words = text(browser, "run-messages")
    assert "Each step of the 2 runs takes about " in words and "the page answers between steps only" in words
    browser.open(built[0], "variants=grpo&seeds=2&steps=10")
    assert "Each step" not in text(browser, "run-messages")


def test_a_typed_value_is_quoted_as_typed_and_a_good_link_still_works(
    browser: Browser, built: tuple[Path, pd.DataFrame]
) -> None:
    browser.open(built[0], "steps=abc")
    assert browser.evaluate("document.getElementById('set-steps').value") == ""  # the number box's own view
    set_setting(browser, "steps", 30)  # the user's own value replaces the link's
    assert text(browser, "run-messages") == "" and browser.evaluate("toyrl.ui.run.steps") == 30
    browser.open(
        built[0], "variants=grpo&steps=20&seeds=2&t=20&cursor=5&mode=mean_field&overlay=0&focus=grpo"
    )
    assert browser.evaluate("[toyrl.ui.run.t, toyrl.ui.state.cursor, toyrl.ui.state.mode]") == [
        20,
        5,
        "mean_field",
    ]


def test_the_page_reads_its_bounds_from_python(elsewhere: Browser, tmp_path: Path, monkeypatch: Any) -> None:
    """The ranges are Python's, carried in the page's data: change one there and the page follows."""
    import toyrl.explore as explore
    from toyrl.config import field_bounds

    def narrower(name: str) -> dict[str, Any]:
        bounds = field_bounds(name)
        if name == "group_size":
            bounds |= {"high": 12, "requirement": "must be an integer in 2..12"}
        return bounds

    monkeypatch.setattr(explore, "field_bounds", narrower)
    monkeypatch.setattr(explore, "PAGE_MAX_ROWS", 1000)
    page = tmp_path / "explorer.html"
    page.write_text(build_explorer(), encoding="utf-8")
    elsewhere.open(page, "group_size=13")
    assert "group_size must be an integer in 2..12 (got 13)" in text(elsewhere, "run-messages")
    elsewhere.open(page, "steps=300")
    assert "would be 7,224 rows; the page holds at most 1,000" in text(elsewhere, "run-messages")
    elsewhere.open(page, "variants=grpo&seeds=2&steps=499")  # 1,000 rows
    assert elsewhere.evaluate("toyrl.ui.run.steps") == 499


@pytest.mark.parametrize("width", [360, 1920])
def test_no_horizontal_scroll_and_charts_at_the_real_width(
    browser: Browser, built: tuple[Path, pd.DataFrame], width: int
) -> None:
    try:
        browser.viewport(width, 900)
        browser.open(built[0], "steps=40&seeds=2&t=40")
        browser.evaluate("document.getElementById('presets-details').open = true")
        two_frames = (
            "new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"
        )
        browser.evaluate(two_frames, await_promise=True)
        assert browser.evaluate("document.documentElement.scrollWidth <= innerWidth"), width
        sizes = browser.evaluate(
            "['chart-length', 'chart-accuracy', 'chart-stop', 'difficulty-plot'].map((id) => {"
            " const box = document.getElementById(id);"
            " return [box.clientWidth, +box.querySelector('svg').getAttribute('width')]; })"
        )
        for container, drawn in sizes:
            assert drawn == max(240, container) and drawn <= width
        # a new width redraws every chart at it, without a reload
        other = 1920 if width == 360 else 360
        browser.viewport(other, 900)
        browser.wait_for(
            "(() => { const box = document.getElementById('chart-length');"
            " return +box.querySelector('svg').getAttribute('width') === Math.max(240, box.clientWidth); })()"
        )
        assert browser.evaluate("document.documentElement.scrollWidth <= innerWidth"), other
    finally:
        browser.clear_viewport()


def test_legends_and_labels_stay_outside_the_plot_area(
    browser: Browser, built: tuple[Path, pd.DataFrame]
) -> None:
    browser.open(built[0], "steps=40&seeds=2&t=40")
    for chart in ("chart-length", "chart-accuracy", "chart-stop"):
        boxes = browser.evaluate(
            f"(() => {{ const svg = document.querySelector('#{chart} svg');"
            " const box = (e) => { const r = e.getBoundingClientRect();"
            " return [r.left, r.top, r.right, r.bottom]; };"
            " return {area: box(svg.querySelector('.plot-area')),"
            " legend: [...svg.querySelectorAll('.legend text, .curve-number')].map(box)}; })()"
        )
        left, top, right, bottom = boxes["area"]
        assert boxes["legend"]
        for x0, y0, x1, y1 in boxes["legend"]:
            assert x1 <= left or x0 >= right or y1 <= top or y0 >= bottom, (chart, (x0, y0, x1, y1))


def test_ticks_are_round_numbers(browser: Browser, built: tuple[Path, pd.DataFrame]) -> None:
    """Linear axes at multiples of 1, 2 or 5 x 10^k (the stop chart's log axis: test_explorer_layout.py)."""
    browser.open(built[0], "steps=40&seeds=2&t=40")
    for chart in ("chart-length", "chart-accuracy", "chart-stop", "difficulty-plot"):
        for axis in ("x", "y") if chart != "chart-stop" else ("x",):
            # each length panel's own ticks (the first column's y, the last row's x), else the chart's
            panels = browser.evaluate(
                f"(() => {{ const svg = document.querySelector('#{chart} svg');"
                " const panels = svg.querySelectorAll('g.panel');"
                " return (panels.length ? [...panels] : [svg]).map((g) =>"
                f" [...g.querySelectorAll('.tick-{axis}')].map((t) => t.textContent))"
                ".filter((l) => l.length); })()"
            )
            assert panels, (chart, axis)
            for labels in panels:
                check_round(chart, axis, labels)


def check_round(chart: str, axis: str, labels: list[str]) -> None:
    """At least three ticks, evenly spaced by 1, 2 or 5 x 10^k, each a multiple of the spacing."""
    values = np.array([float(label.replace(",", "")) for label in labels])
    steps = np.diff(values)
    assert len(values) >= 3 and np.allclose(steps, steps[0]), (chart, axis, labels)
    mantissa = steps[0] / 10 ** np.floor(np.log10(steps[0]))
    assert round(mantissa, 9) in (1, 2, 5), (chart, axis, labels)
    assert np.allclose(values / steps[0], np.round(values / steps[0])), (chart, axis, labels)


def test_colours_and_numbers_keep_many_variants_apart(
    browser: Browser, built: tuple[Path, pd.DataFrame]
) -> None:
    runnable = [p["name"] for p in browser.evaluate("toyrl.presets") if p["source"] and not p["page"]][:8]
    names = ["grpo", "std_only", "length_only", "dr_grpo", *runnable]
    browser.open(built[0], f"variants={','.join(names)}&steps=10&seeds=1&t=10")
    svg = chart_svg(browser, "chart-accuracy")
    legend = [t.text for t in svg.findall(f".//{SVG}g[@class='legend']/{SVG}text")]
    assert legend[: len(names)] == [display_name(name) for name in names]
    labels = svg.findall(f".//{SVG}text[@class='end-label']")
    labelled = [name for label in labels for name in label.get("data-variant").split(",")]
    assert sorted(labelled) == sorted(names)  # every curve's end named, once
    for label in labels:  # with its variants' display names
        text = "".join(label.itertext()).replace(" ", "")  # its lines, broken at spaces and underscores
        merged = label.get("data-variant").split(",")
        assert all(display_name(name).replace(" ", "") in text for name in merged), text
    # the figures' looks (toyrl.plots.variant_looks): colour, line style (dashes in line widths), marker
    figures = variant_looks(names)
    curves = {p.get("data-variant"): p for p in svg.findall(f".//{SVG}path[@class='curve']")}
    markers = {
        g.get("data-variant"): g.get("data-marker") for g in svg.iterfind(f".//{SVG}g[@class='markers']")
    }
    assert list(curves) == [n for n in names if figures[n].linestyle == "-"] + [
        n for n in names if figures[n].linestyle != "-"
    ]  # solid lines first, dashed ones drawn over them
    for name, curve in curves.items():
        look, width = figures[name], float(curve.get("stroke-width"))
        assert curve.get("stroke") == look.colour, name
        dashes = [] if look.linestyle == "-" else [d * width for d in look.linestyle[1]]
        drawn = [float(d) for d in curve.get("stroke-dasharray", "").split(",") if d]
        assert drawn == pytest.approx(dashes, abs=0.01), name
        assert markers.get(name) == look.marker, name
    colours = [figures[n].colour for n in names]
    assert colours[:4] == list(looks.VARIANT_COLOURS.values())
    assert len(set(colours[:7])) == 7 and "#F0E442" not in colours  # seven apart; no yellow on white


CONTRAST = """(() => {
  const parse = (c) => {
    const m = c.match(/[\\d.]+/g).map(Number);
    return [m[0], m[1], m[2], m.length > 3 ? m[3] : 1];
  };
  const over = (top, bottom) =>
    top.slice(0, 3).map((v, i) => v * top[3] + bottom[i] * (1 - top[3])).concat(1);
  const background = (element) => {
    const layers = [];
    for (let e = element; e && e.nodeType === 1; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] === 1) break;
    }
    return layers.reverse().reduce((below, layer) => over(layer, below), [255, 255, 255, 1]);
  };
  const luminance = ([r, g, b]) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const out = [];
  for (const e of document.body.querySelectorAll('*')) {
    if (['SCRIPT', 'STYLE'].includes(e.tagName)) continue;
    if (![...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim())) continue;
    const svgText = e instanceof SVGElement;
    const back = background(svgText ? e.closest('svg').parentElement : e);
    const ink = over(parse(svgText ? getComputedStyle(e).fill : getComputedStyle(e).color), back);
    const [a, b] = [luminance(ink), luminance(back)].sort((x, y) => y - x);
    out.push([(a + 0.05) / (b + 0.05), e.tagName + '#' + e.id + ' ' + e.textContent.trim().slice(0, 40)]);
  }
  return out;
})()"""


def test_every_text_has_a_contrast_of_at_least_4_5(
    browser: Browser, built: tuple[Path, pd.DataFrame]
) -> None:
    browser.open(built[0], "steps=20&seeds=2&t=20&lr=0.2&overlay=1")  # a warning and the overlay shown too
    browser.evaluate("document.getElementById('presets-details').open = true")
    set_setting(browser, "group_size", 1)  # and an error
    set_setting(browser, "group_size", 8)
    browser.evaluate("document.getElementById('step-once').click()")
    checked = browser.evaluate(CONTRAST)
    assert len(checked) > 300
    low = [(round(ratio, 2), where) for ratio, where in checked if ratio < 4.5]
    assert low == []
    set_setting(browser, "group_size", 1)
    checked = browser.evaluate(CONTRAST)
    assert [where for ratio, where in checked if ratio < 4.5] == []
    assert any("Not started" in where for _, where in checked)


# A control's name in the tab test: its id, its link, its variant, or its tag and text.
DESCRIBE = "(e) => e.id || e.getAttribute('href') || e.dataset.variant || e.tagName + ':' + e.textContent"


def test_every_control_is_reachable_by_the_tab_key(browser: Browser, page: Path) -> None:
    browser.evaluate("document.getElementById('presets-details').open = true")
    browser.evaluate("document.activeElement && document.activeElement.blur()")
    wanted = set(
        browser.evaluate(
            "[...document.querySelectorAll('input, select, button, a[href], summary, [tabindex=\"0\"]')]"
            ".filter((e) => !e.disabled && e.getClientRects().length && !(e.type === 'radio' && !e.checked))"
            f".map({DESCRIBE})"
        )
    )
    seen: list[str] = []
    for _ in range(len(wanted) + 10):
        browser.press("Tab", 9)
        seen.append(browser.evaluate(f"({DESCRIBE})(document.activeElement)"))
    assert wanted <= set(seen), wanted - set(seen)
    assert {"chart-length", "chart-accuracy", "chart-stop", "play", "preset-picker", "set-lr"} <= set(seen)


def test_each_chart_exports_as_svg_and_png(browser: Browser, built: tuple[Path, pd.DataFrame]) -> None:
    browser.open(built[0], "steps=30&seeds=2&t=30")
    for chart, curves, colour in (
        ("chart-length", 8, [0x00, 0x9E, 0x73]),  # E[L | correct]'s green
        ("chart-accuracy", 4, [0xD5, 0x5E, 0x00]),  # grpo's vermillion
        ("chart-stop", 8, [0xD5, 0x5E, 0x00]),
        ("difficulty-plot", 0, [0xD5, 0x5E, 0x00]),  # GRPO's points
    ):
        svg = chart_svg(browser, chart)
        assert svg.tag == f"{SVG}svg"
        assert len(svg.findall(f".//{SVG}path[@class='curve']")) == curves
        width, height = int(svg.get("width")), int(svg.get("height"))
        assert svg.get("viewBox") == f"0 0 {width} {height}"
        url = browser.evaluate(f"toyrl.exportChart('{chart}', 'png')", await_promise=True)
        assert url.startswith("data:image/png;base64,")
        image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
        assert image.size == (width, height)
        drawn = np.all(np.abs(np.asarray(image, dtype=int) - colour) < 40, axis=-1)
        assert drawn.sum() > 50, chart  # a curve (or GRPO's points) drawn into the PNG
    with pytest.raises(RuntimeError, match="no chart"):
        browser.evaluate("toyrl.exportChart('nothing', 'svg')")
    buttons = browser.evaluate(
        "[...document.querySelectorAll('[data-export]')].map((b) => [b.dataset.export, b.dataset.format])"
    )
    assert sorted(buttons) == sorted(
        [chart, f] for chart in ("chart-length", "chart-accuracy", "chart-stop") for f in ("svg", "png")
    )
    for format in ("svg", "png"):  # the buttons download the same files
        browser.evaluate(f"document.querySelector('[data-export=chart-stop][data-format={format}]').click()")
    saved = browser.downloads / "toyrl-chart-stop.svg", browser.downloads / "toyrl-chart-stop.png"
    deadline = time.monotonic() + 120  # a hang guard: a loaded machine saves slowly
    while not all(path.exists() for path in saved) and time.monotonic() < deadline:
        time.sleep(0.05)
    svg = ET.fromstring(saved[0].read_text())
    assert len(svg.findall(f".//{SVG}path[@class='curve']")) == 8
    assert Image.open(saved[1]).size == (int(svg.get("width")), int(svg.get("height")))
    assert browser.page_errors() == []


def test_the_template_holds_each_placeholder_once_in_order_in_scripts() -> None:
    html = TEMPLATE.read_text(encoding="utf-8")
    positions = [html.index(p) for p in PLACEHOLDERS.values()]
    assert [html.count(p) for p in PLACEHOLDERS.values()] == [1, 1, 1]
    assert positions == sorted(positions)
    assert "const TOYRL_DATA = /*__TOYRL_DATA__*/null;" in html
    for position in positions:
        assert html.rfind("<script>", 0, position) > html.rfind("</script>", 0, position)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert csp and csp.group(1) == (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:"
    )


def test_the_page_is_one_small_file_that_requests_nothing_but_itself(
    browser: Browser, built: tuple[Path, pd.DataFrame], plain: Path
) -> None:
    """Last in the module: the requests of every test before it are checked too. The size: the page
    without recorded runs, and `toyrl reproduce`'s, with the article's 24 (results/article.csv)."""
    for path in (built[0], plain):
        assert path.stat().st_size <= MAX_PAGE_BYTES
    frame, _ = load_results(Path(__file__).parents[1] / "results" / "article.csv")
    assert frame["variant"].nunique() * frame["seed"].nunique() == 24
    reproduced = build_explorer(run_data(frame, Config().cap, "the article's toy run, 4 variants x 6 seeds"))
    assert len(reproduced.encode()) <= MAX_PAGE_BYTES
    browser.open(built[0])
    assert browser.evaluate("document.querySelectorAll('[src], link, iframe, object, embed').length") == 0
    assert browser.evaluate("[...document.querySelectorAll('[href]')].every((e) => e.tagName === 'A')")
    links = browser.evaluate("[...document.querySelectorAll('a')].map((a) => a.getAttribute('href'))")
    for reference in [
        "https://arxiv.org/abs/2503.20783",  # the paper, then the article's reference list
        "https://arxiv.org/abs/2402.03300",
        "https://arxiv.org/abs/2501.12948",
        "https://arxiv.org/abs/2503.14476",
        "https://arxiv.org/abs/2402.14740",
        "https://github.com/sail-sg/understand-r1-zero",
        "https://github.com/huggingface/trl/blob/main/trl/trainer/grpo_config.py",
    ]:
        assert reference in links
    # written outside a repository's figures/: toyrl's documents named, not linked (test_explorer_layout.py)
    assert all(link.startswith("https://") for link in links), links
    pages = {built[0].resolve().as_uri(), plain.resolve().as_uri()}
    # rendering an exported PNG reads the chart's own SVG from a data: URL: no request leaves the page
    requested = {url for url in browser.requested_urls() if not url.startswith("data:image/svg+xml;")}
    assert requested <= pages and built[0].resolve().as_uri() in requested
    assert browser.page_errors() == []


def test_explore_refuses_bad_paths(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["explore", "--out", str(tmp_path / "page.txt")])
    assert bad.exit_code == 2 and "must be a path ending in .html" in bad.stderr
    missing = runner.invoke(app, ["explore", "--out", str(tmp_path / "no" / "page.html")])
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    assert list(tmp_path.iterdir()) == []
