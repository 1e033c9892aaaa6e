"""Output for people: lines and tables that fit the terminal, and progress of the long steps.

Tables and notes wrap to `COLUMNS` (or the terminal's width, at least MIN_WIDTH), and are left
whole when written to a file or a pipe (`output_width`). Progress of the long steps goes to stderr
(`Progress`; `--quiet` silences it), results to stdout. Loading this module imports neither numpy
nor pandas (`toyrl --help` stays quick); a table cut into parts, and the results' summary, import
what they use when drawn.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    import pandas as pd

    from toyrl.experiment import Columns


MIN_WIDTH = 80


def output_width() -> int | None:
    """Columns that lines for people must fit in: COLUMNS when set, else the terminal's when stdout
    is one (never fewer than MIN_WIDTH); None when stdout is a file or a pipe, which get whole lines."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit():
        return max(MIN_WIDTH, int(columns))
    try:
        if not sys.stdout.isatty():
            return None
        return max(MIN_WIDTH, os.get_terminal_size(sys.stdout.fileno()).columns)
    except (AttributeError, ValueError, OSError):
        return None


def wrap(text: str, width: int | None, indent: str = "", hanging: str | None = None) -> str:
    """`text` filled to `width` (None: one line), its first line indented by `indent`, the others by
    `hanging` (default: `indent`). Words are never split, nor "x = y" and "Dr. GRPO" parted, so a single word
    longer than the width (a path) stays whole."""
    if width is None or len(indent) + len(text) <= width:
        return indent + text
    filled = textwrap.fill(
        text.replace(" = ", "\0=\0").replace("Dr. GRPO", "Dr.\0GRPO"),  # "G = 8" stays on one line
        width=width,
        initial_indent=indent,
        subsequent_indent=indent if hanging is None else hanging,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return filled.replace("\0", " ")


def wrap_list(text: str, width: int | None, indent: str, hanging: str, separator: str = ",") -> str:
    """A list without spaces (a spec, key=value,...) broken after its separators to fit `width`."""
    if width is None or len(indent) + len(text) <= width:
        return indent + text
    pieces = re.findall(rf"[^{separator}]+{separator}?", text)
    lines, line = [], indent
    for piece in pieces:
        if line.strip() and len(line) + len(piece) > width:
            lines.append(line)
            line = hanging
        line += piece
    return "\n".join([*lines, line])


def number(value: object) -> str:
    """A table cell: floats to 6 significant digits, and 0 for anything within 1e-15 of zero (the
    rounding residue of an exact zero, e.g. Dr. GRPO's E[g] along phi_wrong). The one rule for
    `toyrl bias`'s table and docs/lesson.ipynb's expected-update table."""
    if isinstance(value, float):
        return "0" if abs(value) < 1e-15 else f"{value:.6g}"
    return str(value)


def echo_lines(lines: Sequence[str], width: int | None) -> None:
    """Lines of a report wrapped to `width`: a '  - item' line hangs under its text, any other under
    its own indent and four more spaces (the short rows of a table fit as they are)."""
    for line in lines:
        bullet = re.match(r" *- ", line)
        indent = len(line) - len(line.lstrip(" "))
        hanging = " " * (bullet.end() if bullet else indent + 4)
        typer.echo(wrap(line, width, hanging=hanging))


# ---------------------------------------------------------------------------------------------------
# Tables


def format_table(
    rows: Sequence[Sequence[str]], indent: str = "", left_first: bool = True, width: int | None = None
) -> str:
    """Rows of cells (the first the header) as an aligned text table with a rule under the header:
    numbers right-aligned, the first column left-aligned when `left_first`.

    With `width` (the terminal's columns), a table too wide for it has its header cells wrapped
    onto several lines; if its cells are still too wide, it is cut into several tables of
    consecutive columns, one under the other, each repeating the first column. Cells are never
    cut: a single cell wider than `width` stays whole.
    """
    header, body = list(rows[0]), [list(row) for row in rows[1:]]
    cells = [max((len(row[i]) for row in body), default=0) for i in range(len(header))]
    natural = [max(len(title), cell) for title, cell in zip(header, cells, strict=True)]
    if width is None or _table_width(natural, indent) <= width:
        return _aligned(header, body, natural, indent, left_first)
    smallest = [max([cell, *map(len, title.split())]) for title, cell in zip(header, cells, strict=True)]
    if _table_width(smallest, indent) <= width or len(header) <= 2:
        return _aligned(
            header,
            body,
            _widen(header, smallest, natural, width - _table_width(smallest, indent)),
            indent,
            left_first,
        )
    blocks: list[list[int]] = []
    for column in range(1, len(header)):
        block = blocks[-1] if blocks else None
        if block is None or _table_width([smallest[i] for i in [0, *block, column]], indent) > width:
            blocks.append([column])
        else:
            block.append(column)
    import numpy as np

    # As many tables, with the columns shared out as evenly as they fit (not a full one and a rest).
    columns = list(range(1, len(header)))
    even = [list(part) for part in np.array_split(columns, len(blocks))]
    if all(_table_width([smallest[i] for i in [0, *block]], indent) <= width for block in even):
        blocks = [[int(i) for i in block] for block in even]
    return "\n\n".join(
        format_table([[row[i] for i in [0, *block]] for row in rows], indent, left_first, width)
        for block in blocks
    )


def _table_width(widths: Sequence[int], indent: str) -> int:
    return len(indent) + sum(widths) + 2 * (len(widths) - 1)


def _widen(header: Sequence[str], smallest: list[int], natural: list[int], spare: int) -> list[int]:
    """Column widths from `smallest` up towards `natural`, using `spare` columns where they save the
    most header lines first."""
    widths = list(smallest)

    def lines(i: int, w: int) -> int:
        return len(textwrap.wrap(header[i], w, break_long_words=False)) or 1

    while spare > 0:
        tallest = max(range(len(widths)), key=lambda i: (lines(i, widths[i]), -i))
        if lines(tallest, widths[tallest]) == 1:
            break
        # The least widening that takes a line off the tallest header, if the spare columns allow.
        target = next(
            (
                w
                for w in range(widths[tallest] + 1, natural[tallest] + 1)
                if lines(tallest, w) < lines(tallest, widths[tallest])
            ),
            None,
        )
        if target is None or target - widths[tallest] > spare:
            break
        spare -= target - widths[tallest]
        widths[tallest] = target
    return widths


def _aligned(
    header: Sequence[str], body: Sequence[Sequence[str]], widths: Sequence[int], indent: str, left_first: bool
) -> str:
    def line(cells: Sequence[str]) -> str:
        return (
            indent
            + "  ".join(
                text.ljust(width) if i == 0 and left_first else text.rjust(width)
                for i, (text, width) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )

    titles = [
        [title] if len(title) <= width else textwrap.wrap(title, width, break_long_words=False)
        for title, width in zip(header, widths, strict=True)
    ]
    height = max(len(lines) for lines in titles)
    titles = [[""] * (height - len(lines)) + lines for lines in titles]  # the last line on the rule
    heading = [line([lines[k] for lines in titles]) for k in range(height)]
    return "\n".join([*heading, indent + "  ".join("-" * w for w in widths), *map(line, body)])


def format_summary(frame: pd.DataFrame | Columns, width: int | None = None) -> str:
    """The last step's summary of a results table as an aligned text table for the terminal."""
    from toyrl.results import SUMMARY_HEADER, summary_rows

    return format_table([SUMMARY_HEADER, *summary_rows(frame)], width=width)
