"""Write docs/design.md's generated parts from the code: the layers (from the import graph), the
kinds and stages (from `toyrl.stages.KIND` and the registry), what is supported (the registry, the
named variants, the trainers) and what is not yet (what the code refuses, each item checked).

    python scripts/design_doc.py            # rewrite the generated parts of docs/design.md
    python scripts/design_doc.py --check    # exit 1 if they are not what this writes

A generated part sits between `<!-- generated: NAME -->` and `<!-- end generated -->`; the prose
around it is the author's. tests/test_design.py runs the check, and checks that every item of
"Not supported yet" is refused by the code; tests/test_layers.py reads the imports with `imports`
(below), the one reader of the package's import graph.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
PACKAGE = "toyrl"
COMMAND = "python scripts/design_doc.py"
PART = re.compile(r"(<!-- generated: ([a-z-]+) -->\n)(.*?)(<!-- end generated -->)", re.DOTALL)


# --- the import graph -------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    """One name an import statement binds: `module` is the module it runs (a `from` import's
    module, or its submodule where the name is one), `name` what it takes from that module ('' for
    a module itself), `bound` the local name, `typing_only` under `if TYPE_CHECKING:` (never run)."""

    line: int
    module: str
    name: str
    bound: str
    typing_only: bool


def module_name(path: Path, root: Path = ROOT) -> str:
    """`toyrl/stages/kl.py` -> toyrl.stages.kl; a package's `__init__.py` -> the package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(dotted: str, root: Path) -> bool:
    where = root.joinpath(*dotted.split("."))
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _typing_guard(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path, root: Path = ROOT) -> list[Import]:
    """Every import of the module at `path`, read with Python's own grammar (`ast`), at every level:
    a function's local import counts as one at the top does; relative ones resolved against its
    package under `root`. Each file is read once while it is unchanged (the tests walk the
    package several times)."""
    stat = path.stat()
    return list(_imports(path, root, (stat.st_mtime_ns, stat.st_size)))


@functools.cache
def _imports(path: Path, root: Path, stamp: tuple[int, int]) -> tuple[Import, ...]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[Import] = []

    def visit(body: list[ast.stmt], typing_only: bool) -> None:
        """The statements of `body` and every block nested in them (imports are statements: the
        expressions need no walk)."""
        for statement in body:
            if isinstance(statement, ast.Import):
                for alias in statement.names:
                    bound = alias.asname or alias.name.partition(".")[0]
                    found.append(Import(statement.lineno, alias.name, "", bound, typing_only))
            elif isinstance(statement, ast.ImportFrom):
                base = package.rsplit(".", statement.level - 1)[0] if statement.level else ""
                source = ".".join(part for part in (base, statement.module or "") if part)
                for alias in statement.names:
                    bound = alias.asname or alias.name
                    if _is_module(f"{source}.{alias.name}", root):
                        found.append(
                            Import(statement.lineno, f"{source}.{alias.name}", "", bound, typing_only)
                        )
                    else:
                        found.append(Import(statement.lineno, source, alias.name, bound, typing_only))
            guarded = isinstance(statement, ast.If) and _typing_guard(statement)
            visit(getattr(statement, "body", []), typing_only or guarded)
            visit(getattr(statement, "orelse", []), typing_only)
            visit(getattr(statement, "finalbody", []), typing_only)
            for block in [*getattr(statement, "handlers", []), *getattr(statement, "cases", [])]:
                visit(block.body, typing_only)

    visit(tree.body, False)
    return tuple(found)


def package_modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    return {module_name(path, root): path for path in sorted((root / PACKAGE).rglob("*.py"))}


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """module -> the package's modules it imports when it runs (top level or in a function; not
    under TYPE_CHECKING). Importing `toyrl.x` also runs the package's `__init__` first: that
    implied import is not an edge (every module would otherwise import the API), but `from toyrl
    import __version__`, a name of the package itself, is."""
    modules = package_modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        run = {i.module for i in imports(path, root) if not i.typing_only}
        graph[name] = (run & modules.keys()) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's algorithm),
    each sorted: a cycle of imports runs through every module of one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(found)


# The layers, lowest first: a module belongs to the first whose prefixes name it (a prefix names a
# module and everything under it). Every module has one (tests/test_layers.py), and a layer imports
# only layers listed before it.
LAYERS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "base",
        "the configuration, values read from text, refusals as data, files read and written, progress "
        "lines, colours",
        ("version", "config", "values", "refusals", "inputs", "files", "install", "progress", "looks"),
    ),
    ("arithmetic", "the same bits everywhere: IEEE-basic kernels, variates", ("kernels", "noise")),
    ("policy", "closed forms, the token table, the one policy gradient", ("policy",)),
    ("stages", "one module a kind: its Kind record, Protocol and registered stages", ("stages",)),
    (
        "objective",
        "a variant: one stage of each kind, its spec; the named variants",
        ("objective", "variants"),
    ),
    ("train", "train_step and simulate; the ranks' layout; the exact E[g]", ("train", "layout", "expected")),
    ("plugins", "stages from a plugin file, held to their kind's contract", ("plugins",)),
    ("experiment", "chunks of runs over joblib workers, the results table", ("experiment",)),
    ("results", "the CSV and its sidecar; spread over seeds", ("results", "spread")),
    ("measures", "bias against the true gradient; the source documents' examples", ("bias", "examples")),
    ("plots", "figures from saved results", ("plots", "plot")),
    ("sweep", "a grid of configurations, resumable", ("sweep",)),
    ("trainers", "trainers' settings -> a variant (toyrl check)", ("trainers",)),
    ("bridge", "TRL's own trainer on the toy task; token-level losses in torch", ("bridge", "losses")),
    ("page", "the page: its data from Python (explore.py), its simulator in JavaScript", ("explore",)),
    ("api", "the Python API: toyrl.run, toyrl.check, ...", ("api", "")),
    ("cli", "the toyrl command", ("cli",)),
)


def layer_of(module: str) -> str:
    """The layer of a module of the package ('' if none names it)."""
    local = module.removeprefix(PACKAGE).removeprefix(".")
    for layer, _, prefixes in LAYERS:
        for prefix in prefixes:
            if local == prefix or (
                prefix and (local.startswith(prefix + ".") or local.startswith(prefix + "_"))
            ):
                return layer
    return ""


def layer_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """layer -> the layers its modules import."""
    out: dict[str, set[str]] = {layer: set() for layer, _, _ in LAYERS}
    for module, imported in graph.items():
        out[layer_of(module)] |= {layer_of(other) for other in imported} - {layer_of(module)}
    return out


def layers_part(root: Path = ROOT) -> str:
    """The layer diagram: each layer (highest first), its modules, and the layers it imports."""
    graph = import_graph(root)
    layers = layer_graph(graph)
    members: dict[str, dict[str, list[str]]] = {layer: {} for layer, _, _ in LAYERS}
    for module, path in package_modules(root).items():
        file = path.relative_to(root / PACKAGE)
        folder = f"{file.parent}/" if file.parent.parts else ""
        members[layer_of(module)].setdefault(folder, []).append(file.stem if folder else file.name)
    page = root / PACKAGE / "explorer"  # the page's JavaScript and HTML, read by explore.py
    members["page"]["explorer/"] = [p.name for p in page.iterdir() if p.suffix in (".js", ".html")]
    lines = []
    for layer, words, _ in reversed(LAYERS):
        files = [
            f"{folder} ({', '.join(sorted(names))})" if folder else ", ".join(sorted(names))
            for folder, names in sorted(members[layer].items())
        ]
        below = [name for name, _, _ in LAYERS if name in layers[layer]]
        lines += textwrap.wrap(f"{layer}: {words}", 96, subsequent_indent="    ")
        lines += textwrap.wrap(", ".join(files), 96, initial_indent="    ", subsequent_indent="    ")
        lines += textwrap.wrap(
            "imports " + (", ".join(below) or "nothing of toyrl"),
            96,
            initial_indent="    -> ",
            subsequent_indent="       ",
        )
    return "```text\n" + "\n".join(lines) + "\n```\n"


# --- the stages ---------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(names: Any) -> str:
    return ", ".join(f"`{name}`" for name in names) or "none"


def built_in(kind: str) -> dict[str, Any]:
    """The kind's registered stages that toyrl itself registers (not a plugin's, or a test's)."""
    from toyrl.stages import REGISTRY

    return {
        name: stage for name, stage in REGISTRY[kind].items() if type(stage).__module__.startswith("toyrl.")
    }


def _parameter(stage: Any, name: str, rules: dict[str, dict[str, Any]]) -> str:
    value = getattr(stage, name)
    shown = f"`{name}`={value!r}" if not isinstance(value, float) else f"`{name}`={value:g}"
    rule = rules.get(name)
    return shown if rule is None else f"{shown} ({rule['requirement'].removeprefix('must be ')})"


def stages_part() -> str:
    """The kinds (from their `Kind` records) and every registered stage: its class, parameters with
    their valid values, and whether the exact update takes it."""
    from toyrl.stages import KIND, declarations, parameters, simulated_only

    kinds = [
        "| step | kind | spec key | default | a chunk shares one | configuration it sees | toyrl calls "
        "| exact hooks |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for step, record in enumerate(KIND.values(), 1):
        exact = _code(record.exact_hooks) if not record.no_exact_form else f"none: {record.no_exact_form}"
        kinds.append(
            f"| {step} | {record.name} | `{record.key}` | `{record.default}` | "
            f"{'yes' if record.chunk else 'no'} | {_code(record.settings)} | {_code(record.calls)} | "
            f"{_cell(exact)} |"
        )
    stages = [
        "| kind | stage | class | parameters (valid values) | exact update |",
        "| --- | --- | --- | --- | --- |",
    ]
    for kind in KIND:
        for name, stage in built_in(kind).items():
            rules = declarations(type(stage))
            shown = "; ".join(_parameter(stage, field, rules) for field in parameters(stage)) or "none"
            why = simulated_only(stage)
            stages.append(
                f"| {kind} | `{name}` | `{type(stage).__name__}` | {_cell(shown)} | "
                f"{_cell(f'simulated only: {why}' if why else 'exact')} |"
            )
    return "\n".join(kinds) + "\n\n" + "\n".join(stages) + "\n"


# --- what is supported, and what is not yet ---------------------------------------------------


def supported_part() -> str:
    from toyrl.stages import KIND, simulated_only
    from toyrl.trainers import registry
    from toyrl.variants import ARTICLE, VARIANTS

    counts = {kind: len(built_in(kind)) for kind in KIND}
    exact = sum(not simulated_only(stage) for kind in KIND for stage in built_in(kind).values())
    presets = [name for name in VARIANTS if name not in ARTICLE]
    trainers = []
    for name, t in registry().items():
        releases = list(t.releases)  # the default first
        span = (
            f"{len(releases)} releases, {releases[-1]} to {releases[0]}" if len(releases) > 1 else releases[0]
        )
        trainers.append(f"{t.name} (`{name}`, {span})")
    items = [
        f"**Stages**: {sum(counts.values())} registered ("
        + ", ".join(f"{n} {kind}" for kind, n in counts.items())
        + f"), {exact} of them with an exact form (the table above); more from your own code "
        "(Adding a stage, above) or a plugin file the `toyrl` command loads with `--plugin` "
        "([plugins.md](plugins.md)).",
        f"**Named variants** ({len(VARIANTS)}, `toyrl variants`): the article's {len(ARTICLE)} "
        f"({_code(ARTICLE)}) and {len(presets)} presets of trainers and papers ({_code(presets)}).",
        f"**Trainers** `toyrl check` reads ({len(trainers)}): {', '.join(trainers)}.",
        "**Exact expected updates** (`toyrl.expected_update`, `toyrl bias`, `mean_field=True`): a "
        "variant whose stages are all exact (the table above), at one on-policy update a batch "
        "(`num_iterations` = `mini_batches` = `micro_batches` = 1), without a KL term (`beta` = 0).",
    ]
    return _items(items)


# What the code refuses that a user may want: (the item, (spec, words of its refusal) of variants
# the exact update must refuse). tests/test_design.py asks the code for each, so an item the code
# gains fails it.
NOT_YET: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "**Exact updates beyond the first.** Later epochs, mini-batches, micro-batches (by count or "
        "by token budget) and the ranks' layout make the update depend on more than the policy: "
        "they are simulated.",
        (
            ("num_iterations=2", "later epochs"),
            ("mini_batches=2", "later mini-batches"),
            ("micro_batches=2", "micro-batches"),
            ("token_budget=100", "micro-batches"),
            ("ranks=2", "the ranks' layout"),
        ),
    ),
    (
        "**A KL term in the exact update**, in the loss or in the reward: simulated.",
        (("beta=0.04", "the KL term"), ("kl=k1_reward,beta=0.04", "the KL reward")),
    ),
)


def simulated_stages() -> dict[str, dict[str, str]]:
    """kind -> the built-in stages without an exact form (at their registered parameters) and why."""
    from toyrl.stages import KIND, simulated_only

    out = {}
    for kind in KIND:
        reasons = {name: simulated_only(stage) for name, stage in built_in(kind).items()}
        if any(reasons.values()):
            out[kind] = {name: why for name, why in reasons.items() if why}
    return out


def refusals() -> Iterator[tuple[str, str]]:
    """(spec, the words its refusal must hold) of every item of "Not supported yet"."""
    from toyrl.stages import KIND

    for _, specs in NOT_YET:
        yield from specs
    for kind, stages in simulated_stages().items():
        for name, why in stages.items():
            yield f"{KIND[kind].key}={name}", why


def _items(items: list[str]) -> str:
    return "".join(
        textwrap.fill(item, 100, initial_indent="- ", subsequent_indent="  ", break_on_hyphens=False) + "\n"
        for item in items
    )


def not_supported_part() -> str:
    from toyrl.stages import KIND

    lead = (
        "**An exact update of these stages**, at their registered parameters (a sampled run takes "
        "them; the exact update refuses them, saying why):"
    )
    lines = _items([*(text for text, _ in NOT_YET), lead])
    for kind, reasons in simulated_stages().items():
        by_reason: dict[str, list[str]] = {}
        for name, why in reasons.items():
            by_reason.setdefault(why, []).append(name)
        text = "; ".join(f"{_code(names)}: {why}" for why, names in by_reason.items())
        lines += textwrap.fill(
            f"{kind} (`{KIND[kind].key}`): {text}",
            100,
            initial_indent="  - ",
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
        lines += "\n"
    return lines


PARTS: dict[str, Callable[[], str]] = {
    "layers": layers_part,
    "stages": stages_part,
    "supported": supported_part,
    "not-supported": not_supported_part,
}


def generated(text: str) -> str:
    """`text` (docs/design.md) with every generated part made again from the code."""
    names = [match.group(2) for match in PART.finditer(text)]
    unknown = sorted(set(names) - set(PARTS))
    missing = sorted(set(PARTS) - set(names))
    if unknown or missing or len(names) != len(set(names)):
        raise ValueError(f"docs/design.md's generated parts are {names}; this writes {list(PARTS)}")
    return PART.sub(lambda match: match.group(1) + PARTS[match.group(2)]() + match.group(4), text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/design.md is out of date")
    args = parser.parse_args()
    text = DESIGN.read_text(encoding="utf-8")
    new = generated(text)
    if args.check:
        if new != text:
            print(f"{DESIGN.relative_to(ROOT)}'s generated parts are out of date: {COMMAND}", file=sys.stderr)
            return 1
        return 0
    DESIGN.write_text(new, encoding="utf-8")
    print(f"wrote {DESIGN.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
