"""Exactly-once handling of platform events across replicas.

Slack retries an event it did not see acknowledged within 3 s, possibly to another
replica; Discord delivers every gateway event to every gateway connection of the bot.
Each replica asks :meth:`DeliveryLedger.first` before handling an event: the first asker
of an id gets True, everyone after it False, for ``ttl_s`` seconds. The adapter says
whether the platform ``broadcast`` the event (Discord's gateway: every front-end got it)
or handed it to one front-end (Slack's HTTP endpoint and Socket Mode).

:class:`LocalLedger` remembers in the process (one process); :class:`SharedLedger`
remembers in Redis with ``SET NX EX``. When Redis is unreachable the shared ledger
decides without it, deterministically, so that no event is handled twice:

* an event handed to one front-end is handled by the front-end it reached (its local
  memory turns away the platform's retries that come back to it; a retry that lands on
  another replica during the outage may be answered twice, which beats not answering);
* a broadcast event is handled only by the front-end that owns it: the one whose place
  in ``coordination.front_end_index`` of ``coordination.front_ends`` equals a hash of the
  event id (:class:`FrontEndShare`). Every front-end computes the same owner, so each
  Discord message is answered at most once. The price: while Redis is down, the events a
  stopped front-end owns go unanswered (with Redis up, any live front-end answers all).
  Each front-end must be given its own index, and all the same count; with the default
  (0 of 1) a lone front-end owns everything.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from bot.coordination.link import CoordinationDown, RedisLink

log = logging.getLogger(__name__)

SEEN_EVENTS = 10_000  # event ids remembered by one process


class DeliveryLedger(Protocol):
    async def first(self, event_id: str, broadcast: bool = False) -> bool:
        """True the first time ``event_id`` is asked about (then it is remembered), else False.
        ``broadcast``: the platform delivered the event to every front-end, not to one."""
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
    """The events this process saw (the last :data:`SEEN_EVENTS`): the only front-end's ledger."""

    def __init__(self, size: int = SEEN_EVENTS) -> None:
        self._seen = RecentKeys(size)

    async def first(self, event_id: str, broadcast: bool = False) -> bool:
        return self._seen.add(event_id)


@dataclass(frozen=True, slots=True)
class FrontEndShare:
    """This front-end's place among ``count`` front-ends (``index`` from 0): which broadcast
    events it handles while Redis is down (see the module docstring)."""

    index: int = 0
    count: int = 1

    def owns(self, event_id: str) -> bool:
        """Whether ``event_id`` falls to this front-end: the same answer in every process
        (a digest, not Python's per-process ``hash``), spread evenly over the front-ends."""
        digest = hashlib.sha256(event_id.encode()).digest()
        return int.from_bytes(digest[:8], "big") % self.count == self.index


class SharedLedger:
    """The events any replica saw within ``ttl_s``, in Redis; without Redis, see the module docstring."""

    def __init__(self, link: RedisLink, ttl_s: int, share: FrontEndShare = FrontEndShare()) -> None:
        self._link = link
        self._ttl_s = ttl_s
        self._share = share
        self._local = LocalLedger()

    async def first(self, event_id: str, broadcast: bool = False) -> bool:
        seen_here = not await self._local.first(event_id)
        if seen_here:
            return False  # no round trip for a retry that came back to this replica
        try:
            fresh = await self._link.run(
                lambda redis: redis.set(self._link.key("event", event_id), "1", nx=True, ex=self._ttl_s)
            )
        except CoordinationDown:
            # The link logged the outage. A broadcast event reached every front-end: its owner answers.
            if broadcast and not self._share.owns(event_id):
                log.debug("event %s is another front-end's while Redis is down (this is %d of %d)", event_id,
                          self._share.index, self._share.count)
                return False
            return True
        return bool(fresh)
