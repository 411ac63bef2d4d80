"""What the chat handler and the bot need from whatever runs rebuilds, and the types it speaks in.

Two implementations: the in-process :class:`bot.rebuilds.in_process.RebuildScheduler`
(one process builds) and the queued :class:`bot.rebuilds.queued.QueuedRebuilds` (worker
processes build). This module imports nothing that speaks to people: the replies render
:class:`ScheduleStatus`, so it must not import them back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Protocol

from bot.neutral import ChannelKey, ReplyAddress, Send


class RequestResult(str, Enum):
    """What :meth:`RebuildService.request` did with a request."""

    STARTED = "started"  # nothing was running: the rebuild started
    QUEUED = "queued"  # one is running: this one runs right after it (merged with other waiting requests)


@dataclass(frozen=True, slots=True)
class ScheduleStatus:
    """A channel's rebuild state, as :meth:`RebuildService.status` sees it now."""

    running: bool
    queued: bool
    next_run: datetime | None  # next scheduled check, None if the schedule is disabled/not started


class RebuildService(Protocol):
    async def start(self) -> None:
        """Starts the schedule (and resumes what a restart interrupted)."""
        ...

    async def stop(self) -> None:
        """Stops the schedule; whoever waits for an interrupted rebuild is told."""
        ...

    def watch(self, key: ChannelKey) -> None:
        """Makes sure the channel's rebuild checks are scheduled."""
        ...

    def unwatch(self, key: ChannelKey) -> None:
        """Stops scheduling the channel's rebuild checks (the bot can no longer serve it)."""
        ...

    async def request(self, key: ChannelKey, requested_by: str, send: Send,
                      address: ReplyAddress | None = None, force: bool = False) -> RequestResult:
        """A manual rebuild. ``send`` hears what happens now (queued, waiting); progress and the
        result reach ``send`` (in one process) or ``address`` (through another process).
        ``force`` serves the new tree even if the regression gate would hold it back (a build
        merging several requests is forced when one of them is)."""
        ...

    async def status(self, key: ChannelKey) -> ScheduleStatus:
        """Whether a rebuild of the channel runs or waits, and its next scheduled check."""
        ...

    async def wait_idle(self, key: ChannelKey | None = None) -> None:
        """Until nothing runs or waits here for that channel (or any)."""
        ...
