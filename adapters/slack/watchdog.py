"""Keeping a Socket Mode session honest: :class:`SocketWatchdog`.

A Socket Mode session can stop delivering events while the process stays up and nothing
is logged (slackapi/python-slack-sdk#1701: after a reconnect no event arrives until the
app happens to call the Web API). slack_sdk's aiohttp client already pings every
``ping_interval`` and reconnects when its pings go unanswered, and on Slack's own
``disconnect`` envelopes; what it cannot see is a socket that answers pings but on which
Slack has gone quiet. The watchdog adds, every ``slack.socket_watchdog_s`` (``interval``):

* **"stops delivering"** (reason ``silent``): the time since the last frame *Slack sent on
  its own* on the current socket — an envelope (events, ``hello``, ``disconnect``) or a
  WebSocket ping from Slack's side. Pongs do not count: they answer our pings, which only
  proves the socket is open. Slack's servers ping every Socket Mode client (bolt-js
  reconnects when no server ping came for 30 s, its ``serverPingTimeout``), so an idle
  workspace, where people are quiet and no envelope comes for hours, still hears from
  Slack every few seconds and is left alone; a socket on which even Slack's pings stopped
  is replaced once it has been silent for ``interval``. The rule is only applied after
  Slack has been seen pinging at least once in this process: were a server never to ping
  (an older or different one), silence would mean nothing and only the check below runs.
  Frames are timed by an aiohttp ``ClientWebSocketResponse`` subclass
  (:class:`WatchedWebSocket`), given to the client through aiohttp's documented
  ``ws_response_class``; nothing else of the connection is touched.
* **"stops answering"** (reason ``unanswered``): ``auth.test`` is called (the lightweight
  call slack-bolt users settled on) and gets no answer within ``interval`` (a timeout, a
  connection error). A refusal (``invalid_auth``, a 5xx) is an answer: it is logged, and no
  new socket would fix it. A Web API call every minute also does what the report above
  found to wake a session up.
* slack_sdk's own reconnects are logged and counted too, once the watchdog sees the
  session change: ``refresh`` when Slack asked for it (a ``disconnect`` envelope, every
  few hours), ``dropped`` otherwise (its pings went unanswered, the socket closed).

A reconnect goes through slack_sdk (``connect_to_new_endpoint(force=True)``): a new URL
from ``apps.connections.open``, then the old socket is closed and a new one opened. When
the Web API cannot be reached the URL is not issued and the old socket stays as it was;
the next check tries again. Every reconnect is logged and counted in
``raptor_reconnects_total{platform="slack", reason}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any, Protocol

import aiohttp
from aiohttp import WSMsgType
from slack_sdk.errors import SlackApiError
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack import web as slack_web
from adapters.slack.translate import PLATFORM

log = logging.getLogger(__name__)

CHECKS_PER_INTERVAL = 4  # silence is looked at this often per interval: a dead socket is noticed within 1¼ of it
SLACK_FRAMES = frozenset({WSMsgType.TEXT, WSMsgType.BINARY, WSMsgType.PING})  # what Slack sends unasked


class CountsReconnects(Protocol):
    """Where reconnects are counted (``Assistant.metrics``)."""

    def count_reconnect(self, platform: str, reason: str) -> None: ...


class WatchedWebSocket(aiohttp.ClientWebSocketResponse):
    """aiohttp's client websocket, noting when the server last sent a frame of its own
    (:data:`SLACK_FRAMES`), whether it ever pinged, and whether its last envelope asked the
    client to reconnect (``{"type": "disconnect"}``). Reading is otherwise unchanged."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.heard_at = time.monotonic()  # the connection itself counts as hearing from the server
        self.server_pinged = False
        self.asked_to_reconnect = False

    async def receive(self, timeout: float | None = None) -> Any:
        # One override for aiohttp's three typed overloads: the message is returned as read.
        message = await super().receive(timeout)
        if message.type in SLACK_FRAMES:
            self.heard_at = time.monotonic()
            self.server_pinged = self.server_pinged or message.type is WSMsgType.PING
            if message.type is WSMsgType.TEXT:
                self.asked_to_reconnect = _is_disconnect(message.data)
        return message


def _is_disconnect(text: Any) -> bool:
    """Whether an envelope is Slack's ``disconnect`` (parsed only when it may be one)."""
    if not isinstance(text, str) or '"disconnect"' not in text:
        return False
    try:
        return bool(json.loads(text).get("type") == "disconnect")
    except (ValueError, AttributeError):
        return False


class SocketWatchdog:
    """Watches the Socket Mode ``client`` of a handler; see the module docstring.

    ``web`` is the bot's Web API client (for ``auth.test``), ``interval_s`` the configured
    ``slack.socket_watchdog_s`` (positive). Call :meth:`install` before the client connects,
    then run :meth:`run` as a task until it is cancelled.
    """

    def __init__(self, client: SocketModeClient, web: AsyncWebClient, metrics: CountsReconnects, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.client = client
        self.web = web
        self.metrics = metrics
        self.interval_s = interval_s
        self._known: object | None = None  # the session last seen, to tell slack_sdk's own reconnects
        self._slack_pings = False  # Slack was seen pinging: its silence means something
        self._refused: str = ""  # the last auth.test refusal logged, so a lasting one is logged once

    async def install(self) -> None:
        """Gives the client an HTTP session whose websockets time Slack's frames. The one
        slack_sdk made is unused until the client connects, and is closed."""
        unused = self.client.aiohttp_client_session
        self.client.aiohttp_client_session = aiohttp.ClientSession(ws_response_class=WatchedWebSocket)
        await unused.close()

    async def run(self) -> None:
        """Checks the session ``CHECKS_PER_INTERVAL`` times per interval and Web API once per
        interval, reconnecting when either check fails, until cancelled."""
        self._known = self.client.current_session
        next_probe = time.monotonic() + self.interval_s
        while True:
            await asyncio.sleep(self.interval_s / CHECKS_PER_INTERVAL)
            self._note_own_reconnect()
            reason = self._silence()
            if not reason and time.monotonic() >= next_probe:
                next_probe = time.monotonic() + self.interval_s
                reason = await self._probe()
            if reason:
                await self._reconnect(reason)

    # -- the checks ---------------------------------------------------------------------

    def _note_own_reconnect(self) -> None:
        """Logs and counts a reconnect slack_sdk made by itself since the last check."""
        session = self.client.current_session
        previous = self._known
        if session is previous or session is None:
            return
        self._known = session
        refresh = isinstance(previous, WatchedWebSocket) and previous.asked_to_reconnect
        reason = "refresh" if refresh else "dropped"
        if refresh:
            log.info("Slack: Socket Mode session replaced, as Slack asked (a disconnect envelope)")
        else:
            log.warning("Slack: slack_sdk replaced the Socket Mode session (its pings went unanswered or the socket "
                        "closed)")
        self.metrics.count_reconnect(PLATFORM, reason)

    def _silence(self) -> str:
        """``"silent"`` when Slack, known to ping, has sent nothing on the open socket for the interval."""
        socket = self.client.current_session
        if not isinstance(socket, WatchedWebSocket) or socket.closed:
            return ""  # closed: slack_sdk's own monitor reconnects it
        self._slack_pings = self._slack_pings or socket.server_pinged
        silent_for = time.monotonic() - socket.heard_at
        if not self._slack_pings or silent_for <= self.interval_s:
            return ""
        log.warning("Slack: nothing from Slack on the Socket Mode session for %.1f s (no event, no ping of its "
                    "own) although the socket is open; reconnecting", silent_for)
        return "silent"

    async def _probe(self) -> str:
        """``auth.test``: ``"unanswered"`` when no answer came within the interval."""
        try:
            await asyncio.wait_for(self.web.auth_test(), self.interval_s)
        except TimeoutError:  # before TRANSPORT_ERRORS, which holds it, for its own message
            log.warning("Slack: auth.test got no answer in %.1f s; reconnecting the Socket Mode session",
                        self.interval_s)
            return "unanswered"
        except SlackApiError as exc:  # an answer; before TRANSPORT_ERRORS, whose SlackClientError holds it
            code = slack_web.error_code(exc)
            if code != self._refused:
                log.error("Slack: auth.test was refused (%s); a new socket would not help, so none is opened", code)
            self._refused = code
            return ""
        except slack_web.TRANSPORT_ERRORS as exc:
            log.warning("Slack: auth.test could not reach Slack (%s); reconnecting the Socket Mode session",
                        slack_web.error_code(exc))
            return "unanswered"
        if self._refused:
            log.info("Slack: auth.test is answered again")
        self._refused = ""
        return ""

    # -- reconnecting ---------------------------------------------------------------------

    async def _reconnect(self, reason: str) -> None:
        """A new session through slack_sdk; counted whether or not it works. After a failure
        (Slack's Web API unreachable: the old socket is left as it was) it waits an interval
        before checking again, rather than trying at every check."""
        self.metrics.count_reconnect(PLATFORM, reason)
        started = time.monotonic()
        try:
            await self.client.connect_to_new_endpoint(force=True)
        except Exception as exc:
            log.warning("Slack: reconnecting the Socket Mode session failed (%s); trying again in %.0f s",
                        slack_web.error_code(exc), self.interval_s)
            self._known = self.client.current_session
            await asyncio.sleep(self.interval_s)
            return
        self._known = self.client.current_session  # ours: not to be counted again as one of slack_sdk's
        log.info("Slack: Socket Mode session reconnected (%s) in %.2f s", reason, time.monotonic() - started)
