"""The Discord side: :class:`DiscordClient` feeding the bot's handler, and its runner.

:func:`run_discord` is the entry point: it points discord.py at the configured
endpoints (restored on exit), logs in, syncs the ``/raptor`` command (name from
``discord.command``) and stays connected until cancelled, then closes.
:class:`DiscordAdapter`, the :class:`~adapters.protocol.Adapter` the registry builds, runs it.

:class:`DiscordClient` is assembled from one part per kind of Discord event, each in a
module of its own (with the translation itself in :mod:`~adapters.discord_bot.translate`,
the messages in :mod:`~adapters.discord_bot.render`, sending them in
:mod:`~adapters.discord_bot.sending`, keeping the connection up in
:mod:`~adapters.discord_bot.connection`):

* :mod:`~adapters.discord_bot.lifecycle` — start-up, shutdown, failure reports;
* :mod:`~adapters.discord_bot.messages` — questions, follow-ups and uploads;
* :mod:`~adapters.discord_bot.pins` — pinned messages as sources;
* :mod:`~adapters.discord_bot.removals` — deletions, and channels and servers the bot leaves
  (built on the pins part: an edit reaches both);
* :mod:`~adapters.discord_bot.interactions` — slash commands, buttons, autocomplete,
  with the command group declared in :mod:`~adapters.discord_bot.slash_command` and
  button presses and form submissions read in :mod:`~adapters.discord_bot.interaction_events`;
* :mod:`~adapters.discord_bot.message_commands` — the message commands (context menus) "Add to
  channel knowledge" and "Ask about this message" (built on the interactions part).
* :mod:`~adapters.discord_bot.forums` — forum channels as help desks: posts answered, and
  solved ones made sources (built on the messages and interactions parts: it sends the
  answers in forum posts, and takes the presses on "Mark solved").

A private thread is a channel of its own (:attr:`translate.Place.key`): its files and
pins never reach its parent channel's tree, and questions there are answered from its
own tree. Failures never pass silently: the handler turns its own into ERROR replies;
a failure here (a download, a send, reading pins) is logged with a short reference and
a short message naming it is posted. A malformed gateway event is dropped (logged),
and anything else escaping discord.py's gateway loop makes the runner reconnect rather
than stop.
"""

from __future__ import annotations

from collections.abc import Callable

from adapters.discord_bot.connection import discord_endpoints, stay_connected
from adapters.discord_bot.forums import ForumHandling
from adapters.discord_bot.interaction_events import interaction_manager, interaction_place
from adapters.discord_bot.lifecycle import intents
from adapters.discord_bot.message_commands import MessageCommandHandling, message_commands
from adapters.discord_bot.messages import MessageHandling, place_manager
from adapters.discord_bot.removals import RemovalHandling
from adapters.discord_bot.slash_command import command_group, command_name
from bot.config import DiscordConfig
from bot.errors import ConfigError
from bot.runtime import Assistant

__all__ = [
    "DiscordAdapter", "DiscordClient", "command_group", "command_name", "intents", "interaction_manager",
    "interaction_place", "place_manager", "run_discord",
]


class DiscordClient(ForumHandling, MessageCommandHandling, RemovalHandling, MessageHandling):
    """The Discord client of one :class:`~bot.runtime.Assistant`; see the module docstring."""

    def __init__(self, bot: Assistant, config: DiscordConfig, *, guild_ready_timeout: float = 2.0) -> None:
        super().__init__(bot, config, guild_ready_timeout=guild_ready_timeout)
        # Here, not in a part: the group needs the whole client (its subcommands call run_command).
        self.tree.add_command(command_group(self, command_name(config.command)))
        for menu in message_commands(self):
            self.tree.add_command(menu)


async def run_discord(bot: Assistant, config: DiscordConfig, *, guild_ready_timeout: float = 2.0,
                      on_client: Callable[[DiscordClient], object] | None = None) -> None:
    """Runs the bot on Discord until cancelled, then closes the client (the bot itself is the
    caller's to stop). ``on_client`` receives the client before it logs in (tests and
    benchmarks wait on it). Raises ``ConfigError`` without a token, ``discord.LoginFailure``
    for a token Discord refuses, and whatever makes discord.py give up for good (such as
    ``PrivilegedIntentsRequired`` when the message content intent is not enabled)."""
    token = config.token.get_secret_value()
    if not token:
        raise ConfigError("discord.token is not set")
    with discord_endpoints(config.api_base_url, config.gateway_url):
        client = DiscordClient(bot, config, guild_ready_timeout=guild_ready_timeout)
        if on_client is not None:
            on_client(client)
        try:
            await client.login(token)
            await stay_connected(client)
        finally:
            await client.close()


class DiscordAdapter:
    """The Discord adapter, the :class:`adapters.protocol.Adapter` the registry builds: serves a
    started bot with :func:`run_discord`."""

    name = "Discord"
    ends_on_its_own = False

    def __init__(self, config: DiscordConfig) -> None:
        self._config = config

    async def serve(self, bot: Assistant) -> None:
        """See :func:`run_discord`."""
        await run_discord(bot, self._config)
