"""The scale-out benchmark's processes (``bench.scale``), and the rounds and questions driven through them.

:class:`Bench` starts the servers, the front-end and the workers on 127.0.0.1 through
``testkit.cluster`` (with the Slack stand-in the front-end answers), and stops them all
at the end. Through them it ingests channels with an engine of this process's own,
requests rebuilds as a front-end records and enqueues them, waits for the workers'
``job ended`` log records, and asks Ben's questions through the stand-in; what it
measures goes into ``bench.scale_measure``'s records.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from bench.common import load_average, percentile
from bench.data import Article
from bench.procfs import CpuMeter, descendants, status_fields, status_mib
from bench.scale_measure import Job, Questions, Round, summary_ms
from bot.composition import build_engine
from bot.config import ChromaConfig, Config
from bot.coordination.link import RedisLink
from bot.coordination.signing import RecordSigner
from bot.deploy_config import CoordinationConfig
from bot.neutral import ReplyAddress
from bot.rebuilds.job_queue import RebuildQueue
from bot.rebuilds.requests import RebuildRequests, Requester
from raptor_engine import ChannelKey, Engine
from testkit.cluster import COORDINATION_SECRET, BackgroundLoop, BotProcess, ChromaServer, Cluster
from testkit.slack_api import BOT_USER, TEAM, SlackStandIn
from testkit.valkey import ValkeyProcess

ARTICLES_PER_CHANNEL = 2
LEASE_S = 30.0  # the production default (the tests' 3 s renews every second)
ANSWER_TIMEOUT_S = 120.0
BEN = "UBEN"
QUESTION_CHANNEL = "CASK"
_JOB_ENDED = re.compile(r"^channel (\S+): job ended \(([^)]*)\) after ([0-9.]+) s$")


# -- the Chroma server -------------------------------------------------------------


def chroma_pid(port: int) -> int | None:
    """The ``chroma run`` server this process started on ``port`` (it is our descendant)."""
    for pid in descendants(os.getpid()):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"run" in command and str(port).encode() in command and any(b"chroma" in part for part in command):
            return pid
    return None


def chroma_store(pid: int | None, data_dir: Path, engine: Engine, keys: Sequence[ChannelKey]) -> dict[str, float]:
    """What the Chroma server holds at the end: the served nodes of ``keys`` (leaves and
    summaries), its memory (resident now and at peak) and its data directory's size on disk."""
    nodes = sum(sum(engine.stats(key).nodes_per_layer.values()) for key in keys)
    fields = status_fields(pid) if pid is not None else {}
    disk = sum(path.stat().st_size for path in data_dir.rglob("*") if path.is_file())
    return {"channels": len(keys), "served_nodes": nodes, "rss_mib": status_mib(fields.get("VmRSS", "")),
            "peak_rss_mib": status_mib(fields.get("VmHWM", "")), "disk_mib": disk / 2**20}


# -- the set-up --------------------------------------------------------------------


def channel_articles(articles: Sequence[Article], index: int) -> list[Article]:
    """Channel ``index``'s articles: two consecutive ones, cycling over the data set, so
    every round's channel ``index`` holds the same texts."""
    return [articles[(ARTICLES_PER_CHANNEL * index + n) % len(articles)] for n in range(ARTICLES_PER_CHANNEL)]


class Bench:
    """The processes, the stand-in and this process's engine; :meth:`close` stops all of them."""

    def __init__(self, root: Path, articles: Sequence[Article]) -> None:
        self.root = root
        self.articles = articles
        self.chroma = ChromaServer(root / "chroma")
        self.valkey = ValkeyProcess(directory=root / "valkey")
        self.loop: BackgroundLoop | None = None
        self.slack: SlackStandIn | None = None
        self.engine: Engine | None = None
        self.cluster: Cluster | None = None
        self.front_end: BotProcess | None = None
        self.workers: list[BotProcess] = []
        self.ingest_s = 0.0
        self.ingested: list[str] = []

    # -- life cycle

    def start_servers(self) -> None:
        self.chroma.start()
        self.valkey.start()
        self.loop = BackgroundLoop()
        slack = SlackStandIn()
        self.slack = self.loop.run(slack.start())
        slack.mode = "http"
        slack.add_user(BEN, "Ben")
        config = Config(data_dir=self.root / "bench-data", chroma=ChromaConfig(host="127.0.0.1", port=self.chroma.port))
        self.engine = build_engine(config)
        self.cluster = Cluster(self.root, self.chroma.address, self.valkey.url, slack.base_url, lease_s=LEASE_S)

    def start(self, name: str, role: str) -> BotProcess:
        assert self.cluster is not None
        process = self.cluster.start(name, role)
        if role == "serve":
            self.front_end = process
        else:
            self.workers.append(process)
        return process

    def stop_worker(self, worker: BotProcess) -> None:
        worker.stop()
        self.workers.remove(worker)

    def close(self) -> None:
        """Stops everything started, whatever failed (each step on its own)."""
        steps: list[Callable[[], None]] = []
        if self.cluster is not None:
            steps.append(self.cluster.stop_all)
        if self.loop is not None:
            loop, slack = self.loop, self.slack
            if slack is not None:
                steps.append(lambda: loop.run(slack.stop(), timeout=15))
            steps.append(loop.close)
        steps += [self.valkey.stop, self.chroma.stop]
        for step in steps:
            try:
                step()
            except Exception as exc:  # keep stopping the others
                print(f"clean-up: {type(exc).__name__}: {exc}", file=sys.stderr)

    # -- channels

    def key(self, channel: str) -> ChannelKey:
        return ChannelKey("slack", TEAM, channel)

    def ingest(self, channel: str, articles: Sequence[Article]) -> ChannelKey:
        assert self.engine is not None
        key = self.key(channel)
        started = time.perf_counter()
        for number, article in enumerate(articles):
            self.engine.ingest_bytes(key, article.text.encode(), f"{channel}-{number}.txt", "", "bench",
                                     f"{channel}-F{number}")
        self.ingest_s += time.perf_counter() - started
        self.ingested.append(channel)
        return key

    def round_channels(self, label: str, count: int) -> list[str]:
        return [f"C{label}{index:03d}" for index in range(count)]

    def ingest_round(self, label: str, count: int) -> list[ChannelKey]:
        return [self.ingest(channel, channel_articles(self.articles, index))
                for index, channel in enumerate(self.round_channels(label, count))]

    # -- rebuilds

    def request(self, keys: Sequence[ChannelKey]) -> None:
        """Requests a rebuild of every channel at once, as a front-end records and enqueues one."""
        asyncio.run(_request_all(self.valkey.url, keys))

    def jobs(self) -> list[Job]:
        """Every ``job ended`` record of every worker started so far."""
        assert self.cluster is not None
        found = []
        for process in self.cluster.processes:
            if process.role != "worker":
                continue
            for record in process.records():
                matched = _JOB_ENDED.match(str(record.get("message", "")))
                if matched:
                    at = datetime.fromisoformat(str(record["time"]).replace("Z", "+00:00")).timestamp()
                    found.append(Job(matched.group(1), matched.group(2), float(matched.group(3)), at, process.name))
        return found

    def wait_built(self, keys: Sequence[ChannelKey], since: float, timeout: float) -> dict[str, Job]:
        """Until every channel's job has ended after ``since`` (wall clock) with an outcome
        other than ``busy``; returns each channel's last such job. Raises ``RuntimeError``
        on timeout or when a worker exits."""
        wanted = {str(key) for key in keys}
        deadline = time.monotonic() + timeout
        while True:
            ended = {job.channel: job for job in self.jobs()
                     if job.channel in wanted and job.ended_at >= since - 1.0 and job.outcome != "busy"}
            if len(ended) == len(wanted):
                return ended
            for worker in self.workers:
                if worker.popen.poll() is not None:
                    raise RuntimeError(f"{worker.name} exited with {worker.popen.returncode}:\n{worker.log()[-3000:]}")
            if time.monotonic() > deadline:
                missing = sorted(wanted - set(ended))
                raise RuntimeError(f"{len(missing)} of {len(wanted)} builds not done in {timeout:.0f} s: {missing[:5]}")
            time.sleep(0.2)

    def told(self, keys: Sequence[ChannelKey], timeout: float = 15.0) -> int:
        """Channels whose rebuild result the front-end posted (waits up to ``timeout`` for all)."""
        assert self.slack is not None
        slack = self.slack
        deadline = time.monotonic() + timeout
        while True:
            count = sum(1 for key in keys if any(str(p.get("text", "")).startswith("Rebuilt")
                                                 for p in slack.posts(key.channel)))
            if count == len(keys) or time.monotonic() > deadline:
                return count
            time.sleep(0.2)

    def build_round(self, label: str, keys: Sequence[ChannelKey], ask: Callable[[float], Questions] | None = None
                    ) -> tuple[Round, Questions | None]:
        """Requests every channel's rebuild at once and waits for all; ``ask`` (given the round's
        start) runs meanwhile. The round's figures, and what ``ask`` returned."""
        result = Round(label, len(self.workers), len(keys), load_start=load_average())
        meter = self.meter(workers=True).start()
        result.started_at = time.time()
        self.request(keys)
        asked = ask(result.started_at) if ask is not None else None
        ended = self.wait_built(keys, result.started_at, timeout=max(300.0, 30.0 * len(keys)))
        result.ended_at = max(job.ended_at for job in ended.values())
        spent = meter.stop()
        result.load_end = load_average()
        result.wall_s = result.ended_at - result.started_at
        result.builds_per_minute = 60.0 * len(keys) / result.wall_s if result.wall_s > 0 else float("nan")
        built = [job.seconds for job in ended.values() if job.outcome == "built"]
        result.job_s = {"p50": percentile(built, 50), "p95": percentile(built, 95),
                        "mean": sum(built) / len(built) if built else float("nan")}
        result.jobs_per_worker = dict(Counter(job.worker for job in ended.values()))
        result.outcomes = dict(Counter(job.outcome for job in ended.values()))
        result.cpu_s = {name: round(value, 2) for name, value in spent.items()}
        result.cpu_s_per_build = {name: round(value / len(keys), 3) for name, value in spent.items()}
        result.told = self.told(keys)
        print(f"round {label}: {len(keys)} builds with {result.workers} worker(s) in {result.wall_s:.1f} s "
              f"({result.builds_per_minute:.1f}/min), outcomes {result.outcomes}", flush=True)
        return result, asked

    # -- questions

    def meter(self, workers: bool) -> CpuMeter:
        """A meter of the front-end, the Chroma and Valkey servers and, with ``workers``, each worker."""
        assert self.front_end is not None
        pids: dict[str, int | None] = {"front_end": self.front_end.pid}
        if workers:
            pids.update({worker.name.replace("-", "_"): worker.pid for worker in self.workers})
        pids["chroma"] = chroma_pid(self.chroma.port)
        pids["valkey"] = self.valkey.pid
        return CpuMeter(pids)

    def ask(self, condition: str, texts: Sequence[str], count: int) -> Questions:
        """Ben asks ``count`` questions (cycling over ``texts``) one after another in the question channel."""
        assert self.loop is not None and self.slack is not None and self.front_end is not None
        asked = Questions(condition, load_start=load_average())
        meter = self.meter(workers=False).start()
        for number in range(count):
            latency, text = self.loop.run(_ask_once(self.slack, self.front_end.url, QUESTION_CHANNEL,
                                                    texts[number % len(texts)]), timeout=ANSWER_TIMEOUT_S + 10)
            asked.latencies_s.append(latency)
            asked.answered_at.append(time.time())
            asked.empty_answers += not text.strip()
        spent = meter.stop()
        asked.load_end = load_average()
        asked.summary = summary_ms(asked.latencies_s)
        asked.cpu_s = {name: round(value, 2) for name, value in spent.items()}
        asked.cpu_s_per_question = {name: round(value / count, 4) for name, value in spent.items()}
        print(f"questions ({condition}): {count}, p50 {asked.summary['p50_ms']:.0f} ms, "
              f"p95 {asked.summary['p95_ms']:.0f} ms", flush=True)
        return asked


async def _request_all(url: str, keys: Sequence[ChannelKey]) -> None:
    link = RedisLink(CoordinationConfig(redis_url=SecretStr(url), secret=SecretStr(COORDINATION_SECRET)))
    requests = RebuildRequests(link, RecordSigner(COORDINATION_SECRET))  # signed as the cluster's front-ends sign
    queue = RebuildQueue(link, CoordinationConfig().job_timeout_s)
    try:
        for key in keys:
            await requests.add(key, Requester("bench", ReplyAddress(key)))
            await asyncio.to_thread(queue.enqueue_once, key, "bench")
    finally:
        await link.close()


async def _ask_once(slack: SlackStandIn, url: str, channel: str, text: str) -> tuple[float, str]:
    """Ben's mention delivered to the front-end at ``url``; (seconds from delivery to the answer's
    ``chat.postMessage`` arriving at the stand-in, the answer's text)."""
    slack.app_url = url
    message = slack.say(channel, BEN, f"<@{BOT_USER}> {text}")
    sent = time.perf_counter()
    for event in slack.events_for(message):
        delivery = await slack.deliver_event(event)
        if delivery.status != 200:
            raise RuntimeError(f"the front-end refused the event: {delivery.status} {delivery.body[:200]}")

    def answer() -> Any:
        return slack.calls_of("chat.postMessage", channel=channel, thread_ts=message["ts"])

    calls = await slack.wait_until(answer, timeout=ANSWER_TIMEOUT_S, what=f"the answer to {text!r}")
    return calls[0].at - sent, str(calls[0].params.get("text", ""))

