"""One writer per embedded data directory.

Embedded Chroma is not safe for two processes writing one directory, so the
process that opens it first takes an exclusive ``fcntl.flock`` on
``<data_dir>/bot.lock`` and keeps it while it uses the store. The kernel drops
the lock when its holder exits in any way (SIGKILL and OOM kills included), so
a lock file left behind never blocks anyone: only a living holder does. The
holder writes its pid and command line into the file, for the message the next
process shows.

Within one process the lock is shared: opening the same directory again (a test
calling the command line twice, a bot and a command in one process) reuses it.
It is released when the last :class:`DataLock` handle for it is collected.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import sys
import threading
import weakref
from pathlib import Path

from bot.errors import DataDirInUse, DataDirNotWritable

log = logging.getLogger(__name__)

LOCK_NAME = "bot.lock"
_MAX_COMMAND_CHARS = 300  # enough to recognise the command; a long argument list is cut

_held: weakref.WeakValueDictionary[Path, DataLock] = weakref.WeakValueDictionary()
_held_guard = threading.Lock()  # the bot opens its store in a worker thread


class DataLock:
    """The held lock of one data directory. Keep a reference as long as the store is used;
    when the last reference goes, the file descriptor is closed and the lock released."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self.path = directory / LOCK_NAME
        self._fd = fd
        self._closer = weakref.finalize(self, os.close, fd)

    def release(self) -> None:
        """Releases the lock now (idempotent). Later openers in this process take it anew."""
        with _held_guard:
            if _held.get(self.directory) is self:
                del _held[self.directory]
        self._closer()


def lock_data_dir(directory: Path) -> DataLock:
    """Takes the data directory's lock, or the one this process already holds.

    Creates ``directory`` if needed (the lock file lives in it). Raises ``DataDirInUse``
    naming the holder if another living process holds it; then nothing in the
    directory has been changed. Raises ``DataDirNotWritable`` if this process may not create
    the directory or its lock file, ``OSError`` if the lock file cannot be opened otherwise.
    """
    directory = directory.resolve()
    with _held_guard:
        held = _held.get(directory)
        if held is not None:
            return held
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd = take_lock_file(directory / LOCK_NAME)
        except LockHeld as held_elsewhere:
            raise DataDirInUse(directory, held_elsewhere.holder) from None
        except OSError as exc:
            if isinstance(exc, PermissionError) or exc.errno == errno.EROFS:
                raise DataDirNotWritable(directory, read_only=exc.errno == errno.EROFS) from exc
            raise
        lock = DataLock(directory, fd)
        _held[directory] = lock
    log.debug("holding the lock of %s", directory)
    return lock


class LockHeld(Exception):
    """Another open lock file holds the lock; ``holder`` describes its process."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


def take_lock_file(path: Path) -> int:
    """Opens ``path`` (created if missing) and takes an exclusive ``flock`` on it without
    waiting; writes this process's pid and command line into it and returns the open file
    descriptor, whose closing releases the lock. Raises ``LockHeld`` naming the holder if
    another open file holds it (another process, or another open in this one), ``OSError``
    if the file cannot be opened or locked otherwise."""
    # O_CLOEXEC (Python's default): a spawned child must never inherit the lock and
    # keep it alive after this process dies.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _read_holder(fd)
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise LockHeld(holder) from None
        raise
    # Only the holder writes the file, and only once it holds the lock.
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n{_command_line()}\n".encode(), 0)
    return fd


def _read_holder(fd: int) -> str:
    """'process 1234 (python -m bot serve)' from the lock file; less when the holder has not
    written it yet."""
    try:
        lines = os.pread(fd, 4096, 0).decode("utf-8", "replace").splitlines()
    except OSError:
        lines = []
    pid = lines[0].strip() if lines and lines[0].strip().isdigit() else ""
    command = lines[1].strip() if len(lines) > 1 else ""
    if not pid:
        return "another process"
    return f"process {pid}" + (f" ({command})" if command else "")


def _command_line() -> str:
    """This process's command line as ``ps`` shows it (``python -m bot ingest ...``)."""
    try:
        raw = Path("/proc/self/cmdline").read_bytes()
        words = [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]
    except OSError:
        words = [sys.executable, *sys.argv]
    if words:
        words[0] = Path(words[0]).name  # the interpreter's name is enough; its path is noise
    command = " ".join(words)
    return command if len(command) <= _MAX_COMMAND_CHARS else command[: _MAX_COMMAND_CHARS - 1] + "…"
