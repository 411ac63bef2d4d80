"""Delivering to the app as Slack does: events, slash commands and interactions, over the
socket or as signed HTTP POSTs.

:class:`SlackEvents` wraps an event in Slack's ``event_callback`` envelope and delivers it,
and delivers forms (slash commands, interactions), the way :attr:`SlackEvents.mode` says:
``"socket"`` pushes an envelope over Socket Mode (:mod:`testkit.slack_socket_mode`);
``"http"`` plays the **Events API sender** for an app in HTTP mode: payloads POSTed to
:attr:`SlackEvents.app_url` with ``X-Slack-Signature`` computed as Slack does (:func:`sign`:
``v0=`` + HMAC-SHA256 of ``v0:{timestamp}:{body}`` with the signing secret), retries marked
with ``X-Slack-Retry-Num``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.parse
from typing import Any

import aiohttp

from testkit.slack_socket_mode import ACK_TIMEOUT_S, Delivery, SlackSocketMode
from testkit.slack_workspace import APP_ID, BOT_USER


def sign(secret: str, timestamp: str, body: str | bytes) -> str:
    """``X-Slack-Signature`` as Slack computes it (over the body's bytes as sent)."""
    base = f"v0:{timestamp}:".encode() + (body.encode() if isinstance(body, str) else body)
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


class SlackEvents(SlackSocketMode):
    """The part of :class:`~testkit.slack_api.SlackStandIn` that delivers to the app (see the module docstring)."""

    def init_events(self) -> None:
        """Sets up how events are delivered (called once, by the stand-in's constructor); the
        HTTP session is opened when the stand-in starts."""
        self.mode = "socket"  # how events are delivered: "socket" or "http"
        self.app_url = ""  # HTTP mode: where the app listens
        self._session: aiohttp.ClientSession | None = None

    async def post_http(
        self,
        body: str | bytes,
        content_type: str,
        *,
        retry: int = 0,
        timestamp: str | None = None,
        secret: str | None = None,
    ) -> Delivery:
        """POSTs ``body`` to the app as Slack does, signed with ``secret`` (default: the real
        one) at ``timestamp`` (default: now). Bytes are sent as they are (a body that is
        not UTF-8); text is encoded as UTF-8."""
        assert self._session is not None and self.app_url, "the app's URL is not set"
        stamp = timestamp or str(int(time.time()))
        headers = {
            "Content-Type": content_type,
            "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": sign(self.signing_secret if secret is None else secret, stamp, body),
        }
        if retry:
            headers.update({"X-Slack-Retry-Num": str(retry), "X-Slack-Retry-Reason": "http_timeout"})
        sent = time.perf_counter()
        data = body.encode() if isinstance(body, str) else body
        async with self._session.post(self.app_url, data=data, headers=headers) as response:
            text = await response.text()
            return Delivery(response.status, text, time.perf_counter() - sent, sent)

    async def deliver_event(self, event: dict[str, Any], *, event_id: str = "", retry: int = 0) -> Delivery:
        """Wraps ``event`` in an ``event_callback`` and delivers it (again, with the same
        ``event_id``, when retrying)."""
        body = self.event_callback(event, event_id)
        return await self.deliver_callback(body, retry=retry)

    def event_callback(self, event: dict[str, Any], event_id: str = "") -> dict[str, Any]:
        item = event.get("item")
        channel = str(event.get("channel") or event.get("channel_id")
                      or (item.get("channel") if isinstance(item, dict) else "") or "")
        return {
            "token": "legacy-verification-token",
            "team_id": self.team,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id or f"Ev{next(self._counter):08d}",
            "event_time": int(time.time()),
            "authorizations": [{"enterprise_id": None, "team_id": self.team, "user_id": BOT_USER, "is_bot": True,
                                "is_enterprise_install": False}],
            "is_ext_shared_channel": channel in self.shared_with,
        }

    async def deliver_callback(
        self, body: dict[str, Any], *, retry: int = 0, ack_timeout: float = ACK_TIMEOUT_S
    ) -> Delivery:
        if self.mode == "socket":
            return await self._push("events_api", body, retry, ack_timeout=ack_timeout)
        return await self.post_http(json.dumps(body), "application/json", retry=retry)

    async def deliver_form(self, kind: str, fields: dict[str, str]) -> Delivery:
        """A slash command (``kind`` ``slash_commands``, the form's fields) or an interaction
        (``interactive``, fields ``{"payload": json}``)."""
        if self.mode == "socket":
            payload: Any = json.loads(fields["payload"]) if kind == "interactive" else fields
            return await self._push(kind, payload)
        return await self.post_http(urllib.parse.urlencode(fields), "application/x-www-form-urlencoded")

    async def deliver_raw_socket(self, text: str) -> None:
        """Sends any text over the socket (to test malformed frames); nothing is awaited."""
        await self._push("events_api", None, raw=text)
