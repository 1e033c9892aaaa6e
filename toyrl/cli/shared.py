"""What the commands of `toyrl` share: the typer `app` they register on, the text of --json, and
the line that says which results were written. `commands` and `bridge` both import it, so neither
imports the other's helpers (tests/test_layers.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from toyrl.cli.options import OneLineErrors
from toyrl.version import __version__

app = typer.Typer(
    cls=OneLineErrors,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Exact toy simulation of GRPO's length bias and its removal by Dr. GRPO.",
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"toyrl {__version__}")
        raise typer.Exit()


@app.callback()
def _toyrl(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Print toyrl's version and exit."
        ),
    ] = False,
) -> None:
    """Exact toy simulation of GRPO's length bias and its removal by Dr. GRPO."""


def json_text(data: Any) -> str:
    """`data` as the JSON of --json: strict (no Infinity or NaN, which JSON has not), each float
    that is not finite written as null."""

    def strict(value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {key: strict(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [strict(item) for item in value]
        return value

    return json.dumps(strict(data), indent=2, allow_nan=False)


def saved_line(out: Path, kept: bool) -> str:
    """What a command that writes results says of them: written, or kept (already the same bits)."""
    if kept:
        return f"kept {out} and {out.with_suffix('.json')}: they already hold these numbers, to the bit"
    return f"wrote {out} and {out.with_suffix('.json')}"
