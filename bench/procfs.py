"""Processes as Linux's ``/proc`` shows them: status fields, descendants and CPU seconds.

Shared by the benchmarks that watch real processes: ``bench.soak`` (its own process and
children), ``bench.scale`` (the servers, front-end and workers it starts) and
``bench.many_channels`` (the Chroma server's memory and its own). Every reading tolerates a process that is gone
(it reads as empty or zero): the processes watched exit on their own schedule.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def status_fields(pid: int | str) -> dict[str, str]:
    """The ``/proc/PID/status`` fields (empty when the process is gone)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return {name: value.strip() for name, _, value in (line.partition(":") for line in text.splitlines())}


def status_mib(value: str) -> float:
    """A ``"123 kB"`` status value in MiB; 0 when absent (a zombie has no VmRSS)."""
    return int(value.split()[0]) / 1024.0 if value else 0.0


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (children, their children...), read from ``/proc``.

    The clustering worker and multiprocessing's resource tracker are children;
    anything they start would be grandchildren, and counts too.
    """
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        ppid = status_fields(entry.name).get("PPid", "")
        if ppid.isdigit():
            parents.setdefault(int(ppid), []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and of its children it has reaped; 0 when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = text.rsplit(")", 1)[1].split()  # after the command's name: state, ppid, ...
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / _TICK  # utime, stime, cutime, cstime


def tree_cpu_seconds(pid: int | None) -> float:
    """CPU seconds of ``pid`` and every live descendant (a worker's clustering process)."""
    if pid is None:
        return 0.0
    return cpu_seconds(pid) + sum(cpu_seconds(child) for child in descendants(pid))


@dataclass
class CpuMeter:
    """CPU seconds of named process trees between :meth:`start` and :meth:`stop`."""

    pids: dict[str, int | None]
    before: dict[str, float] = field(default_factory=dict)
    spent: dict[str, float] = field(default_factory=dict)

    def start(self) -> CpuMeter:
        self.before = {name: tree_cpu_seconds(pid) for name, pid in self.pids.items()}
        return self

    def stop(self) -> dict[str, float]:
        self.spent = {name: max(0.0, tree_cpu_seconds(pid) - self.before[name]) for name, pid in self.pids.items()}
        return self.spent
