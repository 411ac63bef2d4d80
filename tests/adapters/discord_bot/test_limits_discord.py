"""Limits on Discord that hold across channels (issue 28, point 7), end to end.

Real components, as in ``test_client.py``: discord.py against the Discord stand-in, the
Assistant on the test's engine. A person's question and upload allowances are counted per
person and guild, not per channel; a pin is no admin action (Discord's Pin Messages
permission is not Manage Messages), so it counts against the uploads allowance; an edit
of a pinned source counts against its editor's.
"""

from __future__ import annotations

from pathlib import Path

from raptor_engine.engine import Engine
from testkit.discord_api import message_text
from tests.adapters.discord_bot.conftest import World, run_world

NOTE = "Deploys are frozen on Fridays after noon, so that nobody is paged over the weekend."
LUNCH = "Lunch is served at one in the small kitchen on the third floor."


def test_a_persons_question_allowance_holds_across_the_guilds_channels(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        general, library = world.channel("general"), world.channel("library")
        await world.mention("general", "What does the on-call engineer do?")
        (first,) = await world.bot_posts(general, 1)
        assert "asked" not in message_text(first), first
        await world.mention("library", "And who approves a deploy?")  # another channel, same guild
        (refused,) = await world.bot_posts(library, 1)
        assert "You have asked 1 question in the last minute" in message_text(refused), refused

    run_world(engine, tmp_path, body, bot_settings={"rate_limits": {"questions_per_user_per_minute": 1}})


def test_a_pin_is_no_admin_action_and_counts_against_the_uploads_allowance(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general, library, alice = world.fake, world.channel("general"), world.channel("library"), world.alice
        note = await fake.post(general, alice["user"], NOTE, alice)
        await fake.pin(general, note["id"])
        (added,) = await world.bot_posts(general, 1)
        assert added["content"].startswith("Added"), added
        lunch = await fake.post(library, alice["user"], LUNCH, alice)
        await fake.pin(library, lunch["id"])  # another channel of the guild: the same allowance
        (refused,) = await world.bot_posts(library, 1)
        assert "you have added 1 file or pin in the last hour" in refused["content"], refused
        assert world.engine.sources(world.key("library")) == []

    run_world(engine, tmp_path, body, bot_settings={"rate_limits": {"uploads_per_user_per_hour": 1}})


def test_an_edit_that_rewrites_a_pinned_source_counts_against_its_editor(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general, alice = world.fake, world.channel("general"), world.alice
        note = await fake.post(general, alice["user"], NOTE, alice)
        await fake.pin(general, note["id"])  # the guild's pin allowance, not Alice's
        await world.bot_posts(general, 1)
        await fake.edit(general, note["id"], NOTE.replace("Fridays", "Thursdays"))  # Alice's one for the hour
        (_, updated) = await world.bot_posts(general, 2)
        assert updated["content"].startswith("Updated"), updated
        await fake.edit(general, note["id"], NOTE.replace("Fridays", "Mondays"))
        (_, _, refused) = await world.bot_posts(general, 3)
        assert "you have added 1 file or pin in the last hour" in refused["content"], refused
        (source,) = world.engine.sources(world.key("general"))
        assert "Thursdays" in source.title  # the refused edit changed nothing

    run_world(engine, tmp_path, body, bot_settings={"rate_limits": {"uploads_per_user_per_hour": 1}})
