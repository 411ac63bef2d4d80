"""Discord interactions: the ``/raptor`` subcommands, the buttons under answers, and
the ``forget`` autocomplete.

Contract (:class:`InteractionHandling`, a part of :class:`~adapters.discord_bot.client.DiscordClient`):

* every slash command is deferred at once (Discord allows 3 s) and answered by
  follow-ups; private replies are ephemeral;
* the buttons (a summary's node, 👍/👎) carry all they need in their custom ids and
  are handled in ``on_interaction``, so they keep working after a restart; their
  replies are shown to the presser only. A press (or a form's submission) is read once,
  place, person and action together, into its neutral event
  (:func:`~adapters.discord_bot.interaction_events.read_interaction`), then claimed and
  acted on;
* 👎 is answered with the feedback form (a modal; it must be the interaction's first
  response, so nothing is deferred before it), then the 👎 is recorded, whether or not
  the form is ever submitted (the vote's own thanks is not shown: a modal leaves no
  message to follow up). The form's submission is a MODAL_SUBMIT interaction, handled
  statelessly in ``on_interaction`` too: its custom id carries the answer id (see
  :mod:`adapters.discord_bot.feedback_form` for why), so any front-end answers it,
  privately; a malformed one is logged and dropped;
* where the bot is not enabled, the person is told so privately (Discord would
  otherwise say "the application did not respond");
* who may manage a channel is Discord's own answer: Manage Messages as resolved for
  the interaction (always, in a DM);
* each interaction is handled by one front-end only, the first to claim
  ``discord:interaction:<id>`` in the bot's delivery ledger: slash commands and
  autocomplete in the command tree (:class:`~adapters.discord_bot.lifecycle.OnceCommandTree`),
  button presses and form submissions here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress

import discord
from discord import app_commands

from adapters.discord_bot import feedback_form, render
from adapters.discord_bot.feedback_form import Unreadable
from adapters.discord_bot.interaction_events import (
    InteractionEvent,
    Refused,
    interaction_person,
    interaction_place,
    read_interaction,
)
from adapters.discord_bot.lifecycle import ClientCore, interaction_key
from adapters.discord_bot.sending import InteractionSend
from adapters.discord_bot.translate import Place
from bot.errors import log_failure
from bot.neutral import Command, Event, Feedback, Person, Reply, ReplyKind, Vote
from bot.replies import source_choice_text

log = logging.getLogger(__name__)

AUTOCOMPLETE_CHOICES = 25  # Discord's maximum
AUTOCOMPLETE_TIMEOUT_S = 2.0
CHOICE_NAME_LIMIT = 100

DeferredWork = Callable[[Place, Person, InteractionSend], Awaitable[None]]
"""What an application command does once deferred (see :meth:`InteractionHandling.run_deferred`)."""


class InteractionHandling(ClientCore):
    """The client's slash commands, button presses and autocomplete; see the module docstring."""

    async def run_command(self, interaction: discord.Interaction, name: str, argument: str = "") -> None:
        """One ``/raptor <name>``: deferred first, then handled; the replies are follow-ups."""
        async def command(place: Place, person: Person, send: InteractionSend) -> None:
            await self.raptor.handler.handle(Command(place.key, person, name, argument, place.thread), send)

        await self.run_deferred(interaction, f"handling /{self.settings.command} {name}", command)

    async def run_deferred(self, interaction: discord.Interaction, what: str, work: DeferredWork, *,
                           private: bool = False, serves: Callable[[Place], bool] = lambda _: True) -> None:
        """An interaction where the bot is enabled (and that ``serves`` its place): deferred at
        once (a "thinking", public unless ``private``: then every reply is private too), then
        ``work`` is done with the place, the person and the follow-ups' send; a failure of
        ``work`` is reported with a reference (``what`` names it in the log). Elsewhere the
        person is told privately that the bot is not enabled there."""
        with self._tracked():
            place = interaction_place(interaction)
            if not (self.scope.allows(place) and serves(place)):
                await _refuse_here(interaction)
                return
            send = InteractionSend(self, interaction, always_private=private, components_v2=self.settings.components_v2)
            if not await send.defer(thinking=True, ephemeral=private):
                return
            self._count_ack(interaction)
            person = interaction_person(interaction, place)
            try:
                await work(place, person, send)
            except Exception:  # noqa: BLE001 (reported with a reference, never silent)
                await self._failed(what, send)
            finally:
                await send.finish()

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """Presses on the bot's buttons (component interactions) and submissions of its feedback
        form (modal submits), read once (:func:`~adapters.discord_bot.interaction_events.read_interaction`),
        then claimed and acted on; slash commands go through the tree."""
        event = read_interaction(interaction, self.scope)
        if event is None:
            return
        if not await self.claim(interaction_key(interaction)):
            return  # another front-end answers it (and logs it, if it is garbled)
        with self._tracked():
            await self._act_on(interaction, event)

    async def _act_on(self, interaction: discord.Interaction, event: InteractionEvent) -> None:
        """Refuses, drops (logged), opens the feedback form for a 👎, or hands the event to the handler."""
        if isinstance(event, Refused):
            await _refuse_here(interaction)
            return
        if isinstance(event, Unreadable):
            log.warning("dropped %s", event.problem)
            return
        if isinstance(event, Vote) and not event.up:
            form = feedback_form.form_for(event.answer_id)
            if form is not None:  # always, as the form's id is shorter than the button's
                await self._open_form(interaction, form, event)
                return
        await self._answer_privately(interaction, event)

    async def _answer_privately(self, interaction: discord.Interaction, event: Event) -> None:
        """Defers ``interaction`` privately, hands the handler ``event`` and answers only the
        person; a failure is reported with a reference, never raised. Opening a node and
        taking in a form take a moment: they show "thinking"; a vote is silent until the
        handler speaks."""
        send = InteractionSend(self, interaction, always_private=True)
        if not await send.defer(thinking=not isinstance(event, Vote), ephemeral=True):
            return
        self._count_ack(interaction)
        try:
            await self.raptor.handler.handle(event, send)
        except Exception:  # noqa: BLE001 (reported with a reference, never silent)
            what = "handling a feedback form" if isinstance(event, Feedback) else "handling a button press"
            await self._failed(what, send)
        finally:
            await send.finish()

    async def _open_form(self, interaction: discord.Interaction, form: discord.ui.Modal, vote: Vote) -> None:
        """A 👎: answers the press with the feedback form, then records the 👎 (a form
        dismissed unsubmitted still counts it). Never raises: a failure is logged."""
        try:
            # The modal is the acknowledgement: Discord accepts one only as the first response.
            await interaction.response.send_modal(form)
        except Exception:  # noqa: BLE001 (logged with a reference; the 👎 is still recorded)
            log_failure(log, "opening the feedback form for interaction %s failed (reference %s)", interaction.id)
        else:
            self._count_ack(interaction)
        try:
            await self.raptor.handler.handle(vote, _not_shown)
        except Exception:  # noqa: BLE001 (logged with a reference; the form is open already)
            log_failure(log, "recording the 👎 of interaction %s failed (reference %s)", interaction.id)

    def _count_ack(self, interaction: discord.Interaction) -> None:
        """Counts the time from the interaction's creation (its snowflake) to its acknowledgement."""
        waited = (discord.utils.utcnow() - interaction.created_at).total_seconds()
        self.raptor.metrics.observe_ack("discord", max(waited, 0.0))

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
            name = source_choice_text(source, CHOICE_NAME_LIMIT)
            choices.append(app_commands.Choice(name=name, value=source.id))
        return choices[:AUTOCOMPLETE_CHOICES]


async def _not_shown(reply: Reply) -> None:
    """The ``send`` of a 👎 answered with the form: the handler's word on the vote is not
    shown (the modal left no message to follow up; the form's submission is thanked). An
    error is logged where an operator sees it: the person learns of it only if they submit."""
    level = logging.WARNING if reply.kind is ReplyKind.ERROR else logging.DEBUG
    log.log(level, "not shown after the feedback form: %s %.120r", reply.kind.value, reply.text)


async def _refuse_here(interaction: discord.Interaction) -> None:
    """An interaction where the bot is not enabled: said to the person only (Discord would
    otherwise show "the application did not respond")."""
    with suppress(discord.HTTPException, OSError):
        await interaction.response.send_message(render.NOT_ENABLED_TEXT, ephemeral=True)

