"""Pure reading of Slack's assistant events: a thread opened in the assistant container
(``assistant_thread_started``) and the channel viewed beside it changing
(``assistant_thread_context_changed``).

Shapes as Slack documents them and bolt-python's ``tests/scenario_tests_async/test_events_assistant.py``
sends them: ``event.assistant_thread`` holds ``user_id``, ``channel_id`` (the direct
conversation the thread is in), ``thread_ts`` and ``context`` (``channel_id``, ``team_id``,
``enterprise_id`` of what the person views; empty when they view no channel).

A question in the container is a direct message in a thread (``channel_type`` ``im`` with a
``thread_ts``), as bolt's ``is_user_message_event_in_assistant_thread`` tells it:
:attr:`adapters.slack.events.Asked.in_assistant_thread`.

Never raises: a payload without the thread's conversation, ``thread_ts`` or user gives None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from adapters.slack.payload import as_mapping, as_text

ASSISTANT_EVENTS = ("assistant_thread_started", "assistant_thread_context_changed")


@dataclass(frozen=True, slots=True)
class ThreadViewed:
    """An assistant thread opened (``started``) or the channel viewed beside it changed:
    the thread is ``thread_ts`` in the direct conversation ``channel``, of ``user``;
    ``viewed`` is the channel id they view (empty: none); ``at`` is the event's ``event_ts``
    (empty when the payload has none): events are handled concurrently, so a later one can
    be handled first, and only its time says which view is the latest."""

    team: str
    channel: str
    thread_ts: str
    user: str
    viewed: str
    started: bool
    at: str = ""

    @property
    def thread_id(self) -> str:
        """The thread's platform-qualified id, under which its state is kept."""
        return assistant_thread_id(self.team, self.channel, self.thread_ts)


def assistant_thread_id(team: str, channel: str, thread_ts: str) -> str:
    """``slack:<team>:<direct conversation>:<thread ts>``: an assistant thread's id."""
    return f"slack:{team}:{channel}:{thread_ts}"


def thread_viewed(event: Mapping[str, Any], team: str) -> ThreadViewed | None:
    """What an ``assistant_thread_started`` or ``assistant_thread_context_changed`` event says."""
    thread = as_mapping(event.get("assistant_thread"))
    channel, thread_ts, user = (as_text(thread.get(k)) for k in ("channel_id", "thread_ts", "user_id"))
    if not channel or not thread_ts or not user:
        return None
    viewed = as_text(as_mapping(thread.get("context")).get("channel_id"))
    return ThreadViewed(team, channel, thread_ts, user, viewed, event.get("type") == "assistant_thread_started",
                        as_text(event.get("event_ts")))
