"""Files written safely: whole or not at all, one writer at a time.

A file's new content is first written whole to a temporary file in its folder and synced, then
renamed into place (`write_atomic`); several files are replaced together (`write_together`), so a
reader never sees a half-written file and a failed write leaves the old ones. An output is claimed
with a lock beside it while it is written (`claim`), and whether it can be written at all is
checked before any work (`check_output_path`, `check_writable`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from toyrl.config import InvalidInput

# A file's new content: the text or bytes, or a function that writes them to a binary stream
# (so that a large table is written in pieces, never held as one string).
Content = str | bytes | Callable[[BinaryIO], None]


def check_output_path(path: Path, option: str = "--out") -> None:
    """Fail before any work if the results cannot be written to `path` (a `.csv` in a writable folder)."""
    if path.suffix != ".csv":
        raise InvalidInput(f"{option} must be a path ending in .csv (got '{path}')")
    folder = path.parent
    if not folder.is_dir():
        reason = "is not a folder" if folder.exists() else "does not exist"
        raise InvalidInput(f"{option}: folder '{folder}' {reason}")
    # Temporary and lock files beside it add up to 20 characters to the name.
    longest = os.pathconf(folder, "PC_NAME_MAX") - 20
    if len(os.fsencode(path.name)) > longest:
        raise InvalidInput(
            f"{option}: the file name '{path.name[:40]}...' is too long (at most {longest} bytes)"
        )
    check_writable(folder, option)
    if path.is_dir():
        raise InvalidInput(f"{option}: '{path}' is a folder, not a file")


def check_writable(folder: Path, option: str) -> None:
    """InvalidInput unless a file can be created in `folder` (probed: permission bits do not bind root)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InvalidInput(f"{option}: folder '{folder}' is not writable")
    try:
        handle, probe = tempfile.mkstemp(dir=folder, prefix=".toyrl-probe-")
    except OSError as error:
        raise InvalidInput(f"{option}: folder '{folder}' is not writable ({error.strerror})") from None
    os.close(handle)
    os.unlink(probe)


@contextlib.contextmanager
def claim(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive claim on `path` (a results file or a sweep folder) while writing it.

    The claim is an advisory lock on a hidden `.NAME.lock` beside `path`, taken without waiting:
    a second toyrl writing to the same place fails at once with a one-line InvalidInput instead of
    silently replacing the first one's results. The lock file is removed on the way out; a claim
    taken on a lock file that another process has just removed is retried on the new one.
    """
    lock_path = path.parent / f".{path.name}.lock"
    while True:
        try:
            handle = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            raise InvalidInput(f"cannot write {path}: {error.strerror or error}") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            raise InvalidInput(
                f"another toyrl command is writing {what} {path}; "
                "wait for it to finish, or choose another path"
            ) from None
        try:
            same = os.fstat(handle).st_ino == os.stat(lock_path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(handle)  # the lock file was removed by its last holder meanwhile: claim the new one
    try:
        yield
    finally:
        Path(lock_path).unlink(missing_ok=True)
        os.close(handle)


def write_atomic(path: Path, data: Content) -> None:
    """Write `data` to `path` through a temporary file in the same folder and a rename.

    A failure to write (permissions, a read-only or full file system) is InvalidInput naming the
    path; the temporary file is removed, and `path` keeps its old content.
    """
    write_together([(path, data)])


def write_together(files: Sequence[tuple[Path, Content]]) -> None:
    """Replace several files so that a failure at any point leaves the old ones as they were.

    Every new content is first written whole to a temporary file in the file's folder and synced (a
    full disk or a read-only file fails here, before anything is replaced); only then are the files
    renamed into place, in order. If a rename fails, the files already replaced get their old
    content back (from hard links made beforehand). Only a kill between two renames can leave a mix;
    a sidecar's digest tells. Ctrl-C and SIGTERM are held while temporary files are created, noted
    and renamed, so none is left behind; writing the content itself stays interruptible.
    """
    temporaries: list[Path] = []
    backups: list[tuple[Path, Path | None]] = []
    try:
        for path, data in files:
            with _interruptions_deferred():
                temporaries.append(_new_temporary(path))
            _fill(temporaries[-1], path, data)
        with _interruptions_deferred():
            for (path, _), temporary in zip(files, temporaries, strict=True):
                backups.append((path, _replace(temporary, path, keep_old=len(files) > 1)))
    except BaseException:
        with _interruptions_deferred():
            for path, backup in backups:
                if backup is not None:
                    os.replace(backup, path)
        raise
    finally:
        with _interruptions_deferred():
            for leftover in [*temporaries, *(backup for _, backup in backups if backup is not None)]:
                leftover.unlink(missing_ok=True)


def _new_temporary(path: Path) -> Path:
    """An empty temporary file beside `path`, with the mode a new file would get (not mkstemp's 0600,
    which would hide results from other users)."""
    try:
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:
        raise InvalidInput(f"cannot write {path}: {error.strerror or error}") from None
    os.close(handle)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)
    return Path(temporary)


def _fill(temporary: Path, path: Path, data: Content) -> None:
    """Write `data` into `temporary` and sync it; a failure to write is InvalidInput naming `path`."""
    try:
        with open(temporary, "wb") as stream:
            if callable(data):
                data(stream)
            else:
                stream.write(data.encode("utf-8") if isinstance(data, str) else data)
            stream.flush()
            os.fsync(stream.fileno())
    except OSError as error:
        raise InvalidInput(f"cannot write {path}: {error.strerror or error}") from None


def _replace(temporary: Path, path: Path, keep_old: bool) -> Path | None:
    """Rename `temporary` over `path`; with `keep_old`, first hard-link the old file to a backup
    (returned, or None) so that a later failure can put it back."""
    backup = None
    if keep_old and path.exists():
        backup = path.parent / f"{temporary.name}.old"
        try:
            os.link(path, backup)
        except OSError:
            backup = None
    try:
        os.replace(temporary, path)
    except OSError as error:
        if backup is not None:
            backup.unlink(missing_ok=True)
        raise InvalidInput(f"cannot write {path}: {error.strerror or error}") from None
    return backup


@contextlib.contextmanager
def _interruptions_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM until the block is done, then act on them (main thread only, where
    signal handlers live; elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {
        number: signal.signal(number, lambda signum, frame: received.append(signum))
        for number in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if received:
            signal.raise_signal(received[0])
