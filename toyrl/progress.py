"""Progress of the long steps, on stderr: what `toyrl run`, `toyrl.run` and the other long
commands print while they work (`Progress`; `--quiet` or `progress=False` silences it), and the
step times they report (`duration`). Below the CLI: the API and the commands both use it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

# the fewest columns a progress line takes (as toyrl.cli.terminal's lines for people)
MIN_WIDTH = 80

PROGRESS_AFTER = 1.0  # seconds into a step before its first progress line: quicker steps print none
PROGRESS_EVERY = 0.5  # seconds between progress lines on a terminal (the line is redrawn) ...
PROGRESS_EVERY_LOGGED = 10.0  # ... and written to a file or a pipe (one line each)


def duration(seconds: float) -> str:
    """Seconds as people say them: 0.42 s, 7.3 s, 42 s, 12 min, 1.5 h."""
    if seconds < 1:
        return f"{seconds:.2f} s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class _Phase:
    """One long step of a command: `done` of `total` `unit` (None: its size is unknown), of which
    `base` were done before the command started."""

    def __init__(self, what: str, total: float | None, unit: str) -> None:
        self.what, self.total, self.unit = what, total, unit
        self.done, self.base = 0.0, 0.0
        self.started = time.perf_counter()
        self.last: float | None = None  # when its status was last shown
        self.shown = False

    def status(self, now: float) -> str:
        elapsed = now - self.started
        if self.total is None:
            return f"{self.what}... {duration(elapsed)} so far"
        measured = self.done - self.base
        if self.done >= self.total > 0:  # what remains of the step is not counted in `unit`
            counted = f"all {self.total:,.0f} {self.unit}" if self.unit else "all"
            return f"{self.what}: {counted} done, finishing ({duration(elapsed)} so far)"
        if measured <= 0:
            return f"{self.what}: estimating... ({duration(elapsed)} so far)"
        percent = int(100 * self.done / self.total) if self.total else 100
        left = elapsed / measured * (self.total - self.done)
        eta = "under 1 s left" if left < 1 else f"about {duration(left)} left"
        size = f" of {self.total:,.0f} {self.unit}" if self.unit else ""
        return f"{self.what}: {percent}%{size}, {duration(elapsed)}, {eta}"


class Progress:
    """The long steps of one command, reported on stderr while they run.

    A step (`begin`) prints nothing if it ends within PROGRESS_AFTER seconds; otherwise a status
    line appears and is refreshed (redrawn in place on a terminal): the share done, the time so
    far and the time left at the rate measured so far, or "estimating..." until there is a
    measurement, or only the time so far for a step whose size is unknown. A step that was shown
    ends with a line saying how long it took; `took` keeps every step's time for the summary.
    Nothing is printed when `quiet`.
    """

    def __init__(self, command: str, quiet: bool = False) -> None:
        self.command, self.quiet = command, quiet
        self.terminal = not quiet and _is_terminal(sys.stderr)
        self.took: dict[str, float] = {}
        self._phase: _Phase | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drawn = False  # a status line is on the terminal, without its newline

    def __enter__(self) -> Progress:
        if not self.quiet:
            self._thread = threading.Thread(target=self._watch, name="toyrl-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind: Any, error: Any, trace: Any) -> None:
        if error is None:
            self.end()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self._drawn:  # interrupted mid-step: the error goes on a line of its own
                self._write("\r\x1b[K", newline=False)
                self._drawn = False

    def begin(self, what: str, total: float | None = None, unit: str = "") -> None:
        """Start a step (ending the one before): `total` of `unit` to do, or None if unknown."""
        self.end()
        with self._lock:
            self._phase = _Phase(what, total, unit)

    def update(self, done: float, total: float | None = None, base: float = 0.0) -> None:
        """`done` of the step's `total` (which may be given here); `base`: done before this command
        started (a resumed sweep), which does not count towards the measured rate."""
        phase = self._phase
        if phase is not None:
            phase.done, phase.base = done, base
            if total is not None:
                phase.total = total

    def end(self) -> None:
        with self._lock:
            phase, self._phase = self._phase, None
            if phase is None:
                return
            took = time.perf_counter() - phase.started
            self.took[phase.what] = self.took.get(phase.what, 0.0) + took
            if phase.shown:
                self._show(f"{phase.what}: done in {duration(took)}", final=True)

    def saving(self, out: Path) -> Callable[[str, int, int], None]:
        """The progress callback of `toyrl.results.save_results` for results written to `out`."""

        def report(stage: str, done: int, total: int) -> None:
            what = f"{stage} {out.name}"
            if self._phase is None or self._phase.what != what:
                self.begin(what, total, "rows")
            self.update(done, total)

        return report

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            with self._lock:
                phase, now = self._phase, time.perf_counter()
                if phase is None or now - phase.started < PROGRESS_AFTER:
                    continue
                every = PROGRESS_EVERY if self.terminal else PROGRESS_EVERY_LOGGED
                if phase.last is None or now - phase.last >= every:
                    phase.last = now
                    phase.shown = True
                    self._show(phase.status(now), final=False)

    def _show(self, text: str, final: bool) -> None:
        line = f"{self.command}: {text}"
        if not self.terminal:
            self._write(line, newline=True)
        elif len(line) < _terminal_columns(sys.stderr):  # redrawn in place
            self._write(f"\r{line}\x1b[K", newline=final)
            self._drawn = not final
        else:  # a line that would wrap cannot be redrawn: it stays, on a line of its own
            self._write(f"\r\x1b[K{line}", newline=True)
            self._drawn = False

    def _write(self, text: str, newline: bool) -> None:
        try:
            typer.echo(text, err=True, nl=newline)
        except (OSError, ValueError):  # stderr closed: progress is not worth failing for
            pass


def _terminal_columns(stream: Any) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return MIN_WIDTH


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def step_times(progress: Progress, *steps: tuple[str, str]) -> str:
    """'simulating 0.62 s, writing toyrl-run.csv 0.11 s': the steps that ran, with their times."""
    return ", ".join(
        f"{label} {duration(progress.took[key])}" for key, label in steps if key in progress.took
    )
