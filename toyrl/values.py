"""Values given as text: the one reading of a boolean, an integer and a number.

Every text a user gives for a typed value (a spec's parameter, a sweep's grid values, a trainer's
`--set`, an integer or number option) goes through these functions, so that `false` means false
everywhere and a spelling that one place refuses is refused everywhere:

- a boolean is `true` or `false`, or `1` or `0`, in any case; anything else (`yes`, `no`, `off`,
  an empty text) is refused rather than guessed;
- an integer is ASCII digits with an optional sign, `_` between digits, and an optional `.0`
  (`16`, `+16`, `1_000`, `16.0`), at most as many digits as Python converts (4300 by default);
- a number is what Python's `float` reads from ASCII text (`0.02`, `1e-6`, `inf`), infinity only
  when spelt so (not `1e400`, nor an integer of 400 digits): its range is each value's own check.
"""

from __future__ import annotations

import math
import re
import sys
from typing import Any

from toyrl.config import InvalidInput, shown

TRUE = ("true", "1")
FALSE = ("false", "0")
BOOLEAN_SPELLINGS = "true or false (or 1 or 0)"
INTEGER = re.compile(r"\s*([+-]?[0-9]+(?:_[0-9]+)*)(?:\.0*)?\s*")


def parse_bool(name: str, text: str | bool) -> bool:
    """`text` as a boolean (`TRUE`, `FALSE`, any case), or InvalidInput naming `name`."""
    if isinstance(text, bool):
        return text
    lowered = str(text).strip().lower()
    if lowered in TRUE or lowered in FALSE:
        return lowered in TRUE
    raise InvalidInput(f"{name} must be {BOOLEAN_SPELLINGS} (got {text!r})")


def parse_int(name: str, text: str) -> int:
    """`text` as an integer (see the module docstring), or InvalidInput naming `name`."""
    match = INTEGER.fullmatch(text) if text.isascii() else None
    if match is None:
        raise InvalidInput(f"{name} must be an integer (got {text!r})")
    try:
        return int(match.group(1))
    except ValueError:  # beyond Python's limit of digits, and so beyond every setting's range
        limit = sys.get_int_max_str_digits()
        raise InvalidInput(
            f"{name} must be an integer of at most {limit:,} digits (got {shown(text)})"
        ) from None


def parse_float(name: str, text: str) -> float:
    """`text` as a number (`float` on ASCII text), or InvalidInput naming `name`: infinity only
    when spelt so, never as a number too large for a float (1e400, or an integer of 400 digits)."""
    try:
        if text.isascii():
            value = float(text)
            if math.isfinite(value) or "inf" in text.lower() or value != value:
                return value
    except ValueError:
        pass
    raise InvalidInput(f"{name} must be a number (got {shown(text)})")


def parse_as(name: str, text: str, like: Any) -> Any:
    """`text` typed as `like` (a default) is: a boolean, an integer or a number; other text as it is."""
    if isinstance(like, bool):
        return parse_bool(name, text)
    if isinstance(like, int):
        return parse_int(name, text)
    if isinstance(like, float):
        return parse_float(name, text)
    return text
