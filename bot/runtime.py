"""The composition of a chat session: the engine, the rebuild scheduler and the chat handler.

Adapters receive a started :class:`Assistant` from the composition root
(:func:`bot.composition.serve`) and talk to ``bot.handler`` only::

    bot = await open_bot(config)       # bot.composition: loads the embedding model in a thread
    await bot.start()                  # scheduler running, UMAP warming up in the background
    ...                                # each adapter feeds events to bot.handler.handle
    await bot.stop()

:func:`run_until_signalled` is for entry points: it runs a coroutine until it
ends or SIGTERM/SIGINT arrives, and then cancels it, so its ``finally``
blocks (which stop the bot) run. After a signal it also ends the process
itself, within ``STOP_DEADLINE_S``: it lets work already running in worker
threads (an upload being stored, a question being answered) finish for
``THREADS_GRACE_S``, kills the clustering worker and exits without Python's
own clean-up. That clean-up would wait for every thread, however long (the
model being loaded, a rebuild's embedding batch), and then spend seconds
freeing torch's objects: on a loaded machine more than a container's grace
period, after which it is killed anyway. What is cut off is cut off as a kill
would cut it: a rebuild leaves the previous tree serving and resumes at the
next start.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

from bot.assistant_threads import AssistantThreads, LocalThreadState, SharedThreadState
from bot.config import Config
from bot.coordination.deliveries import DeliveryLedger, LocalLedger
from bot.engine_calls import AsyncEngine
from bot.front_end import FrontEnd
from bot.handler import ChatHandler
from bot.model_budget import LocalSpending, ModelBudget
from bot.neutral import ChannelKey, Courier, SourceView
from bot.observability.metrics import Metrics
from bot.process_exit import end_process
from bot.rebuilds.in_process import RebuildScheduler
from bot.rebuilds.service import RebuildService

log = logging.getLogger(__name__)

T = TypeVar("T")

STOP_DEADLINE_S = 3.0  # after SIGTERM/SIGINT the process ends then at the latest, clean-up finished or not
THREADS_GRACE_S = 2.0  # after the signal, work running in worker threads may finish until then


class Assistant:
    """One engine, its rebuild service, and the handler every adapter feeds.

    Alone (no ``front_end``), it rebuilds in this process and remembers events here. As a
    front-end of several processes, rebuilds go to the workers' queue, events and rate
    limits are shared through Redis, and workers' replies are posted from here.
    """

    def __init__(self, config: Config, engine: AsyncEngine, deliveries: DeliveryLedger | None = None,
                 front_end: FrontEnd | None = None) -> None:
        self.config = config
        self.calls = engine  # the one AsyncEngine of the process, built by the composition root
        self.engine = engine.engine  # the synchronous engine, for callers outside an event loop
        self.front_end = front_end
        self.metrics = Metrics()
        self.scheduler: RebuildService
        spending = front_end.spending if front_end is not None else LocalSpending()
        budget = ModelBudget(config.bot.model_budget, spending)  # shared by answers and rebuilds
        self.couriers: dict[str, Courier] = {}
        if front_end is not None:
            self.scheduler = front_end.rebuilds
            self.deliveries: DeliveryLedger = front_end.deliveries
        else:
            self.scheduler = RebuildScheduler(engine, config.bot, self.metrics, budget, self.couriers)
            self.deliveries = deliveries or LocalLedger()
        limiters = front_end.limiters if front_end is not None else None
        # Each assistant thread's viewed channel: shared by the replicas when they are coordinated.
        thread_state = SharedThreadState(front_end.link) if front_end is not None else LocalThreadState()
        self.assistant_threads = AssistantThreads(engine, thread_state)
        self.handler = ChatHandler(engine, config, self.scheduler, limiters=limiters, metrics=self.metrics,
                                   budget=budget)
        self._warm_up: threading.Thread | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self, warm_up: bool = True) -> None:
        """Starts the scheduler and, with ``warm_up``, compiles UMAP's numba kernels in a
        background thread. Returns at once: the first question does not wait for the compile."""
        await self.scheduler.start()
        if self.front_end is not None:
            # Workers' replies (rebuild progress and results) posted through the adapters' couriers.
            reader = self.front_end.reader(self.couriers)
            self._reader = asyncio.get_running_loop().create_task(reader.run(), name="rebuild replies")
            return  # a front-end never clusters: no UMAP to warm up
        if warm_up and self._warm_up is None:
            # A daemon thread, not asyncio.to_thread: stopping must not wait for a compile
            # that nobody needs any more (the default executor is joined at shutdown).
            self._warm_up = threading.Thread(target=_warm_up_clustering, name="umap-warm-up", daemon=True)
            self._warm_up.start()

    async def stop(self) -> None:
        """Stops the scheduler (see ``RebuildScheduler.stop`` for what happens to a running rebuild)
        and, on a front-end, the reader of workers' replies and the Redis connection."""
        await self.scheduler.stop()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
            self._reader = None
        if self.front_end is not None:
            await self.front_end.link.close()

    async def sources(self, key: ChannelKey) -> list[SourceView]:
        """The channel's sources, read in a worker thread."""
        sources = await self.calls.sources(key)
        return [SourceView(s.id, s.title, s.external_id) for s in sources]

    @property
    def max_upload_bytes(self) -> int:
        """The largest file the bot takes (``files.max_mb``): adapters refuse larger ones
        before downloading them, or download one byte more to tell."""
        return self.engine.settings.max_file_bytes

    async def first_delivery(self, event_id: str, broadcast: bool = False) -> bool:
        """True the first time any replica asks about ``event_id`` (a platform-qualified id:
        ``slack:event:Ev123``, ``discord:message:456``), False for every later delivery of it:
        the adapter then drops the event. One process without Redis remembers its own.
        ``broadcast``: the platform delivered the event to every front-end (Discord's
        gateway); with Redis down only the front-end owning it then answers (see
        :mod:`bot.coordination.deliveries`)."""
        return await self.deliveries.first(event_id, broadcast)

    def add_courier(self, platform: str, courier: Courier) -> None:
        """Lets the bot post to channels of ``platform`` (``ChannelKey.platform``) without an
        event to answer: a rebuild's progress and result when another process ran it. Each
        adapter registers one when it starts serving."""
        self.couriers[platform] = courier

    def keep_scheduled(self, key: ChannelKey) -> None:
        """Schedules the channel's rebuild checks again (after a restart; a channel is
        scheduled on its own once something is added to it)."""
        self.scheduler.watch(key)


async def run_until_signalled(main: Coroutine[Any, Any, T], exit_process: bool = True) -> T | None:
    """Runs ``main`` until it returns, or until SIGTERM or SIGINT cancels it (then None).

    Cancelling lets ``main``'s ``finally`` blocks stop the bot cleanly; a second
    signal while that happens is ignored rather than interrupting the clean-up.

    With ``exit_process`` (for entry points), a signal also ends the process with
    status 0: at once when ``main`` has finished, or ``STOP_DEADLINE_S`` after the
    signal if its clean-up is still running then (logged). It never returns then.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    signals = (signal.SIGTERM, signal.SIGINT)
    signalled_at: float | None = None

    def on_signal(signum: int) -> None:
        nonlocal signalled_at
        if task.cancelling():
            log.info("received %s again; still stopping", signal.Signals(signum).name)
            return
        log.info("received %s; stopping", signal.Signals(signum).name)
        signalled_at = time.monotonic()
        if exit_process:
            _end_process_after(STOP_DEADLINE_S)
        task.cancel()

    installed = []
    for signum in signals:
        try:
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
        except (NotImplementedError, RuntimeError, ValueError):
            # Not the main thread, or a platform without loop signal handlers: Ctrl-C then
            # raises KeyboardInterrupt as usual.
            log.debug("cannot install a handler for %s", signum)
    try:
        result = await task
    except asyncio.CancelledError:
        if not task.cancelled() or _current_task_cancelling():
            raise
        result = None  # stopped by a signal
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)
    if signalled_at is not None and exit_process:
        await _let_threads_finish(signalled_at + THREADS_GRACE_S)
        end_process(0)
    return result


async def _let_threads_finish(until: float) -> None:
    """Waits until the monotonic time ``until`` at most for the work running in the loop's
    worker threads (``asyncio.to_thread``): an upload being stored should be stored."""
    remaining = until - time.monotonic()
    try:
        await asyncio.wait_for(asyncio.get_running_loop().shutdown_default_executor(), max(remaining, 0.0))
    except TimeoutError:
        log.warning("work still running %.1f s after the signal is cut off", THREADS_GRACE_S)


def _current_task_cancelling() -> bool:
    """True when the task running this code is itself being cancelled (not just ``main``)."""
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0


def _end_process_after(seconds: float) -> None:
    """Ends the process ``seconds`` from now (status 0), unless it has ended by then."""

    def deadline() -> None:
        time.sleep(seconds)
        log.warning("still stopping %.1f s after the signal; ending the process now", seconds)
        end_process(0)

    threading.Thread(target=deadline, name="stop-deadline", daemon=True).start()


def _warm_up_clustering() -> None:
    """Starts the clustering worker process and compiles UMAP in it; a failure only costs
    the first rebuild time."""
    try:
        from raptor_engine import warm_up_clustering as warm_up

        if warm_up():
            log.info("UMAP is compiled and ready")
    except Exception:
        log.warning("warming up UMAP failed; the first rebuild will compile it", exc_info=True)
