"""The Socket Mode watchdog end to end: the real slack-bolt app and slack_sdk's aiohttp client
against the stand-in Slack, which can go silent on a live socket (open, answering pings,
delivering nothing and no longer pinging), slow down ``auth.test``, or ask for a refresh.

The watchdog interval is short here (:data:`INTERVAL_S`) and the stand-in pings often, so
each scenario takes a few seconds; time bounds are generous, as the machine may be loaded.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from adapters.slack.app import SlackRunning
from bot.config import BotConfig, Config, RateLimitConfig, SlackConfig
from bot.engine_calls import AsyncEngine
from bot.runtime import Assistant
from raptor_engine.engine import Engine
from testkit.slack_api import BOT_USER, SlackStandIn, app_running, free_port

INTERVAL_S = 2.0
PING_EVERY_S = 0.25  # the stand-in's own pings: several per interval, as Slack's are per minute
ANA = "UANA"
CHANNEL = "C100"

Body = Callable[[SlackStandIn, SlackRunning, Assistant], Awaitable[None]]


def watched_config(slack: SlackStandIn, interval_s: float) -> SlackConfig:
    return SlackConfig.model_validate({
        "bot_token": slack.bot_token, "app_token": slack.app_token, "mode": "socket",
        "api_base_url": slack.base_url, "http_host": "127.0.0.1", "http_port": free_port(),
        "socket_watchdog_s": interval_s,
    })


def run(engine: Engine, tmp_path: Path, body: Body, interval_s: float = INTERVAL_S) -> None:
    async def session() -> None:
        limits = RateLimitConfig(questions_per_user_per_minute=0)
        bot = Assistant(Config(data_dir=tmp_path / "data", bot=BotConfig(rate_limits=limits)), AsyncEngine(engine))
        await bot.start(warm_up=False)
        try:
            async with SlackStandIn() as slack:
                slack.add_user(ANA, "Ana")
                slack.ping_every_s = PING_EVERY_S
                config = watched_config(slack, interval_s)
                async with app_running(bot, slack, "socket", config=config) as running:
                    await body(slack, running, bot)
                    await running.handling.wait_idle()
        finally:
            await bot.stop()

    asyncio.run(session())


def reconnects(bot: Assistant, reason: str) -> float:
    value = bot.metrics.registry.get_sample_value("raptor_reconnects_total", {"platform": "slack", "reason": reason})
    return value or 0.0


async def mention_is_answered(slack: SlackStandIn) -> None:
    asked, deliveries = await slack.user_says(CHANNEL, ANA, f"<@{BOT_USER}> What does the on-call engineer do?")
    assert all(d.status == 200 for d in deliveries), deliveries
    await slack.wait_until(lambda: slack.posts(CHANNEL, asked["ts"]), what="the answer to the mention")


def test_a_silent_session_is_noticed_and_replaced_and_the_next_mention_answered(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        # Idle but alive (Slack's pings keep coming): nobody talks for two intervals, nothing is replaced.
        await asyncio.sleep(2 * INTERVAL_S)
        assert slack.connections == 1 and reconnects(bot, "silent") == 0

        slack.go_silent()
        went_silent = time.monotonic()
        await slack.wait_until(lambda: slack.connections == 2, timeout=6 * INTERVAL_S, what="a new connection")
        took = time.monotonic() - went_silent
        # Noticed once the silence passed the interval (less the last ping's age), well before 3 intervals.
        assert INTERVAL_S - PING_EVERY_S - 0.1 <= took < 3 * INTERVAL_S, took
        await slack.wait_connected()
        assert reconnects(bot, "silent") == 1

        await mention_is_answered(slack)
        assert slack.connections == 2  # one reconnect, not one per check

    with caplog.at_level(logging.INFO, logger="adapters.slack.watchdog"):
        run(engine, tmp_path, body)
    logged = [r.getMessage() for r in caplog.records if r.name == "adapters.slack.watchdog"]
    assert any("nothing from Slack" in line for line in logged), logged
    assert any("reconnected (silent)" in line for line in logged), logged


def test_without_the_watchdog_a_silent_session_stays_silent(engine: Engine, tmp_path: Path) -> None:
    """The control: slack_sdk alone does not notice (its pings are answered), so what the test
    above sees is the watchdog's doing."""
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        slack.go_silent()
        await asyncio.sleep(3 * INTERVAL_S)
        assert slack.connections == 1
        with pytest.raises(TimeoutError):
            await slack.wait_connected(timeout=0.5)

    run(engine, tmp_path, body, interval_s=0)


def test_an_unanswered_auth_test_reconnects_and_a_refused_one_does_not(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        # Refused: Slack answered; a new socket would not fix a token, so none is opened.
        slack.fail("auth.test", "invalid_auth", times=2)
        await slack.wait_until(lambda: len(slack.rejected()) >= 2, timeout=4 * INTERVAL_S, what="two auth.test")
        assert slack.connections == 1

        # No answer within the interval: reconnected.
        slack.latency["auth.test"] = 3 * INTERVAL_S
        await slack.wait_until(lambda: slack.connections >= 2, timeout=4 * INTERVAL_S, what="a new connection")
        slack.latency.clear()
        assert reconnects(bot, "unanswered") >= 1 and reconnects(bot, "silent") == 0
        await slack.wait_connected()
        await mention_is_answered(slack)

    with caplog.at_level(logging.INFO, logger="adapters.slack.watchdog"):
        run(engine, tmp_path, body)
    refusals = [r for r in caplog.records if "auth.test was refused (invalid_auth)" in r.getMessage()]
    assert len(refusals) == 1, "a lasting refusal is logged once"


def test_slack_sdks_own_reconnect_on_slacks_request_is_counted(engine: Engine, tmp_path: Path) -> None:
    async def body(slack: SlackStandIn, running: SlackRunning, bot: Assistant) -> None:
        await slack.deliver_raw_socket('{"type": "disconnect", "reason": "refresh_requested"}')
        await slack.wait_until(lambda: slack.connections == 2, timeout=10, what="slack_sdk's reconnect")
        await slack.wait_until(lambda: reconnects(bot, "refresh") == 1, timeout=2 * INTERVAL_S, what="the count")
        assert reconnects(bot, "dropped") == 0 and reconnects(bot, "silent") == 0
        await mention_is_answered(slack)

    run(engine, tmp_path, body)
