"""One `Kind` record per kind of stage, in its own module, and everything else read from the records.

Each test changes a record (monkeypatched) and shows the behaviour that depends on it follow: a
spec's default stage and order, the stages a chunk shares, the plugin contract, the exact hooks,
the configuration a stage sees. A view that restated a record would not follow.
"""

import ast
import copy
import dataclasses
import importlib
import pickle
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import pytest

from toyrl.config import Config, InvalidInput
from toyrl.expected import exact_support, expected_update
from toyrl.objective import Variant, parse_spec
from toyrl.plugins import CONTRACTS, LOADED, PROBES, load_plugin, protocol_problem, unload
from toyrl.stages import KIND, KINDS, REGISTRY, Kind, Settings, registry
from toyrl.stages.normaliser import TokenMean, part_denominators, per_micro_batch
from toyrl.train import Plan, chunks_of, initial_theta, run_streams, simulate

ROOT = Path(__file__).resolve().parent.parent
STAGES = ROOT / "toyrl" / "stages"
SMALL = Config(prompts=6, batch_prompts=3, group_size=4, steps=2, cap=20, min_length=3)


def swapped(monkeypatch: pytest.MonkeyPatch, kind: str, **changes: Any) -> Kind:
    """Replace a kind's record by one with `changes` for the test."""
    record = dataclasses.replace(KIND[kind], **changes)
    monkeypatch.setitem(KIND, kind, record)
    return record


@pytest.fixture(autouse=True)
def no_plugin_stays_loaded() -> Any:
    yield
    for plugin in list(LOADED.values()):
        unload(plugin)


def test_every_kind_is_declared_once_in_its_own_module() -> None:
    """Each stages module but the registry declares one `Kind`, `KIND`, named as the module, with
    the module's own Protocol; `toyrl.stages.KIND` holds exactly those, in step order, and the
    registry a table for each; every registered stage is an instance of its kind's Protocol."""
    modules = sorted(p.stem for p in STAGES.glob("*.py") if p.stem not in ("__init__", "registry"))
    declared = {}
    for stem in modules:
        module = importlib.import_module(f"toyrl.stages.{stem}")
        records = [value for value in vars(module).values() if isinstance(value, Kind)]
        assert records == [module.KIND], stem
        assert module.KIND.name == stem and module.KIND.protocol.__module__ == module.__name__
        declared[stem] = module.KIND
    assert KIND == declared and KINDS == tuple(KIND) == tuple(REGISTRY)
    assert KINDS == (
        "reward",
        "selector",
        "advantage",
        "normaliser",
        "objective",
        "kl",
        "schedule",
        "sampler",
    )
    for kind, stages in REGISTRY.items():
        assert stages and KIND[kind].default in stages
        for name, stage in stages.items():
            assert isinstance(stage, KIND[kind].protocol), (kind, name)


@runtime_checkable
class Shaper(Protocol):
    def shape(self, batch: Any) -> Any: ...


SHAPELESS = """
from dataclasses import dataclass
from toyrl.stages import register


@register("shaper", "shapeless")
@dataclass(frozen=True)
class Shapeless:
    def form(self, batch):
        return batch.right
"""


def test_a_kind_declared_by_its_record_alone_takes_stages_and_plugins(tmp_path: Path) -> None:
    """`declare` files a new kind in step order (here first) in the kinds and the registry, once;
    `register` takes its stages then (not before), and a plugin's stage of it is held to its
    Protocol as the eight kinds' are: refused for lacking the Protocol's method."""
    record = Kind(
        name="shaper",
        key="shaper",
        default="plain",
        protocol=Shaper,
        step=-1,
        spec_place=9,
        parameter_place=9,
    )
    with pytest.raises(ValueError, match="no stage kind 'shaper'"):
        registry.register("shaper", "plain")
    registry.declare(record)
    try:
        assert tuple(KIND) == tuple(REGISTRY) == ("shaper", *KINDS)

        @registry.register("shaper", "plain")
        @dataclasses.dataclass(frozen=True)
        class Plain:
            def shape(self, batch: Any) -> Any:
                return batch

        assert isinstance(REGISTRY["shaper"]["plain"], Plain)
        with pytest.raises(ValueError, match="declared already"):
            registry.declare(dataclasses.replace(KIND["reward"]))
        path = tmp_path / "shapeless.py"
        path.write_text(SHAPELESS)
        with pytest.raises(InvalidInput) as error:
            load_plugin(path)
        assert str(error.value) == (
            f"plugin {path}: shaper custom:shapeless: has no shape "
            "(the Shaper protocol of toyrl.stages.shaper)"
        )
        assert list(REGISTRY["shaper"]) == ["plain"] and not LOADED
    finally:
        del KIND["shaper"], REGISTRY["shaper"]
    assert tuple(KIND) == tuple(REGISTRY) == KINDS


def test_a_spec_naming_no_stage_of_a_kind_takes_its_record_s_default(monkeypatch: pytest.MonkeyPatch) -> None:
    swapped(monkeypatch, "sampler", default="filter_groups")
    variant = parse_spec("advantage=none")
    assert variant.sampler == REGISTRY["sampler"]["filter_groups"] == Variant("x").sampler
    assert "sampler" not in variant.spec()  # at its default
    assert parse_spec("advantage=none,sampler=once").spec()["sampler"] == "once"


def test_a_spec_s_order_is_the_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage names in their keys' order (`spec_place`), then parameters by their kind's
    `parameter_place`: the canonical text, a variant's identity, follows the records."""
    spec = "advantage=none,aggregation=length_power,alpha=0.25,objective=gspo,kl=k3,beta=0.1,num_iterations=2"
    assert parse_spec(spec).name == (
        "advantage=none,aggregation=length_power,objective=gspo,num_iterations=2,beta=0.1,alpha=0.25"
    )
    swapped(monkeypatch, "kl", spec_place=KIND["selector"].spec_place)  # before the objective's
    swapped(monkeypatch, "normaliser", parameter_place=-1)
    assert parse_spec(spec).spec_text() == (
        "advantage=none,aggregation=length_power,objective=gspo,alpha=0.25,num_iterations=2,beta=0.1"
    )
    swapped(monkeypatch, "objective", shown=True)  # its key in every spec, even at its default
    assert (
        parse_spec("advantage=none").spec_text()
        == "advantage=none,aggregation=seq_mean_token_sum_norm,objective=ppo_clip"
    )


def test_a_chunk_shares_the_kinds_its_records_say(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs that differ only by their reward share a chunk, each computed with its own reward; a
    record that says a chunk shares the reward splits them, and Plan groups the runs by the
    other kinds only."""
    variants = [parse_spec("advantage=none"), parse_spec("advantage=none,reward=gr3")]
    assert len(chunks_of(variants)) == 1
    assert list(Plan.of(variants).groups) == ["reward", "selector", "advantage", "normaliser"]
    swapped(monkeypatch, "reward", chunk=True)
    assert len(chunks_of(variants)) == 2
    assert list(Plan.of(variants[:1]).groups) == ["selector", "advantage", "normaliser"]
    with pytest.raises(ValueError, match="share their reward, objective, kl, schedule, sampler"):
        Plan.of(variants)


def test_a_stage_sees_its_kind_s_settings_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Settings`: the fields a kind's record declares, read-only; any other an AttributeError
    naming the kind's settings. The window reward's exact hook reads the cap: a record without it
    in its settings stops the exact update there."""
    settings = KIND["reward"].settings_of(SMALL)
    assert (settings.cap, settings.min_length, settings.approach_tokens) == (20, 3, 1)
    with pytest.raises(
        AttributeError,
        match=r"a reward stage sees the configuration's cap, min_length, approach_tokens only, not 'lr'",
    ):
        settings.lr  # noqa: B018
    with pytest.raises(AttributeError, match="read-only"):
        settings.cap = 3
    assert pickle.loads(pickle.dumps(settings)).cap == copy.deepcopy(settings).cap == 20  # a worker's too
    assert KIND["normaliser"].settings_of(SMALL.replace(length_norm=0)).length_norm_value == 20
    with pytest.raises(AttributeError, match="a selector stage sees the configuration's none only"):
        KIND["selector"].settings_of(SMALL).cap  # noqa: B018
    theta = initial_theta(SMALL, run_streams(0)[0])[None]
    assert np.isfinite(expected_update(theta, SMALL, [parse_spec("advantage=none")])).all()
    swapped(monkeypatch, "reward", settings=("min_length", "approach_tokens"))
    with pytest.raises(AttributeError, match="not 'cap'"):
        expected_update(theta, SMALL, [parse_spec("advantage=none")])


PEEKING = """
from dataclasses import dataclass
from toyrl.stages import correct, register


@register("reward", "peeking")
@dataclass(frozen=True)
class Peeking:
    def rewards(self, batch, config):
        return correct(batch, config) * config.lr
"""


def test_a_plugin_stage_that_reads_another_kind_s_setting_is_refused(tmp_path: Path) -> None:
    """A plugin reward reading the learning rate (not a reward's setting) is refused when it loads,
    in one line naming the reward's settings."""
    path = tmp_path / "peeking.py"
    path.write_text(PEEKING)
    with pytest.raises(InvalidInput) as error:
        load_plugin(path)
    assert str(error.value) == (
        f"plugin {path}: reward custom:peeking raises AttributeError: a reward stage sees the "
        "configuration's cap, min_length, approach_tokens only, not 'lr' (toyrl.stages.reward: its Kind's "
        "settings) for a batch of shape (3, 3, 4)"
    )
    assert not LOADED


def test_a_plugin_stage_is_held_to_its_record_s_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    """A record's Protocol is the contract a plugin stage is checked against, with the argument
    its record's `extra_argument` adds for a stage that sets the flag."""

    @runtime_checkable
    class Bonus(Protocol):
        def rewards(self, batch: Any, config: Settings) -> Any: ...
        def bonus(self) -> float: ...

    stage = REGISTRY["reward"]["window"]
    assert protocol_problem("reward", stage) == ""
    swapped(monkeypatch, "reward", protocol=Bonus)
    assert protocol_problem("reward", stage) == "has no bonus (the Bonus protocol of toyrl.stages.reward)"

    @dataclasses.dataclass(frozen=True)
    class ByRewards:
        uses_rewards = True

        def included(self, batch: Any) -> Any:
            return batch.stopped

    assert "it must take (batch, rewards)" in protocol_problem("selector", ByRewards())
    swapped(monkeypatch, "selector", extra_argument=None)
    assert protocol_problem("selector", ByRewards()) == ""


def test_the_exact_update_asks_for_the_hooks_the_records_name(monkeypatch: pytest.MonkeyPatch) -> None:
    variant = parse_spec("advantage=none")
    assert exact_support(variant) == ""
    swapped(monkeypatch, "normaliser", exact_hooks=("response_denominator", "averaged", "variance"))
    assert exact_support(variant) == (
        "normaliser seq_mean_token_sum_norm has no exact hook: it lacks variance"
    )


def test_every_method_a_record_names_has_a_contract_and_every_kind_a_probe() -> None:
    """The plugin contract is the records': every method a kind's record says toyrl calls has
    its check, no check is of a method no kind names, and every kind has a probe."""
    named = {method for kind in KIND.values() for method in kind.calls}
    assert named == set(CONTRACTS)
    assert set(PROBES) == set(KIND)
    for kind in KIND.values():  # the exact hooks that are methods are checked at every call too
        methods = {hook for hook in kind.exact_hooks if hook not in ("averaged", "keeps_truncated")}
        assert methods <= set(kind.calls), kind.name


class OnlyDenominators:
    """A plugin's token mean taken on each micro-batch that defines `denominators` alone."""

    per_micro_batch = True

    def __init__(self) -> None:
        self.calls = 0

    def denominators(self, tokens: Any, included: Any, length_norm: float, members: Any = None) -> Any:
        self.calls += 1
        return TokenMean().denominators(tokens, included, length_norm, members)


def test_a_normaliser_with_denominators_alone_is_taken_once_a_micro_batch() -> None:
    """The normaliser owns how it is taken on one update's part (`part_denominators`): one
    without `micro_denominators` is asked once a micro-batch (and once more for n), and gives the
    bits of the built-in token mean's one pass over every micro-batch."""
    rng = np.random.default_rng(5)
    shape = (2, 3, 4)
    tokens = rng.integers(1, 30, shape).astype(np.float64)
    selected = rng.random(shape) < 0.8
    members = np.ones(shape, bool)
    members[:, 0] = False  # another mini-batch's group
    micro = np.zeros(shape, np.intp)
    micro[:, 1:] = (np.arange(8) // 3).reshape(2, 4)  # the mini-batch's 8 responses: 3, 3 and 2
    parts = (members, micro)
    unequal = np.zeros(2, bool)
    plugin = OnlyDenominators()
    plain = part_denominators(plugin, tokens, selected, 60.0, parts, 2, 3, unequal)
    hooked = part_denominators(TokenMean(per_micro_batch=True), tokens, selected, 60.0, parts, 2, 3, unequal)
    assert plugin.calls == 3 + 1
    assert np.array_equal(plain[0], hooked[0]) and np.array_equal(plain[1], hooked[1])
    inside = members & (micro == 1)
    expected = np.where(selected & inside, tokens, 0).sum(axis=(1, 2))
    assert np.array_equal(plain[0][inside].reshape(2, -1)[:, 0], expected)
    assert np.array_equal(plain[1], np.full(2, 3.0))  # n: one a micro-batch, times their count
    assert per_micro_batch(plugin) and not per_micro_batch(REGISTRY["normaliser"]["prompt_mean"])


def test_the_training_loop_reads_no_normaliser_flag() -> None:
    """toyrl/train.py asks the normaliser (`part_denominators`, `per_micro_batch`) how it is taken
    on micro-batches: nothing in its training loop reads the flags by name (check_variant and
    layout_work, which vet a variant before it runs, aside)."""
    tree = ast.parse((ROOT / "toyrl" / "train.py").read_text())
    vetting = {"check_variant", "layout_work"}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in vetting:
            continue
        for inner in ast.walk(node):
            assert not (
                isinstance(inner, ast.Constant) and inner.value in ("per_micro_batch", "batch_tokens")
            )
            assert not (isinstance(inner, ast.Attribute) and inner.attr == "batch_tokens")
            assert not (isinstance(inner, ast.Name) and inner.id == "_micro_hook")


def test_a_run_with_a_plugin_normaliser_taken_once_a_micro_batch(tmp_path: Path) -> None:
    """End to end: a plugin token mean with denominators alone, per micro-batch, trains to the
    bits of the built-in token_mean with per_micro_batch (its one pass over the micro-batches)."""
    path = tmp_path / "plain_mean.py"
    path.write_text(
        "from dataclasses import dataclass\n"
        "from toyrl.stages import TokenMean, register\n\n\n"
        "@register('normaliser', 'plain_mean')\n"
        "@dataclass(frozen=True)\n"
        "class PlainMean:\n"
        "    per_micro_batch: bool = False\n\n"
        "    def denominators(self, tokens, included, length_norm, members=None):\n"
        "        return TokenMean().denominators(tokens, included, length_norm, members)\n"
    )
    load_plugin(path)
    keys = "mini_batches=2,micro_batches=3,per_micro_batch=true"
    mine = parse_spec(f"advantage=none,aggregation=custom:plain_mean,{keys}")
    built_in = parse_spec(f"advantage=none,aggregation=token_mean,{keys}")
    config = SMALL.replace(batch_prompts=3, group_size=4, steps=3)
    ours, theirs = simulate(config, [(mine, 0)]), simulate(config, [(built_in, 0)])
    for column in ("accuracy", "grad_norm", "length_mean"):
        assert np.array_equal(ours.columns[column], theirs.columns[column]), column
