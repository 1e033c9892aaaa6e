"""What a command printed on stderr, read as a user reads it, whatever the machine's speed.

A step that takes over a second prints progress lines (`toyrl.progress.Progress`, unless `-q`); on
a loaded machine even reading a small file can, so a test of a failing command that is not quiet must
accept them before its error, and no more than them.
"""

import re

# The statuses of `toyrl.progress._Phase.status` and `Progress.end`, after "toyrl <command>: ".
PROGRESS = re.compile(
    r"toyrl[ .][a-z]+: .+"
    r"(\.\.\. [0-9.]+ (s|min|h) so far|: estimating\.\.\. \([0-9.]+ (s|min|h) so far\)"
    r"|: all .* done, finishing \([0-9.]+ (s|min|h) so far\)|: [0-9]+%.*, (under 1 s|about .+) left"
    r"|: done in [0-9.]+ (s|min|h))"
)
ERASE = "\x1b[K"  # to the line's end: a terminal's status is redrawn in place, after a carriage return


def _progress(line: str) -> bool:
    """Whether a line holds progress statuses only: one, or on a terminal, any number drawn over each
    other after carriage returns (the last maybe erased)."""
    if "\r" not in line:
        return PROGRESS.fullmatch(line) is not None
    first, *drawn = line.split("\r")
    shown = [piece.removeprefix(ERASE).removesuffix(ERASE) for piece in drawn]
    return first == "" and all(text == "" or PROGRESS.fullmatch(text) for text in shown)


def error_line(stderr: str) -> str:
    """The one-line error that ends `stderr` ("toyrl: error: ..."), after nothing but progress lines;
    fails the test otherwise (a traceback, a warning, a second error, an error glued to a progress
    line or drawn over one without erasing it)."""
    assert stderr.endswith("\n"), stderr
    *before, last = stderr[:-1].split("\n")
    drawn, _, error = last.rpartition("\r")
    if drawn:  # the statuses drawn on this line are erased before the error
        assert error.startswith(ERASE) and _progress(drawn), stderr
        error = error.removeprefix(ERASE)
    assert error.startswith("toyrl: error: ") and all(map(_progress, before)), stderr
    return error
