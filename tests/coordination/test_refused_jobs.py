"""Jobs someone else wrote to Redis, against a real Valkey and RQ's own worker loop (the one
``python -m bot worker`` runs, here in burst mode and in this process): a pickled call, another
function, other arguments, callbacks, webhooks, an abandoned job with a failure callback. Each
is refused before anything it names is loaded, and the worker goes on to build the real job
queued after it."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rq import Callback, Queue
from rq.job import Job, JobStatus
from rq.webhook import Webhook

from bot.config import BotConfig, Config
from bot.coordination.lease import ChannelLeases
from bot.coordination.link import RedisLink
from bot.coordination.reply_stream import ReplyPublisher
from bot.engine_calls import AsyncEngine
from bot.model_budget import ModelBudget, SharedSpending
from bot.neutral import ChannelKey, ReplyAddress
from bot.observability.metrics import Metrics
from bot.rebuilds.job_queue import JOB_FUNCTION, JOB_SERIALIZER, RebuildJob, RebuildQueue, RefusedJob, channel_text
from bot.rebuilds.requests import RebuildRequests, Requester
from bot.rebuilds.worker import WorkerContext, install, rebuild_worker
from raptor_engine import ChromaStore, Engine
from tests.coordination.conftest import coordination_config, signer
from tests.coordination.test_worker_job import TEXT, worker_engine

KEY = ChannelKey("slack", "T1", "CREAL")
OTHER = ChannelKey("slack", "T1", "COTHER")  # the channel the refused jobs name
CALLS: list[tuple[Any, ...]] = []  # what record_call was called with


def record_call(*args: Any) -> None:
    """What a planted job or callback names: a call to it means the worker ran what Redis said."""
    CALLS.append(args)


class Planted:
    """Unpickling this creates a file: proof that a pickled job was loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return open, (str(self.marker), "w")


class Worker:
    """The worker's pieces around a real engine and queue, and one real request waiting."""

    def __init__(self, link: RedisLink, engine: Engine, queue: RebuildQueue) -> None:
        self.link, self.engine, self.queue = link, engine, queue

    def queue_the_real_job(self) -> None:
        asyncio.run(RebuildRequests(self.link, signer()).add(KEY, Requester("ana", ReplyAddress(KEY))))
        assert self.queue.enqueue_once(KEY, "a request")

    def work(self) -> None:
        """RQ's loop until the queue is empty (its signal handlers are put back afterwards)."""
        handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
        try:
            rebuild_worker(self.queue, self.link, "test-worker").work(burst=True, with_scheduler=False)
        finally:
            for number, handler in handlers.items():
                signal.signal(number, handler)

    def built_the_real_job(self) -> bool:
        return self.engine.stats(KEY).version == 1


@pytest.fixture
def worker(store: ChromaStore, embedder: Any, redis_url: str) -> Worker:
    CALLS.clear()
    settings = coordination_config(redis_url)
    link = RedisLink(settings)
    leases = ChannelLeases(link, settings.lease_s)
    engine = worker_engine(store, embedder, leases)
    engine.ingest_bytes(KEY, TEXT.encode(), "log.txt", "", "ana", "F1")
    engine.ingest_bytes(OTHER, TEXT.encode(), "log.txt", "", "ana", "F2")
    queue = RebuildQueue(link, settings.job_timeout_s)
    config = Config(bot=BotConfig(progress_every_s=3600))
    install(WorkerContext(config, AsyncEngine(engine), link, leases, queue, RebuildRequests(link, signer()),
                          ReplyPublisher(link, signer()), Metrics(),
                          ModelBudget(config.bot.model_budget, SharedSpending(link))))
    return Worker(link, engine, queue)


def refused(caplog: pytest.LogCaptureFixture, job_id: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "bot.rebuilds.worker" and f"refused RQ job {job_id}" in r.getMessage()]


def assert_refused(worker: Worker, job_id: str, caplog: pytest.LogCaptureFixture, reason: str) -> None:
    [message] = refused(caplog, job_id)
    assert reason in message
    job = worker.queue.queue.fetch_job(job_id)
    assert job is not None and job.get_status() == JobStatus.FAILED
    assert job_id in worker.queue.queue.failed_job_registry.get_job_ids()
    assert worker.engine.stats(OTHER).version == 0  # no job built the channel the refused one named
    assert worker.built_the_real_job()  # the worker went on to the next job


def test_a_pickled_job_is_never_unpickled(worker: Worker, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    marker = tmp_path / "unpickled"
    pickled = Queue(worker.queue.queue.name, connection=worker.link.blocking)  # RQ's default: pickle
    planted = pickled.enqueue(JOB_FUNCTION, Planted(marker))
    worker.queue_the_real_job()

    worker.work()

    assert not marker.exists()
    assert_refused(worker, planted.id, caplog, "not JSON")


@pytest.mark.parametrize(("function", "args", "kwargs", "reason"), [
    (f"{__name__}.record_call", [channel_text(OTHER)], {}, "not the rebuild job"),
    ("os.system", ["true"], {}, "not the rebuild job"),
    (JOB_FUNCTION, [channel_text(OTHER), "more"], {}, "not one channel key"),
    (JOB_FUNCTION, [], {"channel": channel_text(OTHER)}, "not one channel key"),
    (JOB_FUNCTION, ["not a channel key"], {}, "not a channel key"),
])
def test_a_json_job_of_another_call_is_refused(worker: Worker, caplog: pytest.LogCaptureFixture, function: str,
                                                args: list[str], kwargs: dict[str, str], reason: str) -> None:
    caplog.set_level(logging.WARNING)
    planted = worker.queue.queue.enqueue(function, args=args, kwargs=kwargs)
    worker.queue_the_real_job()

    worker.work()

    assert CALLS == []
    assert_refused(worker, planted.id, caplog, reason)


@pytest.mark.parametrize("callbacks", [{"on_success": Callback(record_call)}, {"on_failure": Callback(record_call)},
                                       {"on_stopped": Callback(record_call)}])
def test_a_rebuild_job_with_a_callback_is_refused_unrun(worker: Worker, caplog: pytest.LogCaptureFixture,
                                                         callbacks: dict[str, Callback]) -> None:
    caplog.set_level(logging.WARNING)
    planted = worker.queue.queue.enqueue(JOB_FUNCTION, channel_text(OTHER), **callbacks)  # type: ignore[arg-type]
    worker.queue_the_real_job()

    worker.work()

    assert CALLS == []
    assert_refused(worker, planted.id, caplog, "names callbacks")


class Hooks(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    do_POST = do_GET

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        """Quiet."""


@pytest.fixture
def webhook_server() -> Iterator[str]:
    Hooks.hits = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hooks)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_rebuild_job_with_webhooks_is_refused_and_calls_none(
        worker: Worker, webhook_server: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    hooks = [Webhook(f"{webhook_server}/{status}", status) for status in ("finished", "failed")]  # type: ignore[arg-type]
    planted = worker.queue.queue.enqueue(JOB_FUNCTION, channel_text(OTHER), webhooks=hooks)
    worker.queue_the_real_job()

    worker.work()

    assert Hooks.hits == []
    assert_refused(worker, planted.id, caplog, "has webhooks")


def test_an_abandoned_job_planted_in_the_started_registry_runs_no_callback_and_calls_no_webhook(
        worker: Worker, webhook_server: str) -> None:
    """RQ's clean-up, which the worker runs, fails a job its registry says was abandoned: with
    its failure callback and webhooks. A writer can plant such a record directly."""
    queue = Queue(worker.queue.queue.name, connection=worker.link.blocking, serializer=JOB_SERIALIZER)
    planted = Job.create(JOB_FUNCTION, args=[channel_text(OTHER)], connection=worker.link.blocking,
                         serializer=JOB_SERIALIZER, origin=queue.name, status=JobStatus.STARTED,
                         on_failure=Callback(record_call), webhooks=[Webhook(f"{webhook_server}/failed", "failed")])
    planted.save()
    worker.link.blocking.zadd(queue.started_job_registry.key, {f"{planted.id}:planted": 1})  # long expired
    worker.queue_the_real_job()

    worker.work()

    assert CALLS == [] and Hooks.hits == []
    assert worker.built_the_real_job()


def test_the_job_class_loads_only_the_rebuild_function(worker: Worker) -> None:
    """Whatever path of RQ's reaches for a job's function or callbacks gets the rebuild job or nothing."""
    other = worker.queue.queue.enqueue(f"{__name__}.record_call", "x", on_failure=Callback(record_call))
    loaded = RebuildJob.fetch(other.id, connection=worker.link.blocking, serializer=JOB_SERIALIZER)
    with pytest.raises(RefusedJob, match="names callbacks"):
        _ = loaded.func
    assert loaded.failure_callback is None and loaded.success_callback is None and loaded.stopped_callback is None
    real = RebuildJob.create(JOB_FUNCTION, args=[channel_text(KEY)], connection=worker.link.blocking,
                             serializer=JOB_SERIALIZER)
    assert real.func.__name__ == "run_rebuild_job"
    assert CALLS == []
