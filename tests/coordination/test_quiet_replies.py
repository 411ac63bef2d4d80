"""Several replicas without noise (issue 28, point 8), against a real Valkey: one build's result
is posted once in each place it was asked from, however many requests merged into it; a reply
that waited in the stream longer than ``coordination.reply_max_age_s`` (an outage) is dropped
and logged, not posted late in a burst."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

from bot.config import BotConfig, Config
from bot.coordination.link import RedisLink
from bot.coordination.reply_stream import REPLY_PURPOSE, ReplyPublisher, encode
from bot.deploy_config import REPLY_MAX_AGE_S
from bot.engine_calls import AsyncEngine
from bot.model_budget import ModelBudget, SharedSpending
from bot.neutral import ChannelKey, Reply, ReplyAddress, ReplyKind
from bot.observability.metrics import Metrics
from bot.rebuilds.job_queue import RebuildQueue, channel_text
from bot.rebuilds.queued import QueuedRebuilds
from bot.rebuilds.requests import RebuildRequests
from bot.rebuilds.worker import WorkerContext, install, run_rebuild_job
from bot.replies import REBUILD_ENQUEUED
from raptor_engine import ChromaStore
from tests.coordination.conftest import coordination_config, reply_reader, signer
from tests.coordination.test_signed_replies import Platform, ask, link_to
from tests.coordination.test_worker_job import TEXT, CountedLeases, worker_engine

KEY = ChannelKey("slack", "T1", "CQUIET")
ASKED = ReplyAddress(KEY, "1700000000.000200")


def stale_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "bot.coordination.reply_stream" and "older than" in r.getMessage()]


def test_replies_older_than_the_limit_are_dropped_and_logged_once(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    ask(redis_url, ASKED)
    platform = Platform()
    link = link_to(redis_url)
    stream = link.key("replies", "slack")
    eleven_minutes_ago = int(time.time() * 1000) - 11 * 60 * 1000
    for number, text in enumerate(("Rebuilding: clustering layer 1…", "Rebuilding: summarising…", "Rebuilt: tree v1")):
        kind = ReplyKind.INFO if text.startswith("Rebuilt") else ReplyKind.PROGRESS
        entry = signer().signed(REPLY_PURPOSE, encode(ASKED, Reply(kind, text)))
        link.blocking.xadd(stream, entry, id=f"{eleven_minutes_ago + number}-0")  # type: ignore[arg-type]

    async def run() -> None:
        reader = reply_reader(link_to(redis_url), {"slack": platform.courier}, "front-1")
        ReplyPublisher(link, signer()).publish(ASKED, Reply(ReplyKind.INFO, "Rebuilt: tree v2"))
        while await reader.read_once():
            pass

    asyncio.run(run())
    assert [reply.text for _, reply in platform.posts] == ["Rebuilt: tree v2"]  # only the fresh one
    [line] = stale_lines(caplog)
    assert line.startswith(f"dropped 3 rebuild replies older than {REPLY_MAX_AGE_S:.0f} s"), line
    assert not link.blocking.xpending(stream, "front-ends")["pending"]  # all acknowledged: never posted later


def test_the_limit_is_the_front_ends_setting(redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    assert coordination_config(redis_url).reply_max_age_s == REPLY_MAX_AGE_S == 300
    ask(redis_url, ASKED)
    platform = Platform()

    async def run() -> None:
        link = link_to(redis_url)
        reader = reply_reader(link, {"slack": platform.courier}, "front-1", max_age_s=1.0)
        await reader.read_once()  # makes the group, then the front-ends go quiet (an outage)
        ReplyPublisher(link, signer()).publish(ASKED, Reply(ReplyKind.INFO, "Rebuilt: tree v1"))
        await asyncio.sleep(1.5)
        while await reader.read_once():
            pass

    asyncio.run(run())
    assert platform.posts == []
    assert stale_lines(caplog)


class Requester:
    """One person's ``send`` on the front-end: what they were told when they asked."""

    def __init__(self) -> None:
        self.told: list[Reply] = []

    async def __call__(self, reply: Reply) -> None:
        self.told.append(reply)


def test_requests_merged_into_one_build_see_its_result_once_per_place_asked_from(
        store: ChromaStore, embedder: Any, redis_url: str) -> None:
    settings = coordination_config(redis_url)
    link = RedisLink(settings)
    leases = CountedLeases(link, settings.lease_s, "worker")
    engine = worker_engine(store, embedder, leases)
    engine.ingest_bytes(KEY, TEXT.encode(), "log.txt", "", "ana", "F1")
    channel, thread = ReplyAddress(KEY), ASKED
    people = [Requester() for _ in range(4)]
    platform = Platform()
    config = BotConfig(progress_every_s=3600)

    async def front_end() -> None:
        front = RedisLink(settings)
        rebuilds = QueuedRebuilds(AsyncEngine(engine), config, settings, front)
        for person, address in zip(people, (channel, channel, channel, thread)):  # three in the channel
            await rebuilds.request(KEY, "ana", person, address)

    async def post() -> None:
        reader = reply_reader(RedisLink(settings), {"slack": platform.courier}, "front-1")
        while await reader.read_once():
            pass

    asyncio.run(front_end())
    install(WorkerContext(Config(bot=config), AsyncEngine(engine), link, leases,
                          RebuildQueue(link, settings.job_timeout_s), RebuildRequests(link, signer()),
                          ReplyPublisher(link, signer()), Metrics(),
                          ModelBudget(config.model_budget, SharedSpending(link))))
    assert run_rebuild_job(channel_text(KEY)) == "built"
    asyncio.run(post())

    results = [(address, reply.text) for address, reply in platform.posts]
    assert [address for address, _ in results] == [channel, thread], results  # once each, not four times
    assert all(text.startswith("Rebuilt: tree v1 ") for _, text in results)
    queued = [person.told for person in people]
    assert all([reply.text for reply in told] == [REBUILD_ENQUEUED] for told in queued)
    assert [told[0].private for told in queued] == [False, True, True, True]  # merged ones privately
