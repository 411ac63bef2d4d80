"""Pure translation of slash commands and button clicks into neutral events.

Contract: every action id of ours starts with :data:`ACTION_PREFIX` (the app listens to
that prefix only); a button's value carries all it needs (a node id, an answer id), so a
click works after a restart. Anything else (another app's action, no value) gives None.
A 👎 is a :class:`Vote` like a 👍, and also opens the feedback form (:func:`down_vote`
tells which answer; the form itself is :mod:`adapters.slack.feedback_form`).
"""

from __future__ import annotations

from adapters.slack.payload import Origin, Payload, as_list, as_mapping, as_text
from bot.commands import parse_command
from bot.neutral import Command, Person, Vote

ACTION_NODE = "raptor_node"  # button on a summary citation: its value is the node id
ACTION_VOTE_UP = "raptor_vote_up"  # feedback buttons: their value is the answer id
ACTION_VOTE_DOWN = "raptor_vote_down"
ACTION_PREFIX = "raptor_"  # every action id of ours starts so (the app listens to this prefix)


def slash_origin(body: Payload) -> Origin:
    """Where a slash command was typed (no message carries it: ``ts`` is empty)."""
    return Origin(as_text(body.get("team_id")), as_text(body.get("channel_id")), as_text(body.get("user_id")))


def command(body: Payload, person: Person, thread: str = "") -> Command:
    """``/raptor rebuild`` → ``Command("rebuild")``; blank text → help (see ``parse_command``)."""
    name, argument = parse_command(as_text(body.get("text")))
    return Command(slash_origin(body).key, person, name, argument, thread=thread)


def action_origin(body: Payload) -> Origin:
    """Where a button was clicked: the message holding it and that message's thread."""
    container = as_mapping(body.get("container"))
    message = as_mapping(body.get("message"))
    channel = as_text(as_mapping(body.get("channel")).get("id")) or as_text(container.get("channel_id"))
    team = as_text(as_mapping(body.get("team")).get("id")) or as_text(as_mapping(body.get("user")).get("team_id"))
    return Origin(
        team=team,
        channel=channel,
        user=as_text(as_mapping(body.get("user")).get("id")),
        ts=as_text(message.get("ts")) or as_text(container.get("message_ts")),
        thread_ts=as_text(message.get("thread_ts")) or as_text(container.get("thread_ts")),
    )


def action_event(body: Payload, person: Person) -> Command | Vote | None:
    """The event a click on one of our buttons stands for: a summary's ``node`` command
    (its children shown in the answer's thread), or a vote on an answer. None for
    anything else (another app's action, no value)."""
    origin = action_origin(body)
    for raw in as_list(body.get("actions")):
        action = as_mapping(raw)
        action_id, value = as_text(action.get("action_id")), as_text(action.get("value")).strip()
        if not value or not origin.channel:
            continue
        if action_id == ACTION_NODE:
            return Command(origin.key, person, "node", value, thread=origin.thread_ts)
        if action_id in (ACTION_VOTE_UP, ACTION_VOTE_DOWN):
            return Vote(origin.key, person, value, up=action_id == ACTION_VOTE_UP)
    return None


def down_vote(body: Payload) -> str:
    """The answer id of a 👎 click in ``body`` (the answer its feedback form is about); empty
    for any other click, or one without a value or a channel (which :func:`action_event`
    ignores too)."""
    if not action_origin(body).channel:
        return ""
    for raw in as_list(body.get("actions")):
        action = as_mapping(raw)
        if as_text(action.get("action_id")) == ACTION_VOTE_DOWN:
            return as_text(action.get("value")).strip()
    return ""
