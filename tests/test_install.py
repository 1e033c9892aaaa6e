"""Install hints name this project: on the package index `toyrl` is another project, so no message
or document may say `pip install "toyrl[...]"`."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from toyrl import install

ROOT = pathlib.Path(__file__).resolve().parent.parent
tomllib = pytest.importorskip("tomllib")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
EXTRAS = sorted(PYPROJECT["project"]["optional-dependencies"])


def test_the_distribution_is_not_the_index_s_toyrl() -> None:
    assert PYPROJECT["project"]["name"] == install.DISTRIBUTION != "toyrl"
    assert PYPROJECT["project"]["scripts"] == {"toyrl": "toyrl.cli:main"}


@pytest.mark.parametrize("extra", EXTRAS)
def test_from_a_checkout_the_hint_installs_the_checkout_s_extra(extra: str) -> None:
    hint = install.hint(extra)
    assert hint.endswith(f"pip install -e '{ROOT}[{extra}]'") or hint.endswith(
        f"pip install -e {ROOT}[{extra}]"
    )
    assert "toyrl[" not in hint
    # torch's CPU build first wherever the extra pulls torch (a bare requirement resolves a CUDA build)
    assert hint.startswith(install.TORCH_CPU) == any(
        r.startswith("torch") for r in PYPROJECT["project"]["optional-dependencies"][extra]
    )


@pytest.mark.parametrize("extra", EXTRAS)
def test_outside_a_checkout_the_hint_names_the_extra_s_own_requirements(
    extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(install, "checkout", lambda: None)
    listed = PYPROJECT["project"]["optional-dependencies"][extra]
    hint = install.hint(extra)
    assert "toyrl" not in hint.split("&&")[-1]
    assert all(requirement.replace(" ", "") in hint for requirement in listed)


def test_no_message_or_document_names_the_index_s_toyrl() -> None:
    """Every install hint in the package, the docs and the README: none says toyrl[EXTRA]."""
    tracked = subprocess.run(
        ["git", "ls-files", "toyrl", "docs", "README.md", "scripts"], cwd=ROOT, capture_output=True, text=True
    )
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    offenders = [
        f"{name}:{number}"
        for name in tracked.stdout.split()
        if name.endswith((".py", ".md", ".sh", ".js", ".html"))
        for number, line in enumerate((ROOT / name).read_text(encoding="utf-8").splitlines(), 1)
        if "toyrl[" in line and "pip install" in line
    ]
    assert offenders == []


def test_a_missing_extra_s_message_installs_this_project() -> None:
    """The message a user sees without the dask extra, in a process where dask cannot import."""
    code = (
        "import sys; sys.modules['dask'] = None; sys.modules['dask.distributed'] = None\n"
        "import toyrl.sweep as s\n"
        "try:\n    s._check_backend(1, 'dask', None)\nexcept s.InvalidInput as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert f"{ROOT}[dask]" in out.stdout and "toyrl[" not in out.stdout
