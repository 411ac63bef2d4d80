"""Documents and models never speak in the bot's voice on Discord, end to end: the real discord.py
client against the stand-in Discord, the REST bodies it received checked.

An offline answer quotes a document holding a masked link and Discord's mentions word for
word, and ``/raptor sources`` lists its title (``Accounts @everyone``); a model
(``testkit/openai_stub.py``) writes the same into an answer shown while it is written, as a
reply and as a slash command's follow-up. Every message and edit carries
``allowed_mentions`` allowing no one, and its content and embeds show the mentions inert
(a zero-width space after the ``@``) and the link's address in sight; the link the bot
makes to the cited document stays a link.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from raptor_engine.embedding import SentenceTransformerEmbedder
from raptor_engine.engine import Engine
from testkit.discord_api import Call
from testkit.openai_stub import OpenAIStub
from tests.adapters.discord_bot import test_discord_streaming as streaming
from tests.adapters.discord_bot.conftest import World, run_world
from tests.adapters.untrusted import DISCORD_MENTIONS, DOCUMENT, LINK, QUESTION, SHOWN

BOTS_LINK = re.compile(r"\[open the source\]\(https?://[^\s)]+\)")  # to a cited file or message


def allows_no_one(allowed: dict[str, Any] | None) -> bool:
    """Discord's ``allowed_mentions`` allowing no mention: nothing parsed from the text, no user or
    role listed, and not the author of the message replied to (Discord's default when left out)."""
    return allowed is not None and allowed.get("parse") == [] and not allowed.get("users") \
        and not allowed.get("roles") and not allowed.get("replied_user")


def texts_of(body: dict[str, Any]) -> list[str]:
    """Every text of a message body that Discord renders: content, embed descriptions, fields."""
    texts = [str(body.get("content") or "")]
    for embed in body.get("embeds") or ():
        texts.append(str(embed.get("description") or ""))
        texts += [f"{f.get('name', '')} {f.get('value', '')}" for f in embed.get("fields") or ()]
    return texts


def assert_inert(calls: Iterable[Call]) -> str:
    """Each call allowed no mention and shows no live mention or masked link; their texts joined."""
    shown = []
    for call in calls:
        assert allows_no_one(call.body.get("allowed_mentions")), (call.path, call.body.get("allowed_mentions"))
        for text in texts_of(call.body):
            assert not [m for m in DISCORD_MENTIONS if m in text], text
            assert "](" not in BOTS_LINK.sub("", text), text  # the one link in a message: the bot's own
            shown.append(text)
    return "\n".join(shown)


def test_an_offline_answer_and_a_listing_quoting_a_document_notify_no_one(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        await asyncio.to_thread(engine.ingest_bytes, world.key("general"), DOCUMENT, "accounts.md", LINK, "Ana", "F1")
        await world.mention("general", QUESTION)
        await world.bot_posts(general, 1)
        posted = fake.calls_to("POST", rf"^/channels/{general}/messages$")
        shown = assert_inert(posted)
        assert posted[0].body.get("message_reference")  # still a reply to the question, pinging no one
        assert SHOWN in shown and "@\u200beveryone" in shown and "<@\u200b&234567890123456789>" in shown
        assert f"[open the source]({LINK})" in shown

        listed = await world.slash("general", "sources")
        await world.replies(listed)
        follow_ups = fake.calls_to("POST", rf"^/webhooks/\d+/{listed.token}$")
        assert "Accounts @\u200beveryone" in assert_inert(follow_ups)

    run_world(engine, tmp_path, body)


def test_a_model_answer_shown_while_written_notifies_no_one_in_any_edit(
        untrusted_model: OpenAIStub, embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        await world.mention("general", streaming.QUESTION)
        await world.bot_posts(general, 1)
        await fake.wait_for(lambda: any(c.body and c.body.get("embeds") for c in streaming.edits(world, general)), 20)
        edits = streaming.edits(world, general)
        assert len(edits) >= 3, edits  # the draft grew over several edits, then became the answer
        shown = assert_inert([*fake.calls_to("POST", rf"^/channels/{general}/messages$"), *edits])
        assert SHOWN in shown

        asked = await world.slash("general", "ask", {"question": streaming.QUESTION})
        await fake.wait_for(lambda: asked.messages and asked.messages[0].get("embeds"), 20)
        webhook = [*fake.calls_to("POST", rf"^/webhooks/\d+/{asked.token}$"),
                   *fake.calls_to("PATCH", rf"^/webhooks/\d+/{asked.token}/messages/")]
        assert len(webhook) >= 3, webhook
        assert SHOWN in assert_inert(webhook)

    streaming.run(untrusted_model, embedder, tmp_path, body)
