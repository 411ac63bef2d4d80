"""The process's connection to the coordination server (Redis or Valkey), and its health.

Every call goes through :meth:`RedisLink.run` (coroutines, ``redis.asyncio``) or
:meth:`RedisLink.run_sync` (threads: the worker, RQ), which translate the client's
connection errors into :class:`CoordinationDown`. The link remembers whether the
server answered last time: an outage is logged once when it starts and once when it
ends, not on every event that meets it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeoutError

from bot.deploy_config import CoordinationConfig
from bot.errors import BotError

log = logging.getLogger(__name__)

T = TypeVar("T")

STABLE_S = 5.0  # the server must answer this long before an outage is logged as over
_UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)


class CoordinationDown(BotError):
    """The coordination server cannot be reached; nothing was changed there."""

    def __init__(self, cause: BaseException | None = None) -> None:
        super().__init__("the coordination server (Redis) cannot be reached")
        self.__cause__ = cause


class RedisLink:
    """One server, one key namespace, an asyncio client and a blocking one.

    ``redis`` (asyncio) is for the event loop; ``blocking`` is for threads and for RQ,
    which needs a blocking client that returns bytes (``decode_responses`` off).
    """

    def __init__(self, config: CoordinationConfig) -> None:
        url = config.redis_url.get_secret_value()
        connect_s, read_s = config.connect_timeout_s, max(config.connect_timeout_s, 5.0)
        self.namespace = config.namespace
        self.redis: aioredis.Redis = aioredis.Redis.from_url(
            url, decode_responses=True, socket_connect_timeout=connect_s, socket_timeout=read_s)
        self.blocking: redis.Redis = redis.Redis.from_url(
            url, socket_connect_timeout=connect_s, socket_timeout=read_s)
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._outage_since: float | None = None  # the outage logged and not yet logged as over
        self._up_since: float | None = None  # answering again since (an outage ends once this lasts)

    def key(self, *parts: str) -> str:
        """The namespaced key ``namespace:part:part...``."""
        return ":".join((self.namespace, *parts))

    @property
    def up(self) -> bool:
        """Whether the server answered the last call (True before any call)."""
        return self._down_since is None

    async def run(self, call: Callable[[aioredis.Redis], Awaitable[T]]) -> T:
        """``await call(client)``; raises :class:`CoordinationDown` if the server is unreachable."""
        try:
            result = await call(self.redis)
        except _UNREACHABLE as exc:
            self.mark_down(exc)
            raise CoordinationDown(exc) from exc
        self._mark_up()
        return result

    def run_sync(self, call: Callable[[redis.Redis], T]) -> T:
        """``call(blocking_client)`` in the calling thread; raises :class:`CoordinationDown` likewise."""
        try:
            result = call(self.blocking)
        except _UNREACHABLE as exc:
            self.mark_down(exc)
            raise CoordinationDown(exc) from exc
        self._mark_up()
        return result

    async def ping(self) -> bool:
        """Whether the server answers now (for readiness and recovery checks); never raises."""
        try:
            return bool(await self.run(lambda r: r.ping()))
        except CoordinationDown:
            return False

    def ping_sync(self) -> bool:
        """:meth:`ping` from any thread, with the blocking client; never raises."""
        try:
            return bool(self.run_sync(lambda r: r.ping()))
        except CoordinationDown:
            return False

    async def close(self) -> None:
        await self.redis.aclose()
        self.blocking.close()

    def mark_down(self, exc: BaseException) -> None:
        """Notes that the server could not be reached. An outage is logged when it starts; a
        failure soon after a success that did not last :data:`STABLE_S` (a server shutting down
        drops its connections before it stops listening) belongs to the same outage."""
        with self._lock:
            if self._down_since is not None:
                return
            now = time.monotonic()
            self._down_since = now
            self._up_since = None
            if self._outage_since is not None:
                return  # the outage already logged goes on
            self._outage_since = now
        log.warning("the coordination server is unreachable (%s); rebuilds wait, questions are still answered",
                    type(exc).__name__)

    def _mark_up(self) -> None:
        with self._lock:
            now = time.monotonic()
            if self._down_since is not None:
                self._down_since = None
                self._up_since = now
            if self._outage_since is None or self._up_since is None or now - self._up_since < STABLE_S:
                return
            lasted = self._up_since - self._outage_since
            self._outage_since = self._up_since = None
        log.warning("the coordination server is back (it was unreachable for %.0f s)", lasted)


def describe(value: Any) -> str:
    """A Redis reply (bytes or str) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
