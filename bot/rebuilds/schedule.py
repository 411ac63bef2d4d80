"""When a channel is checked for a rebuild, and what the check asks; both rebuild services use it.

:class:`ChannelChecks` keeps one APScheduler job per watched channel whose schedule is
enabled (its own where configured, else the bot's): every interval, or on a cron line,
the job calls the service's check. The check asks :meth:`ChannelChecks.worth_building`:
a rebuild is only worth it when the channel's sources changed since its served tree.

Checks are spread over the interval: each channel's fire at its own offset into it, taken
from a digest of the channel's key (:func:`offset_s`), so a thousand channels do not all
read the store, and queue builds, in the same second. The offset is the same in every
process (replicas fire a channel's check together and agree on its period, which the
queued service claims once: :func:`period_of`). A cron line fires as written: its time
was chosen. Only channels that hold sources are checked: a check that finds none stops
the channel's checks until a source is added (:meth:`ChannelChecks.watch` again).

A channel the bot can no longer serve (archived, deleted, the bot removed) is unwatched, and
one marked so in the store (:class:`~bot.retention.ChannelRetention`) gets no job after a
restart either (:meth:`ChannelChecks.served`). The periodic pass of the schedule, at start
and every :data:`RETENTION_PASS_S`, forgets the material of those whose time has come
(:meth:`~bot.retention.ChannelRetention.sweep`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta

from apscheduler.job import Job
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from bot.config import BotConfig, ScheduleConfig
from bot.engine_calls import AsyncEngine
from bot.retention import NOTE, ChannelRetention
from raptor_engine import ChannelKey, RaptorError, TreeStats

log = logging.getLogger(__name__)

EPOCH = datetime(2000, 1, 1, tzinfo=UTC)  # aligned intervals count from here
RETENTION_PASS_S = 3600.0  # how often removed channels are looked at for material to forget
RETENTION_JOB = "retention-pass"
MISFIRE_GRACE_S = 600  # a check delayed this long (busy loop, suspended host) still runs; coalesce merges the rest

Check = Callable[[ChannelKey], Awaitable[bool]]
"""A service's scheduled check of one channel: True if it started (or enqueued) a rebuild."""


class ChannelChecks:
    """The scheduled checks of every watched channel, on an APScheduler of their own.

    Channels watched before :meth:`start` get their job when it starts. Not thread-safe:
    every method is called from the event loop it was started on.
    """

    def __init__(self, config: BotConfig, check: Check, retention: ChannelRetention) -> None:
        self._config = config
        self._check = check
        self._retention = retention
        self._watched: set[ChannelKey] = set()  # channels to give a job, also those watched before start()
        self._scheduler: AsyncIOScheduler | None = None

    def start(self, keys: Iterable[ChannelKey]) -> AsyncIOScheduler:
        """Starts the APScheduler on the running loop with a job for each of ``keys`` and of the
        channels watched already; returns it (a service may add jobs of its own). Raises
        ``RuntimeError`` if already started."""
        if self._scheduler is not None:
            raise RuntimeError("the rebuild checks are already scheduled")
        self._scheduler = AsyncIOScheduler()
        self._scheduler.start()  # on the running loop: AsyncIOScheduler picks it up here
        self._watched.update(keys)
        for key in sorted(self._watched, key=str):
            self._add_job(key)
        self._scheduler.add_job(self._retention.sweep, IntervalTrigger(seconds=RETENTION_PASS_S), id=RETENTION_JOB,
                                coalesce=True, max_instances=1, next_run_time=datetime.now(UTC))
        return self._scheduler

    async def served(self, keys: Iterable[ChannelKey]) -> list[ChannelKey]:
        """Those of ``keys`` the bot still serves: not marked to be forgotten (see the module docstring)."""
        keys = list(keys)
        gone = await self._retention.pending(keys)
        return [key for key in keys if key not in gone]

    async def stop(self) -> None:
        """Shuts the APScheduler down; no check starts after this returns."""
        if self._scheduler is not None:
            scheduler, self._scheduler = self._scheduler, None
            scheduler.shutdown(wait=False)
            await asyncio.sleep(0)  # AsyncIOScheduler.shutdown runs on the loop's next turn

    @property
    def started(self) -> bool:
        """Between :meth:`start` and :meth:`stop`."""
        return self._scheduler is not None

    def watch(self, key: ChannelKey) -> None:
        """Makes sure the channel has a job (called when a channel gets its first source)."""
        self._watched.add(key)
        if self._scheduler is not None and self._scheduler.get_job(_job_id(key)) is None:
            self._add_job(key)

    def unwatch(self, key: ChannelKey) -> None:
        """Stops the channel's checks until it is watched again: it holds no source, or the bot
        can no longer serve it."""
        self._watched.discard(key)
        if self._scheduler is not None and self._scheduler.get_job(_job_id(key)) is not None:
            self._scheduler.remove_job(_job_id(key))

    async def worth_building(self, engine: AsyncEngine, key: ChannelKey) -> bool:
        """A scheduled check's question: did the channel's sources change since its served tree,
        and does the bot still serve it? (A replica that did not handle the event saying a
        channel is gone still has its job: the pending forget in the store tells it.) A channel
        holding no source stops being checked (logged). A store failure is logged and answers
        no: the next check asks again."""
        try:
            stats = await engine.stats(key)
            if stats.sources == 0:
                log.info("channel %s: holds no source: no more scheduled checks until one is added", key)
                self.unwatch(key)
                return False
            if not sources_changed(stats):
                log.debug("channel %s: scheduled check: no change since v%d", key, stats.version)
                return False
            if NOTE in await engine.notes(key):
                log.info("channel %s: scheduled check: the channel is gone, no rebuild", key)
                return False
        except RaptorError as exc:
            log.warning("channel %s: scheduled check failed: %s", key, exc)
            return False
        return True

    def job(self, key: ChannelKey) -> Job | None:
        """The channel's APScheduler job, None if it has none or the checks are not started."""
        return self._scheduler.get_job(_job_id(key)) if self._scheduler is not None else None

    def next_run(self, key: ChannelKey) -> datetime | None:
        """When the channel's next check runs, None without a job."""
        job = self.job(key)
        return job.next_run_time if job is not None else None

    def _add_job(self, key: ChannelKey) -> None:
        assert self._scheduler is not None
        schedule = schedule_of(self._config, key)
        if not schedule.enabled:
            log.debug("channel %s: schedule disabled, no job", key)
            return
        self._scheduler.add_job(
            self._check,
            trigger_for(schedule, key),
            args=[key],
            id=_job_id(key),
            name=f"rebuild check of {key}",
            coalesce=True,
            max_instances=1,
            misfire_grace_time=MISFIRE_GRACE_S,
            replace_existing=True,
        )


def sources_changed(stats: TreeStats) -> bool:
    """Whether the served tree is behind the channel's sources and a rebuild could build one."""
    if stats.sources == 0:
        return False  # nothing to build from (a channel whose sources were all removed included)
    return stats.pending_sources > 0 or stats.version == 0


def trigger_for(schedule: ScheduleConfig, key: ChannelKey) -> BaseTrigger:
    """The cron line if set (server time), else the interval, firing at the channel's own
    offset into each interval since 2000-01-01 UTC (:func:`offset_s`): the same moments in
    every process, whenever it started, and spread over the interval across channels."""
    if schedule.cron is not None:
        return CronTrigger.from_crontab(schedule.cron)
    period_s = schedule.every_minutes * 60
    return IntervalTrigger(seconds=period_s, start_date=EPOCH + timedelta(seconds=offset_s(key, period_s)))


def offset_s(key: ChannelKey, period_s: float) -> float:
    """Where in each period of ``period_s`` seconds the channel's check fires: a digest of its
    key spread over the period, the same in every process (not Python's per-process ``hash``)."""
    fraction = int.from_bytes(hashlib.sha256(str(key).encode()).digest()[:8], "big") / 2**64
    return fraction * period_s


def period_of(schedule: ScheduleConfig, key: ChannelKey, now: float) -> tuple[int, float]:
    """Which period of the channel's checks the Unix time ``now`` falls in, and its length in
    seconds: the same in every process, so the checks of one period share one claim. A cron
    line's periods are minutes (its checks are at least a minute apart)."""
    if schedule.cron is not None:
        return int(now // 60), 60.0
    period_s = schedule.every_minutes * 60
    return int((now - EPOCH.timestamp() - offset_s(key, period_s)) // period_s), period_s


def schedule_of(config: BotConfig, key: ChannelKey) -> ScheduleConfig:
    """The channel's own schedule where configured, else the bot's."""
    channel = config.channels.get(str(key))
    return channel.schedule if channel is not None and channel.schedule is not None else config.schedule


def _job_id(key: ChannelKey) -> str:
    return f"rebuild-check:{key}"
