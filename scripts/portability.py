"""Regenerate the committed result files under a matrix of numeric environments and compare them to the byte.

    python scripts/portability.py                         # quick mode (the default; for CI)
    python scripts/portability.py --quick --envs native,avx2 --jobs 1
    python scripts/portability.py --full                  # every study in full (for a person)
    python scripts/portability.py --envs oldest --keep    # keep the venvs and the regenerated files

Every number toyrl writes is meant to be the same bits on any CPU, any supported numpy and any OS.
This script checks that on one machine: each environment is a fresh virtual environment (`python -m
venv`, with the interpreter running this script) holding a non-editable install of this checkout (a
snapshot of its working tree, built once into a wheel) and a pinned numpy; every regeneration
command writes into a temporary folder, and every file it writes is compared byte for byte with the
committed one. The environments (`--envs`, default all):

- `native`: the newest numpy the package allows, every SIMD kernel numpy has for this CPU;
- `baseline`: the same venv, numpy's SIMD dispatch limited to its build baseline;
- `avx2`: the same venv, numpy's AVX-512 kernels turned off (AVX2 and below stay);
- `oldest`: the newest patch release of the oldest numpy pyproject.toml allows (`numpy>=X.Y`:
  `numpy==X.Y.*`; pip resolves the other dependencies to releases that accept it, checked with
  `pip check`), every SIMD kernel;
- `newest`: the newest numpy available. Today that is the environment of `native`: when both are
  chosen they share one run.

The SIMD settings are numpy's NPY_DISABLE_CPU_FEATURES, built from what numpy reports at run time in
the venv (its dispatched targets and this CPU's features). numpy 1.26 and 2.x accept a disabled
target while a target that implies it stays on, and then still dispatch to the higher one, so a
setting turns off every dispatched target above the level it keeps (`simd_settings`); the venv's
numpy is asked again under the setting to confirm which targets are on. A setting this CPU cannot
make (no AVX2; no AVX-512 to turn off) is reported as skipped, not failed.

What is regenerated (commands run from a temporary folder, the checkout's scripts by path):

- both modes: `toyrl reproduce` (results/article.*, the figures it draws, final_numbers.md,
  explorer.html), `scripts/regression_fixture.py` (tests/fixtures/), and in full
  `scripts/presets_study.py`, `scripts/trainer_defaults_study.py`, `scripts/seed_study.py`,
  `scripts/verl_width_study.py` and `scripts/gpg_study.py` with its figure (each a few seconds
  to half a minute on 2 cores);
- quick mode (the default, for CI: about 4 minutes for the whole matrix on 2 cores with pip
  installing from its cache, two environments at a time; 6 minutes with `--jobs 1`):
  `scripts/init_sensitivity.py --seeds 6`, whose `six_*` columns and calibration
  over seeds 0-5 are compared cell by cell as text with the committed ones (over 100 seeds it takes
  about a minute); the families study's per-seed values (its `train` of every variant at seeds
  `FAMILY_SEEDS`, and each Monte Carlo variant's cosine at one of its ten seeds) compared with ==
  to results/families.json's `per_seed` values; its figures redrawn from the committed
  families.json (`--plot-only`);
- full mode (for a person: about 14 minutes for the matrix on 2 cores): `scripts/init_sensitivity.py`
  (about a minute) and `scripts/families_study.py` (two to six minutes) in full, every file they
  write compared.

Prints one line per step with the elapsed seconds on stderr, then on stdout a table of every
compared file (or set of values) against every environment, the first difference of each file that
differs (line, column and a short excerpt: never a diff), the committed files no command covered,
and the time each step took. Exits 0 only if every compared file and value is identical, 1
otherwise (or if an environment could not be built), 2 for bad arguments, 130 if interrupted.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: `dependencies_without_tomllib`
    tomllib = None  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENTS = {  # name -> (numpy: "newest" or "oldest", SIMD setting or None for every kernel)
    "native": ("newest", None),
    "baseline": ("newest", "baseline"),
    "avx2": ("newest", "avx2"),
    "oldest": ("oldest", None),
    "newest": ("newest", None),
}
FAMILY_SEEDS = (0, 57, 99)  # quick mode: the families study's seeds regenerated
COMMITTED_FOLDERS = ("results", "figures", "tests/fixtures")  # where the committed outputs live
SNAPSHOT_SKIPPED = {"build", "dist", "node_modules", "__pycache__"}  # besides dot-folders, venvs, egg-info
CLEARED_VARIABLES = (  # never passed to the environments' commands: each is set (or not) here
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "VIRTUAL_ENV",
    "NPY_DISABLE_CPU_FEATURES",
    "NPY_ENABLE_CPU_FEATURES",
)
TIMEOUT = {"quick": 900, "full": 3600}  # seconds for one command before it counts as failed
STOP = threading.Event()  # set on Ctrl-C: no environment starts another command


# --- pure parts (tests/test_portability_script.py) ------------------------------------------------


def project_dependencies(pyproject: str) -> list[str]:
    """The requirement strings of pyproject.toml's [project] dependencies."""
    if tomllib is None:
        return dependencies_without_tomllib(pyproject)
    return list(tomllib.loads(pyproject).get("project", {}).get("dependencies", []))


def dependencies_without_tomllib(pyproject: str) -> list[str]:
    """The same for Python 3.10 (no tomllib): the quoted strings of `dependencies = [...]` in the
    [project] table, up to the bracket that closes it outside quotes (comments skipped)."""
    table = re.search(r"^\[project\][ \t]*$(.*?)(?=^\[)", pyproject + "\n[", re.MULTILINE | re.DOTALL)
    start = table and re.search(r"^dependencies\s*=\s*\[", table.group(1), re.MULTILINE)
    if not table or not start:
        return []
    token = re.compile(r"""\s*(?:"([^"]*)"|'([^']*)'|#[^\n]*|,)""")
    strings, position = [], start.end()
    while match := token.match(table.group(1), position):
        if match.group(1) is not None or match.group(2) is not None:
            strings.append(match.group(1) if match.group(1) is not None else match.group(2))
        position = match.end()
    return strings


def numpy_lower_bound(pyproject: str) -> str:
    """The version X.Y[.Z] of the `numpy>=X.Y` requirement in pyproject.toml's [project] dependencies."""
    for requirement in project_dependencies(pyproject):
        match = re.fullmatch(
            r"\s*numpy\s*(?:\[[^\]]*\])?\s*((?:[<>=!~(][^;]*?)?)\s*(?:;.*)?", requirement, re.IGNORECASE
        )
        if match is None:
            continue
        for clause in match.group(1).strip("()").split(","):
            bound = re.fullmatch(r"\s*>=\s*(\d+(?:\.\d+)*)\s*", clause)
            if bound:
                return bound.group(1)
        raise ValueError(f"pyproject.toml's numpy requirement {requirement!r} has no lower bound (>=)")
    raise ValueError("pyproject.toml's [project] dependencies do not name numpy")


def oldest_numpy_requirement(bound: str) -> str:
    """The requirement for the newest patch release of the oldest allowed numpy: for `numpy>=1.26`,
    'numpy>=1.26,==1.26.*' (1.26.4 today)."""
    parts = bound.split(".")
    minor = parts[1] if len(parts) > 1 else "0"
    return f"numpy>={bound},=={parts[0]}.{minor}.*"


def is_avx512(target: str) -> bool:
    """Whether numpy's dispatch target implies AVX-512F: numpy 2's X86_V4, AVX512_ICL, AVX512_SPR;
    numpy 1.26's AVX512F, AVX512CD, AVX512_SKX, AVX512_CLX, AVX512_CNL, AVX512_ICL, ..."""
    return target.startswith("AVX512") or target == "X86_V4"


@dataclass(frozen=True)
class SimdSetting:
    """NPY_DISABLE_CPU_FEATURES for one setting: the targets turned off, the ones that stay on."""

    disable: tuple[str, ...]
    keep: tuple[str, ...]
    skipped: str = ""  # why this CPU cannot make the setting ('' if it can)


def simd_settings(dispatch: Sequence[str], features: dict[str, bool]) -> dict[str, SimdSetting]:
    """The settings `baseline` and `avx2` from numpy's dispatched targets (`__cpu_dispatch__`, in
    numpy's order) and this CPU's features (`__cpu_features__`).

    Only targets the CPU has are named (the others are off anyway). numpy 1.26 and 2.x turn off just
    the named target and keep dispatching to any target above it, so each setting names every
    dispatched target above the level it keeps: all of them for `baseline`, every AVX-512 one for
    `avx2`. Naming a baseline feature makes numpy raise at import, so none is named.
    """
    found = [target for target in dispatch if features.get(target)]
    baseline = SimdSetting(tuple(found), (), "" if found else "this CPU has nothing above numpy's baseline")
    avx512 = tuple(target for target in found if is_avx512(target))
    if not features.get("AVX2"):
        reason = "this CPU has no AVX2"
    elif not avx512:
        reason = "this CPU has no AVX-512 to turn off (the same as native)"
    else:
        reason = ""
    avx2 = SimdSetting(avx512, tuple(target for target in found if target not in avx512), reason)
    return {"baseline": baseline, "avx2": avx2}


def is_binary(data: bytes) -> bool:
    if b"\0" in data[:8192]:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def excerpt(line: bytes, column: int, width: int = 48) -> str:
    """Up to `width` characters of `line` from a little before `column` (0-based), quoted."""
    text = line.decode("utf-8", errors="replace")
    start = max(0, column - 16)
    piece = text[start : start + width]
    return repr(("…" if start else "") + piece + ("…" if start + width < len(text) else ""))


def first_difference(committed: bytes, fresh: bytes) -> str:
    """'' if the two are equal; else where they first differ. Text: the line and column (1-based),
    how many lines differ, and a short excerpt of each side there. Binary files (PNG): the byte."""
    if committed == fresh:
        return ""
    if is_binary(committed) or is_binary(fresh):
        offset = next(
            (i for i, (a, b) in enumerate(zip(committed, fresh, strict=False)) if a != b),
            min(len(committed), len(fresh)),
        )
        return f"byte {offset:,} differs ({len(committed):,} bytes committed, {len(fresh):,} regenerated)"
    old, new = text_lines(committed), text_lines(fresh)
    shorter = min(len(old), len(new))
    differing = sum(a != b for a, b in zip(old, new, strict=False))
    if len(old) == len(new):
        counts = f"{differing:,} of {len(old):,} lines differ"
    else:
        counts = (
            f"{differing:,} of the first {shorter:,} lines differ; "
            f"{len(old):,} committed, {len(new):,} regenerated"
        )
    for number, (a, b) in enumerate(zip(old, new, strict=False), start=1):
        if a != b:
            column = next(
                (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
            )
            column = len(a[:column].decode("utf-8", errors="replace"))  # in characters
            return (
                f"line {number:,}, column {column + 1} ({counts}): "
                f"committed {excerpt(a, column)}, regenerated {excerpt(b, column)}"
            )
    if len(old) != len(new):
        return f"{len(old):,} lines committed against {len(new):,} regenerated (the first {shorter:,} equal)"
    return "the same lines but for the final newline"


def text_lines(data: bytes) -> list[bytes]:
    """The lines of `data` split at b'\\n' (a final newline ends the last line, it starts no other)."""
    lines = data.split(b"\n")
    return lines[:-1] if lines[-1] == b"" else lines


@dataclass
class Check:
    """One compared item and its outcome: identical, differs, missing, not committed or error."""

    label: str
    status: str
    detail: str = ""


def compare_file(label: str, committed: Path, fresh: Path) -> Check:
    if not committed.is_file():
        return Check(label, "not committed", "written by the command, absent from the checkout")
    if not fresh.is_file():
        return Check(label, "missing", "not written")
    difference = first_difference(committed.read_bytes(), fresh.read_bytes())
    return Check(label, "differs" if difference else "identical", difference)


def compare_family_seeds(committed: dict[str, Any], fresh: dict[str, Any], label: str) -> Check:
    """The regenerated seeds of every variant against families.json's `per_seed` values, with ==.

    `fresh[row]` holds `spec`, `seeds`, `per_seed` ({column: [a value per seed]}) and, for a Monte
    Carlo variant, `cosine_initial` ({"seed": k, "value": cosine}); committed keeps every seed's value
    at its index (`per_seed.<column>[seed]`, `per_seed.cosine_initial[seed]` for seeds 0-9)."""
    differences: list[str] = []
    compared = 0
    for row, entry in committed["variants"].items():
        got = fresh.get(row)
        if got is None:
            differences.append(f"variants.{row}: not regenerated")
            continue
        if got["spec"] != entry["spec"]:
            differences.append(
                f"variants.{row}.spec: committed {entry['spec']!r}, regenerated {got['spec']!r}"
            )
        kept = entry["per_seed"]
        pairs = [
            (f"{column}[{seed}]", kept[column][seed], value)
            for column, values in got["per_seed"].items()
            for seed, value in zip(got["seeds"], values, strict=True)
        ]
        if "cosine_initial" in got:
            seed = got["cosine_initial"]["seed"]
            pairs.append(
                (f"cosine_initial[{seed}]", kept["cosine_initial"][seed], got["cosine_initial"]["value"])
            )
        for key, saved, value in pairs:
            if isinstance(saved, list) and isinstance(value, list) and len(saved) == len(value):
                elements = [(f"{key}[{k}]", a, b) for k, (a, b) in enumerate(zip(saved, value, strict=True))]
            else:  # a single value (or lists of different lengths, compared whole)
                elements = [(key, saved, value)]
            compared += len(elements)
            differences += [
                f"variants.{row}.per_seed.{name}: committed {a!r}, regenerated {b!r}"
                for name, a, b in elements
                if a != b
            ]
    for row in sorted(fresh.keys() - committed["variants"].keys()):
        differences.append(f"variants.{row}: regenerated, not in the committed file")
    if differences:
        shown = differences[0] if len(differences[0]) <= 240 else differences[0][:240] + "…"
        return Check(label, "differs", f"{len(differences)} of {compared:,} values differ; first {shown}")
    return Check(label, "identical", f"{compared:,} values")


INIT_ROW_KEYS = (
    "study",
    "count_approach_token",
    "psi_mean",
    "psi_std",
    "variant",
)  # a row of init_sensitivity.csv


def compare_csv_columns(committed: str, fresh: str, prefix: str, keys: Sequence[str], label: str) -> Check:
    """The cells of the columns named `prefix`... of two CSV texts, as text (so to the bit), after
    checking that both have the same rows (by their `keys` columns) in the same order."""
    old, new = (list(csv.DictReader(io.StringIO(text))) for text in (committed, fresh))
    columns = [column for column in (old[0] if old else {}) if column.startswith(prefix)]
    if not columns:
        return Check(label, "error", f"the committed file has no {prefix}* column")
    rows_old = [[row[key] for key in keys] for row in old]
    rows_new = [[row.get(key) for key in keys] for row in new]
    if rows_old != rows_new:
        return Check(label, "differs", f"other rows: {len(old)} committed, {len(new)} regenerated")
    differences = [
        f"line {number} ({', '.join(a[key] for key in keys)}), {column}: "
        f"committed {a[column]!r}, regenerated {b.get(column)!r}"
        for number, (a, b) in enumerate(zip(old, new, strict=True), start=2)  # line 1: the header
        for column in columns
        if a[column] != b.get(column)
    ]
    compared = len(old) * len(columns)
    if differences:
        return Check(
            label, "differs", f"{len(differences)} of {compared:,} cells differ; first {differences[0]}"
        )
    return Check(label, "identical", f"{compared:,} cells")


def compare_calibration(committed: dict[str, Any], fresh: dict[str, Any], suffix: str, label: str) -> Check:
    """init_sensitivity.json's calibration entries whose key ends with `suffix`, compared with ==."""
    keys = [key for key in committed.get("calibration", {}) if key.endswith(suffix)]
    if not keys:
        return Check(label, "error", f"the committed file has no calibration entry ending {suffix!r}")
    differences = [
        f"calibration[{key!r}]: committed {committed['calibration'][key]}, "
        f"regenerated {fresh.get('calibration', {}).get(key)}"
        for key in keys
        if committed["calibration"][key] != fresh.get("calibration", {}).get(key)
    ]
    if differences:
        return Check(
            label, "differs", f"{len(differences)} of {len(keys)} entries differ; first {differences[0]}"
        )
    return Check(label, "identical", f"{len(keys)} entries")


class Parser(argparse.ArgumentParser):
    """argparse with one line on stderr and exit 2 for bad arguments."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"portability: {message} (see --help)\n")
        raise SystemExit(2)


def environment_list(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise argparse.ArgumentTypeError("name at least one environment")
    unknown = [name for name in names if name not in ENVIRONMENTS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown environment {unknown[0]!r} (known: {', '.join(ENVIRONMENTS)})"
        )
    return list(dict.fromkeys(names))


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = Parser(
        prog="scripts/portability.py",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="the CI subset (the default)")
    mode.add_argument(
        "--full", action="store_true", help="regenerate everything (the families study in full)"
    )
    parser.add_argument(
        "--envs",
        type=environment_list,
        default=list(ENVIRONMENTS),
        metavar="NAMES",
        help=f"comma-separated environments (default all: {','.join(ENVIRONMENTS)})",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=min(2, os.cpu_count() or 1),
        metavar="N",
        help="environments built and run at a time, sharing the cores (default 2, or 1 on one core)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the venvs and regenerated files")
    args = parser.parse_args(argv)
    args.mode = "full" if args.full else "quick"
    return args


# --- the environments ---------------------------------------------------------------------------------


class Log:
    """Progress lines on stderr with the seconds since the start (safe from several threads)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.lock = threading.Lock()

    def __call__(self, message: str) -> None:
        with self.lock:
            print(f"[{time.perf_counter() - self.started:7.1f} s] {message}", file=sys.stderr, flush=True)


class EnvironmentFailure(Exception):
    """A venv that could not be built or a setting numpy would not take: its runs fail."""


def child_environment(disable: Sequence[str] = ()) -> dict[str, str]:
    """This process's environment for a command in a venv, with the SIMD setting's variable."""
    env = {key: value for key, value in os.environ.items() if key not in CLEARED_VARIABLES}
    env["PYTHONNOUSERSITE"] = "1"
    env["MPLBACKEND"] = "Agg"
    if disable:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(disable)
    return env


def last_lines(text: str, count: int = 3) -> str:
    """The last lines of a command's output, pip's warnings left out if anything else is there."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("WARNING:")] or lines
    return " | ".join(lines[-count:]) if lines else "(no output)"


def run(argv: Sequence[str | Path], *, cwd: Path, env: dict[str, str], timeout: float, what: str) -> str:
    """Run a command; its stdout, or EnvironmentFailure with the end of its output."""
    try:
        done = subprocess.run(
            [str(part) for part in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise EnvironmentFailure(f"{what}: no answer in {timeout:.0f} s") from None
    if done.returncode != 0:
        raise EnvironmentFailure(
            f"{what} failed (exit {done.returncode}): {last_lines(done.stderr + done.stdout)}"
        )
    return done.stdout


PROBE = """\
import importlib.metadata, json, sys
from pathlib import Path
import numpy
try:
    from numpy._core import _multiarray_umath as umath
except ImportError:  # numpy 1.x before the _core shim
    from numpy.core import _multiarray_umath as umath
import toyrl
def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
print(json.dumps({
    "python": sys.version.split()[0],
    "versions": {name: version(name) for name in sys.argv[1:]},
    "toyrl": toyrl.__version__,
    "toyrl_installed": Path(toyrl.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()),
    "baseline": list(umath.__cpu_baseline__),
    "dispatch": list(umath.__cpu_dispatch__),
    "features": {name: bool(on) for name, on in umath.__cpu_features__.items()},
}))
"""

FAMILY_SEEDS_HELPER = """\
# The families study's per-seed values at a few seeds (scripts/portability.py, quick mode).
import importlib.util, json, sys
script, out, seeds = sys.argv[1], sys.argv[2], [int(seed) for seed in sys.argv[3].split(",")]
spec = importlib.util.spec_from_file_location("families_study", script)
study = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study)
from toyrl.config import Config
config = Config()
rows = [(row, study.variant_of(row, text)) for row, text, _ in study.FAMILIES]
rows += [(f"alpha_{alpha:.1f}", study.power_variant(alpha)) for alpha in study.ALPHAS]
result, monte_carlo = {}, 0
for row, variant in rows:
    fresh = study.train(variant, seeds, config)
    entry = {"spec": variant.spec_text(), "seeds": seeds}
    entry["per_seed"] = {column: fresh[column].tolist() for column in study.PER_SEED}
    if "cosine_along" in fresh:
        entry["per_seed"]["cosine_along"] = fresh["cosine_along"].tolist()
    else:  # each Monte Carlo variant at another of the study's first MC_SEEDS seeds
        seed = monte_carlo % study.MC_SEEDS
        monte_carlo += 1
        entry["cosine_initial"] = {"seed": seed, "value": study.sampled_mean_update(variant, seed, config)[0]}
    result[row] = entry
with open(out, "w") as file:
    json.dump(result, file)
"""


@dataclass
class Venv:
    key: str  # "newest" or "oldest"
    path: Path
    requirement: str
    probe: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def executable(self, name: str) -> Path:
        folder = self.path / ("Scripts" if os.name == "nt" else "bin")
        return folder / (f"{name}.exe" if os.name == "nt" else name)

    @property
    def python(self) -> Path:
        return self.executable("python")

    def summary(self) -> str:
        versions = self.probe["versions"]
        return (
            f"Python {self.probe['python']}, "
            + ", ".join(f"{name} {version}" for name, version in versions.items())
            + f" (baseline {' '.join(self.probe['baseline'])}; dispatch {' '.join(self.probe['dispatch'])})"
        )


class Venvs:
    """The venvs of one run, each built once on first use (a thread that asks while another builds
    it waits), all installing one wheel of the snapshot, built by the first venv's pip."""

    def __init__(self, work: Path, snapshot: Path, requirements: dict[str, str], log: Log) -> None:
        self.work, self.snapshot, self.requirements, self.log = work, snapshot, requirements, log
        self.dependencies = [
            re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0]
            for requirement in project_dependencies((snapshot / "pyproject.toml").read_text())
        ]
        self.locks = {key: threading.Lock() for key in requirements}
        self.built: dict[str, Venv | EnvironmentFailure] = {}
        self.wheel_lock = threading.Lock()
        self.wheel: Path | None = None

    def get(self, key: str) -> Venv:
        with self.locks[key]:
            if key not in self.built:
                try:
                    self.built[key] = self.build(key)
                except EnvironmentFailure as failure:
                    self.built[key] = failure
                    self.log(f"venv {key}: {failure}")
            venv = self.built[key]
        if isinstance(venv, EnvironmentFailure):
            raise venv
        return venv

    def build_wheel(self, venv: Venv, env: dict[str, str]) -> Path:
        with self.wheel_lock:
            if self.wheel is None:
                started = time.perf_counter()
                folder = self.work / "wheel"
                pip: list[str | Path] = [venv.python, "-m", "pip", "--disable-pip-version-check"]
                run(
                    [*pip, "wheel", "-q", "--no-deps", "-w", folder, self.snapshot],
                    cwd=self.work,
                    env=env,
                    timeout=600,
                    what="building the wheel",
                )
                wheels = sorted(folder.glob("*.whl"))
                if len(wheels) != 1:
                    raise EnvironmentFailure(f"building the wheel gave {len(wheels)} wheels")
                self.wheel = wheels[0]
                self.log(f"wheel {self.wheel.name} built ({time.perf_counter() - started:.1f} s)")
            return self.wheel

    def build(self, key: str) -> Venv:
        started = time.perf_counter()
        requirement = self.requirements[key]
        venv = Venv(key, self.work / f"venv-{key}", requirement)
        env = child_environment()
        self.log(f"venv {key}: creating, then pip install {requirement!r} and the checkout")
        run(
            [sys.executable, "-m", "venv", venv.path],
            cwd=self.work,
            env=env,
            timeout=300,
            what="python -m venv",
        )
        wheel = self.build_wheel(venv, env)
        pip: list[str | Path] = [venv.python, "-m", "pip", "--disable-pip-version-check"]
        # the committed figures' bytes hold under the matplotlib that drew them (tests/figures.json):
        # the machines differ in their CPU and numpy, not in the drawing library
        drawing = json.loads((self.snapshot / "tests" / "figures.json").read_text())["matplotlib"]
        run(
            [*pip, "install", "-q", requirement, f"matplotlib=={drawing}", wheel],
            cwd=self.work,
            env=env,
            timeout=1800,
            what="pip install",
        )
        run([*pip, "check"], cwd=self.work, env=env, timeout=300, what="pip check")
        venv.probe = probe(venv, (), self.work, self.dependencies)
        if not venv.probe["toyrl_installed"]:
            raise EnvironmentFailure("toyrl is imported from outside the venv")
        installed = venv.probe["versions"]["numpy"]
        if key == "oldest" and not requirement_allows(requirement, installed):
            raise EnvironmentFailure(f"pip installed numpy {installed} for {requirement!r}")
        venv.seconds = time.perf_counter() - started
        self.log(f"venv {key}: {venv.summary()} ({venv.seconds:.1f} s)")
        return venv


def requirement_allows(requirement: str, version: str) -> bool:
    """Whether `version` is of the X.Y series of `oldest_numpy_requirement`'s 'numpy>=..,==X.Y.*'."""
    series = re.search(r"==(\d+\.\d+)\.\*", requirement)
    return series is None or version.split(".")[:2] == series.group(1).split(".")


def probe(venv: Venv, disable: Sequence[str], cwd: Path, dependencies: Sequence[str]) -> dict[str, Any]:
    """What numpy reports in the venv under the setting (from a folder outside the checkout, so
    that `import toyrl` finds the installed package)."""
    script = cwd / "probe.py"
    script.write_text(PROBE)
    names = ["numpy", *(name for name in dependencies if name != "numpy")]
    out = run(
        [venv.python, script, *names],
        cwd=cwd,
        env=child_environment(disable),
        timeout=300,
        what="importing numpy and toyrl",
    )
    return json.loads(out.strip().splitlines()[-1])


# --- what is regenerated --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Piece:
    """One regeneration command and what it writes. Fields of words separated by spaces: `argv`, with
    {python}, {toyrl}, {scripts}, {out}, {jobs} and {helper} filled in word by word; `folders`,
    pairs FOLDER:COMMITTED of a folder under {out} whose files are compared with the committed folder's;
    `expected`, the committed files it must write; `inputs`, committed files copied under {out} first;
    `partly`, committed files whose values it compares in part (`COMPARERS[key]`)."""

    key: str
    title: str
    argv: str
    folders: str = ""
    expected: str = ""
    modes: tuple[str, ...] = ("quick", "full")
    inputs: str = ""
    partly: str = ""


def study(
    key: str, script: str, title: str, outputs: str, modes: tuple[str, ...] = ("quick", "full")
) -> Piece:
    argv = f"{{python}} {{scripts}}/{script} --out-dir {{out}}/results --n-jobs {{jobs}}"
    expected = " ".join(f"results/{name}" for name in outputs.split())
    return Piece(key, title, argv, "results:results", expected, modes)


CLONE_DOCS = [
    "README.md",
    "docs/bias.md",
    "docs/variants.md",
    "docs/trainers.md",
    "docs/design.md",
    "docs/reproducibility.md",
    "docs/explorer.md",
]  # toyrl.explore.DOCS's paths (the checkout's toyrl is not imported here: each venv has its own)
FAMILY_FIGURES = "figures/families.png figures/families.svg figures/length_power.png figures/length_power.svg"
SEEDS_TEXT = ", ".join(map(str, FAMILY_SEEDS))
PIECES = [
    Piece(
        "reproduce",
        "toyrl reproduce",
        "{toyrl} reproduce --results-dir {out}/results --figures-dir {out}/figures --quiet",
        "results:results figures:figures",
        "results/article.csv results/article.json figures/final_numbers.md figures/explorer.html",
        # A clone's files the page looks for beside figures/: inside one, its links to them are relative.
        inputs=f"pyproject.toml toyrl/explore.py {' '.join(CLONE_DOCS)}",
    ),
    Piece(
        "fixture",
        "regression fixture",
        "{python} {scripts}/regression_fixture.py --out {out}/fixtures",
        "fixtures:tests/fixtures",
        "tests/fixtures/sampled.csv tests/fixtures/sampled_ramble_tokens.csv tests/fixtures/mean_field.csv",
    ),
    study("presets", "presets_study.py", "presets study", "presets.json presets.md"),
    study(
        "trainer_defaults",
        "trainer_defaults_study.py",
        "trainer defaults study",
        "trainer_defaults.json trainer_defaults.md",
    ),
    study("seed_study", "seed_study.py", "seed study", "seed_study.json seed_study_curves.csv seed_study.md"),
    study("verl_width", "verl_width_study.py", "verl width study", "verl_width.json verl_width.md"),
    Piece(
        "gpg_scale",
        "GPG scale study",
        "{python} {scripts}/gpg_study.py --out-dir {out}/results --figures {out}/figures --n-jobs {jobs}",
        "results:results figures:figures",
        "results/gpg_scale.json results/gpg_scale.md figures/gpg_scale.png figures/gpg_scale.svg",
    ),
    study(
        "init_sensitivity",
        "init_sensitivity.py",
        "init sensitivity study",
        "init_sensitivity.csv init_sensitivity.json init_sensitivity.md",
        modes=("full",),
    ),
    Piece(
        "init_sensitivity_six",
        "init sensitivity study, seeds 0-5",
        "{python} {scripts}/init_sensitivity.py --out-dir {out}/results --seeds 6 --n-jobs 1",
        modes=("quick",),
        partly="results/init_sensitivity.csv results/init_sensitivity.json",
    ),
    Piece(
        "families",
        "families study, 100 seeds",
        "{python} {scripts}/families_study.py --out-dir {out}/results --figures {out}/figures "
        "--n-jobs {jobs}",
        "results:results figures:figures",
        f"results/families.json results/families.md {FAMILY_FIGURES}",
        modes=("full",),
    ),
    Piece(
        "families_seeds",
        f"families study, seeds {SEEDS_TEXT}",
        "{python} {helper} {scripts}/families_study.py {out}/families_seeds.json "
        + ",".join(map(str, FAMILY_SEEDS)),
        modes=("quick",),
        partly="results/families.json",
    ),
    Piece(
        "families_figures",
        "families figures from the committed families.json",
        "{python} {scripts}/families_study.py --plot-only --out-dir {out}/results --figures {out}/figures",
        "figures:figures",
        FAMILY_FIGURES,
        modes=("quick",),
        inputs="results/families.json",
    ),
    Piece(
        "bridge_figures",
        "bridge study's summary and figures from the committed table",
        "{python} {scripts}/bridge_study.py --plot-only --out-dir {out}/results --figures {out}/figures",
        "results:results figures:figures",
        "results/bridge_study.md figures/bridge_study.png figures/bridge_study.svg",
        # the network's numbers need TRL and torch: the table (and the sidecar it rewrites) is the
        # committed one; the summary of every number derived from it, and the figures, regenerated
        inputs="results/bridge_study.csv results/bridge_study.json",
    ),
]
FAMILY_SEEDS_LABEL = f"results/families.json: per-seed values of seeds {SEEDS_TEXT}"
INIT_CSV_LABEL = "results/init_sensitivity.csv: six_* columns (seeds 0-5)"
INIT_JSON_LABEL = "results/init_sensitivity.json: calibration over seeds 0-5"


def compare_families_piece(out: Path, snapshot: Path) -> list[Check]:
    fresh = out / "families_seeds.json"
    if not fresh.is_file():
        return [Check(FAMILY_SEEDS_LABEL, "missing", "not regenerated")]
    committed = json.loads((snapshot / "results" / "families.json").read_text())
    try:
        return [compare_family_seeds(committed, json.loads(fresh.read_text()), FAMILY_SEEDS_LABEL)]
    except (KeyError, IndexError, TypeError) as error:  # a families.json of another layout
        return [Check(FAMILY_SEEDS_LABEL, "error", f"no per-seed value to compare: {error!r}")]


def compare_init_piece(out: Path, snapshot: Path) -> list[Check]:
    fresh, committed = out / "results", snapshot / "results"
    if not (fresh / "init_sensitivity.csv").is_file() or not (fresh / "init_sensitivity.json").is_file():
        return [
            Check(INIT_CSV_LABEL, "missing", "not regenerated"),
            Check(INIT_JSON_LABEL, "missing", "not regenerated"),
        ]
    return [
        compare_csv_columns(
            (committed / "init_sensitivity.csv").read_text(),
            (fresh / "init_sensitivity.csv").read_text(),
            "six_",
            INIT_ROW_KEYS,
            INIT_CSV_LABEL,
        ),
        compare_calibration(
            json.loads((committed / "init_sensitivity.json").read_text()),
            json.loads((fresh / "init_sensitivity.json").read_text()),
            "seeds 0-5",
            INIT_JSON_LABEL,
        ),
    ]


COMPARERS = {"families_seeds": compare_families_piece, "init_sensitivity_six": compare_init_piece}


def run_piece(
    piece: Piece, venv: Venv, env: dict[str, str], out: Path, snapshot: Path, jobs: int, timeout: float
) -> list[Check]:
    """Run one command in the venv (from its output folder) and compare what it wrote with the
    snapshot's committed files."""
    for folder in ("results", "figures", "fixtures"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    inputs = piece.inputs.split()
    for name in inputs:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(snapshot / name, out / name)
    helper = out / "families_seeds.py"
    if "{helper}" in piece.argv:
        helper.write_text(FAMILY_SEEDS_HELPER)
    values = {
        "python": str(venv.python),
        "toyrl": str(venv.executable("toyrl")),
        "scripts": str(snapshot / "scripts"),
        "out": str(out),
        "jobs": str(jobs),
        "helper": str(helper),
    }
    argv = [word.format(**values) for word in piece.argv.split()]
    checks: list[Check] = []
    try:
        run(argv, cwd=out, env=env, timeout=timeout, what=piece.title)
    except EnvironmentFailure as failure:
        checks.append(Check(f"({piece.title})", "error", str(failure)))
    if piece.key in COMPARERS:
        return checks + COMPARERS[piece.key](out, snapshot)
    seen = set()
    for pair in piece.folders.split():
        folder, committed_folder = pair.split(":")
        for path in sorted((out / folder).rglob("*")):
            if not path.is_file() or path.relative_to(out).as_posix() in inputs:
                continue
            label = f"{committed_folder}/{path.relative_to(out / folder).as_posix()}"
            seen.add(label)
            checks.append(compare_file(label, snapshot / label, path))
    checks += [
        Check(label, "missing", "not written") for label in piece.expected.split() if label not in seen
    ]
    return checks


# --- the matrix -------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One run: an environment (or several sharing it) with its checks and the seconds of each step."""

    names: list[str]
    venv_key: str
    setting: str | None
    checks: list[Check] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    pieces: list[str] = field(default_factory=list)
    note: str = ""
    skipped: str = ""
    failure: str = ""


def copy_checkout(source: Path, target: Path) -> int:
    """Copy the working tree but .git and other dot-folders, venvs, build outputs and caches; the
    number of files copied."""

    def ignored(folder: str, names: list[str]) -> set[str]:
        return {
            name
            for name in names
            if name.startswith(".")
            or name in SNAPSHOT_SKIPPED
            or name.endswith(".egg-info")
            or (Path(folder) / name / "pyvenv.cfg").is_file()
        }

    shutil.copytree(source, target, ignore=ignored)
    return sum(1 for path in target.rglob("*") if path.is_file())


def run_environment(
    outcome: Outcome, venvs: Venvs, snapshot: Path, work: Path, mode: str, jobs: int, log: Log
) -> None:
    name = "+".join(outcome.names)
    try:
        venv = venvs.get(outcome.venv_key)
    except EnvironmentFailure as failure:
        outcome.failure = f"venv {outcome.venv_key}: {failure}"
        return
    started = time.perf_counter()  # the run's own time, its venv's apart
    folder = work / f"run-{outcome.names[0]}"
    folder.mkdir()
    dispatch, features = venv.probe["dispatch"], venv.probe["features"]
    if outcome.setting is None:
        setting = SimdSetting((), tuple(target for target in dispatch if features.get(target)))
    else:
        setting = simd_settings(dispatch, features)[outcome.setting]
        if setting.skipped:
            outcome.skipped = setting.skipped
            log(f"{name}: skipped: {setting.skipped}")
            return
    try:
        reported = probe(venv, setting.disable, folder, ["numpy"])
    except EnvironmentFailure as failure:
        outcome.failure = f"numpy under NPY_DISABLE_CPU_FEATURES={' '.join(setting.disable)!r}: {failure}"
        log(f"{name}: {outcome.failure}")
        return
    on = [target for target in reported["dispatch"] if reported["features"].get(target)]
    if on != list(setting.keep):
        outcome.failure = f"numpy dispatches to {on} under the setting, not {list(setting.keep)}"
        log(f"{name}: {outcome.failure}")
        return
    variable = (
        f"NPY_DISABLE_CPU_FEATURES={' '.join(setting.disable)!r}" if setting.disable else "no SIMD limit"
    )
    outcome.note = (
        f"numpy {venv.probe['versions']['numpy']}, {variable}: kernels of the baseline "
        f"{' '.join(reported['baseline'])}" + (f" and {' '.join(on)}" if on else " only")
    )
    log(f"{name}: {outcome.note}")
    env = child_environment(setting.disable)
    for piece in PIECES:
        if mode not in piece.modes:
            continue
        if STOP.is_set():
            outcome.failure = "interrupted"
            return
        piece_started = time.perf_counter()
        checks = run_piece(piece, venv, env, folder / piece.key, snapshot, jobs, TIMEOUT[mode])
        seconds = time.perf_counter() - piece_started
        outcome.checks += checks
        outcome.seconds[piece.title] = seconds
        outcome.pieces.append(piece.key)
        counts = {
            status: sum(c.status == status for c in checks)
            for status in dict.fromkeys(c.status for c in checks)
        }
        log(
            f"{name}: {piece.title}: "
            + ", ".join(f"{n} {status}" for status, n in counts.items())
            + f" ({seconds:.1f} s)"
        )
    outcome.seconds["total (its venv apart)"] = time.perf_counter() - started


def committed_files(snapshot: Path) -> list[str]:
    return sorted(
        path.relative_to(snapshot).as_posix()
        for folder in COMMITTED_FOLDERS
        for path in (snapshot / folder).rglob("*")
        if path.is_file()
    )


def table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


CELL = {
    "identical": "identical",
    "differs": "DIFFERS",
    "missing": "MISSING",
    "not committed": "NEW",
    "error": "ERROR",
}


def report(outcomes: list[Outcome], names: list[str], snapshot: Path, mode: str, venvs: Venvs) -> int:
    """Print the table (a column per environment, in the order of `names`), the differences, what was
    not compared and the times; the exit status."""
    ran = [o for o in outcomes if not o.skipped and not o.failure]
    columns = [(name, o) for name in names for o in ran if name in o.names]
    labels = list(dict.fromkeys(check.label for o in ran for check in o.checks))
    print(f"\nportability ({mode} mode): the regenerated files against the checkout's\n")
    absent = []  # (run, label): written in another environment, not in this one
    if columns and labels:
        rows = [["file", *(name for name, _ in columns)]]
        for label in labels:
            cells = []
            for _, o in columns:
                check = next((c for c in o.checks if c.label == label), None)
                cells.append("MISSING" if check is None else CELL[check.status])
                if check is None and (o, label) not in absent:
                    absent.append((o, label))
            rows.append([label, *cells])
        print(table(rows))
    for o in outcomes:
        together = " and ".join(o.names)
        if o.skipped:
            print(f"{together}: skipped: {o.skipped}")
        elif o.failure:
            print(f"{together}: FAILED: {o.failure}")
        else:
            shared = " (one run shared by these environments)" if len(o.names) > 1 else ""
            print(f"{together}: {o.note}{shared}")
    differing = [(o, c) for o in ran for c in o.checks if c.status != "identical"]
    differing += [(o, Check(label, "missing", "written in another environment only")) for o, label in absent]
    if differing:
        print("\nFirst difference of each file (committed against regenerated):")
        for o, c in differing:
            print(f"  {'+'.join(o.names)}: {c.label}: {c.status}: {c.detail}")
    compared = {c.label for o in ran for c in o.checks}
    pieces = {key for o in ran for key in o.pieces}
    partly = [name for piece in PIECES if piece.key in pieces for name in piece.partly.split()]
    uncovered = [name for name in committed_files(snapshot) if name not in compared and name not in partly]
    if uncovered:
        print(f"\nCommitted files no command of this mode regenerates: {', '.join(uncovered)}")
    if partly:
        print(f"Committed files compared in part (the rows that say which part): {', '.join(partly)}")
    print("\nSeconds per step:")
    built = [v for v in venvs.built.values() if isinstance(v, Venv)]
    for venv in built:
        print(f"  venv {venv.key}: {venv.seconds:.1f} ({venv.requirement})")
    if ran:
        steps = list(dict.fromkeys(step for o in ran for step in o.seconds))
        rows = [["step", *("+".join(o.names) for o in ran)]]
        for step in steps:
            rows.append([step, *(f"{o.seconds[step]:.1f}" if step in o.seconds else "-" for o in ran)])
        print("\n".join("  " + line for line in table(rows).splitlines()))
    total = sum(len(o.checks) for o in ran) + len(absent)
    bad = len(differing) + sum(bool(o.failure) for o in outcomes)
    if bad:
        print(
            f"\nportability: FAILED: {len(differing)} of {total} comparisons not identical"
            + (
                f", {sum(bool(o.failure) for o in outcomes)} environment(s) failed"
                if any(o.failure for o in outcomes)
                else ""
            )
        )
        return 1
    print(f"\nportability: all {total} comparisons identical in {len(columns)} environment(s)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    log = Log()
    work = Path(tempfile.mkdtemp(prefix="toyrl-portability-"))
    status = 1
    try:
        snapshot = work / "checkout"
        log(
            f"{args.mode} mode, environments {', '.join(args.envs)}; snapshot of the checkout: "
            f"{copy_checkout(ROOT, snapshot)} files"
        )
        try:
            bound = numpy_lower_bound((snapshot / "pyproject.toml").read_text())
        except (OSError, ValueError) as error:
            print(f"portability: {error}", file=sys.stderr)
            return 1
        requirements = {"newest": f"numpy>={bound}", "oldest": oldest_numpy_requirement(bound)}
        outcomes: dict[tuple[str, str | None], Outcome] = {}
        for name in args.envs:
            venv_key, setting = ENVIRONMENTS[name]
            outcomes.setdefault((venv_key, setting), Outcome([], venv_key, setting)).names.append(name)
        # The oldest venv second, so that with --jobs 2 it is built while the first environment runs.
        rank = {("newest", None): 0, ("oldest", None): 1, ("newest", "baseline"): 2, ("newest", "avx2"): 3}
        order = sorted(outcomes.values(), key=lambda o: rank[(o.venv_key, o.setting)])
        venvs = Venvs(work, snapshot, {key: requirements[key] for key in {o.venv_key for o in order}}, log)
        cores = os.cpu_count() or 1
        workers = max(1, cores // args.jobs)
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [
                pool.submit(run_environment, o, venvs, snapshot, work, args.mode, workers, log) for o in order
            ]
            try:
                for future in futures:
                    future.result()
            except KeyboardInterrupt:
                STOP.set()
                log("interrupted: waiting for the commands under way to stop")
                pool.shutdown(cancel_futures=True)
                raise
        status = report(order, args.envs, snapshot, args.mode, venvs)
    except KeyboardInterrupt:
        print("portability: interrupted", file=sys.stderr)
        status = 130
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    log(f"done (exit {status})")
    return status


if __name__ == "__main__":
    sys.exit(main())
