"""The core's contracts: stages and their exact hooks agree, one variant identity, the noise contract,
and an import of the training step that pulls neither pandas nor scipy."""

import itertools
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from toyrl.config import Config, InvalidInput
from toyrl.objective import Variant, from_spec, parse_spec, spec_keys
from toyrl.stages import REGISTRY, parameters, simulated_only, stage_name
from toyrl.train import STREAMS, run_streams
from toyrl.variants import VARIANTS, parse_variant


@pytest.mark.parametrize("name", [n for n, s in REGISTRY["advantage"].items() if not simulated_only(s)])
@pytest.mark.parametrize("group", [2, 3, 8])
def test_each_advantage_hook_is_its_sampled_form(name: str, group: int) -> None:
    """`conditional(r, k', G)` is the advantage `advantages` gives a response with reward r in a group
    with k' other successes, for every r and k' (std_eps 0.01 and 0)."""
    stage = REGISTRY["advantage"][name]
    for std_eps, r, others in itertools.product((0.0, 0.01), (0.0, 1.0), range(group)):
        rewards = np.array([[[r] + [1.0] * others + [0.0] * (group - 1 - others)]])
        sampled = stage.advantages(rewards, std_eps)[0, 0, 0]
        exact = stage.conditional(r, np.array([float(others)]), group, std_eps)[0]
        assert exact == pytest.approx(sampled, rel=1e-12, abs=1e-15), (name, std_eps, r, others)


TOKENS = np.array([[[3.0, 7.0, 1.0], [12.0, 2.0, 5.0]]])
# D_i and n of each normaliser without a batch coupling, from the aggregation table (toyrl.stages),
# at L_norm = 40 on the six responses of TOKENS
HOOKS = {
    "seq_mean_token_mean": (TOKENS, 6.0),
    "length_power": (np.sqrt(TOKENS * 40.0), 6.0),  # alpha 0.5: |o|^(1 - a) L^a
    "seq_mean_token_sum": (np.ones(TOKENS.shape), 6.0),
    "seq_mean_token_sum_norm": (np.full(TOKENS.shape, 40.0), 6.0),
    "token_sum_norm": (np.full(TOKENS.shape, 40.0), 1.0),
    "token_sum": (np.ones(TOKENS.shape), 1.0),
}


def test_every_normaliser_without_a_coupling_has_its_hook_listed() -> None:
    assert sorted(HOOKS) == sorted(n for n, s in REGISTRY["normaliser"].items() if not simulated_only(s))


@pytest.mark.parametrize("name", list(HOOKS))
def test_each_normaliser_hook_is_its_sampled_form(name: str) -> None:
    """The sampled form (`denominators`) and the exact hook (`response_denominator`) each give the
    table's D_i, and n is the table's."""
    stage = REGISTRY["normaliser"][name]
    want, want_n = HOOKS[name]
    denominator, n = stage.denominators(TOKENS, np.ones(TOKENS.shape, dtype=bool), 40.0)
    np.testing.assert_allclose(denominator, want, rtol=1e-15)
    np.testing.assert_allclose(stage.response_denominator(TOKENS, 40.0), want, rtol=1e-15)
    assert n == want_n


def test_every_stage_is_named_and_has_an_exact_hook_or_says_why_not() -> None:
    hooks = {
        "reward": "window",
        "selector": "keeps_truncated",
        "advantage": "conditional",
        "normaliser": "response_denominator",
    }
    for kind, stages in REGISTRY.items():
        for name, stage in stages.items():
            assert stage_name(kind, stage) == name
            if kind in hooks and not simulated_only(stage):
                assert hasattr(stage, hooks[kind]), (kind, name)
    assert simulated_only(REGISTRY["normaliser"]["token_mean"])
    assert simulated_only(REGISTRY["advantage"]["batch_whiten"])
    assert simulated_only(parse_spec("advantage=none,aggregation=token_sum,num_iterations=2").schedule)
    assert not simulated_only(parse_spec("advantage=none,aggregation=token_sum").schedule)


def test_equal_specs_are_one_variant_whatever_their_order_or_spacing() -> None:
    text = (
        "advantage=group_std_sample,aggregation=token_mean,num_iterations=2,epsilon_high=0.28,std_eps=0.0001"
    )
    shuffled = (
        " std_eps = 0.0001 , num_iterations=2,aggregation=token_mean, epsilon_high=0.28,"
        "advantage=group_std_sample"
    )
    a, b = parse_spec(text), parse_spec(shuffled)
    assert a == b and a.name == b.name == text
    assert parse_spec("advantage=none,aggregation=token_mean,mask_truncated=TRUE") == parse_spec(
        "mask_truncated=1,aggregation=token_mean,advantage=none"
    )
    assert a != parse_spec(text.replace("0.28", "0.3"))
    # Defaults left out: a spec of every default names only the two switches.
    assert parse_spec(
        "aggregation=seq_mean_token_sum_norm,advantage=none,epsilon=0.2,beta=0"
    ).spec_text() == ("advantage=none,aggregation=seq_mean_token_sum_norm")


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_named_variant_round_trips_through_its_spec_and_json(name: str) -> None:
    variant = VARIANTS[name]
    again = parse_spec(variant.spec_text())
    assert again.spec() == variant.spec()
    assert all(again.stage(kind) == variant.stage(kind) for kind in REGISTRY)
    restored = Variant.from_json(variant.to_json())
    assert restored == variant  # stages, name, summary and what it stands for
    assert json.loads(variant.to_json())["spec"]["advantage"] == variant.names()["advantage"]
    assert parse_variant(name) is variant


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("advantage=none,std_eps=0.1", "unknown key 'std_eps'"),
        ("advantage=nope", "advantage must be one of"),
        ("advantage=none,num_iterations=0", "num_iterations must be an integer in 1..64"),
        ("advantage=none,num_iterations=two", "num_iterations must be an integer (got 'two')"),
        ("advantage=none,epsilon=11", "epsilon must be a number in (0, 10)"),
        ("advantage=none,beta=-1", "beta must be a number in [0, 1e6)"),
        ("advantage=group_std,std_eps=1", "std_eps must be a number in [0, 1)"),
        ("advantage=none,mask_truncated=maybe", "mask_truncated must be true or false"),
        ("advantage=none,advantage=rloo", "given twice"),
        ("advantage=none,,", "is not key=value"),
        ("advantage=none,epsilon=nan", "must be a finite number"),
    ],
)
def test_bad_specs_are_refused_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(message)):
        parse_spec(text)


def test_spec_keys_come_from_the_registered_stages() -> None:
    keys = spec_keys()
    for key in ("advantage", "aggregation", "mask_truncated", "std_eps", "epsilon", "epsilon_high", "beta"):
        assert key in keys
    assert "num_iterations" in keys and "ddof" not in keys  # ddof is fixed by the advantage's name
    assert parameters(REGISTRY["advantage"]["group_std_sample"]) == {"std_eps": None}
    assert from_spec("x", {"advantage": "rloo", "aggregation": "token_sum"}).names()["advantage"] == "rloo"


def test_new_streams_leave_the_existing_ones_unchanged() -> None:
    """The noise contract: a run's streams are SeedSequence(seed)'s first children, in STREAMS order;
    spawning more children (a new sampler) gives the same first ones, hence the same draws."""
    assert STREAMS[:4] == ("init", "prompts", "approach", "length")  # new streams only at the end
    for seed in (0, 7, 123456):
        now = [stream.random(5) for stream in run_streams(seed)]
        more = np.random.SeedSequence(seed).spawn(len(STREAMS) + 3)
        wider = [np.random.default_rng(child).random(5) for child in more[: len(STREAMS)]]
        for a, b in zip(now, wider, strict=True):
            np.testing.assert_array_equal(a, b)


def test_importing_the_training_step_pulls_neither_pandas_nor_scipy() -> None:
    code = (
        "import sys, toyrl.train, toyrl.stages, toyrl.policy, toyrl.objective, toyrl.variants\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pandas', 'scipy', 'joblib', 'matplotlib'}))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_registered_stage_is_one_class_and_a_repeat_name_is_refused() -> None:
    from toyrl.stages import register

    with pytest.raises(ValueError, match="registered already"):
        register("advantage", "rloo")(type(REGISTRY["advantage"]["rloo"]))


def test_the_configuration_default_std_eps_reaches_the_advantage() -> None:
    from toyrl.stages import std_eps_of

    config = Config(std_eps=0.5)
    assert std_eps_of(REGISTRY["advantage"]["group_std"], config) == 0.5
    assert std_eps_of(parse_spec("advantage=group_std,std_eps=0.001").advantage, config) == 0.001


@pytest.mark.parametrize(
    ("name", "ddof"), [("token_whiten", 0), ("token_whiten_sample", 1), ("reinforce_pp", 1)]
)
def test_token_whitening_weighs_each_response_by_its_tokens(name: str, ddof: int) -> None:
    """REINFORCE++-baseline: the centred rewards, whitened over the batch's tokens, against numpy's
    mean and variance of the flat token vector (each response's advantage repeated |o_i| times);
    verl's Bessel factor n / (n - 1) is rounded to float32 (its masked_var divides integer counts)."""
    rng = np.random.default_rng(8)
    rewards = (rng.random((2, 3, 4)) < 0.5).astype(float)
    tokens = rng.integers(1, 40, size=rewards.shape).astype(float)
    stage = REGISTRY["advantage"][name]
    got = stage.advantages(rewards, 0.0, tokens)
    for run in range(2):
        centred = rewards[run] - (
            rewards[run].mean(axis=-1, keepdims=True) if name != "reinforce_pp" else 0.0
        )
        flat = np.repeat(centred.reshape(-1), tokens[run].reshape(-1).astype(int))
        variance = flat.var()
        if ddof:
            n = len(flat)
            variance = variance * float(np.float32(n) / np.float32(n - 1))
        scale = np.sqrt(variance + 1e-8) if ddof else np.sqrt(max(variance, 1e-8))
        np.testing.assert_allclose(got[run], (centred - flat.mean()) / scale, rtol=1e-12, atol=1e-15)
    # the same rewards with other lengths give other advantages: the tokens matter
    assert not np.allclose(stage.advantages(rewards, 0.0, tokens[::-1].copy()), got)
    assert simulated_only(stage)
