"""One rebuild job of the worker, run in this process on a real engine (embedded Chroma) and a
real Valkey: what ``python -m bot worker`` does for each job, without the RQ loop around it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bot.config import BotConfig, Config
from bot.coordination.lease import ChannelLeases, Held, HeldLeases
from bot.coordination.link import RedisLink, describe
from bot.coordination.reply_stream import ReplyPublisher, decode
from bot.deploy_config import CoordinationConfig
from bot.engine_calls import AsyncEngine
from bot.model_budget import ModelBudget, SharedSpending
from bot.neutral import ChannelKey, ReplyAddress, ReplyKind
from bot.observability.metrics import Metrics
from bot.rebuilds.job_queue import RebuildQueue, channel_text
from bot.rebuilds.requests import RebuildRequests, Requester
from bot.rebuilds.worker import WorkerContext, install, run_rebuild_job
from raptor_engine import (
    ChromaStore,
    Engine,
    EngineSettings,
    ExtractiveAnswerer,
    ExtractiveSummarizer,
    channel_digest,
)
from tests.coordination.conftest import coordination_config, signer
from tests.faults import half_the_leaves_lost

KEY = ChannelKey("slack", "T1", "C7")
TEXT = ("The lighthouse keeper logs the weather every evening. Storms come from the west in autumn. "
        "The supply boat arrives on Tuesdays unless the sea is rough. ") * 8


class CountedLeases(ChannelLeases):
    """The worker's leases, noting each time a channel's lease is entered."""

    def __init__(self, link: RedisLink, lease_s: float, holder: str) -> None:
        super().__init__(link, lease_s, holder)
        self.entered: list[ChannelKey] = []

    @contextmanager
    def hold(self, key: ChannelKey) -> Iterator[Held]:
        self.entered.append(key)
        with super().hold(key) as held:
            yield held


def worker_engine(store: ChromaStore, embedder: Any, leases: ChannelLeases) -> Engine:
    """The engine as ``bot.composition.run_worker`` builds it: its builds check the job's lease."""
    counter, settings = embedder.token_counter(), EngineSettings()
    return Engine(store, embedder, counter, ExtractiveSummarizer(counter, settings.summary_tokens),
                  ExtractiveAnswerer(embedder), settings, build_guard=HeldLeases(leases))


@dataclass(frozen=True)
class Worker:
    """A worker's context installed on a real Valkey and an engine holding :data:`TEXT` in :data:`KEY`."""

    settings: CoordinationConfig
    link: RedisLink
    leases: CountedLeases
    engine: Engine
    requests: RebuildRequests


def installed_worker(store: ChromaStore, embedder: Any, redis_url: str) -> Worker:
    """What ``python -m bot worker`` sets up before taking jobs (see ``bot.rebuilds.worker.install``)."""
    settings = coordination_config(redis_url)
    link = RedisLink(settings)
    leases = CountedLeases(link, settings.lease_s, "worker")
    engine = worker_engine(store, embedder, leases)
    engine.ingest_bytes(KEY, TEXT.encode(), "log.txt", "", "ana", "F1")
    requests = RebuildRequests(link, signer())
    config = Config(bot=BotConfig(progress_every_s=3600))
    install(WorkerContext(config, AsyncEngine(engine), link, leases, RebuildQueue(link, settings.job_timeout_s), requests,
                          ReplyPublisher(link, signer()), Metrics(),
                          ModelBudget(config.bot.model_budget, SharedSpending(link))))
    return Worker(settings, link, leases, engine, requests)


def test_a_job_takes_the_channel_lease_once_and_tells_its_requester(
        store: ChromaStore, embedder: Any, redis_url: str) -> None:
    worker = installed_worker(store, embedder, redis_url)
    link, leases, engine = worker.link, worker.leases, worker.engine
    asyncio.run(worker.requests.add(KEY, Requester("ana", ReplyAddress(KEY, "T.1"))))

    assert run_rebuild_job(channel_text(KEY)) == "built"

    assert leases.entered == [KEY]  # taken once for the whole job, not again around the build
    assert int(link.blocking.get(link.key("fence", channel_digest(KEY))) or 0) == 1
    assert not link.blocking.exists(leases.lease_key(KEY))  # let go at the job's end
    [(_, fields)] = link.blocking.xrange(link.key("replies", "slack"))
    address, reply = decode({describe(name): describe(value) for name, value in fields.items()})
    assert address == ReplyAddress(KEY, "T.1")
    assert reply.kind is ReplyKind.INFO and reply.text.startswith("Rebuilt: tree v1 ")
    assert engine.stats(KEY).version == 1


def test_a_forced_request_travels_through_valkey_and_serves_a_tree_the_gate_held_back(
        store: ChromaStore, embedder: Any, redis_url: str, monkeypatch: Any) -> None:

    worker = installed_worker(store, embedder, redis_url)
    settings, link, engine = worker.settings, worker.link, worker.engine

    def ask(force: bool = False) -> None:  # a front-end's request, on a loop (and a link) of its own
        asyncio.run(RebuildRequests(RedisLink(settings), signer()).add(KEY, Requester("ana", ReplyAddress(KEY), force)))

    ask()
    assert run_rebuild_job(channel_text(KEY)) == "built"

    half_the_leaves_lost(monkeypatch)  # a broken leaf cache
    ask()
    run_rebuild_job(channel_text(KEY))
    assert engine.stats(KEY).version == 1  # held back
    ask(force=True)
    assert run_rebuild_job(channel_text(KEY)) == "built"
    assert engine.stats(KEY).version == 3
    texts = [decode({describe(n): describe(v) for n, v in fields.items()})[1].text
             for _, fields in link.blocking.xrange(link.key("replies", "slack"))]
    assert texts[1].startswith("Rebuild held back:") and "Served although the check" in texts[2]


def test_a_scheduled_job_held_back_tells_the_channel_once(
        store: ChromaStore, embedder: Any, redis_url: str, monkeypatch: Any) -> None:

    worker = installed_worker(store, embedder, redis_url)
    link, engine = worker.link, worker.engine
    assert run_rebuild_job(channel_text(KEY)) == "built"  # scheduled (no requester): served, nothing posted
    engine.ingest_bytes(KEY, (TEXT + " The keeper retires in spring.").encode(), "log2.txt", "", "ana", "F2")
    half_the_leaves_lost(monkeypatch)  # a broken leaf cache
    run_rebuild_job(channel_text(KEY))
    run_rebuild_job(channel_text(KEY))  # held back again, for the same reason: not told again
    posted = [decode({describe(n): describe(v) for n, v in fields.items()})
              for _, fields in link.blocking.xrange(link.key("replies", "slack"))]
    assert [(address, reply.text[:19]) for address, reply in posted] == [(ReplyAddress(KEY), "Rebuild held back: ")]
    assert engine.stats(KEY).version == 1
