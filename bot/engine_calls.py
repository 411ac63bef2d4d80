"""The thread boundary between the chat side and the engine, in one place.

The engine's API is synchronous: it is a plain library, and the command line and the
benchmarks call it directly. Only ``answer`` and ``rebuild`` are coroutines, and they run
their blocking work on threads of their own. The chat side runs on one event loop, which
must never wait on Chroma or the model; it reaches the engine through :class:`AsyncEngine`,
whose methods run each blocking call in a worker thread. Nothing else in ``bot`` hands
engine work to a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from raptor_engine import Answer, BuildReport, ChannelKey, NodeView, Source, TreeStats

if TYPE_CHECKING:
    from raptor_engine import AnswerRecord, AnswerStream, Engine, ProgressCallback

T = TypeVar("T")


class AsyncEngine:
    """An :class:`~raptor_engine.engine.Engine` for coroutines: the same operations, awaited.
    Errors are the engine's own (``RaptorError`` and its kinds), raised where awaited."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine  # the synchronous engine, for what needs no thread (settings)

    async def run(self, work: Callable[[Engine], T]) -> T:
        """``work(engine)`` in a worker thread: several blocking calls that belong together
        (an upload stored, a tree's outline read)."""
        return await asyncio.to_thread(work, self.engine)

    async def answer(self, key: ChannelKey, question: str) -> Answer:
        return await self.engine.answer(key, question)

    @property
    def streams_answers(self) -> bool:
        return self.engine.streams_answers

    async def answer_stream(self, key: ChannelKey, question: str) -> AnswerStream:
        """See ``Engine.answer_stream``: the retrieval runs in a thread of the engine's own."""
        return await self.engine.answer_stream(key, question)

    async def rebuild(self, key: ChannelKey, progress: ProgressCallback | None = None) -> BuildReport:
        return await self.engine.rebuild(key, progress)

    async def sources(self, key: ChannelKey) -> list[Source]:
        return await asyncio.to_thread(self.engine.sources, key)

    async def stats(self, key: ChannelKey) -> TreeStats:
        return await asyncio.to_thread(self.engine.stats, key)

    async def node(self, key: ChannelKey, node_id: str) -> NodeView:
        return await asyncio.to_thread(self.engine.node, key, node_id)

    async def forget(self, key: ChannelKey, reference: str) -> Source:
        return await asyncio.to_thread(self.engine.forget, key, reference)

    async def keep_answer(self, key: ChannelKey, answer_id: str, question: str, answer: Answer, asked_by: str,
                          keep: int, thread: str = "") -> None:
        await asyncio.to_thread(self.engine.keep_answer, key, answer_id, question, answer, asked_by, keep, thread)

    async def vote(self, key: ChannelKey, answer_id: str, voter: str, up: bool) -> AnswerRecord:
        return await asyncio.to_thread(self.engine.vote, key, answer_id, voter, up)

    async def store_reachable(self) -> bool:
        return await asyncio.to_thread(self.engine.store_reachable)

    async def channels(self) -> list[ChannelKey]:
        return await asyncio.to_thread(self.engine.channels)

    async def notes(self, key: ChannelKey) -> dict[str, str]:
        return await asyncio.to_thread(self.engine.notes, key)

    async def set_note(self, key: ChannelKey, name: str, value: str | None) -> None:
        await asyncio.to_thread(self.engine.set_note, key, name, value)
