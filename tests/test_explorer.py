"""The page's simulator (toyrl/explorer/sim.js) against this package, in a real headless Chromium.

Three levels of agreement (issue 16):
- given the same initial policy and the same noise (drawn here by toyrl.train and handed to the page),
  every column of every step and every step's loss gradient agree to 1e-12 relative;
- mean-field trajectories (Adam on the exact expected update, no noise) agree with
  `toyrl.expected.simulate_mean_field` to 1e-9 relative at every step, for the article's variants, every
  preset the page runs mean-field, and specs that reach the other normalisers and selectors;
- sampled runs with the page's own generator agree statistically: over 64 seeds, the final accuracy and
  E[L | incorrect] are within 4 standard errors of Python's (both sides start from the same initial
  logits, so their difference is the noise's).

The tolerances are across machines: the page's Math.exp / log1p / expm1 are V8's, not the C library's,
and its sums run in order where numpy's are pairwise; each differs from numpy's in the last bits.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.browser import Browser, find_chromium
from toyrl.cli import app
from toyrl.config import Config
from toyrl.expected import exact_support, simulate_mean_field
from toyrl.experiment import run_experiment
from toyrl.explore import build_explorer, run_data
from toyrl.objective import KIND_KEYS, from_spec
from toyrl.results import load_results
from toyrl.stages import REGISTRY, parameters
from toyrl.train import (
    COLUMNS,
    STREAMS,
    Plan,
    Recorder,
    initial_theta,
    run_streams,
    simulate,
    step_noise,
    step_orders,
)
from toyrl.variants import ARTICLE, VARIANTS

CHROMIUM = find_chromium()
if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("CI needs Debian's chromium for the page tests; .ci/run installs it")
    pytest.skip("Debian's chromium is not installed (apt-get install chromium)", allow_module_level=True)

NUMBERS = [name for name in COLUMNS if name not in ("variant", "seed", "step")]


SAMPLED = list(VARIANTS)  # the page trains every preset
MEAN_FIELD = [name for name, v in VARIANTS.items() if not exact_support(v)]


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("explorer") / "explorer.html"
    result = CliRunner().invoke(app, ["explore", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def browser(page: Path) -> Iterator[Browser]:
    assert CHROMIUM is not None
    session = Browser(CHROMIUM, timeout=120.0)
    try:
        session.open(page)
        yield session
    finally:
        session.close()


def in_page(browser: Browser, expression: str) -> Any:
    """The JSON value of a page expression (NaN arrives as None)."""
    return json.loads(browser.evaluate(f"JSON.stringify({expression})"))


def page_simulate(browser: Browser, spec: dict[str, Any]) -> dict[str, Any]:
    return dict(in_page(browser, f"toyrl.simulate({json.dumps(spec)})"))


def as_array(values: Sequence[float | None]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def assert_columns_agree(js: dict[str, Any], python: dict[str, np.ndarray], rtol: float) -> None:
    """Every numeric column, row for row (NaN where the other is NaN; zero where the other is zero)."""
    for name in NUMBERS:
        got, want = as_array(js[name]), python[name]
        assert got.shape == want.shape, name
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=name)
        seen = ~np.isnan(want)
        np.testing.assert_allclose(got[seen], want[seen], rtol=rtol, atol=0, err_msg=name)


def python_columns(trajectory: Any) -> dict[str, np.ndarray]:
    return {name: trajectory.columns[name].ravel() for name in NUMBERS}


# --- the same policy and the same noise: every step to 1e-12 ---------------------------------------

CONFIGS = {
    "article": {"steps": 3},
    "truncating": {  # a cap that truncates wrong answers, a long min_length, |o| = L, a set L_norm
        "steps": 3,
        "prompts": 20,
        "batch_prompts": 8,
        "group_size": 5,
        "cap": 400,
        "min_length": 150,
        "count_approach_token": False,
        "length_norm": 300.0,
        "lr": 0.05,
    },
}


class RecordingStream:
    """A run's refill stream that keeps every draw a sampler makes from it, in order."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng, self.draws = rng, []

    def random(self, size: Any) -> np.ndarray:
        values = self.rng.random(size)
        self.draws.append(np.ravel(values).tolist())
        return values

    def standard_exponential(self, size: Any) -> np.ndarray:
        values = self.rng.standard_exponential(size)
        self.draws.append(np.ravel(values).tolist())
        return values


def built(name: str) -> Any:
    return VARIANTS[name] if name in VARIANTS else from_spec(name, json.loads(name))


def python_run(
    config: Config, names: list[str], seeds: list[int], theta0: np.ndarray | None
) -> tuple[dict[str, np.ndarray], np.ndarray, dict[str, Any]]:
    """(columns, each run's loss gradient at each step [R, steps + 1, P + 2], the noise) of
    `toyrl.train.simulate`, the gradients as its recorder got them; with theta0 [seeds, P + 2],
    each seed's runs start there instead of at `initial_theta`. The noise: each seed's step noise,
    each run's shuffled orders and the draws its sampler made from its refill stream."""
    runs = [(built(name), seed) for name in names for seed in seeds]
    noise = list(islice(step_noise([run_streams(seed) for seed in seeds], config), config.steps + 1))
    orders = list(
        islice(
            step_orders([run_streams(seed) for _, seed in runs], Plan.of([v for v, _ in runs]), config),
            config.steps + 1,
        )
    )
    refills: list[RecordingStream] = []
    gradients: list[np.ndarray] = []

    def recording_streams(seed: int) -> list[Any]:
        streams: list[Any] = run_streams(seed)
        refills.append(RecordingStream(streams[STREAMS.index("refill")]))
        streams[STREAMS.index("refill")] = refills[-1]
        return streams

    record = Recorder.record

    def record_gradient(self: Recorder, step: int, grad: np.ndarray, sampled: Any = None) -> None:
        gradients.append(grad.copy())
        record(self, step, grad, sampled)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("toyrl.train.run_streams", recording_streams)
        patch.setattr(Recorder, "record", record_gradient)
        if theta0 is not None:
            starts = iter(np.tile(theta0, (len(names), 1)))
            patch.setattr("toyrl.train.initial_theta", lambda config, rng: next(starts).copy())
        trajectory = simulate(config, runs)
    drawn = {
        "noise": [
            {
                key: [draw[k][i].tolist() for draw in noise]
                for k, key in enumerate(("prompt_index", "approach", "exponential"))
            }
            for i in range(len(seeds))
        ],
        "refill": [stream.draws for stream in refills],
        "orders": [
            [None if step is None else step[r].reshape(step.shape[1], -1).tolist() for step in orders]
            for r in range(len(runs))
        ],
    }
    return python_columns(trajectory), np.stack(gradients, axis=1), drawn


def check_same_noise(
    browser: Browser, names: list[str], fields: dict[str, Any], theta0: np.ndarray | None
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Python's run and the page's from the same start and noise, compared; (Python's columns, the
    noise) for the caller to check which paths were taken."""
    config = Config(**fields)
    seeds = [0, 1]
    columns, gradients, drawn = python_run(config, names, seeds, theta0)
    spec: dict[str, Any] = {
        "variants": [name if name in VARIANTS else json.loads(name) for name in names],
        "seeds": seeds,
        "gradients": True,
        **drawn,
        **fields,
    }
    if theta0 is not None:
        spec["theta0"] = theta0.tolist()
    result = page_simulate(browser, spec)
    assert_columns_agree(result["columns"], columns, rtol=1e-12)
    js = np.array(result["gradients"])
    assert js.shape == gradients.shape
    # relative to each gradient's largest entry: a sum over responses may cancel to near 0 in one entry
    scale = np.abs(gradients).max(axis=-1, keepdims=True)
    assert (np.abs(js - gradients) <= 1e-12 * scale).all(), np.abs(js - gradients).max()
    assert (gradients != 0).any()
    return columns, drawn


@pytest.mark.parametrize("config", list(CONFIGS))
def test_same_noise_every_step_agrees(browser: Browser, config: str) -> None:
    columns, drawn = check_same_noise(browser, SAMPLED, CONFIGS[config], None)
    assert (columns["clip_fraction"] > 0).any()  # later updates clipped some tokens (GSPO's, CISPO's)
    assert (
        sum(len(draws) > 0 for draws in drawn["refill"]) == 2 * 4
    )  # the four sampler presets, two seeds each


SPECS = [  # stages and parameters no preset reaches
    {"advantage": "rloo", "aggregation": "length_power", "alpha": 0.5},
    {"advantage": "group_std", "aggregation": "token_sum_norm", "mask_truncated": True},
    {"advantage": "batch_whiten", "aggregation": "token_sum", "max_grad_norm": 0.05},
    {
        "advantage": "group_std_sample",
        "aggregation": "seq_mean_token_sum",
        "reward": "soft_overlong",
        "buffer": 0.5,
    },
    {
        "advantage": "group_std",
        "aggregation": "seq_mean_token_mean",
        "num_iterations": 3,
        "dual_clip": 3.0,
        "epsilon": 0.05,
    },
    {
        "advantage": "none",
        "aggregation": "token_mean",
        "num_iterations": 2,
        "mini_batches": 2,
        "shuffle": "epoch",
    },
    {
        "advantage": "rloo",
        "aggregation": "token_mean",
        "per_micro_batch": True,
        "mini_batches": 2,
        "micro_batches": 2,
        "shuffle": "once",
    },
    {"advantage": "group_std_sample", "aggregation": "token_mean", "batch_tokens": True, "mini_batches": 4},
    {
        "advantage": "none",
        "aggregation": "seq_mean_token_mean",
        "objective": "cispo",
        "epsilon": 0.5,
        "epsilon_high": 0.2,
        "num_iterations": 3,
    },
    {"advantage": "group_std", "aggregation": "token_mean", "objective": "gpg", "num_iterations": 2},
    {
        "advantage": "none",
        "aggregation": "token_mean",
        "sampler": "filter_groups",
        "round_prompts": 3,
        "max_rounds": 3,
    },
    {
        "advantage": "none",
        "aggregation": "token_mean",
        "sampler": "gfpo",
        "draws": 9,
        "keep": "reward_per_token",
    },
    {"advantage": "group_std", "aggregation": "seq_mean_token_mean", "beta": 0.04},
    {
        "advantage": "none",
        "aggregation": "token_mean",
        "beta": 0.1,
        "ratio_weighted": True,
        "num_iterations": 2,
    },
    {"advantage": "rloo", "aggregation": "token_mean", "kl": "k1_reward", "beta": 0.05, "num_iterations": 2},
    {
        "advantage": "group_std_sample",
        "aggregation": "seq_mean_token_mean",
        "kl": "k1_reward",
        "beta": 0.2,
        "objective": "sapo",
        "mini_batches": 2,
    },
    {
        "advantage": "none",
        "aggregation": "token_mean",
        "objective": "cispo",
        "beta": 0.3,
        "num_iterations": 2,
    },
]


@pytest.mark.parametrize("config", list(CONFIGS))
def test_same_noise_agrees_for_specs(browser: Browser, config: str) -> None:
    _, drawn = check_same_noise(browser, [json.dumps(spec) for spec in SPECS], CONFIGS[config], None)
    natural = list(range(CONFIGS[config].get("batch_prompts", 16) * CONFIGS[config].get("group_size", 8)))
    shuffled = [any(order != natural for step in run if step for order in step) for run in drawn["orders"]]
    assert sum(shuffled) == 2 * 2  # the two specs that shuffle, two seeds each


def test_same_noise_agrees_with_kl_terms_far_from_their_reference(browser: Browser) -> None:
    """A large learning rate moves the policy far from the initial one in a few steps, so the KL terms
    (the last five specs) weigh as much as the advantages."""
    fields = {"steps": 6, "prompts": 16, "batch_prompts": 8, "group_size": 4, "lr": 0.5}
    kl_specs = [spec for spec in SPECS if "beta" in spec]
    columns, _ = check_same_noise(browser, [json.dumps(spec) for spec in kl_specs], fields, None)
    assert len(kl_specs) == 5 and np.nanmax(columns["grad_norm"]) > 0


def test_same_noise_agrees_at_extreme_logits(browser: Browser) -> None:
    """Logits where 1 - sigma(x) rounds to 0 (the score's other form) and stop probabilities near 1."""
    fields = {"steps": 2, "prompts": 12, "batch_prompts": 6, "group_size": 4, "cap": 50, "min_length": 2}
    theta0 = np.array([[*np.linspace(-30, 30, 12), 14.0, -3.0], [*np.linspace(20, -20, 12), -2.0, 13.0]])
    check_same_noise(
        browser,
        ["grpo", "dr_grpo", "trl_default", "openrlhf_reinforce_baseline", "gspo", "sapo"],
        fields,
        theta0,
    )


# --- mean-field: every step to 1e-9 ----------------------------------------------------------------


def check_mean_field(browser: Browser, variants: list[Any], fields: dict[str, Any], seeds: list[int]) -> None:
    config = Config(**fields)
    built = [VARIANTS[v] if isinstance(v, str) else from_spec(json.dumps(v), v) for v in variants]
    trajectory = simulate_mean_field(config, [(v, seed) for v in built for seed in seeds])
    result = page_simulate(browser, {"variants": variants, "seeds": seeds, "mean_field": True, **fields})
    assert_columns_agree(result["columns"], python_columns(trajectory), rtol=1e-9)


def test_mean_field_article_and_presets(browser: Browser) -> None:
    assert set(ARTICLE) <= set(MEAN_FIELD) and len(MEAN_FIELD) >= 12
    check_mean_field(browser, MEAN_FIELD, {}, [0])


def test_mean_field_specs_at_other_settings(browser: Browser) -> None:
    fields = {
        "steps": 150,
        "group_size": 5,
        "cap": 600,
        "min_length": 40,
        "count_approach_token": False,
        "length_norm": 500.0,
        "lr": 0.05,
        "prompt_logit_mean": 0.5,
        "stop_prob_wrong": 0.01,
    }
    check_mean_field(browser, ["grpo", "dr_grpo", *SPECS[:2]], fields, [3, 7])


# --- the page's own noise: the same law ------------------------------------------------------------


STATISTICAL = [*ARTICLE, "gspo", "dapo", "gfpo"]  # and the page's shuffle-free epochs and its refill draws


@pytest.mark.slow
def test_sampled_runs_agree_within_four_standard_errors(browser: Browser) -> None:
    seeds = list(range(64))
    config = Config()
    python = run_experiment(config, [VARIANTS[name] for name in STATISTICAL], seeds)
    final = python[python.step == config.steps]
    theta0 = [initial_theta(config, run_streams(seed)[0]).tolist() for seed in seeds]
    spec = {"variants": STATISTICAL, "seeds": seeds, "theta0": theta0}
    expression = (
        f"(() => {{ const run = toyrl.start({json.dumps(spec)}); run.advance(run.steps);"
        " return ['accuracy', 'length_incorrect']"
        ".map((name) => run.column(name).map((values) => values[run.steps])); })()"
    )
    accuracy, length_incorrect = in_page(browser, expression)
    for index, name in enumerate(STATISTICAL):
        ours = final[final.variant == name]
        for column, page_values in (("accuracy", accuracy), ("length_incorrect", length_incorrect)):
            js = np.array(page_values[index * len(seeds) : (index + 1) * len(seeds)])
            py = ours[column].to_numpy()
            standard_error = np.sqrt(js.var(ddof=1) / len(js) + py.var(ddof=1) / len(py))
            gap = abs(js.mean() - py.mean())
            ratio = gap / standard_error
            print(f"{name}, {column}: page {js.mean():.4f}, python {py.mean():.4f}, {ratio:.2f} SE")
            assert gap <= 4 * standard_error, (name, column, js.mean(), py.mean(), standard_error)


def test_the_article_set_runs_in_the_page(browser: Browser, page: Path) -> None:
    """Prints the time of 4 variants x 6 seeds x 400 sampled steps in a freshly loaded page (a measurement,
    not an assertion: these machines are shared)."""
    browser.open(page)
    spec = {"variants": list(ARTICLE), "seeds": 6, "steps": 400}
    seconds = in_page(
        browser,
        f"(() => {{ const s = performance.now(); const run = toyrl.start({json.dumps(spec)});"
        " run.advance(run.steps); return [(performance.now() - s) / 1000, run.t, run.runs.length]; })()",
    )
    print(f"the article set (4 variants x 6 seeds x 400 steps, sampled) in the page: {seconds[0]:.3f} s")
    assert seconds[1:] == [400, 24]


# --- the registry, the specs and bad input -----------------------------------------------------------


def test_the_page_holds_every_preset_and_runs_the_ones_it_says(browser: Browser) -> None:
    presets = in_page(browser, "toyrl.presets")
    assert [p["name"] for p in presets] == list(VARIANTS)
    for preset in presets:
        variant = VARIANTS[preset["name"]]
        assert preset["spec"] == variant.spec() and preset["exact"] == exact_support(variant)
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
        ({"variants": ["grpo"], "seeds": [16]}, "seeds must be in 0..15"),
        ({"variants": ["grpo"], "prompts": 65}, "prompts must be at most 64 in the page (got 65)"),
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
    "seventeen eighteen nineteen twenty"
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
    page = build_explorer(run_data(frame, Config().cap, description))
    committed = (root / "figures" / "explorer.html").read_bytes()
    assert hashlib.sha256(committed).hexdigest() == hashlib.sha256(page.encode()).hexdigest(), (
        "figures/explorer.html is stale: run toyrl reproduce"
    )
