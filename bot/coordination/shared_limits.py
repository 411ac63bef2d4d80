"""Rate limits counted across replicas, in Redis.

The same sliding window as :class:`bot.rate_limits.RateLimiter`, kept in one sorted set
per limiter and key: each allowed amount is a member scored by the time it was allowed.
One script prunes what left the window, sums what is in it, and either counts the new
amount or says how long until it would fit; it reads the time from the server
(``TIME``), so replicas' clocks need not agree. With Redis unreachable, each replica
counts on its own (a local limiter), which is what one process did before.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Hashable
from typing import Protocol

from bot.coordination.link import CoordinationDown, RedisLink
from bot.rate_limits import RateLimiter

# KEYS[1] set; ARGV: window_s, amount, limit, member id. Returns "0" (counted), seconds to wait, or "inf".
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local window = tonumber(ARGV[1]); local amount = tonumber(ARGV[2]); local limit = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local total = 0
for i = 1, #entries, 2 do total = total + tonumber(string.match(entries[i], '|(%d+)$')) end
if total + amount <= limit then
  redis.call('ZADD', KEYS[1], now, ARGV[4] .. '|' .. ARGV[2])
  redis.call('PEXPIRE', KEYS[1], math.ceil(window * 1000))
  return '0'
end
local excess = total + amount - limit
for i = 1, #entries, 2 do
  excess = excess - tonumber(string.match(entries[i], '|(%d+)$'))
  if excess <= 0 then return tostring(tonumber(entries[i + 1]) + window - now) end
end
return 'inf'
"""
# KEYS[1] set; ARGV[1] amount: takes it back from the newest entries.
_REFUND = """
local amount = tonumber(ARGV[1])
while amount > 0 do
  local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #newest == 0 then return 0 end
  local id, counted = string.match(newest[1], '^(.*)|(%d+)$')
  counted = tonumber(counted)
  redis.call('ZREM', KEYS[1], newest[1])
  if counted > amount then
    redis.call('ZADD', KEYS[1], newest[2], id .. '|' .. (counted - amount))
    return 0
  end
  amount = amount - counted
end
return 0
"""


class Limiter(Protocol):
    """A sliding-window limit per key, awaited (see :class:`bot.rate_limits.RateLimiter`)."""

    async def try_acquire(self, key: Hashable, amount: int = 1, limit: int | None = None) -> float:
        """0.0 if counted, else seconds until it would fit (``math.inf``: never)."""
        ...

    async def refund(self, key: Hashable, amount: int = 1) -> None:
        """Takes back ``amount`` last counted for ``key``."""
        ...


LimiterFactory = Callable[[str, float], Limiter]
"""Makes a limiter given its name (``questions``, ...) and its window in seconds."""


class LocalLimiter:
    """This process's own counts: a :class:`RateLimiter` behind the awaited interface."""

    def __init__(self, window_s: float, clock: Callable[[], float] | None = None) -> None:
        self._limiter = RateLimiter(0, window_s) if clock is None else RateLimiter(0, window_s, clock=clock)

    async def try_acquire(self, key: Hashable, amount: int = 1, limit: int | None = None) -> float:
        return self._limiter.try_acquire(key, amount, limit)

    async def refund(self, key: Hashable, amount: int = 1) -> None:
        self._limiter.refund(key, amount)


class SharedLimiter:
    """Counts in Redis, across replicas; locally while Redis is unreachable."""

    def __init__(self, link: RedisLink, name: str, window_s: float) -> None:
        self._link = link
        self._name = name
        self._window_s = window_s
        self._local = LocalLimiter(window_s)

    async def try_acquire(self, key: Hashable, amount: int = 1, limit: int | None = None) -> float:
        if amount < 0 or (limit or 0) < 0:
            raise ValueError("amount and limit must be 0 or more")
        if not limit:
            return 0.0  # unlimited (a limiter is always given its limit per call here)
        if amount > limit:
            return math.inf
        member = uuid.uuid4().hex[:12]
        try:
            wait = await self._link.run(lambda r: r.eval(_ACQUIRE, 1, self._key(key), self._window_s,
                                                         amount, limit, member))
        except CoordinationDown:
            return await self._local.try_acquire(key, amount, limit)
        return math.inf if wait == "inf" else float(wait)

    async def refund(self, key: Hashable, amount: int = 1) -> None:
        try:
            await self._link.run(lambda r: r.eval(_REFUND, 1, self._key(key), amount))
        except CoordinationDown:
            await self._local.refund(key, amount)

    def _key(self, key: Hashable) -> str:
        parts = key if isinstance(key, tuple) else (key,)
        return self._link.key("limit", self._name, *(str(part) for part in parts))


def local_limiters(clock: Callable[[], float] | None = None) -> LimiterFactory:
    """Limiters counting in this process (one process, the embedded default)."""
    return lambda name, window_s: LocalLimiter(window_s, clock)


def shared_limiters(link: RedisLink) -> LimiterFactory:
    """Limiters counting in Redis, across every replica."""
    return lambda name, window_s: SharedLimiter(link, name, window_s)
