"""What the Discord stand-in holds, and what a test reads of it: the bot user and application,
guilds, channels, messages, pins, files, interactions, the calls recorded and the gateway's
connection state; its URLs; and waiting until a condition on all that holds.

:class:`DiscordState` is the base of :class:`~testkit.discord_fake.FakeDiscord`'s layers (gateway,
world, failures, REST routes): each layer is a subclass adding one concern over this state.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from aiohttp import web

from testkit.discord_http import API
from testkit.discord_payloads import snowflake, user_payload
from testkit.discord_records import Call, Failure, Interaction

POLL_S = 0.05


class DiscordState:
    """The stand-in's state (set up by ``__init__``: one bot user and application, nothing else),
    its URLs and the reads a test makes of it."""

    def __init__(self, bot_name: str = "Raptor") -> None:
        self.bot_user = user_payload(snowflake(), bot_name, bot=True)
        self.application_id = snowflake()
        self.owner = user_payload(snowflake(), "Owner")
        self.calls: list[Call] = []
        self.guilds: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, list[dict[str, Any]]] = {}  # channel id -> messages, oldest first
        self.pins: dict[str, list[tuple[str, str]]] = {}  # channel id -> (message id, pinned_at), newest first
        self.files: dict[str, bytes] = {}  # CDN path -> bytes
        self.interactions: dict[str, Interaction] = {}  # token -> interaction
        self.commands: list[dict[str, Any]] = []
        self.identifies: list[dict[str, Any]] = []
        self.failures: list[Failure] = []
        self.frames_sent = 0
        self.connections = 0  # gateway connections opened so far
        self.heartbeat_interval_ms = 45000  # what HELLO asks for (Discord's is 41250)
        self._silent: set[web.WebSocketResponse] = set()  # open, but neither ACKing nor dispatching
        self.resumable = True  # RESUME of the current session is accepted (else: invalid session)
        self.resumes = 0
        self._sequence = 0
        self._socket: web.WebSocketResponse | None = None
        self._sockets: set[web.WebSocketResponse] = set()
        self._identified = asyncio.Event()
        self._acks: set[asyncio.Task[None]] = set()
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def api_base_url(self) -> str:
        return self.base_url + API

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/"

    @property
    def bot_id(self) -> str:
        return str(self.bot_user["id"])

    # -- what a test reads -------------------------------------------------------------

    def calls_to(self, method: str, pattern: str, since: int = 0) -> list[Call]:
        regex = re.compile(pattern)
        return [c for c in self.calls[since:] if c.method == method and regex.search(c.path)]

    def is_pinned(self, channel_id: str, message_id: str) -> bool:
        """Whether the message is pinned in the channel now."""
        return any(pinned_id == str(message_id) for pinned_id, _ in self.pins.get(channel_id, []))

    def bot_messages(self, channel_id: str) -> list[dict[str, Any]]:
        return [m for m in self.messages.get(channel_id, []) if m["author"]["id"] == self.bot_id]

    async def wait_for(self, condition: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Waits until ``condition()`` is truthy (checked after every request, and every
        ``POLL_S`` for conditions on things outside the stand-in); returns its value."""
        async def until() -> Any:
            async with self._changed:
                while not (value := condition()):
                    with suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), POLL_S)
                return value

        try:
            return await asyncio.wait_for(until(), timeout)
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout} s waiting; calls: {self._recent_calls()}") from None

    async def wait_identified(self, count: int = 1, timeout: float = 10.0) -> None:
        await self.wait_for(lambda: len(self.identifies) >= count, timeout)

    def _recent_calls(self) -> list[str]:
        return [f"{c.method} {c.path} {c.status}" for c in self.calls[-8:]]

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _find(self, channel_id: str, message_id: str) -> dict[str, Any] | None:
        return next((m for m in self.messages.get(channel_id, []) if m["id"] == message_id), None)
