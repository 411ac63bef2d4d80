"""Exact words in material ingested a moment ago are found at once, by every process.

A file's excerpts are searchable by meaning as soon as it is ingested; these
tests check they are searchable by their *words* too (names, codes, error
messages), before any rebuild, on the embedded store and on a `chroma run`
server shared by two processes, and that a forgotten file's words go with it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from raptor_engine import Document
from raptor_engine.store import ChromaStore
from tests.conftest import SAMPLE, make_engine, quality_articles

CODE_SENTENCE = "The zanzibarquill code is 7741."
QUESTION = "What is the zanzibarquill code?"


def long_file() -> str:
    """About 60 kB of story text, the unique sentence last (the issue's 1 MB file, smaller for speed)."""
    return "\n\n".join(quality_articles(3))[:60_000] + "\n\n" + CODE_SENTENCE


def build_channel(engine, channel) -> None:  # type: ignore[no-untyped-def]
    asyncio.run(engine.rebuild(channel))


def top_texts(engine, channel, question: str, n: int = 3) -> list[str]:  # type: ignore[no-untyped-def]
    return [hit.node.text for hit in engine.retrieve(channel, question)[:n]]


@pytest.mark.parametrize("built", [False, True], ids=["before-any-build", "after-a-build"])
def test_a_unique_word_ingested_a_moment_ago_is_in_the_top_three(any_store, embedder, channel, built) -> None:  # type: ignore[no-untyped-def]
    engine = make_engine(any_store, embedder)
    engine.ingest_file(channel, SAMPLE)
    if built:
        build_channel(engine, channel)
        assert engine.retrieve(channel, "Who is on call?")  # the served tree's indexes are in memory now
    engine.ingest(channel, Document(long_file(), "notes.txt"))
    assert any("zanzibarquill" in text for text in top_texts(engine, channel, QUESTION))
    answer = asyncio.run(engine.answer(channel, QUESTION))
    assert answer.found and "7741" in answer.text


def test_a_front_end_finds_the_words_another_process_ingested_and_loses_them_when_forgotten(
    chroma_server, embedder, channel, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    host, port = chroma_server
    engine = make_engine(ChromaStore.remote(host, port), embedder)
    engine.ingest_file(channel, SAMPLE)
    build_channel(engine, channel)
    assert not any("zanzibarquill" in text for text in top_texts(engine, channel, QUESTION))
    notes = tmp_path / "notes.txt"
    notes.write_text(long_file(), encoding="utf-8")
    source_id = _in_another_process(host, port, channel, f"print(engine.ingest_file(key, Path({str(notes)!r})).source.id)")
    assert any("zanzibarquill" in text for text in top_texts(engine, channel, QUESTION))
    _in_another_process(host, port, channel, f"engine.forget(key, {source_id!r})")
    assert not any("zanzibarquill" in hit.node.text for hit in engine.retrieve(channel, QUESTION))


def _in_another_process(host: str, port: int, channel, statement: str) -> str:  # type: ignore[no-untyped-def]
    """Runs ``statement`` in a new Python process with an engine on the same Chroma server
    (``engine`` and the channel's ``key`` defined); returns what it printed."""
    script = textwrap.dedent(f"""
        from pathlib import Path
        from raptor_engine import ChannelKey
        from raptor_engine.store import ChromaStore
        from tests.conftest import make_engine
        from raptor_engine.embedding import SentenceTransformerEmbedder
        engine = make_engine(ChromaStore.remote({host!r}, {port}), SentenceTransformerEmbedder())
        key = ChannelKey({channel.platform!r}, {channel.workspace!r}, {channel.channel!r})
        {statement}
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()
