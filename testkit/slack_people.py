"""What people do in the Slack stand-in's workspace, and the events Slack sends for it.

:class:`SlackPeople` plays a person: ``say``/``user_says``, ``share_file``, ``pin``, ``unpin``,
``edit``, ``delete_message``, ``delete_file``, ``channel_event``, ``slash``, ``click``,
``click_feedback`` (the native 👍/👎) and ``submit_view`` change the workspace as Slack would
and deliver the events and payloads Slack would send for it, shaped as Slack's reference
shows them, over the socket or over HTTP (:mod:`testkit.slack_events`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from testkit.slack_events import SlackEvents
from testkit.slack_limits import feedback_element
from testkit.slack_socket_mode import Delivery
from testkit.slack_workspace import APP_ID, BOT_ID, BOT_USER


class SlackPeople(SlackEvents):
    """The people's side of :class:`~testkit.slack_api.SlackStandIn` (see the module docstring)."""

    def _user_message(self, channel: str, user: str, text: str, thread_ts: str | None, im: bool) -> dict[str, Any]:
        ts = self.next_ts()
        message: dict[str, Any] = {"type": "message", "user": user, "text": text, "ts": ts, "team": self.team_of(user),
                                   "channel": channel, "event_ts": ts, "channel_type": "im" if im else "channel",
                                   "client_msg_id": f"cm-{ts}"}
        if thread_ts:
            message["thread_ts"] = thread_ts
        return message

    def say(self, channel: str, user: str, text: str, *, thread_ts: str | None = None, im: bool = False) -> dict[str, Any]:
        """A person posts ``text`` (stored, nothing delivered yet); the message as Slack keeps it."""
        return self._store(channel, self._user_message(channel, user, text, thread_ts, im))

    def events_for(self, message: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The events Slack sends for a person's message: ``message``, and ``app_mention`` too
        when it tags the bot outside a direct conversation."""
        events = [dict(message)]
        if message.get("channel_type") != "im" and f"<@{BOT_USER}>" in str(message.get("text", "")):
            mention = {k: message[k] for k in ("user", "text", "ts", "channel", "event_ts", "team")}
            mention["type"] = "app_mention"
            if message.get("thread_ts"):
                mention["thread_ts"] = message["thread_ts"]
            events.append(mention)
        return events

    async def user_says(
        self, channel: str, user: str, text: str, *, thread_ts: str | None = None, im: bool = False
    ) -> tuple[dict[str, Any], list[Delivery]]:
        """:meth:`say`, then every event of :meth:`events_for` delivered."""
        message = self.say(channel, user, text, thread_ts=thread_ts, im=im)
        return message, [await self.deliver_event(event) for event in self.events_for(message)]

    async def share_file(
        self, channel: str, user: str, name: str, data: bytes, *, mimetype: str = "text/plain",
        text: str = "", also_file_shared: bool = False, im: bool = False, url_root: str = "",
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """A person shares a file: the ``message`` (subtype ``file_share``) event, and with
        ``also_file_shared`` the ``file_shared`` event Slack sends too when subscribed."""
        meta = self.add_file(user, name, data, mimetype, url_root)
        message = self._user_message(channel, user, text, None, im)
        message.update({"subtype": "file_share", "files": [meta], "upload": False, "display_as_bot": False})
        self._store(channel, message)
        await self.deliver_event(dict(message))
        if also_file_shared:
            await self.deliver_event({"type": "file_shared", "channel_id": channel, "file_id": meta["id"],
                                      "user_id": user, "file": {"id": meta["id"]}, "event_ts": self.next_ts()})
        return message, meta

    def _pin_event(self, kind: str, channel: str, user: str, ts: str) -> dict[str, Any]:
        message = dict(self.message(channel, ts) or {"ts": ts})
        message["permalink"] = self.permalink_of(channel, ts)
        message.pop("channel", None)
        return {"type": kind, "user": user, "channel_id": channel,
                "item": {"type": "message", "channel": channel, "created_by": user, "message": message},
                "event_ts": self.next_ts()}

    async def pin(self, channel: str, user: str, ts: str) -> Delivery:
        return await self.deliver_event(self._pin_event("pin_added", channel, user, ts))

    async def unpin(self, channel: str, user: str, ts: str) -> Delivery:
        return await self.deliver_event(self._pin_event("pin_removed", channel, user, ts))

    async def edit(self, channel: str, ts: str, text: str) -> Delivery:
        """A person edits their message: it changes in the workspace, and Slack sends a
        ``message`` event of subtype ``message_changed`` with the message as it is now and
        as it was (``previous_message``)."""
        stored = self.message(channel, ts)
        assert stored is not None, f"no message {ts} in {channel}"
        previous = dict(stored)
        stored["text"] = text
        stored["edited"] = {"user": stored.get("user", ""), "ts": self.next_ts()}
        now = {k: v for k, v in stored.items() if k != "channel"}
        return await self.deliver_event({
            "type": "message", "subtype": "message_changed", "hidden": True, "channel": channel,
            "message": now, "previous_message": {k: v for k, v in previous.items() if k != "channel"},
            "ts": self.next_ts(), "event_ts": self.next_ts(),
        })

    async def delete_message(self, channel: str, ts: str) -> Delivery:
        """A person deletes a message: it goes from the workspace, and Slack sends a ``message``
        event of subtype ``message_deleted`` (``deleted_ts`` the message's, ``previous_message``
        as it was), as in Slack's reference of the subtype."""
        stored = self.message(channel, ts)
        assert stored is not None, f"no message {ts} in {channel}"
        self.messages[channel] = [m for m in self.messages[channel] if m is not stored]
        now = self.next_ts()
        return await self.deliver_event({
            "type": "message", "subtype": "message_deleted", "hidden": True, "channel": channel,
            "ts": now, "deleted_ts": ts, "event_ts": now, "channel_type": "channel",
            "previous_message": {k: v for k, v in stored.items() if k != "channel"},
        })

    async def delete_file(self, file_id: str, channel_ids: Sequence[str] | None = None) -> Delivery:
        """A person deletes a file: it is no longer served, and Slack sends ``file_deleted``,
        with only the file's id as in Slack's own example, or with ``channel_ids`` too."""
        self.files.pop(file_id, None)
        event: dict[str, Any] = {"type": "file_deleted", "file_id": file_id, "event_ts": self.next_ts()}
        if channel_ids is not None:
            event["channel_ids"] = list(channel_ids)
        return await self.deliver_event(event)

    async def channel_event(self, kind: str, channel: str, user: str, member: str = BOT_USER) -> Delivery:
        """``user`` changes a channel: ``kind`` is ``channel_archive``/``channel_unarchive``/
        ``channel_deleted``, ``group_*`` for a private channel, ``channel_left``/``group_left``
        (``user`` removed the bot), or ``member_left_channel``/``member_joined_channel`` of
        ``member`` (default: the bot), each with the fields of Slack's reference of the event."""
        ts = self.next_ts()
        who = user
        events: dict[str, dict[str, Any]] = {
            "channel_archive": {"channel": channel, "user": who, "is_moved": 0},
            "channel_unarchive": {"channel": channel, "user": who},
            "channel_deleted": {"channel": channel},
            "group_archive": {"channel": channel, "is_moved": 0},
            "group_unarchive": {"channel": channel, "actor_id": who},
            "group_deleted": {"channel": channel, "date_deleted": int(time.time()), "actor_id": who},
            "channel_left": {"channel": channel, "actor_id": who},
            "group_left": {"channel": channel, "actor_id": who},
            "member_left_channel": {"user": member, "channel": channel, "channel_type": "C", "team": self.team},
            "member_joined_channel": {"user": member, "channel": channel, "channel_type": "C", "team": self.team,
                                      "inviter": who},
        }
        return await self.deliver_event({"type": kind, **events[kind], "event_ts": ts})

    async def slash(self, channel: str, user: str, text: str, command: str = "/raptor") -> Delivery:
        fields = {
            "token": "legacy-verification-token", "team_id": self.team_of(user), "team_domain": "stand-in",
            "channel_id": channel, "channel_name": channel.lower(), "user_id": user,
            "user_name": self.users[user].name if user in self.users else user, "command": command, "text": text,
            "api_app_id": APP_ID, "response_url": f"{self.root}/respond/{next(self._counter)}",
            "trigger_id": f"{next(self._counter)}.1.x",
        }
        return await self.deliver_form("slash_commands", fields)

    async def click(self, channel: str, user: str, message: Mapping[str, Any], action_id: str, value: str) -> Delivery:
        """A person clicks a button (``action_id``, ``value``) of a message the bot posted."""
        return await self._block_action(channel, user, message, {
            "type": "button", "action_id": action_id, "block_id": "b", "value": value,
            "action_ts": self.next_ts(), "text": {"type": "plain_text", "text": "x"}})

    async def _block_action(self, channel: str, user: str, message: Mapping[str, Any],
                            action: Mapping[str, Any]) -> Delivery:
        """The ``block_actions`` payload Slack sends when ``user`` acts (``action``) on ``message``."""
        container: dict[str, Any] = {"type": "message", "message_ts": message["ts"], "channel_id": channel,
                                     "is_ephemeral": False}
        if message.get("thread_ts"):
            container["thread_ts"] = message["thread_ts"]
        payload = {
            "type": "block_actions",
            "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": self.team_of(user)},
            "api_app_id": APP_ID, "token": "legacy-verification-token",
            "container": container, "trigger_id": f"{next(self._counter)}.1.x",
            "team": {"id": self.team_of(user), "domain": "stand-in"},
            "channel": {"id": channel, "name": channel.lower()},
            "message": dict(message),
            "response_url": f"{self.root}/respond/{next(self._counter)}",
            "actions": [dict(action)],
        }
        return await self.deliver_form("interactive", {"payload": json.dumps(payload)})

    # -- native feedback (issue 30, point 3): a click on a message's feedback_buttons element --

    async def click_feedback(self, channel: str, user: str, message: Mapping[str, Any], up: bool) -> Delivery:
        """``user`` clicks the 👍 (``up``) or 👎 of the ``feedback_buttons`` element in ``message``
        (as Slack keeps it, e.g. from :meth:`message`); raises LookupError when it has none.

        The action is shaped as bolt-js types a feedback buttons action (``FeedbackButtonsAction``
        in src/types/actions/block-action.ts, docs.slack.dev/tools/bolt-js/reference/interfaces/
        FeedbackButtonsAction: ``type: "feedback_buttons"``, ``action_id``, ``block_id``,
        ``action_ts``, and the clicked button's ``value`` and ``text``), in the usual
        ``block_actions`` envelope; Slack's Bolt for Python assistant template
        (slack-samples/bolt-python-assistant-template, listeners/actions/actions.py) reads the
        clicked button from ``body["actions"][0]["value"]`` and the answer from ``body["message"]``."""
        block, element = feedback_element(message)
        button = element["positive_button" if up else "negative_button"]
        return await self._block_action(channel, user, message, {
            "type": "feedback_buttons", "action_id": element.get("action_id", ""),
            "block_id": block.get("block_id", ""), "action_ts": self.next_ts(),
            "value": button["value"], "text": button["text"]})

    async def submit_view(
        self, user: str, view: Mapping[str, Any], values: Mapping[str, Mapping[str, str]], *,
        callback_id: str | None = None, private_metadata: str | None = None,
    ) -> Delivery:
        """A person submits a modal the bot opened (``view``, e.g. from :meth:`opened_views`),
        with ``values`` typed into its plain-text inputs as ``{block_id: {action_id: text}}``
        (inputs not named are left blank, which Slack sends as ``None``). ``callback_id`` and
        ``private_metadata`` replace the view's own (to send malformed submissions)."""
        state: dict[str, dict[str, Any]] = {}
        for block in view.get("blocks") or ():
            if isinstance(block, Mapping) and block.get("type") == "input":
                element = block.get("element") or {}
                block_id, action_id = str(block.get("block_id")), str(element.get("action_id"))
                text = values.get(block_id, {}).get(action_id) or None
                state[block_id] = {action_id: {"type": str(element.get("type")), "value": text}}
        payload = {
            "type": "view_submission",
            "team": {"id": self.team, "domain": "stand-in"},
            "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": self.team},
            "api_app_id": APP_ID, "token": "legacy-verification-token", "trigger_id": f"{next(self._counter)}.1.x",
            "view": {
                "id": str(view.get("id") or f"V{next(self._counter):08d}"), "team_id": self.team, "type": "modal",
                "blocks": list(view.get("blocks") or ()), "private_metadata":
                    str(view.get("private_metadata", "")) if private_metadata is None else private_metadata,
                "callback_id": str(view.get("callback_id", "")) if callback_id is None else callback_id,
                "state": {"values": state}, "hash": f"{next(self._counter)}.x", "title": view.get("title"),
                "app_id": APP_ID, "bot_id": BOT_ID, "root_view_id": None, "previous_view_id": None,
            },
            "response_urls": [], "is_enterprise_install": False, "enterprise": None,
        }
        return await self.deliver_form("interactive", {"payload": json.dumps(payload)})
