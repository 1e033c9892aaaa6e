"""The numeric path computes with IEEE-754 basic operations and toyrl's own kernels only.

Every number toyrl writes must be a function of + - * /, sqrt, the PCG64 stream and
`toyrl.kernels` (docs/reproducibility.md): numpy's exp, log, log1p, expm1, logaddexp and power
pick their kernels by CPU, the C library's pow and BLAS's sums round as each platform's do, and
numpy's ziggurat variates call the C library. This test reads the source of the numeric path and
fails on any such call, so that none comes back. Plotting (`toyrl.plots`) may use numpy freely:
it draws numbers, it does not report them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The modules and scripts whose numbers are written to results, the page or the terminal.
NUMERIC_PATH = sorted(
    [path for path in (ROOT / "toyrl").rglob("*.py") if path.name not in {"plots.py", "kernels.py"}]
    + [
        ROOT / "scripts" / name
        for name in (
            "families_study.py",
            "init_sensitivity.py",
            "presets_study.py",
            "regression_fixture.py",
            "seed_study.py",
            "trainer_defaults_study.py",
        )
    ]
)
FORBIDDEN_NUMPY = {
    "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "logaddexp", "logaddexp2", "power",
    "float_power", "sin", "cos", "tan", "tanh", "sinh", "cosh", "arctan", "arctan2", "hypot", "cbrt",
    "dot", "vdot", "inner", "outer", "matmul", "tensordot", "einsum", "linalg",
}  # fmt: skip
FORBIDDEN_MATH = {"exp", "expm1", "log", "log1p", "log2", "log10", "pow", "lgamma", "gamma", "erf", "erfc"}
# Variates other than the raw stream and numpy's documented uniform conversion (`toyrl.noise`).
FORBIDDEN_DRAWS = {
    "standard_normal", "normal", "standard_exponential", "exponential", "geometric", "integers",
    "choice", "permutation", "shuffle", "binomial", "poisson", "gamma", "beta", "uniform",
}  # fmt: skip


def offences(path: Path) -> list[str]:
    """Each forbidden call of the file, "line: what", in order of lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        where = getattr(node, "lineno", 0)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module, name = node.value.id, node.attr
            if module in {"np", "numpy"} and name in FORBIDDEN_NUMPY:
                found.append((where, f"np.{name}"))
            if module == "math" and name in FORBIDDEN_MATH:
                found.append((where, f"math.{name}"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            owner = node.func.value
            is_noise_module = isinstance(owner, ast.Name) and owner.id == "noise"
            if name in FORBIDDEN_DRAWS and not is_noise_module and not path.name == "noise.py":
                found.append((where, f".{name}() (draw through toyrl.noise)"))
            if name == "random" and path.name != "noise.py" and not is_noise_module:
                found.append((where, ".random() (draw through toyrl.noise)"))
            if name == "argsort" and not any(
                k.arg == "kind" and isinstance(k.value, ast.Constant) and k.value.value == "stable"
                for k in node.keywords
            ):
                found.append((where, "argsort without kind='stable'"))
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "scipy":
            found.append((where, "from scipy"))
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] == "scipy" for alias in node.names):
            found.append((where, "import scipy"))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            found.append((where, "@ (BLAS)"))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            # Only constant powers of constants (2**63, 2.0**-52: exact) are left to Python.
            constant = isinstance(node.left, ast.Constant) and isinstance(
                node.right, ast.Constant | ast.UnaryOp
            )
            if not constant:
                found.append((where, "** (the C library's pow)"))
    return [f"{line}: {what}" for line, what in sorted(found, key=lambda item: item[0])]


def test_the_numeric_path_is_listed() -> None:
    names = {
        path.relative_to(ROOT / "toyrl").as_posix() for path in NUMERIC_PATH if ROOT / "toyrl" in path.parents
    }
    kinds = {f"stages/{kind}.py" for kind in ("advantage", "kl", "normaliser", "objective", "sampler")}
    assert {"policy.py", "train.py", "expected.py", "noise.py", "bias.py", *kinds} <= names
    assert all(path.is_file() for path in NUMERIC_PATH)


@pytest.mark.parametrize("path", NUMERIC_PATH, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_platform_arithmetic_in_the_numeric_path(path: Path) -> None:
    assert offences(path) == []


def test_the_scan_finds_what_it_looks_for(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "import numpy as np\nimport math\nfrom scipy.special import expit\n"
        "a = np.exp(x)\nb = np.linalg.norm(x)\nc = u @ v\nd = x ** 3\ne = math.log(2)\n"
        "f = rng.standard_normal(3)\ng = rng.random(3)\nh = x.argsort()\nk = 2**63\n"
        "m = noise.uniform(rng, 3)\nn = x.argsort(kind='stable')\n"
    )
    assert [line.split(": ", 1)[1] for line in offences(source)] == [
        "from scipy",
        "np.exp",
        "np.linalg",
        "@ (BLAS)",
        "** (the C library's pow)",
        "math.log",
        ".standard_normal() (draw through toyrl.noise)",
        ".random() (draw through toyrl.noise)",
        "argsort without kind='stable'",
    ]
