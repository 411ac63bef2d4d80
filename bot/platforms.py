"""Serving the configured chat platforms (Slack, Discord) from one bot.

Part of the composition root: it alone in ``bot/`` knows the adapters, and
imports them only when their tokens are configured (so neither SDK is loaded
for nothing, and ``bot`` stays usable without ``adapters``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

from bot.config import Config
from bot.errors import ConfigError
from bot.runtime import Bot, open_bot

log = logging.getLogger(__name__)


def platform_runners(bot: Bot, config: Config) -> list[Coroutine[Any, Any, None]]:
    """One coroutine per platform whose token is configured, each running until cancelled."""
    runners: list[Coroutine[Any, Any, None]] = []
    if config.slack.enabled:
        from adapters.slack.app import run_slack

        runners.append(run_slack(bot, config.slack))
    if config.discord.enabled:
        from adapters.discord_bot import run_discord

        runners.append(run_discord(bot, config.discord))
    return runners


async def serve_platforms(config: Config) -> None:
    """Runs the bot on every configured platform until cancelled (by a signal) or until
    one platform's adapter stops with an error, which is then raised.

    On the way out the bot stops first (a running rebuild is interrupted and its
    requesters are told, while the platforms can still carry that message), then
    the adapters close.
    """
    if not (config.slack.enabled or config.discord.enabled):
        raise ConfigError("no chat platform is configured: set slack.bot_token or discord.token")
    bot = await open_bot(config)
    await bot.start()
    tasks = [asyncio.ensure_future(runner) for runner in platform_runners(bot, config)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # an adapter that ended on its own failed: say why
        log.error("a chat platform adapter stopped; stopping the bot")
    finally:
        await bot.stop()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
