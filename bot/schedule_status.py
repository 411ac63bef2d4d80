"""What a channel's rebuild schedule is doing, as the scheduler reports it and the
replies render it (its own module: the scheduler speaks through the replies, so the
replies cannot import the scheduler back)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class ScheduleStatus:
    """A channel's rebuild state, as :meth:`bot.scheduler.RebuildScheduler.status` sees it now."""

    running: bool
    queued: bool
    next_run: datetime | None  # next scheduled check, None if the schedule is disabled/not started
