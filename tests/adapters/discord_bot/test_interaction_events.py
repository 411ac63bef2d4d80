"""A button press or a form submission read once into its neutral event
(:func:`adapters.discord_bot.interaction_events.read_interaction`), without a network.

Each interaction is the real discord.py ``Interaction`` built from an INTERACTION_CREATE
payload as Discord sends it (:func:`testkit.discord_api.interaction_payload`), on the
connection state of a client that never connects (as discord.py's own tests build theirs).
"""

from __future__ import annotations

from typing import Any

import discord
import pytest

from adapters.discord_bot.feedback_form import CORRECTION_ID, REASON_ID, Unreadable
from adapters.discord_bot.interaction_events import Refused, read_interaction
from adapters.discord_bot.translate import Place, Scope
from bot.config import DiscordConfig
from bot.neutral import ChannelKey, Command, Feedback, Person, Vote
from testkit.discord_api import (
    COMPONENT_INTERACTION,
    MANAGE_MESSAGES,
    MODAL_SUBMIT,
    PRIVATE_THREAD,
    button_data,
    channel_payload,
    dm_channel_payload,
    interaction_payload,
    member_payload,
    modal_submit_data,
    slash_data,
    thread_payload,
    user_payload,
)

GUILD, CHANNEL, THREAD, DM_CHANNEL = "100", "200", "300", "400"
ALICE = user_payload("7", "Alice")
EVERYWHERE = Scope.of(DiscordConfig())
ONLY_CHANNEL = Scope.of(DiscordConfig(guilds=[GUILD], channels=[CHANNEL]))
GENERAL = channel_payload(CHANNEL, GUILD, "general")


def interaction(kind: int, data: dict[str, Any], channel: dict[str, Any] = GENERAL,
                permissions: int = 0) -> discord.Interaction:
    """The discord.py interaction of a payload by Alice in ``channel`` (a DM when it has no guild)."""
    payload = interaction_payload("1", kind, channel, data, member=member_payload(ALICE), permissions=permissions,
                                  user=ALICE)
    client = discord.Client(intents=discord.Intents.none())
    state = client._connection  # the state a logged-in client parses interactions with
    state.user = discord.ClientUser(state=state, data=user_payload("42", "Raptor", bot=True))
    return discord.Interaction(data=payload, state=state)


def alice(manages: bool = False) -> Person:
    return Person("7", "Alice", manages)


def test_a_button_press_is_its_event_with_the_place_and_the_person() -> None:
    key = ChannelKey("discord", GUILD, CHANNEL)
    node = read_interaction(interaction(COMPONENT_INTERACTION, button_data("raptor:node:s1.abc")), EVERYWHERE)
    assert node == Command(key, alice(), "node", "s1.abc")
    up = interaction(COMPONENT_INTERACTION, button_data("raptor:vote:up:a1"), permissions=MANAGE_MESSAGES)
    assert read_interaction(up, ONLY_CHANNEL) == Vote(key, alice(manages=True), "a1", True)
    down = read_interaction(interaction(COMPONENT_INTERACTION, button_data("raptor:vote:down:a1")), EVERYWHERE)
    assert down == Vote(key, alice(), "a1", False)


def test_a_press_in_a_thread_keys_the_tree_that_serves_there() -> None:
    public = thread_payload(THREAD, GUILD, CHANNEL, "t", "7")
    pressed = read_interaction(interaction(COMPONENT_INTERACTION, button_data("raptor:node:s1.x"), public), EVERYWHERE)
    assert pressed == Command(ChannelKey("discord", GUILD, CHANNEL), alice(), "node", "s1.x", thread=THREAD)
    private = thread_payload(THREAD, GUILD, CHANNEL, "t", "7", PRIVATE_THREAD)
    voted = read_interaction(interaction(COMPONENT_INTERACTION, button_data("raptor:vote:up:a1"), private), EVERYWHERE)
    assert voted == Vote(ChannelKey("discord", GUILD, THREAD), alice(), "a1", True)  # a channel of its own


def test_a_form_submission_is_feedback() -> None:
    data = modal_submit_data("raptor:feedback:a1", {REASON_ID: " outdated ", CORRECTION_ID: "Use v2."})
    submitted = read_interaction(interaction(MODAL_SUBMIT, data, permissions=MANAGE_MESSAGES), ONLY_CHANNEL)
    assert submitted == Feedback(ChannelKey("discord", GUILD, CHANNEL), alice(manages=True), "a1", "outdated", "Use v2.")


def test_a_place_where_the_bot_is_not_enabled_is_refused() -> None:
    # A DM, where a guild list restricts the bot; there, the person manages the channel.
    dm = dm_channel_payload(DM_CHANNEL, ALICE)
    assert read_interaction(interaction(COMPONENT_INTERACTION, button_data("raptor:vote:up:a1"), dm), ONLY_CHANNEL) \
        == Refused(Place(None, int(DM_CHANNEL)))
    assert read_interaction(interaction(COMPONENT_INTERACTION, button_data("raptor:vote:up:a1"), dm), EVERYWHERE) \
        == Vote(ChannelKey("discord", "dm", DM_CHANNEL), alice(manages=True), "a1", True)
    # A channel left out of discord.channels, and one of a type discord.py does not know (no channel at all).
    secret = channel_payload("201", GUILD, "secret")
    assert read_interaction(interaction(MODAL_SUBMIT, modal_submit_data("raptor:feedback:a1", {}), secret),
                            ONLY_CHANNEL) == Refused(Place(int(GUILD), 201))
    unknown = {**GENERAL, "type": 99}
    assert read_interaction(interaction(COMPONENT_INTERACTION, button_data("raptor:node:s1.x"), unknown),
                            ONLY_CHANNEL) == Refused(Place(int(GUILD), 0))


@pytest.mark.parametrize(("kind", "data"), [
    (COMPONENT_INTERACTION, button_data("other:thing")),
    (COMPONENT_INTERACTION, button_data("raptor:vote:sideways:a1")),
    (COMPONENT_INTERACTION, button_data("raptor:node:")),
    (COMPONENT_INTERACTION, {"component_type": 2}),
    (MODAL_SUBMIT, modal_submit_data("other:form", {REASON_ID: "x"})),
    (2, slash_data("raptor", "status")),  # the command tree's
])
def test_what_is_not_the_bots_is_left_alone(kind: int, data: dict[str, Any]) -> None:
    assert read_interaction(interaction(kind, data), EVERYWHERE) is None


def test_an_unreadable_form_is_dropped_wherever_it_comes_from() -> None:
    secret = channel_payload("201", GUILD, "secret")
    nameless = read_interaction(interaction(MODAL_SUBMIT, modal_submit_data("raptor:feedback:", {}), secret),
                                ONLY_CHANNEL)
    assert isinstance(nameless, Unreadable) and "naming no answer" in nameless.problem
    garbled = {"custom_id": "raptor:feedback:a1", "components": "reason=x"}
    found = read_interaction(interaction(MODAL_SUBMIT, garbled), EVERYWHERE)
    assert isinstance(found, Unreadable) and "garbled feedback form submission on answer a1" in found.problem
