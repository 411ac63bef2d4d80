"""Engine calls run on the engine's own bounded pool, an answer's blocking steps included
(issue 28 point 2: they used to share the event loop's default executor with everything
else, readiness probes among them)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bot.engine_calls import AsyncEngine, engine_threads
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine
from raptor_engine.store import ChromaStore
from raptor_engine.types import ChannelKey
from tests.conftest import SAMPLE, make_engine

KEY = ChannelKey("slack", "T1", "CTHREADS")


class WhereEmbedded:
    """The session's embedder, noting the thread of every call (a question is embedded in its retrieval)."""

    def __init__(self, embedder: SentenceTransformerEmbedder) -> None:
        self._embedder = embedder
        self.threads: list[str] = []

    @property
    def model_id(self) -> str:
        return self._embedder.model_id

    @property
    def dimension(self) -> int:
        return self._embedder.dimension

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.threads.append(threading.current_thread().name)
        return self._embedder.embed(texts)

    def token_counter(self):  # type: ignore[no-untyped-def]
        return self._embedder.token_counter()


def test_engine_calls_and_an_answers_steps_run_on_the_engines_own_threads(
        embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    noted = WhereEmbedded(embedder)
    engine: Engine = make_engine(ChromaStore.embedded(tmp_path / "chroma"), noted,  # type: ignore[arg-type]
                                 threads=engine_threads())
    engine.ingest_bytes(KEY, SAMPLE.read_bytes(), "aurora-handbook.md", "https://x.test/f", "Ana", "F0")
    calls = AsyncEngine(engine)

    async def session() -> tuple[str, list[str]]:
        noted.threads.clear()
        where = await calls.run(lambda _: threading.current_thread().name)
        await calls.answer(KEY, "What does the on-call engineer do?")
        await calls.sources(KEY)
        return where, list(noted.threads)

    where, embedded_on = asyncio.run(session())
    assert where.startswith("engine")
    assert embedded_on and all(name.startswith("engine") for name in embedded_on), embedded_on
