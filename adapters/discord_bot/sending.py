"""Sending the bot's replies to Discord: to a channel (as a reply or in a thread), or as an
interaction's follow-ups; and showing "typing" while the bot works.

Both senders never raise: a failed post is logged with a short reference and a short
message naming it is posted where it can be.

:class:`ChannelSend` can also show an answer while a language model writes it
(:class:`DiscordDraft`; a slash command's reply, :class:`InteractionDraft`): the first words are posted as the reply as soon as they come, then
the message is edited at most every :data:`EDIT_EVERY_S` (Discord allows 5 edits per 5 s in a
channel; discord.py waits out a 429 by itself), and the last edit puts the finished reply,
rendered as it would have been posted, in its place.

With ``components_v2`` (``discord.components_v2``, given where answers go), an answer that fits
is posted, or its draft finished, as one Components v2 message, and in today's form when Discord
refuses that (:mod:`~adapters.discord_bot.posting`).

Every message and edit is sent with :data:`~adapters.discord_bot.posting.ALLOWED_MENTIONS`, none: what a reply says never
notifies anyone, whatever a document or a model put in it (the rendering also shows such
mentions as inert text, :func:`~adapters.discord_bot.render.safe_text`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

import discord

from adapters.discord_bot import render
from adapters.discord_bot.posting import ALLOWED_MENTIONS, message_arguments, post_reply, try_layout
from adapters.discord_bot.render import Outgoing
from bot.errors import log_failure
from bot.neutral import Reply, Send

log = logging.getLogger(__name__)

TYPING_EVERY_S = 8.0  # Discord shows "typing" for 10 s after each request
TYPING_TIMEOUT_S = 2.0  # a slow typing request must not hold the work up
FOLLOWUP_TOKEN_S = 14 * 60  # interaction tokens last 15 minutes; past this, post in the channel instead
EDIT_EVERY_S = 1.25  # between two edits of a draft: 4 per 5 s, Discord allows 5 per 5 s in a channel (room for the last)


# -- sending ---------------------------------------------------------------------------------


class ChannelSend:
    """The ``Send`` of an event that came as a message or a pin: posts in its channel (or
    thread), each reply's first message as a Discord reply to ``reply_to``; a reply naming
    another thread of the server (``Reply.thread``) goes there. With
    ``thread_name``, the first reply opens a thread from ``reply_to`` and everything
    goes there (falling back to the channel if the thread cannot be made).

    A failure to post is logged with a reference and a short message naming it is
    posted instead; it never raises (the failure is reported, not passed on)."""

    def __init__(self, channel: Any, reply_to: discord.Message | discord.PartialMessage | None = None,
                 thread_name: str | None = None, *, components_v2: bool = False) -> None:
        self._channel = channel
        self._reply_to = reply_to
        self._thread_name = thread_name
        self.components_v2 = components_v2
        self._destination: Any = None
        self._lock = asyncio.Lock()

    async def __call__(self, reply: Reply) -> None:
        async with self._lock:  # one reply's messages stay together, in order
            destination = await self._target()
            if reply.thread and reply.thread != str(getattr(destination, "id", "")):
                destination = await self._thread(reply.thread) or destination
            reference = None
            if self._reply_to is not None and destination is self._channel:
                reference = self._reply_to.to_reference(fail_if_not_exists=False)
            async def post(arguments: dict[str, Any], first: bool) -> object:
                return await destination.send(**arguments, reference=reference if first else None)

            try:
                await post_reply(reply, post, self.components_v2)
            except Exception:
                reference_id = log_failure(log, "posting a reply (%s: %.60r) in channel %s failed (reference %s)",
                                                reply.kind.value, reply.text, destination.id)
                await self._notify(destination, reference_id)

    def draft(self, thread: str = "") -> DiscordDraft:
        """A draft of an answer, posted where this send posts (a :class:`~bot.neutral.DraftingSend`)."""
        return DiscordDraft(self)

    async def post_first(self, content: str) -> discord.Message:
        """Posts ``content`` as this send's first message (a reply to ``reply_to`` in its channel); raises."""
        async with self._lock:
            destination = await self._target()
            reference = None
            if self._reply_to is not None and destination is self._channel:
                reference = self._reply_to.to_reference(fail_if_not_exists=False)
            message: discord.Message = await destination.send(content=content, reference=reference,
                                                              allowed_mentions=ALLOWED_MENTIONS)
            return message

    async def report(self, reply: Reply) -> None:
        """Logs a failure to deliver ``reply`` (in an ``except`` block) and says so where the replies go."""
        destination = await self.destination()
        reference_id = log_failure(log, "posting a reply (%s: %.60r) in channel %s failed (reference %s)",
                                   reply.kind.value, reply.text, getattr(destination, "id", "?"))
        await self._notify(destination, reference_id)

    async def destination(self) -> Any:
        """Where the replies go: the thread, opened now if it is to be and is not yet, or the channel."""
        async with self._lock:
            return await self._target()

    async def _target(self) -> Any:
        if self._destination is not None:
            return self._destination
        self._destination = self._channel
        if self._thread_name and isinstance(self._reply_to, discord.Message):
            try:
                self._destination = await self._reply_to.create_thread(name=self._thread_name)
            except (discord.HTTPException, OSError) as exc:
                log.warning("cannot open a thread on message %s (%s); replying in the channel", self._reply_to.id, exc)
        return self._destination

    async def _thread(self, thread_id: str) -> Any:
        """Another thread of this channel's server, named by a reply (a note for an answer
        given there); None when it is gone or cannot be seen (the reply goes where this
        send posts instead)."""
        guild = getattr(self._channel, "guild", None)
        if guild is None or not thread_id.isdigit():
            return None
        thread = guild.get_thread(int(thread_id))
        if thread is not None:
            return thread
        try:
            return await guild.fetch_channel(int(thread_id))
        except (discord.HTTPException, OSError) as exc:
            log.info("thread %s cannot be reached (%s); replying where the event came from", thread_id, exc)
            return None

    async def _notify(self, destination: Any, reference: str) -> None:
        notice = render.send_failed_reply(reference)
        try:
            await destination.send(content=render.reply_text(notice), allowed_mentions=ALLOWED_MENTIONS)
        except Exception:
            log.exception("could not post the failure notice either (reference %s)", reference)


class _EditedDraft:
    """An answer shown while it is written, in one message edited as it grows (see the module
    docstring); :meth:`_post_first`, :meth:`_post_more` and :meth:`_report` say where it goes.
    An :class:`~bot.neutral.AnswerDraft`."""

    interval_s = EDIT_EVERY_S

    def __init__(self, send: Send, components_v2: bool) -> None:
        self._whole = send  # posts a reply whole, as if nothing had been shown
        self._components_v2 = components_v2  # the finished answer as one Components v2 message, if it can be
        self._message: discord.Message | discord.WebhookMessage | None = None

    async def show(self, text: str) -> None:
        content = render.draft_content(text)
        if self._message is None:
            self._message = await self._post_first(content)
        else:
            await self._message.edit(content=content, allowed_mentions=ALLOWED_MENTIONS)

    async def finish(self, reply: Reply) -> None:
        """The finished reply in the draft's place: its first message by an edit, the others
        posted after it. A first message with files cannot be an edit, nor can a private reply
        take a public draft's place: then the draft goes and the reply is posted whole. Never
        raises (a failure is reported, as by the ``Send``)."""
        if self._message is None:
            await self._whole(reply)
            return
        first, *rest = render.render_reply(reply)
        message = self._message
        try:
            if await try_layout(reply, self._components_v2, lambda layout: message.edit(
                    content=None, embeds=[], view=layout, allowed_mentions=ALLOWED_MENTIONS)):
                return  # Discord's rule for an edit into Components v2: content null, embeds empty
            if first.files or reply.private:
                await self._message.delete()
                await self._whole(reply)
                return
            arguments = message_arguments(first)
            await self._message.edit(content=arguments.get("content"), embeds=arguments.get("embeds", []),
                                     view=arguments.get("view"), allowed_mentions=ALLOWED_MENTIONS)
            for outgoing in rest:
                await self._post_more(outgoing)
        except Exception:  # noqa: BLE001 (reported with a reference, never silent)
            await self._report(reply)

    async def _post_first(self, content: str) -> discord.Message | discord.WebhookMessage:
        raise NotImplementedError

    async def _post_more(self, outgoing: Outgoing) -> None:
        raise NotImplementedError

    async def _report(self, reply: Reply) -> None:
        raise NotImplementedError


class DiscordDraft(_EditedDraft):
    """A draft in a channel: the first words are the reply to the question's message."""

    def __init__(self, send: ChannelSend) -> None:
        super().__init__(send, send.components_v2)
        self._send = send

    async def _post_first(self, content: str) -> discord.Message:
        return await self._send.post_first(content)

    async def _post_more(self, outgoing: Outgoing) -> None:
        destination = await self._send.destination()
        await destination.send(**message_arguments(outgoing))

    async def _report(self, reply: Reply) -> None:
        await self._send.report(reply)


class InteractionSend:
    """The ``Send`` of a slash command or button press: follow-ups to the interaction.

    After a "thinking" defer the first follow-up replaces the deferred message and
    takes its visibility (Discord's rule); when a reply's privacy differs from the
    defer's, the deferred message is deleted first so the follow-up has its own.
    ``always_private`` makes every reply ephemeral (button presses). Past the
    interaction token's life (15 minutes; a long rebuild's result) replies are posted
    in the channel instead. Like :class:`ChannelSend`, it reports failures, never raises.
    """

    def __init__(self, client: discord.Client, interaction: discord.Interaction, always_private: bool = False, *,
                 components_v2: bool = False) -> None:
        self._client = client
        self._interaction = interaction
        self._always_private = always_private
        self.components_v2 = components_v2
        self._pending = False  # a "thinking" message waits for its first follow-up
        self._pending_private = False
        self._started = time.monotonic()
        self._lock = asyncio.Lock()

    async def defer(self, thinking: bool, ephemeral: bool) -> bool:
        """Acknowledges the interaction (first, within Discord's 3 s); False if that failed
        (then it is logged, and said in the channel where possible)."""
        try:
            await self._interaction.response.defer(thinking=thinking, ephemeral=ephemeral)
        except Exception:
            reference = log_failure(log, "acknowledging interaction %s failed (reference %s)", self._interaction.id)
            channel = self._channel()
            if channel is not None:
                with suppress(Exception):
                    await channel.send(content=render.reply_text(render.failure_reply(reference)),
                                       allowed_mentions=ALLOWED_MENTIONS)
            return False
        self._pending, self._pending_private = thinking, ephemeral
        return True

    async def __call__(self, reply: Reply) -> None:
        private = reply.private or self._always_private
        async def post(arguments: dict[str, Any], first: bool) -> None:
            await self._send(arguments, private)

        async with self._lock:
            try:
                await post_reply(reply, post, self.components_v2 and not private)
            except Exception:
                reference = log_failure(log, "posting a reply (%s: %.60r) to interaction %s failed (reference %s)",
                                        reply.kind.value, reply.text, self._interaction.id)
                await self._notify(reference, private)

    def draft(self, thread: str = "") -> InteractionDraft:
        """An answer shown while it is written, in the interaction's reply (``thread`` is
        where the interaction happened already)."""
        return InteractionDraft(self)

    async def finish(self) -> None:
        """After the handler returned: a "thinking" message nothing replaced is removed, so
        it does not think forever."""
        async with self._lock:
            if self._pending:
                self._pending = False
                with suppress(discord.HTTPException, OSError):
                    await self._interaction.delete_original_response()

    @property
    def interaction_id(self) -> int:
        return self._interaction.id

    async def first_follow_up(self, content: str) -> discord.WebhookMessage:
        """A streamed answer's first words, as the first public follow-up (it replaces the
        "thinking" message). Raises discord.py's errors, for the draft's pacer to log."""
        async with self._lock:
            if self._pending and self._pending_private:
                with suppress(discord.NotFound):
                    await self._interaction.delete_original_response()
            message = await self._interaction.followup.send(content=content, wait=True,
                                                            allowed_mentions=ALLOWED_MENTIONS)
            self._pending = False
            return message

    async def follow_up(self, outgoing: Outgoing) -> None:
        """One more public follow-up (a long answer's next message). Raises discord.py's errors."""
        async with self._lock:
            await self._send(message_arguments(outgoing), private=False)

    async def notify(self, reference: str) -> None:
        """Says, where it can, that a reply could not be posted (``reference`` is in the log)."""
        await self._notify(reference, private=False)

    async def _send(self, arguments: dict[str, Any], private: bool) -> None:
        """Posts one message (its ``send`` arguments) as a follow-up; raises discord.py's errors."""
        if time.monotonic() - self._started > FOLLOWUP_TOKEN_S:
            channel = self._channel()
            if channel is not None:
                await channel.send(**arguments)
                return
        if self._pending and private != self._pending_private:
            with suppress(discord.NotFound):
                await self._interaction.delete_original_response()
            self._pending = False
        await self._interaction.followup.send(**arguments, ephemeral=private, wait=True)
        self._pending = False

    async def _notify(self, reference: str, private: bool) -> None:
        content = render.reply_text(render.send_failed_reply(reference))
        try:
            await self._interaction.followup.send(content=content, ephemeral=private, allowed_mentions=ALLOWED_MENTIONS)
            return
        except Exception:  # noqa: BLE001 (reported with a reference, never silent)
            log.warning("could not post the failure notice as a follow-up (reference %s)", reference)
        channel = self._channel()
        if channel is not None:
            with suppress(Exception):
                await channel.send(content=content, allowed_mentions=ALLOWED_MENTIONS)

    def _channel(self) -> Any:
        if self._interaction.channel is None and self._interaction.channel_id is not None:
            return self._client.get_partial_messageable(self._interaction.channel_id)
        return self._interaction.channel


class InteractionDraft(_EditedDraft):
    """A draft of a slash command's answer: its first words are the first follow-up (which
    takes the "thinking" message's place)."""

    def __init__(self, send: InteractionSend) -> None:
        super().__init__(send, send.components_v2)
        self._send = send

    async def _post_first(self, content: str) -> discord.WebhookMessage:
        return await self._send.first_follow_up(content)

    async def _post_more(self, outgoing: Outgoing) -> None:
        await self._send.follow_up(outgoing)

    async def _report(self, reply: Reply) -> None:
        reference = log_failure(log, "finishing a streamed answer to interaction %s failed (reference %s)",
                                self._send.interaction_id)
        await self._send.notify(reference)


class Typing:
    """The "typing" of one channel, refreshed until :meth:`stop` (see :func:`keep_typing`)."""

    def __init__(self, channel: Any) -> None:
        self._channel = channel
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if await _type_once(self._channel):
            self._task = asyncio.create_task(_keep_typing(self._channel))

    def stop(self) -> None:
        """No more typing requests (Discord's indicator fades within 10 s, or at the next message)."""
        if self._task is not None:
            self._task.cancel()

    async def close(self) -> None:
        self.stop()
        if self._task is not None:
            with suppress(asyncio.CancelledError):
                await self._task


@asynccontextmanager
async def keep_typing(channel: Any) -> AsyncIterator[Typing]:
    """Shows "typing" in ``channel`` while the block runs: the first request before the
    block starts (it is the person's sign that the bot got the message), then one every
    few seconds. Best effort: a refused or slow typing request is logged and the work
    goes on."""
    typing = Typing(channel)
    await typing.start()
    try:
        yield typing
    finally:
        await typing.close()


async def _type_once(channel: Any) -> bool:
    try:
        await asyncio.wait_for(channel.typing(), TYPING_TIMEOUT_S)
        return True
    except (discord.HTTPException, OSError, TimeoutError) as exc:
        log.info("cannot show typing in channel %s: %s", getattr(channel, "id", "?"), exc or type(exc).__name__)
        return False


async def _keep_typing(channel: Any) -> None:
    while True:
        await asyncio.sleep(TYPING_EVERY_S)
        if not await _type_once(channel):
            return

