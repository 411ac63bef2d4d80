"""An attachment handed to the bot as an :class:`~bot.neutral.Upload`: a message's files
(questions, library channels) and a pinned message's files alike.

Contract: a file over the bot's upload limit is refused before it is downloaded; a failed
download is logged under a fresh reference and said in the channel. Either way nothing
reaches the handler, and nothing raises.
"""

from __future__ import annotations

import logging

import discord

from adapters.discord_bot import render
from adapters.discord_bot.sending import ChannelSend
from adapters.discord_bot.translate import Place
from bot.errors import log_failure
from bot.neutral import Person, Send, Upload
from bot.runtime import Assistant

log = logging.getLogger(__name__)


async def hand_over_attachment(bot: Assistant, message: discord.Message, attachment: discord.Attachment, place: Place,
                               person: Person, external_id: str, send: Send | None = None) -> None:
    """Downloads one attachment and hands it to the handler as an Upload; a file over
    the size limit is refused before downloading it. Replies go to ``send``, by default in
    the message's channel, as replies to it."""
    send = send or ChannelSend(message.channel, message)
    limit = bot.max_upload_bytes
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
    await bot.handler.handle(upload, send)
