"""The shared pieces against a real Valkey: event ledger, rate limits, leases and fencing,
the job queue's enqueue-once, the requests store, and the reply stream."""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from bot.coordination.deliveries import SharedLedger
from bot.coordination.lease import ChannelLeases, HeldLeases
from bot.coordination.link import CoordinationDown, RedisLink
from bot.coordination.reply_stream import ReplyPublisher
from bot.coordination.shared_limits import SharedLimiter
from bot.neutral import ChannelKey, Reply, ReplyAddress, ReplyKind, Send
from bot.rebuilds.job_queue import RebuildQueue, channel_from_text
from bot.rebuilds.requests import RebuildRequests, Requester
from raptor_engine import BuildBusy, BuildSuperseded
from testkit.valkey import ValkeyProcess
from tests.coordination.conftest import coordination_config, reply_reader, signer

KEY = ChannelKey("slack", "T1", "C1")


def link_to(url: str, **settings: float) -> RedisLink:
    return RedisLink(coordination_config(url, **settings))


def test_an_event_is_first_once_across_replicas(redis_url: str) -> None:
    async def run() -> list[bool]:
        one, two = SharedLedger(link_to(redis_url), 60), SharedLedger(link_to(redis_url), 60)
        return [await one.first("slack:event:E1"), await two.first("slack:event:E1"),
                await one.first("slack:event:E1"), await two.first("slack:event:E2")]

    assert asyncio.run(run()) == [True, False, False, True]


def test_the_ledger_falls_back_to_this_process_when_redis_is_down(own_valkey: ValkeyProcess) -> None:
    async def run() -> list[bool]:
        ledger = SharedLedger(link_to(own_valkey.url), 60)
        own_valkey.stop()
        return [await ledger.first("discord:message:1"), await ledger.first("discord:message:1")]

    assert asyncio.run(run()) == [True, False]


def test_rate_limits_count_across_replicas(redis_url: str) -> None:
    async def run() -> tuple[float, float, float, float]:
        one = SharedLimiter(link_to(redis_url), "questions", 60.0)
        two = SharedLimiter(link_to(redis_url), "questions", 60.0)
        first = await one.try_acquire((KEY, "U1"), limit=2)
        second = await two.try_acquire((KEY, "U1"), limit=2)
        refused = await one.try_acquire((KEY, "U1"), limit=2)
        await two.refund((KEY, "U1"))
        after_refund = await one.try_acquire((KEY, "U1"), limit=2)
        return first, second, refused, after_refund

    first, second, refused, after_refund = asyncio.run(run())
    assert first == second == 0.0
    assert 59.0 < refused <= 60.0  # the oldest entry leaves the window in about a minute
    assert after_refund == 0.0


def test_amount_limits_refuse_what_never_fits(redis_url: str) -> None:
    async def run() -> tuple[float, float, float]:
        budget = SharedLimiter(link_to(redis_url), "upload-bytes", 86400.0)
        return (await budget.try_acquire(KEY, 700, limit=1000), await budget.try_acquire(KEY, 400, limit=1000),
                await budget.try_acquire(KEY, 1001, limit=1000))

    counted, refused, never = asyncio.run(run())
    assert counted == 0.0 and refused > 0 and never == math.inf


def test_one_holder_per_channel_lease(redis_url: str) -> None:
    one, two = ChannelLeases(link_to(redis_url), 5, "one"), ChannelLeases(link_to(redis_url), 5, "two")
    with one.hold(KEY) as held:
        with pytest.raises(BuildBusy, match="one"):
            with two.hold(KEY):
                pass
        with pytest.raises(BuildBusy, match="one"):  # one hold per channel, in its own process too
            with one.hold(KEY):
                pass
        one.confirm(KEY)  # the failed second hold left the first one as it was
        first_token = held.token
    with two.hold(KEY) as taken:  # released: the other takes it, with a newer token
        assert taken.token > first_token


def test_a_build_inside_a_held_lease_checks_it_instead_of_taking_it(redis_url: str) -> None:
    leases = ChannelLeases(link_to(redis_url), 5, "worker")
    guard = HeldLeases(leases)  # the worker engine's guard
    with pytest.raises(BuildSuperseded):  # a build outside a job holds nothing
        with guard.hold(KEY):
            pass
    with leases.hold(KEY) as held:
        with guard.hold(KEY) as checked:
            assert checked is held
            guard.confirm(KEY)
        leases.confirm(KEY)  # the build's end let nothing go: the job still holds it


def test_a_lease_that_ran_out_cannot_switch(own_valkey: ValkeyProcess) -> None:
    """A holder paused past its lease (here: its renewals stopped by pausing Redis's view of
    it is not possible, so the lease is made to run out by deleting it) is refused at confirm."""
    link = link_to(own_valkey.url)
    stale, fresh = ChannelLeases(link, 3, "stale"), ChannelLeases(link_to(own_valkey.url), 3, "fresh")
    with stale.hold(KEY):
        link.blocking.delete(stale.lease_key(KEY))  # as if it expired while its holder was stopped
        with fresh.hold(KEY):
            with pytest.raises(BuildSuperseded):
                stale.confirm(KEY)
            fresh.confirm(KEY)


def test_confirm_refuses_when_redis_cannot_say(own_valkey: ValkeyProcess) -> None:
    leases = ChannelLeases(link_to(own_valkey.url), 5, "me")
    with leases.hold(KEY):
        own_valkey.stop()
        with pytest.raises(BuildSuperseded):
            leases.confirm(KEY)


def test_a_channel_is_enqueued_once_until_a_worker_takes_it(redis_url: str) -> None:
    queue = RebuildQueue(link_to(redis_url), 600)
    other_replica = RebuildQueue(link_to(redis_url), 600)
    assert queue.enqueue_once(KEY, "test")
    assert not other_replica.enqueue_once(KEY, "test")
    assert queue.depth() == 1 and queue.waiting(KEY)
    queue.taken(KEY)
    assert other_replica.enqueue_once(KEY, "a request during the build")
    assert queue.depth() == 2
    job = queue.queue.jobs[0]
    assert channel_from_text(job.args[0]) == KEY


def test_requests_move_to_building_under_the_lease_and_survive_a_dead_worker(redis_url: str) -> None:
    link = link_to(redis_url)
    requests = RebuildRequests(link, signer())
    asker, later = Requester("ann", ReplyAddress(KEY, "171.1")), Requester("bob", ReplyAddress(KEY))
    dead, alive = ChannelLeases(link, 5, "dead"), ChannelLeases(link_to(redis_url), 5, "alive")

    async def run() -> tuple[list[ChannelKey], list[ChannelKey]]:
        await requests.add(KEY, asker)
        with dead.hold(KEY) as held:
            assert requests.take(KEY, dead, held) == [asker]
            link.blocking.delete(dead.lease_key(KEY))  # the worker died; its lease ran out
            with pytest.raises(BuildSuperseded):
                requests.finish(KEY, dead, held)
        await requests.add(KEY, later)
        pending = await requests.pending_channels()
        with alive.hold(KEY) as held:
            assert requests.take(KEY, alive, held) == [asker, later]  # the dead worker's requester too
            assert requests.finish(KEY, alive, held) == 0
        return pending, await requests.pending_channels()

    assert asyncio.run(run()) == ([KEY], [])


def test_a_reply_is_posted_once_by_one_of_the_front_ends(redis_url: str) -> None:
    posted: list[tuple[str, ReplyAddress, str]] = []

    def courier(name: str):  # type: ignore[no-untyped-def]
        def to(address: ReplyAddress) -> Send:
            async def send(reply: Reply) -> None:
                posted.append((name, address, reply.text))
            return send
        return to

    async def run() -> None:
        readers = [reply_reader(link_to(redis_url), {"slack": courier(name)}, name) for name in ("a", "b")]
        for reader in readers:
            await reader.read_once()  # makes the group; nothing to read yet
        link = link_to(redis_url)
        await RebuildRequests(link, signer()).add(KEY, Requester("ann", ReplyAddress(KEY, "9.9")))
        ReplyPublisher(link, signer()).publish(ReplyAddress(KEY, "9.9"), Reply(ReplyKind.INFO, "Rebuilt"))
        await asyncio.gather(*(reader.read_once() for reader in readers))

    asyncio.run(run())
    assert [(address, text) for _, address, text in posted] == [(ReplyAddress(KEY, "9.9"), "Rebuilt")]


def test_the_link_says_once_that_redis_is_down(own_valkey: ValkeyProcess, caplog: pytest.LogCaptureFixture) -> None:
    """One outage, one warning, even when the server drops connections before it stops (a flap);
    and one line when it is over, once the server has answered for a few seconds."""
    link = link_to(own_valkey.url)
    assert link.ping_sync()
    own_valkey.stop()
    for _ in range(3):
        with pytest.raises(CoordinationDown):
            link.run_sync(lambda r: r.ping())
    assert not link.up
    own_valkey.restart()
    assert link.ping_sync() and link.up  # answering again at once...
    own_valkey.stop()  # ...but not for long: the same outage
    assert not link.ping_sync()
    own_valkey.restart()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and not any("is back" in r.getMessage() for r in caplog.records):
        link.ping_sync()
        time.sleep(0.2)
    messages = [r.getMessage() for r in caplog.records if r.name == "bot.coordination.link"]
    assert sum("unreachable" in m for m in messages if "is back" not in m) == 1
    assert sum("is back" in m for m in messages) == 1


def test_the_reply_reader_makes_its_group_again_after_redis_lost_its_data(redis_url: str) -> None:
    posted: list[str] = []

    def courier(address: ReplyAddress) -> Send:
        async def send(reply: Reply) -> None:
            posted.append(reply.text)
        return send

    async def run() -> None:
        link = link_to(redis_url)
        reader = reply_reader(link, {"slack": courier}, "front-1")
        await reader.read_once()
        link.blocking.flushall()  # a restart without persistence: the stream and its group are gone
        await RebuildRequests(link, signer()).add(KEY, Requester("ann", ReplyAddress(KEY)))  # asked after it
        ReplyPublisher(link, signer()).publish(ReplyAddress(KEY), Reply(ReplyKind.INFO, "Rebuilt after the restart"))
        task = asyncio.create_task(reader.run())
        deadline = time.monotonic() + 10
        while not posted and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        task.cancel()

    asyncio.run(run())
    assert posted == ["Rebuilt after the restart"]
