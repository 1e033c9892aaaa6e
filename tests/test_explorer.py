"""`toyrl explore`: the offline page's numbers equal the Python side's, in a real headless Chromium."""

import os
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from tests.browser import Browser, find_chromium
from toyrl.cli import app
from toyrl.examples import group_mass
from toyrl.objective import advantages

CHROMIUM = find_chromium()
if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium for the page tests; .ci/run installs it")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    folder = tmp_path_factory.mktemp("explorer")
    csv = folder / "run.csv"
    runner = CliRunner()
    assert runner.invoke(app, ["run", "--seeds", "2", "--steps", "150", "--out", str(csv)]).exit_code == 0
    page = folder / "explorer.html"
    result = runner.invoke(app, ["explore", "--out", str(page), "--results", str(csv)])
    assert result.exit_code == 0, result.output
    return page, pd.read_csv(csv)


@pytest.fixture(scope="module")
def browser(built: tuple[Path, pd.DataFrame]) -> Iterator[Browser]:
    assert CHROMIUM is not None
    session = Browser(CHROMIUM)
    try:
        session.open(built[0])
        yield session
    finally:
        session.close()


def set_sliders(browser: Browser, **values: float) -> None:
    for element, value in values.items():
        slider = f"document.getElementById('{element.replace('_', '-')}')"
        browser.evaluate(
            f"(() => {{ const s = {slider}; s.value = '{value}';"
            " s.dispatchEvent(new Event('input', {bubbles: true})); })()"
        )


def shown(browser: Browser, element: str) -> tuple[float, float]:
    """(full-precision value, displayed value) of an output element."""
    value, text = browser.evaluate(
        f"(() => {{ const e = document.getElementById('{element}');"
        " return [e.dataset.value, e.textContent]; })()"
    )
    return float(value), float(text)


def assert_shows(browser: Browser, element: str, expected: float) -> None:
    value, text = shown(browser, element)
    assert value == pytest.approx(expected, rel=1e-12, abs=1e-15), element
    assert text == pytest.approx(expected, rel=6e-4, abs=1e-12), element  # 4 significant digits


def expected_weights(
    len_correct: int, len_wrong: int, group: int, correct: int, lnorm: int
) -> dict[str, float]:
    """The Python side: toyrl.objective's advantages, at std_eps = 0 as on the page."""
    rewards = (np.arange(group) < correct).astype(float)
    scaled, centred = advantages(rewards, "group_std", std_eps=0.0), advantages(rewards, "none", std_eps=0.0)
    return {
        "group-mean": rewards.mean(),
        "group-std": rewards.std(),
        "grpo-adv-correct": scaled[0],
        "grpo-adv-wrong": scaled[-1],
        "grpo-w-correct": scaled[0] / len_correct,
        "grpo-w-wrong": scaled[-1] / len_wrong,
        "grpo-total-wrong": scaled[-1],
        "dr-adv-correct": centred[0],
        "dr-w-correct": centred[0] / lnorm,
        "dr-w-wrong": centred[-1] / lnorm,
        "dr-total-wrong": centred[-1] / lnorm * len_wrong,
        "grpo-ratio": (scaled[0] / len_correct) / (-scaled[-1] / len_wrong),
        "dr-ratio": centred[0] / -centred[-1],
    }


@pytest.mark.parametrize(
    "setting",
    [(200, 800, 8, 2, 2000), (37, 2900, 64, 1, 1500), (1, 1, 2, 1, 100), (500, 100, 16, 15, 4000)],
)
def test_token_weights_match_python(browser: Browser, setting: tuple[int, int, int, int, int]) -> None:
    len_correct, len_wrong, group, correct, lnorm = setting
    set_sliders(browser, group=group)  # first, so that the k slider's range allows `correct`
    set_sliders(browser, len_correct=len_correct, len_wrong=len_wrong, correct=correct, lnorm=lnorm)
    for element, expected in expected_weights(*setting).items():
        assert_shows(browser, element, expected)


def test_article_worked_example_on_the_page(browser: Browser) -> None:
    set_sliders(browser, group=8)
    set_sliders(browser, len_correct=200, len_wrong=800, correct=2, lnorm=2000)
    assert browser.evaluate("document.getElementById('grpo-w-correct').textContent") == "0.00866"
    assert browser.evaluate("document.getElementById('dr-w-wrong').textContent") == "-0.000125"
    assert shown(browser, "grpo-ratio")[1] == 12


def test_a_real_key_press_moves_a_slider(browser: Browser) -> None:
    set_sliders(browser, group=8)
    set_sliders(browser, len_correct=200, len_wrong=800, correct=2, lnorm=2000)
    browser.evaluate("document.getElementById('correct').focus()")
    browser.press("ArrowRight", 39)
    assert browser.evaluate("document.getElementById('correct-out').textContent") == "3"
    for element, expected in expected_weights(200, 800, 8, 3, 2000).items():
        assert_shows(browser, element, expected)


def test_shrinking_the_group_keeps_k_in_range(browser: Browser) -> None:
    set_sliders(browser, group=16)
    set_sliders(browser, correct=12)
    set_sliders(browser, group=4)
    assert browser.evaluate("document.getElementById('correct-out').textContent") == "3"
    assert_shows(browser, "grpo-adv-correct", expected_weights(1, 1, 4, 3, 100)["grpo-adv-correct"])


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


@pytest.mark.parametrize("step", [0, 37, 150])
def test_recorded_curves_are_the_results_means(
    browser: Browser, built: tuple[Path, pd.DataFrame], step: int
) -> None:
    frame = built[1]
    set_sliders(browser, step=step)
    means = frame[frame.step == step].groupby("variant").mean(numeric_only=True)
    for variant in frame.variant.unique():
        for column, factor in [("accuracy", 100), ("length_correct", 1), ("length_incorrect", 1)]:
            value, _ = shown(browser, f"run-{variant}-{column}")
            assert value == pytest.approx(means.loc[variant, column] * factor, rel=1e-6)


def test_the_page_makes_no_network_request_and_raises_nothing(
    browser: Browser, built: tuple[Path, pd.DataFrame]
) -> None:
    set_sliders(browser, metric="accuracy")
    assert browser.requested_urls() == [built[0].resolve().as_uri()]
    assert browser.page_errors() == []
    html = built[0].read_text()
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)


def test_explore_refuses_bad_paths(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["explore", "--out", str(tmp_path / "page.txt")])
    assert bad.exit_code == 2 and "must be a path ending in .html" in bad.stderr
    missing = runner.invoke(app, ["explore", "--out", str(tmp_path / "no" / "page.html")])
    assert missing.exit_code == 2 and "does not exist" in missing.stderr
    assert list(tmp_path.iterdir()) == []
