"""The Slack stand-in's assistant container (issue 30): ``assistant.threads.*``,
``users.conversations`` and the assistant events.

:class:`AssistantContainer` is the mixin of :class:`~testkit.slack_api.SlackStandIn` that plays
Slack's assistant container: the ``assistant.threads.setStatus``/``setTitle``/
``setSuggestedPrompts`` methods, ``users.conversations`` and what a person does in the side
panel. What it uses of the rest of the stand-in is :class:`StandInCore`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from testkit.slack_socket_mode import Delivery
from testkit.slack_web_api import ApiCall

# -- the assistant container (issue 30): assistant.threads.*, users.conversations, assistant events ----------
#
# Shapes as Slack documents them (docs.slack.dev/reference/methods/assistant.threads.setStatus,
# .setTitle, .setSuggestedPrompts; /reference/events/assistant_thread_started and
# assistant_thread_context_changed; /reference/methods/users.conversations) and as bolt-python's
# own tests send them (tests/scenario_tests_async/test_events_assistant.py: the two events, the
# question in the thread as a message with channel_type "im" and thread_ts, the thread's root
# of subtype "assistant_app_thread"). Kept apart from the rest so it can be read, and merged, alone.

MAX_SUGGESTED_PROMPTS = 4  # Slack shows at most four


def assistant_problem(method: str, params: Mapping[str, Any]) -> str:
    """Slack's error for an ``assistant.threads.*`` call it would refuse, else ``""``."""
    if not params.get("channel_id") or (method != "setSuggestedPrompts" and not params.get("thread_ts")):
        return "invalid_arguments"
    if method == "setStatus" and not isinstance(params.get("status"), str):
        return "invalid_arguments"
    if method == "setTitle" and not str(params.get("title") or "").strip():
        return "invalid_arguments"
    if method == "setSuggestedPrompts":
        prompts = params.get("prompts")
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= MAX_SUGGESTED_PROMPTS:
            return "invalid_arguments"
        if not all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts):
            return "invalid_arguments"
    return ""


def assistant_event(team: str, event_ts: str, kind: str, user: str, dm: str, thread_ts: str,
                    viewing: str) -> dict[str, Any]:
    """An ``assistant_thread_started`` or ``assistant_thread_context_changed`` event (``viewing``:
    the channel viewed beside the thread, empty for none: an empty ``context``)."""
    context = {"channel_id": viewing, "team_id": team, "enterprise_id": None} if viewing else {}
    return {"type": kind, "assistant_thread": {"user_id": user, "context": context, "channel_id": dm,
                                               "thread_ts": thread_ts}, "event_ts": event_ts}


class StandInCore(Protocol):
    """What :class:`AssistantContainer` uses of the rest of :class:`SlackStandIn`."""

    team: str

    def next_ts(self) -> str: ...

    def store_message(self, channel: str, message: dict[str, Any]) -> dict[str, Any]: ...

    def calls_of(self, method: str, **where: Any) -> list[ApiCall]: ...

    async def deliver_event(self, event: dict[str, Any], *, event_id: str = "", retry: int = 0) -> Delivery: ...

    async def user_says(self, channel: str, user: str, text: str, *, thread_ts: str | None = None,
                        im: bool = False) -> tuple[dict[str, Any], list[Delivery]]: ...


class AssistantContainer:
    """The part of :class:`SlackStandIn` that plays Slack's assistant container: the
    ``assistant.threads.*`` methods (recorded as calls; :meth:`statuses` reads a thread's
    status lines back), ``users.conversations`` over the members set with :meth:`join`, and
    what a person does in the side panel (:meth:`open_assistant`, :meth:`view_channel`,
    :meth:`ask_assistant`). A status set in a channel thread is taken, unless
    :attr:`statuses_in_channels` is False (then refused with ``channel_type_not_supported``)."""

    members: dict[str, set[str]]
    statuses_in_channels: bool

    def init_assistant(self) -> None:
        self.members = {}
        self.statuses_in_channels = True

    def join(self, channel: str, *users: str) -> None:
        """``users`` become members of ``channel`` (``users.conversations`` lists it for them)."""
        self.members.setdefault(channel, set()).update(users)

    def _m_assistant_threads_setStatus(self, params: dict[str, Any]) -> dict[str, Any]:
        problem = assistant_problem("setStatus", params)
        if not problem and not str(params.get("channel_id")).startswith("D") and not self.statuses_in_channels:
            problem = "channel_type_not_supported"
        return {"ok": False, "error": problem} if problem else {}

    def _m_assistant_threads_setTitle(self, params: dict[str, Any]) -> dict[str, Any]:
        problem = assistant_problem("setTitle", params)
        return {"ok": False, "error": problem} if problem else {}

    def _m_assistant_threads_setSuggestedPrompts(self, params: dict[str, Any]) -> dict[str, Any]:
        problem = assistant_problem("setSuggestedPrompts", params)
        return {"ok": False, "error": problem} if problem else {}

    def _m_users_conversations(self, params: dict[str, Any]) -> dict[str, Any]:
        user = str(params.get("user") or "")
        channels = sorted(c for c, people in self.members.items() if user in people)
        return {"channels": [{"id": c, "name": c.lower(), "is_channel": True, "is_member": True} for c in channels],
                "response_metadata": {"next_cursor": ""}}

    def statuses(self: StandInCore, channel: str, thread_ts: str) -> list[tuple[str, float]]:
        """The status lines set on a thread, in order, each with when it was set."""
        return [(str(c.params.get("status")), c.at)
                for c in self.calls_of("assistant.threads.setStatus", channel_id=channel, thread_ts=thread_ts)]

    async def open_assistant(self: StandInCore, user: str, viewing: str = "") -> tuple[str, str, Delivery]:
        """The person opens a new thread in the container while viewing the channel ``viewing``
        (empty: none): its root is kept, ``assistant_thread_started`` delivered. The direct
        conversation, the thread's ts, and the delivery."""
        dm, thread_ts = f"D{user}", self.next_ts()
        self.store_message(dm, {"type": "message", "subtype": "assistant_app_thread", "user": user,
                                "text": "New chat", "ts": thread_ts, "thread_ts": thread_ts, "channel": dm})
        started = assistant_event(self.team, self.next_ts(), "assistant_thread_started", user, dm, thread_ts, viewing)
        delivery = await self.deliver_event(started)
        return dm, thread_ts, delivery

    async def view_channel(self: StandInCore, user: str, dm: str, thread_ts: str, viewing: str) -> Delivery:
        """The person turns to another channel with the thread open: ``assistant_thread_context_changed``."""
        return await self.deliver_event(assistant_event(self.team, self.next_ts(), "assistant_thread_context_changed",
                                                        user, dm, thread_ts, viewing))

    async def ask_assistant(self: StandInCore, user: str, dm: str, thread_ts: str,
                            text: str) -> tuple[dict[str, Any], list[Delivery]]:
        """The person asks in the thread: a ``message`` with ``channel_type`` ``im`` and the thread's ts."""
        message, deliveries = await self.user_says(dm, user, text, thread_ts=thread_ts, im=True)
        return message, deliveries
