"""What the soak (``bench.soak``) samples of its own process, and inventories that name what grew.

A :class:`Sample`, taken every ``--sample-s`` seconds, holds the process's RSS, open file
descriptors (``/proc/self/fd``), threads (``/proc/self/task``, native ones included),
descendant processes with their RSS, the data directory's size and file count and, where
glibc has ``mallinfo2``, its heap in use and free: the counts the targets judge. An
:data:`Inventory` (descriptors, threads and data files by what they are, numbers and
UUIDs folded) is taken at the baseline and at the end only, to name what grew. Every
reading is Linux's (``/proc``, through ``bench.procfs`` for other processes).
"""

from __future__ import annotations

import ctypes
import os
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from bench.procfs import descendants, status_fields, status_mib

MIB = 1024 * 1024
Inventory: TypeAlias = tuple[Counter[str], Counter[str], Counter[str]]
"""What :func:`open_files`, :func:`thread_names` and :func:`data_files` found, in that order."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One look at the process, ``t_s`` seconds into the soak; ``cycles`` rebuild cycles ended by then."""

    t_s: float
    cycles: int
    rss_mib: float
    fds: int
    threads: int
    children: int
    children_rss_mib: float
    data_mib: float
    data_files: int
    heap_used_mib: float | None = None  # glibc's heap, where readable: allocated and in use...
    heap_free_mib: float | None = None  # ...and free but kept (fragmentation shows here, not as a leak)


def directory_size(path: Path) -> tuple[int, int]:
    """The apparent size in bytes of every file under ``path``, and their number. Files
    that vanish while being counted (Chroma replaces them) are skipped."""
    total = files = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name), follow_symlinks=False).st_size
            except OSError:
                continue
            files += 1
    return total, files


_HEXISH = re.compile(r"[0-9a-f]{8}-[0-9a-f-]{27}|\d+")


def open_files() -> Counter[str]:
    """What the process's descriptors point to, with UUIDs and numbers folded (``chroma/<id>/link_lists.bin``,
    ``socket:[<n>]``), counted: the difference between two of these names what leaks."""
    found: Counter[str] = Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        name = "/".join(target.split("/")[-2:]) if target.startswith("/") else target
        found[_HEXISH.sub("<n>", name)] += 1
    return found


def thread_names() -> Counter[str]:
    """The process's threads by name (``/proc/self/task/*/comm``, numbers folded), counted."""
    found: Counter[str] = Counter()
    for task in os.listdir("/proc/self/task"):
        try:
            found[_HEXISH.sub("<n>", Path(f"/proc/self/task/{task}/comm").read_text().strip())] += 1
        except OSError:
            continue
    return found


def data_files(path: Path) -> Counter[str]:
    """The data directory's bytes by file, UUIDs and numbers folded (``<n>/data_level<n>.bin``)."""
    found: Counter[str] = Counter()
    for root, _, names in os.walk(path):
        for name in names:
            full = Path(root, name)
            try:
                found[_HEXISH.sub("<n>", str(full.relative_to(path)))] += full.stat().st_size
            except OSError:  # replaced while being counted
                continue
    return found


def grown(before: Counter[str], after: Counter[str]) -> dict[str, int]:
    """The entries of ``after`` that are more numerous than in ``before``, by how many."""
    return {name: after[name] - before[name] for name in sorted(after) if after[name] > before[name]}


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc 2.33 and newer)."""

    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def heap_mib() -> tuple[float | None, float | None]:
    """(in use, free but kept) MiB of glibc's malloc heap, over every arena and mmapped block;
    (None, None) where glibc or ``mallinfo2`` is missing. RSS growth with the free part growing
    and the used part flat is fragmentation, not a leak."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return None, None
    return (info.uordblks + info.hblkhd) / MIB, info.fordblks / MIB


def sample(started: float, cycles: int, data_dir: Path) -> Sample:
    """The process as it is now (Linux ``/proc``)."""
    me = os.getpid()
    children = descendants(me)
    data_bytes, data_files = directory_size(data_dir)
    heap_used, heap_free = heap_mib()
    return Sample(
        t_s=round(time.monotonic() - started, 1),
        cycles=cycles,
        rss_mib=status_mib(status_fields(me).get("VmRSS", "")),
        fds=len(os.listdir("/proc/self/fd")),
        threads=len(os.listdir("/proc/self/task")),
        children=len(children),
        children_rss_mib=sum(status_mib(status_fields(pid).get("VmRSS", "")) for pid in children),
        data_mib=data_bytes / MIB,
        data_files=data_files,
        heap_used_mib=heap_used,
        heap_free_mib=heap_free,
    )


def inventory(data_dir: Path) -> Inventory:
    """The process's descriptors and threads, and ``data_dir``'s files, by what they are."""
    return open_files(), thread_names(), data_files(data_dir)


def grown_since_baseline(inventories: dict[str, Inventory]) -> dict[str, dict[str, int]]:
    """The descriptors and threads more numerous at the end than at the baseline, and the
    data directory's files larger (in bytes, the five that grew most), by kind; empty
    unless ``inventories`` holds both a ``"baseline"`` and a ``"final"`` one."""
    if "baseline" not in inventories or "final" not in inventories:
        return {}
    before, after = inventories["baseline"], inventories["final"]
    data = sorted(grown(before[2], after[2]).items(), key=lambda item: -item[1])[:5]
    return {"descriptors": grown(before[0], after[0]), "threads": grown(before[1], after[1]),
            "data bytes": dict(data)}

