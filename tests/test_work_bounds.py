"""Bounds and the cost estimate count the work of verl's V1 layout (`toyrl.layout`): the ranks'
dealing on every step and the token budget's counts tried on every update, before any work."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from toyrl import layout
from toyrl.cli import app
from toyrl.cli.commands import _announce_cost
from toyrl.config import Config, InvalidInput
from toyrl.experiment import check_experiment, estimated_cost
from toyrl.explore import page_data
from toyrl.train import MAX_LAYOUT_MERGES, layout_work
from toyrl.variants import parse_variant

from .output import error_line
from .test_explorer_node import DRIVER, NODE, needs_node

BUDGETED = "advantage=none,aggregation=seq_mean_token_sum_longest,per_micro_batch=true,token_budget=1501"
VERL = "actor_rollout_ref.actor."


def test_a_token_budget_over_a_large_share_is_refused_before_any_work() -> None:
    """Shares of 16,384 responses under a budget of 1,501 tokens: up to 16,363 counts tried an
    update, each a largest differencing run over the 16,384: refused up front, in one line that
    names the work and the limit; a share of 4,096 (the issue's run) is within it."""
    config = Config(prompts=64, batch_prompts=64, group_size=256)
    variant = parse_variant(BUDGETED)
    dealt, best, worst = layout_work(variant, config)
    assert (dealt, best) == (0, 16_384) and worst == (16_384 - 22 + 1) * 16_384 > MAX_LAYOUT_MERGES
    with pytest.raises(InvalidInput, match=r"^token_budget=1501 lays out shares of 16,384 responses: up to "):
        check_experiment(config, [variant], [0], 1)
    assert check_experiment(config.replace(group_size=64), [variant], [0], 1) == 1
    # more ranks or mini-batches cut smaller shares: within the bound again
    assert check_experiment(config, [parse_variant(BUDGETED + ",mini_batches=4")], [0], 1) == 1


@pytest.mark.parametrize(
    "command",
    [
        ["run", "--variant", BUDGETED, "--prompts", "64", "--batch-prompts", "64", "--group-size", "256"],
        [
            "check",
            "--trainer",
            "verl",
            "--set",
            "algorithm.adv_estimator=grpo",
            "--set",
            f"{VERL}loss_agg_mode=seq-mean-token-sum-norm",
            "--set",
            f"{VERL}use_dynamic_bsz=true",
            "--set",
            "trainer.n_gpus_per_node=1",
            "--prompts",
            "64",
            "--batch-prompts",
            "64",
            "--group-size",
            "1024",  # its 4 mini-batches: shares of 16,384
        ],
    ],
    ids=["run", "check verl use_dynamic_bsz"],
)
def test_the_commands_refuse_the_layout_s_work_in_one_line(command: list[str], tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    extra = ["--out", str(out)] if command[0] == "run" else []
    result = CliRunner().invoke(app, [*command, "--steps", "2", "--seeds", "2", *extra])
    assert result.exit_code == 2, result.output
    assert "merges an update; the limit is 100,000,000" in error_line(result.stderr)
    assert not out.exists()


def test_the_estimate_counts_the_ranks_dealing_on_every_step() -> None:
    """ranks=4096 at 512,000 responses in 5 mini-batches: dealing the batch to the ranks is a
    largest differencing run over all of them on every step (seconds each, a merge a response),
    which the estimate once left out ('roughly 31 s' for about 45 minutes): it now counts at least
    a microsecond a response a step more than the same runs without ranks. With one mini-batch
    and no normaliser taken on micro-batches the dealing decides nothing and is not done."""
    config = Config(prompts=8000, batch_prompts=8000, group_size=64, steps=200)
    plain, _, _ = estimated_cost(config, [parse_variant("advantage=none,mini_batches=5")], 1)
    ranked, _, _ = estimated_cost(config, [parse_variant("advantage=none,mini_batches=5,ranks=4096")], 1)
    assert ranked - plain >= 1e-6 * 512_000 * 201
    one, _, _ = estimated_cost(config, [parse_variant("advantage=none")], 1)
    undealt, _, _ = estimated_cost(config, [parse_variant("advantage=none,ranks=4096")], 1)
    assert undealt == one


def test_the_announcement_says_what_the_token_budget_may_take_at_worst(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The issue's run: one try of the budget an update is quick, every count it may try is not;
    the announcement gives both, before the run."""
    config = Config(batch_prompts=64, group_size=64, steps=2)
    _announce_cost("toyrl run", config, [parse_variant(BUDGETED)], 1, False, 1)
    line = " ".join(capsys.readouterr().err.split())
    assert "toyrl run: 1 runs x 3 steps: roughly" in line
    assert "s more, the token budget's layout at worst" in line


# --- the page: the same layout bound, and bounds by memory and by a step's time, before allocating --


def _node(data: dict[str, Any], expression: str) -> Any:
    """The JSON value of `expression` under node after the page's simulator (tests/sim_node.js),
    with the garbage collector exposed, so that what a run holds can be measured. V8 runs
    single-threaded: its collector's background threads, which lag on a loaded machine, would
    otherwise leave garbage counted after `gc()` returns (measured under load: twice the heap)."""
    assert NODE is not None
    answer = subprocess.run(
        [NODE, "--expose-gc", "--single-threaded", str(DRIVER)],
        input=json.dumps({"data": data, "expression": expression}),
        capture_output=True,
        text=True,
        timeout=900,
    )
    return json.loads(answer.stdout)


@pytest.fixture(scope="module")
def data() -> dict[str, Any]:
    return page_data()


ARTICLE_FOUR = ["grpo", "dr_grpo", "std_only", "length_only"]


@needs_node
@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (  # the link: 500,000 runs within both counts, about 5.4 GB in a tab
            {"variants": ARTICLE_FOUR, "seeds": 125_000, "batch_prompts": 1, "group_size": 2, "steps": 1},
            "500,000 runs x 2 steps would hold about 6,",
        ),
        (  # the other link: 21-48 s a step without a message
            {"variants": ARTICLE_FOUR, "seeds": 16, "cap": 10_000_000, "mean_field": True},
            "a step of 64 runs would take about ",
        ),
        (
            {"variants": [BUDGETED], "prompts": 64, "batch_prompts": 64, "group_size": 256, "steps": 2},
            "token_budget=1501 lays out shares of 16,384 responses: up to 268,091,392 merges an update; the "
            "limit is 100,000,000",
        ),
    ],
    ids=["500,000 runs", "mean field at a cap of 10,000,000", "token budget over 16,384 responses"],
)
def test_the_page_refuses_what_it_cannot_hold_before_allocating(
    data: dict[str, Any], spec: dict[str, Any], words: str
) -> None:
    """One input error naming the estimate and the page's bound, thrown before the runs are built:
    the heap is what it was (a few MB of the simulator's own)."""
    expression = (
        "(() => { gc(); const before = process.memoryUsage().heapUsed; let error = null;"
        f" try {{ toyrl.start({json.dumps(spec)}); }}"
        " catch (e) { error = [e.message, e instanceof toyrl.InputError]; }"
        " gc(); return JSON.stringify([error, process.memoryUsage().heapUsed - before]); })()"
    )
    (message, input_error), grown = _node(data, expression)
    assert input_error and words in message and "\n" not in message, message
    assert grown < 20e6
    if "merges" in words:  # Python's line, word for word
        config = Config(prompts=64, batch_prompts=64, group_size=256, steps=2)
        with pytest.raises(InvalidInput) as refused:
            check_experiment(config, [parse_variant(BUDGETED)], [0], 1)
        assert message == str(refused.value)


@needs_node
@pytest.mark.parametrize(
    "spec",
    [
        {"variants": ARTICLE_FOUR, "seeds": 6, "steps": 400},
        {"variants": ARTICLE_FOUR, "seeds": 2000, "batch_prompts": 1, "group_size": 2, "steps": 10},
        {
            "variants": ["grpo"],
            "seeds": 100,
            "steps": 5,
            "prompts": 64,
            "batch_prompts": 64,
            "group_size": 150,
        },
        {"variants": ["grpo"], "seeds": 20, "steps": 5, "prompts": 10_000},
        {"variants": ["grpo"], "seeds": 2, "steps": 5000, "mean_field": True},
        {"variants": ["grpo"], "seeds": 4, "steps": 5, "cap": 1_000_000, "mean_field": True},
    ],
    ids=["article", "many runs", "large batches", "many prompts", "long", "mean field, large cap"],
)
def test_the_page_s_memory_estimate_covers_what_its_runs_hold(
    data: dict[str, Any], spec: dict[str, Any]
) -> None:
    """What a run holds after its first steps (heap and array buffers, measured by node after a
    collection) is within `footprint`'s estimate, and the estimate at most three times it and 2 MB
    (it counts a step's scratch too, freed by the time of the measurement): the
    bound the page holds by memory is the memory it uses (not a count of rows only: 500,000 runs
    of 2 rows were 5.4 GB)."""
    expression = (
        f"(() => {{ const spec = {json.dumps(spec)}; gc(); const m0 = process.memoryUsage();"
        " const run = toyrl.start(spec); run.advance(2); gc(); const m1 = process.memoryUsage();"
        " const used = m1.heapUsed + m1.arrayBuffers - m0.heapUsed - m0.arrayBuffers;"
        " return JSON.stringify([toyrl.footprint(spec).bytes, used, run.t]); })()"
    )
    estimate, used, t = _node(data, expression)
    assert t == 2
    assert used <= estimate <= 3 * used + 2e6, (estimate, used)


@needs_node
def test_the_page_s_layout_agrees_with_python_s_on_larger_shares(data: dict[str, Any]) -> None:
    """sim.js's largest differencing method and lower bound against toyrl.layout's on shares of up
    to 400 sequences of the toy's shape, where its merges take the fast paths (few non-empty parts)."""
    rng = np.random.default_rng(4)
    cases = []
    for _ in range(12):
        n = int(rng.integers(100, 400))
        seq = np.where(rng.random(n) < 0.4, 1501, rng.integers(2, 400, size=n)).tolist()
        cases.append((seq, int(rng.integers(1, n + 1)), 1501 + int(rng.integers(0, 1500))))
    expression = (
        "JSON.stringify("
        + json.dumps(cases)
        + ".map(([seq, k, b]) => [toyrl.layout.balancedPartitions(seq, k, false), "
        "toyrl.layout.fewestParts(seq, b), toyrl.layout.tokenBudgetParts([seq], b)[0]]))"
    )
    for (seq, k, budget), (parts, fewest, budgeted) in zip(cases, _node(data, expression), strict=True):
        assert parts == layout.balanced_partitions([layout.workload(s) for s in seq], k, False)
        assert fewest == layout.fewest_parts(seq, budget)
        assert budgeted == layout.token_budget_parts([seq], budget)[0]
