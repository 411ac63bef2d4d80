"""Noticing an event loop that is blocked: :class:`LoopWatchdog`.

Everything a serving process does runs on one asyncio loop, the platforms' keep-alives
included: discord.py's heartbeat thread hands each heartbeat to the loop (Discord drops a
client that misses one, about every 41 s), and aiohttp sends Slack's socket pings from it
and closes the socket when a pong is not read within half its interval (5 s with bolt's
10 s). Code that blocks the loop (a synchronous call that should have been in a thread)
therefore ends in a reconnect that looks like a network problem. The watchdog names it:

* a callback on the loop notes the time every quarter of the threshold;
* a daemon thread checks that time; when the loop has not run for longer than the
  threshold, it logs a warning *while the loop is still blocked*, with the loop thread's
  stack (what is blocking it), and counts it once (``raptor_loop_blocks_total``);
* when the loop runs again, it logs how long it was blocked.

One watchdog runs per loop and metrics (the bot's :class:`~bot.observability.metrics.Metrics`,
``Assistant.metrics``), however many adapters ask for it (:meth:`LoopWatchdog.acquire` /
:meth:`LoopWatchdog.release`), so a block is counted once.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from typing import Protocol

log = logging.getLogger(__name__)

# Well under what the platforms allow (Discord's heartbeat interval of ~41 s; aiohttp's 5 s
# pong deadline on Slack's socket), and well over what a healthy loop ever takes.
LOOP_BLOCK_S = 2.0
STACK_FRAMES = 12  # of the blocked loop's stack, the innermost are the ones that name the culprit


class CountsLoopBlocks(Protocol):
    """Where blocks are counted (``Assistant.metrics``)."""

    def count_loop_block(self) -> None: ...


class LoopWatchdog:
    """Watches one event loop for blocks longer than ``block_s`` seconds; see the module docstring.

    Get one with :meth:`acquire` (on the loop to watch), give it back with :meth:`release`;
    the thread stops when the last holder releases it.
    """

    _running: dict[tuple[asyncio.AbstractEventLoop, int], LoopWatchdog] = {}

    def __init__(self, loop: asyncio.AbstractEventLoop, metrics: CountsLoopBlocks, block_s: float) -> None:
        if block_s <= 0:
            raise ValueError(f"block_s must be positive, got {block_s}")
        self.block_s = block_s
        self._loop = loop
        self._metrics = metrics
        self._tick = block_s / 4
        self._holders = 0
        self._lock = threading.Lock()
        self._beat_at = time.monotonic()
        self._reported = False  # the current block was logged and counted
        self._loop_thread = threading.get_ident()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)
        self._handle: asyncio.TimerHandle | None = None

    @classmethod
    def acquire(cls, metrics: CountsLoopBlocks, block_s: float = LOOP_BLOCK_S) -> LoopWatchdog:
        """The watchdog of the running loop for ``metrics``, started if it was not running.
        Must be called on the loop's thread. A watchdog already running keeps its threshold."""
        loop = asyncio.get_running_loop()
        key = (loop, id(metrics))
        watchdog = cls._running.get(key)
        if watchdog is None:
            watchdog = cls._running[key] = cls(loop, metrics, block_s)
            watchdog._start()
        watchdog._holders += 1
        return watchdog

    def release(self) -> None:
        """Gives the watchdog back; the last holder stops it. Call it on the loop's thread."""
        self._holders -= 1
        if self._holders > 0:
            return
        self._running.pop((self._loop, id(self._metrics)), None)
        self._stopped.set()
        if self._handle is not None:
            self._handle.cancel()

    def _start(self) -> None:
        self._loop_thread = threading.get_ident()
        self._beat()
        self._thread.start()
        log.debug("watching the event loop for blocks over %.1f s", self.block_s)

    def _beat(self) -> None:
        """On the loop: notes that it runs, and reports the end of a block that was reported."""
        now = time.monotonic()
        with self._lock:
            blocked_for = now - self._beat_at
            reported, self._reported = self._reported, False
            self._beat_at = now
        if reported:
            log.warning("the event loop runs again after being blocked for %.1f s", blocked_for)
        if not self._stopped.is_set():
            self._handle = self._loop.call_later(self._tick, self._beat)

    def _watch(self) -> None:
        """In the thread: reports a block once, while it lasts."""
        while not self._stopped.wait(self._tick):
            if self._loop.is_closed():  # closed without a release: nothing left to watch
                return
            with self._lock:
                blocked_for = time.monotonic() - self._beat_at
                if blocked_for <= self.block_s or self._reported:
                    continue
                self._reported = True
            self._metrics.count_loop_block()
            log.warning("the event loop has been blocked for %.1f s (more than %.1f s), which delays keep-alives; "
                        "it is running:\n%s", blocked_for, self.block_s, self._loop_stack())

    def _loop_stack(self) -> str:
        frame = sys._current_frames().get(self._loop_thread)
        if frame is None:
            return "(the loop's thread is gone)"
        return "".join(traceback.format_stack(frame)[-STACK_FRAMES:])
