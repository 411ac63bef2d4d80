"""Watching the Discord gateway and the event loop, end to end: the real discord.py client
(``run_discord``) against the stand-in Discord, whose gateway can go silent (open, but no
heartbeat ACK and no event any more), and the loop watchdog on a really blocked loop.

The stand-in asks for a heartbeat every :data:`HEARTBEAT_MS` and the bot gives up on a silent
gateway after :data:`TIMEOUT_S`, so a scenario takes seconds; bounds are generous.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.discord_bot.client import DiscordClient, run_discord
from adapters.discord_bot.lifecycle import loop_block_s
from adapters.loop_watchdog import LoopWatchdog
from bot.config import Config, DiscordConfig
from bot.engine_calls import AsyncEngine
from bot.observability.metrics import Metrics
from bot.runtime import Assistant
from raptor_engine.engine import Engine
from testkit.discord_api import FakeDiscord
from tests.adapters.discord_bot.conftest import make_world_fake

HEARTBEAT_MS = 250
TIMEOUT_S = 3.0  # discord.heartbeat_timeout_s: twelve heartbeats; the loop watchdog's threshold is a quarter


@dataclass
class Gateway:
    fake: FakeDiscord
    bot: Assistant
    client: DiscordClient
    general: str
    alice: dict[str, Any]


@asynccontextmanager
async def connected(engine: Engine, tmp_path: Path) -> AsyncIterator[Gateway]:
    fake, guild, _, people = make_world_fake()
    fake.heartbeat_interval_ms = HEARTBEAT_MS
    await fake.start()
    discord = DiscordConfig(token="fake-token", api_base_url=fake.base_url, gateway_url=fake.gateway_url,
                            heartbeat_timeout_s=TIMEOUT_S)
    bot = Assistant(Config(data_dir=tmp_path / "data", discord=discord), AsyncEngine(engine))
    await bot.start(warm_up=False)
    clients: list[DiscordClient] = []
    task = asyncio.create_task(run_discord(bot, discord, guild_ready_timeout=0.05, on_client=clients.append))
    try:
        await fake.wait_for(lambda: clients and clients[0].is_ready(), timeout=15)
        yield Gateway(fake, bot, clients[0], fake.channel_id(guild, "general"), people["alice"])
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
        await bot.stop()
        await fake.stop()


def reconnects(bot: Assistant, reason: str = "gateway") -> float:
    value = bot.metrics.registry.get_sample_value("raptor_reconnects_total", {"platform": "discord", "reason": reason})
    return value or 0.0


def loop_blocks(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("raptor_loop_blocks_total") or 0.0


async def mention_is_answered(gateway: Gateway) -> None:
    before = len(gateway.fake.bot_messages(gateway.general))
    await gateway.fake.post(gateway.general, gateway.alice["user"], "What does the on-call engineer do?",
                            gateway.alice, mention_bot=True)
    await gateway.fake.wait_for(lambda: len(gateway.fake.bot_messages(gateway.general)) > before, timeout=15)


def test_a_silent_gateway_is_dropped_and_the_next_mention_answered(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def session() -> None:
        async with connected(engine, tmp_path) as gateway:
            # Idle but alive (ACKs keep coming): nobody talks for longer than the timeout, nothing is dropped.
            await asyncio.sleep(1.5 * TIMEOUT_S)
            assert gateway.fake.connections == 1 and reconnects(gateway.bot) == 0

            gateway.fake.go_silent()
            went_silent = time.monotonic()
            await gateway.fake.wait_for(lambda: gateway.fake.resumes == 1, timeout=6 * TIMEOUT_S)
            took = time.monotonic() - went_silent
            # discord.py gives up once nothing came for the timeout (less the last ACK's age).
            assert TIMEOUT_S - 0.5 <= took < 3 * TIMEOUT_S, took
            assert gateway.fake.connections == 2 and len(gateway.fake.identifies) == 1
            assert reconnects(gateway.bot) == 1

            await mention_is_answered(gateway)
            assert gateway.fake.connections == 2 and reconnects(gateway.bot) == 1

    with caplog.at_level(logging.INFO, logger="adapters.discord_bot.lifecycle"):
        asyncio.run(session())
    logged = [r.getMessage() for r in caplog.records if r.name == "adapters.discord_bot.lifecycle"]
    assert sum("lost the Discord gateway connection" in line for line in logged) == 1, logged
    assert any(line.startswith("back on the Discord gateway after") and "resumed" in line for line in logged), logged


def test_a_blocked_loop_is_reported_while_it_lasts_without_losing_the_gateway(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    threshold = loop_block_s(DiscordConfig(heartbeat_timeout_s=TIMEOUT_S))
    assert threshold == TIMEOUT_S / 4

    def block_the_loop() -> None:
        time.sleep(2 * threshold)  # a synchronous call on the loop, as a bug would make

    async def session() -> None:
        async with connected(engine, tmp_path) as gateway:
            block_the_loop()
            await asyncio.sleep(4 * threshold)  # the loop runs again, and says so
            assert loop_blocks(gateway.bot.metrics) == 1
            assert gateway.fake.connections == 1 and reconnects(gateway.bot) == 0
            await mention_is_answered(gateway)

    with caplog.at_level(logging.INFO, logger="adapters.loop_watchdog"):
        asyncio.run(session())
    warnings = [r.getMessage() for r in caplog.records if r.name == "adapters.loop_watchdog"]
    [blocked] = [w for w in warnings if "has been blocked" in w]
    assert "block_the_loop" in blocked, blocked  # the stack names the culprit
    assert any("runs again after being blocked" in w for w in warnings), warnings


def test_one_loop_watchdog_per_loop_counts_a_block_once() -> None:
    """Slack and Discord in one process both ask for the watchdog: one thread, one count."""
    metrics = Metrics()

    async def session() -> None:
        first = LoopWatchdog.acquire(metrics, 0.2)
        second = LoopWatchdog.acquire(metrics, 0.2)
        assert first is second
        watchers = [t for t in threading.enumerate() if t.name == "loop-watchdog" and t.is_alive()]
        time.sleep(0.6)
        await asyncio.sleep(0.2)
        assert loop_blocks(metrics) == 1
        first.release()
        second.release()
        for watcher in watchers:
            watcher.join(timeout=2)
        assert not any(watcher.is_alive() for watcher in watchers)
        time.sleep(0.6)  # not watched any more: nothing counted
        await asyncio.sleep(0.1)
        assert loop_blocks(metrics) == 1

    asyncio.run(session())
