"""The composition of a chat session: the engine, the rebuild scheduler and the chat handler.

Adapters receive a started :class:`Bot` and talk to ``bot.handler`` only::

    bot = await open_bot(config)       # loads the embedding model in a worker thread
    await bot.start()                  # scheduler running, UMAP warming up in the background
    ...                                # the adapter feeds events to bot.handler.handle
    await bot.stop()

:func:`run_until_signalled` is for entry points: it runs a coroutine until it
ends or SIGTERM/SIGINT arrives, and then cancels it, so its ``finally``
blocks (which stop the bot) run.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from bot.config import Config
from bot.handler import ChatHandler
from bot.scheduler import RebuildScheduler
from raptor_engine.engine import Engine
from raptor_engine.types import ChannelKey, Source

log = logging.getLogger(__name__)

T = TypeVar("T")


class Bot:
    """One engine, its rebuild scheduler, and the handler every adapter feeds."""

    def __init__(self, config: Config, engine: Engine) -> None:
        self.config = config
        self.engine = engine
        self.scheduler = RebuildScheduler(engine, config.bot)
        self.handler = ChatHandler(engine, config, self.scheduler)
        self._warm_up: threading.Thread | None = None

    async def start(self, warm_up: bool = True) -> None:
        """Starts the scheduler and, with ``warm_up``, compiles UMAP's numba kernels in a
        background thread. Returns at once: the first question does not wait for the compile."""
        await self.scheduler.start()
        if warm_up and self._warm_up is None:
            # A daemon thread, not asyncio.to_thread: stopping must not wait for a compile
            # that nobody needs any more (the default executor is joined at shutdown).
            self._warm_up = threading.Thread(target=_warm_up_clustering, name="umap-warm-up", daemon=True)
            self._warm_up.start()

    async def stop(self) -> None:
        """Stops the scheduler (see ``RebuildScheduler.stop`` for what happens to a running rebuild)."""
        await self.scheduler.stop()

    async def sources(self, key: ChannelKey) -> list[Source]:
        """The channel's sources, read in a worker thread."""
        return await asyncio.to_thread(self.engine.sources, key)


async def open_bot(config: Config) -> Bot:
    """The bot the configuration describes, not started yet. Building the engine loads
    the embedding model (seconds), so it happens in a worker thread."""
    from bot.composition import build_engine  # imports torch: only when a bot is really opened

    engine = await asyncio.to_thread(build_engine, config)
    return Bot(config, engine)


async def run_until_signalled(main: Coroutine[Any, Any, T]) -> T | None:
    """Runs ``main`` until it returns, or until SIGTERM or SIGINT cancels it (then None).

    Cancelling lets ``main``'s ``finally`` blocks stop the bot cleanly; a second
    signal while that happens is ignored rather than interrupting the clean-up.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    signals = (signal.SIGTERM, signal.SIGINT)

    def on_signal(signum: int) -> None:
        if task.cancelling():
            log.info("received %s again; still stopping", signal.Signals(signum).name)
            return
        log.info("received %s; stopping", signal.Signals(signum).name)
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
        return await task
    except asyncio.CancelledError:
        if task.cancelled() and not _current_task_cancelling():
            return None  # stopped by a signal
        raise
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


def _current_task_cancelling() -> bool:
    """True when the task running this code is itself being cancelled (not just ``main``)."""
    current = asyncio.current_task()
    return current is not None and current.cancelling() > 0


def _warm_up_clustering() -> None:
    """Starts the clustering worker process and compiles UMAP in it; a failure only costs
    the first rebuild time."""
    try:
        from raptor_engine.cluster_worker import warm_up

        warm_up()
        log.info("UMAP is compiled and ready")
    except Exception:
        log.warning("warming up UMAP failed; the first rebuild will compile it", exc_info=True)
