"""A front-end's rebuilds when worker processes build: the same service as
:class:`bot.rebuilds.in_process.RebuildScheduler`, over Redis and the job queue.

* A request is recorded (:mod:`~bot.rebuilds.requests`) and a job enqueued once per
  channel; the requester hears "queued" now (privately when other requests already wait
  for the same build) and the progress and result later, from the worker through the
  reply stream, posted by whichever front-end reads it, once per channel or thread.
* Every replica runs the schedule; a channel's checks fire together on every replica
  (each channel at its own offset into the interval) and the first replica to claim the
  channel's period enqueues its job. No replica is special.
* A sweep every ``sweep_every_s`` enqueues a job for channels whose requests wait with
  no job and no lease: a worker died mid-build, or a job was lost.
* With Redis unreachable, requests are kept in this process and sent when it is back
  (the sweep does it); the requester is told rebuilds wait. Questions never need Redis.

This process never clusters: building is the workers' job.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from functools import partial
from typing import Any

from apscheduler.triggers.interval import IntervalTrigger

from bot import replies
from bot.config import BotConfig
from bot.coordination.lease import ChannelLeases
from bot.coordination.link import CoordinationDown, RedisLink
from bot.coordination.signing import RecordSigner
from bot.deploy_config import CoordinationConfig
from bot.engine_calls import AsyncEngine
from bot.neutral import Reply, ReplyAddress, ReplyKind, Send
from bot.rebuilds.job_queue import RebuildQueue
from bot.rebuilds.requests import RebuildRequests, Requester
from bot.rebuilds.schedule import ChannelChecks, period_of, schedule_of
from bot.rebuilds.service import RequestResult, ScheduleStatus
from bot.retention import ChannelRetention
from raptor_engine import ChannelKey, channel_digest

log = logging.getLogger(__name__)

SWEEP_JOB = "coordination-sweep"


class QueuedRebuilds:
    """Rebuilds run by workers; see the module docstring. Methods run on one event loop."""

    def __init__(self, engine: AsyncEngine, config: BotConfig, coordination: CoordinationConfig,
                 link: RedisLink) -> None:
        self._engine = engine
        self._config = config
        self._coordination = coordination
        self._link = link
        self._queue = RebuildQueue(link, coordination.job_timeout_s)
        self._requests = RebuildRequests(link, RecordSigner(coordination.secret.get_secret_value()))
        self._leases = ChannelLeases(link, coordination.lease_s)  # only to name lease keys
        self._outbox: list[tuple[ChannelKey, Requester]] = []  # requests made while Redis was down
        self._checks = ChannelChecks(config, self.check, ChannelRetention(engine, config))

    # -- life cycle ------------------------------------------------------------

    async def start(self) -> None:
        """Schedules the checks of every known channel the bot still serves, the pass forgetting
        removed ones (see :mod:`~bot.rebuilds.schedule`), and the sweep. Raises ``RuntimeError`` if
        started already, ``StoreError`` if the store cannot list its channels."""
        if self._checks.started:
            raise RuntimeError("the rebuild service is already started")
        scheduler = self._checks.start(await self._checks.served(await self._engine.channels()))
        scheduler.add_job(self.sweep, IntervalTrigger(seconds=self._coordination.sweep_every_s),
                          id=SWEEP_JOB, coalesce=True, max_instances=1, next_run_time=datetime.now())

    async def stop(self) -> None:
        """Stops the checks and the sweep. Requests kept while Redis was down are logged:
        they are lost with this process (the channel's next scheduled check still rebuilds)."""
        await self._checks.stop()
        if self._outbox:
            log.warning("stopping with %d rebuild request(s) not yet sent to the coordination server",
                        len(self._outbox))

    @property
    def started(self) -> bool:
        return self._checks.started

    def watch(self, key: ChannelKey) -> None:
        """Makes sure the channel's checks are scheduled (it got its first source)."""
        self._checks.watch(key)

    def unwatch(self, key: ChannelKey) -> None:
        """Stops scheduling the channel's checks here (the bot can no longer serve it); each
        replica hears of it through its own event or, after a restart, from the store."""
        self._checks.unwatch(key)

    # -- requests ----------------------------------------------------------------

    async def request(self, key: ChannelKey, requested_by: str, send: Send,
                      address: ReplyAddress | None = None, force: bool = False) -> RequestResult:
        """Records the request and enqueues the channel's job; tells ``send`` it is queued
        (or that rebuilds wait for Redis). The result comes through the reply stream to
        ``address`` (default: the channel itself). Always ``QUEUED``: nothing runs here."""
        requester = Requester(requested_by, address or ReplyAddress(key), force)
        try:
            waiting = await self._send_request(key, requester)
        except CoordinationDown:
            self._outbox.append((key, requester))
            await send(Reply(ReplyKind.INFO, replies.REBUILDS_WAIT, thread=requester.address.thread))
            return RequestResult.QUEUED
        # The first request of the next build is said in the channel; those merged into it privately.
        await send(Reply(ReplyKind.PROGRESS, replies.REBUILD_ENQUEUED, private=waiting > 1,
                         thread=requester.address.thread))
        return RequestResult.QUEUED

    async def check(self, key: ChannelKey) -> bool:
        """The scheduled check: enqueues a job if the channel's sources changed since its
        served tree and no replica claimed this period yet. True if this call enqueued."""
        if not await self._checks.worth_building(self._engine, key):
            return False
        period, period_s = period_of(schedule_of(self._config, key), key, time.time())
        claim = self._link.key("checked", channel_digest(key), str(period))
        try:
            if not await self._link.run(lambda r: r.set(claim, "1", nx=True, ex=max(int(period_s), 60))):
                return False  # another replica checked this period
            return await asyncio.to_thread(self._queue.enqueue_once, key, "scheduled: sources changed")
        except CoordinationDown:
            return False  # the next period checks again

    async def sweep(self) -> None:
        """Sends requests kept during an outage, and enqueues channels whose requests wait
        with neither a job nor a lease. Never raises: the next sweep tries again."""
        try:
            while self._outbox:
                key, requester = self._outbox[0]
                await self._send_request(key, requester)
                self._outbox.pop(0)
                log.info("channel %s: rebuild request kept during the outage sent", key)
            for key in await self._requests.pending_channels():
                if await self._link.run(partial(_exists, keys=(self._leases.lease_key(key), self._queue.marker(key)))):
                    continue  # a worker builds it, or a job waits
                await asyncio.to_thread(self._queue.enqueue_once, key, "requests left by an ended build")
        except CoordinationDown:
            return
        except Exception:
            log.warning("the rebuild sweep failed", exc_info=True)

    # -- inspection --------------------------------------------------------------

    async def status(self, key: ChannelKey) -> ScheduleStatus:
        """Whether a worker builds the channel (holds its lease) or a job or requests wait;
        both False when Redis cannot be reached."""
        try:
            running = bool(await self._link.run(lambda r: r.exists(self._leases.lease_key(key))))
            queued = bool(await self._link.run(lambda r: r.exists(self._queue.marker(key))))
            queued = queued or await self._requests.waiting(key) > 0
        except CoordinationDown:
            running = queued = False
        return ScheduleStatus(running=running, queued=queued, next_run=self._checks.next_run(key))

    def depth(self) -> int:
        """Rebuild jobs waiting in the queue (blocking: for the metrics' scrape thread).
        Raises ``CoordinationDown``."""
        return self._queue.depth()

    async def wait_idle(self, key: ChannelKey | None = None) -> None:
        """Nothing runs here; for the interface's sake."""

    # -- internals ---------------------------------------------------------------

    async def _send_request(self, key: ChannelKey, requester: Requester) -> int:
        """Records the request and enqueues the channel; how many requests wait, this one included."""
        waiting = await self._requests.add(key, requester)
        await asyncio.to_thread(self._queue.enqueue_once, key, f"requested by {requester.by or '?'}")
        return waiting


async def _exists(redis: Any, keys: tuple[str, ...]) -> int:
    return int(await redis.exists(*keys))
