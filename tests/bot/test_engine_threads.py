"""Engine calls run on the engine's own bounded pool, an answer's blocking steps included
(issue 28 point 2: they used to share the event loop's default executor with everything
else, readiness probes among them)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from bot.engine_calls import AsyncEngine, engine_threads
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine
from raptor_engine.store import ChromaStore
from raptor_engine.types import ChannelKey
from tests.conftest import SAMPLE, RecordingEmbedder, make_engine

KEY = ChannelKey("slack", "T1", "CTHREADS")


def test_engine_calls_and_an_answers_steps_run_on_the_engines_own_threads(
        embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    noted = RecordingEmbedder(embedder)
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
