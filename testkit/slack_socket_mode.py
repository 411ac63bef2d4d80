"""The Slack stand-in's Socket Mode server: the websocket an app in Socket Mode connects to.

``/link`` is the websocket ``apps.connections.open`` hands out. :class:`SlackSocketMode`
greets each socket with ``hello``, pushes envelopes to the app and awaits their
acknowledgements (:class:`Delivery`); like Slack, it pings the app every
:attr:`~SlackSocketMode.ping_every_s` and answers the app's pings.
:meth:`~SlackSocketMode.go_silent` makes the open sockets stop delivering (no envelope, no
ping of its own) while they stay open and still answer pings, and
:attr:`~SlackSocketMode.connections` counts the sockets opened.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from testkit.slack_workspace import APP_ID, SlackWorkspace

ACK_TIMEOUT_S = 10.0
SERVER_PING_S = 5.0  # Slack pings Socket Mode clients (bolt-js waits 30 s for one before reconnecting)


@dataclass(frozen=True, slots=True)
class Delivery:
    """What came back for one delivered payload: the HTTP status (200 for a socket
    acknowledgement), the body (the acknowledgement's payload, as JSON text, in Socket
    Mode), and the seconds from sending to the acknowledgement."""

    status: int
    body: str
    seconds: float
    sent_at: float


@dataclass(slots=True)
class _Socket:
    ws: web.WebSocketResponse
    acks: dict[str, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    silent: bool = False  # open and answering pings, but delivering nothing (see go_silent)


class SlackSocketMode(SlackWorkspace):
    """The Socket Mode part of :class:`~testkit.slack_api.SlackStandIn` (see the module docstring)."""

    def init_socket_mode(self) -> None:
        """Sets up the Socket Mode state (called once, by the stand-in's constructor)."""
        self._sockets: list[_Socket] = []
        self._socket_ready = asyncio.Event()  # a socket that delivers is open
        self.connections = 0  # Socket Mode connections opened so far
        self.ping_every_s = SERVER_PING_S  # how often the stand-in pings each socket, as Slack does

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()  # autoping: the app's pings are answered while frames are read
        await ws.prepare(request)
        socket = _Socket(ws)
        self._sockets.append(socket)
        self.connections += 1
        await ws.send_str(json.dumps({"type": "hello", "num_connections": len(self._sockets),
                                      "connection_info": {"app_id": APP_ID}}))
        self._socket_ready.set()
        pinging = asyncio.get_running_loop().create_task(self._ping(socket))
        try:
            async for frame in ws:
                if frame.type != aiohttp.WSMsgType.TEXT:
                    continue
                ack = json.loads(frame.data)
                waiter = socket.acks.pop(str(ack.get("envelope_id")), None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(ack)
        finally:
            pinging.cancel()
            self._sockets.remove(socket)
            self._note_delivering()
        return ws

    async def _ping(self, socket: _Socket) -> None:
        """Slack's own keep-alive: a ping every ``ping_every_s``, until the socket goes silent."""
        while not socket.ws.closed and not socket.silent:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await socket.ws.ping(b"stand-in")
            await asyncio.sleep(self.ping_every_s)

    def _note_delivering(self) -> None:
        if any(not socket.silent for socket in self._sockets):
            self._socket_ready.set()
        else:
            self._socket_ready.clear()

    def go_silent(self) -> None:
        """The open sockets stop delivering: no envelope and no ping of Slack's own goes out on
        them any more, while they stay open and still answer the app's pings (the session that
        goes quiet without closing). Envelopes wait for a socket the app opens afterwards."""
        for socket in self._sockets:
            socket.silent = True
        self._note_delivering()

    async def wait_connected(self, timeout: float = 10.0) -> None:
        """Waits until a socket that delivers is open."""
        await asyncio.wait_for(self._socket_ready.wait(), timeout)

    async def _push(
        self, kind: str, payload: Any, retry: int = 0, raw: str | None = None, ack_timeout: float = ACK_TIMEOUT_S
    ) -> Delivery:
        """Sends an envelope and waits for its acknowledgement; status 0 when none came in
        ``ack_timeout`` seconds (bolt does not acknowledge what it failed to process)."""
        await self.wait_connected()
        socket = [s for s in self._sockets if not s.silent][-1]
        envelope_id = f"env-{next(self._counter)}"
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        socket.acks[envelope_id] = waiter
        envelope = {"envelope_id": envelope_id, "type": kind, "accepts_response_payload": kind != "events_api",
                    "payload": payload}
        if kind == "events_api":
            envelope.update({"retry_attempt": retry, "retry_reason": "timeout" if retry else ""})
        sent = time.perf_counter()
        await socket.ws.send_str(raw if raw is not None else json.dumps(envelope))
        if raw is not None:
            socket.acks.pop(envelope_id, None)
            return Delivery(0, "", 0.0, sent)
        try:
            ack = await asyncio.wait_for(waiter, ack_timeout)
        except TimeoutError:
            socket.acks.pop(envelope_id, None)
            return Delivery(0, "", ack_timeout, sent)
        return Delivery(200, json.dumps(ack.get("payload") or {}), time.perf_counter() - sent, sent)
