"""The layers below the command line: no module of toyrl outside `toyrl/cli/` imports the CLI, so
the API, the studies and the page's data build without it (issue 44's first rule). Read with
Python's own grammar (`ast`), at every level of each module (a function's local import counts)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "toyrl"


def _imports(path: Path, root: Path = ROOT) -> list[tuple[int, str]]:
    """(line, module) of every import in `path` (and of each name a `from` import takes), relative
    ones resolved against its package under `root`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            found += [(node.lineno, module)] + [
                (node.lineno, f"{module}.{alias.name}") for alias in node.names
            ]
    return found


def test_nothing_below_the_cli_imports_the_cli() -> None:
    below = [path for path in sorted(PACKAGE.rglob("*.py")) if "cli" not in path.relative_to(PACKAGE).parts]
    assert len(below) > 30  # the walk found the package
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in below
        for line, module in _imports(path)
        if module == "toyrl.cli" or module.startswith("toyrl.cli.")
    ]
    assert offenders == []


def test_the_layer_check_can_fail(tmp_path: Path) -> None:
    """A function's local import and a relative one are both found (the API's local import of the
    CLI's progress bar was one)."""
    module = tmp_path / "toyrl" / "api_like.py"
    module.parent.mkdir()
    module.write_text("def f():\n    from toyrl.cli.terminal import Progress\n    from . import cli\n")
    assert _imports(module, tmp_path) == [
        (2, "toyrl.cli.terminal"),
        (2, "toyrl.cli.terminal.Progress"),
        (3, "toyrl"),
        (3, "toyrl.cli"),
    ]
