"""Streamed answers in the console: printed as the model writes them, then their citations.

Real components: the console channel, the bot, the engine on embedded Chroma answering
through the real ``openai`` client from ``testkit/openai_stub.py`` (streaming at 30
tokens a second). What is printed in pieces must be exactly what the console prints for
the finished answer; offline answers are printed whole.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from adapters.console.app import ConsoleChannel
from adapters.console.translate import render_reply
from bot import replies
from bot.config import Config, ConsoleConfig
from bot.engine_calls import AsyncEngine
from bot.runtime import Assistant
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine
from raptor_engine.llm import LLMAnswerer, LLMClient, LLMSettings
from raptor_engine.store import ChromaStore
from raptor_engine.summarizing import ExtractiveSummarizer
from raptor_engine.types import ChannelKey
from testkit.openai_stub import Behaviour, OpenAIStub, running_stub
from tests.conftest import SAMPLE, make_engine

QUESTION = "What does the on-call engineer do?"
ANSWER = ("The on-call engineer carries the pager for a week [2] and watches the alerts channel [1]. "
          "If a page is not acknowledged within ten minutes, it escalates to the secondary [99][1].")


class Terminal:
    """Whole messages (``write``) and pieces (``partial``), with when each piece came."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.pieces: list[tuple[float, str]] = []

    def write(self, text: str) -> None:
        self.messages.append(text)

    def partial(self, text: str) -> None:
        self.pieces.append((time.monotonic(), text))

    def streamed(self) -> str:
        return "".join(piece for _, piece in self.pieces)


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with running_stub(answer_text=ANSWER, tokens_per_s=30.0) as server:
        yield server


def llm_engine(embedder: SentenceTransformerEmbedder, tmp_path: Path, client: LLMClient) -> Engine:
    counter = embedder.token_counter()
    return Engine(ChromaStore.embedded(tmp_path / "chroma"), embedder, counter, ExtractiveSummarizer(counter),
                  LLMAnswerer(client, client.settings))


def ask(engine: Engine, tmp_path: Path, terminal: Terminal, question: str = QUESTION, streamed: bool = True) -> str:
    """Asks ``question`` at a console with the handbook (printing answers as they are written
    when ``streamed``); the finished answer's printed form (printed as it was written, a
    terminal cannot mark its unsupported sentences in place: the note after it quotes them)."""
    config = Config(data_dir=tmp_path / "data", console=ConsoleConfig(sample=False))

    async def session() -> str:
        bot = Assistant(config, AsyncEngine(engine))
        await bot.start(warm_up=False)
        try:
            console = ConsoleChannel(bot, terminal.write, write_partial=terminal.partial if streamed else None)
            key = ChannelKey("console", config.console.workspace, config.console.channel)
            await asyncio.to_thread(engine.ingest_bytes, key, SAMPLE.read_bytes(), "aurora-handbook.md", "", "me")
            await console.handle_line(question)
            answer = await engine.answer(key, question)
            [kept] = engine.answers(key) or [None]
            reply = replies.answer_reply(answer, answer_id=kept.answer_id if kept else "")
            if streamed and reply.written and not reply.text.startswith(reply.written):
                reply = replace(reply, text=reply.written)  # marked inside what was printed: the note names them
            return render_reply(reply)
        finally:
            await bot.stop()

    return asyncio.run(session())


def test_an_answer_is_printed_as_it_is_written(stub: OpenAIStub, embedder: SentenceTransformerEmbedder,
                                               tmp_path: Path) -> None:
    terminal = Terminal()
    with LLMClient(LLMSettings(base_url=stub.base_url, model="m", timeout_s=5.0)) as client:
        expected = ask(llm_engine(embedder, tmp_path, client), tmp_path, terminal)
    assert len(terminal.pieces) > 10  # word by word, not at the end
    assert terminal.pieces[-1][0] - terminal.pieces[0][0] > 1.0  # over the seconds the model wrote
    assert terminal.streamed() == expected + "\n"  # the text, then its citations, as printed whole
    assert "[99]" not in expected and "\n[1] " in expected and "\n[2] " in expected
    assert terminal.messages == []


def test_a_broken_stream_ends_on_a_line_of_its_own(stub: OpenAIStub, embedder: SentenceTransformerEmbedder,
                                                    tmp_path: Path) -> None:
    stub.script(Behaviour.broken(after_tokens=12))
    terminal = Terminal()
    with LLMClient(LLMSettings(base_url=stub.base_url, model="m", timeout_s=5.0, max_retries=0)) as client:
        ask(llm_engine(embedder, tmp_path, client), tmp_path, terminal)
    assert ANSWER.startswith(terminal.streamed().rstrip("\n")) and terminal.streamed().endswith("\n")
    [error] = terminal.messages
    assert error.startswith("! ") and "broke off" in error


def test_offline_answers_are_printed_whole(embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    terminal = Terminal()
    ask(make_engine(ChromaStore.embedded(tmp_path / "chroma"), embedder), tmp_path, terminal)
    assert terminal.pieces == []
    [answer] = terminal.messages
    assert "[1]" in answer


def test_a_question_where_there_is_no_material_prints_no_pieces(stub: OpenAIStub, embedder: SentenceTransformerEmbedder,
                                                                tmp_path: Path) -> None:
    """With a model that streams, a question at a console holding no source prints exactly
    ``NO_MATERIAL``, as one whole line: nothing streamed, the model not asked."""
    terminal = Terminal()
    config = Config(data_dir=tmp_path / "data", console=ConsoleConfig(sample=False))

    async def session(engine: Engine) -> None:
        bot = Assistant(config, AsyncEngine(engine))
        await bot.start(warm_up=False)
        try:
            console = ConsoleChannel(bot, terminal.write, write_partial=terminal.partial)
            await console.handle_line(QUESTION)
        finally:
            await bot.stop()

    with LLMClient(LLMSettings(base_url=stub.base_url, model="m", timeout_s=5.0)) as client:
        asyncio.run(session(llm_engine(embedder, tmp_path, client)))
    assert terminal.messages == [replies.NO_MATERIAL] and terminal.pieces == []
    assert stub.requests == []
