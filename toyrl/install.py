"""How to install one of toyrl's optional extras, said so that it installs *this* project.

On the package index the name `toyrl` belongs to another project, so a hint that installs
`toyrl` with an extra by name would fetch that one. This project's distribution is `DISTRIBUTION`; a
hint names the checkout toyrl runs from when it runs from one (the usual case: a clone installed
with `pip install -e .` or run in place), and otherwise the extra's own requirements, read from the
installed distribution's metadata, which pip resolves without naming toyrl at all.
"""

from __future__ import annotations

import importlib.metadata
import pathlib
import shlex

DISTRIBUTION = "toyrl-drgrpo"
# torch's CPU build, installed first: a bare `torch` requirement resolves a multi-GB CUDA build
TORCH_CPU = "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu"
NEEDS_TORCH = ("torch", "bridge")


def checkout() -> pathlib.Path | None:
    """The source checkout toyrl is imported from (a folder holding this project's pyproject.toml), or
    None when it is installed from a wheel."""
    root = pathlib.Path(__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    if pyproject.is_file() and f'name = "{DISTRIBUTION}"' in pyproject.read_text(encoding="utf-8"):
        return root
    return None


def requirements(extra: str) -> list[str]:
    """The requirements the installed distribution's metadata lists for `extra` (empty if it is not
    installed or has no such extra)."""
    try:
        listed = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    marker = f'extra == "{extra}"'
    return [line.split(";")[0].strip() for line in listed if marker in line.replace("'", '"')]


def hint(extra: str) -> str:
    """The command that installs the optional extra `extra` of this project, e.g. for "yaml":
    `pip install -e '/home/me/clone[yaml]'` from a checkout."""
    root = checkout()
    if root is not None:
        command = f"pip install -e {shlex.quote(f'{root}[{extra}]')}"
    else:
        packages = requirements(extra)
        command = (
            f"pip install {' '.join(shlex.quote(p) for p in packages)}"
            if packages
            else f"pip install {shlex.quote(f'{DISTRIBUTION}[{extra}]')}"
        )
    return f"{TORCH_CPU} && {command}" if extra in NEEDS_TORCH else command
