"""toyrl.expected_compiled: the mean-field sums compiled give numpy's bits (numpy's pairwise row sums,
the sums of `toyrl.expected._length_sums` and `_mean_advantage`, whole expected updates and a mean-field run's
CSV), under every numpy SIMD setting and for numba's generic CPU, with no fused multiply-add in the
machine code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from toyrl import expected, kernels
from toyrl.config import Config
from toyrl.expected import ExactPlan, exact_support
from toyrl.objective import Variant, from_spec
from toyrl.stages import REGISTRY, simulated_only, std_eps_of
from toyrl.variants import ARTICLE, VARIANTS

from .test_kernels import simd_settings
from .test_kernels_compiled import (
    READ_CODE,
    _numba_or_skip,
    assert_no_fused_multiply_add,
    compiled_code,
    csv_on_path,
    on_generic_cpu,
)

ROOT = Path(__file__).resolve().parents[1]

# Row lengths around numpy's pairwise blocks (8 accumulators, 128 per block, halves at multiples of 8).
LENGTHS = [*range(1, 300), 383, 384, 385, 511, 512, 513, 1000, 1500, 4999, 5000, 8191, 8192, 8193, 100_003]


@pytest.fixture(scope="module")
def compiled() -> types.ModuleType:
    _numba_or_skip()
    from toyrl import expected_compiled

    return expected_compiled


def _bits(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def differences(got: Any, want: Any) -> int:
    """How many elements differ in their bits; a nan equals a nan of any sign and payload (which of
    two nans an addition returns is the compiler's choice of operand order, in numpy's C as in numba)."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape
    return int(np.count_nonzero((_bits(got) != _bits(want)) & ~(np.isnan(got) & np.isnan(want))))


def row_values(rng: np.random.Generator, shape: tuple[int, int], special: bool) -> np.ndarray:
    """Values of every magnitude with zeros of both signs and subnormals; with `special`, a few
    infinities and nans too."""
    values = rng.standard_normal(shape) * np.exp2(rng.integers(-1074, 1000, shape))
    kind = rng.integers(0, 10, shape)
    values[kind == 0] = 0.0
    values[kind == 1] = -0.0
    subnormal = kind == 2
    values[subnormal] = rng.integers(-(2**52), 2**52, subnormal.sum()) * 5e-324
    if special:
        where = rng.integers(0, values.size, 3)
        values.reshape(-1)[where] = rng.choice([np.inf, -np.inf, np.nan, -np.nan], 3)
    return values


@np.errstate(all="ignore")  # inf - inf in numpy's sums: nan, as in ours
def row_sum_differences(compiled: types.ModuleType, seed: int) -> dict[str, int]:
    """Rows summed by `row_sums` and by numpy's ``sum(-1)``: the differing sums, by kind of row."""
    rng = np.random.default_rng(seed)
    differ = {"normal": 0, "wide": 0, "special": 0, "many rows": 0, "negative zeros": 0}
    for n in LENGTHS:
        for runs in (1, 3) if n > 5000 else (1, 3, 17):
            for kind, rows in (
                ("normal", rng.standard_normal((runs, n))),
                ("wide", row_values(rng, (runs, n), special=False)),
                ("special", row_values(rng, (runs, n), special=True)),
            ):
                out = np.empty(runs)
                compiled.row_sums(rows, out)
                differ[kind] += differences(out, rows.sum(-1))
    for n in range(1, 40):  # many short rows: numpy's reduction could walk the other axis
        rows = row_values(rng, (4096, n), special=False)
        out = np.empty(len(rows))
        compiled.row_sums(rows, out)
        differ["many rows"] += differences(out, rows.sum(-1))
    zeros = np.full((2, 300), -0.0)  # numpy starts from +0.0: -0.0 + ... + -0.0 is +0.0 there
    out = np.empty(2)
    compiled.row_sums(zeros, out)
    differ["negative zeros"] = differences(out, zeros.sum(-1)) + int(np.signbit(out).any())
    return differ


def test_row_sums_are_numpy_s_pairwise_sums(compiled: types.ModuleType) -> None:
    differ = row_sum_differences(compiled, 0)
    assert differ == dict.fromkeys(differ, 0), differ


_SIMD_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from numpy._core import _multiarray_umath as mu
from toyrl import expected_compiled
from tests.test_expected_compiled import every_difference
differ = every_difference(expected_compiled, 1)
enabled = [f for f in mu.__cpu_dispatch__ if mu.__cpu_features__.get(f)]
print(json.dumps({"differ": differ, "enabled": enabled}))
"""


def test_same_bits_under_every_numpy_simd_setting(compiled: types.ModuleType) -> None:
    """numpy's sums and kernels under each NPY_DISABLE_CPU_FEATURES setting, down to baseline only
    (tests/test_kernels.py's settings; numpy 2.4 names its targets X86_V3, X86_V4, ...)."""
    env_base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NPY_DISABLE_CPU_FEATURES", "NPY_ENABLE_CPU_FEATURES")
    }
    env_base[kernels.SWITCH] = "numpy"
    settings = simd_settings()
    assert len(settings) >= 2, settings
    for setting in settings:
        proc = subprocess.run(
            [sys.executable, "-c", _SIMD_SCRIPT, str(ROOT)],
            env=dict(env_base, NPY_DISABLE_CPU_FEATURES=setting),
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert proc.returncode == 0, f"NPY_DISABLE_CPU_FEATURES={setting!r}: {proc.stderr[-3000:]}"
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert not set(setting.split()) & set(result["enabled"]), result  # the setting took effect
        assert result["differ"] == dict.fromkeys(result["differ"], 0), (setting, result)


# ----------------------------------------------------------------------------------------------------
# The sums over lengths against numpy's (`toyrl.expected._length_sums`).

CAPS = [1, 2, 7, 8, 9, 63, 64, 65, 127, 128, 129, 200, 257, 1000, 1500]
# Stop logits where 1 - sigma rounds to 0 (> 37), the score's sigma(-phi) form (> 12), q^k underflowing
# (-745), and beyond; nan for a run gone wrong.
STOP_LOGITS = [-1e3, -745.5, -745.0, -40.0, -37.5, -12.5, -5.0, 0.0, -0.0, 5.0, 12.0, 12.5, 37.5, 40.0, 745.0]
STOP_LOGITS += [1e3, 1e300, -1e300, np.inf, -np.inf, np.nan]


def stop_logits(rng: np.random.Generator, runs: int) -> np.ndarray:
    logits = np.concatenate([STOP_LOGITS, rng.normal(-5.0, 2.0, runs), rng.uniform(-800.0, 800.0, runs)])
    return rng.permutation(logits)


@np.errstate(all="ignore")  # as in a mean-field run: a logit of inf or nan gives nans, no warning
def length_sum_differences(compiled: types.ModuleType, seed: int) -> dict[str, int]:
    """`branch_sums` against `_length_sums` (numpy's kernels: TOYRL_KERNELS=numpy) on every cap, with
    and without a window, D(k) per length or per run and length, scales 1 or not: differing sums."""
    rng = np.random.default_rng(seed)
    differ: dict[str, int] = {}
    for cap in CAPS:
        logits = stop_logits(rng, 20)
        runs = len(logits)
        k = np.arange(1, cap + 1, dtype=np.float64)
        s = kernels.expit(logits)[:, None]
        for denominators, d_k in (
            ("per length", k + 1.0),
            ("constant", np.full(cap, 777.0)),
            ("per run", rng.uniform(0.5, 3000.0, (runs, cap))),
        ):
            for scale in (np.ones(runs), rng.choice([1.0, 128.0], runs)):
                plan = ExactPlan({}, {}, np.ones(runs, dtype=bool), scale, None)
                windows = [None, (1, cap), (min(cap, 5), cap), (2, max(2, cap // 3)), (cap + 1, cap + 9)]
                for window in windows:
                    got = compiled.branch_sums(logits, d_k, scale, window)
                    want = expected._length_sums(logits, k, s, d_k, plan, window)
                    assert got.keys() == want.keys()
                    key = f"cap {cap}, D {denominators}, window {window is not None}"
                    differ[key] = differ.get(key, 0) + sum(differences(got[n], want[n]) for n in want)
    return differ


def test_branch_sums_are_numpy_s(compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernels.SWITCH, "numpy")
    differ = length_sum_differences(compiled, 0)
    assert len(differ) == 3 * 2 * len(CAPS)
    assert differ == dict.fromkeys(differ, 0), {key: n for key, n in differ.items() if n}


@np.errstate(all="ignore")
def mean_advantage_differences(compiled: types.ModuleType, seed: int) -> dict[str, int]:
    """`mean_advantage` against `toyrl.expected._mean_advantage` (numpy's kernels: TOYRL_KERNELS=numpy)
    for every exact advantage stage, groups of 2 to 40 and success rates of every magnitude, 0, 1, next
    to 1, subnormal and nan: differing means per stage."""
    rng = np.random.default_rng(seed)
    rates = np.concatenate(
        [
            [0.0, 1.0, 0.5, 1.0 - 2.0**-53, 2.0**-1074, 1e-300, np.nan, 0.25, 0.75],
            rng.random(500),
            np.exp(rng.uniform(-745.0, 0.0, 500)),
            1.0 - np.exp(rng.uniform(-37.0, 0.0, 500)),
        ]
    )
    rates = rng.permutation(rates).reshape(3, -1)
    differ = {}
    for name, advantage in REGISTRY["advantage"].items():
        if simulated_only(advantage):
            continue
        std_eps = std_eps_of(advantage, 1e-6)
        differ[name] = 0
        for group in range(2, 41):
            others = np.arange(group, dtype=np.float64)
            values = [advantage.conditional(r, others, group, std_eps) for r in (1.0, 0.0)]
            got = compiled.mean_advantage(others, group - 1, rates, *values)
            want = expected._mean_advantage(rates, group, advantage, std_eps)
            differ[name] += sum(differences(g, w) for g, w in zip(got, want, strict=True))
    return differ


def test_mean_advantages_are_numpy_s(compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernels.SWITCH, "numpy")
    differ = mean_advantage_differences(compiled, 0)
    assert {"group_std", "none", "rloo", "passk"} <= set(differ)
    assert differ == dict.fromkeys(differ, 0), differ


def every_difference(compiled: types.ModuleType, seed: int) -> dict[str, int]:
    """The differing sums of the row sums, the sums over lengths and the mean advantages (with
    TOYRL_KERNELS=numpy)."""
    differ = row_sum_differences(compiled, seed) | length_sum_differences(compiled, seed)
    return differ | mean_advantage_differences(compiled, seed)


# ----------------------------------------------------------------------------------------------------
# Whole expected updates and mean-field runs.

# Stages that no exact-supported preset combines: a power-law denominator, RLOO and pass@k advantages,
# truncated responses masked, |o| = L.
SPECS = [
    {"advantage": "rloo", "aggregation": "length_power", "alpha": 0.5},
    {"advantage": "group_std", "aggregation": "token_sum_norm", "mask_truncated": True},
    {"advantage": "passk", "aggregation": "seq_mean_token_sum"},
    {"advantage": "none", "aggregation": "seq_mean_token_mean", "mask_truncated": True},
]


def exact_variants() -> list[Variant]:
    """Every preset with an exact expected update, and SPECS."""
    presets = [v for v in VARIANTS.values() if not exact_support(v)]
    specs = [from_spec(json.dumps(spec), spec) for spec in SPECS]
    assert all(not exact_support(v) for v in specs)
    return presets + specs


def thetas(config: Config, runs: int, seed: int) -> np.ndarray:
    """Random states [runs, P + 2] with extreme logits: |psi| up to 1e3, stop logits past 37 and -745."""
    rng = np.random.default_rng(seed)
    psi = rng.normal(0.0, 3.0, (runs, config.prompts))
    psi[::3] *= rng.choice([1.0, 20.0, 300.0], (len(psi[::3]), 1))
    psi[1::5, :4] = [1e3, -1e3, 38.0, -745.5]
    extreme = [-1e3, -745.5, -40.0, -37.5, -12.5, 0.0, 5.0, 12.5, 37.5, 40.0, 745.0, 1e3]
    phi = rng.choice(extreme, (runs, 2)) + rng.normal(0.0, 0.5, (runs, 2))
    ordinary = rng.random((runs, 2)) < 0.5  # stop probabilities like the article's
    phi[ordinary] = np.log(rng.uniform(1 / 3000, 1 / 40, ordinary.sum()))
    return np.concatenate([psi, phi], axis=1)


def counting(compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Record the calls of the compiled functions (name, rows), so a test sees the twins ran."""
    calls: list[tuple[str, int]] = []

    def counted(name: str) -> Callable[..., Any]:
        twin: Callable[..., Any] = getattr(compiled, name)

        def call(*args: Any) -> Any:
            calls.append((name, len(args[2] if name == "mean_advantage" else args[0])))
            return twin(*args)

        return call

    for name in ("branch_sums", "mean_advantage"):
        monkeypatch.setattr(compiled, name, counted(name))
    return calls


CONFIGS = [
    Config(),
    Config(cap=77, min_length=9, group_size=5, length_norm=100.0),
    Config(cap=9, min_length=1, group_size=2, count_approach_token=False, prompts=6, batch_prompts=3),
    Config(cap=1, min_length=1, prompts=4, batch_prompts=2),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"cap{c.cap}")
def test_expected_updates_are_numpy_s(
    config: Config, compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`_expected_update` of every exact-supported variant, all in one plan (D(k) per run) and each
    alone (D(k) per length; the article's four as `expected_update`), compiled against numpy."""
    variants = exact_variants()
    calls = counting(compiled, monkeypatch)
    theta = thetas(config, 6 * len(variants), seed=config.cap)
    plans = [(ExactPlan.of(variants * 6, config), theta)]
    plans += [(ExactPlan.of([v] * 6, config), theta[6 * i : 6 * i + 6]) for i, v in enumerate(variants)]
    for plan, rows in plans:
        monkeypatch.setenv(kernels.SWITCH, "numpy")
        want = expected._expected_update(rows, config, plan)
        assert not calls
        monkeypatch.setenv(kernels.SWITCH, "compiled")
        got = expected._expected_update(rows, config, plan)
        advantages = [("mean_advantage", len(rows[plan_rows])) for plan_rows in plan.advantages.values()]
        assert calls == [("branch_sums", len(rows))] * 2 + advantages  # every twin ran
        calls.clear()
        assert np.isfinite(want).mean() > 0.9
        assert differences(got, want) == 0, plan.normalisers
    article = [VARIANTS[name] for name in ARTICLE] * 3
    monkeypatch.setenv(kernels.SWITCH, "numpy")
    want = expected.expected_update(theta[:12], config, article)
    monkeypatch.setenv(kernels.SWITCH, "compiled")
    assert differences(expected.expected_update(theta[:12], config, article), want) == 0


def test_a_mean_field_run_writes_the_same_bytes_with_either_path(
    tmp_path: Path, compiled: types.ModuleType
) -> None:
    """`toyrl run --mean-field`, the article's four and two presets with other normalisers: the same
    CSV, byte for byte, from numpy and from the compiled path."""
    arguments = ["--mean-field", "--variant", "all", "--variant", "verl_token_sum", "--variant", "trl_grpo"]
    arguments += ["--seeds", "2", "--steps", "40", "--cap", "300", "--min-length", "20"]
    written = {mode: csv_on_path(tmp_path, mode, arguments) for mode in ("numpy", "compiled")}
    assert written["numpy"].count(b"\n") > 6 * 2 * 40
    assert written["numpy"] == written["compiled"]


def test_numpy_s_path_never_calls_the_twin(
    compiled: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = counting(compiled, monkeypatch)
    monkeypatch.setenv(kernels.SWITCH, "numpy")
    config = Config(cap=50, min_length=5)
    expected.expected_update(thetas(config, 4, 0), config, [VARIANTS["dr_grpo"]] * 4)
    assert calls == []


# ----------------------------------------------------------------------------------------------------
# The machine code.

_ASSEMBLY_SCRIPT = (
    r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from toyrl import expected_compiled as compiled
logits = np.linspace(-50.0, 50.0, 7)
compiled.branch_sums(logits, np.arange(2.0, 302.0), np.ones(7), (20, 300))
compiled.branch_sums(logits, np.ones((7, 300)), np.full(7, 8.0), None)
compiled.row_sums(np.ones((3, 1000)), np.empty(3))
compiled.mean_advantage(np.arange(8.0), 7, np.linspace(0.0, 1.0, 12).reshape(3, 4), np.ones(8), np.zeros(8))
"""
    + READ_CODE
)


def test_compiled_sums_hold_no_fused_multiply_add(tmp_path: Path, compiled: types.ModuleType) -> None:
    """Every function of the module, compiled afresh (numba cannot show cached code), with the kernels
    it inlines: no FMA instruction in its assembly, no `contract` flag in its IR."""
    found = compiled_code(_ASSEMBLY_SCRIPT, tmp_path)
    # (numpy's sums, which these inline, are toyrl.kernels_compiled's: tests/test_kernels_compiled.py)
    functions = {"_branch_sums", "row_sums", "_mean_advantage"}
    assert functions <= set(found), sorted(found)
    assert_no_fused_multiply_add(found)


_GENERIC_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import numba
from toyrl import expected_compiled
from tests.test_expected_compiled import every_difference
differ = every_difference(expected_compiled, 2)
print(json.dumps({"cpu": numba.config.CPU_NAME, "differ": differ}))
"""


def test_same_bits_on_numba_s_generic_cpu(tmp_path: Path, compiled: types.ModuleType) -> None:
    """Compiled for numba's generic x86-64 (no AVX, no FMA) instead of this CPU: the same bits."""
    result = on_generic_cpu(_GENERIC_SCRIPT, NUMBA_CACHE_DIR=str(tmp_path), TOYRL_KERNELS="numpy")
    assert result["cpu"] == "generic"
    assert result["differ"] == dict.fromkeys(result["differ"], 0), result["differ"]
