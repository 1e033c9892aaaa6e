"""The layers of the package, read from its import graph (issue 44): nothing below the command line
imports the CLI, no import cycle, each layer imports only layers below it, and no module takes
another module's private names. The imports are read with Python's own grammar (`ast`), at every
level of each module (a function's local import counts), by the one reader docs/design.md's layer
diagram is drawn with (scripts/design_doc.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "toyrl"


design_doc = load_script("design_doc")


def test_nothing_below_the_cli_imports_the_cli() -> None:
    below = [path for path in sorted(PACKAGE.rglob("*.py")) if "cli" not in path.relative_to(PACKAGE).parts]
    assert len(below) > 30  # the walk found the package
    offenders = [
        f"{path.relative_to(ROOT)}:{i.line} imports {i.module}"
        for path in below
        for i in design_doc.imports(path)
        if any(m == "toyrl.cli" or m.startswith("toyrl.cli.") for m in (i.module, f"{i.module}.{i.name}"))
    ]
    assert offenders == []


def test_the_layer_check_can_fail(tmp_path: Path) -> None:
    """A function's local import and a relative one are both found (the API's local import of the
    CLI's progress bar was one), and one under TYPE_CHECKING is marked as never run."""
    (tmp_path / "toyrl" / "cli").mkdir(parents=True)
    (tmp_path / "toyrl" / "cli" / "__init__.py").write_text("")
    (tmp_path / "toyrl" / "cli" / "terminal.py").write_text("")
    module = tmp_path / "toyrl" / "api_like.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from toyrl.cli.terminal import Width\n"
        "def f():\n"
        "    from toyrl.cli.terminal import Progress as P\n"
        "    from . import cli\n"
        "    import toyrl.cli.terminal\n"
    )
    found = [(i.line, i.module, i.name, i.bound, i.typing_only) for i in design_doc.imports(module, tmp_path)]
    assert found == [
        (1, "typing", "TYPE_CHECKING", "TYPE_CHECKING", False),
        (3, "toyrl.cli.terminal", "Width", "Width", True),
        (5, "toyrl.cli.terminal", "Progress", "P", False),
        (6, "toyrl.cli", "", "cli", False),
        (7, "toyrl.cli.terminal", "", "toyrl", False),
    ]


def test_no_import_cycle() -> None:
    """Counted: every import a module runs, at its top or in a function (not those under
    TYPE_CHECKING, which never run); importing `toyrl.x` also runs `toyrl/__init__.py`, which is not
    counted as an edge, but a name taken from the package itself is (`from toyrl import
    __version__` in results.py was one: toyrl -> api -> results -> toyrl). The other cycle was
    cli/bridge.py <-> cli/commands.py; both now import cli/shared.py."""
    graph = design_doc.import_graph()
    assert len(graph) > 60 and "toyrl.stages.registry" in graph["toyrl.stages.advantage"]
    assert design_doc.cycles(graph) == []


def test_the_cycle_check_can_fail(tmp_path: Path) -> None:
    package = tmp_path / "toyrl"
    package.mkdir()
    (package / "__init__.py").write_text("from toyrl.a import x\n")
    (package / "a.py").write_text("x = 1\ndef f():\n    from toyrl.b import y\n")
    (package / "b.py").write_text("from toyrl import __version__ as y\nfrom toyrl import c\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from toyrl import b\n"
    )
    graph = design_doc.import_graph(tmp_path)
    assert graph == {
        "toyrl": {"toyrl.a"},
        "toyrl.a": {"toyrl.b"},
        "toyrl.b": {"toyrl", "toyrl.c"},
        "toyrl.c": set(),
    }
    assert design_doc.cycles(graph) == [["toyrl", "toyrl.a", "toyrl.b"]]


def test_each_layer_imports_only_layers_below_it() -> None:
    """Every module has a layer of docs/design.md's diagram, and imports only its own layer's
    modules and the layers before it in `LAYERS` (the diagram's order, lowest first)."""
    graph = design_doc.import_graph()
    unplaced = [module for module in graph if not design_doc.layer_of(module)]
    assert unplaced == [], f"modules in no layer of scripts/design_doc.py's LAYERS: {unplaced}"
    order = [layer for layer, _, _ in design_doc.LAYERS]
    upward = [
        f"{module} ({design_doc.layer_of(module)}) imports {other} ({design_doc.layer_of(other)})"
        for module, imported in graph.items()
        for other in imported
        if order.index(design_doc.layer_of(other)) > order.index(design_doc.layer_of(module))
    ]
    assert upward == []
    assert (
        design_doc.layer_of("toyrl.train") == "train"
        and design_doc.layer_of("toyrl.trainers.trl") == "trainers"
    )
    assert (
        design_doc.layer_of("toyrl.kernels_compiled") == "arithmetic"
        and design_doc.layer_of("toyrl") == "api"
    )


def _private_uses(path: Path, root: Path = ROOT) -> list[str]:
    """Where the module at `path` takes a private name (one underscore) of another module of the
    package: by a `from` import, or as an attribute of a module it imported."""
    module = design_doc.module_name(path, root)
    found = [i for i in design_doc.imports(path, root) if i.module.startswith("toyrl") and i.module != module]
    uses = [
        f"{i.line}: {i.module}.{i.name}"
        for i in found
        if i.name.startswith("_") and not i.name.startswith("__")
    ]
    modules = {i.bound for i in found if not i.name and "." not in i.bound}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            uses.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return uses


def _twins(module: str, other: str) -> bool:
    """A compiled twin (`x_compiled`: numba's form of x, the same operations) reads the private
    constants and kernels of x and of the other compiled modules: they are one implementation."""
    return module.endswith("_compiled") and (
        other == module.removesuffix("_compiled") or other.endswith("_compiled")
    )


def test_no_module_takes_another_modules_private_names() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = design_doc.module_name(path)
        for use in _private_uses(path):
            other = use.split(": ", 1)[1].rpartition(".")[0]
            if not _twins(module, other):
                offenders.append(f"{path.relative_to(ROOT)}:{use}")
    assert offenders == [], "private names taken across modules (make them public): " + "; ".join(offenders)


def test_the_private_name_check_can_fail(tmp_path: Path) -> None:
    package = tmp_path / "toyrl"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("_hidden = 1\n")
    (package / "b.py").write_text(
        "from toyrl.a import _hidden\nfrom toyrl import a\nimport toyrl.a as alias\n"
        "x = a._hidden + alias._hidden + a.__name__\n"
    )
    uses = sorted(_private_uses(package / "b.py", tmp_path))
    assert uses == ["1: toyrl.a._hidden", "4: a._hidden", "4: alias._hidden"]
    assert _twins("toyrl.kernels_compiled", "toyrl.kernels") and not _twins("toyrl.sweep", "toyrl.objective")
