"""Discord's message commands (right-click a message, Apps): "Add to channel knowledge" and
"Ask about this message".

Contract (:class:`MessageCommandHandling`, a part of :class:`~adapters.discord_bot.client.DiscordClient`;
:func:`message_commands` declares the two for the command tree):

* both read the message from the interaction alone (``data.resolved.messages``, which discord.py
  hands the callback): Discord puts the message's content and attachments there whether or not
  the bot has the privileged Message Content intent, and nothing is fetched;
* both are deferred at once (a public "thinking") and answered as follow-ups, as
  ``/raptor`` is (:meth:`~adapters.discord_bot.interactions.InteractionHandling.run_deferred`);
  where the bot is not enabled the person is told so privately;
* **Add to channel knowledge**: the message's files become sources as uploads do
  (``<channel>/<message>/<attachment>``, so they are the same sources a library channel or a
  mention would make), and its text one more source, ``<channel>/<message>/text``, never the
  pin's id: the pins part would take it for an unpinned message. It is the handler's pin and
  upload path, so the same rules hold: a channel admin (Manage Messages, or ``bot.admins``) is
  held only by the channel's byte budget, anyone else also by their uploads per hour; a
  refusal is said privately. The text is the message as it was when added (an edit does not
  follow it; deleting the message removes it). The bot's own answers are never sources;
* **Ask about this message**: the message's text is the question, answered from the channel's
  tree exactly as ``/raptor ask`` with that text would be: retrieval runs on the message's own
  words, so "what does our material say about this?" needs no typing. A message without text
  is answered privately that there is nothing to ask.
"""

from __future__ import annotations

import logging

import discord
from discord import app_commands

from adapters.discord_bot import translate
from adapters.discord_bot.interactions import InteractionHandling
from adapters.discord_bot.sending import InteractionSend
from adapters.discord_bot.translate import Place
from adapters.discord_bot.uploads import hand_over_attachment
from bot.neutral import Person, Pin, Question, Reply, ReplyKind

log = logging.getLogger(__name__)

ADD_TO_KNOWLEDGE = "Add to channel knowledge"
ASK_ABOUT_MESSAGE = "Ask about this message"
NOTHING_TO_ADD_TEXT = "That message has no text or files, so there is nothing to add."
ANSWERS_NOT_SOURCES_TEXT = "That is one of my answers: answers are not sources, so nothing was added."
NOTHING_TO_ASK_TEXT = "That message has no text to ask about."


class MessageCommandHandling(InteractionHandling):
    """The client's message commands; see the module docstring."""

    async def add_to_knowledge(self, interaction: discord.Interaction, message: discord.Message) -> None:
        """"Add to channel knowledge" on ``message`` (as the interaction resolved it)."""
        async def add(place: Place, person: Person, send: InteractionSend) -> None:
            if message.author.id == self.bot_id:
                await send(Reply(ReplyKind.INFO, ANSWERS_NOT_SOURCES_TEXT, private=True))
                return
            text = translate.question_text(message.content, self.bot_id, translate.mention_names(message))
            if not text and not message.attachments:
                await send(Reply(ReplyKind.INFO, NOTHING_TO_ADD_TEXT, private=True))
                return
            channel_id = message.channel.id
            for attachment in message.attachments:
                external_id = translate.upload_external_id(channel_id, message.id, attachment.id)
                await hand_over_attachment(self.raptor, message, attachment, place, person, external_id, send)
            if text:
                author = getattr(message.author, "display_name", "") or message.author.name
                pin = Pin(place.key, person, text, translate.knowledge_external_id(channel_id, message.id),
                          link=message.jump_url, author=author)
                await self.raptor.handler.handle(pin, send)

        await self.run_deferred(interaction, f"adding message {message.id} to the channel's knowledge", add)

    async def ask_about(self, interaction: discord.Interaction, message: discord.Message) -> None:
        """"Ask about this message" on ``message`` (as the interaction resolved it)."""
        async def ask(place: Place, person: Person, send: InteractionSend) -> None:
            text = translate.message_text(message, self.bot_id)
            if not text:
                await send(Reply(ReplyKind.INFO, NOTHING_TO_ASK_TEXT, private=True))
                return
            await self.raptor.handler.handle(Question(place.key, person, text, place.thread), send)

        await self.run_deferred(interaction, f"asking about message {message.id}", ask)


def message_commands(client: MessageCommandHandling) -> list[app_commands.ContextMenu]:
    """The two message commands, each handing over to the client (see the module docstring)."""
    async def add(interaction: discord.Interaction, message: discord.Message) -> None:
        await client.add_to_knowledge(interaction, message)

    async def ask(interaction: discord.Interaction, message: discord.Message) -> None:
        await client.ask_about(interaction, message)

    return [app_commands.ContextMenu(name=ADD_TO_KNOWLEDGE, callback=add),
            app_commands.ContextMenu(name=ASK_ABOUT_MESSAGE, callback=ask)]
