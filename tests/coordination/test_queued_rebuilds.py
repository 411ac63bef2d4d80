"""The front-end's queued rebuilds with a real engine and a real Valkey, in one process:
scheduled checks on several replicas, requests while Redis is down, the sweep."""

from __future__ import annotations

import asyncio

from bot.config import BotConfig
from bot.coordination.link import RedisLink
from bot.deploy_config import CoordinationConfig
from bot.engine_calls import AsyncEngine
from bot.neutral import ChannelKey, Reply
from bot.rebuilds.job_queue import RebuildQueue
from bot.rebuilds.queued import QueuedRebuilds
from bot.replies import REBUILD_ENQUEUED, REBUILDS_WAIT
from raptor_engine import Engine
from testkit.valkey import ValkeyProcess
from tests.coordination.conftest import coordination_config

KEY = ChannelKey("slack", "T1", "C9")
TEXT = ("The lighthouse keeper logs the weather every evening. Storms come from the west in autumn. "
        "The supply boat arrives on Tuesdays unless the sea is rough. ") * 8


def coordination(url: str) -> CoordinationConfig:
    return coordination_config(url, sweep_every_s=3600)


def replica(engine: Engine, url: str) -> QueuedRebuilds:
    settings = coordination(url)
    return QueuedRebuilds(AsyncEngine(engine), BotConfig(), settings, RedisLink(settings))


def test_a_scheduled_tick_on_three_replicas_enqueues_one_job(engine: Engine, redis_url: str) -> None:
    engine.ingest_bytes(KEY, TEXT.encode(), "log.txt", "", "ana", "F1")  # sources changed: never built

    async def tick() -> list[bool]:
        replicas = [replica(engine, redis_url) for _ in range(3)]
        return list(await asyncio.gather(*(r.check(KEY) for r in replicas)))

    assert sorted(asyncio.run(tick())) == [False, False, True]
    queue = RebuildQueue(RedisLink(coordination(redis_url)), 600)
    assert queue.depth() == 1


def test_a_replica_that_ticks_late_in_the_period_enqueues_nothing_after_a_worker_took_the_job(
        engine: Engine, redis_url: str) -> None:
    # The queue's own "one job waiting" marker is gone once a worker takes the job: only the
    # period's claim stops a slower replica from enqueueing the same scheduled rebuild again.
    engine.ingest_bytes(KEY, TEXT.encode(), "log.txt", "", "ana", "F1")
    queue = RebuildQueue(RedisLink(coordination(redis_url)), 600)
    assert asyncio.run(replica(engine, redis_url).check(KEY))
    queue.taken(KEY)  # what a worker does as the job starts
    queue.queue.empty()
    assert not asyncio.run(replica(engine, redis_url).check(KEY))
    assert queue.depth() == 0
    assert queue.enqueue_once(KEY, "a request")  # a request still enqueues: only the period's check is spent


def test_nothing_is_enqueued_for_a_channel_without_changes(engine: Engine, redis_url: str) -> None:
    assert not asyncio.run(replica(engine, redis_url).check(ChannelKey("slack", "T1", "EMPTY")))
    assert RebuildQueue(RedisLink(coordination(redis_url)), 600).depth() == 0


def test_a_request_made_while_redis_is_down_is_kept_and_sent_when_it_returns(
        engine: Engine, own_valkey: ValkeyProcess) -> None:
    said: list[Reply] = []

    async def send(reply: Reply) -> None:
        said.append(reply)

    async def scenario() -> tuple[int, int]:
        rebuilds = replica(engine, own_valkey.url)
        own_valkey.stop()
        await rebuilds.request(KEY, "ana", send)
        await rebuilds.sweep()  # still down: kept
        own_valkey.restart()
        await rebuilds.sweep()
        queue = RebuildQueue(RedisLink(coordination(own_valkey.url)), 600)
        status = await rebuilds.status(KEY)
        return queue.depth(), int(status.queued)

    depth, queued = asyncio.run(scenario())
    assert [reply.text for reply in said] == [REBUILDS_WAIT]
    assert depth == 1 and queued == 1


def test_a_request_is_queued_once_and_its_requester_told(engine: Engine, redis_url: str) -> None:
    said: list[str] = []

    async def send(reply: Reply) -> None:
        said.append(reply.text)

    async def scenario() -> int:
        one, two = replica(engine, redis_url), replica(engine, redis_url)
        await one.request(KEY, "ana", send)
        await two.request(KEY, "bob", send)
        return one.depth()

    assert asyncio.run(scenario()) == 1
    assert said == [REBUILD_ENQUEUED, REBUILD_ENQUEUED]

