"""What the scale-out benchmark (``bench.scale``) measures: the records of its rebuild rounds
and question series, and the coordination's overhead per call against the Valkey server.

The records are filled by ``bench.scale_cluster.Bench`` as it drives the processes, and
printed by ``bench.scale_report``; :func:`measure_overhead` runs in the benchmark's own
process, against the Valkey server the run started.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import SecretStr

from bench.common import latency_summary
from bot.coordination.deliveries import SharedLedger
from bot.coordination.link import RedisLink
from bot.deploy_config import CoordinationConfig
from bot.rebuilds.job_queue import RebuildQueue
from raptor_engine import ChannelKey, channel_digest
from testkit.cluster import COORDINATION_SECRET
from testkit.slack_api import TEAM

OVERHEAD_NAMESPACE = "bench-overhead"


# -- the figures -------------------------------------------------------------------


@dataclass
class Job:
    """One ``job ended`` record of a worker's log."""

    channel: str
    outcome: str
    seconds: float
    ended_at: float  # wall clock (time.time())
    worker: str


@dataclass
class Round:
    """One round of rebuilds: fresh channels, all requested at once."""

    label: str
    workers: int
    channels: int
    wall_s: float = 0.0
    builds_per_minute: float = 0.0
    job_s: dict[str, float] = field(default_factory=dict)  # p50, p95, mean of the built jobs' seconds
    jobs_per_worker: dict[str, int] = field(default_factory=dict)
    outcomes: dict[str, int] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)  # per process group, the whole round
    cpu_s_per_build: dict[str, float] = field(default_factory=dict)
    told: int = 0  # channels whose requester got the result posted in Slack
    load_start: list[float] = field(default_factory=list)
    load_end: list[float] = field(default_factory=list)
    started_at: float = 0.0
    ended_at: float = 0.0


@dataclass
class Questions:
    """Questions asked one after another at the front-end, and what they cost."""

    condition: str
    latencies_s: list[float] = field(default_factory=list)
    answered_at: list[float] = field(default_factory=list)  # wall clock
    during_build: int = 0  # answered before the concurrent round's last build ended
    summary: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    cpu_s_per_question: dict[str, float] = field(default_factory=dict)
    empty_answers: int = 0
    load_start: list[float] = field(default_factory=list)
    load_end: list[float] = field(default_factory=list)


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """:func:`bench.common.latency_summary` of ``seconds``, each figure rounded to a microsecond."""
    return {key: round(value, 3) for key, value in latency_summary(seconds).items()}


# -- the coordination's overhead -------------------------------------------------


async def measure_overhead(url: str, calls: int) -> dict[str, dict[str, float]]:
    """p50/p95/mean/max milliseconds of each coordination call, ``calls`` times each, in a
    namespace of its own (no worker takes its jobs)."""
    link = RedisLink(CoordinationConfig(redis_url=SecretStr(url), secret=SecretStr(COORDINATION_SECRET),
                                        namespace=OVERHEAD_NAMESPACE))
    ledger = SharedLedger(link, ttl_s=3600)
    queue = RebuildQueue(link, CoordinationConfig().job_timeout_s)
    run = uuid.uuid4().hex[:8]  # ids of their own: a second run on the same server counts new events too
    keys = [ChannelKey("slack", TEAM, f"COVH{run}{n:05d}") for n in range(calls)]
    period = int(time.time() // 3600)
    timings: dict[str, list[float]] = {}

    async def timed(name: str, call: Callable[[int], Any], expect: bool) -> None:
        found = timings.setdefault(name, [])
        for n in range(calls):
            started = time.perf_counter()
            result = call(n)
            if asyncio.iscoroutine(result):
                result = await result
            found.append(time.perf_counter() - started)
            if bool(result) is not expect:
                raise RuntimeError(f"{name}: call {n} returned {result!r}, expected {expect}")

    try:
        await link.ping()
        link.ping_sync()  # both clients connected before anything is timed
        await timed("SharedLedger.first (new event)", lambda n: ledger.first(f"Ev-bench-{run}-{n:06d}"), True)

        def claim(n: int) -> Any:
            name = link.key("checked", channel_digest(keys[n]), str(period))
            return link.run(lambda r: r.set(name, "1", nx=True, ex=3600))

        await timed("period claim (SET NX EX)", claim, True)
        await timed("enqueue_once (no job waiting)", lambda n: queue.enqueue_once(keys[n], "bench"), True)
        await timed("enqueue_once (a job waits)", lambda n: queue.enqueue_once(keys[n], "bench"), False)
    finally:
        await link.close()
    return {name: summary_ms(values) for name, values in timings.items()}
