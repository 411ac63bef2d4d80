"""The Discord side: a discord.py client feeding the bot's handler, and its runner.

:func:`run_discord` is the entry point: it points discord.py at the configured
endpoints (restored on exit), logs in, syncs the ``/raptor`` command (name from
``discord.command``) and stays connected until cancelled, then closes.

What :class:`RaptorClient` does with Discord's events (the translation itself
lives in :mod:`~adapters.discord_bot.translate`, the messages in
:mod:`~adapters.discord_bot.render`, sending them in
:mod:`~adapters.discord_bot.sending`, keeping the connection up in
:mod:`~adapters.discord_bot.connection`):

* a message that mentions the bot (or any DM) is a question, answered as a
  reply, or in a new thread with ``discord.reply_in_thread``; a message in a
  thread where the bot has posted is a follow-up (no mention needed), with the
  thread's earlier messages as context. Whether the bot posted is read from the
  thread's history each time: nothing is remembered between events. The bot
  shows it is typing while it works;
* attachments of a message that mentions the bot, and of every message in a
  ``library_channels`` channel, are downloaded and added as sources;
* a private thread is a channel of its own (:attr:`translate.Place.key`): its
  files and pins never reach its parent channel's tree, and questions there are
  answered from its own tree;
* a change of a channel's pins is compared with the pinned-message sources the
  engine holds for that channel: new pins are added (a pinned message that
  starts a thread with the thread's messages), unpinned ones removed;
* every slash command is deferred at once (Discord allows 3 s) and answered by
  follow-ups; private replies are ephemeral;
* the buttons under answers (a summary's node, 👍/👎) carry all they need in
  their custom ids and are handled in ``on_interaction``, so they keep
  working after a restart. Their replies are shown to the presser only.

Failures never pass silently: the handler turns its own into ERROR replies; a
failure here (a download, a send, reading pins) is logged with a short
reference and a short message naming it is posted. A malformed gateway event
is dropped (logged), and anything else escaping discord.py's gateway loop
makes the runner reconnect rather than stop.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

import discord
from discord import app_commands

from adapters.discord_bot import render, translate
from adapters.discord_bot.connection import (
    discord_endpoints,
    guard_parsers,
    stay_connected,
)
from adapters.discord_bot.sending import (
    ALLOWED_MENTIONS,
    ChannelSend,
    InteractionSend,
    Typing,
    keep_typing,
)
from adapters.discord_bot.translate import Place
from bot import commands
from bot.chat import Command, Person, Pin, Question, Reply, Unpin, Upload
from bot.config import DiscordConfig
from bot.errors import ConfigError, log_failure
from bot.runtime import Bot

log = logging.getLogger(__name__)

HISTORY_LIMIT = 20  # messages of a thread read to decide whether the bot is in it, and for context
PINNED_THREAD_LIMIT = 500  # messages of a pinned thread that become its source
SHUTDOWN_GRACE_S = 5.0  # how long closing waits for events being handled before cancelling them
AUTOCOMPLETE_CHOICES = 25  # Discord's maximum
AUTOCOMPLETE_TIMEOUT_S = 2.0
CHOICE_NAME_LIMIT = 100
GROUP_DESCRIPTION = "Ask this channel's documents, and manage its RAPTOR tree"


def intents() -> discord.Intents:
    """What the bot needs: guilds (channels, threads, pins updates), guild and DM messages,
    and message content (library channels and follow-ups in threads carry no mention;
    Discord blanks their content without it)."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


class RaptorClient(discord.Client):
    """The Discord client of one :class:`~bot.runtime.Bot`; see the module docstring."""

    def __init__(self, bot: Bot, config: DiscordConfig, *, guild_ready_timeout: float = 2.0) -> None:
        super().__init__(intents=intents(), allowed_mentions=ALLOWED_MENTIONS, guild_ready_timeout=guild_ready_timeout)
        self.raptor = bot
        self.settings = config
        self.scope = translate.Scope.of(config)
        self.tree = app_commands.CommandTree(self)
        self.tree.add_command(command_group(self, command_name(config.command)))
        self._pin_locks: dict[int, asyncio.Lock] = {}
        self._work: set[asyncio.Task[Any]] = set()
        guard_parsers(self._connection)

    # -- life cycle ---------------------------------------------------------------------

    async def setup_hook(self) -> None:
        """Syncs the slash command at start-up. A failed sync is logged, not fatal: mentions
        still work, and the commands registered before keep working."""
        try:
            synced = await self.tree.sync()
            log.info("synced the /%s command (%d)", self.settings.command, len(synced))
        except Exception:
            log_failure(log, "syncing the slash commands with Discord failed (reference %s)")

    async def on_ready(self) -> None:
        user = self.user
        log.info("connected to Discord as %s (%s), in %d guild(s)", user, getattr(user, "id", "?"), len(self.guilds))

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

    @property
    def bot_id(self) -> int:
        return self.user.id if self.user is not None else 0

    # -- messages -----------------------------------------------------------------------

    async def on_message(self, message: discord.Message) -> None:
        """Questions, follow-ups and uploads; other bots, system messages and places the
        configuration does not allow are ignored without a word."""
        if message.author.bot or self.user is None:
            return
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return
        with self._tracked():
            place = await self._place(message.channel, message.guild.id if message.guild else None)
            if not self.scope.allows(place):
                return
            try:
                await self._message(message, place)
            except Exception:  # noqa: BLE001 (reported with a reference, never silent)
                await self._failed(f"handling message {message.id}", ChannelSend(message.channel, message))

    async def _message(self, message: discord.Message, place: Place) -> None:
        addressed = place.guild_id is None or translate.mentions_bot(message, self.bot_id)
        uploads = list(message.attachments) if addressed or self.scope.is_library(place) else []
        in_thread = translate.is_thread(message.channel)
        context: tuple[str, ...] = ()
        follow_up = False
        if in_thread:
            history = await self._history(message)
            follow_up = not addressed and (
                translate.bot_posted(history, self.bot_id) or getattr(message.channel, "owner_id", None) == self.bot_id
            )
            context = translate.context_of(history, self.bot_id) if addressed or follow_up else ()
        if not (uploads or addressed or follow_up):
            return
        person = self._message_person(message)
        async with keep_typing(message.channel) as typing:
            for attachment in uploads:
                external_id = translate.upload_external_id(message.channel.id, message.id, attachment.id)
                await self._upload(message, attachment, place, person, external_id)
            text = translate.question_text(message.content, self.bot_id, translate.mention_names(message))
            if not text and uploads:
                return  # the files were the point
            await self._question(message, place, person, text, context, typing)

    async def _question(self, message: discord.Message, place: Place, person: Person, text: str,
                        context: tuple[str, ...], typing: Typing) -> None:
        """A question (or a lone "help"): answered as a reply, or in a thread opened from the
        message when ``reply_in_thread`` is set and it is not in a thread already."""
        if translate.is_help(text):
            event: Command | Question = Command(place.key, person, commands.HELP, thread=place.thread)
        else:
            event = Question(place.key, person, text, place.thread, context)
        new_thread = (self.settings.reply_in_thread and place.guild_id is not None and not place.thread
                      and isinstance(event, Question) and bool(text))
        if not new_thread:
            await self.raptor.handler.handle(event, ChannelSend(message.channel, message))
            return
        send = ChannelSend(message.channel, message, translate.thread_name(text))
        destination = await send.destination()  # the thread opens now: the first sign of work
        if destination is message.channel:  # it could not be opened: answered as a reply
            await self.raptor.handler.handle(event, send)
            return
        typing.stop()  # the typing goes on in the thread
        event = Question(place.key, person, text, str(destination.id), context)
        async with keep_typing(destination):
            await self.raptor.handler.handle(event, send)

    async def _history(self, message: discord.Message) -> list[discord.Message]:
        """The thread's messages before this one, oldest first ([] when they cannot be read)."""
        try:
            newest_first = [m async for m in message.channel.history(limit=HISTORY_LIMIT, before=message)]
        except (discord.HTTPException, OSError) as exc:
            log.warning("cannot read the history of thread %s: %s", message.channel.id, exc)
            return []
        return newest_first[::-1]

    async def _upload(self, message: discord.Message, attachment: discord.Attachment, place: Place,
                      person: Person, external_id: str) -> None:
        """Downloads one attachment and hands it to the handler as an Upload; a file over
        the size limit is refused before downloading it."""
        send = ChannelSend(message.channel, message)
        limit = self.raptor.max_upload_bytes
        if attachment.size > limit:
            await send(render.too_large_reply(attachment.filename, attachment.size, limit))
            return
        try:
            data = await attachment.read()
        except Exception:
            reference = log_failure(log, "downloading attachment %s (%s) of message %s failed (reference %s)",
                                         attachment.id, attachment.filename, message.id)
            await send(render.download_failed_reply(attachment.filename, reference))
            return
        upload = Upload(place.key, person, attachment.filename, data, link=message.jump_url, external_id=external_id,
                        size=attachment.size)
        await self.raptor.handler.handle(upload, send)

    def _message_person(self, message: discord.Message) -> Person:
        manages = place_manager(message.channel, message.author)
        return translate.person_of(message.author, manages)

    async def _place(self, channel: Any, guild_id: int | None) -> Place:
        """The place of a channel; a thread discord.py has not cached is fetched once to
        learn its parent and its type (a public thread shares its channel's tree, a
        private one has its own). Unfetched, it is keyed as a channel of its own."""
        if isinstance(channel, discord.PartialMessageable) and guild_id is not None:
            try:
                channel = await self.fetch_channel(channel.id)
            except (discord.HTTPException, OSError) as exc:
                log.warning("cannot fetch channel %s: %s", channel.id, exc)
        return translate.place_of(channel, guild_id)

    # -- pins ---------------------------------------------------------------------------

    async def on_guild_channel_pins_update(self, channel: Any, last_pin: Any) -> None:
        await self._pins_changed(channel)

    async def on_private_channel_pins_update(self, channel: Any, last_pin: Any) -> None:
        await self._pins_changed(channel)

    async def _pins_changed(self, channel: Any) -> None:
        """Adds newly pinned messages and removes unpinned ones (see :func:`translate.pin_changes`).
        One channel's changes are handled one at a time, so a burst of pins adds each once."""
        with self._tracked():
            place = translate.place_of(channel)
            if not self.scope.allows(place):
                return
            lock = self._pin_locks.setdefault(channel.id, asyncio.Lock())
            async with lock:
                try:
                    await self._sync_pins(channel, place)
                except Exception:  # noqa: BLE001 (reported with a reference, never silent)
                    await self._failed(f"reading the pins of channel {channel.id}", ChannelSend(channel))

    async def _sync_pins(self, channel: Any, place: Place) -> None:
        pinned = [message async for message in channel.pins(limit=None)]
        sources = await self.raptor.sources(place.key)
        files_only = [m.id for m in pinned if m.attachments and not m.content.strip()]
        changes = translate.pin_changes(channel.id, [m.id for m in pinned], sources, files_only)
        if not changes.added and not changes.removed:
            return
        by_id = {message.id: message for message in pinned}
        async with keep_typing(channel):
            for message_id in changes.added:
                message = by_id[message_id]
                try:
                    await self._pin(channel, message, place)
                except Exception:  # one pin's failure must not hold the others up  # noqa: BLE001 (reported with a reference, never silent)
                    await self._failed(f"adding pinned message {message_id}", ChannelSend(channel, message))
            for external_id in changes.removed:
                message_id = int(external_id.rsplit("/", 1)[1])
                send = ChannelSend(channel, channel.get_partial_message(message_id))
                await self.raptor.handler.handle(Unpin(place.key, translate.PINNER, external_id), send)

    async def _pin(self, channel: Any, message: discord.Message, place: Place) -> None:
        """One newly pinned message: its attachments and its text (with its thread's messages
        when it starts one) become sources under the pin's external id."""
        if message.author.id == self.bot_id:
            log.info("ignoring the pin of the bot's own message %s: answers are not sources", message.id)
            return
        external_id = translate.pin_external_id(channel.id, message.id)
        for attachment in message.attachments:
            await self._upload(message, attachment, place, translate.PINNER, external_id)
        text = translate.question_text(message.content, self.bot_id, translate.mention_names(message))
        replies = await self._thread_replies(message)
        if not text and not replies and message.attachments:
            return
        author = getattr(message.author, "display_name", "") or message.author.name
        pin = Pin(place.key, translate.PINNER, text, external_id, link=message.jump_url, author=author,
                  replies=replies)
        await self.raptor.handler.handle(pin, ChannelSend(channel, message))

    async def _thread_replies(self, message: discord.Message) -> tuple[str, ...]:
        """The messages of the thread a pinned message starts ((), when it starts none)."""
        thread = message.thread
        if thread is None:
            return ()
        history = [m async for m in thread.history(limit=PINNED_THREAD_LIMIT, oldest_first=True)]
        return translate.thread_replies(history, self.bot_id)

    # -- slash commands and buttons --------------------------------------------------------

    async def run_command(self, interaction: discord.Interaction, name: str, argument: str = "") -> None:
        """One ``/raptor <name>``: deferred first, then handled; the replies are follow-ups."""
        with self._tracked():
            place = interaction_place(interaction)
            if not self.scope.allows(place):
                await _refuse_here(interaction)
                return
            send = InteractionSend(self, interaction)
            if not await send.defer(thinking=True, ephemeral=False):
                return
            person = translate.person_of(interaction.user, interaction_manager(interaction, place))
            try:
                await self.raptor.handler.handle(Command(place.key, person, name, argument, place.thread), send)
            except Exception:  # noqa: BLE001 (reported with a reference, never silent)
                await self._failed(f"handling /{self.settings.command} {name}", send)
            finally:
                await send.finish()

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """Presses on the bot's buttons (component interactions); slash commands go through the tree."""
        if interaction.type is not discord.InteractionType.component:
            return
        data: Mapping[str, Any] = interaction.data or {}
        action = translate.parse_custom_id(str(data.get("custom_id", "")))
        if action is None:
            return
        with self._tracked():
            place = interaction_place(interaction)
            if not self.scope.allows(place):
                await _refuse_here(interaction)
                return
            send = InteractionSend(self, interaction, always_private=True)
            # Opening a node takes a moment: show "thinking". A vote is silent until the handler speaks.
            if not await send.defer(thinking=isinstance(action, translate.OpenNode), ephemeral=True):
                return
            person = translate.person_of(interaction.user, interaction_manager(interaction, place))
            try:
                await self.raptor.handler.handle(translate.button_event(action, place, person), send)
            except Exception:  # noqa: BLE001 (reported with a reference, never silent)
                await self._failed("handling a button press", send)
            finally:
                await send.finish()

    async def source_choices(self, interaction: discord.Interaction, typed: str) -> list[app_commands.Choice[str]]:
        """Autocomplete of ``forget``: the channel's sources whose id or title contains what is typed."""
        place = interaction_place(interaction)
        if not self.scope.allows(place):
            return []
        try:
            # Discord drops an autocomplete answer later than 3 s: better no choices than none shown.
            sources = await asyncio.wait_for(self.raptor.sources(place.key), AUTOCOMPLETE_TIMEOUT_S)
        except TimeoutError:
            log.warning("listing the sources of %s for autocomplete took too long", place.key)
            return []
        wanted = typed.strip().lower()
        choices = []
        for source in sources:
            if wanted and wanted not in source.id and wanted not in source.title.lower():
                continue
            name = f"{source.title} · {source.id[:10]}"
            if len(name) > CHOICE_NAME_LIMIT:
                name = f"{source.title[: CHOICE_NAME_LIMIT - 14]}… · {source.id[:10]}"
            choices.append(app_commands.Choice(name=name, value=source.id))
        return choices[:AUTOCOMPLETE_CHOICES]

    # -- failures -------------------------------------------------------------------------

    async def _failed(self, what: str, send: Callable[[Reply], Any]) -> None:
        """Logs the exception being handled with a reference, and says so where it happened."""
        reference = log_failure(log, "%s failed (reference %s)", what)
        with suppress(Exception):
            await send(render.failure_reply(reference))


# -- places and permissions -------------------------------------------------------------------


def interaction_place(interaction: discord.Interaction) -> Place:
    """The place of an interaction (its channel, or its ids when the channel is unknown)."""
    if interaction.channel is not None:
        return translate.place_of(interaction.channel, interaction.guild_id)
    return Place(interaction.guild_id, int(interaction.channel_id or 0))


def interaction_manager(interaction: discord.Interaction, place: Place) -> bool:
    """Manage Messages in the channel, as Discord resolved it for the interaction. In a DM
    the person is the only one there, so the channel is theirs to manage."""
    return place.guild_id is None or interaction.permissions.manage_messages


def place_manager(channel: Any, author: Any) -> bool:
    """Manage Messages for a message's author, from discord.py's cached roles (False if unknown)."""
    if getattr(channel, "guild", None) is None:
        return True
    try:
        return bool(channel.permissions_for(author).manage_messages)
    except (AttributeError, TypeError, discord.ClientException):
        return False


async def _refuse_here(interaction: discord.Interaction) -> None:
    """An interaction where the bot is not enabled: said to the person only (Discord would
    otherwise show "the application did not respond")."""
    with suppress(discord.HTTPException, OSError):
        await interaction.response.send_message(render.NOT_ENABLED_TEXT, ephemeral=True)


# -- the slash command ---------------------------------------------------------------------------


def command_name(configured: str) -> str:
    """``discord.command`` as a slash command name (lower case, no leading slash)."""
    name = configured.strip().lstrip("/").lower()
    if not re.fullmatch(r"[-_\w]{1,32}", name):
        raise ConfigError(f"discord.command: {configured!r} is not a valid slash command name")
    return name


def _help(name: str) -> str:
    return commands.COMMANDS[name].help[:100]


def command_group(client: RaptorClient, name: str) -> app_commands.Group:
    """``/<name>`` with one subcommand per chat command; each hands over to :meth:`RaptorClient.run_command`."""
    group = app_commands.Group(name=name, description=GROUP_DESCRIPTION)

    @group.command(name=commands.ASK, description=_help(commands.ASK))
    @app_commands.describe(question="What you want to know")
    async def ask(interaction: discord.Interaction, question: str) -> None:
        await client.run_command(interaction, commands.ASK, question)

    @group.command(name=commands.REBUILD, description=_help(commands.REBUILD))
    async def rebuild(interaction: discord.Interaction) -> None:
        await client.run_command(interaction, commands.REBUILD)

    @group.command(name=commands.STATUS, description=_help(commands.STATUS))
    async def status(interaction: discord.Interaction) -> None:
        await client.run_command(interaction, commands.STATUS)

    @group.command(name=commands.SOURCES, description=_help(commands.SOURCES))
    async def sources(interaction: discord.Interaction) -> None:
        await client.run_command(interaction, commands.SOURCES)

    @group.command(name=commands.FORGET, description=_help(commands.FORGET))
    @app_commands.describe(source="The source's id (or its first characters), as /sources lists it")
    async def forget(interaction: discord.Interaction, source: str) -> None:
        await client.run_command(interaction, commands.FORGET, source)

    @forget.autocomplete("source")
    async def forget_choices(interaction: discord.Interaction, current: str) -> list[app_commands.Choice[str]]:
        return await client.source_choices(interaction, current)

    @group.command(name=commands.NODE, description=_help(commands.NODE))
    @app_commands.describe(node_id="The node id shown under a cited source")
    async def node(interaction: discord.Interaction, node_id: str) -> None:
        await client.run_command(interaction, commands.NODE, node_id)

    @group.command(name=commands.TREE, description=_help(commands.TREE))
    async def tree(interaction: discord.Interaction) -> None:
        await client.run_command(interaction, commands.TREE)

    @group.command(name=commands.HELP, description=_help(commands.HELP))
    async def help_(interaction: discord.Interaction) -> None:
        await client.run_command(interaction, commands.HELP)

    return group


# -- the runner ------------------------------------------------------------------------------------


async def run_discord(bot: Bot, config: DiscordConfig, *, guild_ready_timeout: float = 2.0,
                      on_client: Callable[[RaptorClient], object] | None = None) -> None:
    """Runs the bot on Discord until cancelled, then closes the client (the bot itself is the
    caller's to stop). ``on_client`` receives the client before it logs in (tests and
    benchmarks wait on it). Raises ``ConfigError`` without a token, ``discord.LoginFailure``
    for a token Discord refuses, and whatever makes discord.py give up for good (such as
    ``PrivilegedIntentsRequired`` when the message content intent is not enabled)."""
    token = config.token.get_secret_value()
    if not token:
        raise ConfigError("discord.token is not set")
    with discord_endpoints(config.api_base_url, config.gateway_url):
        client = RaptorClient(bot, config, guild_ready_timeout=guild_ready_timeout)
        if on_client is not None:
            on_client(client)
        try:
            await client.login(token)
            await stay_connected(client)
        finally:
            await client.close()


class DiscordPlatform:
    """The Discord adapter in the shape the composition root serves (:class:`adapters.protocol.Adapter`)."""

    name = "Discord"
    ends_on_its_own = False

    def __init__(self, config: DiscordConfig) -> None:
        self._config = config

    async def serve(self, bot: Bot) -> None:
        """See :func:`run_discord`."""
        await run_discord(bot, self._config)
