"""Handing memory the process freed back to the operating system.

A rebuild allocates and frees hundreds of MB (embedding batches, clustering
inputs, Chroma's query results), from several threads. glibc's malloc keeps
what is freed inside its arenas for reuse rather than returning it, and
fragmentation leaves most of it unusable for the next, differently sized
requests: in a six-minute soak (``python -m bench.soak``) the heap in use
grew from 282 to 329 MiB while the free memory glibc kept grew from 500 to
644 MiB, and RSS with it. ``malloc_trim(0)`` returns the free pages of every
arena (``madvise``), so RSS follows what is in use.

Between rebuilds, :func:`limit_heap_growth` keeps large blocks out of the
arenas altogether: glibc raises its threshold for serving a block with its own
``mmap`` each time such a block is freed (up to 32 MiB), after which the
embedding batches and query results of a few MB each are carved from the heap
and fragment it; and it opens up to eight arenas per core for a process with
dozens of threads (Chroma's pools, the executors), each keeping its own free
memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from functools import cache
from typing import Any

log = logging.getLogger(__name__)

# mallopt(3) parameters, from glibc's malloc.h.
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 1 << 20  # blocks this large get pages of their own, returned when freed
ARENAS = 2


@cache
def _libc() -> Any | None:
    """glibc, or None where the C library is another one (musl, macOS: nothing to trim)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
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


def limit_heap_growth() -> bool:
    """Makes glibc serve blocks of ``MMAP_THRESHOLD_BYTES`` and more with pages of their own
    (returned to the system when freed; a fixed threshold also stops glibc from raising it)
    and use at most ``ARENAS`` arenas. True if it could (glibc), False elsewhere.

    Call once, early, from the process's entry into a long-running bot: threads started
    afterwards share the capped arenas. Process-wide, like any allocator setting."""
    libc = _libc()
    if libc is None:
        return False
    done = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and libc.mallopt(_M_ARENA_MAX, ARENAS) == 1
    log.debug("malloc: blocks of %d bytes and more mapped on their own, at most %d arenas (%s)",
              MMAP_THRESHOLD_BYTES, ARENAS, "set" if done else "refused")
    return done
