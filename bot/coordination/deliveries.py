"""Exactly-once handling of platform events across replicas.

Slack retries an event it did not see acknowledged within 3 s, possibly to another
replica; Discord delivers every message to every gateway connection of the bot. Each
replica asks :meth:`DeliveryLedger.first` before handling an event: the first asker of
an id gets True, everyone after it False, for ``ttl_s`` seconds.

:class:`LocalLedger` remembers in the process (one process, or Redis down);
:class:`SharedLedger` remembers in Redis with ``SET NX EX``. When Redis is unreachable
the shared ledger falls back to its local one: an event retried to another replica
during the outage may then be answered twice, which beats not answering it at all.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Protocol

from bot.coordination.link import CoordinationDown, RedisLink

log = logging.getLogger(__name__)

SEEN_EVENTS = 10_000  # event ids remembered by one process


class DeliveryLedger(Protocol):
    async def first(self, event_id: str) -> bool:
        """True the first time ``event_id`` is asked about (then it is remembered), else False."""
        ...


class RecentKeys:
    """The last ``size`` keys seen, to tell a first delivery from a repeated one."""

    def __init__(self, size: int = SEEN_EVENTS) -> None:
        self._size = size
        self._keys: OrderedDict[str, None] = OrderedDict()

    def add(self, key: str) -> bool:
        """Remembers ``key``; True when it was not remembered already."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return False
        self._keys[key] = None
        if len(self._keys) > self._size:
            self._keys.popitem(last=False)
        return True


class LocalLedger:
    """The events this process saw (the last :data:`SEEN_EVENTS`)."""

    def __init__(self, size: int = SEEN_EVENTS) -> None:
        self._seen = RecentKeys(size)

    async def first(self, event_id: str) -> bool:
        return self._seen.add(event_id)


class SharedLedger:
    """The events any replica saw within ``ttl_s``, in Redis; this process's own when Redis is down."""

    def __init__(self, link: RedisLink, ttl_s: int) -> None:
        self._link = link
        self._ttl_s = ttl_s
        self._local = LocalLedger()

    async def first(self, event_id: str) -> bool:
        seen_here = not await self._local.first(event_id)
        if seen_here:
            return False  # no round trip for a retry that came back to this replica
        try:
            fresh = await self._link.run(
                lambda redis: redis.set(self._link.key("event", event_id), "1", nx=True, ex=self._ttl_s)
            )
        except CoordinationDown:
            return True  # remembered locally above; the link logged the outage
        return bool(fresh)
