"""A Discord interaction (a button press, a feedback form's submission) read once into what
the client does with it: pure translation, no input/output, no logging.

:func:`read_interaction` takes a discord.py ``Interaction`` and the configured
:class:`~adapters.discord_bot.translate.Scope`, and gives in one step:

* None when the interaction is not one of the bot's buttons or forms (a slash command or
  an autocomplete, which the command tree handles; a custom id the bot did not make);
* :class:`Refused` when it is the bot's but the bot is not enabled where it happened;
* an :class:`~adapters.discord_bot.feedback_form.Unreadable` submission of the bot's
  form (dropped with a log line by the client), checked before the place, as a form that
  names no answer is dropped wherever it comes from;
* otherwise the neutral event: a :class:`~bot.neutral.Command` (a summary's node), a
  :class:`~bot.neutral.Vote` (👍 or 👎) or a :class:`~bot.neutral.Feedback` (a submitted
  form), naming the place (:func:`interaction_place`) and the person
  (:func:`interaction_person`).

The client (:meth:`~adapters.discord_bot.interactions.InteractionHandling.on_interaction`)
claims the interaction in the delivery ledger, then acts on what this gave.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import discord

from adapters.discord_bot import feedback_form, translate
from adapters.discord_bot.feedback_form import Unreadable
from adapters.discord_bot.translate import Place, Scope
from bot.neutral import Command, Feedback, Person, Vote


@dataclass(frozen=True, slots=True)
class Refused:
    """One of the bot's interactions where the bot is not enabled (the person is told so)."""

    place: Place


InteractionEvent = Command | Vote | Feedback | Refused | Unreadable
"""What a button press or a form submission of the bot's comes to (see the module docstring)."""


def read_interaction(interaction: discord.Interaction, scope: Scope) -> InteractionEvent | None:
    """The interaction as the client acts on it; see the module docstring. Reads the interaction only."""
    data: Mapping[str, Any] = interaction.data or {}
    action: translate.ButtonAction | feedback_form.Submission | None
    if interaction.type is discord.InteractionType.modal_submit:
        submission = feedback_form.parse_submission(data)
        if submission is None or isinstance(submission, Unreadable):
            return submission
        action = submission
    elif interaction.type is discord.InteractionType.component:
        action = translate.parse_custom_id(str(data.get("custom_id", "")))
        if action is None:
            return None
    else:
        return None
    place = interaction_place(interaction)
    if not scope.allows(place):
        return Refused(place)
    person = interaction_person(interaction, place)
    if isinstance(action, feedback_form.Submission):
        return feedback_form.feedback_event(action, place, person)
    return translate.button_event(action, place, person)


def interaction_place(interaction: discord.Interaction) -> Place:
    """The place of an interaction (its channel, or its ids when the channel is unknown)."""
    if interaction.channel is not None:
        return translate.place_of(interaction.channel, interaction.guild_id)
    return Place(interaction.guild_id, int(interaction.channel_id or 0))


def interaction_manager(interaction: discord.Interaction, place: Place) -> bool:
    """Manage Messages in the channel, as Discord resolved it for the interaction. In a DM
    the person is the only one there, so the channel is theirs to manage."""
    return place.guild_id is None or interaction.permissions.manage_messages


def interaction_person(interaction: discord.Interaction, place: Place) -> Person:
    """The person behind an interaction at ``place``, managing the channel as Discord says."""
    return translate.person_of(interaction.user, interaction_manager(interaction, place))
