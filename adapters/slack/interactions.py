"""Pure translation of slash commands and button clicks into neutral events.

Contract: every action id of ours starts with :data:`ACTION_PREFIX` (the app listens to
that prefix only); a button's value carries all it needs (a node id, an answer id), so a
click works after a restart. A ``block_actions`` payload is read once (:func:`read_click`)
into a :class:`Click`: where and by whom, which button, and how to answer; anything else
(another app's action, no value, no channel) gives None. The click's event needs the
person, whom Slack names by id only (the adapter looks them up, then calls
:meth:`Click.event`). A 👎 is a :class:`Vote` like a 👍, and also opens the feedback form
(:attr:`Click.form_answer` tells which answer; the form itself is
:mod:`adapters.slack.feedback_form`).

Answers carry Slack's native feedback element (``feedback_buttons``, action id
:data:`ACTION_FEEDBACK`): both its buttons share that action id, so each one's value says
which it is and on which answer (:func:`vote_value`). A click on it is read as the 👍 or
👎 button it stands for (:data:`ACTION_VOTE_UP`, :data:`ACTION_VOTE_DOWN`, the value the
answer id), which are still read themselves: answers posted before the native element
keep their buttons.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.slack.payload import Origin, Payload, as_list, as_mapping, as_text
from bot.commands import NODE, parse_command
from bot.neutral import ChannelKey, Command, Person, Vote

ACTION_NODE = "raptor_node"  # button on a summary citation: its value is the node id
ACTION_VOTE_UP = "raptor_vote_up"  # feedback buttons: their value is the answer id
ACTION_VOTE_DOWN = "raptor_vote_down"
ACTION_FEEDBACK = "raptor_feedback_buttons"  # the native feedback element: its values are vote_value()s
ACTION_PREFIX = "raptor_"  # every action id of ours starts so (the app listens to this prefix)


_VOTE_WORDS = {"up": ACTION_VOTE_UP, "down": ACTION_VOTE_DOWN}  # a native button's value: "<word>:<answer id>"


def vote_value(answer_id: str, up: bool) -> str:
    """The value of the native feedback element's 👍 (``up``) or 👎 button on the answer ``answer_id``."""
    return f"{'up' if up else 'down'}:{answer_id}"


def _native_vote(value: str) -> tuple[str, str]:
    """The button (:data:`ACTION_VOTE_UP` or :data:`ACTION_VOTE_DOWN`) and the answer id a native
    feedback button's ``value`` stands for; two empty strings for any other value."""
    word, _, answer_id = value.partition(":")
    action_id, answer_id = _VOTE_WORDS.get(word, ""), answer_id.strip()
    return (action_id, answer_id) if action_id and answer_id else ("", "")


def slash_origin(body: Payload, team: str) -> Origin:
    """Where a slash command was typed (no message carries it: ``ts`` is empty), in ``team``,
    the installing workspace: the payload's own ``team_id`` is the typist's workspace, another
    organisation's in a shared channel, so it never picks the channel's tree."""
    return Origin(team, as_text(body.get("channel_id")), as_text(body.get("user_id")))


def command(body: Payload, person: Person, team: str, thread: str = "") -> Command:
    """``/raptor rebuild`` → ``Command("rebuild")`` in the installing workspace ``team``; blank
    text → help (see ``parse_command``)."""
    name, argument = parse_command(as_text(body.get("text")))
    return Command(slash_origin(body, team).key, person, name, argument, thread=thread)


@dataclass(frozen=True, slots=True)
class Click:
    """A click on one of the bot's buttons, read once: where and by whom (``origin``: the
    message holding the button, that message's thread, the user id), which button
    (``action_id``, one of ours) and its ``value`` (a node id or an answer id), and how to
    answer it: ``response_url``, and ``trigger_id`` (good for 3 s) to open a form."""

    origin: Origin
    action_id: str
    value: str
    response_url: str = ""
    trigger_id: str = ""

    @property
    def form_answer(self) -> str:
        """The answer id of a 👎 (the answer its feedback form is about); empty for any other button."""
        return self.value if self.action_id == ACTION_VOTE_DOWN else ""

    def event(self, person: Person, key: ChannelKey | None = None) -> Command | Vote:
        """The event the click stands for, by ``person`` (who ``origin.user`` is): a summary's
        ``node`` command (its children shown in the answer's thread), or a vote on an answer;
        about the material of ``key`` (by default the clicked message's channel)."""
        key = key or self.origin.key
        if self.action_id == ACTION_NODE:
            return Command(key, person, NODE, self.value, thread=self.origin.thread_ts)
        return Vote(key, person, self.value, up=self.action_id == ACTION_VOTE_UP)


def read_click(body: Payload, team: str) -> Click | None:
    """The click on one of our buttons in a ``block_actions`` payload, in the installing
    workspace ``team`` (a click on the native feedback element as the 👍 or 👎 button it
    stands for); None for anything else (another app's action, a button without a value,
    a click nowhere)."""
    origin = action_origin(body, team)
    if not origin.channel:
        return None
    for raw in as_list(body.get("actions")):
        action = as_mapping(raw)
        action_id, value = as_text(action.get("action_id")), as_text(action.get("value")).strip()
        if action_id == ACTION_FEEDBACK:  # the native element: its value names the button and the answer
            action_id, value = _native_vote(value)
        if value and action_id in (ACTION_NODE, ACTION_VOTE_UP, ACTION_VOTE_DOWN):
            return Click(origin, action_id, value, as_text(body.get("response_url")), as_text(body.get("trigger_id")))
    return None


def action_origin(body: Payload, team: str) -> Origin:
    """Where a button was clicked: the message holding it and that message's thread, in the
    installing workspace ``team`` (the payload's ``team`` is the clicker's, see :func:`slash_origin`)."""
    container = as_mapping(body.get("container"))
    message = as_mapping(body.get("message"))
    channel = as_text(as_mapping(body.get("channel")).get("id")) or as_text(container.get("channel_id"))
    return Origin(
        team=team,
        channel=channel,
        user=as_text(as_mapping(body.get("user")).get("id")),
        ts=as_text(message.get("ts")) or as_text(container.get("message_ts")),
        thread_ts=as_text(message.get("thread_ts")) or as_text(container.get("thread_ts")),
    )
