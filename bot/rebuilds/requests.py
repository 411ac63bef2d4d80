"""Who asked for a channel's rebuild, kept in Redis until they are told.

A front-end appends each request to ``requests:<channel>`` and adds the channel to the
``pending`` set. The worker holding the channel's lease moves the requests it is about
to build for into ``building:<channel>`` (one script, checked against its lease), and
deletes that list once everyone in it has been told. Requests arriving meanwhile stay
in ``requests:``: the same worker builds again for them before it lets the lease go.

A worker that dies mid-build leaves ``building:`` as it was: the next worker to take the
lease takes those requesters too, so nobody who asked goes untold. The ``pending`` set
is what the front-ends' sweep reads to enqueue a job for a channel left like that.

Each request is signed (:mod:`bot.coordination.signing`): a record a Redis writer made,
or one copied from another channel's list, is dropped and logged by whoever reads it, so
a worker tells only people who asked, in the channel they asked in. Told requesters move
to ``told:<channel>`` for :data:`TOLD_KEEP_S`: until then the front-ends know whom a
worker's reply may be posted to (:meth:`RebuildRequests.asked`), even after the build ended.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bot.coordination.lease import ChannelLeases, Held
from bot.coordination.link import RedisLink, describe
from bot.coordination.signing import RecordSigner
from bot.neutral import ChannelKey, ReplyAddress
from bot.rebuilds.job_queue import channel_from_text, channel_text
from raptor_engine import BuildSuperseded, channel_digest

log = logging.getLogger(__name__)

REQUEST_PURPOSE = "rebuild-request"
TOLD_KEEP_S = 3600  # how long after its build a requester may still be posted to (front-ends down meanwhile)

# KEYS: lease, requests, building; ARGV: lease value. Moves requests into building if the lease is ours.
_TAKE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return false end
local moved = redis.call('LRANGE', KEYS[2], 0, -1)
if #moved > 0 then
  redis.call('RPUSH', KEYS[3], unpack(moved))
  redis.call('DEL', KEYS[2])
end
return redis.call('LRANGE', KEYS[3], 0, -1)
"""
# KEYS: lease, requests, building, pending, told; ARGV: lease value, channel, told's life in ms.
# Everyone in building was told: they move to told, which expires.
_FINISH = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local told = redis.call('LRANGE', KEYS[3], 0, -1)
if #told > 0 then
  redis.call('RPUSH', KEYS[5], unpack(told))
  redis.call('PEXPIRE', KEYS[5], ARGV[3])
end
redis.call('DEL', KEYS[3])
local waiting = redis.call('LLEN', KEYS[2])
if waiting == 0 then redis.call('SREM', KEYS[4], ARGV[2]) end
return waiting
"""


@dataclass(frozen=True, slots=True)
class Requester:
    """Someone who asked for a rebuild, and where to tell them."""

    by: str
    address: ReplyAddress
    force: bool = False  # asked to serve the tree past the regression gate

    def fields(self) -> dict[str, str]:
        """The request as a flat record of strings (what is signed)."""
        channel = self.address.channel
        return {"by": self.by, "platform": channel.platform, "workspace": channel.workspace,
                "channel": channel.channel, "thread": self.address.thread, "force": "1" if self.force else ""}

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> Requester:
        """The inverse of :meth:`fields`. Raises ``KeyError`` or ``ValueError`` for anything else."""
        key = ChannelKey(fields["platform"], fields["workspace"], fields["channel"])
        return cls(fields.get("by", ""), ReplyAddress(key, fields.get("thread", "")), fields.get("force") == "1")


class RebuildRequests:
    """The pending rebuild requests of one namespace, signed with the processes' secret."""

    def __init__(self, link: RedisLink, signer: RecordSigner) -> None:
        self._link = link
        self._signer = signer
        self._pending = link.key("pending")

    def _keys(self, key: ChannelKey) -> tuple[str, str]:
        digest = channel_digest(key)
        return self._link.key("requests", digest), self._link.key("building", digest)

    def _told(self, key: ChannelKey) -> str:
        return self._link.key("told", channel_digest(key))

    async def add(self, key: ChannelKey, requester: Requester) -> int:
        """Records a request; returns how many wait for the channel's next build, this one
        included. Raises ``ValueError`` if it is to be answered outside ``key`` (a request is
        answered in the channel it came from), ``CoordinationDown``."""
        if requester.address.channel != key:
            raise ValueError(f"a rebuild request of {key} is answered in that channel, not {requester.address.channel}")
        waiting, _ = self._keys(key)
        record = json.dumps(self._signer.signed(REQUEST_PURPOSE, requester.fields()))

        async def add(redis: Any) -> int:
            async with redis.pipeline(transaction=True) as pipe:
                pipe.rpush(waiting, record)
                pipe.sadd(self._pending, channel_text(key))
                length, _ = await pipe.execute()
                return int(length)

        return await self._link.run(add)

    async def pending_channels(self) -> list[ChannelKey]:
        """Channels with requests not yet told. Raises ``CoordinationDown``."""
        members = await self._link.run(lambda redis: redis.smembers(self._pending))
        keys = []
        for member in members:
            try:
                keys.append(channel_from_text(describe(member)))
            except ValueError:
                continue  # not ours (a foreign writer): never fatal to the sweep
        return keys

    async def asked(self, address: ReplyAddress) -> bool:
        """Whether someone asked for a rebuild of ``address``'s channel there and has not been
        told yet, or was told less than :data:`TOLD_KEEP_S` ago: where a worker's reply may be
        posted. Only signed requests count. Raises ``CoordinationDown``."""
        key = address.channel
        lists = (*self._keys(key), self._told(key))

        async def read(redis: Any) -> list[Any]:
            async with redis.pipeline(transaction=False) as pipe:
                for name in lists:
                    pipe.lrange(name, 0, -1)
                return list(await pipe.execute())

        found = await self._link.run(read)
        return any(requester.address == address
                   for records in found for requester in self._verified(key, records))

    async def waiting(self, key: ChannelKey) -> int:
        """Requests of ``key`` not yet taken by a build. Raises ``CoordinationDown``."""
        waiting, _ = self._keys(key)
        return int(await self._link.run(lambda redis: redis.llen(waiting)))

    def take(self, key: ChannelKey, leases: ChannelLeases, held: Held) -> list[Requester]:
        """Moves the waiting requests into the channel's building list and returns that whole
        list (it keeps those of a build that died). Raises ``BuildSuperseded`` if the lease
        is no longer ours, ``CoordinationDown``."""
        waiting, building = self._keys(key)
        found = self._link.run_sync(
            lambda r: r.eval(_TAKE, 3, leases.lease_key(key), waiting, building, held.value)
        )
        if found is None:
            raise BuildSuperseded("its lease ran out before it took the requests")
        return self._verified(key, found)

    def finish(self, key: ChannelKey, leases: ChannelLeases, held: Held) -> int:
        """Moves the requesters just told to the channel's told list (kept :data:`TOLD_KEEP_S`, so
        front-ends still post their replies); returns how many requests came in meanwhile.
        Raises ``BuildSuperseded`` if the lease is no longer ours, ``CoordinationDown``."""
        waiting, building = self._keys(key)
        left = int(self._link.run_sync(
            lambda r: r.eval(_FINISH, 5, leases.lease_key(key), waiting, building, self._pending, self._told(key),
                             held.value, channel_text(key), TOLD_KEEP_S * 1000)
        ))
        if left < 0:
            raise BuildSuperseded("its lease ran out before it finished telling the requesters")
        return left

    def _verified(self, key: ChannelKey, records: Iterable[Any]) -> list[Requester]:
        """The requesters of ``key`` whose records this bot signed; any other record is logged
        and skipped (it stays in Redis, where it does nothing)."""
        requesters = []
        for record in records:
            requester = self._requester(describe(record))
            if requester is None or requester.address.channel != key:
                log.warning("channel %s: ignored a rebuild request record that this bot did not sign "
                            "for this channel (someone else wrote to the coordination server)", key)
                continue
            requesters.append(requester)
        return requesters

    def _requester(self, text: str) -> Requester | None:
        try:
            record = json.loads(text)
        except ValueError:
            return None
        fields = self._signer.verified(REQUEST_PURPOSE, record) if isinstance(record, dict) else None
        if fields is None:
            return None
        try:
            return Requester.from_fields(fields)
        except (KeyError, ValueError):
            return None
