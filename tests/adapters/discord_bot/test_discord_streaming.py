"""Streamed answers on Discord: the real discord.py client, the real engine, a language model that streams.

The stand-in Discord (``testkit/discord_api.py``) edits messages as Discord does and
limits edits to 5 per 5 s in a channel (a 429 that discord.py waits out); the engine
answers through the real ``openai`` client from ``testkit/openai_stub.py`` at 30
tokens a second. The first words come as the reply, the edits are paced, and the
last edit is the non-streamed answer exactly as it would have been posted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.discord_bot import render
from adapters.discord_bot.sending import EDIT_EVERY_S
from bot import replies
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine
from raptor_engine.llm import LLMAnswerer, LLMClient, LLMSettings
from raptor_engine.store import ChromaStore
from raptor_engine.summarizing import ExtractiveSummarizer
from testkit.discord_api import Call
from testkit.openai_stub import Behaviour, OpenAIStub, running_stub
from tests.adapters.discord_bot.conftest import World, discord_world
from tests.conftest import SAMPLE

QUESTION = "What does the on-call engineer do?"
ANSWER = ("The on-call engineer carries the pager for a week [2] and watches the alerts channel [1]. "
          "They are the first responder for incidents and hand over in a fifteen-minute meeting [99]. "
          "If a page is not acknowledged within ten minutes, it escalates to the secondary [1][2].\n\n"
          "Every page is also printed on paper and filed by the finance department.")  # supported by nothing
FIRST_WORDS_S = 1.5


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with running_stub(answer_text=ANSWER, tokens_per_s=30.0) as server:
        yield server


def run(stub: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path, body: Any, **discord: Any) -> None:
    """Runs ``body`` in a world whose engine answers through the stub (``discord``: DiscordConfig keys)."""
    settings = LLMSettings(base_url=stub.base_url, model="stub-model", timeout_s=5.0, max_retries=1)

    async def session(client: LLMClient) -> None:
        counter = embedder.token_counter()
        engine = Engine(ChromaStore.embedded(tmp_path / "chroma"), embedder, counter, ExtractiveSummarizer(counter),
                        LLMAnswerer(client, settings))
        async with discord_world(engine, tmp_path, **discord) as world:
            await asyncio.to_thread(engine.ingest_bytes, world.key("general"), SAMPLE.read_bytes(),
                                    "aurora-handbook.md", "https://x.test/f", "Alice", "F0")
            await body(world)

    with LLMClient(settings) as client:
        asyncio.run(session(client))


def edits(world: World, channel: str) -> list[Call]:
    return world.fake.calls_to("PATCH", rf"^/channels/{channel}/messages/\d+$")


def test_an_answer_is_posted_at_its_first_words_and_edited_until_complete(
        stub: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        asked_at = time.perf_counter()  # the clock of the stand-in's call records
        question = await world.mention("general", QUESTION)
        [draft] = await world.bot_posts(general, 1)
        await fake.wait_for(lambda: any(c.body and c.body.get("embeds") for c in edits(world, general)), 20)

        [posted] = fake.calls_to("POST", rf"^/channels/{general}/messages$")
        assert str(posted.body["message_reference"]["message_id"]) == question["id"]
        assert ANSWER.startswith(posted.body["content"]) and len(posted.body["content"]) < 100  # the first words only
        accepted = [c for c in edits(world, general) if c.status == 200]
        assert len(accepted) >= 2  # it grew while the model wrote, then became the answer
        growing = [c for c in accepted if not c.body.get("embeds")]
        assert all(b.at - a.at >= EDIT_EVERY_S - 0.05 for a, b in zip([posted, *growing], growing, strict=False))
        assert posted.at - asked_at < FIRST_WORDS_S

        # The message now holds the non-streamed answer, rendered exactly.
        answer = await world.engine.answer(world.key("general"), QUESTION)
        [kept] = world.engine.answers(world.key("general"))
        [expected] = render.render_reply(replies.answer_reply(answer, answer_id=kept.answer_id))
        shown = fake.bot_messages(general)
        assert len(shown) == 1 and shown[0]["id"] == draft["id"]
        assert (shown[0]["content"] or None) == (expected.content or None)
        assert shown[0]["embeds"] == [e.to_dict() for e in expected.embeds]
        assert shown[0]["components"]  # the feedback buttons came with the last edit
        # The sentence no passage supports is marked, with the note at the end.
        texts = [shown[0]["content"] or "", *(e.get("description") or "" for e in shown[0]["embeds"])]
        assert any("filed by the finance department. ⚠" in t for t in texts), texts
        assert any(replies.UNSUPPORTED_NOTE in t for t in texts), texts

    run(stub, embedder, tmp_path, body)


def test_a_broken_stream_ends_in_a_clear_message(stub: OpenAIStub, embedder: SentenceTransformerEmbedder,
                                                  tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        stub.script(Behaviour.broken(after_tokens=40))
        await world.mention("general", QUESTION)
        await world.bot_posts(general, 1)
        await fake.wait_for(lambda: "broke off" in (fake.bot_messages(general)[0]["content"] or ""), 20)
        [shown] = fake.bot_messages(general)
        assert "carries the pager" not in shown["content"]

    run(stub, embedder, tmp_path, body)


def test_a_slash_command_answer_streams_in_the_interaction_reply(
        stub: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake = world.fake
        asked = await world.slash("general", "ask", {"question": QUESTION})
        await fake.wait_for(lambda: asked.messages and not asked.loading, 20)
        first = asked.messages[0]
        assert ANSWER.startswith(message_text_of(first)) and len(message_text_of(first)) < 100  # the first words
        await fake.wait_for(lambda: asked.messages[0].get("embeds"), 20)
        growing = fake.calls_to("PATCH", rf"^/webhooks/\d+/{asked.token}/messages/")
        assert len(growing) >= 2, growing  # edited while the model wrote, then the finished answer

        answer = await world.engine.answer(world.key("general"), QUESTION)
        [kept] = world.engine.answers(world.key("general"))
        [expected] = render.render_reply(replies.answer_reply(answer, answer_id=kept.answer_id))
        [shown] = asked.messages
        assert (shown["content"] or None) == (expected.content or None)
        assert shown["embeds"] == [e.to_dict() for e in expected.embeds]

    run(stub, embedder, tmp_path, body)


def message_text_of(message: dict[str, Any]) -> str:
    return str(message.get("content") or "")


def test_a_question_where_there_is_no_material_streams_nothing_and_says_what_to_add(
        stub: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    """With a model that streams, a mention and ``/raptor ask`` in a channel holding no source
    (secret; the handbook is in general) get ``NO_MATERIAL``, posted once and never edited:
    no draft was shown, and the model was not asked."""
    async def body(world: World) -> None:
        fake, secret = world.fake, world.channel("secret")
        await world.mention("secret", QUESTION)
        [mentioned] = await world.bot_posts(secret, 1)
        asked = await world.slash("secret", "ask", {"question": QUESTION})
        [slashed] = await world.replies(asked)
        for reply in (mentioned, slashed):
            assert message_text_of(reply) == replies.NO_MATERIAL and not reply.get("embeds"), reply
        assert not edits(world, secret) and not fake.calls_to("PATCH", rf"^/webhooks/\d+/{asked.token}/messages/")
        assert stub.requests == []

    run(stub, embedder, tmp_path, body)
