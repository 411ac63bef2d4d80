"""Streamed answers: a language model's answer shown while it is written, within a platform's limits.

The engine gives an answer as a stream of text pieces (already final: citation markers
renumbered), then the whole answer. :class:`DraftPacer` stands between that stream and an
adapter's :class:`~bot.neutral.AnswerDraft`: pieces are added as they come, without waiting
for the platform; the draft is shown the text so far as soon as the first words are there,
then at most once every ``draft.interval_s`` seconds (the platform's edit or stream limit),
never two calls at once (a slow call makes the next one carry more text); at the end the
finished reply takes the draft's place. Pacing here, not in each adapter, keeps the rule in
one place; adapters only say how often they may show and how.

Contract of :class:`DraftPacer`: :meth:`DraftPacer.add` never blocks and never raises;
:meth:`DraftPacer.finish` waits for a show in progress (it is not cut in the middle of a
platform call), shows nothing more, and hands the reply to ``draft.finish`` exactly once.
A show that raises is logged and ends the showing (the finished reply still comes).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import suppress

from bot.neutral import AnswerDraft, Reply

log = logging.getLogger(__name__)


class DraftPacer:
    """Shows a growing answer on ``draft`` within its pace; see the module docstring."""

    def __init__(self, draft: AnswerDraft, clock: Callable[[], float] = time.monotonic) -> None:
        self._draft = draft
        self._clock = clock
        self._text = ""
        self._more = asyncio.Event()
        self._showing = asyncio.Lock()  # held during a show: finish waits for it, never cuts it
        self._task: asyncio.Task[None] | None = None
        self._finished = False

    @property
    def finished(self) -> bool:
        """Whether :meth:`finish` (or :meth:`close`) was called: the draft takes nothing more."""
        return self._finished

    @property
    def text(self) -> str:
        """The answer's text added so far."""
        return self._text

    def add(self, piece: str) -> None:
        """More of the answer's text; shown at the next moment the pace allows."""
        if not piece or self._finished:
            return
        self._text += piece
        self._more.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._show_loop(), name="answer draft")

    async def finish(self, reply: Reply) -> None:
        """Stops showing (after a show in progress) and puts ``reply`` in the draft's place."""
        if self._finished:
            return
        await self.close()
        await self._draft.finish(reply)

    async def close(self) -> None:
        """Stops showing, without a final reply (the handler was cancelled). Idempotent."""
        self._finished = True
        task, self._task = self._task, None
        if task is None:
            return
        async with self._showing:  # a show in progress ends first; the loop then waits outside it
            task.cancel()
        with suppress(asyncio.CancelledError):
            await task

    async def _show_loop(self) -> None:
        shown = ""
        last = float("-inf")
        while True:
            await self._more.wait()
            self._more.clear()
            wait = last + self._draft.interval_s - self._clock()
            if wait > 0:
                await asyncio.sleep(wait)
            async with self._showing:
                text = self._text
                if text == shown:
                    continue
                last = self._clock()
                try:
                    await self._draft.show(text)
                except Exception:  # noqa: BLE001 (logged; the finished reply still replaces the draft)
                    log.exception("showing an answer as it is written failed; it will come when finished")
                    return
                shown = text
