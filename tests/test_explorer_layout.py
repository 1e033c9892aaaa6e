"""The explorer page starts where the lesson is, in a real headless Chromium.

At a phone's 360 x 800 and a laptop's 1280 x 800, play and the length chart are on the first screen,
no scrolling; under the chart, one sentence says what the run the page just trained shows, with the
run's own numbers (held here to Python's run at the same settings); the stop probabilities are on a
log axis labelled "1/N" as the figures label them; the curves take the figures' looks and nothing
is translucent, so overlapping curves never mix into a colour the legend does not show; the length
chart is a panel per variant, titled with its display name; every curve's end label keeps clear of the
others, inside its panel, beside its curve's last drawn point; chart text grows with the screen;
and no link of a page written outside the repository is a relative path that breaks. The
screenshots docs/explorer.md shows, and those after play and the slides, are checked to be there.
(tests/test_explorer_page.py checks the rest of the interface.)
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from tests.browser import Browser, find_chromium
from toyrl.cli import app
from toyrl.config import Config
from toyrl.experiment import run_experiment
from toyrl.explore import DOCS, build_explorer, doc_links, page_data, run_data
from toyrl.plots import (
    BIAS_FIGURE_NAME,
    FIGURE_NAMES,
    HEADLINE_FIGURE_NAME,
    OUTCOME_COLOURS,
    OUTCOME_MARKERS,
    TEACHING_FIGURE_NAMES,
    VARIANT_LABELS,
    _one_in,
    variant_looks,
)
from toyrl.results import load_results
from toyrl.variants import ARTICLE

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = find_chromium()
if CHROMIUM is None and os.environ.get("CI"):
    raise RuntimeError("CI needs Debian's chromium for the page tests; .ci/run installs it")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)"
)
SVG = "{http://www.w3.org/2000/svg}"
SETTLED = "new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(() => done(true))))"
SCREENS = [(360, 800), (1280, 800)]
SCREENSHOTS = [(360, 800), (1280, 800), (1920, 1080)]


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page as `toyrl reproduce` writes it (the committed results' curves as an overlay), outside
    the repository."""
    frame, _ = load_results(ROOT / "results" / "article.csv")
    description = f"the article's toy run, {len(ARTICLE)} variants x {frame['seed'].nunique()} seeds"
    page = tmp_path_factory.mktemp("reproduced") / "explorer.html"
    page.write_text(build_explorer(run_data(frame, Config().cap, description)), encoding="utf-8")
    return page


@pytest.fixture(scope="module")
def browser(reproduced: Path) -> Iterator[Browser]:
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    session = Browser(CHROMIUM, timeout=120.0)
    try:
        yield session
    finally:
        session.close()


def open_at(browser: Browser, page: Path, fragment: str, width: int, height: int) -> None:
    browser.viewport(width, height)
    browser.open(page, fragment)
    browser.evaluate(SETTLED, await_promise=True)


def box(browser: Browser, element: str) -> dict[str, float]:
    rect = f"document.getElementById({json.dumps(element)}).getBoundingClientRect().toJSON()"
    return dict(browser.evaluate(rect))


def hrefs(browser: Browser) -> list[str]:
    return list(
        browser.evaluate("[...document.querySelectorAll('a[href]')].map((a) => a.getAttribute('href'))")
    )


def text(browser: Browser, element: str) -> str:
    return str(browser.evaluate(f"document.getElementById({json.dumps(element)}).textContent"))


def tokens(value: float) -> str:
    """A length as the page writes it: rounded half up (JavaScript's Math.round), thousands separated."""
    return f"{math.floor(value + 0.5):,}"


# --- play and the length chart on the first screen --------------------------------------------------


@needs_chromium
@pytest.mark.parametrize(("width", "height"), SCREENS, ids=[f"{w}x{h}" for w, h in SCREENS])
@pytest.mark.parametrize("fragment", ["", "steps=100&t=100&overlay=1"], ids=["first view", "trained"])
def test_play_and_the_length_chart_are_on_the_first_screen(
    browser: Browser, reproduced: Path, width: int, height: int, fragment: str
) -> None:
    try:
        open_at(browser, reproduced, fragment, width, height)
        assert browser.evaluate("[innerWidth, innerHeight, scrollX, scrollY]") == [width, height, 0, 0]
        chart = box(browser, "chart-length")
        assert chart["height"] > 250  # drawn: axes, curves and legend, not an empty box
        assert browser.evaluate("document.querySelectorAll('#chart-length path.curve').length") == 8
        for element in ("play", "chart-length"):
            rect = box(browser, element)
            assert rect["left"] >= 0 and rect["top"] >= 0, (element, rect)
            assert rect["right"] <= width and rect["bottom"] <= height, (element, rect)
    finally:
        browser.clear_viewport()


# --- the lesson: one sentence, from the run ---------------------------------------------------------


NUMBER_WORDS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def expected_lesson(frame: pd.DataFrame, step: int, trained: int, steps: int, mean_field: bool) -> str:
    """The sentence the page must show at `step`, from Python's run of the same settings: the two
    variants with the longest and the shortest wrong answers, against their right ones."""
    variants = list(dict.fromkeys(frame["variant"]))  # the page's order: the link's
    means = frame.groupby(["variant", "step"])[["length_incorrect", "length_correct"]].mean()
    names = {v: VARIANT_LABELS.get(v, v) for v in variants}

    def wrong(v: str, s: int) -> float:
        return float(means.loc[(v, s), "length_incorrect"])

    def right(v: str, s: int) -> float:
        return float(means.loc[(v, s), "length_correct"])

    start = variants[0]
    if step == 0:
        who = names[start] if len(variants) == 1 else f"{names[start]} and under {names[variants[-1]]}"
        lead = "Predict, then press play" if trained == 0 else "At step 0, before training"
        return (
            f"{lead}: over {steps} steps, what happens to wrong answers, now {tokens(wrong(start, 0))} "
            f"tokens against {tokens(right(start, 0))} for right ones, under {who}?"
        )

    def change(v: str) -> str:
        ratio = wrong(v, step) / wrong(v, 0)
        return "have grown to" if ratio > 1.05 else "have shrunk to" if ratio < 1 / 1.05 else "stay at"

    def against(v: str, unit: str) -> str:
        if not math.isfinite(right(v, step)):
            return "with no right answers"
        return f"against {tokens(right(v, step))}{unit}"

    after = f"After {step} step{'' if step == 1 else 's'}"
    after += " of the exact expected update" if mean_field else ""
    ranked = sorted(variants, key=lambda v: -wrong(v, step))
    longest, shortest, others = ranked[0], ranked[-1], len(variants) - 2
    origin = f"from {tokens(wrong(start, 0))} and {tokens(right(start, 0))} at step 0"
    sentence = (
        f"{after}, wrong answers under {names[longest]} {change(longest)} {tokens(wrong(longest, step))} "
        f"tokens {against(longest, ' for right ones')}"
    )
    if len(variants) == 1:
        return f"{sentence} ({origin})."
    rest = (
        ""
        if others < 1
        else "; the other variant ends between them"
        if others == 1
        else (
            f"; the other {NUMBER_WORDS[others] if others < len(NUMBER_WORDS) else others} end between them"
        )
    )
    both = "both" if len(variants) == 2 else "all"
    return (
        f"{sentence}; under {names[shortest]} they {change(shortest)} {tokens(wrong(shortest, step))} "
        f"{against(shortest, '')} ({both} {origin}{rest})."
    )


LESSONS = [  # (variants, seeds, steps, trained to, cursor or None, mean-field)
    (["grpo"], 2, 30, 30, None, True),
    (["grpo", "dr_grpo"], 2, 30, 30, None, True),
    (["grpo", "length_only", "dr_grpo"], 2, 30, 30, 12, True),
    (list(ARTICLE), 2, 25, 25, None, False),
    (["dr_grpo", "grpo"], 1, 20, 0, None, False),  # not started: what to predict
    (["grpo", "dr_grpo"], 2, 20, 20, 0, True),  # the cursor back at step 0
]


@needs_chromium
@pytest.mark.parametrize(("variants", "seeds", "steps", "trained", "cursor", "mean_field"), LESSONS)
def test_the_lesson_is_one_sentence_under_the_chart_from_the_run(
    browser: Browser,
    reproduced: Path,
    variants: list[str],
    seeds: int,
    steps: int,
    trained: int,
    cursor: int | None,
    mean_field: bool,
) -> None:
    config = Config(steps=steps, cap=300, min_length=30)
    frame = run_experiment(config, variants, list(range(seeds)), mean_field=mean_field)
    fragment = (
        f"variants={','.join(variants)}&cap=300&min_length=30&steps={steps}&seeds={seeds}&t={trained}"
        f"&mode={'mean_field' if mean_field else 'sampled'}"
    ) + (f"&cursor={cursor}" if cursor is not None else "")
    open_at(browser, reproduced, fragment, 1280, 800)
    try:
        lesson = text(browser, "lesson")
        step = trained if cursor is None else cursor
        assert lesson == expected_lesson(frame, step, trained, steps, mean_field)
        pairs = {("grpo", "length_only"), ("std_only", "dr_grpo")}
        if trained == steps and not any(set(pair) <= set(variants) for pair in pairs):
            # the difficulty answer names the pairs to choose as a person reads them
            assert (
                "To see what the std term does to the run, choose GRPO and GRPO without std division "
                "(or GRPO without length division and Dr. GRPO): they differ only by it."
            ) in text(browser, "answer-difficulty")
        # one sentence: a single full stop or question mark, at its end ("Dr." is a name)
        assert len(re.findall(r"[.?!](\s|$)", lesson.replace("Dr. ", "Dr "))) == 1, lesson
        # under the chart: right after it, below it, as wide
        assert browser.evaluate("document.getElementById('chart-length').nextElementSibling.id") == "lesson"
        chart, sentence = box(browser, "chart-length"), box(browser, "lesson")
        assert chart["bottom"] <= sentence["top"] < chart["bottom"] + 30
        assert sentence["left"] == pytest.approx(chart["left"]) and sentence["width"] <= chart["width"] + 1
    finally:
        browser.clear_viewport()


@needs_chromium
def test_the_article_run_reads_as_its_lesson(browser: Browser, reproduced: Path) -> None:
    """The article's run, trained by the page as toyrl runs it: GRPO's wrong answers grow, Dr. GRPO's
    shrink, in the numbers of the committed results (figures/final_numbers.md)."""
    frame, _ = load_results(ROOT / "results" / "article.csv")
    open_at(browser, reproduced, "t=400", 1280, 800)
    try:
        lesson = text(browser, "lesson")
        assert lesson == expected_lesson(frame, 400, 400, 400, False)
        assert lesson.startswith("After 400 steps, wrong answers under GRPO have grown to 1,377 tokens")
        assert "; under Dr. GRPO they have shrunk to 473 " in lesson
    finally:
        browser.clear_viewport()


@needs_chromium
def test_a_run_refused_says_so_in_the_lesson(browser: Browser, reproduced: Path) -> None:
    open_at(browser, reproduced, "group_size=1", 360, 800)
    try:
        assert text(browser, "lesson") == (
            "Nothing is trained until the settings are fixed: see the message under play."
        )
        assert box(browser, "run-messages")["bottom"] <= 800  # the message, on the first screen too
    finally:
        browser.clear_viewport()


# --- the stop probabilities on a log axis -----------------------------------------------------------


@needs_chromium
def test_the_stop_probability_axis_is_logarithmic_and_labelled_1_in_n(
    browser: Browser, reproduced: Path
) -> None:
    open_at(browser, reproduced, "variants=grpo,dr_grpo&steps=200&t=200&seeds=2", 1280, 800)
    try:
        ticks = browser.evaluate(
            "[...document.querySelectorAll('#chart-stop .tick-y')].map((t) =>"
            " [t.textContent, +t.dataset.value, +t.getAttribute('y')])"
        )
        assert len(ticks) >= 3
        for label, value, _ in ticks:
            match = re.fullmatch(r"1/([\d,]+)", label)
            assert match, label
            n = int(match.group(1).replace(",", ""))
            assert label == _one_in(1 / n) and value == pytest.approx(1 / n)  # the figures' "1/N"
            assert n / 10 ** math.floor(math.log10(n)) in (1, 3), label  # 1, 3, 10, 30, ...
        values, ys = np.array([t[1] for t in ticks]), np.array([t[2] for t in ticks])
        slope, intercept = np.polyfit(np.log(values), ys, 1)
        assert np.abs(slope * np.log(values) + intercept - ys).max() < 0.2  # equal steps per decade
        assert np.abs(np.polyval(np.polyfit(values, ys, 1), values) - ys).max() > 5  # not linear
        # every curve on that axis: the cursor's marks sit where the log scale puts their values
        marks = browser.evaluate(
            "[...document.querySelectorAll('#chart-stop circle.at-cursor')]"
            ".map((c) => [c.dataset.variant, c.dataset.column, +c.dataset.value, +c.getAttribute('cy')])"
        )
        assert len(marks) == 4
        font = browser.evaluate("+document.querySelector('#chart-stop svg').getAttribute('font-size')")
        for _, _, value, y in marks:  # a tick's label sits 4/12 of the font below its line
            assert y == pytest.approx(slope * np.log(value) + intercept - 4 * font / 12, abs=0.2)
        # GRPO's fall from 1/700 is a third of the chart's height or more, not a flat line near 0
        path = browser.evaluate(
            "document.querySelector('#chart-stop path.curve[data-variant=grpo][data-column=stop_prob_wrong]')"
            ".getAttribute('d')"
        )
        heights = [float(y) for y in re.findall(r"[ML][\d.]+,([\d.]+)", path)]
        area = browser.evaluate("+document.querySelector('#chart-stop .plot-area').getAttribute('height')")
        assert heights[-1] - heights[0] > area / 3
        readout = browser.evaluate(
            "(() => { const c = document.getElementById('readout-stop-0-stop_prob_wrong');"
            " return [+c.dataset.value, c.textContent]; })()"
        )
        assert readout[1].startswith(f"{_one_in(readout[0])} \u00b1 ")
    finally:
        browser.clear_viewport()


# --- the figures' looks; nothing translucent --------------------------------------------------------


@needs_chromium
def test_curves_take_the_figures_looks_and_nothing_is_translucent(browser: Browser, reproduced: Path) -> None:
    open_at(browser, reproduced, "steps=40&t=40&seeds=3&overlay=1", 1280, 800)
    try:
        assert browser.evaluate("toyrl.data.looks") == json.loads(json.dumps(page_data()["looks"]))
        looks = variant_looks(list(ARTICLE))
        svg = browser.evaluate("toyrl.exportChart('chart-length', 'svg')")
        # the length chart: a panel per variant, titled with its display name, in the outcomes' looks
        panels = browser.evaluate(
            "[...document.querySelectorAll('#chart-length g.panel')].map((g) => ({variant: g.dataset.variant,"
            " title: [...g.querySelectorAll('.panel-title')].map((t) => t.textContent).join(' '),"
            " curves: [...g.querySelectorAll('path.curve')].map((p) => [p.dataset.variant, p.dataset.column,"
            " p.getAttribute('stroke'), p.getAttribute('stroke-dasharray')]),"
            " labels: [...g.querySelectorAll('.end-label')].map((t) => [t.dataset.column, t.textContent]),"
            " cap: g.querySelectorAll('line.cap').length}))"
        )
        assert [p["variant"] for p in panels] == list(ARTICLE)
        for panel in panels:
            assert panel["title"] == VARIANT_LABELS[panel["variant"]]
            assert panel["cap"] == 1
            assert [c[:3] for c in panel["curves"]] == [
                [panel["variant"], f"length_{outcome}", OUTCOME_COLOURS[outcome]]
                for outcome in ("correct", "incorrect")
            ]
            assert panel["curves"][0][3] is None and panel["curves"][1][3]  # correct solid, incorrect dashed
            assert sorted(panel["labels"]) == [
                ["length_correct", "correct"],
                ["length_incorrect", "incorrect"],
            ]
        assert browser.evaluate("document.querySelectorAll('#chart-length g.markers').length") == 0
        legend = browser.evaluate(
            "[...document.querySelectorAll('#chart-length g.legend text')].map((t) => t.textContent)"
        )
        assert legend == [  # only what the panels do not name
            "band: mean \u00b1 1 sd over 3 seeds (sample sd)",
            "the cap (1,500 tokens)",
            "thin: recorded, the article's toy run, 4 variants x 6 seeds",
        ]
        # the accuracy chart: each variant in its figures' look (colour, line style, marker)
        curves = browser.evaluate(
            "[...document.querySelectorAll('#chart-accuracy path.curve')].map((p) =>"
            " [p.dataset.variant, p.getAttribute('stroke'), p.getAttribute('stroke-dasharray')])"
        )
        markers = browser.evaluate(
            "Object.fromEntries([...document.querySelectorAll('#chart-accuracy g.markers')]"
            ".map((g) => [g.dataset.variant, g.dataset.marker]))"
        )
        assert len(curves) == 4
        for variant, colour, dashes in curves:
            assert colour == looks[variant].colour  # the variant's colour, and its line style
            assert (dashes is None) == (looks[variant].linestyle == "-"), variant
            assert markers.get(variant) == looks[variant].marker, variant
        # every band hatched in its curve's colour, at full strength: no colour the legend lacks
        hatched = re.findall(r'fill="url\(#chart-length-hatch-\d+-\d+\)"', svg)
        assert svg.count('class="band"') == 8 and len(hatched) == 8
        for chart in ("chart-length", "chart-accuracy", "chart-stop", "difficulty-plot"):
            drawn = browser.evaluate(f"toyrl.exportChart('{chart}', 'svg')")
            assert not re.search(r"opacity|rgba|hsla", drawn), chart
        # one variant's lengths: its panel alone
        browser.evaluate(
            "(() => { const f = document.getElementById('length-focus'); f.value = 'dr_grpo';"
            " f.dispatchEvent(new Event('change')); })()"
        )
        focused = browser.evaluate(
            "[...document.querySelectorAll('#chart-length path.curve')].map((p) =>"
            " [p.dataset.variant, p.dataset.column, p.getAttribute('stroke')])"
        )
        assert focused == [
            ["dr_grpo", "length_correct", OUTCOME_COLOURS["correct"]],
            ["dr_grpo", "length_incorrect", OUTCOME_COLOURS["incorrect"]],
        ]
        assert browser.evaluate("document.querySelectorAll('#chart-length g.panel').length") == 1
    finally:
        browser.clear_viewport()


# --- chart text grows with the screen ---------------------------------------------------------------


@needs_chromium
def test_chart_text_grows_with_the_screen(browser: Browser, reproduced: Path) -> None:
    sizes = {}
    try:
        for width, height in [(360, 800), (1920, 1080)]:
            open_at(browser, reproduced, "steps=40&t=40", width, height)
            sizes[width] = browser.evaluate(
                "['chart-length', 'chart-accuracy', 'chart-stop'].map((id) => {"
                " const t = document.querySelector('#' + id + ' .tick-x');"
                " return [t.getBoundingClientRect().height, parseFloat(getComputedStyle(t).fontSize)]; })"
            )
    finally:
        browser.clear_viewport()
    for (_, small), (tall, large) in zip(sizes[360], sizes[1920], strict=True):
        assert small >= 12 and large >= 16 and tall >= 16  # readable on a phone, and from the back of a room
        assert large > small


@needs_chromium
@pytest.mark.parametrize(("width", "height"), SCREENS, ids=[f"{w}x{h}" for w, h in SCREENS])
def test_the_switches_show_the_name_to_read_over_the_name_to_type(
    browser: Browser, reproduced: Path, width: int, height: int
) -> None:
    """Each of the 2 x 2's buttons: the variant's display name, and under it its spec name on one line
    (a name to type, never broken as "length_onl" / "y")."""
    try:
        open_at(browser, reproduced, "", width, height)
        switches = browser.evaluate(
            "[...document.querySelectorAll('.switch')].map((b) => { const sub = b.querySelector('.sub');"
            " const range = document.createRange(); range.selectNodeContents(sub);"
            " return [b.dataset.variant, b.firstChild.textContent, sub.textContent,"
            " new Set([...range.getClientRects()].map((r) => Math.round(r.top))).size]; })"
        )
    finally:
        browser.clear_viewport()
    assert switches == [[name, VARIANT_LABELS[name], name, 1] for name in ARTICLE]


# --- end labels: never over one another, never out of their panel, by the data -------------------

EIGHT = [*ARTICLE, "trl_default", "verl_default", "trl_grpo", "oat_grpo"]
LONG_NAMES = ["dapo_overlong_filtering", "verl_seq_mean_token_mean", "openrlhf_reinforce_baseline"]
# Every curve end label of every run chart: its box, its panel's box (a length panel's own, else
# the chart's plot and label margin) and the x of its curve's last drawn point (the path's last
# point; a merged label's curves all end at one step).
END_LABELS = """[...document.querySelectorAll('#chart-length svg, #chart-accuracy svg, #chart-stop svg')]
.map((svg) => {
  const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const origin = svg.getBoundingClientRect().left;
  return {chart: svg.parentElement.id, svg: box(svg), font: +svg.getAttribute('font-size'),
    panels: svg.querySelectorAll('.panel-box').length,
    titles: [...svg.querySelectorAll('.panel-title')].map((t) => ({text: t.textContent, box: box(t)})),
    labels: [...svg.querySelectorAll('text.end-label')].map((t) => {
      const panel = (t.closest('g.panel') ?? svg).querySelector('.panel-box');
      const variant = t.dataset.variant.split(',')[0], column = t.dataset.column.split(',')[0];
      const d = [...svg.querySelectorAll('path.curve')].find((p) => p.dataset.variant === variant
        && p.dataset.column === column).getAttribute('d');
      const end = origin + +d.match(/([\\d.]+),[\\d.]+$/)[1];
      return {text: t.textContent, box: box(t), panel: box(panel), end};
    })}; })"""


def overlap(a: list[float], b: list[float], apart: float = 0) -> bool:
    """Whether two boxes (left, top, right, bottom) overlap, or side by side come within `apart` px."""
    return a[0] < b[2] + apart and b[0] < a[2] + apart and a[1] < b[3] and b[1] < a[3]


@needs_chromium
@pytest.mark.parametrize(("width", "height"), SCREENS, ids=[f"{w}x{h}" for w, h in SCREENS])
@pytest.mark.parametrize(
    "variants", [list(ARTICLE), EIGHT, LONG_NAMES], ids=["article", "eight", "long names"]
)
@pytest.mark.parametrize("trained", [0, 400], ids=["before play", "after play"])
def test_curve_end_labels_never_overlap_nor_leave_their_panel(
    browser: Browser, reproduced: Path, width: int, height: int, variants: list[str], trained: int
) -> None:
    """The issue's labels stacked as "2 4 2 4" and, before play, sat at step 400 away from the data
    at step 0. Every end label of the length panels and of the accuracy and stop charts: no two
    overlap, each lies within its panel (and so within its chart), and each starts just right of
    its curve's last drawn point. The length chart has a panel per variant, each with its two words."""
    try:
        open_at(browser, reproduced, f"variants={','.join(variants)}&t={trained}", width, height)
        charts = browser.evaluate(END_LABELS)
    finally:
        browser.clear_viewport()
    assert [c["chart"] for c in charts] == ["chart-length", "chart-accuracy", "chart-stop"]
    length = charts[0]
    assert length["panels"] == len(variants)
    # each panel titled with its variant's display name (in lines broken at a space or an underscore)
    titles = "".join(t["text"] for t in length["titles"]).replace(" ", "")
    assert titles == "".join(VARIANT_LABELS.get(v, v) for v in variants).replace(" ", "")
    assert sorted(label["text"] for label in length["labels"]) == sorted(
        ["correct", "incorrect"] * len(variants)
    )
    for chart in charts:
        labels, u = chart["labels"], chart["font"] / 12
        assert labels, chart["chart"]
        for label in labels:
            x0, y0, x1, y1 = label["box"]
            p0, q0, p1, q1 = label["panel"]
            assert p0 - 0.5 <= x0 and x1 <= p1 + 0.5 and q0 - 0.5 <= y0 and y1 <= q1 + 0.5, (
                chart["chart"],
                label,
            )
            s0, t0, s1, t1 = chart["svg"]
            assert s0 <= x0 and x1 <= s1 and t0 <= y0 and y1 <= t1, (chart["chart"], label)
            assert 0 < x0 - label["end"] < 14 * u, (chart["chart"], label)  # beside its curve's end
        texts = labels + chart["titles"]  # the panels' titles (the variants' names) apart too
        for i, a in enumerate(texts):
            for b in texts[i + 1 :]:
                # side by side, a space apart at least: two titles must not read as one
                assert not overlap(a["box"], b["box"], apart=3 * u), (chart["chart"], a, b)
        for title in chart["titles"]:
            assert chart["svg"][0] <= title["box"][0] and title["box"][2] <= chart["svg"][2], title


# --- nothing touches a legend, buttons wrap as a group --------------------------------------------

WIDE_AND_NARROW = [(1920, 1080), (360, 800)]
# Each text of a chart outside its legend against each of the legend's pieces, 2 px apart at least.
TOUCHING_LEGENDS = """[...document.querySelectorAll('.plot svg')].flatMap((svg) => {
  const pieces = [...svg.querySelectorAll('g.legend > *')]
    .map((e) => [e.textContent, e.getBoundingClientRect()]);
  return [...svg.querySelectorAll('text')].filter((t) => !t.closest('g.legend')).flatMap((t) => {
    const a = t.getBoundingClientRect();
    return pieces.filter(([, b]) => a.left < b.right + 2 && b.left < a.right + 2 && a.top < b.bottom + 2
      && b.top < a.bottom + 2).map(([piece]) => [svg.parentElement.id, t.textContent, piece]);
  }); })"""


@needs_chromium
@pytest.mark.parametrize(("width", "height"), WIDE_AND_NARROW, ids=[f"{w}x{h}" for w, h in WIDE_AND_NARROW])
@pytest.mark.parametrize("fragment", ["", "steps=40&t=40"], ids=["first view", "trained"])
def test_no_chart_text_touches_a_legend(
    browser: Browser, reproduced: Path, width: int, height: int, fragment: str
) -> None:
    """The issue's "pass rate k/G" sat on the difficulty chart's legend: every axis label, tick and
    curve number of every chart keeps clear of every legend entry."""
    try:
        open_at(browser, reproduced, fragment, width, height)
        assert browser.evaluate("document.querySelectorAll('.plot svg g.legend').length") == 4
        assert browser.evaluate(TOUCHING_LEGENDS) == []
    finally:
        browser.clear_viewport()


@needs_chromium
@pytest.mark.parametrize(("width", "height"), WIDE_AND_NARROW, ids=[f"{w}x{h}" for w, h in WIDE_AND_NARROW])
@pytest.mark.parametrize("fragment", ["", "steps=40&t=40"], ids=["first view", "trained"])
def test_a_charts_export_buttons_wrap_together(
    browser: Browser, reproduced: Path, width: int, height: int, fragment: str
) -> None:
    """A chart's SVG and PNG buttons are on one line, side by side, whatever wraps around them."""
    try:
        open_at(browser, reproduced, fragment, width, height)
        groups = browser.evaluate(
            "[...document.querySelectorAll('.chart-tools')].map((tools) =>"
            " [...tools.querySelectorAll('[data-export]')].map((b) => b.getBoundingClientRect().toJSON()))"
        )
    finally:
        browser.clear_viewport()
    assert len(groups) == 3
    for svg_button, png_button in groups:
        assert svg_button["top"] == png_button["top"], (svg_button, png_button)
        assert 0 <= png_button["left"] - svg_button["right"] < 20  # side by side
        assert png_button["right"] <= width


# --- links that work wherever the page is written ---------------------------------------------------


def relative(links: list[str]) -> list[str]:
    return [link for link in links if not re.match(r"[a-z]+:|#", link)]


@needs_chromium
def test_no_link_of_a_page_written_elsewhere_is_a_broken_relative_path(
    browser: Browser, tmp_path: Path
) -> None:
    csv = tmp_path / "run.csv"
    runner = CliRunner()
    assert runner.invoke(app, ["run", "--seeds", "1", "--steps", "5", "--out", str(csv)]).exit_code == 0
    figures = tmp_path / "figures"  # a figures/ folder, of no toyrl repository: toyrl reproduce elsewhere
    figures.mkdir()
    for page, extra in ((tmp_path / "a.html", []), (figures / "explorer.html", ["--results", str(csv)])):
        result = runner.invoke(app, ["explore", "--out", str(page), *extra])
        assert result.exit_code == 0, result.output
        browser.open(page)
        links = hrefs(browser)
        assert len(links) >= 8 and relative(links) == [], page
        docs = text(browser, "docs-note")
        for path, title in DOCS:  # named in plain text instead
            assert f"{title} ({path})" in docs


@needs_chromium
def test_a_page_in_a_repositorys_figures_links_its_documents(browser: Browser, tmp_path: Path) -> None:
    """Written into a toyrl repository's figures/, the page links the documents beside it, and only
    those that are there."""
    root = tmp_path / "toyrl-clone"
    (root / "toyrl").mkdir(parents=True)
    (root / "figures").mkdir()
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / "toyrl" / "explore.py").write_text("")
    present = [path for path, _ in DOCS if path != "docs/design.md"]
    for path in present:
        (root / path).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / path, root / path)
    page = root / "figures" / "explorer.html"
    page.write_text(build_explorer(out=page), encoding="utf-8")
    browser.open(page)
    links = relative(hrefs(browser))
    assert sorted(links) == sorted(f"../{path}" for path in present)
    assert all((page.parent / link).resolve().is_file() for link in links)
    assert "design (docs/design.md)" in text(browser, "docs-note")  # the one missing: named, not linked


def test_doc_links_are_relative_only_beside_the_documents(tmp_path: Path) -> None:
    inside = doc_links(ROOT / "figures" / "explorer.html")  # this repository's own figures/
    assert [d["href"] for d in inside] == [f"../{path}" for path, _ in DOCS]
    assert all((ROOT / "figures" / d["href"]).resolve().is_file() for d in inside)
    elsewhere = [tmp_path / "explorer.html", tmp_path / "figures" / "explorer.html", ROOT / "explorer.html"]
    for out in [None, *elsewhere]:
        assert [d["href"] for d in doc_links(out)] == [None] * len(DOCS), out


# --- the screenshots docs/explorer.md shows ---------------------------------------------------------


def test_the_screenshots_are_there_at_their_sizes() -> None:
    doc = (ROOT / "docs" / "explorer.md").read_text(encoding="utf-8")
    assert "python scripts/screenshots.py" in doc
    for width, height in SCREENSHOTS:
        name = f"explorer-{width}x{height}.png"
        assert f"](screenshots/{name})" in doc
        with Image.open(ROOT / "docs" / "screenshots" / name) as image:
            assert image.size == (width, height)


PLAYED = [(name, width, height) for name in ("four", "eight") for width, height in SCREENS]
SLIDES = [*FIGURE_NAMES, HEADLINE_FIGURE_NAME, BIAS_FIGURE_NAME, *TEACHING_FIGURE_NAMES]


def test_the_played_screenshots_and_the_slides_are_there() -> None:
    """scripts/screenshots.py's other pictures: the length chart after play, with the article's four
    variants and with eight, at a phone's and a laptop's size; every figure `toyrl reproduce` draws,
    at slide size (16:9)."""
    folder = ROOT / "docs" / "screenshots"
    for name, width, height in PLAYED:
        with Image.open(folder / f"explorer-played-{name}-{width}x{height}.png") as image:
            assert image.size == (width, height)
    for name in SLIDES:
        with Image.open(folder / "slides" / f"{name}.png") as image:
            assert image.size[0] / image.size[1] == pytest.approx(16 / 9, rel=0.01), name


def test_the_page_data_carries_the_figures_looks() -> None:
    data: dict[str, Any] = page_data()
    article = data["looks"]["article"]
    for name, look in variant_looks(list(ARTICLE)).items():
        dashes = [] if look.linestyle == "-" else list(look.linestyle[1])
        assert article[name] == {"colour": look.colour, "dashes": dashes, "marker": look.marker}
    assert data["looks"]["outcomes"] == {
        outcome: {"colour": OUTCOME_COLOURS[outcome], "marker": OUTCOME_MARKERS[outcome]}
        for outcome in OUTCOME_COLOURS
    }
    assert data["looks"]["labels"] == VARIANT_LABELS
