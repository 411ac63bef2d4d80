"""What the chat handler and the bot need from whatever runs rebuilds: the in-process
:class:`bot.scheduler.RebuildScheduler` (one process builds) or the queued
:class:`bot.coordination.queued_rebuilds.QueuedRebuilds` (worker processes build)."""

from __future__ import annotations

from typing import Protocol

from bot.neutral import ChannelKey, ReplyAddress, Send
from bot.schedule_status import ScheduleStatus
from bot.scheduler import RequestResult


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

    async def request(self, key: ChannelKey, requested_by: str, send: Send,
                      address: ReplyAddress | None = None) -> RequestResult:
        """A manual rebuild. ``send`` hears what happens now (queued, waiting); progress and the
        result reach ``send`` (in one process) or ``address`` (through another process)."""
        ...

    async def status(self, key: ChannelKey) -> ScheduleStatus:
        """Whether a rebuild of the channel runs or waits, and its next scheduled check."""
        ...

    async def wait_idle(self, key: ChannelKey | None = None) -> None:
        """Until nothing runs or waits here for that channel (or any)."""
        ...
