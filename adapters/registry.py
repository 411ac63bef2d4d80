"""The chat platforms the bot can serve, and which of them a configuration turns on.

Adding a platform: write its adapter package under ``adapters/`` with one class
(named ``<Platform>Adapter``) that follows :class:`adapters.protocol.Adapter`, give it
a section in :mod:`bot.config`, and add one :class:`Platform` line to :data:`PLATFORMS`.
Each adapter is imported only when its platform is configured, so an unused SDK is
never loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from adapters.protocol import Adapter
from bot.config import Config


@dataclass(frozen=True, slots=True)
class Platform:
    """A platform: whether ``config`` turns it on, and how its adapter is made."""

    name: str
    configured: Callable[[Config], bool]
    make: Callable[[Config], Adapter]


def _slack(config: Config) -> Adapter:
    from adapters.slack.app import SlackAdapter

    return SlackAdapter(config.slack)


def _discord(config: Config) -> Adapter:
    from adapters.discord_bot.client import DiscordAdapter

    return DiscordAdapter(config.discord)


PLATFORMS = (
    Platform("Slack", lambda config: config.slack.enabled, _slack),
    Platform("Discord", lambda config: config.discord.enabled, _discord),
)


def configured_platforms(config: Config) -> list[Adapter]:
    """An adapter for every platform ``config`` has credentials for, in :data:`PLATFORMS` order."""
    return [platform.make(config) for platform in PLATFORMS if platform.configured(config)]
