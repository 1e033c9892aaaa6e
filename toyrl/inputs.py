"""The files toyrl reads: regular files only, each kind with a size cap.

Every file toyrl is given or finds (a results CSV and its JSON sidecar, a sweep's manifest and
runs, a trainer's configuration file or script, a plugin) is read through `read_bytes` or
`open_regular`, with its `Kind`. A folder, FIFO, device or socket is refused from
its `stat` (symbolic links followed), before it is opened: opening a FIFO for reading waits for a
writer, and a device such as /dev/zero never ends. So is a file larger than its kind's cap. Each
refusal is `Unreadable`, one line naming the file, what it is and, for size, the cap.
"""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from toyrl.config import InvalidInput

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Kind:
    """What a file is expected to be (`name`, as in "not a results sidecar") and its largest size
    in bytes (`cap`)."""

    name: str
    cap: int


MB = 1_000_000
# A sidecar or manifest lists its seeds, one a line: a million seeds of 19 digits are about 25 MB.
SIDECAR = Kind("a results sidecar", 64 * MB)
MANIFEST = Kind("a sweep manifest", 64 * MB)
# toyrl run and sweep write at most 20,000,000 rows (toyrl.experiment.MAX_ROWS), about 5 GB.
RESULTS = Kind("a results CSV", 16_000 * MB)
CONFIG = Kind("a trainer's configuration file", 4 * MB)  # verl's full configuration is about 20 kB
PLUGIN = Kind("a plugin file", 4 * MB)


class Unreadable(InvalidInput):
    """A file refused before it was read: `reason` says why, without the path."""

    def __init__(self, path: Path | str, reason: str) -> None:
        self.reason = reason
        super().__init__(f"{path}: {reason}")


def _what(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def size_text(size: int) -> str:
    """A size in bytes as a message shows it: 4 MB, 1.2 GB, 812 bytes."""
    for unit, scale in (("GB", 1000 * MB), ("MB", MB), ("kB", 1000)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size} bytes"


def _checked(path: Path, kind: Kind, info: os.stat_result) -> None:
    """Unreadable unless `info` is a regular file's of at most the kind's cap."""
    if not stat.S_ISREG(info.st_mode):
        target = os.path.realpath(path)
        where = f" ({target})" if target != os.path.abspath(path) else ""
        raise Unreadable(path, f"{_what(info.st_mode)}{where}, not {kind.name}")
    if info.st_size > kind.cap:
        size = f"{info.st_size:,} bytes ({size_text(info.st_size)})"
        raise Unreadable(path, f"{size}; {kind.name} is at most {size_text(kind.cap)}")


def check_regular(path: Path, kind: Kind) -> None:
    """Unreadable unless `path` is a regular file (symbolic links followed) within the kind's cap;
    it is looked at, not opened."""
    try:
        info = path.stat()
    except FileNotFoundError:
        raise Unreadable(path, "no such file") from None
    except OSError as error:
        raise Unreadable(path, f"cannot be read ({error.strerror or error})") from None
    _checked(path, kind, info)


def open_regular(path: Path, kind: Kind) -> BinaryIO:
    """`path` opened for reading in binary, if it is a regular file within the kind's cap.

    Looked at before it is opened (a FIFO is never opened), and again once open (the file may
    have been replaced in between): it is opened without waiting, as a FIFO put there would wait.
    """
    check_regular(path, kind)
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise Unreadable(path, "no such file") from None
    except OSError as error:
        raise Unreadable(path, f"cannot be read ({error.strerror or error})") from None
    try:
        _checked(path, kind, os.fstat(handle))
        os.set_blocking(handle, True)
    except BaseException:
        os.close(handle)
        raise
    return os.fdopen(handle, "rb")


def read_bytes(path: Path, kind: Kind) -> bytes:
    """The bytes of the regular file at `path`, at most the kind's cap (`open_regular`)."""
    with open_regular(path, kind) as stream:
        try:
            size = os.fstat(stream.fileno()).st_size
            data = stream.read(size + 1)
            if len(data) > size:  # it grew since it was looked at: the rest, up to the cap
                data += stream.read(kind.cap + 1 - len(data))
        except OSError as error:
            raise Unreadable(path, f"cannot be read ({error.strerror or error})") from None
    if len(data) > kind.cap:
        raise Unreadable(path, f"more than {size_text(kind.cap)}; {kind.name} is at most that")
    return data


def json_problem(error: ValueError | RecursionError) -> str:
    """Why JSON could not be read, in words: json's or the codec's message, or what a
    RecursionError and the ValueError of an over-long integer mean."""
    if isinstance(error, RecursionError):
        return "nested too deeply"
    if "integer string conversion" in str(error):
        return f"an integer of more than {sys.get_int_max_str_digits():,} digits"
    return str(error)


def read_csv(stream: BinaryIO) -> pd.DataFrame:
    """A CSV of toyrl's (every float written as the shortest text that reads back to it) read with
    each number parsed to the nearest double, as Python's float() reads it. pandas before 3.1
    parses floats with a fast routine of its own that misses the last bit of some
    (0.21706668830561068, say: 37,365 cells of results/article.csv under pandas 3.0.6), so it is
    asked for its exact one there; pandas 3.1 parses exactly by default and deprecates the option."""
    import pandas as pd

    major, minor = (int(part) for part in pd.__version__.split(".")[:2])
    exact: dict[str, Any] = {"float_precision": "round_trip"} if (major, minor) < (3, 1) else {}
    return pd.read_csv(stream, **exact)
