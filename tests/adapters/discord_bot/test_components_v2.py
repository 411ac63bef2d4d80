"""An answer as one Components v2 message, and today's embeds when Discord refuses that (issue 30,
point 7): the real discord.py client against the Discord stand-in.

The message shapes are Discord's (see ``testkit/discord_limits.py``, its Components v2 section, for
where they come from): the flag ``IS_COMPONENTS_V2`` (1 << 15), no content nor embeds, a container
of text displays, action rows of buttons, 4,000 characters and 40 components at most. The stand-in
checks those, and refuses every Components v2 message with a 400 when ``refuses_components_v2`` is
set, as an API without them would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.discord_bot import layout, render
from bot.neutral import CitationKind, CitationView, Reply, ReplyKind
from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine
from testkit.discord_api import IS_COMPONENTS_V2, V2_TEXT_LIMIT, layout_custom_ids, layout_text
from testkit.openai_stub import OpenAIStub, running_stub
from tests.adapters.discord_bot import test_discord_streaming as streaming
from tests.adapters.discord_bot.conftest import World, run_world
from tests.conftest import SAMPLE

QUESTION = "What does the on-call engineer do?"


@pytest.fixture
def streaming_model() -> Iterator[OpenAIStub]:
    """A language model that streams its answer, as in ``test_discord_streaming``."""
    with running_stub(answer_text=streaming.ANSWER, tokens_per_s=30.0) as server:
        yield server


async def add_handbook(world: World) -> None:
    general = world.channel("general")
    attachment = world.fake.add_file(general, "handbook.md", SAMPLE.read_bytes(), "text/markdown")
    await world.mention("general", "", attachments=[attachment])
    await world.bot_posts(general, 1)


def is_v2(message: dict[str, Any]) -> bool:
    return bool(message["flags"] & IS_COMPONENTS_V2)


def assert_one_message_answer(message: dict[str, Any]) -> None:
    """The answer, its sources and its 👍/👎 in one Components v2 message, within Discord's limits."""
    assert is_v2(message) and not message["content"] and not message["embeds"], message
    text = layout_text(message)
    assert "### Sources" in text and "[1] " in text, text
    assert len(text) <= V2_TEXT_LIMIT
    ids = layout_custom_ids(message)
    assert any(i.startswith("raptor:vote:up:") for i in ids) and any(i.startswith("raptor:vote:down:") for i in ids)


def test_a_mention_is_answered_in_one_components_v2_message_whose_buttons_work(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        general = world.channel("general")
        await add_handbook(world)
        await world.mention("general", QUESTION)
        (_, answer) = await world.bot_posts(general, 2)
        assert_one_message_answer(answer)
        assert "pager" in layout_text(answer).lower(), answer
        up = next(i for i in layout_custom_ids(answer) if i.startswith("raptor:vote:up:"))
        pressed = await world.fake.click(answer, world.alice, up)
        await world.fake.wait_for(lambda: pressed.callback_type is not None)
        assert pressed.callback_type == 6, pressed  # read from the v2 message's custom id: a silent 👍 acknowledged

    run_world(engine, tmp_path, body, components_v2=True)


def test_refused_components_v2_falls_back_to_embeds(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        world.fake.refuses_components_v2 = True
        general = world.channel("general")
        await add_handbook(world)
        await world.mention("general", QUESTION)
        (_, answer) = await world.bot_posts(general, 2)
        assert not is_v2(answer) and answer["embeds"][1]["title"] == "Sources", answer
        refused = [c for c in world.fake.calls_to("POST", rf"^/channels/{general}/messages$")
                   if c.status == 400]
        assert len(refused) == 1 and refused[0].body["flags"] & IS_COMPONENTS_V2, refused

        asked = await world.slash("general", "ask", {"question": QUESTION})
        (follow_up,) = await world.replies(asked)
        assert not is_v2(follow_up) and follow_up["embeds"][0]["description"], follow_up

    run_world(engine, tmp_path, body, components_v2=True)


def test_a_slash_ask_is_answered_in_one_components_v2_follow_up(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        await add_handbook(world)
        asked = await world.slash("general", "ask", {"question": QUESTION})
        (follow_up,) = await world.replies(asked)
        assert_one_message_answer(follow_up)

    run_world(engine, tmp_path, body, components_v2=True)


def test_a_streamed_answer_is_finished_as_one_components_v2_message(
        streaming_model: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        general = world.channel("general")
        await world.mention("general", QUESTION)
        await world.fake.wait_for(lambda: any(is_v2(m) for m in world.fake.bot_messages(general)), 30)
        (answer,) = world.fake.bot_messages(general)  # the draft, edited into the finished answer
        assert_one_message_answer(answer)
        assert "pager" in layout_text(answer)

    streaming.run(streaming_model, embedder, tmp_path, body, components_v2=True)


def test_an_answer_over_4000_characters_keeps_today_form() -> None:
    citation = CitationView(1, CitationKind.SUMMARY, 1, "n" * 12, "Handbook", "https://x.test/h", "a quote")
    short = Reply(ReplyKind.ANSWER, "The pager goes round weekly [1].", citations=(citation,), answer_id="a1")
    view = layout.answer_layout(short)
    assert view is not None and view.total_children_count <= layout.COMPONENTS_LIMIT
    long = Reply(ReplyKind.ANSWER, "word " * (V2_TEXT_LIMIT // 5), citations=(citation,), answer_id="a1")
    assert layout.answer_layout(long) is None
    assert render.render_reply(long)[0].embeds  # today's form takes it
