"""The Discord stand-in's gateway: the websocket handshake (HELLO, heartbeats and their ACKs,
IDENTIFY with READY and one GUILD_CREATE per guild, RESUME or an invalid session), events sent
to the identified connection, connections gone silent, and the message content intent's rule on
what a delivered message shows.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import suppress
from typing import Any

from aiohttp import WSMsgType, web

from testkit.discord_state import DiscordState

HEARTBEAT_ACK_DELAY_S = 0.02
MESSAGE_CONTENT_INTENT = 1 << 15


class DiscordGateway(DiscordState):
    """The gateway websocket server and the events it sends."""

    async def dispatch(self, event: str, data: Any) -> float:
        """Sends one gateway event; returns the ``perf_counter`` time it was sent."""
        self._sequence += 1
        return await self.send_frame(json.dumps({"op": 0, "t": event, "s": self._sequence, "d": data}))

    async def send_frame(self, text: str) -> float:
        """Sends a raw text frame (valid or not) on the identified connection."""
        await asyncio.wait_for(self._identified.wait(), 10)
        assert self._socket is not None
        sent = time.perf_counter()
        await self._socket.send_str(text)
        self.frames_sent += 1
        return sent

    async def _gateway(self, request: web.Request) -> web.StreamResponse:
        socket = web.WebSocketResponse(autoping=True)
        await socket.prepare(request)
        self._sockets.add(socket)
        self.connections += 1
        try:
            await socket.send_str(json.dumps({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}}))
            async for frame in socket:
                if frame.type is not WSMsgType.TEXT:
                    continue
                await self._on_frame(socket, json.loads(frame.data))
        finally:
            self._sockets.discard(socket)
            self._silent.discard(socket)
            if self._socket is socket:
                self._socket = None
                self._identified.clear()
        return socket

    async def _on_frame(self, socket: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        op = frame.get("op")
        if op == 1:
            # After a network's round trip, as from Discord: an ACK arriving before discord.py's
            # heartbeat thread has noted its send makes it warn of a 45 s latency.
            task = asyncio.get_running_loop().create_task(self._ack_later(socket))
            self._acks.add(task)
            task.add_done_callback(self._acks.discard)
        elif op == 2:
            await self._identify(socket, frame["d"])
        elif op == 6:
            await self._resume(socket, frame["d"])

    async def _resume(self, socket: web.WebSocketResponse, resume: dict[str, Any]) -> None:
        """RESUME of the current session (after :meth:`go_silent`, say) when ``resumable``:
        RESUMED, and events dispatched meanwhile follow. Otherwise, or for an older session,
        an invalid session: the client identifies again."""
        if not (self.resumable and self.identifies and resume.get("session_id") == self._session_id()):
            await socket.send_str(json.dumps({"op": 9, "d": False}))
            return
        self.resumes += 1
        self._socket = socket
        self._sequence += 1
        await socket.send_str(json.dumps({"op": 0, "t": "RESUMED", "s": self._sequence, "d": {}}))
        self._identified.set()
        await self._notify()

    def _session_id(self) -> str:
        return f"session-{len(self.identifies)}"

    def go_silent(self) -> None:
        """The open gateway connections go silent: they stay open but ACK no heartbeat and
        carry no event any more (a zombied connection). Events wait for the next IDENTIFY or RESUME."""
        self._silent.update(self._sockets)
        self._socket = None
        self._identified.clear()

    async def _ack_later(self, socket: web.WebSocketResponse) -> None:
        await asyncio.sleep(HEARTBEAT_ACK_DELAY_S)
        if not socket.closed and socket not in self._silent:
            with suppress(ConnectionError):
                await socket.send_str(json.dumps({"op": 11}))

    async def _identify(self, socket: web.WebSocketResponse, identify: dict[str, Any]) -> None:
        self.identifies.append(identify)
        self._socket = socket
        self._sequence = 1
        ready = {
            "v": 10,
            "user": self.bot_user,
            "session_id": self._session_id(),
            "resume_gateway_url": self.gateway_url,
            "guilds": [{"id": g, "unavailable": True} for g in self.guilds],
            "application": {"id": self.application_id, "flags": 0},
            "private_channels": [],
        }
        await socket.send_str(json.dumps({"op": 0, "t": "READY", "s": self._sequence, "d": ready}))
        for guild in self.guilds.values():
            self._sequence += 1
            await socket.send_str(json.dumps({"op": 0, "t": "GUILD_CREATE", "s": self._sequence, "d": guild}))
        self._identified.set()
        await self._notify()

    def _intents(self) -> int:
        return int(self.identifies[-1].get("intents", 0)) if self.identifies else 0

    def _as_delivered(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A message as the gateway delivers it: content blanked without the message content
        intent, unless it mentions the bot or is a DM (Discord's rule)."""
        if self._intents() & MESSAGE_CONTENT_INTENT:
            return payload
        mentioned = any(str(m["id"]) == self.bot_id for m in payload.get("mentions", []))
        if mentioned or "guild_id" not in payload:
            return payload
        return {**payload, "content": "", "attachments": [], "embeds": []}
