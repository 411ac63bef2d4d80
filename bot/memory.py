"""Handing memory the process freed back to the operating system.

A rebuild allocates and frees hundreds of MB (embedding batches, clustering
inputs, Chroma's query results), from several threads. glibc's malloc keeps
what is freed inside its arenas for reuse rather than returning it, and
fragmentation leaves most of it unusable for the next, differently sized
requests: in a six-minute soak (``python -m bench.soak``) the heap in use
grew from 282 to 329 MiB while the free memory glibc kept grew from 500 to
644 MiB, and RSS with it. ``malloc_trim(0)`` returns the free pages of every
arena (``madvise``), so RSS follows what is in use.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from functools import cache
from typing import Any

log = logging.getLogger(__name__)


@cache
def _libc() -> Any | None:
    """glibc, or None where the C library is another one (musl, macOS: nothing to trim)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def release_free_memory() -> bool:
    """Returns the memory malloc holds free to the operating system; True if it could
    (glibc), False elsewhere. Takes milliseconds; call it after a burst of work, from a
    thread that may block that long."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
