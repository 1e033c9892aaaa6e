"""Comparisons of files and results that fail with a short message, never a diff of their contents.

pytest renders `assert a == b` on two long byte strings as a full diff, which for megabyte files
takes longer than the test run itself; these helpers report where the first difference is instead.
"""

from pathlib import Path


def first_difference(a: bytes, b: bytes) -> str:
    """'' if equal; else the first differing line (number and up to 120 characters of each side)."""
    if a == b:
        return ""
    lines_a, lines_b = a.splitlines(), b.splitlines()
    for number, (line_a, line_b) in enumerate(zip(lines_a, lines_b, strict=False), start=1):
        if line_a != line_b:
            differing = sum(x != y for x, y in zip(lines_a, lines_b, strict=False))
            return (
                f"line {number} differs ({differing} of {len(lines_a)} lines differ): "
                f"{line_a[:120]!r} against {line_b[:120]!r}"
            )
    return f"{len(lines_a)} lines against {len(lines_b)} (one is a prefix of the other)"


def assert_identical_files(a: Path, b: Path) -> None:
    """Byte-for-byte equality, as within one machine."""
    difference = first_difference(a.read_bytes(), b.read_bytes())
    assert not difference, f"{a} and {b}: {difference}"
