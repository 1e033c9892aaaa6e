"""Write docs/api.md, the Python API's reference, from the functions' signatures and docstrings.

    python scripts/api_reference.py            # rewrite docs/api.md
    python scripts/api_reference.py --check    # exit 1 if docs/api.md is not what this writes

tests/test_api.py runs the check, so the page cannot drift from the code.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "api.md"

INTRO = """# The Python API

For notebooks and scripts: what the `toyrl` commands do, returning tables and figures. Every
function below is reached from `import toyrl`, but the bridge's (`import toyrl.bridge`, whose
training needs the bridge extra); the figures' (`toyrl.plot`) import matplotlib on first use. A
notebook that walks through the article with them is [lesson.ipynb](lesson.ipynb).

This page is generated from the docstrings by `python scripts/api_reference.py`; edit those, not
this file.
"""


def signature(function: Callable[..., Any]) -> str:
    """The call as written in the source: annotations as spelt there (they are strings under
    `from __future__ import annotations`), one parameter a line."""
    parts = []
    star = False
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind is parameter.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        prefix = "**" if parameter.kind is parameter.VAR_KEYWORD else ""
        text = f"{prefix}{parameter.name}: {parameter.annotation}"
        if parameter.default is not parameter.empty:
            # a module constant by its name (toyrl.bridge's BRIDGE_CONFIG), not its long repr
            module = vars(inspect.getmodule(function) or object)
            named = [name for name, value in module.items() if name.isupper() and value is parameter.default]
            plain = parameter.default is None or isinstance(parameter.default, (bool, int, float, str))
            shown = named[0] if named and not plain else None
            text += f" = {shown or repr(parameter.default)}"
        parts.append(text)
    returned = inspect.signature(function).return_annotation
    return "(\n" + "".join(f"    {part},\n" for part in parts) + f") -> {returned}"


def section(title: str, owner: str, functions: list[Callable[..., Any]]) -> list[str]:
    lines = ["", f"## {title}", ""]
    for function in functions:
        lines += [
            f"### `{owner}.{function.__name__}`",
            "",
            "```python",
            f"{owner}.{function.__name__}{signature(function)}",
            "```",
            "",
            inspect.cleandoc(function.__doc__ or ""),
            "",
        ]
    return lines


def reference() -> str:
    import toyrl
    import toyrl.plot

    lines = INTRO.splitlines()
    # The module docstring's example: its indented block (blank lines inside kept).
    doc = inspect.cleandoc(toyrl.api.__doc__ or "").split("\n\n", 1)[1]
    block = re.match(r"((?: {4}.*\n|\n)+)", doc + "\n")
    example = textwrap.dedent(block.group(1) if block else "").strip("\n")
    lines += ["", "```python", example, "```"]
    lines += section("Runs and their tables", "toyrl", [toyrl.run, toyrl.save, toyrl.load])
    lines += section("Exact expected updates", "toyrl", [toyrl.expected_update])
    lines += section("A trainer's settings", "toyrl", [toyrl.check])
    plot_functions = [
        toyrl.plot.length_2x2,
        toyrl.plot.length_by_correctness,
        toyrl.plot.accuracy,
        toyrl.plot.branch_lengths,
        toyrl.plot.save,
    ]
    lines += section("Figures (`toyrl.plot`)", "toyrl.plot", plot_functions)
    import toyrl.bridge

    lines += section(
        "TRL's trainer beside the toy (`import toyrl.bridge`; the bridge extra)",
        "toyrl.bridge",
        [toyrl.bridge.compare, toyrl.bridge.run_bridge, toyrl.bridge.read_input, toyrl.bridge.gap],
    )
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/api.md is out of date")
    args = parser.parse_args()
    text = reference()
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.relative_to(ROOT)} is out of date: python scripts/api_reference.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
