"""Running a coroutine on a thread of its own, at a lower CPU priority.

A rebuild is minutes of CPU work (clustering, embedding summaries) in the same
process that answers questions. On few cores both compete, and a question
that takes 250 ms idle took 1.4 s during a rebuild. :func:`run_in_background`
runs the rebuild's coroutine on a new thread with its own event loop, and
first raises that thread's nice value: on Linux niceness is per thread and is
inherited by the threads it starts, so the rebuild's worker threads (and the
BLAS/OpenMP threads those start) all yield the CPU to the threads answering
questions. Where per-thread priority is not available the work simply runs at
normal priority.

Priority alone does not keep Python code of both sides from taking turns on
the interpreter lock, so :class:`ForegroundGate` also lets a rebuild pause
between its steps while a question is being answered. The heaviest step,
clustering, runs in a separate process (see ``cluster_worker.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import sys
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
BACKGROUND_NICENESS = 10  # CFS gives a nice-10 thread about a tenth of a nice-0 thread's share when they compete


def lower_this_threads_priority(niceness: int = BACKGROUND_NICENESS) -> bool:
    """Raises the calling thread's nice value by ``niceness`` (Linux only: elsewhere
    ``setpriority`` would apply to the whole process). True if it was lowered."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        thread_id = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread_id, os.getpriority(os.PRIO_PROCESS, thread_id) + niceness)
    except OSError as exc:  # a sandbox may forbid it; the work still runs
        log.debug("could not lower the priority of a background thread: %s", exc)
        return False
    return True


class _Run:
    """One coroutine on one thread; its outcome in ``outcome``."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        self.coroutine = coroutine
        self.outcome: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()

    def serve(self) -> None:
        lower_this_threads_priority()
        asyncio.run(self._main())  # also waits for the loop's worker threads before the thread ends

    async def _main(self) -> None:
        self._loop, self._task = asyncio.get_running_loop(), asyncio.current_task()
        self._started.set()
        try:
            result = await self.coroutine
        except BaseException as exc:  # handed over to the caller, cancellation included
            _settle(self.outcome, exc=exc)
        else:
            _settle(self.outcome, result=result)

    def cancel(self) -> None:
        """Cancels the coroutine on its own loop (it may still run its clean-up)."""
        self._started.wait()
        if self._loop is not None and self._task is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)


def _settle(future: concurrent.futures.Future[Any], result: Any = None, exc: BaseException | None = None) -> None:
    try:
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(result)
    except concurrent.futures.InvalidStateError:  # the caller gave up waiting
        pass


async def run_in_background(coroutine: Coroutine[Any, Any, T], name: str) -> T:
    """Runs ``coroutine`` on a new low-priority thread with its own event loop and returns
    its result (or raises its exception). Cancelling the caller cancels the coroutine.

    The coroutine must not share loop-bound objects (locks, queues, futures) with the
    caller's loop; thread-safe callbacks are fine.
    """
    run = _Run(coroutine)
    threading.Thread(target=run.serve, name=name, daemon=True).start()
    try:
        # Shielded: our cancellation must reach the coroutine (below), not just this wait.
        return await asyncio.shield(asyncio.wrap_future(run.outcome))
    except asyncio.CancelledError:
        run.cancel()
        raise


class ForegroundGate:
    """Lets background work (a rebuild) step aside while foreground work (a question) runs.

    Foreground work wraps itself in :meth:`foreground`; background work calls
    :meth:`wait_quiet` between its steps and waits there while any foreground
    work runs, but never longer than ``max_wait_s`` per step, so a steady
    stream of questions slows a rebuild down without stopping it. Thread-safe.
    """

    def __init__(self, max_wait_s: float = 2.0) -> None:
        self.max_wait_s = max_wait_s
        self._active = 0
        self._quiet = threading.Condition()

    @property
    def busy(self) -> bool:
        return self._active > 0

    @contextmanager
    def foreground(self) -> Iterator[None]:
        with self._quiet:
            self._active += 1
        try:
            yield
        finally:
            with self._quiet:
                self._active -= 1
                if not self._active:
                    self._quiet.notify_all()

    def wait_quiet(self) -> None:
        """Blocks while foreground work runs, at most ``max_wait_s``."""
        with self._quiet:
            self._quiet.wait_for(lambda: self._active == 0, timeout=self.max_wait_s)

    async def step_aside(self) -> None:
        """:meth:`wait_quiet` for coroutines: returns at once when nothing runs in the foreground."""
        if self.busy:
            await asyncio.to_thread(self.wait_quiet)
