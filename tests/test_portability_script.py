"""The pure parts of scripts/portability.py: the numpy lower bound read from pyproject.toml, the SIMD
settings built from what numpy reports (numpy 2 and numpy 1.26 names), the byte comparison and its
first differing line, the comparison of the families study's per-seed values, the snapshot of the
checkout, the report's table and exit status, and bad arguments (exit 2, one line). No venv is made."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "portability.py"


def load() -> ModuleType:
    return load_script("portability")


portability = load()

PYPROJECT = """\
[build-system]
requires = ["setuptools>=77"]

[project]
name = "x"
dependencies = [
    "numpy-stubs>=0.1",  # not numpy
    "scipy>=1.11",
    {numpy}
    "pandas>=2.1",
]

[project.optional-dependencies]
test = ["numpy>=9.9"]
"""


@pytest.fixture(params=["tomllib", "without tomllib"])
def parse(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script, reading pyproject.toml with tomllib and with the Python 3.10 fallback."""
    if request.param == "without tomllib":
        monkeypatch.setattr(portability, "tomllib", None)
    elif portability.tomllib is None:
        pytest.skip("no tomllib before Python 3.11")
    return portability


@pytest.mark.parametrize(
    ("requirement", "bound"),
    [
        ('"numpy>=1.26",', "1.26"),
        ("'numpy >= 2.0.1, <3',", "2.0.1"),
        ('"NumPy<3,>=1.24.4",', "1.24.4"),
        ("\"numpy[extra]>=1.25; python_version < '3.13'\",", "1.25"),
    ],
)
def test_the_numpy_lower_bound_is_read_from_the_project_dependencies(
    parse: ModuleType, requirement: str, bound: str
) -> None:
    assert parse.numpy_lower_bound(PYPROJECT.format(numpy=requirement)) == bound


def test_a_numpy_requirement_without_a_lower_bound_or_no_numpy_is_refused(parse: ModuleType) -> None:
    with pytest.raises(ValueError, match="no lower bound"):
        parse.numpy_lower_bound(PYPROJECT.format(numpy='"numpy<3",'))
    with pytest.raises(ValueError, match="do not name numpy"):  # the optional numpy does not count
        parse.numpy_lower_bound(PYPROJECT.format(numpy=""))


def test_the_checkouts_pyproject_has_a_numpy_lower_bound(parse: ModuleType) -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert parse.project_dependencies(text) == portability.dependencies_without_tomllib(text)
    bound = parse.numpy_lower_bound(text)
    assert f'"numpy>={bound}"' in text


def test_the_oldest_numpy_is_the_newest_patch_release_of_the_lower_bound() -> None:
    assert portability.oldest_numpy_requirement("1.26") == "numpy>=1.26,==1.26.*"
    assert portability.oldest_numpy_requirement("1.26.2") == "numpy>=1.26.2,==1.26.*"
    assert portability.oldest_numpy_requirement("2") == "numpy>=2,==2.0.*"
    assert portability.requirement_allows("numpy>=1.26,==1.26.*", "1.26.4")
    assert not portability.requirement_allows("numpy>=1.26,==1.26.*", "2.4.6")


NUMPY2_DISPATCH = ["X86_V3", "X86_V4", "AVX512_ICL", "AVX512_SPR"]
NUMPY126_DISPATCH = [
    "SSSE3", "SSE41", "POPCNT", "SSE42", "AVX", "F16C", "FMA3", "AVX2", "AVX512F", "AVX512CD",
    "AVX512_KNL", "AVX512_KNM", "AVX512_SKX", "AVX512_CLX", "AVX512_CNL", "AVX512_ICL",
]  # fmt: skip


def features(on: list[str], off: list[str]) -> dict[str, bool]:
    return {name: True for name in on} | {name: False for name in off}


def test_simd_settings_of_numpy_2_on_an_avx512_cpu() -> None:
    # numpy 2.4 on an AMD EPYC with AVX-512 up to Ice Lake's, no Sapphire Rapids FP16
    cpu = features(["X86_V2", "AVX2", "FMA3", "X86_V3", "AVX512F", "X86_V4", "AVX512_ICL"], ["AVX512_SPR"])
    settings = portability.simd_settings(NUMPY2_DISPATCH, cpu)
    assert settings["baseline"] == portability.SimdSetting(("X86_V3", "X86_V4", "AVX512_ICL"), ())
    assert settings["avx2"] == portability.SimdSetting(("X86_V4", "AVX512_ICL"), ("X86_V3",))


def test_simd_settings_of_numpy_2_without_avx512_or_without_avx2() -> None:
    cpu = features(["X86_V2", "AVX2", "X86_V3"], ["AVX512F", "X86_V4", "AVX512_ICL", "AVX512_SPR"])
    settings = portability.simd_settings(NUMPY2_DISPATCH, cpu)
    assert settings["baseline"] == portability.SimdSetting(("X86_V3",), ())
    assert settings["avx2"].disable == () and "no AVX-512" in settings["avx2"].skipped
    old = features(["X86_V2"], ["AVX2", *NUMPY2_DISPATCH])
    settings = portability.simd_settings(NUMPY2_DISPATCH, old)
    assert "nothing above numpy's baseline" in settings["baseline"].skipped
    assert "no AVX2" in settings["avx2"].skipped


def test_simd_settings_of_numpy_1_26_name_every_avx512_target_the_cpu_has() -> None:
    on = [name for name in NUMPY126_DISPATCH if name not in ("AVX512_KNL", "AVX512_KNM")]
    settings = portability.simd_settings(NUMPY126_DISPATCH, features(on, ["AVX512_KNL", "AVX512_KNM"]))
    assert settings["baseline"] == portability.SimdSetting(tuple(on), ())
    avx512 = ("AVX512F", "AVX512CD", "AVX512_SKX", "AVX512_CLX", "AVX512_CNL", "AVX512_ICL")
    keep = ("SSSE3", "SSE41", "POPCNT", "SSE42", "AVX", "F16C", "FMA3", "AVX2")
    assert settings["avx2"] == portability.SimdSetting(avx512, keep)


def test_simd_settings_on_an_arm_cpu() -> None:
    settings = portability.simd_settings(["ASIMDHP", "ASIMDDP", "ASIMDFHM"], features(["ASIMDHP"], []))
    assert settings["baseline"] == portability.SimdSetting(("ASIMDHP",), ())
    assert "no AVX2" in settings["avx2"].skipped


def test_the_first_difference_of_text_names_the_line_column_and_an_excerpt() -> None:
    first_difference = portability.first_difference
    committed = b"a,b\n1,0.2731566\n2,0.5\n3,0.75\n"
    assert first_difference(committed, committed) == ""
    fresh = b"a,b\n1,0.2731567\n2,0.5\n3,0.76\n"
    assert first_difference(committed, fresh) == (
        "line 2, column 11 (2 of 4 lines differ): committed '1,0.2731566', regenerated '1,0.2731567'"
    )
    shorter = "4 lines committed against 3 regenerated (the first 3 equal)"
    assert first_difference(committed, committed[:-7]) == shorter
    assert first_difference(committed, b"a,b\n1,0.2731566\n2,0.7\n").startswith(
        "line 3, column 5 (1 of the first 3 lines differ; 4 committed, 3 regenerated): "
    )
    assert first_difference(committed, committed[:-1]) == "the same lines but for the final newline"


def test_the_excerpt_is_short_and_columns_count_characters() -> None:
    long = "x" * 5000
    message = portability.first_difference(f"{long}1{long}\n".encode(), f"{long}2{long}\n".encode())
    assert message.startswith("line 1, column 5001 (1 of 1 lines differ)") and len(message) < 200
    message = portability.first_difference(
        "| 74.7 ± 0.1 | 517 |\n".encode(), "| 74.7 ± 0.1 | 516 |\n".encode()
    )
    assert message.startswith("line 1, column 18 ")


def test_the_first_difference_of_a_binary_file_is_its_byte() -> None:
    png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256))
    changed = png[:100] + b"\xff" + png[101:]
    assert (
        portability.first_difference(png, changed)
        == "byte 100 differs (272 bytes committed, 272 regenerated)"
    )


def test_compare_file_reports_missing_and_uncommitted_files(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"1\n")
    (tmp_path / "b").write_bytes(b"2\n")
    assert portability.compare_file("x", tmp_path / "a", tmp_path / "a").status == "identical"
    assert portability.compare_file("x", tmp_path / "a", tmp_path / "b").status == "differs"
    assert portability.compare_file("x", tmp_path / "a", tmp_path / "none").status == "missing"
    assert portability.compare_file("x", tmp_path / "none", tmp_path / "a").status == "not committed"


COMMITTED = {
    "variants": {
        "exact": {
            "spec": "advantage=none",
            "per_seed": {
                "accuracy": [0.25, 0.5, 0.75],
                "cosine_along": [[1.0, 0.5], [0.25, 0.125], [0.1, 0.2]],
            },
        },
        "mc": {"spec": "sapo", "per_seed": {"accuracy": [0.1, 0.2, 0.3], "cosine_initial": [0.9, 0.8]}},
    }
}


def fresh_values() -> dict:
    return {
        "exact": {
            "spec": "advantage=none",
            "seeds": [0, 2],
            "per_seed": {"accuracy": [0.25, 0.75], "cosine_along": [[1.0, 0.5], [0.1, 0.2]]},
        },
        "mc": {
            "spec": "sapo",
            "seeds": [0, 2],
            "per_seed": {"accuracy": [0.1, 0.3]},
            "cosine_initial": {"seed": 1, "value": 0.8},
        },
    }


def test_the_families_seeds_are_compared_exactly_value_by_value() -> None:
    compare = portability.compare_family_seeds
    assert compare(COMMITTED, fresh_values(), "f") == portability.Check("f", "identical", "9 values")
    moved = fresh_values()
    moved["exact"]["per_seed"]["cosine_along"][1][1] = math.nextafter(0.2, 1)  # one ulp
    check = compare(COMMITTED, moved, "f")
    assert check.status == "differs"
    assert check.detail.startswith("1 of 9 values differ; first variants.exact.per_seed.cosine_along[2][1]")
    assert "committed 0.2, regenerated 0.20000000000000004" in check.detail
    moved = fresh_values()
    moved["mc"]["cosine_initial"]["value"] = 0.7
    assert "variants.mc.per_seed.cosine_initial[1]: committed 0.8" in compare(COMMITTED, moved, "f").detail
    del moved["exact"]
    assert "variants.exact: not regenerated" in compare(COMMITTED, moved, "f").detail


CSV = """study,variant,seeds,accuracy_pct_mean,six_accuracy_pct_mean,six_accuracy_pct_se
grid,grpo,100,27.4,27.313160579021401,0.57010805688749457
grid,dr_grpo,100,26.9,26.1,0.5
"""


def test_the_six_seed_columns_of_a_csv_are_compared_as_text() -> None:
    compare = portability.compare_csv_columns
    fresh = CSV.replace(",100,27.4,", ",6,27.5,")  # the columns over every seed may differ
    assert compare(CSV, fresh, "six_", ("study", "variant"), "c") == portability.Check(
        "c", "identical", "4 cells"
    )
    moved = fresh.replace("0.57010805688749457", "0.57010805688749468")
    check = compare(CSV, moved, "six_", ("study", "variant"), "c")
    assert check.status == "differs" and check.detail == (
        "1 of 4 cells differ; first line 2 (grid, grpo), six_accuracy_pct_se: "
        "committed '0.57010805688749457', regenerated '0.57010805688749468'"
    )
    reordered = CSV.splitlines()
    check = compare(CSV, "\n".join([reordered[0], reordered[2], reordered[1]]), "six_", ("variant",), "c")
    assert check.status == "differs" and check.detail.startswith("other rows")
    assert compare(CSV, CSV, "nine_", ("variant",), "c").status == "error"


def test_the_calibration_over_seeds_0_to_5_is_compared_exactly() -> None:
    committed = {
        "calibration": {"L + 1": {"x": 1.0}, "L + 1, seeds 0-5": {"x": 0.5}, "L, seeds 0-5": {"x": 2}}
    }
    fresh = {"calibration": {"L + 1": {"x": 9.0}, "L + 1, seeds 0-5": {"x": 0.5}, "L, seeds 0-5": {"x": 2}}}
    compare = portability.compare_calibration
    assert compare(committed, fresh, "seeds 0-5", "j") == portability.Check("j", "identical", "2 entries")
    fresh["calibration"]["L, seeds 0-5"]["x"] = math.nextafter(2, 3)
    check = compare(committed, fresh, "seeds 0-5", "j")
    assert check.status == "differs" and "calibration['L, seeds 0-5']: committed {'x': 2}" in check.detail


def test_the_snapshot_leaves_out_git_venvs_build_outputs_and_caches(tmp_path: Path) -> None:
    source = tmp_path / "checkout"
    for name in (
        "pyproject.toml",
        "toyrl/__init__.py",
        "results/article.csv",
        ".git/HEAD",
        ".venv/bin/python",
        "venv/pyvenv.cfg",
        "build/lib/toyrl/__init__.py",
        "toyrl.egg-info/PKG-INFO",
        "toyrl/__pycache__/x.pyc",
    ):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        (source / name).write_text("")
    assert portability.copy_checkout(source, tmp_path / "copy") == 3
    copied = sorted(p.relative_to(tmp_path / "copy").as_posix() for p in (tmp_path / "copy").rglob("*"))
    assert copied == ["pyproject.toml", "results", "results/article.csv", "toyrl", "toyrl/__init__.py"]


def test_the_report_has_a_column_per_environment_and_fails_on_any_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "bench.txt").write_text("")
    Check, Outcome = portability.Check, portability.Outcome
    same = Outcome(["native", "newest"], "newest", None, [Check("results/article.csv", "identical")])
    same.note = "numpy 2.4.6"
    skipped = Outcome(["avx2"], "newest", "avx2", skipped="this CPU has no AVX2")
    venvs = SimpleNamespace(built={})
    names = ["avx2", "newest", "native"]
    assert portability.report([same, skipped], names, tmp_path, "quick", venvs) == 0
    out = capsys.readouterr().out
    assert "file                 newest     native" in out
    assert "avx2: skipped: this CPU has no AVX2" in out
    assert "no command of this mode regenerates: results/bench.txt" in out
    differs = Outcome(["oldest"], "oldest", None, [Check("results/article.csv", "differs", "line 2, ...")])
    assert portability.report([same, differs], ["native", "oldest"], tmp_path, "quick", venvs) == 1
    out = capsys.readouterr().out
    assert "results/article.csv  identical  DIFFERS" in out
    assert "oldest: results/article.csv: differs: line 2, ..." in out
    assert "FAILED: 1 of 2 comparisons not identical" in out
    fewer = Outcome(["oldest"], "oldest", None, [])  # its command wrote nothing, and said nothing
    assert portability.report([same, fewer], ["native", "oldest"], tmp_path, "quick", venvs) == 1
    out = capsys.readouterr().out
    assert "results/article.csv  identical  MISSING" in out
    assert "oldest: results/article.csv: missing: written in another environment only" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--envs", "bogus"],
        ["--envs", "native,,avx512"],
        ["--envs", ""],
        ["--jobs", "0"],
        ["--jobs", "two"],
        ["--quick", "--full"],
        ["--no-such-option"],
        ["extra"],
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        portability.parse_args(argv)
    assert raised.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("portability: ")


def test_the_arguments_and_their_defaults() -> None:
    args = portability.parse_args([])
    jobs = min(2, os.cpu_count() or 1)
    assert (args.mode, args.envs, args.jobs, args.keep) == (
        "quick",
        list(portability.ENVIRONMENTS),
        jobs,
        False,
    )
    args = portability.parse_args(["--full", "--envs", "avx2, native,avx2", "--jobs", "2", "--keep"])
    assert (args.mode, args.envs, args.jobs, args.keep) == ("full", ["avx2", "native"], 2, True)
    assert list(portability.ENVIRONMENTS) == ["native", "baseline", "avx2", "oldest", "newest"]


def test_the_script_exits_2_with_one_line_before_making_anything() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--envs", "nowhere"], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        "portability: argument --envs: unknown environment 'nowhere' (known: native, baseline, avx2, "
        "oldest, newest) (see --help)\n"
    )


def test_the_clone_files_the_reproduce_piece_copies_are_the_pages_documents() -> None:
    """scripts/portability.py regenerates the page beside a clone's documents (so that its links are
    the committed page's): the list it copies is toyrl.explore.DOCS's."""
    from toyrl.explore import DOCS

    assert load().CLONE_DOCS == [path for path, _ in DOCS]
