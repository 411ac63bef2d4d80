"""The life cycle of the bot's discord.py client, and what every part of it shares.

:class:`ClientCore` is the base of :class:`~adapters.discord_bot.client.DiscordClient`;
the parts that handle Discord's events (:mod:`~adapters.discord_bot.messages`,
:mod:`~adapters.discord_bot.pins`, :mod:`~adapters.discord_bot.interactions`) build
on it. Contract:

* the client asks Discord for :func:`intents` only, and never mentions anyone
  (``ALLOWED_MENTIONS``, none: not even the person it answers);
* the slash command tree is synced at start-up; a failed sync is logged, not fatal;
* every event handler runs inside :meth:`ClientCore._tracked`, so :meth:`ClientCore.close`
  can let the events being handled finish (for :data:`SHUTDOWN_GRACE_S`) before it
  cancels the rest and closes;
* a failure in a handler is logged under a fresh reference by :meth:`ClientCore._failed`,
  and a short message naming it is posted where it happened: never silent;
* every gateway connection of the bot receives every event, so with several front-ends
  each event arrives at each: an event is handled only by the front-end the bot's
  delivery ledger (``Assistant.first_delivery``, asked through :meth:`ClientCore.claim`
  as a broadcast event) names first for its key, or, with Redis down, by the front-end
  owning it (``coordination.front_end_index``). Application commands and autocomplete
  are checked here (:class:`OnceCommandTree`, by ``discord:interaction:<id>``); the
  parts check their own events;
* once connected, the client registers its courier with the bot (platform ``"discord"``):
  :meth:`ClientCore.courier` posts replies without an event (a rebuild run by a worker
  process) in the address's thread, or else its channel, as replies to messages are posted;
* the gateway is watched by discord.py itself: it heartbeats at the interval Discord sets,
  and when nothing (not even a heartbeat ACK) came for ``discord.heartbeat_timeout_s`` it
  drops the connection and resumes or identifies again. Each such loss is logged and
  counted (``raptor_reconnects_total{platform="discord", reason="gateway"}``; ``"error"``
  when :func:`~adapters.discord_bot.connection.stay_connected` had to reconnect), and
  its end is logged with how long it took. discord.py does not say why a connection
  ended, hence one reason for all of its own;
* heartbeats are sent from the event loop, so a blocked loop looks like a dead link: a
  :class:`~adapters.loop_watchdog.LoopWatchdog` reports any block longer than
  :func:`loop_block_s` while it lasts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import discord
from discord import app_commands

from adapters.discord_bot import render, translate
from adapters.discord_bot.connection import guard_parsers
from adapters.discord_bot.posting import ALLOWED_MENTIONS
from adapters.discord_bot.sending import ChannelSend
from adapters.loop_watchdog import LOOP_BLOCK_S, LoopWatchdog
from bot.config import DiscordConfig
from bot.errors import log_failure
from bot.neutral import Reply, ReplyAddress, Send
from bot.runtime import Assistant

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 5.0  # how long closing waits for events being handled before cancelling them


def loop_block_s(config: DiscordConfig) -> float:
    """The longest the event loop may be blocked unreported: :data:`LOOP_BLOCK_S`, or a
    quarter of the heartbeat timeout when that is shorter, so a block is reported well
    before discord.py would give up on the gateway because of it."""
    return min(LOOP_BLOCK_S, config.heartbeat_timeout_s / 4)


def intents() -> discord.Intents:
    """What the bot needs: guilds (channels, threads, pins updates; channels and threads
    deleted, the bot removed from a server), guild and DM messages (deleted and edited ones
    too), and message content (library channels and follow-ups in threads carry no mention;
    Discord blanks their content without it)."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


def interaction_key(interaction: discord.Interaction) -> str:
    """The delivery key of an interaction (a slash command, a button press, an autocomplete)."""
    return f"discord:interaction:{interaction.id}"


class OnceCommandTree(app_commands.CommandTree):
    """The slash command tree, running each application command (and autocomplete) on the
    one front-end that sees it first; the others leave it alone, without answering Discord."""

    def __init__(self, client: discord.Client, bot: Assistant) -> None:
        super().__init__(client)
        self._bot = bot

    async def interaction_check(self, interaction: discord.Interaction, /) -> bool:
        return await self._bot.first_delivery(interaction_key(interaction), broadcast=True)


class ClientCore(discord.Client):
    """A discord.py client serving one :class:`~bot.runtime.Assistant` (``raptor``) with the
    configuration ``settings``; see the module docstring."""

    def __init__(self, bot: Assistant, config: DiscordConfig, *, guild_ready_timeout: float = 2.0) -> None:
        super().__init__(intents=intents(), allowed_mentions=ALLOWED_MENTIONS, guild_ready_timeout=guild_ready_timeout,
                         heartbeat_timeout=config.heartbeat_timeout_s)
        self.raptor = bot
        self.settings = config
        self.scope = translate.Scope.of(config)
        self.tree = OnceCommandTree(self, bot)
        self._work: set[asyncio.Task[Any]] = set()
        self._lost_at: float | None = None  # when the gateway connection was lost, until it is back
        self._loop_watchdog: LoopWatchdog | None = None
        guard_parsers(self._connection)

    # -- life cycle ---------------------------------------------------------------------

    async def setup_hook(self) -> None:
        """Starts watching the event loop and syncs the slash command at start-up. A failed
        sync is logged, not fatal: mentions still work, and the commands registered before
        keep working."""
        if self._loop_watchdog is None:
            self._loop_watchdog = LoopWatchdog.acquire(self.raptor.metrics, loop_block_s(self.settings))
        try:
            synced = await self.tree.sync()
            log.info("synced the /%s command (%d)", self.settings.command, len(synced))
        except Exception:
            log_failure(log, "syncing the slash commands with Discord failed (reference %s)")

    async def on_ready(self) -> None:
        user = self.user
        log.info("connected to Discord as %s (%s), in %d guild(s)", user, getattr(user, "id", "?"), len(self.guilds))
        self._back("identified again")
        self.raptor.add_courier(translate.PLATFORM, self.courier)

    async def on_disconnect(self) -> None:
        """discord.py lost the gateway connection (and reconnects by itself): logged and
        counted once per loss, however many attempts it takes; not when closing."""
        if self.is_closed() or self._lost_at is not None:
            return
        log.warning("lost the Discord gateway connection (no heartbeat ACK or event in time, Discord asked, or the "
                    "network); discord.py reconnects")
        self.note_reconnect("gateway")

    async def on_resumed(self) -> None:
        self._back("resumed the session")

    def note_reconnect(self, reason: str) -> None:
        """Counts one reconnect of the gateway connection, set off by ``reason``; the time
        it is back is logged by :meth:`on_ready` or :meth:`on_resumed`."""
        if self._lost_at is None:
            self._lost_at = time.monotonic()
        self.raptor.metrics.count_reconnect(translate.PLATFORM, reason)

    def _back(self, how: str) -> None:
        """Logs the end of a loss of the gateway connection, if there was one."""
        if self._lost_at is not None:
            log.info("back on the Discord gateway after %.1f s (%s)", time.monotonic() - self._lost_at, how)
            self._lost_at = None

    def courier(self, address: ReplyAddress) -> Send:
        """The ``send`` of replies to ``address`` without an event (a rebuild run by a worker):
        posted in ``address.thread`` (a thread is a channel of its own on Discord), else in the
        address's channel, rendered and sent as replies to messages are (it never raises)."""
        target = address.thread or address.channel.channel
        workspace = address.channel.workspace
        try:
            channel = self.get_partial_messageable(int(target), guild_id=int(workspace) if workspace.isdigit() else None)
        except ValueError:
            log.warning("cannot post to %s (thread %r): not a Discord channel id", address.channel, address.thread)
            return _nowhere
        return ChannelSend(channel)

    async def close(self) -> None:
        """Lets the events being handled finish (briefly), cancels the rest, then closes."""
        pending = {task for task in self._work if task is not asyncio.current_task() and not task.done()}
        if pending:
            _, late = await asyncio.wait(pending, timeout=SHUTDOWN_GRACE_S)
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=SHUTDOWN_GRACE_S)
                log.info("closing: cancelled %d event(s) still being handled", len(late))
        if self._loop_watchdog is not None:
            self._loop_watchdog.release()
            self._loop_watchdog = None
        await super().close()

    @contextmanager
    def _tracked(self) -> Iterator[None]:
        """Marks the running task as handling an event, so closing can wait for it."""
        task = asyncio.current_task()
        if task is not None:
            self._work.add(task)
        try:
            yield
        finally:
            if task is not None:
                self._work.discard(task)

    async def claim(self, event_key: str) -> bool:
        """Whether this front-end handles the event ``event_key`` (every front-end's gateway
        connection received it; see the module docstring)."""
        return await self.raptor.first_delivery(event_key, broadcast=True)

    @property
    def bot_id(self) -> int:
        """The bot's own user id (0 before login): how its mentions and messages are told."""
        return self.user.id if self.user is not None else 0

    # -- failures -------------------------------------------------------------------------

    async def _failed(self, what: str, send: Callable[[Reply], Any]) -> None:
        """Logs the exception being handled with a reference, and says so where it happened."""
        reference = log_failure(log, "%s failed (reference %s)", what)
        with suppress(Exception):
            await send(render.failure_reply(reference))


async def _nowhere(reply: Reply) -> None:
    """The ``send`` of an address no reply can go to (logged when it was made)."""
