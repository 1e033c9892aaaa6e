"""toyrl.kernels_compiled: every compiled kernel gives numpy's kernel's bits (on this CPU and on numba's
generic one), its machine code holds no fused multiply-add, and TOYRL_KERNELS chooses the path."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from toyrl import kernels
from toyrl.config import InvalidInput

from .output import error_line
from .test_kernels import EDGES, SPECIALS, UNARY, _neighbours

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "toyrl" / "kernels_compiled.py"


def _numba_or_skip() -> types.ModuleType:
    try:
        import numba
    except ImportError:
        if os.environ.get("CI"):
            raise RuntimeError("CI tests the compiled kernels: the test extra installs numba") from None
        pytest.skip("numba is not installed: the compiled kernels cannot be run here")
    return numba


@pytest.fixture(scope="module")
def compiled() -> types.ModuleType:
    _numba_or_skip()
    from toyrl import kernels_compiled

    return kernels_compiled


@pytest.fixture
def numpy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """toyrl.kernels' public functions run their numpy code."""
    monkeypatch.setenv(kernels.SWITCH, "numpy")


@pytest.fixture
def fresh_dispatch(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The dispatcher as in a new process (nothing imported, nothing counted), restored afterwards."""
    loads = (kernels._compiled_module, kernels._twin_module)
    for load in loads:
        load.cache_clear()
    monkeypatch.setattr(kernels, "_saving", 0.0)
    yield
    for load in loads:
        load.cache_clear()


# ----------------------------------------------------------------------------------------------------
# The same bits.


def _bits(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def assert_same_bits(got: Any, want: Any, arguments: tuple[np.ndarray, ...], name: str) -> None:
    assert np.shape(got) == np.shape(want), name
    bad = np.nonzero(_bits(got).reshape(-1) != _bits(want).reshape(-1))[0]
    if bad.size:
        i = int(bad[0])
        at = ", ".join(repr(float(np.broadcast_to(a, np.shape(want)).reshape(-1)[i])) for a in arguments)
        pytest.fail(
            f"{name}({at}): compiled {np.reshape(got, -1)[i]!r} != numpy {np.reshape(want, -1)[i]!r}; "
            f"{bad.size} of {np.size(want)} differ"
        )


def every_double(rng: np.random.Generator, n: int) -> np.ndarray:
    """n doubles with uniformly random bits: every sign and binade, subnormals, infinities and nans with
    any payload (about 1 in 2000)."""
    return rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False).view(np.float64)


def edge_cases() -> np.ndarray:
    """tests/test_kernels.py's edges (with their neighbours, both signs) and special-value inputs."""
    specials = [x for cases in SPECIALS.values() for x, _ in cases]
    edges = _neighbours([*EDGES, *specials])
    return np.concatenate([edges, -edges, [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0]])


def inputs(name: str, n: int = 1_000_000, seed: int = 0) -> np.ndarray:
    """About n inputs: half over the whole double range, half over the kernel's interesting range."""
    rng = np.random.default_rng(seed + UNARY.index(name))
    if name == "normal_quantile":
        interesting = [rng.uniform(0.0, 1.0, n // 4), np.exp(rng.uniform(-745.0, 0.0, n // 4))]
    elif name in ("log", "log1p"):
        interesting = [rng.uniform(-1.0, 3.0, n // 4), np.exp(rng.uniform(-745.0, 709.0, n // 4))]
    else:
        interesting = [rng.uniform(-40.0, 40.0, n // 4), rng.uniform(-750.0, 750.0, n // 4)]
    return np.concatenate([every_double(rng, n // 2), *interesting, edge_cases()])


@pytest.mark.parametrize("name", UNARY)
def test_unary_kernels_give_numpy_s_bits(name: str, compiled: types.ModuleType, numpy_path: None) -> None:
    x = inputs(name)
    assert_same_bits(getattr(compiled, name)(x), getattr(kernels, name)(x), (x,), name)


def test_power_gives_numpy_s_bits(compiled: types.ModuleType, numpy_path: None) -> None:
    rng = np.random.default_rng(7)
    n = 250_000
    x = np.concatenate(
        [
            np.abs(every_double(rng, n)),
            rng.uniform(0.0, 100.0, n),
            1.0 + rng.uniform(-1e-9, 1e-9, n // 4),
            rng.integers(1, 1_000_001, n // 4).astype(np.float64),
        ]
    )
    y = np.concatenate(
        [
            rng.uniform(-2.0, 2.0, n),
            every_double(rng, n),
            rng.uniform(-1e11, 1e11, n // 4),
            rng.uniform(0.0, 1.0, n // 4),
        ]
    )
    assert_same_bits(compiled.power(x, y), kernels.power(x, y), (x, y), "power")
    # Every pair of special values and edges (signed zeros, odd and even integers, infinities, nan).
    special = np.concatenate(
        [edge_cases(), [3.0, -3.0, 2.0**53 - 1, 2.0**53 + 2, -2.5, 0.5, 1024.0, -1074.0]]
    )
    xs, ys = special[:, None], special[None, :]
    assert_same_bits(compiled.power(xs, ys), kernels.power(xs, ys), (xs, ys), "power")


TABLE_EXTREMES = [0.0, -0.0, 37.0, 37.5, -37.5, 709.0, -745.5, -746.0, 1e6, -1e6, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("shape", [(1_000_000,), (24, 66), (3, 2), (0, 4)])
def test_pairs_give_numpy_s_bits(
    shape: tuple[int, ...], compiled: types.ModuleType, numpy_path: None
) -> None:
    """expit_pair, and expit_pair_softplus on a token table's shapes, with both kernels' clamps."""
    size = int(np.prod(shape))
    x = inputs("expit", size)[:size].reshape(shape)
    x.reshape(-1)[: len(TABLE_EXTREMES)] = TABLE_EXTREMES[:size]
    for got, want in zip(compiled.expit_pair(x), kernels.expit_pair(x), strict=True):
        assert_same_bits(got, want, (x,), "expit_pair")
    if len(shape) == 2:
        x[:, -1] = np.resize(TABLE_EXTREMES, shape[0])
        pieces = zip(compiled.expit_pair_softplus(x, 2), kernels.expit_pair_softplus(x, 2), strict=True)
        for got, want in pieces:
            assert_same_bits(got, want, (x,), "expit_pair_softplus")


def test_noise_transforms_give_numpy_s_bits(compiled: types.ModuleType, numpy_path: None) -> None:
    """toyrl.noise's open uniforms and exponentials from raw 64-bit outputs: 4 million random ones
    and the edges of the shift (all zeros, all ones, around 2^12 and 2^63), the same bits as numpy's
    (`noise._open`, `kernels.log`); and the draws of whole streams the same either way."""
    from toyrl import noise

    rng = np.random.default_rng(11)
    edges = [0, 1, 2**12 - 1, 2**12, 2**12 + 1, 2**63 - 1, 2**63, 2**64 - 2**12 - 1, 2**64 - 2**12, 2**64 - 1]
    raw = np.concatenate(
        [np.array(edges, dtype=np.uint64), rng.bit_generator.random_raw(4_000_000).astype(np.uint64)]
    )
    uniforms = noise._open(raw)
    assert_same_bits(compiled.open_uniform(raw), uniforms, (raw.view(np.float64),), "open_uniform")
    assert_same_bits(
        compiled.standard_exponential(raw), -kernels.log(uniforms), (raw.view(np.float64),), "exponential"
    )
    streams = [np.random.default_rng(seed) for seed in range(3)]
    want = noise.standard_exponential(streams, (5, 7)), noise.open_uniform(streams, (4,))
    streams = [np.random.default_rng(seed) for seed in range(3)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(kernels.SWITCH, "compiled")
        got = noise.standard_exponential(streams, (5, 7)), noise.open_uniform(streams, (4,))
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and np.array_equal(_bits(g), _bits(w))


def test_shapes_and_scalars_as_numpy_s(compiled: types.ModuleType, numpy_path: None) -> None:
    """The compiled functions take what the numpy ones take and return the same types and shapes."""
    for name in UNARY:
        fn, reference = getattr(compiled, name), getattr(kernels, name)
        for argument in (
            0.25,
            np.float64(0.25),
            np.array(0.25),
            [0.25, 0.5],
            np.empty((0, 3)),
            np.ones((2, 3))[:, ::2],
        ):
            got, want = fn(argument), reference(argument)
            assert type(got) is type(want) and np.shape(got) == np.shape(want), (name, argument)
    got = compiled.power(np.array([[0.5], [2.0]]), np.array([np.nan, -np.inf, 0.0, 3.0, -1.0]))
    assert got.shape == (2, 5)
    assert isinstance(compiled.power(2.0, 0.5), np.float64)
    assert all(isinstance(part, np.float64) for part in compiled.expit_pair(0.5))


_DIGEST_SCRIPT = r"""
import json, sys
import numba
import numpy as np
sys.path.insert(0, sys.argv[1])
from toyrl import kernels, kernels_compiled
from tests.test_kernels_compiled import inputs, UNARY, _bits
differ = {}
for name in UNARY:
    x = inputs(name, 200_000, seed=1)
    got, want = getattr(kernels_compiled, name)(x), getattr(kernels, name)(x)
    differ[name] = int(np.count_nonzero(got.view(np.uint64) != want.view(np.uint64)))
x = inputs("expit", 200_000, seed=2)
got = kernels_compiled.expit_pair_softplus(x.reshape(-1, 2), 1)
want = kernels.expit_pair_softplus(x.reshape(-1, 2), 1)
differ["expit_pair_softplus"] = sum(int(np.count_nonzero(_bits(g) != _bits(w))) for g, w in zip(got, want))
y = inputs("exp", 200_000, seed=3) / 100
got, want = kernels_compiled.power(np.abs(x[: len(y)]), y), kernels.power(np.abs(x[: len(y)]), y)
differ["power"] = int(np.count_nonzero(got.view(np.uint64) != want.view(np.uint64)))
print(json.dumps({"cpu": numba.config.CPU_NAME, "differ": differ}))
"""


def on_generic_cpu(script: str, **env: str) -> Any:
    """What `script` prints last, as JSON, run in a fresh process with the checkout's path and numba
    compiling for its generic x86-64 (no AVX, no FMA) instead of this CPU, with `env` set."""
    proc = subprocess.run(
        [sys.executable, "-c", script, str(ROOT)],
        env=dict(os.environ, NUMBA_CPU_NAME="generic", **env),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def csv_on_path(tmp_path: Path, mode: str, arguments: list[str]) -> bytes:
    """The results CSV of `toyrl run ARGUMENTS`, run in a fresh process in `tmp_path` with
    TOYRL_KERNELS=mode."""
    out = tmp_path / f"{mode}.csv"
    proc = subprocess.run(
        [sys.executable, "-m", "toyrl.cli", "run", *arguments, "--out", str(out), "-q"],
        env=dict(os.environ, TOYRL_KERNELS=mode),
        capture_output=True,
        text=True,
        timeout=900,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return out.read_bytes()


def test_same_bits_on_numba_s_generic_cpu(compiled: types.ModuleType) -> None:
    """Compiled for numba's generic x86-64 (no AVX, no FMA) instead of this CPU: the same bits."""
    result = on_generic_cpu(_DIGEST_SCRIPT, TOYRL_KERNELS="numpy")
    assert result["cpu"] == "generic"
    assert result["differ"] == dict.fromkeys(result["differ"], 0), result["differ"]


# ----------------------------------------------------------------------------------------------------
# No fused multiply-add in the machine code; no transcendental library call in the source.

# x86's FMA3/FMA4 mnemonics (vfmadd231sd, vfnmsub132pd, ...) and AArch64's (fmadd, fnmsub, fmla, fmls).
FMA = re.compile(r"\b(vfn?m(add|sub)\w*|fn?m(add|sub)|fml[as])\b", re.IGNORECASE)


# The tail of every assembly-reading script: each compiled function of the module bound to `compiled`
# (its own, not those it imports), its assembly and IR for every signature it was compiled for, as JSON.
READ_CODE = r"""
from numba.core.registry import CPUDispatcher
found = {}
for name, dispatcher in vars(compiled).items():
    if isinstance(dispatcher, CPUDispatcher) and dispatcher.py_func.__module__ == compiled.__name__:
        found[name] = {
            "asm": list(dispatcher.inspect_asm().values()),
            "ir": list(dispatcher.inspect_llvm().values()),
        }
print(json.dumps(found))
"""


def compiled_code(script: str, cache: Path, *args: str, **env: str) -> dict[str, dict[str, list[str]]]:
    """What `script` (ending in READ_CODE) prints, run in a fresh process with the checkout's path and
    `args` as argv, numba's cache in the empty folder `cache` (numba cannot show cached code) and
    the CPU numba finds, with `env` set."""
    environment = dict(os.environ, NUMBA_CACHE_DIR=str(cache), **env)
    environment.pop("NUMBA_CPU_NAME", None)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(ROOT), *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cast(dict[str, dict[str, list[str]]], json.loads(proc.stdout.strip().splitlines()[-1]))


def assert_no_fused_multiply_add(found: dict[str, dict[str, list[str]]]) -> None:
    """Every function compiled, and none with an FMA instruction in its assembly or a `contract` flag
    (LLVM's licence to fuse) in its IR."""
    for name, code in found.items():
        assert code["asm"], f"{name} was never compiled: it is not checked"
        for asm in code["asm"]:
            fused = FMA.search(asm)
            assert fused is None, f"{name}: {fused.group(0) if fused else ''}"
        for ir in code["ir"]:
            assert " contract " not in ir, f"{name}: contract in the IR"


_ASSEMBLY_SCRIPT = (
    r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from toyrl import kernels_compiled as compiled
x = np.linspace(-800.0, 800.0, 101)
for name in ("exp", "expm1", "log", "log1p", "softplus", "log_expit", "expit", "normal_quantile"):
    getattr(compiled, name)(x)
compiled.expit_pair(x)
compiled.expit_pair_softplus(x.reshape(1, -1), 2)
compiled.power(np.abs(x), x / 100)
raw = np.arange(0, 2**64 - 2**54, 2**54, dtype=np.uint64)
compiled.open_uniform(raw)
compiled.standard_exponential(raw)
stack, left = np.empty((compiled.STACK, 3), np.int64), np.empty(compiled.STACK)
compiled.row_sum(np.ones(1000), stack, left)  # inlined where called: compiled alone here, to be read
compiled.pairwise_sum(np.ones(1000), stack, left)
compiled._block_sum(np.ones(100), 0, 100)
"""
    + READ_CODE
)


def test_compiled_code_holds_no_fused_multiply_add(tmp_path: Path, compiled: types.ModuleType) -> None:
    """Every compiled function, compiled afresh (numba cannot show cached code) for the kernels' calls,
    has neither an FMA instruction in its assembly nor a `contract` flag (LLVM's licence to fuse) in
    its IR."""
    found = compiled_code(_ASSEMBLY_SCRIPT, tmp_path)
    assert len(found) > 40 and "_power_loop" in found and "_exp_c" in found
    assert {"_standard_exponential_loop", "row_sum", "pairwise_sum", "_block_sum"} <= set(found)
    assert_no_fused_multiply_add(found)


def test_the_fma_check_finds_contracted_code(compiled: types.ModuleType) -> None:
    """A positive control: the kernels' own polynomial and Dekker's product compiled with
    fastmath={"contract"} emit FMA instructions the check finds, and they change results."""
    numba = _numba_or_skip()
    import llvmlite.binding

    if not {"+fma", "+neon"} & set(llvmlite.binding.get_host_cpu_features().flatten().split(",")):
        pytest.skip("this CPU has no fused multiply-add for the control to emit")
    exp_c = numba.njit(fastmath={"contract"})(compiled._exp_c.py_func)
    two_prod = numba.njit(fastmath={"contract"})(compiled._two_prod.py_func)
    rng = np.random.default_rng(5)
    r = rng.uniform(-0.35, 0.35, 200_000)
    a, b = rng.uniform(0.5, 2.0, 200_000), rng.uniform(0.5, 2.0, 200_000)
    fused = [exp_c(v) for v in r[:20_000]]
    plain = [compiled._exp_c(v) for v in r[:20_000]]
    errors = [
        two_prod(p, q)[1] != compiled._two_prod(p, q)[1] for p, q in zip(a[:20_000], b[:20_000], strict=True)
    ]
    for dispatcher in (exp_c, two_prod):
        assert any(FMA.search(asm) for asm in dispatcher.inspect_asm().values())
    assert fused != plain or any(errors)


def _module_attributes(source: str, modules: set[str]) -> set[str]:
    """The attributes of `modules` (import names) the source uses: math.floor -> "math.floor"."""
    return {
        f"{node.value.id}.{node.attr}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules
    }


ALLOWED = {
    "math.copysign",
    "math.sqrt",
    "np.floor",
    "np.int64",
    "np.nan",
    "np.inf",
    "np.asarray",
    "np.empty",
    "np.ravel",
    "np.broadcast_arrays",
    "np.float64",
    "np.ndarray",
    "numba.uint64",
    "numba.njit",
}


def test_compiled_source_calls_only_exact_functions() -> None:
    """Like the numpy kernels (tests/test_kernels.py's scan), the compiled ones use only correctly
    rounded or exact functions: copysign, sqrt, floor (read with Python's grammar)."""
    used = _module_attributes(SOURCE.read_text(), {"math", "np", "numba"})
    assert used <= ALLOWED, sorted(used - ALLOWED)
    assert _module_attributes("y = np.exp(math.log(x)) + np.floor(x)\n", {"math", "np"}) - ALLOWED == {
        "np.exp",
        "math.log",
    }
    tree = ast.parse(SOURCE.read_text())
    operators = {type(node.op) for node in ast.walk(tree) if isinstance(node, ast.BinOp)}
    assert ast.Pow not in operators


# ----------------------------------------------------------------------------------------------------
# TOYRL_KERNELS.


def _counting_module(calls: list[str]) -> types.ModuleType:
    """A stand-in for toyrl.kernels_compiled that records each call and answers like numpy."""
    fake = types.ModuleType("fake_compiled")
    for name in kernels.__all__:
        numpy_kernel = getattr(kernels, name).__wrapped__

        def call(*args: Any, _name: str = name, _kernel: Callable[..., Any] = numpy_kernel) -> Any:
            calls.append(_name)
            return _kernel(*args)

        setattr(fake, name, call)
    from toyrl import noise

    def transform(name: str, numpy_transform: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def call(raw: Any) -> Any:
            calls.append(name)
            return numpy_transform(raw)

        return call

    fake.open_uniform = transform("open_uniform", noise._open)  # type: ignore[attr-defined]
    fake.standard_exponential = transform(  # type: ignore[attr-defined]
        "standard_exponential", lambda raw: -kernels.log.__wrapped__(noise._open(raw))
    )
    return fake


def test_the_switch_chooses_the_path(monkeypatch: pytest.MonkeyPatch, fresh_dispatch: None) -> None:
    """numpy: never the compiled module, whatever the work; compiled: always; auto: numpy until the
    calls made would have repaid the start-up, then compiled; a simulation's every kernel call
    follows the switch."""
    from toyrl.config import Config
    from toyrl.experiment import simulate_runs
    from toyrl.variants import parse_variant

    calls: list[str] = []
    monkeypatch.setattr(kernels, "_compiled_module", lambda: _counting_module(calls))
    x = np.linspace(-5.0, 5.0, 1000)
    runs = [(parse_variant(v), s) for v in ("grpo", "dr_grpo") for s in range(2)]

    monkeypatch.setenv(kernels.SWITCH, "numpy")
    monkeypatch.setattr(kernels, "_saving", 1e9)
    numpy_frame = simulate_runs(Config(steps=5), runs)
    kernels.exp(x)
    assert calls == []

    monkeypatch.setenv(kernels.SWITCH, "compiled")
    compiled_frame = simulate_runs(Config(steps=5), runs)
    assert {"expit_pair_softplus", "softplus", "exp", "normal_quantile", "standard_exponential"} <= set(calls)
    assert compiled_frame.equals(numpy_frame)
    calls.clear()
    assert kernels.expit_pair(0.5) == kernels.expit_pair.__wrapped__(0.5)
    assert kernels.power(2.0, x).tobytes() == kernels.power.__wrapped__(2.0, x).tobytes()
    assert calls == ["expit_pair", "power"]

    calls.clear()
    monkeypatch.setenv(kernels.SWITCH, "auto")
    monkeypatch.setattr(kernels, "_saving", 0.0)
    per_call = kernels.CALL_SAVING + kernels.ELEMENT_SAVING * x.size
    needed = int(np.ceil(kernels.START_UP / per_call))
    for _ in range(needed):
        kernels.exp(x)
    assert calls == []
    kernels.exp(x)
    assert calls == ["exp"]


def test_auto_stays_numpy_without_numba(monkeypatch: pytest.MonkeyPatch, fresh_dispatch: None) -> None:
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba raises ImportError
    monkeypatch.delitem(sys.modules, "toyrl.kernels_compiled", raising=False)
    monkeypatch.setenv(kernels.SWITCH, "auto")
    monkeypatch.setattr(kernels, "_saving", kernels.START_UP)
    x = np.linspace(-5.0, 5.0, 7)
    assert kernels.exp(x).tobytes() == kernels.exp.__wrapped__(x).tobytes()
    assert isinstance(kernels._compiled_module(), str)


def test_compiled_without_numba_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, fresh_dispatch: None
) -> None:
    monkeypatch.setitem(sys.modules, "numba", None)
    monkeypatch.delitem(sys.modules, "toyrl.kernels_compiled", raising=False)
    monkeypatch.setenv(kernels.SWITCH, "compiled")
    with pytest.raises(InvalidInput) as error:
        kernels.exp(1.0)
    message = str(error.value)
    assert "\n" not in message and "TOYRL_KERNELS=compiled needs numba" in message
    assert installs_numba(message)
    monkeypatch.setenv(kernels.SWITCH, "fast")
    with pytest.raises(
        InvalidInput, match=r"^TOYRL_KERNELS must be one of auto, numpy, compiled \(got 'fast'\)$"
    ):
        kernels.exp(1.0)


def test_unusable_numba_is_numpy_for_auto_and_an_error_for_compiled(
    monkeypatch: pytest.MonkeyPatch, fresh_dispatch: None
) -> None:
    """numba present but unable to compile (here: no folder for its cache, which numba reports as a
    RuntimeError while the module is defined): auto keeps numpy's kernels, compiled says why."""
    unusable = types.ModuleType("numba")

    def njit(**options: Any) -> Any:
        raise RuntimeError("cannot cache function '_fmax': no locator available")

    unusable.njit = njit  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "numba", unusable)
    monkeypatch.delitem(sys.modules, "toyrl.kernels_compiled", raising=False)
    monkeypatch.setenv(kernels.SWITCH, "auto")
    monkeypatch.setattr(kernels, "_saving", kernels.START_UP)
    x = np.linspace(-5.0, 5.0, 7)
    assert kernels.exp(x).tobytes() == kernels.exp.__wrapped__(x).tobytes()
    monkeypatch.setenv(kernels.SWITCH, "compiled")
    with pytest.raises(InvalidInput, match="no locator available"):
        kernels.exp(x)


_NO_NUMBA_CLI = r"""
import sys
sys.modules["numba"] = None  # as if numba were not installed
sys.argv = ["toyrl", *sys.argv[1:]]
from toyrl.cli import main
main()
"""


def installs_numba(message: str) -> bool:
    """Whether `message` ends with a command that installs numba: the extra `fast` from a checkout
    (`pip install -e '/path[fast]'`), or numba's own requirement where toyrl is installed from a
    wheel (toyrl.install.hint; a subprocess that runs elsewhere imports the installed copy)."""
    command = message.rpartition("pip install ")[2]
    return command.endswith("[fast]'") or command.startswith("'numba>=")


def test_cli_compiled_without_numba(tmp_path: Path) -> None:
    env = dict(os.environ, TOYRL_KERNELS="compiled")
    out = tmp_path / "run.csv"
    command = [
        sys.executable,
        "-c",
        _NO_NUMBA_CLI,
        "run",
        "--variant",
        "dr_grpo",
        "--seeds",
        "1",
        "--steps",
        "2",
    ]
    proc = subprocess.run(
        [*command, "--out", str(out), "-q"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    line = error_line(proc.stderr)
    assert "TOYRL_KERNELS=compiled needs numba" in line and installs_numba(line)
    assert not out.exists()


def test_import_toyrl_and_help_do_not_import_numba() -> None:
    script = (
        "import sys, toyrl, toyrl.kernels, toyrl.policy, toyrl.experiment\n"
        "toyrl.kernels.expit_pair(0.5)\n"
        "from typer.testing import CliRunner\n"
        "from toyrl.cli import app\n"
        "assert CliRunner().invoke(app, ['--help']).exit_code == 0\n"
        "print('numba' in sys.modules, 'toyrl.kernels_compiled' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != kernels.SWITCH}
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "False"]


def test_run_writes_the_same_bytes_with_either_path(tmp_path: Path, compiled: types.ModuleType) -> None:
    """`toyrl run --variant all --seeds 2 --steps 50`: the same CSV, byte for byte, from numpy's kernels
    and the compiled ones."""
    written = {
        mode: csv_on_path(tmp_path, mode, ["--variant", "all", "--seeds", "2", "--steps", "50"])
        for mode in ("numpy", "compiled")
    }
    assert len(written["numpy"]) > 10_000
    assert written["numpy"] == written["compiled"]
