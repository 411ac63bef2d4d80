"""A blocking check run on a thread of its own, one at a time: :class:`SingleFlight`.

Readiness probes ask servers that may hang (a Chroma server paused, a host dropping packets).
Run on a shared executor, every probe of a hung server would hold one more of its threads,
until nothing else could run. A :class:`SingleFlight` starts its check on a new daemon thread
only when none is running: while one is, every caller waits on that same check. However often
an orchestrator probes, a hung server holds one thread per check, and only until the server's
own deadline ends the call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future


class SingleFlight:
    """``check`` (blocking, returning whether all is well) run on a thread of its own, never twice at once."""

    def __init__(self, name: str, check: Callable[[], bool]) -> None:
        self.name = name
        self._check = check
        self._lock = threading.Lock()
        self._running: Future[bool] | None = None

    async def run(self) -> bool:
        """The outcome of the check running now, or of one started now if none is. Callable
        from any thread and event loop; cancelling the wait leaves the check running for the
        next caller. Raises what the check raised."""
        return await asyncio.wrap_future(self._current())

    def _current(self) -> Future[bool]:
        with self._lock:
            if self._running is None or self._running.done():
                outcome: Future[bool] = Future()
                outcome.set_running_or_notify_cancel()  # a running future cannot be cancelled by a waiter
                thread = threading.Thread(target=self._run, args=(outcome,), name=f"probe-{self.name}", daemon=True)
                thread.start()
                self._running = outcome
            return self._running

    def _run(self, outcome: Future[bool]) -> None:
        try:
            outcome.set_result(self._check())
        except BaseException as exc:  # noqa: BLE001 (handed to the callers, who raise it)
            outcome.set_exception(exc)
