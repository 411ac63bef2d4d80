"""Discord deletions, followed: what people delete is forgotten, and so, after the retention
period, is what the bot learned in a channel it can no longer serve.

Contract (:class:`RemovalHandling`, a part of :class:`~adapters.discord_bot.client.DiscordClient`;
it translates, the bot's ``handler.follow`` decides):

* ``MESSAGE_DELETE`` and ``MESSAGE_DELETE_BULK``, read raw so that messages discord.py never
  cached count too: the sources of each message go, its pin (``<channel>/<message>``) and
  its attachments (``<channel>/<message>/<attachment>``) alike; a reply deleted in a pinned
  thread leaves the thread's source (``PinHandling.thread_reply_deleted``);
* ``MESSAGE_UPDATE`` of a message that lost attachments (or whose earlier attachments
  discord.py does not know): the sources of the attachments it no longer carries go, the
  message's text (pinned, or added by a message command) and the files it keeps stay (the pins
  part handles the text of a pinned one);
* a guild channel deleted, or a private thread deleted (a channel of its own): the channel is
  gone (:class:`~bot.neutral.ChannelGone`); a public thread deleted: the sources of its
  messages go from its parent channel's tree;
* the bot removed from a guild (``GUILD_DELETE`` without ``unavailable``): every channel of the
  guild is gone; the bot added to a guild again: each of its channels is back.

Every front-end receives each of these; a deletion or an edit is followed by the first to claim
``discord:deleted:<channel>:<message>`` (``discord:files-edited:<channel>:<message>:<edited at>``).
Channel changes are followed by each front-end (they only unschedule here, and the pending
forget in the store is written once). Failures are logged by the handler with a reference:
there is nobody to tell.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import discord

from adapters.discord_bot import forum_posts, translate
from adapters.discord_bot.pins import PinHandling
from adapters.discord_bot.translate import Place
from bot.neutral import ChannelBack, ChannelGone, Deleted

log = logging.getLogger(__name__)


class RemovalHandling(PinHandling):
    """The client's deletion and removal events; see the module docstring."""

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        await self._messages_deleted(payload.channel_id, payload.guild_id, (payload.message_id,))

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        await self._messages_deleted(payload.channel_id, payload.guild_id, sorted(payload.message_ids))

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        """The pins part first (a pinned message's text), then the attachments it lost, if any."""
        await super().on_raw_message_edit(payload)
        message = payload.message
        before = payload.cached_message
        if message.author.id == self.bot_id:
            return  # the bot's own messages (answers being written) are never sources
        if before is not None and {a.id for a in before.attachments} <= {a.id for a in message.attachments}:
            return  # discord.py knows it lost none: most edits cost nothing
        with self._tracked():
            place = translate.place_of(message.channel, payload.guild_id)
            stamp = message.edited_at.isoformat() if message.edited_at else "?"
            claim = f"discord:files-edited:{message.channel.id}:{message.id}:{stamp}"
            if not self.scope.allows(place) or not await self.raptor.first_delivery(claim):
                return
            external_id = translate.pin_external_id(message.channel.id, message.id)
            kept = tuple(translate.upload_external_id(message.channel.id, message.id, a.id) for a in message.attachments)
            kept += (translate.knowledge_external_id(message.channel.id, message.id),)  # its text, not a file
            await self.raptor.handler.follow(Deleted(place.key, external_ids=(external_id,), parts_of=(external_id,),
                                                     kept=kept, files_kept=tuple(a.filename for a in message.attachments)))

    async def on_guild_channel_delete(self, channel: discord.abc.GuildChannel) -> None:
        with self._tracked():
            await self.raptor.handler.follow(ChannelGone(translate.place_of(channel).key, "the channel was deleted"))

    async def on_raw_thread_delete(self, payload: discord.RawThreadDeleteEvent) -> None:
        """A private thread is a channel of its own: gone. A public one's messages were part of
        its parent's tree: their sources go from there."""
        place = Place(payload.guild_id, payload.thread_id, payload.parent_id,
                      private=payload.thread_type not in translate.OPEN_THREADS)
        with self._tracked():
            if place.private:
                await self.raptor.handler.follow(ChannelGone(place.key, "the private thread was deleted"))
            elif await self.raptor.first_delivery(f"discord:thread-deleted:{payload.thread_id}"):
                solved = forum_posts.solved_external_id(payload.thread_id)  # a forum post's, if it was solved
                await self.raptor.handler.follow(Deleted(place.key, external_ids=(solved,),
                                                         parts_of=(str(payload.thread_id),)))

    async def on_guild_remove(self, guild: discord.Guild) -> None:
        with self._tracked():
            key = Place(guild.id, guild.id).key
            await self.raptor.handler.follow(ChannelGone(key, "the bot was removed from the server",
                                                         whole_workspace=True))

    async def on_guild_join(self, guild: discord.Guild) -> None:
        with self._tracked():
            for channel in guild.channels:
                await self.raptor.handler.follow(ChannelBack(translate.place_of(channel).key))

    async def _messages_deleted(self, channel_id: int, guild_id: int | None, message_ids: Iterable[int]) -> None:
        """The sources of each deleted message go (its pin and its attachments)."""
        with self._tracked():
            place = await self._place_of(channel_id, guild_id)
            if not self.scope.allows(place):
                return
            mine = [m for m in message_ids if await self.raptor.first_delivery(f"discord:deleted:{channel_id}:{m}")]
            if not mine:
                return
            ids = tuple(translate.pin_external_id(channel_id, m) for m in mine)
            await self.raptor.handler.follow(Deleted(place.key, external_ids=ids, parts_of=ids))
            for message_id in mine:  # a reply of a pinned thread: the thread's source loses it
                await self.thread_reply_deleted(channel_id, message_id)

    async def _place_of(self, channel_id: int, guild_id: int | None) -> Place:
        """The place of a channel known by id: from discord.py's cache, else fetched (a thread's
        parent decides its tree), else taken as a channel of its own."""
        channel = self.get_channel(channel_id)
        if channel is None and guild_id is not None:
            try:
                channel = await self.fetch_channel(channel_id)
            except (discord.HTTPException, OSError) as exc:
                log.warning("cannot fetch channel %s to follow a deletion there: %s", channel_id, exc)
        if channel is None:
            return Place(guild_id, channel_id)
        return translate.place_of(channel, guild_id)
