"""A rebuild's progress and result, from the worker that ran it to the requesters' platforms.

Workers append replies to one Redis stream per platform (``replies:<platform>``); the
front-ends serving that platform read it as one consumer group, so each reply is posted
once, by whichever front-end reads it, through the courier its adapter registered.
A front-end that read entries and died before posting them leaves them pending in the
group: another front-end claims them after :data:`CLAIM_IDLE_MS`.

Redis is not trusted with what gets posted. A front-end posts an entry only if it is
signed with the processes' secret (:mod:`bot.coordination.signing`), is a kind a worker
sends (:data:`WORKER_KINDS`: progress and results), is addressed on the stream's platform,
and someone asked for a rebuild at that address (the requests store's ``asked``). Any
other entry is dropped, acknowledged and logged.

Nor is a reply posted late: one older than ``coordination.reply_max_age_s`` when a front-end
reads it (Redis or every front-end was down meanwhile) is dropped and acknowledged, and
each round's drops are logged once. After an outage the channel would otherwise get a
burst of progress and results nobody waits for any more. Age is measured on the server's
clock both ways (an entry's id is the server's time of appending it), so front-ends' and
workers' clocks do not matter.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from redis.exceptions import ResponseError

from bot.coordination.link import CoordinationDown, RedisLink, describe
from bot.coordination.signing import RecordSigner
from bot.deploy_config import REPLY_MAX_AGE_S
from bot.neutral import ChannelKey, Courier, Reply, ReplyAddress, ReplyKind

log = logging.getLogger(__name__)

GROUP = "front-ends"
STREAM_MAXLEN = 10_000  # replies kept per platform stream (approximate trim)
CLAIM_IDLE_MS = 30_000  # a reply read but not acknowledged this long is taken over
READ_BLOCK_MS = 1000
RETRY_S = 1.0  # after Redis failed a read
REPLY_PURPOSE = "rebuild-reply"
WORKER_KINDS = frozenset({ReplyKind.PROGRESS, ReplyKind.INFO, ReplyKind.ERROR})  # progress, built, failed

Asked = Callable[[ReplyAddress], Awaitable[bool]]
"""Whether someone asked for a rebuild at an address (see ``RebuildRequests.asked``)."""


def encode(address: ReplyAddress, reply: Reply) -> dict[str, str]:
    """The entry's fields, before signing."""
    channel = address.channel
    return {"address": json.dumps([channel.platform, channel.workspace, channel.channel, address.thread]),
            "kind": reply.kind.value, "text": reply.text, "reference": reply.reference}


def decode(fields: Mapping[str, str]) -> tuple[ReplyAddress, Reply]:
    """Raises ``ValueError``/``KeyError``/``TypeError`` for an entry this code did not write."""
    platform, workspace, channel, thread = json.loads(fields["address"])
    if not all(isinstance(part, str) for part in (platform, workspace, channel, thread)):
        raise TypeError("an address is four strings")
    address = ReplyAddress(ChannelKey(platform, workspace, channel), thread)
    reply = Reply(ReplyKind(fields["kind"]), fields["text"], reference=fields.get("reference", ""), thread=thread)
    return address, reply


class ReplyPublisher:
    """The worker's side: appends signed replies for front-ends to post (blocking calls)."""

    def __init__(self, link: RedisLink, signer: RecordSigner) -> None:
        self._link = link
        self._signer = signer

    def publish(self, address: ReplyAddress, reply: Reply) -> None:
        """Raises ``CoordinationDown``."""
        stream = self._link.key("replies", address.channel.platform)
        entry = self._signer.signed(REPLY_PURPOSE, encode(address, reply))
        self._link.run_sync(lambda r: r.xadd(stream, entry,  # type: ignore[arg-type]
                                             maxlen=STREAM_MAXLEN, approximate=True))


class ReplyReader:
    """The front-end's side: posts the replies of the platforms it has couriers for."""

    def __init__(self, link: RedisLink, couriers: Mapping[str, Courier], consumer: str, signer: RecordSigner,
                 asked: Asked, max_age_s: float = REPLY_MAX_AGE_S) -> None:
        """``max_age_s``: replies older than this when read are dropped (see the module docstring)."""
        self._link = link
        self._max_age_s = max_age_s
        self._couriers = couriers
        self._consumer = consumer
        self._signer = signer
        self._asked = asked
        self._groups_made: set[str] = set()

    async def run(self) -> None:
        """Reads and posts until cancelled; Redis outages are waited out (the link logs them)."""
        while True:
            try:
                handled = await self.read_once()
            except CoordinationDown:
                await asyncio.sleep(RETRY_S)
                continue
            except ResponseError as exc:
                # A server restarted without its data has lost the consumer group: make it again.
                if "NOGROUP" not in str(exc):
                    log.warning("reading rebuild replies failed: %s", exc)
                self._groups_made.clear()
                await asyncio.sleep(RETRY_S)
                continue
            if not self._couriers:
                await asyncio.sleep(RETRY_S)  # no adapter registered yet
            elif not handled:
                await asyncio.sleep(0)

    async def read_once(self) -> int:
        """One round: claims stale entries, reads new ones (blocking up to a second), posts
        them (or drops those not to be posted). Returns how many were read. Raises ``CoordinationDown``."""
        streams = {self._link.key("replies", platform): platform for platform in self._couriers}
        if not streams:
            return 0
        for stream in streams:
            await self._ensure_group(stream)
        entries: list[tuple[str, str, dict[str, str]]] = []
        for stream in streams:
            entries += await self._link.run(partial(self._claim, stream=stream))
        entries += await self._link.run(lambda r: self._read(r, list(streams)))
        if entries:
            now_ms = await self._link.run(_server_ms)
            stale = [(stream, entry_id) for stream, entry_id, _ in entries
                     if now_ms - _appended_ms(entry_id) > self._max_age_s * 1000]
            self._log_stale(stale, now_ms)
        for stream, entry_id, fields in entries:
            if (stream, entry_id) not in stale:
                await self._post(streams[stream], fields)
            await self._link.run(partial(_ack, stream=stream, entry_id=entry_id))
        return len(entries)

    def _log_stale(self, stale: list[tuple[str, str]], now_ms: int) -> None:
        if stale:
            oldest_s = (now_ms - min(_appended_ms(entry_id) for _, entry_id in stale)) / 1000
            log.warning("dropped %d rebuild repl%s older than %.0f s (the oldest %.0f s old): the front-ends could "
                        "not post them in time (the coordination server or every front-end was down)",
                        len(stale), "y" if len(stale) == 1 else "ies", self._max_age_s, oldest_s)

    async def _claim(self, redis: Any, stream: str) -> list[tuple[str, str, dict[str, str]]]:
        """Entries another front-end read and never acknowledged (it died before posting them)."""
        reply: Any = await redis.xautoclaim(stream, GROUP, self._consumer, CLAIM_IDLE_MS, "0-0", count=20)
        return [(stream, entry_id, fields) for entry_id, fields in reply[1] if fields]

    async def _read(self, redis: Any, streams: list[str]) -> list[tuple[str, str, dict[str, str]]]:
        reply: Any = await redis.xreadgroup(GROUP, self._consumer, {s: ">" for s in streams}, count=20,
                                            block=READ_BLOCK_MS)
        return [(stream, entry_id, fields) for stream, items in reply or [] for entry_id, fields in items]

    async def _ensure_group(self, stream: str) -> None:
        if stream in self._groups_made:
            return

        async def make(redis: Any) -> None:
            try:
                await redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except Exception as exc:  # BUSYGROUP: another front-end made it first
                if "BUSYGROUP" not in str(exc):
                    raise

        await self._link.run(make)
        self._groups_made.add(stream)

    async def _post(self, platform: str, fields: dict[str, str]) -> None:
        """Posts the entry, or logs why not. Raises ``CoordinationDown`` (the entry stays unacknowledged)."""
        verified = self._signer.verified(REPLY_PURPOSE, fields)
        if verified is None:
            log.warning("dropped a reply entry on the %s stream: not signed with this bot's coordination.secret "
                        "(someone else wrote to the coordination server)", platform)
            return
        try:
            address, reply = decode(verified)
        except (ValueError, KeyError, TypeError):
            log.warning("dropped a malformed reply entry on the %s stream", platform)
            return
        refusal = await self._refusal(platform, address, reply)
        if refusal:
            log.warning("dropped a %s reply entry to %s on the %s stream: %s", reply.kind.value, address.channel,
                        platform, refusal)
            return
        try:
            await self._couriers[platform](address)(reply)
        except Exception:
            # The adapters' senders log and swallow platform failures; this is a bug's last guard.
            log.warning("could not post a rebuild reply to %s", address.channel, exc_info=True)

    async def _refusal(self, platform: str, address: ReplyAddress, reply: Reply) -> str:
        """Why a signed entry is still not posted ('' if it is)."""
        if reply.kind not in WORKER_KINDS:
            return "a worker sends only progress and results"
        if address.channel.platform != platform:
            return "addressed to another platform"
        if not await self._asked(address):
            return "nobody there asked for a rebuild"
        return ""


async def _ack(redis: Any, stream: str, entry_id: str) -> None:
    await redis.xack(stream, GROUP, entry_id)


async def _server_ms(redis: Any) -> int:
    """The server's clock, in milliseconds (the unit of stream entry ids)."""
    seconds, microseconds = await redis.time()
    return int(seconds) * 1000 + int(microseconds) // 1000


def _appended_ms(entry_id: Any) -> int:
    """When the server appended an entry: the first part of its id (``<ms>-<sequence>``)."""
    return int(describe(entry_id).split("-", 1)[0])
