"""Discord pins: a channel's pinned messages kept in step with the sources learned from them.

Contract (:class:`PinHandling`, a part of :class:`~adapters.discord_bot.client.DiscordClient`):
on a change of a channel's pins, the pinned messages are compared with the
pinned-message sources the bot holds for that channel; new pins are added (their
files, and their text with the thread they start, if any) and unpinned ones removed.
One channel's changes are handled one at a time, so a burst of pins adds each once;
one pin's failure is reported and does not hold the others up. The bot's own messages
(its answers) are never sources.

Every front-end receives every pins update and compares for itself, but each change is
made by one only, the first to claim it in the bot's delivery ledger: a pin by
``discord:pin:<channel>:<message>:<pinned at>`` and an unpin by
``discord:unpin:<channel>:<message>:<pinned at>`` (Discord says when a message was
pinned; pinning a message again is another change). Discord says neither who pinned nor
when a message was unpinned, so the unpin's time is the one this front-end saw the
message pinned at, or else, when it never saw it pinned, the update's last pin time.

A pinned message that starts a thread is one source of the whole thread, so a message
posted in that thread later (not by a bot: bots' messages are never part of it) makes the
source take the thread as it is now, as an edit of the pinned message does but quietly
(see :meth:`PinHandling.thread_grew` and ``Pin.grew``).
Whether the starter (the message of the thread's id, in the parent channel) is pinned is
read from this front-end's last look at the parent's pins, else (no pins update seen since
it started) from the starter itself, fetched once per thread. Each such message, and each
edit of one, is handled by one front-end, the first to claim
``discord:thread-reply:<thread>:<message>`` (``…:edit:<edited at>`` for an edit).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

import discord

from adapters.discord_bot import translate
from adapters.discord_bot.lifecycle import ClientCore
from adapters.discord_bot.messages import place_manager
from adapters.discord_bot.sending import ChannelSend, keep_typing
from adapters.discord_bot.translate import Place
from adapters.discord_bot.uploads import hand_over_attachment
from bot.config import DiscordConfig
from bot.neutral import Person, Pin, Unpin
from bot.runtime import Assistant

log = logging.getLogger(__name__)

PINNED_THREAD_LIMIT = 500  # messages of a pinned thread that become its source
STARTERS_REMEMBERED = 1024  # threads whose starter was fetched to learn whether it is pinned


class PinHandling(ClientCore):
    """The client's pins-update events; see the module docstring."""

    def __init__(self, bot: Assistant, config: DiscordConfig, *, guild_ready_timeout: float = 2.0) -> None:
        super().__init__(bot, config, guild_ready_timeout=guild_ready_timeout)
        self._pin_locks: dict[int, asyncio.Lock] = {}  # one per channel: its changes, one at a time
        self._pinned_at: dict[int, dict[int, str]] = {}  # channel -> its pinned messages at the last look -> when
        # thread -> whether its starter was pinned when fetched; read only while its parent is
        # not in _pinned_at (any pins change there fills that, so no stale answer outlives it)
        self._starter_pinned: dict[int, bool] = {}

    async def on_guild_channel_pins_update(self, channel: Any, last_pin: Any) -> None:
        await self._pins_changed(channel, last_pin)

    async def on_private_channel_pins_update(self, channel: Any, last_pin: Any) -> None:
        await self._pins_changed(channel, last_pin)

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """An edited message that is pinned: its source, if the bot holds one, takes the new
        text (the handler tells; see :class:`~bot.neutral.Pin`). Discord says in the update
        whether the message is pinned, so other edits cost nothing. One front-end handles
        each edit: the first to claim ``discord:edit:<channel>:<message>:<edited at>``.
        An edited message in a thread changes the thread: a pinned thread's source takes it
        (see :meth:`thread_grew`)."""
        message = payload.message
        if translate.is_thread(message.channel) and not message.pinned:
            with self._tracked():
                await self.thread_grew(message, change=f":edit:{_stamp(message.edited_at)}")
            return
        if not message.pinned or message.author.id == self.bot_id:
            return
        with self._tracked():
            channel = message.channel
            place = translate.place_of(channel)
            if not self.scope.allows(place):
                return
            edited = f"discord:edit:{channel.id}:{message.id}:{_stamp(message.edited_at)}"
            if not await self.claim(edited):
                return
            async with self._pin_locks.setdefault(channel.id, asyncio.Lock()):
                try:
                    editor = translate.person_of(message.author, place_manager(channel, message.author))
                    pin = await self._pin_of(channel, message, place, editor)
                    revision = message.edited_at.timestamp() if message.edited_at else 0.0
                    await self.raptor.handler.handle(replace(pin, edited=True, revision=revision),
                                                     ChannelSend(channel, message))
                except Exception:  # noqa: BLE001 (reported with a reference, never silent)
                    await self._failed(f"updating pinned message {message.id}", ChannelSend(channel, message))

    async def thread_grew(self, message: discord.Message, change: str = "") -> None:
        """A message posted in a thread: when the thread starts from a pinned message that is
        a source, the source takes the thread as it is now, root and every reply, quietly
        (see ``Pin.grew``; answers citing it are told in their threads). Threads that cannot
        start from a message (private ones, forum posts) cost nothing, nor do others when
        this front-end knows the parent's pins.
        ``change`` tells one change of the same message from another (an edit's time).
        Called inside the client's tracking; never raises (failures are reported)."""
        thread = message.channel
        if message.author.bot:  # bots' messages are no part of a pinned thread
            return
        writer = translate.person_of(message.author, place_manager(thread, message.author))
        await self._refresh_thread(thread, writer, f"discord:thread-reply:{thread.id}:{message.id}{change}",
                                   f"message {message.id}")

    async def thread_reply_deleted(self, thread_id: int, message_id: int) -> None:
        """A message deleted in a thread: when the thread starts from a pinned message that is a
        source, the source takes the thread as it is now, without it (quietly, as for a reply
        added). The deletion counts against nobody's limits. Never raises (failures are reported)."""
        thread = self.get_channel(thread_id)
        await self._refresh_thread(thread, translate.PINNER, f"discord:thread-reply-deleted:{thread_id}:{message_id}",
                                   f"message {message_id} was deleted")

    async def _refresh_thread(self, thread: Any, writer: Person, claim: str, why: str) -> None:
        """The pinned thread's source, if ``thread`` starts from a pinned message that is one,
        takes the thread as it is now, once across front-ends (``claim``), as a change by ``writer``."""
        parent = message_thread_parent(thread) if thread is not None else None
        if parent is None:
            return
        place = translate.place_of(parent)
        if not self.scope.allows(place):
            return
        # A failure is said where the pin's replies go: in the parent, under the starter.
        send = ChannelSend(parent, parent.get_partial_message(thread.id))
        try:
            if not await self._starter_is_pinned(parent, thread.id):
                return
            if not await self.claim(claim):
                return
            async with self._pin_locks.setdefault(parent.id, asyncio.Lock()):
                await self._update_thread(parent, thread.id, place, writer)
        except Exception:  # noqa: BLE001 (reported with a reference, never silent)
            await self._failed(f"updating the pinned thread {thread.id} after {why}", send)

    async def _starter_is_pinned(self, parent: discord.TextChannel, thread_id: int) -> bool:
        """Whether the message a thread was started from is pinned: as this front-end last
        saw the parent's pins (each pins update refreshes that), else as the starter said
        when fetched, once per thread (after a restart, before any pins update)."""
        seen = self._pinned_at.get(parent.id)
        if seen is not None:
            return thread_id in seen
        if thread_id not in self._starter_pinned:
            starter = await fetch_starter(parent, thread_id)
            self._starter_pinned[thread_id] = starter is not None and starter.pinned
            if len(self._starter_pinned) > STARTERS_REMEMBERED:  # the oldest answer goes first
                del self._starter_pinned[next(iter(self._starter_pinned))]
        return self._starter_pinned[thread_id]

    async def _update_thread(self, parent: discord.TextChannel, thread_id: int, place: Place, writer: Person) -> None:
        """The pinned thread's source, if the bot holds one, takes the thread as it is now, as a
        change by ``writer`` (who wrote or edited the message in it: it counts against their limits).
        The starter is fetched here, under the channel's pin lock, so that an edit of it
        handled meanwhile is not undone by its older text."""
        starter = await fetch_starter(parent, thread_id)
        if starter is None or not starter.pinned or starter.author.id == self.bot_id:
            return  # gone or unpinned since (the pins update handles that), or an answer: no source
        if starter.thread is None:  # not in discord.py's cache: without its replies the source would lose them
            log.warning("thread %s of pinned message %s is not known here; its source is left as it is",
                        thread_id, starter.id)
            return
        pin = await self._pin_of(parent, starter, place, writer)
        await self.raptor.handler.handle(replace(pin, edited=True, grew=True), ChannelSend(parent, starter))

    async def _pins_changed(self, channel: Any, last_pin: Any = None) -> None:
        """Adds newly pinned messages and removes unpinned ones (see :func:`translate.pin_changes`).
        One channel's changes are handled one at a time, so a burst of pins adds each once."""
        with self._tracked():
            place = translate.place_of(channel)
            if not self.scope.allows(place):
                return
            lock = self._pin_locks.setdefault(channel.id, asyncio.Lock())
            async with lock:
                try:
                    await self._sync_pins(channel, place, _stamp(last_pin))
                except Exception:  # noqa: BLE001 (reported with a reference, never silent)
                    await self._failed(f"reading the pins of channel {channel.id}", ChannelSend(channel))

    async def _sync_pins(self, channel: Any, place: Place, last_pin: str = "") -> None:
        """Compares the channel's pins with the bot's pinned-message sources and acts on the
        difference, each change only where the delivery ledger names it first."""
        pinned = [message async for message in channel.pins(limit=None)]
        seen_before = self._pinned_at.get(channel.id, {})
        self._pinned_at[channel.id] = {m.id: _stamp(m.pinned_at) or last_pin for m in pinned}
        sources = await self.raptor.sources(place.key)
        files_only = [m.id for m in pinned if m.attachments and not m.content.strip()]
        changes = translate.pin_changes(channel.id, [m.id for m in pinned], sources, files_only)
        by_id = {message.id: message for message in pinned}
        first = self.claim
        added = [message_id for message_id in changes.added
                 if await first(pin_key(channel.id, message_id, self._pinned_at[channel.id][message_id]))]
        removed = [external_id for external_id in changes.removed
                   if await first(unpin_key(external_id, seen_before, last_pin))]
        if not added and not removed:
            return
        async with keep_typing(channel):
            for message_id in added:
                message = by_id[message_id]
                try:
                    await self._pin(channel, message, place)
                except Exception:  # one pin's failure must not hold the others up  # noqa: BLE001 (reported with a reference, never silent)
                    await self._failed(f"adding pinned message {message_id}", ChannelSend(channel, message))
            for external_id in removed:
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
            await hand_over_attachment(self.raptor, message, attachment, place, translate.PINNER, external_id)
        pin = await self._pin_of(channel, message, place)
        if not pin.text and not pin.replies and message.attachments:
            return
        await self.raptor.handler.handle(pin, ChannelSend(channel, message))

    async def _pin_of(self, channel: Any, message: discord.Message, place: Place,
                      person: Person = translate.PINNER) -> Pin:
        """A pinned message's text, with its thread's messages when it starts one, as a Pin by
        ``person`` (a pin's is :data:`~adapters.discord_bot.translate.PINNER`; an edit's, its editor)."""
        text = translate.question_text(message.content, self.bot_id, translate.mention_names(message))
        replies = await self._thread_replies(message)
        author = getattr(message.author, "display_name", "") or message.author.name
        external_id = translate.pin_external_id(channel.id, message.id)
        return Pin(place.key, person, text, external_id, link=message.jump_url, author=author,
                   replies=replies)

    async def _thread_replies(self, message: discord.Message) -> tuple[str, ...]:
        """The messages of the thread a pinned message starts ((), when it starts none)."""
        thread = message.thread
        if thread is None:
            return ()
        history = [m async for m in thread.history(limit=PINNED_THREAD_LIMIT, oldest_first=True)]
        return translate.thread_replies(history, self.bot_id)


def pin_key(channel_id: int, message_id: int, pinned_at: str) -> str:
    """The delivery key of pinning a message (again: ``pinned_at`` tells the times apart)."""
    return f"discord:pin:{channel_id}:{message_id}:{pinned_at}"


def unpin_key(external_id: str, pinned_at: Mapping[int, str], last_pin: str) -> str:
    """The delivery key of unpinning the message of a pinned-message source: the time it was
    pinned when this front-end saw it pinned, else the update's last pin time."""
    channel_id, _, message_id = external_id.rpartition("/")
    when = pinned_at.get(int(message_id), "") if message_id.isdigit() else ""
    return f"discord:unpin:{channel_id}:{message_id}:{when or 'last-' + last_pin}"


def message_thread_parent(channel: Any) -> discord.TextChannel | None:
    """The channel a thread may have been started from a message of (its parent), or None:
    not a thread, a private thread (never started from a message), a forum post (its first
    message is in the thread itself), or a parent discord.py does not know."""
    if not translate.is_thread(channel) or translate.is_private_thread(channel):
        return None
    parent = channel.parent
    return parent if isinstance(parent, discord.TextChannel) else None


async def fetch_starter(parent: discord.TextChannel, thread_id: int) -> discord.Message | None:
    """The message a thread was started from (it has the thread's id, in the parent), or
    None when there is none (a thread started without one) or the bot may not read it."""
    try:
        return await parent.fetch_message(thread_id)
    except (discord.NotFound, discord.Forbidden) as exc:
        log.debug("no readable starter message %s in channel %s: %s", thread_id, parent.id, exc)
        return None


def _stamp(moment: Any) -> str:
    """A pin time as text (ISO 8601); empty when Discord gave none."""
    return moment.isoformat() if isinstance(moment, datetime) else ""
