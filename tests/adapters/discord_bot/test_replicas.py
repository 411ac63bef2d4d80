"""Several front-ends on Discord: every gateway connection of the bot receives every event,
so each message, interaction and pin change must be handled by one front-end only (the
first to claim it in the bot's delivery ledger); and the courier through which the bot
posts what a worker process produced (a rebuild's progress and result).

Real components, as in ``test_client.py``: discord.py against the Discord stand-in, the
Assistant on the test's engine. Two front-ends are two Assistants sharing one ledger,
each with its own discord.py client connected to the one stand-in, which then sends every
gateway event on both connections, as Discord does.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import pytest

from adapters.discord_bot.client import DiscordClient, run_discord
from adapters.discord_bot.translate import Place
from bot.config import BotConfig, Config, DiscordConfig
from bot.coordination.deliveries import DeliveryLedger, FrontEndShare, LocalLedger, SharedLedger
from bot.coordination.link import RedisLink
from bot.deploy_config import CoordinationConfig
from bot.engine_calls import AsyncEngine
from bot.neutral import Reply, ReplyAddress, ReplyKind
from bot.runtime import Assistant
from raptor_engine.engine import Engine
from testkit.cluster import COORDINATION_SECRET
from testkit.discord_api import FakeDiscord, message_text
from testkit.valkey import ValkeyProcess
from tests.adapters.discord_bot.conftest import ADMIN_ID, World, make_world_fake, run_world
from tests.adapters.recording import recorded

QUESTION = "What does the on-call engineer do?"
NOTE = "Deploys are frozen on Fridays after noon, so that nobody is paged over the weekend."




async def quiet(world_fake: FakeDiscord, seconds: float = 0.3) -> None:
    """Lets events still on their way (a duplicate being dropped) arrive and settle."""
    await asyncio.sleep(seconds)


def remember_dispatches(fake: FakeDiscord) -> tuple[list[tuple[str, Any]], Callable[[str, Any], Awaitable[float]]]:
    """Every gateway event the stand-in dispatches from now on, as ``(event, data)``, in order,
    and the stand-in's own dispatch, which delivers one again (a duplicate) without recording it."""
    sent: list[tuple[str, Any]] = []
    dispatch = fake.dispatch

    async def remembering(event: str, data: Any) -> float:
        sent.append((event, data))
        return await dispatch(event, data)

    fake.dispatch = remembering  # type: ignore[method-assign]
    return sent, dispatch


def callbacks(fake: FakeDiscord, interaction_id: str) -> list[Any]:
    return fake.calls_to("POST", rf"^/interactions/{interaction_id}/")


# -- one front-end ---------------------------------------------------------------------------


def test_a_message_or_interaction_delivered_twice_is_answered_once(engine: Engine, tmp_path: Path) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        events = recorded(world.bot)
        sent, dispatch = remember_dispatches(fake)

        question = await world.mention("general", QUESTION)
        await world.bot_posts(general, 1)
        [(kind, payload)] = [(k, d) for k, d in sent if k == "MESSAGE_CREATE" and d["id"] == question["id"]]
        await dispatch(kind, payload)  # the same message again
        await world.mention("general", "help")  # after the duplicate: its answer means it was seen
        await world.bot_posts(general, 2)
        await quiet(fake)
        answers = fake.bot_messages(general)
        assert len(answers) == 2 and "ask QUESTION" in message_text(answers[1]), answers
        assert [type(e).__name__ for e in events] == ["Question", "Command"]

        interaction = await world.slash("general", "status")
        await world.replies(interaction)
        [payload] = [d for k, d in sent if k == "INTERACTION_CREATE" and d["id"] == interaction.id]
        await dispatch("INTERACTION_CREATE", payload)  # the same slash command again
        await quiet(fake)
        assert len(callbacks(fake, interaction.id)) == 1 and len(interaction.messages) == 1
        assert [type(e).__name__ for e in events] == ["Question", "Command", "Command"]

    run_world(engine, tmp_path, body)


def test_the_courier_posts_to_the_channel_or_thread_named(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(world: World) -> None:
        fake, general = world.fake, world.channel("general")
        courier = await fake.wait_for(lambda: world.bot.couriers.get("discord"))
        root = await fake.post(general, world.alice["user"], "Rebuild please", world.alice, dispatch=False)
        thread = await fake.start_thread(general, root, "rebuild", world.alice["user"])

        await courier(ReplyAddress(world.key("general")))(Reply(ReplyKind.PROGRESS, "Summarising layer 1 of 3"))
        await courier(ReplyAddress(world.key("general"), thread["id"]))(Reply(ReplyKind.INFO, "The tree is rebuilt."))
        [progress] = fake.bot_messages(general)
        assert progress["content"] == "⏳ Summarising layer 1 of 3" and not progress.get("message_reference")
        [done] = fake.bot_messages(thread["id"])
        assert done["content"] == "The tree is rebuilt."

        # A DM is addressed by its own channel.
        dm = fake.add_dm(world.alice["user"])
        await courier(ReplyAddress(Place(None, int(dm)).key))(Reply(ReplyKind.INFO, "Rebuilt."))
        assert [m["content"] for m in fake.bot_messages(dm)] == ["Rebuilt."]

        # A channel Discord does not know, or an id that is none: logged, never raised.
        with caplog.at_level(logging.WARNING):
            await courier(ReplyAddress(world.key("general"), "999"))(Reply(ReplyKind.INFO, "Lost."))
            await courier(ReplyAddress(world.key("general"), "not-an-id"))(Reply(ReplyKind.INFO, "Lost."))
        assert any("999" in r.getMessage() for r in caplog.records)
        assert any("not a Discord channel id" in r.getMessage() for r in caplog.records)

    run_world(engine, tmp_path, body)


# -- two front-ends -----------------------------------------------------------------------------


@asynccontextmanager
async def two_front_ends(engine: Engine, tmp_path: Path,
                         ledgers: tuple[DeliveryLedger, DeliveryLedger] | None = None
                         ) -> AsyncIterator[tuple[World, World]]:
    """Two Assistants sharing one delivery ledger (or each with its own of ``ledgers``), each
    with a client connected to the one stand-in, which sends every gateway event on every
    connection (as Discord does)."""
    fake, guild, other, people = make_world_fake()
    await fake.start()

    async def to_every_connection(event: str, data: Any) -> float:
        fake._sequence += 1
        frame = json.dumps({"op": 0, "t": event, "s": fake._sequence, "d": data})
        sent = time.perf_counter()
        for socket in list(fake._sockets):
            await socket.send_str(frame)
        return sent

    fake.dispatch = to_every_connection  # type: ignore[method-assign]
    settings = DiscordConfig.model_validate(
        {"token": "fake-token", "api_base_url": fake.base_url, "gateway_url": fake.gateway_url})
    shared = LocalLedger()
    worlds: list[World] = []
    try:
        for number, name in enumerate(("one", "two")):
            config = Config(data_dir=tmp_path / name, discord=settings, bot=BotConfig(admins=[ADMIN_ID]))
            bot = Assistant(config, AsyncEngine(engine), deliveries=ledgers[number] if ledgers else shared)
            await bot.start(warm_up=False)
            clients: list[DiscordClient] = []
            task = asyncio.create_task(run_discord(bot, settings, guild_ready_timeout=0.05, on_client=clients.append))
            await fake.wait_for(lambda: clients)  # noqa: B023 (awaited before the next round)
            await asyncio.wait_for(clients[0].wait_until_ready(), 10)
            await fake.wait_for(lambda: "discord" in bot.couriers)  # noqa: B023
            worlds.append(World(fake, bot, clients[0], guild, other, people["alice"], people["mod"], people["admin"],
                                people["robot"], task))
        yield worlds[0], worlds[1]
    finally:
        for world in reversed(worlds):  # the last to set discord.py's endpoints restores them first
            world.task.cancel()
            with suppress(asyncio.CancelledError):
                await world.task
            await world.bot.stop()
        await fake.stop()


def test_two_front_ends_handle_each_event_once(engine: Engine, tmp_path: Path) -> None:
    async def session() -> None:
        async with two_front_ends(engine, tmp_path) as (one, two):
            fake, general = one.fake, one.channel("general")
            assert len(fake._sockets) == 2
            events = [recorded(one.bot), recorded(two.bot)]

            def handled() -> list[str]:
                return sorted(type(e).__name__ for found in events for e in found)

            await one.mention("general", QUESTION)
            await one.bot_posts(general, 1)
            await one.mention("general", "help")
            await one.bot_posts(general, 2)
            await quiet(fake)
            assert len(fake.bot_messages(general)) == 2 and handled() == ["Command", "Question"]

            interaction = await one.slash("general", "status")
            await one.replies(interaction)
            await quiet(fake)
            assert len(callbacks(fake, interaction.id)) == 1 and len(interaction.messages) == 1
            assert handled() == ["Command", "Command", "Question"]

            # Pins: each change once, a message pinned again (and unpinned again) included.
            note = await fake.post(general, one.alice["user"], NOTE, one.alice, dispatch=False)
            before = len(fake.bot_messages(general))
            for round_ in range(2):
                await fake.pin(general, note["id"])
                await fake.wait_for(lambda: [m for m in fake.bot_messages(general) if m["content"].startswith("Added")]
                                    [round_:])  # noqa: B023
                await fake.unpin(general, note["id"])
                await fake.wait_for(lambda: [m for m in fake.bot_messages(general)
                                             if m["content"].startswith("Removed")][round_:])  # noqa: B023
                await quiet(fake)
                posted = [m["content"].split(" ", 1)[0] for m in fake.bot_messages(general)][before:]
                assert posted == ["Added", "Removed"] * (round_ + 1), posted
            assert handled().count("Pin") == 2 and handled().count("Unpin") == 2
            assert not [c for c in fake.calls if c.status >= 400]

    asyncio.run(session())


def test_with_redis_down_each_message_is_answered_by_the_one_front_end_owning_it(engine: Engine,
                                                                               tmp_path: Path) -> None:
    """Each front-end's ledger is the one a deployment gives it (Redis, its place among the two
    front-ends), and the Valkey server is stopped: every message still gets one answer."""
    valkey = ValkeyProcess(directory=tmp_path / "valkey").start()
    url = valkey.url
    valkey.stop()

    def ledger(index: int) -> SharedLedger:
        settings = CoordinationConfig.model_validate({"redis_url": url, "secret": COORDINATION_SECRET,
                                                      "connect_timeout_s": 0.2, "front_end_index": index,
                                                      "front_ends": 2})
        return SharedLedger(RedisLink(settings), settings.event_ttl_s, FrontEndShare(index, 2))

    async def session() -> None:
        async with two_front_ends(engine, tmp_path, (ledger(0), ledger(1))) as (one, two):
            fake, general = one.fake, one.channel("general")
            events = [recorded(one.bot), recorded(two.bot)]
            asked = [await one.mention("general", "help") for _ in range(8)]
            await one.bot_posts(general, len(asked))
            await quiet(fake, 1.0)
            answered_to = [m.get("message_reference", {}).get("message_id") for m in fake.bot_messages(general)]
            assert sorted(answered_to) == sorted(m["id"] for m in asked), answered_to  # each once
            owned_by_one = [FrontEndShare(0, 2).owns(f"discord:message:{m['id']}") for m in asked]
            assert [len(events[0]), len(events[1])] == [owned_by_one.count(True), owned_by_one.count(False)]

    asyncio.run(session())
