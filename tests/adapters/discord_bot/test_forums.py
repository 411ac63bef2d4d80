"""Discord forum channels served as help desks (issue 30, point 5): the real discord.py client
against the Discord stand-in on 127.0.0.1 (see ``conftest.py`` for the world every test gets).

A new post in a served forum is answered once in the post, even delivered twice; later messages
in the post are questions without a mention; a post marked solved (the "Mark solved" button, by
its author or an admin only, or the forum's Solved tag) becomes a THREAD source of the forum's
tree holding its question and accepted answer, linked to the post.

Payload shapes (built in ``testkit/discord_forums.py``): the forum channel (type 15,
``available_tags``), the post's THREAD_CREATE with ``newly_created``, its opening message (the
thread's own id, MESSAGE_CREATE in the thread) and THREAD_UPDATE with ``applied_tags``, from
Discord's channel resource documentation (docs/resources/channel: GUILD_FORUM, the forum tag
object, "the thread starter message ID is the same ID as the thread") and discord.py's types
(discord/types/channel.py ForumChannel and ForumTag, discord/types/threads.py Thread.applied_tags,
discord/types/gateway.py ThreadCreateEvent.newly_created; discord.py dispatches
``on_thread_update(before, after)`` with ``Thread.applied_tags`` read from the parent forum's tags).
The "Mark solved" press is an INTERACTION_CREATE of type 3 (a component) as the other button tests send.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from adapters.discord_bot.translate import Place
from bot.commands import may_mark_solved, post_question
from bot.config import BotConfig, DiscordConfig
from bot.neutral import Person, Question
from raptor_engine.engine import Engine
from raptor_engine.types import ChannelKey, Document, SourceKind
from testkit.discord_api import (
    EPHEMERAL,
    create_forum,
    custom_ids,
    forum_tag_id,
    member_payload,
    message_text,
    open_forum_post,
    snowflake,
    tag_forum_post,
    user_payload,
)
from tests.adapters.discord_bot.conftest import ADMIN_ID, World, run_world
from tests.adapters.discord_bot.test_replicas import quiet, remember_dispatches
from tests.adapters.recording import recorded

HANDBOOK = ("The on-call engineer answers pages within fifteen minutes, keeps the incident log, "
            "and hands over to the next engineer at nine every Monday morning.")
TITLE = "On-call duties"
OPENING = "What does the on-call engineer do when paged?"
FOLLOW_UP = "And when is the hand-over to the next engineer?"
SOLVED_PREFIX = "raptor:solved:"


def forum_key(world: World, forum_id: str) -> ChannelKey:
    return Place(int(world.guild["id"]), int(forum_id)).key


async def served_forum(world: World, forum_id: str, tags: tuple[str, ...] = ()) -> dict[str, Any]:
    """The forum the configuration names, created now, with the handbook as its material."""
    forum = await create_forum(world.fake, world.guild["id"], "help-desk", tags, forum_id=forum_id)
    await world.fake.wait_for(lambda: world.client.get_channel(int(forum_id)) is not None)
    world.engine.ingest(forum_key(world, forum_id), Document(HANDBOOK, "On-call handbook", SourceKind.FILE))
    return forum


def answers(world: World, post_id: str) -> list[dict[str, Any]]:
    """The bot's answers in the post (messages with embeds; its offers to mark solved have none)."""
    return [m for m in world.fake.bot_messages(post_id) if m["embeds"]]


def offers(world: World, post_id: str) -> list[dict[str, Any]]:
    return [m for m in world.fake.bot_messages(post_id) if any(c.startswith(SOLVED_PREFIX) for c in custom_ids(m))]


def solved_sources(world: World, forum_id: str, post_id: str) -> list[Any]:
    return world.engine.sources(forum_key(world, forum_id), external_id=f"solved:{post_id}")


def source_text(world: World, forum_id: str, source_id: str) -> str:
    return world.engine.store.channel(forum_key(world, forum_id)).source_text(source_id)


# -- a new post, and follow-ups ------------------------------------------------------------------


def test_a_new_post_delivered_twice_is_answered_once_and_follow_ups_need_no_mention(
        engine: Engine, tmp_path: Path) -> None:
    forum_id = snowflake()

    async def body(world: World) -> None:
        fake = world.fake
        await served_forum(world, forum_id)
        events = recorded(world.bot)
        sent, dispatch = remember_dispatches(fake)
        post, opening = await open_forum_post(fake, forum_id, world.alice, TITLE, OPENING)
        await fake.wait_for(lambda: answers(world, post["id"]) and offers(world, post["id"]))
        for event, data in list(sent):  # the post's THREAD_CREATE and its opening message, delivered again
            await dispatch(event, data)
        await fake.post(post["id"], world.alice["user"], FOLLOW_UP, world.alice)  # no mention
        await fake.wait_for(lambda: len(answers(world, post["id"])) >= 2)
        await quiet(fake)

        first, second = answers(world, post["id"])  # one answer each, none for the copies
        assert first["message_reference"]["message_id"] == opening["id"]
        assert "fifteen minutes" in message_text(first) or "incident log" in message_text(first)
        questions = [e for e in events if isinstance(e, Question)]
        assert [q.text for q in questions] == [f"{TITLE}\n{OPENING}", FOLLOW_UP]
        assert {q.channel for q in questions} == {forum_key(world, forum_id)}  # the forum's tree
        assert all(q.thread == post["id"] for q in questions)
        assert OPENING in "\n".join(questions[1].context)  # the post so far, as context
        assert not any("mark it solved" in c for c in questions[1].context)  # the offers are not
        assert len(offers(world, post["id"])) == 2

    run_world(engine, tmp_path, body, forums=[forum_id])


def test_a_forum_not_configured_is_left_alone(engine: Engine, tmp_path: Path) -> None:
    forum_id = snowflake()

    async def body(world: World) -> None:
        await served_forum(world, forum_id)
        post, _ = await open_forum_post(world.fake, forum_id, world.alice, TITLE, OPENING)
        await quiet(world.fake, 0.5)
        assert world.fake.bot_messages(post["id"]) == []

    run_world(engine, tmp_path, body)


# -- marked solved -------------------------------------------------------------------------------


def test_mark_solved_by_someone_else_is_refused_and_by_the_author_keeps_question_and_answer(
        engine: Engine, tmp_path: Path) -> None:
    forum_id = snowflake()
    bob = member_payload(user_payload(snowflake(), "Bob"))  # neither the author nor an admin

    async def body(world: World) -> None:
        fake = world.fake
        await served_forum(world, forum_id)
        post, _ = await open_forum_post(fake, forum_id, world.alice, TITLE, OPENING)
        (offer,) = await fake.wait_for(lambda: offers(world, post["id"]))
        (answer,) = answers(world, post["id"])
        (button,) = [c for c in custom_ids(offer) if c.startswith(SOLVED_PREFIX)]
        (vote,) = [c for c in custom_ids(answer) if c.startswith("raptor:vote:up:")]
        assert button == SOLVED_PREFIX + vote.rsplit(":", 1)[1]  # the answer's own id

        refused = await fake.click(offer, bob, button)
        (refusal,) = await world.replies(refused)
        assert int(refusal["flags"]) & EPHEMERAL and "Only the post's author or an admin" in refusal["content"]
        assert solved_sources(world, forum_id, post["id"]) == []

        accepted = await fake.click(offer, world.alice, button)
        (added,) = await world.replies(accepted)
        assert int(added["flags"]) & EPHEMERAL and added["content"].startswith("Added “Solved: On-call duties”")
        (source,) = solved_sources(world, forum_id, post["id"])
        assert source.kind is SourceKind.THREAD and source.title == f"Solved: {TITLE}"
        assert source.link == f"https://discord.com/channels/{world.guild['id']}/{post['id']}"
        text = source_text(world, forum_id, source.id)
        assert text.startswith(f"Question: {TITLE}\n{OPENING}\n\nAccepted answer: ")
        assert answer["embeds"][0]["description"].split("[")[0].strip()[:40] in text
        assert "Alice" in source.added_by

    run_world(engine, tmp_path, body, forums=[forum_id])


def test_the_solved_tag_keeps_the_latest_answer_once_and_the_post_deleted_takes_it_away(
        engine: Engine, tmp_path: Path) -> None:
    forum_id = snowflake()

    async def body(world: World) -> None:
        fake = world.fake
        forum = await served_forum(world, forum_id, ("Question", "✅ Solved"))
        post, _ = await open_forum_post(fake, forum_id, world.alice, TITLE, OPENING, [forum_tag_id(forum, "Question")])
        await fake.wait_for(lambda: offers(world, post["id"]))
        (answer,) = answers(world, post["id"])
        await tag_forum_post(fake, post["id"], [forum_tag_id(forum, "Question")])  # no Solved tag: nothing
        await quiet(fake)
        assert solved_sources(world, forum_id, post["id"]) == []

        tags = [forum_tag_id(forum, "Question"), forum_tag_id(forum, "✅ Solved")]
        thread = await tag_forum_post(fake, post["id"], tags)
        await fake.wait_for(lambda: [m for m in fake.bot_messages(post["id"]) if m["content"].startswith("Added")])
        await fake.dispatch("THREAD_UPDATE", dict(thread))  # the same update delivered again
        await quiet(fake)
        (source,) = solved_sources(world, forum_id, post["id"])
        assert len([m for m in fake.bot_messages(post["id"]) if m["content"].startswith("Added")]) == 1
        text = source_text(world, forum_id, source.id)
        assert text.startswith(f"Question: {TITLE}\n{OPENING}\n\nAccepted answer (by Raptor): ")
        assert answer["embeds"][0]["description"][:40] in text
        assert "Alice" in source.added_by  # the post's author: Discord lets only them (or moderators) tag it

        await fake.delete_thread(post["id"])
        await fake.wait_for(lambda: not solved_sources(world, forum_id, post["id"]))

    run_world(engine, tmp_path, body, forums=[forum_id])


# -- the rules and the setting -------------------------------------------------------------------


def test_who_may_mark_a_post_solved() -> None:
    config = BotConfig(admins=[ADMIN_ID])
    key = ChannelKey("discord", "1", "2")
    assert may_mark_solved(Person("7", "Alice"), "7", key, config)  # the author
    assert may_mark_solved(Person("8", "Mod", manages_channel=True), "7", key, config)  # Manage Messages
    assert may_mark_solved(Person(ADMIN_ID, "Admin"), "7", key, config)  # bot.admins
    assert not may_mark_solved(Person("9", "Bob"), "7", key, config)
    assert not may_mark_solved(Person("9", "Bob"), "", key, config)  # an unknown author matches nobody


def test_a_post_asks_its_title_and_opening_message() -> None:
    assert post_question("On-call duties", "What does on-call do?") == "On-call duties\nWhat does on-call do?"
    assert post_question("What does on-call do?", "What does on-call do? Thanks") == "What does on-call do? Thanks"
    assert post_question("  Deploys  ", "") == "Deploys"


def test_the_forums_setting_is_validated() -> None:
    assert DiscordConfig(forums=[123, "456"]).forums == ["123", "456"]  # ids quoted or not
    with pytest.raises(ValidationError, match="forums"):
        DiscordConfig(forums=["general"])
    with pytest.raises(ValidationError, match="must also be listed in discord.channels"):
        DiscordConfig(channels=["1"], forums=["2"])
    assert DiscordConfig(channels=["1", "2"], forums=["2"]).forums == ["2"]
