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


def names_the_index_s_toyrl(text: str) -> bool:
    """Whether `text` names `toyrl[EXTRA]` as a requirement (not as the end of a checkout's path,
    which a clone named toyrl has: /home/me/toyrl[yaml])."""
    return any(not text[:at].endswith(("/", "\\")) for at in _occurrences(text, "toyrl["))


def _occurrences(text: str, part: str) -> list[int]:
    found, at = [], text.find(part)
    while at != -1:
        found.append(at)
        at = text.find(part, at + 1)
    return found


def test_the_index_s_name_is_told_from_a_checkout_s_path() -> None:
    assert names_the_index_s_toyrl('pip install "toyrl[yaml]"') and names_the_index_s_toyrl(
        "pip install toyrl[x]"
    )
    assert not names_the_index_s_toyrl("pip install -e '/home/me/toyrl[yaml]'")


def test_the_distribution_is_not_the_index_s_toyrl() -> None:
    assert PYPROJECT["project"]["name"] == install.DISTRIBUTION != "toyrl"
    assert PYPROJECT["project"]["scripts"] == {"toyrl": "toyrl.cli:main"}


@pytest.mark.parametrize("extra", EXTRAS)
def test_from_a_checkout_the_hint_installs_the_checkout_s_extra(extra: str) -> None:
    hint = install.hint(extra)
    assert hint.endswith(f"pip install -e '{ROOT}[{extra}]'") or hint.endswith(
        f"pip install -e {ROOT}[{extra}]"
    )
    assert not names_the_index_s_toyrl(hint)
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
    assert not names_the_index_s_toyrl(hint) and "toyrl" not in hint.split("&&")[-1]
    assert all(requirement.split(";")[0].replace(" ", "") in hint for requirement in listed)


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
        if "pip install" in line and names_the_index_s_toyrl(line)
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
    assert f"{ROOT}[dask]" in out.stdout and not names_the_index_s_toyrl(out.stdout)
