"""toyrl.policy_compiled: the compiled loops of a sampled step give the numpy code's bits.

Each twin (sample_batch, policy_gradient's two forms, PPO's clip, Adam, the batch statistics) is
compared with the numpy code it replaces (TOYRL_KERNELS=numpy) on shapes around the pairwise sum's
boundaries (7, 8, 9, 16, 17, 129 elements) and on extreme values; runs through the CLI write the same
bytes on either path; the machine code holds no fused multiply-add."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toyrl import kernels, policy
from toyrl.config import Config
from toyrl.policy import Batch, Coefficients, TokenTable
from toyrl.stages import PPOClip
from toyrl.stages.objective import Update
from toyrl.train import Adam, batch_statistics

from .test_kernels import simd_settings
from .test_kernels_compiled import (
    READ_CODE,
    _module_attributes,
    _numba_or_skip,
    assert_no_fused_multiply_add,
    compiled_code,
    csv_on_path,
)

ROOT = Path(__file__).resolve().parents[1]
# The module's twins of the numpy code's functions, each called through `toyrl.kernels.compiled_module`.
TWINS = ("sample", "on_policy_gradient", "token_gradient", "ppo_clip", "adam", "batch_statistics", "finite")
PPO4 = (
    "advantage=group_std_sample,aggregation=token_mean,num_iterations=4,epsilon_high=0.28,"
    "mask_truncated=True,std_eps=1e-06"
)  # scripts/bench_core.py's 4-epoch PPO preset
SIZES = [1, 2, 7, 8, 9, 16, 17, 64, 129]  # the pairwise sum's cases: < 8, 8 + remainder, > 128
SHAPES = [(runs, prompts, group) for runs in (1, 3) for prompts in SIZES for group in SIZES]


@pytest.fixture(scope="module")
def compiled() -> types.ModuleType:
    _numba_or_skip()
    from toyrl import policy_compiled

    return policy_compiled


def on_path(monkeypatch: pytest.MonkeyPatch, mode: str, call: Any) -> Any:
    monkeypatch.setenv(kernels.SWITCH, mode)
    return call()


def both_paths(monkeypatch: pytest.MonkeyPatch, call: Any) -> tuple[Any, Any]:
    """call() with the compiled path, then with numpy's code (nan and inf are among the inputs)."""
    with np.errstate(all="ignore"):
        got = on_path(monkeypatch, "compiled", call)
        return got, on_path(monkeypatch, "numpy", call)


def assert_same(got: Any, want: Any, what: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, what
    bits = got.view(np.uint64) if got.dtype == np.float64 else got
    expected = want.view(np.uint64) if want.dtype == np.float64 else want
    differ = np.flatnonzero(bits.reshape(-1) != expected.reshape(-1))
    if differ.size:
        first = int(differ[0])
        one, other = got.reshape(-1)[first], want.reshape(-1)[first]
        pytest.fail(f"{what}: {differ.size} of {got.size} differ, first {one!r} != {other!r}")


def policy_theta(rng: np.random.Generator, runs: int, prompts: int, extreme: bool) -> np.ndarray:
    """theta [runs, prompts + 2]: ordinary logits, or extreme ones (past the score's exact switch at
    12, softplus's 37, exp's underflow below -745, signed zeros)."""
    theta = np.clip(rng.normal(0.0, 3.0, (runs, prompts + 2)), -11.0, 11.0)
    theta[:, -2:] = rng.normal(-4.0, 2.0, (runs, 2))
    if extreme:
        edges = [0.0, -0.0, 12.5, 38.0, 40.0, -38.0, 800.0, -750.0, -800.0, 1e6, -1e6, 5e-324]
        theta.reshape(-1)[: len(edges)] = edges[: theta.size]
        theta[0, -2:] = [-750.0, 40.0]  # a branch that never stops (rate 0), one that always does
    return theta


def draw(rng: np.random.Generator, shape: tuple[int, int, int], prompts: int) -> tuple[np.ndarray, ...]:
    runs, batch_prompts, _ = shape
    prompt_index = np.stack([rng.permutation(prompts)[:batch_prompts] for _ in range(runs)])
    uniform = rng.uniform(0.0, 1.0, shape)
    exponential = rng.exponential(1.0, shape)
    edges = min(3, uniform.size)
    uniform.reshape(-1)[:edges] = [0.0, 1.0, 0.5][:edges]
    exponential.reshape(-1)[:edges] = [0.0, 1e-300, 800.0][:edges]
    return prompt_index, uniform, exponential


def batch_of(rng: np.random.Generator, theta: np.ndarray, shape: tuple[int, int, int], cap: int) -> Batch:
    prompt_index, uniform, exponential = draw(rng, shape, theta.shape[1] - 2)
    return policy.sample_batch(theta, prompt_index, uniform, exponential, cap)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("extreme", [False, True], ids=["ordinary", "extreme"])
def test_sample_batch_gives_numpy_s_draws(
    shape: tuple[int, int, int], extreme: bool, compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a token table (a step's draw) and without (a sampler's refill), non-contiguous noise as a
    step's blocks give it, caps that truncate and that do not."""
    rng = np.random.default_rng(sum(shape) + extreme)
    prompts = max(shape[1], 5)
    theta = policy_theta(rng, shape[0], prompts, extreme)
    prompt_index, uniform, exponential = draw(rng, shape, prompts)
    uniform, exponential = (np.moveaxis(np.stack([a, a]), 0, 1)[:, 1] for a in (uniform, exponential))
    table = TokenTable.of(theta, rates=True)
    for cap in (1, 7, 1500):
        for given in (table, None):
            got, want = both_paths(
                monkeypatch,
                lambda c=cap, t=given: policy.sample_batch(theta, prompt_index, uniform, exponential, c, t),
            )
            for field in ("prompt_index", "right", "length", "stopped"):
                assert_same(getattr(got, field), getattr(want, field), f"{field}, cap {cap}")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("extreme", [False, True], ids=["ordinary", "extreme"])
def test_policy_gradient_gives_numpy_s_bits(
    shape: tuple[int, int, int], extreme: bool, compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both forms (every token at its response's weight; a coefficient per token kind), with and
    without n, weights of every sign and magnitude, zeros of both signs and infinities."""
    rng = np.random.default_rng(100 + sum(shape) + extreme)
    prompts = max(shape[1], 5)
    theta = policy_theta(rng, shape[0], prompts, extreme)
    monkeypatch.setenv(kernels.SWITCH, "numpy")
    batch = batch_of(rng, theta, shape, 20)
    table = TokenTable.of(theta)
    assert table.extreme == extreme

    def weight() -> np.ndarray:
        values = rng.normal(0.0, 1.0, shape) * np.exp(rng.uniform(-30.0, 30.0, shape))
        edges = min(4, values.size)
        values.reshape(-1)[:edges] = [0.0, -0.0, 1e300, -1e-300][:edges]
        return values

    n = rng.uniform(0.5, 100.0, shape[0])
    cases = [
        Coefficients(weight()),
        Coefficients(weight(), n=n),
        Coefficients(weight(), weight(), weight()),
        Coefficients(weight(), weight(), weight(), n),
        Coefficients(np.zeros(shape), np.zeros(shape), -np.zeros(shape)),
        Coefficients(weight()[..., :1]),  # broadcast over the group, as numpy does
    ]
    if extreme:
        infinite = weight()
        infinite.reshape(-1)[::5] = np.inf
        cases.append(Coefficients(infinite, n=n))
    for index, coefficients in enumerate(cases):
        got, want = both_paths(monkeypatch, lambda c=coefficients: policy.policy_gradient(c, batch, table))
        assert_same(got, want, f"case {index}")


def test_policy_gradient_on_a_batch_s_own_logits(
    compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An epoch's later updates: the table of the batch's own B + 2 logits, whose prompt index is a
    broadcast (read-only, stride 0) array."""
    rng = np.random.default_rng(3)
    theta = policy_theta(rng, 4, 64, False)
    monkeypatch.setenv(kernels.SWITCH, "numpy")
    own = policy.OwnLogits.of(batch_of(rng, theta, (4, 16, 8), 1500), 66)
    table = own.table(theta + rng.normal(0.0, 0.1, theta.shape))
    coefficients = Coefficients(*(rng.normal(0.0, 1.0, (4, 16, 8)) for _ in range(3)))
    got, want = both_paths(monkeypatch, lambda: policy.policy_gradient(coefficients, own.batch, table))
    assert_same(got, want, "own logits")


@pytest.mark.parametrize("shape", [(1, 1, 2), (3, 7, 9), (2, 16, 8), (2, 17, 129)], ids=str)
@pytest.mark.parametrize("beta", [None, 0.04], ids=["no_kl", "kl"])
def test_ppo_clip_gives_numpy_s_coefficients(
    shape: tuple[int, int, int],
    beta: float | None,
    compiled: types.ModuleType,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PPO's clip (DAPO's clip-higher, dual-clip) at ratios on both sides of every bound, exactly on
    them, 0, nan and inf; advantages of both signs and 0; responses in and out of the loss."""
    rng = np.random.default_rng(sum(shape))
    runs = shape[0]
    theta = policy_theta(rng, runs, max(shape[1], 5), False)
    monkeypatch.setenv(kernels.SWITCH, "numpy")
    own = policy.OwnLogits.of(batch_of(rng, theta, shape, 20), theta.shape[1])
    columns = shape[1] + 2

    def ratios() -> np.ndarray:
        values = rng.uniform(0.5, 4.0, (runs, columns))
        edges = [0.8, 1.28, 3.0, 0.0, np.nan, np.inf, 1.0, np.nextafter(1.28, 2.0)]
        values.reshape(-1)[: len(edges)] = edges[: values.size]
        return values

    advantage = rng.normal(0.0, 1.0, shape)
    advantage.reshape(-1)[::3] = 0.0
    counts = np.empty((3, *shape))
    counts[0], counts[1], counts[2] = 1.0, own.batch.length - own.batch.stopped, own.batch.stopped
    update = Update(
        own.batch,
        advantage,
        rng.uniform(0.0, 1.0, shape) < 0.8,
        rng.uniform(0.0, 0.01, shape),
        counts,
        ratios(),
        ratios(),
        None if beta is None else rng.normal(0.0, 1.0, (runs, columns)),
        None if beta is None else rng.normal(0.0, 1.0, (runs, columns)),
    )
    for objective in (PPOClip(), PPOClip(epsilon=0.2, epsilon_high=0.28, dual_clip=3.0)):
        got, want = both_paths(monkeypatch, lambda o=objective: o.coefficients(update, beta))
        for kind in ("approach", "non_stop", "stop"):
            assert_same(getattr(got[0], kind), getattr(want[0], kind), f"{objective}, {kind}")
        assert_same(got[1], want[1], f"{objective}, clipped tokens")


def test_adam_gives_numpy_s_steps(compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """Adam's moments and parameters over steps of gradients from 1e-300 to 1e150, zeros of both
    signs, on a chunk's view of the runs' parameters."""
    rng = np.random.default_rng(11)
    config = Config(lr=0.05, adam_beta1=0.8)
    start = rng.normal(0.0, 1.0, (5, 9))
    states = {}
    for mode in ("compiled", "numpy"):
        monkeypatch.setenv(kernels.SWITCH, mode)
        stepper = np.random.default_rng(12)
        whole = start.copy()
        theta = whole[1:4]  # a chunk's runs: a view
        adam = Adam(theta, config)
        for _ in range(6):
            grad = stepper.normal(0.0, 1.0, theta.shape) * np.exp(stepper.uniform(-690.0, 345.0, theta.shape))
            grad.reshape(-1)[:2] = [0.0, -0.0]
            adam.step(theta, grad)
        states[mode] = (whole, adam.moment1, adam.moment2)
    for got, want, what in zip(states["compiled"], states["numpy"], ("theta", "m1", "m2"), strict=True):
        assert_same(got, want, what)


@pytest.mark.parametrize("shape", [(1, 1, 1, 2), (3, 2, 7, 9), (50, 4, 16, 8), (2, 3, 17, 129)], ids=str)
def test_batch_statistics_give_numpy_s_bits(
    shape: tuple[int, ...], compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks of steps x runs: lengths, correctness with all-correct and all-wrong groups (NaN means),
    gradients of every magnitude."""
    rng = np.random.default_rng(sum(shape))
    length = rng.integers(1, 1501, shape).astype(np.float64)
    rewards = (rng.uniform(0.0, 1.0, shape) < 0.4).astype(np.float64)
    rewards[0, 0] = 0.0
    rewards[-1, -1, 0] = 1.0
    grad = rng.normal(0.0, 1.0, (*shape[:2], 66)) * np.exp(rng.uniform(-300.0, 300.0, (*shape[:2], 66)))
    got, want = both_paths(monkeypatch, lambda: batch_statistics(length, rewards, grad))
    assert list(got) == list(want)
    for name in want:
        assert_same(got[name], want[name], name)


@pytest.mark.parametrize(
    ("row", "column", "value", "where"),
    [
        (0, 0, 0.0, "theta"),
        (1, 3, np.nan, "theta"),
        (2, 8, -np.inf, "theta"),
        (1, 0, 1e155, "grad"),
        (2, 2, np.inf, "grad"),
    ],
)
def test_check_finite_as_numpy_s(
    row: int,
    column: int,
    value: float,
    where: str,
    compiled: types.ModuleType,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Finite policies and gradients pass; a non-finite logit, gradient or squared gradient (Adam's
    second moment) stops the run with the same message on either path."""
    from toyrl.train import Diverged, check_finite
    from toyrl.variants import parse_variant

    theta, grad = np.zeros((3, 9)), np.full((3, 9), 1e150)
    (theta if where == "theta" else grad)[row, column] = value
    runs = [(parse_variant("dr_grpo"), seed) for seed in range(3)]
    messages = []
    for mode in ("compiled", "numpy"):
        monkeypatch.setenv(kernels.SWITCH, mode)
        try:
            check_finite(4, theta, grad, runs, Config())
            messages.append("")
        except Diverged as error:
            messages.append(str(error))
    assert messages[0] == messages[1]
    assert (messages[0] == "") == (value == 0.0), messages[0]


@pytest.mark.parametrize("n", [*range(0, 300), 511, 512, 513, 1024, 4096, 10_001])
def test_sums_are_numpy_s(n: int, compiled: types.ModuleType) -> None:
    """The pairwise sum of a contiguous axis, 0.0 plus numpy's pairwise order, over a wide range of
    magnitudes (where any other order rounds differently), signed zeros and infinities."""
    rng = np.random.default_rng(n)
    values = rng.normal(0.0, 1.0, n) * np.exp(rng.uniform(-40.0, 40.0, n))
    assert_same(compiled._sum(values, n), values.sum(), f"{n} values")
    assert_same(compiled._sum(-np.zeros(n), n), (-np.zeros(n)).sum(), f"{n} negative zeros")
    if n:
        values[n // 2] = np.inf
        assert_same(compiled._sum(values, n), values.sum(), f"{n} values and inf")


def test_the_compiled_path_runs_the_twins(
    compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With TOYRL_KERNELS=compiled a step calls the twins (so the comparisons above compare them);
    with numpy it never does."""
    calls: list[str] = []

    def counting(name: str) -> Any:
        def call(*args: Any) -> Any:
            calls.append(name)
            return getattr(compiled, name)(*args)

        return call

    twins = TWINS
    counted = types.ModuleType("counted_twins")
    for name in twins:
        setattr(counted, name, counting(name))
    real = kernels._twin_module
    monkeypatch.setattr(
        kernels, "_twin_module", lambda name: counted if name == policy.COMPILED else real(name)
    )
    from toyrl.experiment import simulate_runs
    from toyrl.variants import parse_variant

    runs = [(parse_variant("dr_grpo"), 0), (parse_variant(PPO4), 1)]
    monkeypatch.setenv(kernels.SWITCH, "numpy")
    simulate_runs(Config(steps=2), runs)
    assert calls == []
    monkeypatch.setenv(kernels.SWITCH, "compiled")
    simulate_runs(Config(steps=2), runs)
    assert set(calls) == set(twins)


@pytest.mark.parametrize(
    ("variant", "extra"),
    [("all", ["--seeds", "2", "--steps", "50"]), (PPO4, ["--seeds", "3", "--steps", "50"])],
    ids=["article", "ppo4"],
)
def test_runs_write_the_same_bytes_with_either_path(
    variant: str, extra: list[str], tmp_path: Path, compiled: types.ModuleType
) -> None:
    """The article's four variants and a 4-epoch PPO preset: the same CSV, byte for byte."""
    numpy_bytes = csv_on_path(tmp_path, "numpy", ["--variant", variant, *extra])
    assert len(numpy_bytes) > 10_000
    assert csv_on_path(tmp_path, "compiled", ["--variant", variant, *extra]) == numpy_bytes


_ASSEMBLY_SCRIPT = (
    r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from toyrl.config import Config
from toyrl.experiment import simulate_runs
from toyrl.variants import parse_variant
from toyrl import policy_compiled
runs = [(parse_variant("dr_grpo"), 0), (parse_variant(sys.argv[2]), 1)]
simulate_runs(Config(steps=2, batch_prompts=17, group_size=17), runs)  # TOYRL_KERNELS=compiled
import numpy as np
policy_compiled._sum(np.ones(1000), 1000)
compiled = policy_compiled  # its own functions (numpy's sums: test_kernels_compiled.py)
"""
    + READ_CODE
)


def test_compiled_loops_hold_no_fused_multiply_add(tmp_path: Path, compiled: types.ModuleType) -> None:
    """Every function of the module, compiled afresh for a step's calls: no FMA instruction, no
    `contract` flag in the IR (as tests/test_kernels_compiled.py checks the kernels)."""
    found = compiled_code(_ASSEMBLY_SCRIPT, tmp_path, PPO4, TOYRL_KERNELS="compiled")
    assert {*TWINS, "_sum", "_gradient"} <= set(found)
    assert_no_fused_multiply_add(found)


def test_compiled_loops_call_only_exact_functions() -> None:
    """Only correctly rounded or exact operations (floor, sqrt, conversions), read with Python's
    grammar, as tests/test_kernels_compiled.py reads the kernels; no `**`."""
    source = (ROOT / "toyrl" / "policy_compiled.py").read_text()
    allowed = {
        "np.floor",
        "np.sqrt",
        "np.isfinite",
        "np.int64",
        "np.empty",
        "np.zeros",
        "np.nan",
        "np.inf",
        "numba.njit",
    }
    used = _module_attributes(source, {"math", "np", "numba"})
    assert used <= allowed, sorted(used - allowed)
    assert not any(
        isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) for node in ast.walk(ast.parse(source))
    )


_GENERIC_SCRIPT = r"""
import os, sys
import numba
sys.path.insert(0, sys.argv[1])
from toyrl.config import Config
from toyrl.experiment import simulate_runs
from toyrl.variants import parse_variant
variants = ("grpo", "dr_grpo", sys.argv[2], "kl=k3,beta=0.04,num_iterations=2")
runs = [(parse_variant(v), s) for v in variants for s in range(2)]
frames = {}
for mode in ("compiled", "numpy"):
    os.environ["TOYRL_KERNELS"] = mode
    frames[mode] = simulate_runs(Config(steps=30), runs).to_csv()
print(numba.config.CPU_NAME, frames["compiled"] == frames["numpy"], len(frames["numpy"]))
"""


def test_same_bits_on_numba_s_generic_cpu(tmp_path: Path, compiled: types.ModuleType) -> None:
    """The loops compiled for numba's generic x86-64 (no AVX, no FMA) instead of this CPU: a
    simulation of the article's, PPO and KL variants gives numpy's numbers."""
    env = dict(os.environ, NUMBA_CPU_NAME="generic", NUMBA_CACHE_DIR=str(tmp_path))
    proc = subprocess.run(
        [sys.executable, "-c", _GENERIC_SCRIPT, str(ROOT), PPO4],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cpu, same, size = proc.stdout.split()
    assert (cpu, same) == ("generic", "True") and int(size) > 10_000


def test_same_bits_under_every_numpy_simd_setting(compiled: types.ModuleType) -> None:
    """numpy's side (its sums, its elementwise loops) under each NPY_DISABLE_CPU_FEATURES setting,
    down to baseline only (tests/test_kernels.py's settings): the article's, PPO and KL variants
    simulated both ways give the same CSV, and the setting took effect."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES")
    }
    settings = simd_settings()
    assert len(settings) >= 2, settings
    probe = (
        "from numpy._core import _multiarray_umath as mu; "
        "print(*[f for f in mu.__cpu_dispatch__ if mu.__cpu_features__.get(f)])"
    )
    for setting in settings:
        run = dict(env, NPY_DISABLE_CPU_FEATURES=setting)
        proc = subprocess.run(
            [sys.executable, "-c", _GENERIC_SCRIPT, str(ROOT), PPO4],
            env=run,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        assert proc.returncode == 0, f"NPY_DISABLE_CPU_FEATURES={setting!r}: {proc.stderr[-3000:]}"
        assert proc.stdout.split()[1] == "True", (setting, proc.stdout)
        enabled = subprocess.run(
            [sys.executable, "-c", probe], env=run, capture_output=True, text=True, timeout=600
        )
        assert not set(setting.split()) & set(enabled.stdout.split()), (setting, enabled.stdout)
