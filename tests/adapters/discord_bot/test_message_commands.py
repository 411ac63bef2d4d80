"""Discord's message commands, "Add to channel knowledge" and "Ask about this message", run by the
real discord.py client against the Discord stand-in (issue 30, point 6).

The interaction is Discord's MESSAGE command shape (``type`` 2, ``data.type`` 3, ``data.target_id``,
the message under ``data.resolved.messages``: see ``testkit.discord_api.message_command_data`` for
where it comes from). In every test the stand-in's own copy of the target message is blanked, as
Discord's REST API gives it to a bot without the Message Content intent, and the tests check that
nothing fetched it: the commands work from the interaction's resolved message alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.discord_bot.message_commands import (
    ADD_TO_KNOWLEDGE,
    ANSWERS_NOT_SOURCES_TEXT,
    ASK_ABOUT_MESSAGE,
    NOTHING_TO_ASK_TEXT,
)
from raptor_engine.engine import Engine
from testkit.discord_api import EPHEMERAL, MESSAGE_COMMAND, Interaction, message_text
from tests.adapters.discord_bot.conftest import World, run_world

FREEZE_NOTE = "Deploys are frozen on Fridays after noon, so that nobody is paged over the weekend."


async def unread_message(world: World, channel: str, text: str, who: dict[str, Any] | None = None,
                         attachments: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A message posted earlier (no event reaches the bot now): the payload Discord resolves for a
    message command, while the stand-in keeps its text blanked, as a fetch without the intent gives it."""
    member = who or world.alice
    stored = await world.fake.post(world.channel(channel), member["user"], text, member,
                                   attachments=attachments or [], dispatch=False)
    resolved = dict(stored)
    stored["content"] = ""
    return resolved


async def run_menu(world: World, message: dict[str, Any], name: str, who: dict[str, Any] | None = None,
                   count: int = 1) -> list[dict[str, Any]]:
    """Runs the message command ``name`` on ``message``; returns the replies once ``count`` are shown."""
    interaction: Interaction = await world.fake.message_command(message, who or world.alice, name)
    replies = await world.replies(interaction, count)
    assert interaction.callback_type == 5, interaction  # deferred at once, within Discord's 3 s
    assert not world.fake.calls_to("GET", rf"/messages/{message['id']}$"), "the message was fetched"
    return replies


def test_both_message_commands_are_registered_with_discord(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        await world.fake.wait_for(lambda: world.fake.commands)
        menus = {c["name"]: c for c in world.fake.commands if c.get("type") == MESSAGE_COMMAND}
        assert set(menus) == {ADD_TO_KNOWLEDGE, ASK_ABOUT_MESSAGE}, world.fake.commands

    run_world(engine, tmp_path, body)


def test_add_to_channel_knowledge_makes_the_message_a_source_then_ask_answers_from_it(
        engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        general = world.channel("general")
        note = await unread_message(world, "general", FREEZE_NOTE, who=world.mod)
        (added,) = await run_menu(world, note, ADD_TO_KNOWLEDGE)
        assert message_text(added).startswith("Added “Mod: Deploys are frozen on Fridays"), added
        assert not added["flags"] & EPHEMERAL  # the channel sees what became its knowledge
        (source,) = world.engine.sources(world.key("general"))
        assert source.external_id == f"{general}/{note['id']}/text", source
        assert source.link.endswith(f"/{general}/{note['id']}"), source.link

        question = await unread_message(world, "general", "Can I deploy on Friday afternoon?")
        (answer,) = await run_menu(world, question, ASK_ABOUT_MESSAGE)
        assert "Fridays" in message_text(answer), answer

        # A later pins update does not take the added text for an unpinned message.
        posted = len(world.fake.bot_messages(general))
        other = await world.fake.post(general, world.alice["user"], "Lunch is at one.", world.alice)
        await world.fake.pin(general, other["id"])
        await world.bot_posts(general, posted + 1)
        assert {s.external_id for s in world.engine.sources(world.key("general"))} == {
            f"{general}/{note['id']}/text", f"{general}/{other['id']}"}

    run_world(engine, tmp_path, body)


def test_add_takes_the_message_files_which_follow_the_message_edits_and_deletion(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        general = world.channel("general")
        attachment = world.fake.add_file(general, "freeze.md", f"# Freeze\n\n{FREEZE_NOTE}\n".encode(), "text/markdown")
        note = await unread_message(world, "general", "The freeze rules, see the file.", attachments=[attachment])
        await run_menu(world, note, ADD_TO_KNOWLEDGE, count=2)
        held = {s.external_id for s in world.engine.sources(world.key("general"))}
        assert held == {f"{general}/{note['id']}/{attachment['id']}", f"{general}/{note['id']}/text"}, held

        # Its author takes the file out of the message: the file's source goes, the text's stays.
        await world.fake.remove_attachment(general, note["id"], attachment["id"])
        await world.fake.wait_for(lambda: len(world.engine.sources(world.key("general"))) == 1)
        (kept,) = world.engine.sources(world.key("general"))
        assert kept.external_id == f"{general}/{note['id']}/text", kept

        await world.fake.delete_message(general, note["id"])
        await world.fake.wait_for(lambda: not world.engine.sources(world.key("general")))

    run_world(engine, tmp_path, body)


def test_add_is_held_by_the_person_upload_limit_but_not_a_channel_admin(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        first = await unread_message(world, "general", FREEZE_NOTE)
        second = await unread_message(world, "general", "On-call hands over on Mondays at ten.")
        await run_menu(world, first, ADD_TO_KNOWLEDGE)
        (refused,) = await run_menu(world, second, ADD_TO_KNOWLEDGE)
        assert refused["flags"] & EPHEMERAL and "in the last hour" in message_text(refused), refused
        assert len(world.engine.sources(world.key("general"))) == 1

        (added,) = await run_menu(world, second, ADD_TO_KNOWLEDGE, who=world.mod)  # Manage Messages
        assert message_text(added).startswith("Added “"), added
        assert len(world.engine.sources(world.key("general"))) == 2

    run_world(engine, tmp_path, body, bot_settings={"rate_limits": {"uploads_per_user_per_hour": 1}})


def test_the_bot_answers_are_no_knowledge_and_an_empty_message_has_nothing_to_ask(
        engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        general = world.channel("general")
        await world.mention("general", "help")
        (bot_message, *_) = await world.bot_posts(general, 1)
        (refused,) = await run_menu(world, bot_message, ADD_TO_KNOWLEDGE)
        assert refused["flags"] & EPHEMERAL and message_text(refused) == ANSWERS_NOT_SOURCES_TEXT
        empty = await unread_message(world, "general", "")
        (nothing,) = await run_menu(world, empty, ASK_ABOUT_MESSAGE)
        assert nothing["flags"] & EPHEMERAL and message_text(nothing) == NOTHING_TO_ASK_TEXT
        assert not world.engine.sources(world.key("general"))

    run_world(engine, tmp_path, body)
