"""Discord messages: questions, follow-ups in threads, and files to learn from.

Contract (:class:`MessageHandling`, a part of :class:`~adapters.discord_bot.client.DiscordClient`):

* a message that mentions the bot (or any DM) is a question, answered as a reply, or
  in a new thread with ``discord.reply_in_thread``; a lone "help" is the help command;
* every message in a post of a forum the bot serves (``discord.forums``) is a question, no
  mention needed; the message that opens a post asks with the post's title
  (:func:`bot.commands.post_question`), and its answer is sent as :meth:`answer_send`
  says (the forums part, :class:`~adapters.discord_bot.forums.ForumHandling`, offers to mark
  the post solved under it);
* a message in a thread where the bot has posted is a follow-up (no mention needed),
  with the thread's earlier messages as context. Whether the bot posted is read from
  the thread's history each time: nothing is remembered between events;
* attachments of a message that mentions the bot (not merely posted in a forum post), and
  of every message in a ``library_channels`` channel, are downloaded and added as sources;
* a message in a thread started from a pinned message that is a source updates that
  source first (:meth:`~adapters.discord_bot.pins.PinHandling.thread_grew`), then is
  handled as any message in a thread;
* other bots, system messages and places the configuration does not allow are
  ignored without a word. The bot shows it is typing while it works;
* every front-end's gateway connection receives every message: one the bot would act on
  is handled only where the bot's delivery ledger names it first
  (``discord:message:<message id>``).
"""

from __future__ import annotations

import logging
from typing import Any

import discord

from adapters.discord_bot import forum_posts, translate
from adapters.discord_bot.lifecycle import ClientCore
from adapters.discord_bot.sending import ChannelSend, Typing, keep_typing
from adapters.discord_bot.translate import Place
from adapters.discord_bot.uploads import hand_over_attachment
from bot import commands
from bot.neutral import Command, Person, Question, Send

log = logging.getLogger(__name__)

HISTORY_LIMIT = 20  # messages of a thread read to decide whether the bot is in it, and for context


class MessageHandling(ClientCore):
    """The client's ``on_message``; see the module docstring."""

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
            if translate.is_thread(message.channel):
                await self.thread_grew(message)  # before answering: a follow-up then reads the updated source
            try:
                await self._message(message, place)
            except Exception:  # noqa: BLE001 (reported with a reference, never silent)
                await self._failed(f"handling message {message.id}", ChannelSend(message.channel, message))

    async def thread_grew(self, message: discord.Message, change: str = "") -> None:
        """A message was posted in a thread. Nothing here: the pins part of the client,
        :class:`~adapters.discord_bot.pins.PinHandling` (before this one in the client's
        bases), overrides it to keep a pinned thread's source up to date."""

    def answer_send(self, message: discord.Message, place: Place) -> Send:
        """How the answer to ``message`` at ``place`` is sent: a reply in its channel. The forums
        part (before this one in the client's bases) overrides it for forum posts."""
        return ChannelSend(message.channel, message, components_v2=self.settings.components_v2)

    async def _message(self, message: discord.Message, place: Place) -> None:
        asked = place.guild_id is None or translate.mentions_bot(message, self.bot_id)
        in_forum = forum_posts.in_served_forum(place, self.settings.forums)
        addressed = asked or in_forum
        uploads = list(message.attachments) if asked or self.scope.is_library(place) else []
        in_thread = translate.is_thread(message.channel)
        context: tuple[str, ...] = ()
        follow_up = False
        if in_thread:
            # The bot's offers to mark a forum post solved are no part of the conversation.
            history = [m for m in await self._history(message) if not forum_posts.is_solved_offer(m)]
            follow_up = not addressed and (
                translate.bot_posted(history, self.bot_id) or getattr(message.channel, "owner_id", None) == self.bot_id
            )
            context = translate.context_of(history, self.bot_id) if addressed or follow_up else ()
        if not (uploads or addressed or follow_up):
            return
        if not await self.claim(message_key(message)):
            log.debug("message %s is handled by another front-end (or was already)", message.id)
            return
        person = self._message_person(message)
        async with keep_typing(message.channel) as typing:
            for attachment in uploads:
                external_id = translate.upload_external_id(message.channel.id, message.id, attachment.id)
                await hand_over_attachment(self.raptor, message, attachment, place, person, external_id)
            text = translate.question_text(message.content, self.bot_id, translate.mention_names(message))
            if in_forum and forum_posts.opens_post(message.id, place):
                text = commands.post_question(str(getattr(message.channel, "name", "") or ""), text)
            if not text and (uploads or not asked):
                return  # the files were the point, or a message in a forum post says nothing to answer
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
        v2 = self.settings.components_v2
        if not new_thread:
            await self.raptor.handler.handle(event, self.answer_send(message, place))
            return
        send = ChannelSend(message.channel, message, translate.thread_name(text), components_v2=v2)
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

    def _message_person(self, message: discord.Message) -> Person:
        """The message's author, and whether they manage the channel it was posted in."""
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


def message_key(message: discord.Message) -> str:
    """The delivery key of a message: its id, unique across Discord."""
    return f"discord:message:{message.id}"


def place_manager(channel: Any, author: Any) -> bool:
    """Manage Messages for a message's author, from discord.py's cached roles (False if unknown)."""
    if getattr(channel, "guild", None) is None:
        return True
    try:
        return bool(channel.permissions_for(author).manage_messages)
    except (AttributeError, TypeError, discord.ClientException):
        return False

