"""The explorer's agreement cases and their Python side, run by tests/test_explorer.py (the page
in headless Chromium; once: tests/test_explorer_node.py says why not under node too) and reached
method by method by tests/test_ported.py.

A case is a spec of `toyrl.simulate` (the page's API); `python_side` runs the same settings through
this package, `toyrl.experiment.run_experiment` (what `toyrl run` runs) unless the case asks for
each step's loss gradient or a given initial policy, which the recorder and `initial_theta` of
toyrl.train are patched to hand over. The page computes the same bits, so the comparison is `==`,
NaN where NaN, for every column of every step of every run (`first_difference`).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any, NamedTuple

import numpy as np
import pytest

from toyrl.config import Config
from toyrl.expected import exact_support, simulate_mean_field
from toyrl.experiment import run_experiment
from toyrl.objective import Variant, from_spec
from toyrl.train import COLUMNS, Recorder, simulate
from toyrl.variants import ARTICLE, VARIANTS

NUMBERS = [name for name in COLUMNS if name not in ("variant", "seed", "step")]
CONFIG_FIELDS = {f.name for f in dataclasses.fields(Config)}

SAMPLED = list(VARIANTS)  # the page trains every preset
MEAN_FIELD = [name for name, v in VARIANTS.items() if not exact_support(v)]
SAMPLERS = [name for name, v in VARIANTS.items() if v.names()["sampler"] != "once"]  # they draw more

# A cap that truncates wrong answers, a long min_length, |o| = L, a set L_norm, a small batch.
SMALL = {
    "steps": 60,
    "prompts": 20,
    "batch_prompts": 8,
    "group_size": 5,
    "cap": 400,
    "min_length": 150,
    "count_approach_token": False,
    "length_norm": 300.0,
    "lr": 0.05,
}

SPECS = [  # stages and parameters no preset reaches
    {"advantage": "rloo", "aggregation": "length_power", "alpha": 0.5},
    {"advantage": "group_std", "aggregation": "token_sum_norm", "mask_truncated": True},
    {  # a per-response normaliser on each micro-batch (its twin's micro_denominators)
        "advantage": "batch_whiten",
        "aggregation": "token_sum",
        "max_grad_norm": 0.05,
        "per_micro_batch": True,
        "micro_batches": 2,
    },
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
    {  # verl's V1 layout: micro-batches by a token budget, ...
        "advantage": "none",
        "aggregation": "seq_mean_token_sum_longest",
        "per_micro_batch": True,
        "token_budget": 8000,
        "prompt_tokens": 100,
    },
    {  # ... over data-parallel ranks balanced by workload, ...
        "advantage": "group_std",
        "aggregation": "seq_mean_token_sum_longest",
        "per_micro_batch": True,
        "ranks": 4,
        "mini_batches": 2,
        "token_budget": 6000,
        "prompt_tokens": 50,
    },
    {"advantage": "rloo", "aggregation": "token_mean", "ranks": 2, "mini_batches": 2, "num_iterations": 2},
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
    # issue 42's stages off their presets' paths: prompt_mean on mini-batches, delta_l's alpha, the
    # rewards' own weights
    {
        "advantage": "max_rl",
        "aggregation": "prompt_mean",
        "reward": "length_penalty",
        "num_output_tokens_weight": 0.7,
        "num_input_tokens_weight": 0.05,
        "num_turns_weight": 0.0,
        "mini_batches": 2,
        "shuffle": "epoch",
        "num_iterations": 2,
    },
    {"advantage": "rloo", "aggregation": "delta_l", "alpha": 0.75, "mini_batches": 2, "num_iterations": 2},
    {"advantage": "max_rl", "aggregation": "seq_mean_token_mean", "reward": "gr3", "alpha": 0.9},
    # issue 43's stages: NeMo-RL's advantage, groups out of the loss by their rewards (by their mean,
    # and by their spread on shaped rewards)
    {
        "advantage": "rloo_std",
        "std_eps": 1e-6,
        "aggregation": "token_mean",
        "selector": "difficulty",
        "low": 0.2,
        "high": 0.9,
        "drop_truncated": True,
    },
    {
        "advantage": "rloo_std",
        "aggregation": "token_mean",
        "selector": "informative",
        "tol": 0.05,
        "reward": "length_penalty",
        "mini_batches": 2,
    },
]
KL_SPECS = [spec for spec in SPECS if "beta" in spec]

# Logits where 1 - sigma(x) rounds to 0 (the score's other form) and stop probabilities near 1.
EXTREME_THETA0 = [
    [*np.linspace(-30, 30, 12).tolist(), 14.0, -3.0],
    [*np.linspace(20, -20, 12).tolist(), -2.0, 13.0],
]
# P(incorrect) below 1e-200 (every psi_j above 460, so few wrong approaches; stop probability near 1 at
# min_length 1, so few truncated and no short responses): E[L | incorrect] from log-space weights.
TAIL_THETA0 = [
    [*np.linspace(461, 475, 12).tolist(), 9.3, -3.0],
    [*np.linspace(-30, 30, 12).tolist(), 14.0, -3.0],
]

CASES: dict[str, dict[str, Any]] = {
    # the article's set, as `toyrl run` makes it: 4 variants x 6 seeds x 400 steps, the default Config
    "article": {"variants": list(ARTICLE), "seeds": list(range(6))},
    "presets, small": {"variants": SAMPLED, "seeds": [0, 1], **SMALL},
    "presets, article": {"variants": SAMPLED, "seeds": [0, 1]},
    "mean-field presets": {"variants": MEAN_FIELD, "seeds": [0, 1], "mean_field": True},
    "mean-field specs": {
        "variants": [
            "grpo",
            "dr_grpo",
            *SPECS[:2],
            {"advantage": "max_rl", "aggregation": "seq_mean_token_sum_norm"},
            {
                "advantage": "rloo_std",
                "aggregation": "seq_mean_token_sum_norm",
                "selector": "difficulty",
                "low": 0.1,
                "high": 0.7,
                "drop_truncated": True,
            },
            {"advantage": "group_std", "aggregation": "seq_mean_token_mean", "selector": "informative"},
            {"advantage": "passk", "aggregation": "seq_mean_token_sum_norm"},
        ],
        "seeds": [3, 7],
        "mean_field": True,
        "gradients": True,
        "steps": 150,
        "group_size": 5,
        "cap": 600,
        "min_length": 40,
        "count_approach_token": False,
        "length_norm": 500.0,
        "lr": 0.05,
        "prompt_logit_mean": 0.5,
        "stop_prob_wrong": 0.01,
    },
    "specs, small": {"variants": SPECS, "seeds": [0, 1], "gradients": True, **SMALL},
    "specs, article": {"variants": SPECS, "seeds": [0, 1], "gradients": True, "steps": 100},
    # a large learning rate moves the policy far from the initial one: the KL terms weigh as much as
    # the advantages
    "KL terms far from their reference": {
        "variants": KL_SPECS,
        "seeds": [0, 1],
        "gradients": True,
        "steps": 30,
        "prompts": 16,
        "batch_prompts": 8,
        "group_size": 4,
        "lr": 0.5,
    },
    "extreme logits": {
        "variants": ["grpo", "dr_grpo", "trl_default", "openrlhf_reinforce_baseline", "gspo", "sapo"],
        "seeds": [0, 1],
        "theta0": EXTREME_THETA0,
        "gradients": True,
        "steps": 20,
        "prompts": 12,
        "batch_prompts": 6,
        "group_size": 4,
        "cap": 50,
        "min_length": 2,
    },
    # seeds and prompt counts beyond the defaults (the page draws any seed's initial logits itself), and
    # more than 64 prompts a step (random.js picks those by a sort, fewer by insertion)
    "other seeds, many prompts": {
        "variants": ["grpo", "dr_grpo", "dapo"],
        "seeds": [16, 12345, 2**40],
        "steps": 50,
        "prompts": 200,
        "batch_prompts": 80,
        "group_size": 4,
    },
    "mean-field, extreme logits": {
        "variants": ["grpo", "dr_grpo"],
        "seeds": [0, 1],
        "theta0": TAIL_THETA0,
        "mean_field": True,
        "steps": 20,
        "prompts": 12,
        "batch_prompts": 6,
        "cap": 50,
        "min_length": 1,
    },
}
SLOW_CASES = ("presets, article", "specs, article")  # 400 steps each: marked slow (CI runs them)


def agreement_cases() -> list[Any]:
    """CASES as pytest parameters, the long ones marked slow."""
    return [pytest.param(case, marks=pytest.mark.slow) if case in SLOW_CASES else case for case in CASES]


def built(variant: str | dict[str, Any]) -> Variant:
    """A preset by name, or a spec object as the page takes it."""
    return VARIANTS[variant] if isinstance(variant, str) else from_spec(json.dumps(variant), variant)


class PythonRun(NamedTuple):
    """This package's numbers for a case: each column [runs x (steps + 1)], runs variant-major as
    the page's, and each step's loss gradient [runs, steps + 1, P + 2] if the case asks for them."""

    columns: dict[str, np.ndarray]
    gradients: np.ndarray | None


def python_side(spec: dict[str, Any]) -> PythonRun:
    config = Config(**{key: value for key, value in spec.items() if key in CONFIG_FIELDS})
    variants = [built(v) for v in spec["variants"]]
    seeds, mean_field = spec["seeds"], bool(spec.get("mean_field"))
    if "theta0" not in spec and not spec.get("gradients"):
        table = run_experiment(config, variants, seeds, mean_field=mean_field, as_columns=True)
        return PythonRun({name: np.asarray(table[name], dtype=np.float64) for name in NUMBERS}, None)
    gradients: list[np.ndarray] = []
    done = Recorder.done

    def record_gradient(self: Recorder, step: int) -> None:  # every run's gradient, once a step
        gradients.append(self.grad(step).copy())
        done(self, step)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Recorder, "done", record_gradient)
        if "theta0" in spec:  # each seed's runs start at its theta0, in the order the runs are made
            starts = iter(np.tile(np.array(spec["theta0"], dtype=np.float64), (len(variants), 1)))
            for module in ("toyrl.train", "toyrl.expected"):
                patch.setattr(f"{module}.initial_theta", lambda config, rng: next(starts).copy())
        runs = [(variant, seed) for variant in variants for seed in seeds]
        trajectory = (simulate_mean_field if mean_field else simulate)(config, runs)
    columns = {name: trajectory.columns[name].ravel() for name in NUMBERS}
    return PythonRun(columns, np.stack(gradients, axis=1) if spec.get("gradients") else None)


# The page's side travels as the bytes of each Float64Array, base64: every bit, NaN and -0 included.
ENCODE_JS = (
    "const encode = (values) => { const bytes = new Uint8Array(Float64Array.from(values).buffer);"
    " let text = ''; for (let i = 0; i < bytes.length; i += 8192)"
    " text += String.fromCharCode(...bytes.subarray(i, i + 8192)); return btoa(text); };"
)


def result_expression(spec: dict[str, Any]) -> str:
    """A JavaScript expression whose value is the JSON text of `toyrl.simulate(spec)`, encoded."""
    return (
        f"(() => {{ {ENCODE_JS} const result = toyrl.simulate({json.dumps(spec)});"
        " const columns = Object.fromEntries(Object.entries(result.columns).filter(([name]) =>"
        " !['variant', 'seed', 'step'].includes(name)).map(([name, values]) => [name, encode(values)]));"
        " return JSON.stringify({ columns, seconds: result.seconds,"
        " gradients: result.gradients ? encode(result.gradients.flat(2)) : null }); })()"
    )


def decode(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype="<f8")


class PageRun(NamedTuple):
    columns: dict[str, np.ndarray]
    gradients: np.ndarray | None
    seconds: float


def page_run(answer: str, spec: dict[str, Any]) -> PageRun:
    """The page's answer to `result_expression(spec)`, decoded (gradients shaped as Python's)."""
    result = json.loads(answer)
    columns = {name: decode(result["columns"][name]) for name in NUMBERS}
    gradients = None
    if result["gradients"] is not None:
        runs = len(spec["variants"]) * len(spec["seeds"])
        config = Config(**{key: value for key, value in spec.items() if key in CONFIG_FIELDS})
        gradients = decode(result["gradients"]).reshape(runs, config.steps + 1, config.prompts + 2)
    return PageRun(columns, gradients, float(result["seconds"]))


def first_difference(
    page: dict[str, np.ndarray], python: dict[str, np.ndarray], runs: list[str], steps: int
) -> str | None:
    """Where the page's columns first differ from Python's (`==`, NaN where NaN), or None. `runs`
    names the runs in order, each `steps` + 1 rows."""
    found: list[tuple[int, int, str, float, float]] = []
    for name in NUMBERS:
        got, want = page[name], python[name]
        if got.shape != want.shape:
            return f"{name}: {got.shape} values in the page, {want.shape} in Python"
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        if not same.all():
            row = int(np.flatnonzero(~same)[0])
            found.append((row % (steps + 1), row // (steps + 1), name, float(got[row]), float(want[row])))
    if not found:
        return None
    step, run, name, got_value, want_value = min(found)
    return (
        f"{len(found)} columns differ; first at step {step} of run {runs[run]}: {name} is "
        f"{got_value!r} ({got_value.hex()}) in the page, {want_value!r} ({want_value.hex()}) in Python"
    )


def run_names(spec: dict[str, Any]) -> list[str]:
    return [
        f"({v if isinstance(v, str) else json.dumps(v)}, seed {seed})"
        for v in spec["variants"]
        for seed in spec["seeds"]
    ]


def check_case(page: PageRun, spec: dict[str, Any], python: PythonRun) -> None:
    """The page's run equals Python's, column for column and step for step (and gradient for
    gradient when asked); then that the case reached what it is there for."""
    steps = Config(**{key: value for key, value in spec.items() if key in CONFIG_FIELDS}).steps
    difference = first_difference(page.columns, python.columns, run_names(spec), steps)
    assert difference is None, difference
    if python.gradients is not None:
        assert page.gradients is not None and page.gradients.shape == python.gradients.shape
        same = (page.gradients == python.gradients) | (np.isnan(page.gradients) & np.isnan(python.gradients))
        where = np.argwhere(~same)
        assert same.all(), f"{len(where)} gradient entries differ, the first at (run, step, logit) {where[0]}"
        assert (python.gradients != 0).any()
    check_reach(spec, python.columns)


def check_reach(spec: dict[str, Any], columns: dict[str, np.ndarray]) -> None:
    """The paths a case is there for were taken (on Python's side, which the page's equals)."""
    config = Config(**{key: value for key, value in spec.items() if key in CONFIG_FIELDS})
    per_run = {name: values.reshape(-1, config.steps + 1) for name, values in columns.items()}
    names = [v for v in spec["variants"] for _ in spec["seeds"]]
    if spec["variants"] in (SAMPLED, SPECS, KL_SPECS):
        assert (per_run["clip_fraction"] > 0).any()  # later updates clipped some tokens
    if spec["variants"] in (SAMPLED, SPECS):
        # a sampler that drew more: more tokens generated than the batch it kept holds (whole numbers)
        kept = config.batch_prompts * config.group_size * (per_run["batch_length_mean"] + 1) + 0.5
        drew_more = [bool((per_run["tokens_sampled"][run] > kept[run]).any()) for run in range(len(names))]
        refilled = {json.dumps(name) for name, more in zip(names, drew_more, strict=True) if more}
        expected = SAMPLERS if spec["variants"] == SAMPLED else [s for s in SPECS if "sampler" in s]
        assert refilled == {json.dumps(name) for name in expected}, refilled
    if spec.get("mean_field"):
        assert np.isnan(per_run["batch_accuracy"]).all() and (per_run["clip_fraction"] == 0).all()
    if spec.get("theta0") is TAIL_THETA0:
        assert (per_run["p_right_approach"][:: len(spec["seeds"]), 0] == 1.0).all()  # P(incorrect) < 1e-200
