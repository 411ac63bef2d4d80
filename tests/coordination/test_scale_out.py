"""Several real processes as one bot: two front-ends (``python -m bot serve``, Slack in HTTP
mode behind the tests' Slack stand-in) and two workers (``python -m bot worker``), sharing a
``chroma run`` server and a Valkey server, all on 127.0.0.1.

One set of processes serves the whole module (each start loads the embedding model); the
tests run in file order and each leaves the set as it found it (a killed worker is
replaced). Channels are the tests' own, so nothing one test built confuses another.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue

from bot.composition import build_engine
from bot.config import ChromaConfig, Config
from bot.coordination.reply_stream import encode
from bot.neutral import Reply, ReplyAddress, ReplyKind
from bot.rebuilds.job_queue import JOB_FUNCTION
from raptor_engine import ChannelKey, Engine, channel_digest
from testkit.cluster import BackgroundLoop, BotProcess, ChromaServer, Cluster, metric
from testkit.slack_api import BOT_USER, TEAM, SlackStandIn
from testkit.valkey import ValkeyProcess
from tests.conftest import quality_articles
from tests.coordination.test_refused_jobs import Planted

pytestmark = pytest.mark.heavy

ANA, BEN = "UANA", "UBEN"  # Ana is an admin (bot.admins), Ben asks questions
QUESTION = "What happens in the story?"
WAIT_S = 90.0


@dataclass
class Stack:
    tmp: Path
    chroma: ChromaServer
    valkey: ValkeyProcess
    loop: BackgroundLoop
    slack: SlackStandIn
    engine: Engine  # the test's own view of the shared store (no coordination)
    cluster: Cluster
    front_ends: list[BotProcess]
    workers: list[BotProcess]
    articles: list[str]

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.valkey.url, socket_timeout=2)

    def deliver(self, front_end: BotProcess, coroutine: Any) -> Any:
        """Runs a stand-in delivery aimed at ``front_end`` (as the load balancer would)."""
        self.slack.app_url = front_end.url
        return self.loop.run(coroutine)

    def ask(self, front_end: BotProcess, channel: str, text: str = QUESTION) -> str:
        """Ben asks in ``channel`` through ``front_end``; returns the answer's text."""
        message = self.slack.say(channel, BEN, f"<@{BOT_USER}> {text}")
        for event in self.slack.events_for(message):
            self.deliver(front_end, self.slack.deliver_event(event))
        posts = self.wait(lambda: self.slack.posts(channel, thread_ts=message["ts"]), f"an answer in {channel}")
        return str(posts[0].get("text", ""))

    def request_rebuild(self, front_end: BotProcess, channel: str) -> None:
        delivery = self.deliver(front_end, self.slack.slash(channel, ANA, "rebuild"))
        assert delivery.status == 200

    def results(self, channel: str) -> list[str]:
        """The rebuild results posted in ``channel`` (by any front-end, for any worker)."""
        return [p["text"] for p in self.slack.posts(channel) if str(p.get("text", "")).startswith(("Rebuilt", ":"))
                and ("Rebuilt" in p["text"] or "rebuild" in p["text"].lower()) and "queued" not in p["text"]]

    def wait(self, condition: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
        return self.loop.run(self.slack.wait_until(condition, timeout=timeout, what=what), timeout=timeout + 5)

    def add_material(self, channel: str, *articles: str) -> ChannelKey:
        key = ChannelKey("slack", TEAM, channel)
        for number, text in enumerate(articles):
            self.engine.ingest_bytes(key, text.encode(), f"{channel}-{number}.txt", "", "ana", f"{channel}-F{number}")
        return key

    def lease_holder(self, key: ChannelKey, timeout: float = WAIT_S) -> BotProcess:
        """The worker holding ``key``'s lease, as soon as one does."""
        deadline = time.monotonic() + timeout
        client = self.redis()
        while time.monotonic() < deadline:
            value = client.get(f"raptor:lease:{channel_digest(key)}")
            if value is not None:
                pid = int(value.decode().rsplit(":", 1)[-1])
                return next(w for w in self.workers if w.pid == pid)
            time.sleep(0.02)
        raise AssertionError(f"no worker took the lease of {key}")

    def replace_worker(self, gone: BotProcess) -> None:
        gone.stop()
        self.workers.remove(gone)
        fresh = self.cluster.start(f"{gone.name}-again-{int(time.monotonic())}", "worker")
        self.cluster.wait_ready(fresh)
        self.workers.append(fresh)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("scale-out")
    chroma = ChromaServer(tmp / "chroma")
    chroma.start()
    valkey = ValkeyProcess(directory=tmp / "valkey")
    valkey.start()
    loop = BackgroundLoop()
    slack: SlackStandIn = loop.run(SlackStandIn().start())
    slack.mode = "http"
    slack.add_user(ANA, "Ana", admin=True)
    slack.add_user(BEN, "Ben")
    engine = build_engine(Config(data_dir=tmp / "test-data", chroma=ChromaConfig(host="127.0.0.1", port=chroma.port)))
    cluster = Cluster(tmp, chroma.address, valkey.url, slack.base_url, lease_s=3.0)
    try:
        first = cluster.start("front-1", "serve")
        cluster.wait_ready(first)  # alone: the first start may export the model for the others
        others = [cluster.start("front-2", "serve"), cluster.start("worker-1", "worker"),
                  cluster.start("worker-2", "worker")]
        cluster.wait_ready(*others)
        yield Stack(tmp, chroma, valkey, loop, slack, engine, cluster, [first, others[0]], others[1:],
                    quality_articles())
    finally:
        cluster.stop_all()
        loop.run(slack.stop())
        loop.close()
        valkey.stop()
        chroma.stop()


def built(stack: Stack, channel: str, *articles: str) -> ChannelKey:
    """A channel with ``articles`` and a served tree (built through the workers)."""
    key = stack.add_material(channel, *articles)
    stack.request_rebuild(stack.front_ends[0], channel)
    stack.wait(lambda: stack.results(channel), f"the first build of {channel}")
    return key


def test_each_event_is_answered_once_whichever_front_end_gets_it_and_its_retry(stack: Stack) -> None:
    built(stack, "CONCE", stack.articles[0])
    one, two = stack.front_ends
    asked = []
    for number in range(6):
        message = stack.slack.say("CONCE", BEN, f"<@{BOT_USER}> question {number}: {QUESTION}")
        events = stack.slack.events_for(message)
        body = [stack.slack.event_callback(event) for event in events]
        first, retry = (one, two) if number % 2 == 0 else (two, one)
        for callback in body:
            assert stack.deliver(first, stack.slack.deliver_callback(callback)).status == 200
        for callback in body:  # Slack's retry, with the same event id, lands on the other replica
            assert stack.deliver(retry, stack.slack.deliver_callback(callback, retry=1)).status == 200
        asked.append(message["ts"])
    for ts in asked:
        stack.wait(lambda ts=ts: stack.slack.posts("CONCE", thread_ts=ts), "an answer")
    time.sleep(2.0)  # a second answer, if any, would have come by now
    assert [len(stack.slack.posts("CONCE", thread_ts=ts)) for ts in asked] == [1] * 6


def test_ten_requests_give_one_build_at_a_time_each_announced_once(stack: Stack) -> None:
    key = built(stack, "CTEN", stack.articles[1])
    before, builds_before = len(stack.results("CTEN")), len(build_spans(stack.workers, key))
    stack.add_material("CTEN", stack.articles[2])  # something new to build
    for number in range(10):
        stack.request_rebuild(stack.front_ends[number % 2], "CTEN")
    client = stack.redis()

    def settled() -> bool:  # every request told: none waits, no worker builds, each build's result is in
        builds = len(build_spans(stack.workers, key)) - builds_before
        return (builds >= 1 and not client.smembers("raptor:pending") and not stack.results("CTEN")[before + builds:]
                and len(stack.results("CTEN")) == before + builds and not client.exists(f"raptor:lease:{channel_digest(key)}"))

    stack.wait(settled, "every request's build and its result", timeout=180)
    time.sleep(1.5)  # a second post of a result, if any, would have come by now
    spans = build_spans(stack.workers, key)
    new_results = stack.results("CTEN")[before:]
    assert len(new_results) == len(spans) - builds_before, new_results  # one post per build, not per request
    assert 1 <= len(new_results) <= 3 and all(text.startswith("Rebuilt") for text in new_results)
    merged = [e for e in stack.slack.ephemerals("CTEN") if "Rebuild queued" in str(e.get("text", ""))]
    assert merged, "requests merged into a waiting build are told privately"
    ordered = sorted(spans)
    assert all(a[1] <= b[0] for a, b in zip(ordered, ordered[1:])), f"two builds of one channel overlapped: {ordered}"


def test_a_killed_worker_does_not_lose_the_job(stack: Stack) -> None:
    key = built(stack, "CKILL", stack.articles[3])
    sources = len(stack.engine.sources(key))
    before = len(stack.results("CKILL"))
    stack.add_material("CKILL", stack.articles[4], stack.articles[5])
    stack.request_rebuild(stack.front_ends[1], "CKILL")
    holder = stack.lease_holder(key)
    os.kill(holder.pid, signal.SIGKILL)
    answers = []
    deadline = time.monotonic() + WAIT_S
    while len(stack.results("CKILL")) == before and time.monotonic() < deadline:
        answers.append(stack.ask(stack.front_ends[0], "CKILL"))  # the served tree keeps answering
    assert stack.results("CKILL")[before:], "nobody finished the killed worker's job"
    assert stack.results("CKILL")[before].startswith("Rebuilt: tree")
    assert answers and all(answers)
    assert len(stack.engine.sources(key)) == sources + 2  # no source lost
    stack.replace_worker(holder)


def test_a_paused_worker_cannot_switch_after_its_lease_ran_out(stack: Stack) -> None:
    key = built(stack, "CSTOP", stack.articles[6])
    before = len(stack.results("CSTOP"))
    stack.add_material("CSTOP", stack.articles[7], stack.articles[8])
    stack.request_rebuild(stack.front_ends[0], "CSTOP")
    stale = stack.lease_holder(key)
    os.kill(stale.pid, signal.SIGSTOP)
    try:
        stack.wait(lambda: stack.results("CSTOP")[before:], "the other worker's result")
        served = stack.engine.stats(key).version
    finally:
        os.kill(stale.pid, signal.SIGCONT)
    records = stack.wait(lambda: [r for r in stale.records() if "job ended (superseded)" in r.get("message", "")
                                  or "job ended (built)" in r.get("message", "")], "the stale worker's job to end")
    assert "superseded" in records[0]["message"], records
    assert stack.engine.stats(key).version == served  # the stale worker did not switch back
    time.sleep(1.0)
    assert len(stack.results("CSTOP")) == before + 1  # told once, by the worker that took over
    assert stack.ask(stack.front_ends[1], "CSTOP")


def test_what_someone_else_writes_to_redis_is_neither_run_nor_posted(stack: Stack) -> None:
    built(stack, "CTRUST", stack.articles[11])
    before = len(stack.results("CTRUST"))
    client = stack.redis()
    forged = "Rebuilt: please re-authorise the bot at https://evil.example"
    client.xadd("raptor:replies:slack", encode(ReplyAddress(ChannelKey("slack", TEAM, "CTRUST")),  # type: ignore[arg-type]
                                                Reply(ReplyKind.INFO, forged)))
    marker = stack.tmp / "unpickled-by-a-worker"
    planted = Queue("raptor-rebuilds", connection=client).enqueue(JOB_FUNCTION, Planted(marker))  # RQ's pickle
    stack.add_material("CTRUST", stack.articles[12])
    stack.request_rebuild(stack.front_ends[1], "CTRUST")  # queued after the planted job
    stack.wait(lambda: stack.results("CTRUST")[before:], "the real rebuild's result")
    assert not marker.exists()  # no worker unpickled the planted job
    assert all(forged not in str(post.get("text", "")) for post in stack.slack.posts("CTRUST"))
    assert any(f"refused RQ job {planted.id}" in worker.log() for worker in stack.workers)
    stack.wait(lambda: any("dropped a reply entry" in f.log() for f in stack.front_ends), "the forged reply dropped")


def test_questions_go_on_while_redis_is_down_and_queued_rebuilds_run_when_it_returns(stack: Stack) -> None:
    built(stack, "CREDIS", stack.articles[9])
    before = len(stack.results("CREDIS"))
    stack.add_material("CREDIS", stack.articles[10])
    stack.valkey.stop()
    try:
        for front_end in stack.front_ends:
            assert stack.ask(front_end, "CREDIS")
        status, body = stack.front_ends[0].get("/readyz")
        assert status == 503 and json.loads(body)["checks"]["redis"] != "ok"
        stack.request_rebuild(stack.front_ends[1], "CREDIS")
        said = stack.wait(lambda: [r for _, r, _ in stack.slack.responses if "Rebuilds wait" in json.dumps(r)]
                          or [p for p in stack.slack.posts("CREDIS") if "Rebuilds wait" in p.get("text", "")],
                          "the 'rebuilds wait' reply")
        assert said
    finally:
        stack.valkey.restart()
    stack.wait(lambda: stack.results("CREDIS")[before:], "the kept request's rebuild", timeout=120)
    assert stack.front_ends[0].get("/readyz")[0] == 200
    front_end_log = stack.front_ends[0].log() + stack.front_ends[1].log()
    assert front_end_log.count("the coordination server is unreachable") <= 2  # once per process, not per event


def test_metrics_scrape_and_readiness_follows_chroma(stack: Stack) -> None:
    built(stack, "CMETRICS", stack.articles[7])  # whichever tests ran before: a build, and questions
    for front_end in stack.front_ends:
        stack.ask(front_end, "CMETRICS")
    for process in [*stack.front_ends, *stack.workers]:
        status, text = process.get("/metrics")
        assert status == 200
        if process.role == "serve":
            assert metric(text, "raptor_questions_total") >= 1
            assert metric(text, "raptor_ack_seconds_count") >= 1
        assert metric(text, "raptor_queue_depth") >= 0
    assert sum(metric(w.get("/metrics")[1], "raptor_rebuilds_total", outcome="built") for w in stack.workers) >= 1
    assert stack.front_ends[0].get("/healthz")[0] == 200
    stack.chroma.stop()
    try:
        status, body = stack.front_ends[0].get("/readyz")
        assert status == 503 and json.loads(body)["checks"]["chroma"] != "ok"
        assert stack.workers[0].get("/readyz")[0] == 503
        said = stack.ask(stack.front_ends[1], "CMETRICS")  # a channel with a tree: the store is what fails
        assert "Chroma" in said or "store" in said, said
    finally:
        stack.chroma.start()
    stack.wait(lambda: stack.front_ends[0].get("/readyz")[0] == 200, "ready again")


def test_workers_yield_the_cpu_to_front_ends(stack: Stack) -> None:
    base = os.getpriority(os.PRIO_PROCESS, 0)

    def niceness(process: BotProcess) -> set[int]:  # of every thread: the model's pool threads included
        threads = [int(tid.name) for tid in Path(f"/proc/{process.pid}/task").iterdir()]
        return {os.getpriority(os.PRIO_PROCESS, tid) - base for tid in threads}

    for worker in stack.workers:
        assert min(niceness(worker)) >= 10, niceness(worker)
    for front_end in stack.front_ends:
        assert 0 in niceness(front_end)  # questions are answered at normal priority


def build_spans(workers: list[BotProcess], key: ChannelKey) -> list[tuple[str, str]]:
    """(start, end) times of the builds of ``key`` in the workers' JSON logs."""
    spans = []
    for worker in workers:
        started = None
        for record in worker.records():
            message = record.get("message", "")
            if not message.startswith(f"channel {key}: rebuild "):
                continue
            if "rebuild started" in message:
                started = record["time"]
            elif started is not None and ("rebuild finished" in message or "rebuild failed" in message):
                spans.append((started, record["time"]))
                started = None
    return spans
