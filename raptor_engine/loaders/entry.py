"""The entry points: :func:`load_bytes` and :func:`load_file`.

Contract: both return a :class:`~raptor_engine.loaders.common.LoadedText` with
non-empty text, or raise :class:`~raptor_engine.errors.DocumentRejected` and
nothing else. The checks every format shares (type, size, emptiness, the text
limit of the result) are made here; the format's loader, chosen in the one
suffix table (:mod:`raptor_engine.loaders.formats`), does the rest.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from raptor_engine.errors import DocumentRejected, RejectReason
from raptor_engine.loaders.common import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_TEXT_CHARS,
    Budget,
    LoadedText,
    Request,
    check_size,
    check_text_size,
    logger,
)
from raptor_engine.loaders.formats import ACCEPTED, format_for


def load_file(
    path: Path, max_bytes: int = DEFAULT_MAX_BYTES, *, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
) -> LoadedText:
    """Load the file at ``path``; see :func:`load_bytes` for the contract.

    The type, the kind of file and the size (from ``stat()``) are checked
    before anything is read, so an oversized file is refused without being
    loaded. Only regular files are read: a named pipe, device, socket or folder
    is refused at once (a pipe would otherwise block forever), and the file is
    opened without blocking and checked again, in case it was swapped. A file
    that cannot be read (missing, no permission) is refused as ``UNREADABLE``.
    """
    path = Path(path)
    name = path.name
    format_for(name)
    try:
        _check_regular(path.stat(), name, max_bytes)
        data = _read_regular(path, name, max_bytes)
    except OSError as exc:
        raise DocumentRejected(RejectReason.UNREADABLE, name, _unreadable_detail(exc)) from exc
    return load_bytes(data, name, max_bytes, max_text_chars=max_text_chars)


def _read_regular(path: Path, name: str, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of ``path``, opened without blocking."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(descriptor, "rb") as handle:
        _check_regular(os.fstat(handle.fileno()), name, max_bytes)
        # One byte more than allowed: a file that grew since stat() is still
        # caught by the size check in load_bytes.
        return handle.read(max_bytes + 1)


def _check_regular(status: os.stat_result, name: str, max_bytes: int) -> None:
    """Refuse anything but a regular file, then a regular file over ``max_bytes``."""
    mode = status.st_mode
    if stat.S_ISDIR(mode):
        raise DocumentRejected(RejectReason.UNREADABLE, name, "it is a folder, not a file")
    if not stat.S_ISREG(mode):
        raise DocumentRejected(
            RejectReason.UNREADABLE,
            name,
            f"it is {_special_file_kind(mode)}, not a regular file; give the path of a saved file",
        )
    check_size(status.st_size, name, max_bytes)


def _special_file_kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def _unreadable_detail(error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return "there is no such file"
    if isinstance(error, IsADirectoryError):
        return "it is a folder, not a file"
    if isinstance(error, PermissionError):
        return "permission to read it was denied"
    return f"it could not be read ({error.strerror or error})"


def load_bytes(
    data: bytes,
    filename: str,
    max_bytes: int = DEFAULT_MAX_BYTES,
    *,
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
    size: int | None = None,
) -> LoadedText:
    """Extract the text of a file given as ``data`` named ``filename``.

    The type is chosen by the lower-cased suffix of ``filename``. Returns a
    :class:`LoadedText` whose text is non-empty; raises
    :class:`DocumentRejected` (and nothing else) when the file cannot be used:
    unsupported type, empty, over ``max_bytes``, binary, corrupt, encrypted,
    without any text, with more than ``max_text_chars`` characters of text, or
    too costly to read (past the unpacking or time limits).

    ``size`` is the file's full size in bytes when the caller knows it and
    ``data`` may be only its beginning (adapters stop reading one byte past
    ``max_bytes``): a refusal then states the true size.
    """
    fmt = format_for(filename)
    check_size(max(len(data), size or 0), filename, max_bytes)
    if not data.strip():
        detail = "the file is empty (0 bytes)" if not data else "the file contains only blank space"
        raise DocumentRejected(RejectReason.EMPTY, filename, detail)
    budget = Budget.starting_now(filename, max_text_chars)
    loaded = fmt.load(data, Request(fmt.name, max_bytes, ACCEPTED, budget))
    check_text_size(len(loaded.text), filename, max_text_chars)
    logger.debug("loaded %s as %s: %d chars", filename, fmt.name, len(loaded.text))
    return loaded
