"""The LLM client's own event loop, in a daemon thread, and the ways in from other loops and threads.

Contract: the ``openai`` client's connection pool and the client's semaphore belong to one
event loop, while the engine calls the client from several: summaries from its loop,
``Embedder.embed`` (synchronous by protocol) from worker threads and from the loop itself.
:class:`ClientLoop` runs that one loop in a daemon thread, started at first use. Async callers
await a future bridged to it (:meth:`ClientLoop.run`), plain threads block on it
(:meth:`ClientLoop.run_sync`), and an async iterator run there is read from the caller's loop
(:meth:`ClientLoop.bridge`). The caller's meter goes along each time: a task on another loop
does not inherit the caller's context. :meth:`ClientLoop.close` cancels what runs there and
stops the thread. Raises ``RuntimeError`` once closed, or when a blocking call is made from the
loop's own thread (it would wait on itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from raptor_engine.metering import Meter, adopt_meter, current_meter

T = TypeVar("T")

_END = object()  # what the bridge's queue carries after the last item


class ClientLoop:
    """One event loop in a daemon thread, for one LLM client. See the module docstring."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    def ensure(self) -> asyncio.AbstractEventLoop:
        """The loop, its thread started on first use. Raises ``RuntimeError`` once closed."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the LLMClient is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=_run_forever, args=(loop,), name="llm-client", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def run(self, call: Coroutine[Any, Any, T]) -> T:
        """Awaits ``call`` on the loop, from whichever loop we are on. Cancelling this await
        cancels the task there too."""
        try:
            loop = self.ensure()
        except RuntimeError:
            call.close()
            raise
        if asyncio.get_running_loop() is loop:
            return await call
        future = asyncio.run_coroutine_threadsafe(_metered_by(current_meter(), call), loop)
        return await asyncio.wrap_future(future)

    def run_sync(self, call: Coroutine[Any, Any, T]) -> T:
        """Runs ``call`` on the loop and blocks this thread until it ends (for synchronous
        callers). Must not be called from the loop's own thread."""
        loop = self.ensure()
        if threading.current_thread() is self._thread:
            call.close()
            raise RuntimeError("LLMClient.run_sync called from the client's own event loop")
        return asyncio.run_coroutine_threadsafe(_metered_by(current_meter(), call), loop).result()

    def bridge(self, source: AsyncIterator[T]) -> AsyncIterator[T]:
        """``source`` run to its end on the loop, its items read from the caller's loop through a
        queue (the loop reads ahead of a slow consumer); its error is raised to the reader, and a
        reader leaving early cancels it there."""
        return self._bridged(source)

    async def _bridged(self, source: AsyncIterator[T]) -> AsyncIterator[T]:
        loop = self.ensure()
        here = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[object, BaseException | None]] = asyncio.Queue()

        def put(item: object, error: BaseException | None = None) -> None:
            with contextlib.suppress(RuntimeError):  # the consumer's loop is gone: nobody reads any more
                here.call_soon_threadsafe(queue.put_nowait, (item, error))

        async def pump() -> None:
            try:
                async for item in source:
                    put(item)
            except Exception as exc:  # noqa: BLE001 (handed to the consumer, who raises it)
                put(_END, exc)
                return
            put(_END)

        future = asyncio.run_coroutine_threadsafe(_metered_by(current_meter(), pump()), loop)
        try:
            while True:
                item, error = await queue.get()
                if error is not None:
                    raise error
                if item is _END:
                    return
                yield item  # type: ignore[misc]  # every item but the end marker is a T
        finally:
            future.cancel()

    def close(self, last: Callable[[], Awaitable[None]]) -> None:
        """Cancels every task on the loop, awaits ``last`` there (closing connections), then
        stops the loop and its thread. Idempotent; nothing to do if the loop never started."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:
            raise RuntimeError("LLMClient.close called from the client's own event loop")
        if thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(_shutdown(last), loop).result(timeout=10)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=10)


async def _shutdown(last: Callable[[], Awaitable[None]]) -> None:
    current = asyncio.current_task()
    pending = [task for task in asyncio.all_tasks() if task is not current]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    await last()


def _run_forever(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


async def _metered_by(meter: Meter | None, call: Coroutine[Any, Any, T]) -> T:
    """Runs ``call`` with ``meter`` as the current meter (the task's own context, so nothing leaks)."""
    adopt_meter(meter)
    return await call
