"""The thread boundary between the chat side and the engine, in one place.

The engine's API is synchronous: it is a plain library, and the command line and the
benchmarks call it directly. Only ``answer`` and ``rebuild`` are coroutines, and they run
their blocking work on threads (a rebuild on a thread of its own). The chat side runs on
one event loop, which must never wait on Chroma or the model; it reaches the engine through
:class:`AsyncEngine`, whose methods run each blocking call on the engine's own threads
(``Engine.in_threads``). Nothing else in ``bot`` hands engine work to a thread.

The engine's threads are a pool of their own, bounded (:func:`engine_threads`, made by the
composition root and given to the engine): an answer's blocking steps run there too, while
nothing else does (readiness probes have threads of their own, the loop's default executor
serves the rest). So a store that stops answering holds at most ``ENGINE_THREADS`` threads,
each until its request's deadline (``chroma.timeout_s``), and never the threads other work needs.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, TypeVar

from raptor_engine import Answer, BuildReport, ChannelKey, NodeView, Source, TreeStats

if TYPE_CHECKING:
    from raptor_engine import AnswerRecord, AnswerStream, Engine, ProgressCallback

log = logging.getLogger(__name__)

T = TypeVar("T")

# Engine calls running at once in a process; more wait their turn. Engine work is CPU (embedding,
# ranking) or waits on the store: more threads than this buy nothing on the few cores a bot runs
# on, and the bound is what a hung store can hold.
ENGINE_THREADS = 8


def engine_threads() -> ThreadPoolExecutor:
    """A new pool for one engine's calls (``Engine(threads=...)``), bounded to ``ENGINE_THREADS``."""
    return ThreadPoolExecutor(max_workers=ENGINE_THREADS, thread_name_prefix="engine")


class AsyncEngine:
    """An :class:`~raptor_engine.engine.Engine` for coroutines: the same operations, awaited.
    Errors are the engine's own (``RaptorError`` and its kinds), raised where awaited."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine  # the synchronous engine, for what needs no thread (settings)

    async def run(self, work: Callable[[Engine], T]) -> T:
        """``work(engine)`` on the engine's threads: several blocking calls that belong together
        (an upload stored, a tree's outline read)."""
        return await self.engine.in_threads(work, self.engine)

    async def finish(self, timeout_s: float) -> None:
        """Lets the engine calls in flight (an upload being stored) end, for ``timeout_s`` at
        most, and takes no more: for the end of the process. Nothing to wait for when the
        engine runs on the loop's default executor (which the loop itself waits for)."""
        threads = self.engine.threads
        if threads is None:
            return
        ended = threading.Event()

        def shut_down() -> None:
            threads.shutdown(wait=True)
            ended.set()

        # A daemon thread of its own: a call stuck past the timeout must not hold the process.
        threading.Thread(target=shut_down, name="engine-finish", daemon=True).start()
        if not await asyncio.to_thread(ended.wait, timeout_s):
            log.warning("engine calls still running %.1f s after the stop are cut off", timeout_s)

    async def answer(self, key: ChannelKey, question: str) -> Answer:
        return await self.engine.answer(key, question)

    @property
    def streams_answers(self) -> bool:
        return self.engine.streams_answers

    async def answer_stream(self, key: ChannelKey, question: str) -> AnswerStream:
        """See ``Engine.answer_stream``: the retrieval runs on the engine's threads."""
        return await self.engine.answer_stream(key, question)

    async def rebuild(self, key: ChannelKey, progress: ProgressCallback | None = None,
                      force: bool = False) -> BuildReport:
        return await self.engine.rebuild(key, progress, force)

    async def sources(self, key: ChannelKey) -> list[Source]:
        return await self.engine.in_threads(self.engine.sources, key)

    async def stats(self, key: ChannelKey) -> TreeStats:
        return await self.engine.in_threads(self.engine.stats, key)

    async def unchanged_since(self, key: ChannelKey) -> int:
        return await self.engine.in_threads(self.engine.unchanged_since, key)

    async def node(self, key: ChannelKey, node_id: str) -> NodeView:
        return await self.engine.in_threads(self.engine.node, key, node_id)

    async def forget(self, key: ChannelKey, reference: str) -> Source:
        return await self.engine.in_threads(self.engine.forget, key, reference)

    async def keep_answer(self, key: ChannelKey, answer_id: str, question: str, answer: Answer, asked_by: str,
                          keep: int, thread: str = "") -> None:
        await self.engine.in_threads(self.engine.keep_answer, key, answer_id, question, answer, asked_by, keep, thread)

    async def vote(self, key: ChannelKey, answer_id: str, voter: str, up: bool) -> AnswerRecord:
        return await self.engine.in_threads(self.engine.vote, key, answer_id, voter, up)

    async def channels(self) -> list[ChannelKey]:
        return await self.engine.in_threads(self.engine.channels)

    async def notes(self, key: ChannelKey) -> dict[str, str]:
        return await self.engine.in_threads(self.engine.notes, key)

    async def set_note(self, key: ChannelKey, name: str, value: str | None) -> None:
        await self.engine.in_threads(self.engine.set_note, key, name, value)
