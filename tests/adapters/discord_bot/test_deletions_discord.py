"""Deletions on Discord are followed: the real discord.py client against the stand-in Discord,
with the gateway events Discord sends (MESSAGE_DELETE, MESSAGE_DELETE_BULK, a MESSAGE_UPDATE
that drops an attachment, CHANNEL_DELETE, THREAD_DELETE, GUILD_DELETE), and the text checked
gone from retrieval and from every collection of the store."""

from __future__ import annotations

from pathlib import Path

from raptor_engine.engine import Engine
from raptor_engine.types import ChannelKey
from tests.adapters.discord_bot.conftest import World, run_world
from tests.conftest import traces

SECRET = "The staging password rotates every Tuesday at nine."
KEPT = "Deploys are frozen on Fridays after noon."
DRAFT = "The draft budget allows four new laptops this quarter."


def retrieved(world: World, key: ChannelKey, question: str) -> str:
    return " ".join(hit.node.text for hit in world.engine.retrieve(key, question)).lower()


def gone(world: World, needle: str) -> bool:
    return not traces(world.engine.store, [needle])


def test_deleted_messages_and_removed_attachments_are_forgotten(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, alice = world.fake, world.alice
        general, library = world.channel("general"), world.channel("library")
        library_key = world.key("library")

        # Library channel: each attachment is a source of its own.
        secret = fake.add_file(library, "secret.txt", SECRET.encode())
        kept = fake.add_file(library, "kept.txt", KEPT.encode())
        both = await fake.post(library, alice["user"], "two notes", alice, attachments=[secret, kept])
        draft = await fake.post(library, alice["user"], "a draft", alice,
                                attachments=[fake.add_file(library, "draft.txt", DRAFT.encode())])
        await world.bot_posts(library, 3)
        assert len(world.engine.sources(library_key)) == 3
        assert "tuesday" in retrieved(world, library_key, "When does the staging password rotate?")

        # An edit that takes one attachment out of the message: that file goes, the other stays.
        await fake.remove_attachment(library, both["id"], secret["id"])
        await fake.wait_for(lambda: len(world.engine.sources(library_key)) == 2 and gone(world, "staging password"))
        assert "tuesday" not in retrieved(world, library_key, "When does the staging password rotate?")
        assert gone(world, "staging password"), traces(world.engine.store, ["staging password"])
        assert "fridays" in retrieved(world, library_key, "When are deploys frozen?")

        # Several messages deleted at once (a moderator's bulk delete).
        await fake.delete_messages(library, [draft["id"], both["id"]])
        await fake.wait_for(lambda: library_key not in world.engine.channels() and gone(world, "draft budget"))
        assert gone(world, "draft budget") and gone(world, "deploys are frozen")

        # A pinned message deleted (uncached or not, the raw event counts).
        note = await fake.post(general, alice["user"], SECRET, alice)
        await fake.post(general, alice["user"], KEPT, alice)
        await fake.pin(general, note["id"])
        await world.bot_posts(general, 1)
        other = await fake.post(general, alice["user"], KEPT, alice)
        await fake.pin(general, other["id"])
        await world.bot_posts(general, 2)
        assert "tuesday" in retrieved(world, world.key("general"), "When does the staging password rotate?")
        await fake.delete_message(general, note["id"])
        await fake.wait_for(lambda: len(world.engine.sources(world.key("general"))) == 1
                            and gone(world, "staging password"))
        assert "tuesday" not in retrieved(world, world.key("general"), "When does the staging password rotate?")
        assert gone(world, "staging password"), traces(world.engine.store, ["staging password"])

    run_world(engine, tmp_path, body)


def test_a_deleted_public_thread_takes_its_pins_with_it(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, alice, general = world.fake, world.alice, world.channel("general")
        root = await fake.post(general, alice["user"], "Notes on the release", alice)
        thread = await fake.start_thread(general, root, "release", alice["user"])
        note = await fake.post(thread["id"], alice["user"], SECRET, alice)
        await fake.pin(thread["id"], note["id"])
        await fake.wait_for(lambda: world.engine.sources(world.key("general")))
        kept = await fake.post(general, alice["user"], KEPT, alice)
        await fake.pin(general, kept["id"])
        await fake.wait_for(lambda: len(world.engine.sources(world.key("general"))) == 2)

        await fake.delete_thread(thread["id"])
        await fake.wait_for(lambda: len(world.engine.sources(world.key("general"))) == 1
                            and gone(world, "staging password"))
        assert "fridays" in retrieved(world, world.key("general"), "When are deploys frozen?")

    run_world(engine, tmp_path, body)


def test_a_deleted_channel_and_a_server_that_removed_the_bot_are_forgotten(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, alice = world.fake, world.alice
        for name, text in (("general", SECRET), ("library", DRAFT), ("elsewhere", KEPT)):
            channel = world.channel(name)
            posted = await fake.post(channel, alice["user"], text, alice)
            await fake.pin(channel, posted["id"])
            await world.bot_posts(channel, 1)
        assert world.bot.scheduler.job(world.key("general")) is not None  # type: ignore[attr-defined]

        await fake.delete_channel(world.channel("general"))
        await fake.wait_for(lambda: world.key("general") not in world.engine.channels()
                            and gone(world, "staging password"))
        assert world.bot.scheduler.job(world.key("general")) is None  # type: ignore[attr-defined]
        assert world.engine.sources(world.key("library")) and world.engine.sources(world.key("elsewhere"))

        await fake.remove_bot(str(world.guild["id"]))  # kicked from Test Guild: every channel of it goes
        await fake.wait_for(lambda: world.key("library") not in world.engine.channels() and gone(world, "draft budget"))
        assert world.engine.sources(world.key("elsewhere"))  # another server: left alone

    run_world(engine, tmp_path, body, retention_days=0)
