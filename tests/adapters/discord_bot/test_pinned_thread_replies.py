"""A pinned thread on Discord takes the replies posted after the pin: the real discord.py client
against the Discord stand-in on 127.0.0.1 (see ``conftest.py`` for the world every test gets).

A message that starts a thread and is pinned is one source of kind THREAD (root and replies).
A later message in the thread updates that source, as an edit of the pinned message does,
but quietly: a word from the bot for every reply would be noise (and one in the thread
would make every later message in it a follow-up question). A message in a
thread whose starter is not pinned changes nothing and costs at most one look at the starter.
"""

from __future__ import annotations

import asyncio
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

from adapters.discord_bot.client import DiscordClient, run_discord
from bot.neutral import Pin
from raptor_engine.engine import Engine
from raptor_engine.types import Source, SourceKind
from tests.adapters.discord_bot.conftest import World, _ready, run_world
from tests.adapters.discord_bot.test_replicas import quiet, two_front_ends
from tests.adapters.recording import recorded
from tests.conftest import traces

ROOT = "Incident review of the ledger outage"
CAUSE = "The ledger stopped because the disk of the replica was full."
FIX = "We now alert at eighty percent disk use."
QUESTION = "At what disk use do we alert now?"


async def pinned_thread(world: World, front_ends: int = 1) -> tuple[dict[str, Any], str]:
    """Alice's message in general starts a thread with Mod's reply, then is pinned: the
    bot adds the thread as one source. Returns the root message and the thread's id."""
    fake, general = world.fake, world.channel("general")
    root = await fake.post(general, world.alice["user"], ROOT, world.alice)
    thread = (await fake.start_thread(general, root, "ledger outage", world.alice["user"]))["id"]
    # Handled before the pin, so that no front-end still looking at it then sees the starter pinned.
    await reply_handled(world, thread, CAUSE, world.mod, front_ends)
    await fake.pin(general, root["id"])
    await fake.wait_for(lambda: said(world, "Added"))
    (source,) = thread_sources(world, root)
    assert source.kind is SourceKind.THREAD and CAUSE in source_text(world, source, CAUSE)
    return root, thread


def thread_sources(world: World, root: dict[str, Any]) -> list[Source]:
    general = world.channel("general")
    return world.engine.sources(world.key("general"), external_id=f"{general}/{root['id']}")


def source_text(world: World, source: Source, words: str) -> str:
    """The text of the source's excerpts that a search for ``words`` finds (a thread this
    short is one excerpt)."""
    hits = world.engine.retrieve(world.key("general"), words)
    return "\n".join(hit.node.text for hit in hits if hit.node.layer == 0 and source.id in hit.node.source_ids)


def thread_text(world: World, root: dict[str, Any]) -> str:
    """The text of the pinned thread's one THREAD source ("" while there is not exactly one:
    a new version is stored before the earlier one goes)."""
    threads = [s for s in thread_sources(world, root) if s.kind is SourceKind.THREAD]
    return world.engine.store.channel(world.key("general")).source_text(threads[0].id) if len(threads) == 1 else ""


async def grown(world: World, root: dict[str, Any], words: str) -> None:
    """Waits until the pinned thread's source holds ``words`` (the update is quiet)."""
    await world.fake.wait_for(lambda: words in thread_text(world, root))


def without(text: str, words: str) -> bool:
    """Whether one reading of a thread's text ("" between versions) is there and lacks ``words``:
    read once, as two readings can straddle a new version's arrival."""
    return text != "" and words not in text


def said(world: World, first_word: str) -> list[dict[str, Any]]:
    """The bot's messages in general that start with ``first_word``."""
    return [m for m in world.fake.bot_messages(world.channel("general")) if m["content"].startswith(first_word)]


async def reply_handled(world: World, thread: str, text: str, who: dict[str, Any] | None = None,
                        front_ends: int = 1) -> dict[str, Any]:
    """Posts ``text`` in the thread and waits until each front-end has handled it as far as
    reading the thread's history for a follow-up, which ``on_message`` does after the
    pinned thread's update. Returns the posted message."""
    member = who or world.alice
    posted = await world.fake.post(thread, member["user"], text, member)
    await world.fake.wait_for(lambda: len([c for c in world.fake.calls_to("GET", rf"^/channels/{thread}/messages$")
                                           if c.params.get("before") == posted["id"]]) >= front_ends)
    return posted


def starter_fetches(world: World, root: dict[str, Any]) -> int:
    return len(world.fake.calls_to("GET", rf"^/channels/{world.channel('general')}/messages/{root['id']}$"))


# -- a reply in a pinned thread ------------------------------------------------------------------


def test_a_reply_in_a_pinned_thread_updates_its_source(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        root, thread = await pinned_thread(world)
        events = recorded(world.bot)

        await fake.post(thread, world.alice["user"], FIX, world.alice)
        await grown(world, root, FIX)
        await quiet(fake)
        # Quiet: nothing in the thread (a bot message there would make each later one a
        # follow-up), and nothing in the channel but the pin's "Added".
        assert fake.bot_messages(thread) == []
        assert [m["content"].split(" ", 1)[0] for m in fake.bot_messages(general)] == ["Added"]
        (pin,) = events
        assert isinstance(pin, Pin) and pin.edited and pin.grew and pin.text == ROOT
        assert pin.replies == (f"Mod: {CAUSE}", f"Alice: {FIX}")
        (source,) = thread_sources(world, root)
        assert source.kind is SourceKind.THREAD
        text = source_text(world, source, FIX)
        assert ROOT in text and CAUSE in text and FIX in text, text

        asked = await world.slash("general", "ask", {"question": QUESTION})
        (answer,) = await world.replies(asked)
        assert "eighty percent" in answer["embeds"][0]["description"], answer
        assert "Thread by Alice" in answer["embeds"][1]["fields"][0]["name"], answer

    run_world(engine, tmp_path, body)


def test_an_edited_reply_in_a_pinned_thread_changes_its_source(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake = world.fake
        root, thread = await pinned_thread(world)
        fix = await fake.post(thread, world.alice["user"], FIX, world.alice)
        await grown(world, root, FIX)

        await fake.edit(thread, fix["id"], "We now alert at seventy percent disk use.")
        await grown(world, root, "seventy percent")
        assert FIX not in thread_text(world, root)
        await quiet(fake)
        assert fake.bot_messages(thread) == [] and [m["content"].split(" ", 1)[0]
                                                    for m in fake.bot_messages(world.channel("general"))] == ["Added"]

    run_world(engine, tmp_path, body)


def test_a_reply_deleted_in_a_pinned_thread_leaves_its_source(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake = world.fake
        root, thread = await pinned_thread(world)
        fix = await fake.post(thread, world.alice["user"], FIX, world.alice)
        await grown(world, root, FIX)

        await fake.delete_message(thread, fix["id"])
        await fake.wait_for(lambda: without(thread_text(world, root), FIX))
        text = thread_text(world, root)
        assert ROOT in text and CAUSE in text, text
        assert not traces(world.engine.store, [FIX]), traces(world.engine.store, [FIX])
        await quiet(fake)
        assert fake.bot_messages(thread) == []

    run_world(engine, tmp_path, body)


def test_a_reply_that_changes_nothing_kept_says_nothing(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake = world.fake
        root, thread = await pinned_thread(world)
        (before,) = thread_sources(world, root)
        # Neither a message with no text nor another bot's message is part of the thread's source.
        await fake.post(thread, world.robot["user"], "Beep: build 42 passed.", world.robot)
        await reply_handled(world, thread, "   ")
        await quiet(fake)
        assert said(world, "Updated") == [] and thread_sources(world, root) == [before]

    run_world(engine, tmp_path, body)


# -- threads whose starter is not pinned ----------------------------------------------------------


def test_a_message_in_a_thread_whose_starter_is_not_pinned_changes_nothing(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        chat = await fake.post(general, world.alice["user"], "Lunch plans", world.alice)
        thread = (await fake.start_thread(general, chat, "lunch", world.alice["user"]))["id"]

        # No pins update seen yet: the starter is fetched once to learn it is not pinned.
        await reply_handled(world, thread, FIX)
        await reply_handled(world, thread, "Pizza at one?")
        assert starter_fetches(world, chat) == 1

        # Once the channel's pins are known, nothing is fetched at all.
        note = await fake.post(general, world.alice["user"], "Deploys are frozen on Fridays.", world.alice)
        await fake.pin(general, note["id"])
        await fake.wait_for(lambda: said(world, "Added"))
        other = await fake.post(general, world.mod["user"], "Standup notes", world.mod)
        other_thread = (await fake.start_thread(general, other, "standup", world.mod["user"]))["id"]
        await reply_handled(world, other_thread, FIX)
        await reply_handled(world, thread, "Or sushi?")
        await quiet(fake)
        assert starter_fetches(world, chat) == 1 and starter_fetches(world, other) == 0

        # No source and no word from the bot, in the channel or the threads.
        assert [s.external_id for s in world.engine.sources(world.key("general"))] == [f"{general}/{note['id']}"]
        assert fake.bot_messages(thread) == [] and fake.bot_messages(other_thread) == []
        assert [m["content"].split(" ", 1)[0] for m in fake.bot_messages(general)] == ["Added"]

    run_world(engine, tmp_path, body)


def test_a_private_thread_is_never_looked_into(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        private = (await fake.start_private_thread(general, "pay review", world.alice["user"]))["id"]
        await reply_handled(world, private, FIX)
        assert not fake.calls_to("GET", rf"^/channels/{general}/messages/{private}$")
        assert fake.bot_messages(private) == [] and world.engine.sources(world.key("general")) == []

    run_world(engine, tmp_path, body)


# -- after a restart, and with several front-ends ----------------------------------------------------


def test_after_a_restart_the_starter_tells_that_it_is_pinned(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake = world.fake
        root, thread = await pinned_thread(world)
        restarted = await restart(world)
        try:
            assert restarted.client is not world.client
            await fake.post(thread, world.alice["user"], FIX, world.alice)
            await grown(world, root, FIX)
            (source,) = thread_sources(world, root)
            assert FIX in source_text(world, source, FIX)
            # Known pinned now: later replies fetch the starter only to read it as it is.
            fetched = starter_fetches(world, root)
            await reply_handled(world, thread, "Thanks, that helps.", world.mod)
            await grown(world, root, "Thanks, that helps.")
            assert starter_fetches(world, root) == fetched + 1
        finally:
            restarted.task.cancel()
            with suppress(asyncio.CancelledError):
                await restarted.task

    run_world(engine, tmp_path, body)


async def restart(world: World) -> World:
    """The front-end's client is stopped and a new one connects for the same bot: it knows
    nothing of the channels' pins until the next pins update."""
    world.task.cancel()
    with suppress(asyncio.CancelledError):
        await world.task
    clients: list[DiscordClient] = []
    task = asyncio.create_task(run_discord(world.bot, world.client.settings, guild_ready_timeout=0.05,
                                           on_client=clients.append))
    return replace(world, client=await _ready(task, clients), task=task)


def test_two_front_ends_update_a_pinned_thread_once(engine: Engine, tmp_path: Path) -> None:
    async def session() -> None:
        async with two_front_ends(engine, tmp_path) as (one, two):
            fake = one.fake
            root, thread = await pinned_thread(one, front_ends=2)
            events = [recorded(one.bot), recorded(two.bot)]
            await fake.post(thread, one.alice["user"], FIX, one.alice)
            await grown(one, root, FIX)
            await quiet(fake)
            assert [type(e).__name__ for found in events for e in found] == ["Pin"], events  # one front-end only

    asyncio.run(session())


# -- a pinned thread whose starter carries files --------------------------------------------------


def test_a_reply_updates_the_thread_and_leaves_the_files_of_a_pinned_starter_alone(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        report = fake.add_file(general, "report.txt", b"The replica disk holds two terabytes.")
        root = await fake.post(general, world.alice["user"], ROOT, world.alice, attachments=[report])
        thread = (await fake.start_thread(general, root, "ledger outage", world.alice["user"]))["id"]
        await fake.post(thread, world.mod["user"], CAUSE, world.mod)
        await fake.pin(general, root["id"])
        await fake.wait_for(lambda: len(said(world, "Added")) == 2)
        before = thread_sources(world, root)
        assert len(before) == 2 and {s.kind for s in before} == {SourceKind.FILE, SourceKind.THREAD}

        await fake.post(thread, world.alice["user"], FIX, world.alice)
        await grown(world, root, FIX)
        after = thread_sources(world, root)
        files = [s for s in after if s.kind is SourceKind.FILE]
        assert files == [s for s in before if s.kind is SourceKind.FILE]  # the file stays as it was
        (thread_source,) = [s for s in after if s.kind is SourceKind.THREAD]
        assert FIX in source_text(world, thread_source, FIX)  # the thread took the reply

    run_world(engine, tmp_path, body)
