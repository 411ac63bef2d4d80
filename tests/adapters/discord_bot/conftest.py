"""The Discord world of a test: the stand-in Discord, a started Assistant on the test's engine, and
the real discord.py client run by ``run_discord``, all on one event loop (``asyncio.run``).

The world has two guilds. "Test Guild" has the channels general, library (a
library channel) and secret (left out of ``discord.channels`` by tests that
restrict channels), the members Alice, Mod (holds a role with Manage Messages)
and Robot (another bot); "Other Guild" has one channel and Alice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.discord_bot.client import DiscordClient, run_discord
from adapters.discord_bot.translate import Place
from bot.config import BotConfig, Config, DiscordConfig
from bot.engine_calls import AsyncEngine
from bot.runtime import Assistant
from raptor_engine.engine import Engine
from raptor_engine.types import ChannelKey
from testkit.discord_api import (
    MANAGE_MESSAGES,
    FakeDiscord,
    Interaction,
    member_payload,
    role_payload,
    snowflake,
    user_payload,
)

log = logging.getLogger(__name__)

ADMIN_ID = "900000000000000001"  # listed in bot.admins; no Manage Messages
READY_TIMEOUT_S = 10.0


@dataclass
class World:
    """Everything a Discord test talks to."""

    fake: FakeDiscord
    bot: Assistant
    client: DiscordClient
    guild: dict[str, Any]
    other_guild: dict[str, Any]
    alice: dict[str, Any]
    mod: dict[str, Any]
    admin: dict[str, Any]
    robot: dict[str, Any]
    task: asyncio.Task[None]

    @property
    def engine(self) -> Engine:
        return self.bot.engine

    def channel(self, name: str) -> str:
        guild = self.other_guild if name == "elsewhere" else self.guild
        return self.fake.channel_id(guild, name)

    def key(self, name: str) -> ChannelKey:
        guild = self.other_guild if name == "elsewhere" else self.guild
        return Place(int(guild["id"]), int(self.channel(name))).key

    async def mention(self, channel: str, text: str, who: dict[str, Any] | None = None,
                      attachments: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        member = who or self.alice
        return await self.fake.post(self.channel(channel) if not channel.isdigit() else channel, member["user"], text,
                                    member, mention_bot=True, attachments=attachments or [])

    async def slash(self, channel: str, subcommand: str, options: dict[str, str] | None = None,
                    who: dict[str, Any] | None = None, command: str = "raptor") -> Interaction:
        channel_id = self.channel(channel) if not channel.isdigit() else channel
        return await self.fake.slash(channel_id, who or self.alice, subcommand, options, command)

    async def replies(self, interaction: Interaction, count: int = 1, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Waits until the interaction has ``count`` visible messages and nothing is loading."""
        await self.fake.wait_for(lambda: len(interaction.messages) >= count and not interaction.loading, timeout)
        return interaction.messages

    async def bot_posts(self, channel_id: str, count: int, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Waits until the bot has posted ``count`` messages in the channel; returns them."""
        await self.fake.wait_for(lambda: len(self.fake.bot_messages(channel_id)) >= count, timeout)
        return self.fake.bot_messages(channel_id)


def make_world_fake() -> tuple[FakeDiscord, dict[str, Any], dict[str, Any], dict[str, dict[str, Any]]]:
    fake = FakeDiscord()
    moderators = role_payload(snowflake(), "Moderators", MANAGE_MESSAGES, position=1)
    people = {
        "alice": member_payload(user_payload(snowflake(), "Alice")),
        "mod": member_payload(user_payload(snowflake(), "Mod"), roles=[moderators["id"]]),
        "admin": member_payload(user_payload(ADMIN_ID, "Admin")),
        "robot": member_payload(user_payload(snowflake(), "Robot", bot=True)),
    }
    guild = fake.add_guild("Test Guild", ["general", "library", "secret"], list(people.values()), [moderators])
    other = fake.add_guild("Other Guild", ["elsewhere"], [people["alice"]])
    return fake, guild, other, people


@asynccontextmanager
async def discord_world(engine: Engine, tmp_path: Path, restrict: bool = False, retention_days: float = 7.0,
                        bot_settings: dict[str, Any] | None = None, **discord: Any) -> AsyncIterator[World]:
    """A started world. ``restrict`` limits the bot to Test Guild and its general and library
    channels; ``retention_days`` is ``bot.retention.removed_channel_days``; ``bot_settings`` sets
    ``BotConfig`` keys besides ``admins`` and ``retention``; ``discord`` overrides
    other ``DiscordConfig`` keys (e.g. ``reply_in_thread``)."""
    fake, guild, other, people = make_world_fake()
    await fake.start()
    library = fake.channel_id(guild, "library")
    settings: dict[str, Any] = {
        "token": "fake-token",
        "api_base_url": fake.base_url,  # without /api/v10: run_discord adds it
        "gateway_url": fake.gateway_url,
        "library_channels": [library],
        "components_v2": False,  # answers as embeds, as these tests read them; test_components_v2 turns it on
        **discord,
    }
    if restrict:
        settings["guilds"] = [guild["id"]]
        settings["channels"] = [fake.channel_id(guild, "general"), library]
    config = Config(data_dir=tmp_path / "data", discord=DiscordConfig(**settings), bot=BotConfig.model_validate(
        {"admins": [ADMIN_ID], "retention": {"removed_channel_days": retention_days}, **(bot_settings or {})}))
    bot = Assistant(config, AsyncEngine(engine))
    await bot.start(warm_up=False)
    clients: list[DiscordClient] = []
    task = asyncio.create_task(run_discord(bot, config.discord, guild_ready_timeout=0.05, on_client=clients.append))
    try:
        client = await _ready(task, clients)
        yield World(fake, bot, client, guild, other, people["alice"], people["mod"], people["admin"],
                    people["robot"], task)
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await bot.stop()
        await fake.stop()


async def _ready(task: asyncio.Task[None], clients: list[DiscordClient]) -> DiscordClient:
    """The client once discord.py says it is ready; a failure inside ``run_discord`` is raised."""
    async def ready() -> DiscordClient:
        while not clients:
            await asyncio.sleep(0.01)
        await clients[0].wait_until_ready()
        return clients[0]

    waiter = asyncio.ensure_future(ready())
    done, _ = await asyncio.wait({waiter, task}, timeout=READY_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
    if waiter in done:
        return waiter.result()
    waiter.cancel()
    if task in done:
        task.result()  # raises what stopped the client
    raise AssertionError("the Discord client did not become ready")


def run_world(engine: Engine, tmp_path: Path, body: Callable[[World], Awaitable[None]], **options: Any) -> None:
    """Runs ``body`` in a fresh world on a fresh event loop."""

    async def session() -> None:
        async with discord_world(engine, tmp_path, **options) as world:
            await body(world)

    asyncio.run(session())
