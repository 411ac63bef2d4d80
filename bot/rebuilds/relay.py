"""Telling people about a rebuild: its progress as it goes, and replies that never stop it.

:class:`ProgressRelay` turns the engine's progress callbacks into PROGRESS replies, few
enough not to flood a channel; :func:`send_safely` sends a reply about a rebuild, logging
instead of raising when a platform fails to deliver it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from bot.neutral import Reply, ReplyKind, Send
from bot.replies import progress_text
from raptor_engine import BuildProgress

log = logging.getLogger(__name__)


class ProgressRelay:
    """The engine's ``ProgressCallback`` turned into PROGRESS replies, at most one per
    ``every_s`` seconds (the first after ``every_s``: a quick build only reports its result).

    Callable from any thread: events hop to the loop the relay was made on. Updates
    arriving while a reply is still being sent are dropped, so a slow platform never
    piles replies up; :meth:`close` waits for the one in flight and stops the rest.
    """

    def __init__(
        self,
        sends: Sequence[Send],
        every_s: float,
        clock: Callable[[], float] = time.monotonic,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        """Must be made on the loop (or given ``loop``) whose coroutines ``sends`` are."""
        self._sends = list(sends)
        self._every_s = every_s
        self._clock = clock
        self._loop = loop or asyncio.get_running_loop()
        self._last = clock()
        self._in_flight: asyncio.Task[None] | None = None
        self._closed = False

    def __call__(self, event: BuildProgress) -> None:
        # Worker threads call this too: only the loop may touch the relay's state.
        self._loop.call_soon_threadsafe(self._on_event, event)

    def _on_event(self, event: BuildProgress) -> None:
        now = self._clock()
        if self._closed or now - self._last < self._every_s:
            return
        if self._in_flight is not None and not self._in_flight.done():
            return
        self._last = now
        reply = Reply(ReplyKind.PROGRESS, progress_text(event))
        self._in_flight = self._loop.create_task(self._deliver(reply))

    async def _deliver(self, reply: Reply) -> None:
        await asyncio.gather(*(send_safely(send, reply) for send in self._sends))

    async def close(self) -> None:
        """Stops relaying and waits for the reply being sent, if any."""
        self._closed = True
        if self._in_flight is not None:
            await self._in_flight

    def cancel(self) -> None:
        """Stops relaying and cancels the reply being sent, if any (the build was cancelled)."""
        self._closed = True
        if self._in_flight is not None:
            self._in_flight.cancel()


async def send_safely(send: Send, reply: Reply) -> None:
    """Sends, logging instead of raising: a platform failing to deliver never stops a rebuild."""
    try:
        await send(reply)
    except Exception:
        log.warning("could not send a %s reply about a rebuild", reply.kind.value, exc_info=True)
