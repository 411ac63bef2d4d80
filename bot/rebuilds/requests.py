"""Who asked for a channel's rebuild, kept in Redis until they are told.

A front-end appends each request to ``requests:<channel>`` and adds the channel to the
``pending`` set. The worker holding the channel's lease moves the requests it is about
to build for into ``building:<channel>`` (one script, checked against its lease), and
deletes that list once everyone in it has been told. Requests arriving meanwhile stay
in ``requests:``: the same worker builds again for them before it lets the lease go.

A worker that dies mid-build leaves ``building:`` as it was: the next worker to take the
lease takes those requesters too, so nobody who asked goes untold. The ``pending`` set
is what the front-ends' sweep reads to enqueue a job for a channel left like that.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bot.coordination.lease import ChannelLeases, Held
from bot.coordination.link import RedisLink, describe
from bot.neutral import ChannelKey, ReplyAddress
from bot.rebuilds.job_queue import channel_from_text, channel_text
from raptor_engine import BuildSuperseded, channel_digest

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
# KEYS: lease, requests, building, pending; ARGV: lease value, channel. Everyone in building was told.
_FINISH = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
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

    def to_json(self) -> str:
        channel = self.address.channel
        return json.dumps({"by": self.by, "platform": channel.platform, "workspace": channel.workspace,
                           "channel": channel.channel, "thread": self.address.thread})

    @classmethod
    def from_json(cls, text: str) -> Requester:
        data: dict[str, Any] = json.loads(text)
        key = ChannelKey(data["platform"], data["workspace"], data["channel"])
        return cls(str(data.get("by", "")), ReplyAddress(key, str(data.get("thread", ""))))


class RebuildRequests:
    """The pending rebuild requests of one namespace."""

    def __init__(self, link: RedisLink) -> None:
        self._link = link
        self._pending = link.key("pending")

    def _keys(self, key: ChannelKey) -> tuple[str, str]:
        digest = channel_digest(key)
        return self._link.key("requests", digest), self._link.key("building", digest)

    async def add(self, key: ChannelKey, requester: Requester) -> None:
        """Records a request. Raises ``CoordinationDown``."""
        waiting, _ = self._keys(key)

        async def add(redis: Any) -> None:
            async with redis.pipeline(transaction=True) as pipe:
                pipe.rpush(waiting, requester.to_json())
                pipe.sadd(self._pending, channel_text(key))
                await pipe.execute()

        await self._link.run(add)

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
        return [Requester.from_json(describe(item)) for item in found]

    def finish(self, key: ChannelKey, leases: ChannelLeases, held: Held) -> int:
        """Forgets the requesters just told; returns how many requests came in meanwhile.
        Raises ``BuildSuperseded`` if the lease is no longer ours, ``CoordinationDown``."""
        waiting, building = self._keys(key)
        left = int(self._link.run_sync(
            lambda r: r.eval(_FINISH, 4, leases.lease_key(key), waiting, building, self._pending,
                             held.value, channel_text(key))
        ))
        if left < 0:
            raise BuildSuperseded("its lease ran out before it finished telling the requesters")
        return left
