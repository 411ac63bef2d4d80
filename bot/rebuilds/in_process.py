"""Rebuilding channels' trees in this process: on request, and on a schedule when their sources changed.

:class:`RebuildScheduler` owns every rebuild the bot runs. Per channel it keeps
at most one rebuild running and at most one waiting behind it: requests made
while a rebuild runs merge into the waiting one, and everyone who asked hears
its result: posted once in each channel or thread it was asked from, and privately
to the further requesters there. An APScheduler job per channel holding sources (:class:`~bot.rebuilds.schedule.ChannelChecks`)
checks, every interval (at the channel's own offset into it) or on a cron line, whether
the channel's sources changed since its served build, and only then rebuilds.

A manual request leaves the note ``rebuild_requested`` in the store until its
build ends (whatever the outcome, except being cancelled), so a request cut
short by a restart is resumed by the next :meth:`RebuildScheduler.start`.

Everything here runs on one event loop; the engine's CPU work runs in its own
worker threads, and its progress callbacks hop back to the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from apscheduler.job import Job

from bot.config import BotConfig
from bot.engine_calls import AsyncEngine
from bot.memory import release_free_memory
from bot.model_budget import ModelBudget
from bot.neutral import Courier, Reply, ReplyAddress, ReplyKind, Send
from bot.observability.metrics import Metrics
from bot.rebuilds.relay import send_safely
from bot.rebuilds.report import held_back_news, rebuild_and_report
from bot.rebuilds.schedule import ChannelChecks, schedule_of
from bot.rebuilds.service import RequestResult, ScheduleStatus
from bot.replies import REBUILD_INTERRUPTED, REBUILD_QUEUED_BEHIND
from bot.retention import ChannelRetention
from raptor_engine import ChannelKey, RaptorError

log = logging.getLogger(__name__)

NOTE = "rebuild_requested"  # the store note marking a manual rebuild not finished yet
STOP_NOTICE_TIMEOUT_S = 2.0  # how long stop() waits for each "interrupted" notice to be sent


@dataclass(frozen=True, slots=True)
class _Requester:
    """Someone waiting for a rebuild's result; ``send`` is None when nobody can be told
    (a scheduled check, a request resumed after a restart): the result is logged.
    ``address`` is where ``send`` posts (None: a place of its own)."""

    by: str
    send: Send | None = None
    address: ReplyAddress | None = None
    force: bool = False  # asked to serve the tree past the regression gate


@dataclass(slots=True)
class _Batch:
    """One rebuild and everyone waiting for it. ``manual`` batches own the store note."""

    requesters: list[_Requester]
    manual: bool
    answered: bool = False  # its result went out: a stop now must not call it interrupted

    @property
    def sends(self) -> list[Send]:
        return [r.send for r in self.requesters if r.send is not None]

    def announced(self) -> tuple[list[Send], list[Send]]:
        """The sends that announce the build (the first requester's at each address: one post
        per channel or thread, however many asked there), and those of the further requesters,
        who are told privately."""
        public: list[Send] = []
        private: list[Send] = []
        places: set[ReplyAddress] = set()
        for requester in self.requesters:
            if requester.send is None:
                continue
            if requester.address is not None and requester.address in places:
                private.append(requester.send)
                continue
            public.append(requester.send)
            if requester.address is not None:
                places.add(requester.address)
        return public, private

    def describe(self) -> str:
        if not self.manual:
            return "scheduled: sources changed"
        return "requested by " + ", ".join(r.by or "?" for r in self.requesters)


@dataclass(slots=True)
class _ChannelState:
    """A channel's rebuilds. ``task`` runs ``current`` and then whatever got ``queued``."""

    # Serialises the note's read-change-write cycles (the store's set_note is not atomic).
    note_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None
    current: _Batch | None = None
    queued: _Batch | None = None


class RebuildScheduler:
    """Runs manual and scheduled rebuilds, never two of one channel at once. See the module docstring.

    Not thread-safe: every method is called from the event loop it was started on.
    """

    def __init__(self, engine: AsyncEngine, config: BotConfig, metrics: Metrics | None = None,
                 budget: ModelBudget | None = None, couriers: Mapping[str, Courier] | None = None) -> None:
        """``budget``: the workspaces' daily model budget, which every build checks and counts
        against; ``couriers``: how to post in a channel of each platform without an event to
        answer (a scheduled rebuild held back by the regression gate is told there, once)."""
        self._engine = engine
        self._couriers = couriers if couriers is not None else {}
        self._metrics = metrics
        self._budget = budget
        self._config = config
        self._states: dict[ChannelKey, _ChannelState] = {}
        self._checks = ChannelChecks(config, self.check, ChannelRetention(engine, config))

    # -- life cycle ------------------------------------------------------------

    async def start(self) -> None:
        """Starts the APScheduler on the running loop, adds a job for every known channel
        (engine.channels()) the bot still serves, with the pass forgetting removed ones
        (see :mod:`~bot.rebuilds.schedule`), and resumes rebuilds requested before a restart (a note
        'rebuild_requested' left in the store) of the channels whose schedule is enabled here:
        a replica without the schedule leaves them to the process that has it, so they resume
        in one process only. Raises ``RuntimeError`` if already started, ``StoreError`` if the
        store cannot list its channels."""
        if self._checks.started:
            raise RuntimeError("the rebuild scheduler is already started")
        keys = await self._checks.served(await self._engine.channels())
        self._checks.start(keys)
        for key in keys:
            await self._resume(key)

    async def stop(self) -> None:
        """Shuts the scheduler down, cancels running rebuilds (the engine guarantees the previous
        tree keeps answering; the 'rebuild_requested' note stays so they resume at the next start).
        Whoever waits for a cancelled rebuild is told so (best effort, briefly)."""
        await self._checks.stop()
        tasks: list[asyncio.Task[None]] = []
        waiting: list[Send] = []
        for state in self._states.values():
            if state.task is None:
                continue
            for batch in (state.current, state.queued):
                waiting += batch.sends if batch and not batch.answered else []
            state.task.cancel()
            tasks.append(state.task)
        await asyncio.gather(*tasks, return_exceptions=True)
        if tasks:
            log.info("stopped %d running rebuild(s); they resume at the next start if requested", len(tasks))
        notice = Reply(ReplyKind.INFO, REBUILD_INTERRUPTED)
        await asyncio.gather(*(_send_within(send, notice, STOP_NOTICE_TIMEOUT_S) for send in waiting))

    def watch(self, key: ChannelKey) -> None:
        """Makes sure the channel has a scheduled job (called when a channel gets its first source).
        Before :meth:`start`, the job is added when the scheduler starts."""
        self._checks.watch(key)

    def unwatch(self, key: ChannelKey) -> None:
        """Removes the channel's scheduled job (the bot can no longer serve it); a rebuild
        running or requested still ends as it would."""
        self._checks.unwatch(key)

    # -- requests ----------------------------------------------------------------

    async def request(self, key: ChannelKey, requested_by: str, send: Send | None = None,
                      address: ReplyAddress | None = None, force: bool = False) -> RequestResult:
        """A manual rebuild: returns at once; the rebuild runs in a task. Writes the note before
        starting, clears it when the build ends (success or BuildError/NothingToBuild) but not when cancelled.

        ``send`` hears the progress and the result (and, when QUEUED, that it waits). Requests
        merged into one build from the same ``address`` (where ``send`` posts) see its progress
        and result posted once there, through the first one's ``send``; the others are told
        the result privately.
        Raises ``StoreError`` if the note cannot be written; nothing is started then.
        """
        state = self._state(key)
        stamp = datetime.now(UTC).isoformat(timespec="seconds")
        async with state.note_lock:
            await self._engine.set_note(key, NOTE, f"{requested_by or '?'} at {stamp}")
        # Decided after the await and without awaiting again, so two requests can never both start.
        requester = _Requester(requested_by, send, address, force)
        if state.task is None:
            self._launch(key, state, _Batch([requester], manual=True))
            log.info("channel %s: rebuild requested by %s: started", key, requested_by)
            return RequestResult.STARTED
        if state.queued is None:
            state.queued = _Batch([], manual=True)
        merged = bool(state.queued.requesters)  # the channel was told already that one waits
        state.queued.requesters.append(requester)
        log.info("channel %s: rebuild requested by %s: queued", key, requested_by)
        if send is not None:
            await send_safely(send, Reply(ReplyKind.PROGRESS, REBUILD_QUEUED_BEHIND, private=merged))
        return RequestResult.QUEUED

    async def check(self, key: ChannelKey) -> bool:
        """The scheduled job of a channel: starts a rebuild only if its sources changed since the
        served build (and it has any), and none runs or waits. True if one was started.
        Store failures are logged, not raised: the next check tries again."""
        state = self._state(key)
        if state.task is not None:
            log.debug("channel %s: scheduled check skipped: a rebuild runs", key)
            return False
        if not await self._checks.worth_building(self._engine, key):
            return False
        if state.task is not None:  # a request came in while stats were read
            return False
        log.info("channel %s: scheduled check: sources changed", key)
        self._launch(key, state, _Batch([], manual=False))
        return True

    # -- inspection --------------------------------------------------------------

    async def status(self, key: ChannelKey) -> ScheduleStatus:
        """Whether a rebuild of the channel runs or waits, and when its next scheduled check is."""
        state = self._states.get(key)
        return ScheduleStatus(
            running=state is not None and state.task is not None,
            queued=state is not None and state.queued is not None,
            next_run=self._checks.next_run(key),
        )

    @property
    def started(self) -> bool:
        """Between :meth:`start` and :meth:`stop`."""
        return self._checks.started

    def job(self, key: ChannelKey) -> Job | None:
        """The channel's APScheduler job, None if it has none or the scheduler is not started."""
        return self._checks.job(key)

    async def wait_idle(self, key: ChannelKey | None = None) -> None:
        """Until nothing runs or waits for that channel (or any channel): for tests and shutdown."""
        while True:
            tasks = [
                s.task for k, s in self._states.items() if s.task is not None and (key is None or k == key)
            ]
            if not tasks:
                return
            # A queued batch runs in the same task, but a request arriving just as a task
            # ends starts a new one: look again until none is left.
            await asyncio.wait(tasks)

    # -- internals -----------------------------------------------------------------

    def _state(self, key: ChannelKey) -> _ChannelState:
        # One small entry per channel the bot serves: bounded by the channels, never dropped,
        # because the note lock must stay the same object while anything awaits it.
        if key not in self._states:
            self._states[key] = _ChannelState()
        return self._states[key]

    async def _resume(self, key: ChannelKey) -> None:
        """Restarts a manual rebuild whose note survived a restart (its requester cannot be told),
        if the channel's schedule is enabled in this process."""
        if not schedule_of(self._config, key).enabled:
            # Every replica of a server-backed bot starts here: only the one running the
            # schedule may resume, or each would build the channel at once.
            log.debug("channel %s: schedule disabled, a pending rebuild is left to the process that runs it", key)
            return
        state = self._state(key)
        if state.task is not None:
            return  # a request made before start() already covers it
        try:
            notes = await self._engine.notes(key)
        except RaptorError as exc:
            log.warning("channel %s: cannot read its notes to resume a rebuild: %s", key, exc)
            return
        if NOTE in notes and state.task is None:
            log.info("channel %s: resuming the rebuild requested by %s", key, notes[NOTE])
            self._launch(key, state, _Batch([_Requester(notes[NOTE])], manual=True))

    def _launch(self, key: ChannelKey, state: _ChannelState, batch: _Batch) -> None:
        state.current = batch
        state.task = asyncio.get_running_loop().create_task(self._drain(key, state), name=f"rebuild {key}")

    async def _drain(self, key: ChannelKey, state: _ChannelState) -> None:
        """Runs the current batch, then each batch queued meanwhile, one after the other."""
        try:
            while state.current is not None:
                await self._build(key, state.current)
                await self._release_note(key, state)
                # A rebuild frees hundreds of MB that malloc would keep: RSS grew with every one.
                await asyncio.to_thread(release_free_memory)
                # Synchronous from here to the next build: a request either saw this task
                # alive and queued (taken now) or comes after and starts a new task.
                state.current, state.queued = state.queued, None
        finally:
            state.task = state.current = state.queued = None

    async def _release_note(self, key: ChannelKey, state: _ChannelState) -> None:
        """Clears the note after a manual build unless another manual build waits (it needs the note)."""
        assert state.current is not None
        if not state.current.manual:
            return
        async with state.note_lock:
            if state.queued is not None:
                return
            try:
                await self._engine.set_note(key, NOTE, None)
            except Exception:
                # The note stays: the next start rebuilds once more, which is harmless.
                log.warning("channel %s: cannot clear the rebuild note", key, exc_info=True)

    async def _build(self, key: ChannelKey, batch: _Batch) -> None:
        """One rebuild, reported to the batch's requesters (or the log). Never raises but CancelledError."""
        log.info("channel %s: rebuild started (%s)", key, batch.describe())
        public, private = batch.announced()
        forced = any(requester.force for requester in batch.requesters)
        reply, error = await rebuild_and_report(self._engine, key, public, self._config.progress_every_s,
                                                batch.describe(), self._metrics, self._budget, force=forced)
        courier = self._couriers.get(key.platform)
        if not batch.manual and held_back_news(error) and courier is not None:
            await send_safely(courier(ReplyAddress(key)), reply)  # nobody asked: the channel is told, once
        batch.answered = True
        told = replace(reply, private=True)
        await asyncio.gather(*(send_safely(send, reply) for send in public),
                             *(send_safely(send, told) for send in private))


async def _send_within(send: Send, reply: Reply, timeout_s: float) -> None:
    try:
        await asyncio.wait_for(send_safely(send, reply), timeout_s)
    except TimeoutError:
        log.warning("gave up sending a %s reply after %.0f s", reply.kind.value, timeout_s)
