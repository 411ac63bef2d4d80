"""Rebuild scheduling on the real engine (packaged model, embedded Chroma, extractive summaries).

Each test drives its own event loop with ``asyncio.run``. Builds are observed
from outside: the replies each requester receives (with their arrival times),
the scheduler's log lines, the store's notes and the engine's ``stats``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from datetime import datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from bot.config import BotConfig, ChannelConfig, ScheduleConfig
from bot.engine_calls import AsyncEngine
from bot.neutral import Reply, ReplyAddress, ReplyKind
from bot.rebuilds.in_process import NOTE, RebuildScheduler
from bot.rebuilds.relay import ProgressRelay
from bot.rebuilds.schedule import EPOCH, MISFIRE_GRACE_S, offset_s
from bot.rebuilds.service import RequestResult
from bot.replies import REBUILD_INTERRUPTED, REBUILD_QUEUED_BEHIND, progress_text, report_sentence
from raptor_engine.engine import Engine, EngineSettings
from raptor_engine.store import ChromaStore
from raptor_engine.tree import BuildProgress
from raptor_engine.types import BuildReport, ChannelKey, Document
from tests.conftest import SAMPLE, make_engine

QUIET = BotConfig(progress_every_s=3600)  # no progress replies: a test sees only results


class Inbox:
    """A ``Send`` that keeps what it receives, with the monotonic time it arrived."""

    def __init__(self, fail: bool = False) -> None:
        self.received: list[tuple[float, Reply]] = []
        self.fail = fail

    async def __call__(self, reply: Reply) -> None:
        self.received.append((time.monotonic(), reply))
        if self.fail:
            raise RuntimeError("the platform is down")

    @property
    def replies(self) -> list[Reply]:
        return [reply for _, reply in self.received]

    @property
    def kinds(self) -> list[ReplyKind]:
        return [reply.kind for reply in self.replies]


def scheduler_lines(caplog: pytest.LogCaptureFixture, fragment: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("bot.rebuilds.") and fragment in r.getMessage()]


def small_channel(engine: Engine, key: ChannelKey, text: str = "Penguins live in Antarctica. They eat krill.") -> None:
    engine.ingest(key, Document(text, "note"))


def other_channel(name: str) -> ChannelKey:
    return ChannelKey("test", "workspace", name)


# -- pure functions -------------------------------------------------------------------


def report(**changes: Any) -> BuildReport:
    fields: dict[str, Any] = {
        "version": 3, "sources": 15, "leaves": 977, "nodes_per_layer": {0: 977, 1: 120, 2: 40, 3: 10, 4: 4, 5: 1},
        "stage_seconds": {"cluster": 10.0, "summarise": 8.9}, "leaves_embedded": 0, "leaves_reused": 977,
        "summaries_made": 12, "summaries_reused": 160, "built_at": "2026-01-01T00:00:00+00:00",
        "model_calls": 4, "prompt_tokens": 2600, "completion_tokens": 500, "model_seconds": 3.0,
    }
    fields.update(changes)
    return BuildReport(**fields)


def test_report_sentence() -> None:
    assert report_sentence(report()) == (
        "Rebuilt: tree v3 from 15 sources, 1,152 nodes in 6 layers (977 excerpts); "
        "12 summaries written, 160 reused; 4 language-model calls, 3,100 tokens; 18.9 s."
    )


def test_report_sentence_without_a_model_and_in_the_singular() -> None:
    one = report(version=1, sources=1, leaves=1, nodes_per_layer={0: 1}, summaries_made=1, summaries_reused=0,
                 model_calls=0, prompt_tokens=0, completion_tokens=0, stage_seconds={"store": 0.04})
    assert report_sentence(one) == (
        "Rebuilt: tree v1 from 1 source, 1 node in 1 layer (1 excerpt); 1 summary written, 0 reused; 0.0 s."
    )


def test_progress_text() -> None:
    assert progress_text(BuildProgress("cluster", 0, 1, 2)) == "Rebuilding: clustering layer 2…"
    assert progress_text(BuildProgress("summarise", 40, 120, 1)) == "Rebuilding: 40 of 120 summaries (layer 1)…"
    assert progress_text(BuildProgress("subtrees", 3, 15)) == "Rebuilding: 3 of 15 source trees built…"
    assert (progress_text(BuildProgress("subtrees", 0, 1, summaries=12))
            == "Rebuilding: 0 of 1 source tree built, 12 summaries written…")
    assert progress_text(BuildProgress("embed", 256, 1300)) == "Rebuilding: embedded 256 of 1,300 excerpts…"


# -- progress throttling ----------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def turns(n: int = 10) -> None:
    """Lets the loop run the callbacks and tasks the relay scheduled."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_progress_replies_are_throttled() -> None:
    async def scenario() -> list[Reply]:
        clock, inbox = Clock(), Inbox()
        relay = ProgressRelay([inbox], every_s=10.0, clock=clock)
        for now, layer in [(0.0, 1), (5.0, 2), (10.0, 3), (15.0, 4), (19.9, 5), (20.5, 6)]:
            clock.now = now
            relay(BuildProgress("cluster", 0, 1, layer))
            await turns()
        clock.now = 40.0
        await asyncio.to_thread(relay, BuildProgress("summarise", 1, 2, 7))  # from a worker thread
        await turns()
        await relay.close()
        clock.now = 60.0
        relay(BuildProgress("cluster", 0, 1, 8))  # after close: never sent
        await turns()
        return inbox.replies

    replies = asyncio.run(scenario())
    assert [r.text for r in replies] == [
        "Rebuilding: clustering layer 3…", "Rebuilding: clustering layer 6…", "Rebuilding: 1 of 2 summaries (layer 7)…",
    ]
    assert {r.kind for r in replies} == {ReplyKind.PROGRESS}


def test_progress_updates_are_dropped_while_a_reply_is_being_sent() -> None:
    async def scenario() -> list[str]:
        clock, sent, release = Clock(), [], asyncio.Event()

        async def slow_send(reply: Reply) -> None:
            sent.append(reply.text)
            await release.wait()

        relay = ProgressRelay([slow_send], every_s=1.0, clock=clock)
        for now in (1.0, 2.0, 3.0):  # the first is being sent during the other two
            clock.now = now
            relay(BuildProgress("cluster", 0, 1, int(now)))
            await turns()
        release.set()
        await relay.close()
        return sent

    assert asyncio.run(scenario()) == ["Rebuilding: clustering layer 1…"]


# -- manual requests -----------------------------------------------------------------------


def test_a_request_rebuilds_and_reports_once(engine: Engine, channel: ChannelKey) -> None:
    engine.ingest_file(channel, SAMPLE)

    async def scenario() -> tuple[RequestResult, Inbox, dict[str, str]]:
        scheduler = RebuildScheduler(AsyncEngine(engine), QUIET)
        inbox = Inbox()
        result = await scheduler.request(channel, "ann", inbox)
        noted = engine.notes(channel)  # written before the build started
        assert (await scheduler.status(channel)).running
        await scheduler.wait_idle(channel)
        assert not (await scheduler.status(channel)).running
        return result, inbox, noted

    result, inbox, noted = asyncio.run(scenario())
    assert result is RequestResult.STARTED
    assert noted[NOTE].startswith("ann at ")
    assert inbox.kinds == [ReplyKind.INFO]
    assert inbox.replies[0].text.startswith("Rebuilt: tree v1 from 1 source, ")
    assert NOTE not in engine.notes(channel)
    assert engine.stats(channel).version == 1


def test_requests_while_running_merge_into_one_queued_rebuild(
    engine: Engine, channel: ChannelKey, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.rebuilds")
    engine.ingest_file(channel, SAMPLE)
    first, second, third = Inbox(), Inbox(), Inbox()

    async def scenario() -> list[RequestResult]:
        scheduler = RebuildScheduler(AsyncEngine(engine), QUIET)
        results = [await scheduler.request(channel, "ann", first)]
        results.append(await scheduler.request(channel, "bob", second))
        results.append(await scheduler.request(channel, "cy", third))
        status = (await scheduler.status(channel))
        assert status.running and status.queued
        await scheduler.wait_idle()
        return results

    assert asyncio.run(scenario()) == [RequestResult.STARTED, RequestResult.QUEUED, RequestResult.QUEUED]
    # Two builds, strictly one after the other, and everyone heard the result of theirs.
    ordered = scheduler_lines(caplog, "rebuild ")
    ordered = [m for m in ordered if "rebuild started" in m or "rebuild finished" in m]
    assert ["started" in m for m in ordered] == [True, False, True, False]
    assert "requested by bob" in ordered[2] and "cy" in ordered[2]
    assert first.kinds == [ReplyKind.INFO] and first.replies[0].text.startswith("Rebuilt: tree v1 ")
    for inbox in (second, third):
        assert inbox.kinds == [ReplyKind.PROGRESS, ReplyKind.INFO]
        assert inbox.replies[0].text == REBUILD_QUEUED_BEHIND
        assert inbox.replies[1].text.startswith("Rebuilt: tree v2 ")
    assert first.received[-1][0] <= second.received[-1][0]
    assert engine.stats(channel).version == 2
    assert NOTE not in engine.notes(channel)


def test_requests_merged_from_one_place_see_the_result_posted_once(engine: Engine, channel: ChannelKey) -> None:
    """Requests from one channel (or thread) merged into one build: its result is posted
    there once, by the first request's send; the others are told privately."""
    engine.ingest_file(channel, SAMPLE)
    first, bob, cy, dee, threaded = Inbox(), Inbox(), Inbox(), Inbox(), Inbox()
    here, thread = ReplyAddress(channel), ReplyAddress(channel, "T.1")

    async def scenario() -> None:
        scheduler = RebuildScheduler(AsyncEngine(engine), QUIET)
        await scheduler.request(channel, "ann", first, here)
        for name, inbox, address in (("bob", bob, here), ("cy", cy, here), ("dee", dee, here),
                                     ("eve", threaded, thread)):
            assert await scheduler.request(channel, name, inbox, address) is RequestResult.QUEUED
        await scheduler.wait_idle()

    asyncio.run(scenario())
    assert [r.private for r in first.replies] == [False]  # the first build: one requester
    public = [r for inbox in (bob, cy, dee) for r in inbox.replies if r.kind is ReplyKind.INFO and not r.private]
    assert [r.text[:17] for r in public] == ["Rebuilt: tree v2 "]  # the merged build, posted once here
    assert [(r.kind, r.private) for r in bob.replies] == [(ReplyKind.PROGRESS, False), (ReplyKind.INFO, False)]
    for inbox in (cy, dee):  # merged: the queued notice and the result, each privately
        assert [(r.kind, r.private) for r in inbox.replies] == [(ReplyKind.PROGRESS, True), (ReplyKind.INFO, True)]
        assert inbox.replies[1].text == bob.replies[1].text
    assert [r.private for r in threaded.replies] == [True, False]  # another place: its own post of the result


def test_a_channel_without_sources_reports_an_error_and_clears_the_note(engine: Engine, channel: ChannelKey) -> None:
    inbox = Inbox()

    async def scenario() -> None:
        scheduler = RebuildScheduler(AsyncEngine(engine), QUIET)
        assert await scheduler.request(channel, "ann", inbox) is RequestResult.STARTED
        await scheduler.wait_idle()

    asyncio.run(scenario())
    assert inbox.kinds == [ReplyKind.ERROR]
    assert "no sources" in inbox.replies[0].text
    assert inbox.replies[0].reference == ""
    assert NOTE not in engine.notes(channel)


def test_a_failing_send_does_not_stop_the_rebuild(
    engine: Engine, channel: ChannelKey, caplog: pytest.LogCaptureFixture
) -> None:
    small_channel(engine, channel)
    broken = Inbox(fail=True)

    async def scenario() -> list[RequestResult]:
        scheduler = RebuildScheduler(AsyncEngine(engine), QUIET)
        results = [await scheduler.request(channel, "ann", broken), await scheduler.request(channel, "bob", broken)]
        await scheduler.wait_idle()
        return results

    assert asyncio.run(scenario()) == [RequestResult.STARTED, RequestResult.QUEUED]
    assert broken.kinds == [ReplyKind.PROGRESS, ReplyKind.INFO, ReplyKind.INFO]  # every send was tried
    assert engine.stats(channel).version == 2
    assert NOTE not in engine.notes(channel)
    assert len(scheduler_lines(caplog, "could not send")) == 3


class BuggySummarizer:
    """A summariser plug-in with a bug: it raises something outside the engine's error tree."""

    identity = "buggy"

    async def summarize(self, texts: Any) -> str:
        raise ValueError("a bug")


def test_an_unexpected_failure_is_logged_with_a_reference(
    store: ChromaStore, embedder: Any, channel: ChannelKey, caplog: pytest.LogCaptureFixture
) -> None:
    good = make_engine(store, embedder)
    engine = Engine(store, embedder, embedder.token_counter(), BuggySummarizer(), good._answerer)
    engine.ingest_file(channel, SAMPLE)
    inbox = Inbox()

    async def scenario() -> None:
        scheduler = RebuildScheduler(AsyncEngine(engine), QUIET)
        await scheduler.request(channel, "ann", inbox)
        await scheduler.wait_idle()

    asyncio.run(scenario())
    [reply] = inbox.replies
    assert reply.kind is ReplyKind.ERROR and re.fullmatch(r"[0-9a-f]{8}", reply.reference)
    assert "failed" in reply.text and reply.reference in reply.text and "a bug" not in reply.text
    [record] = [r for r in caplog.records if r.name.startswith("bot.rebuilds.") and r.exc_info]
    assert reply.reference in record.getMessage()
    assert NOTE not in engine.notes(channel)


class SlowSummarizer:
    """The offline summariser behind a language model's latency: every call takes ``delay_s``."""

    def __init__(self, inner: Any, delay_s: float) -> None:
        self._inner = inner
        self._delay_s = delay_s
        self.identity = f"{inner.identity}/slow"
        self.reads_leaves = inner.reads_leaves

    async def summarize(self, texts: Any) -> str:
        await asyncio.sleep(self._delay_s)
        return str(await self._inner.summarize(texts))

    async def summarize_whole(self, texts: Any) -> str:
        await asyncio.sleep(self._delay_s)
        return str(await self._inner.summarize_whole(texts))


def test_progress_replies_come_before_the_result_and_apart(store: ChromaStore, embedder: Any,
                                                           channel: ChannelKey) -> None:
    good = make_engine(store, embedder)
    # Summaries taking 0.3 s each, one at a time, make the build last seconds with an event every
    # 0.3 s, long enough for several updates however the clustering's time varies with the load.
    engine = Engine(store, embedder, embedder.token_counter(), SlowSummarizer(good._summarizer, 0.3), good._answerer,
                    EngineSettings(max_concurrency=1))
    engine.ingest_file(channel, SAMPLE)
    small_channel(engine, channel)
    inbox = Inbox()

    async def scenario() -> None:
        scheduler = RebuildScheduler(AsyncEngine(engine), BotConfig(progress_every_s=0.5))
        await scheduler.request(channel, "ann", inbox)
        await scheduler.wait_idle()

    asyncio.run(scenario())
    assert inbox.kinds[-1] is ReplyKind.INFO
    assert set(inbox.kinds[:-1]) <= {ReplyKind.PROGRESS}
    times = [at for at, reply in inbox.received if reply.kind is ReplyKind.PROGRESS]
    assert len(times) >= 2, inbox.kinds  # the spacing below means something only then
    assert all(later - earlier >= 0.45 for earlier, later in pairwise(times))


# -- restarts ---------------------------------------------------------------------------------


def test_a_rebuild_cut_by_a_restart_resumes_at_the_next_start(
    store: ChromaStore, embedder: Any, engine: Engine, channel: ChannelKey
) -> None:
    engine.ingest_file(channel, SAMPLE)
    inbox = Inbox()

    async def before_restart() -> None:
        scheduler = RebuildScheduler(AsyncEngine(engine), QUIET)
        await scheduler.start()
        assert await scheduler.request(channel, "ann", inbox) is RequestResult.STARTED
        await asyncio.sleep(0.05)  # well inside the build (hundreds of ms even when warm)
        await scheduler.stop()
        assert not (await scheduler.status(channel)).running

    asyncio.run(before_restart())
    assert inbox.replies == [Reply(ReplyKind.INFO, REBUILD_INTERRUPTED)]
    assert engine.notes(channel)[NOTE].startswith("ann at ")
    assert engine.stats(channel).version == 0  # the cancelled build never switched over

    restarted = make_engine(store, embedder)

    async def after_restart() -> None:
        scheduler = RebuildScheduler(AsyncEngine(restarted), QUIET)
        await scheduler.start()
        assert (await scheduler.status(channel)).running
        await scheduler.wait_idle()
        await scheduler.stop()

    asyncio.run(after_restart())
    stats = restarted.stats(channel)
    assert stats.version >= 1 and stats.pending_sources == 0
    assert NOTE not in restarted.notes(channel)


# -- the schedule --------------------------------------------------------------------------------


def test_the_scheduled_check_rebuilds_only_changed_channels(engine: Engine, channel: ChannelKey) -> None:
    built, empty = other_channel(channel.channel + "-built"), other_channel(channel.channel + "-empty")
    small_channel(engine, channel)
    small_channel(engine, built, "Owls hunt at night. They eat mice.")
    asyncio.run(engine.rebuild(built))
    engine.notes(empty)  # registers the channel without any source

    async def scenario() -> tuple[list[bool], list[bool]]:
        scheduler = RebuildScheduler(AsyncEngine(engine), QUIET)
        first = [await scheduler.check(key) for key in (channel, built, empty)]
        assert await scheduler.check(channel) is False  # running: skipped, not queued
        assert not (await scheduler.status(channel)).queued
        await scheduler.wait_idle()
        small_channel(engine, built, "Owls can turn their heads very far.")
        second = [await scheduler.check(key) for key in (channel, built, empty)]
        await scheduler.wait_idle()
        return first, second

    first, second = asyncio.run(scenario())
    assert first == [True, False, False]
    assert second == [False, True, False]
    assert engine.stats(channel).version == 1
    assert engine.stats(built).version == 2 and engine.stats(built).pending_sources == 0
    assert engine.stats(empty).version == 0
    assert all(NOTE not in engine.notes(key) for key in (channel, built, empty))  # scheduled builds leave no note


def test_a_scheduled_check_waits_for_a_running_request(engine: Engine, channel: ChannelKey) -> None:
    small_channel(engine, channel)

    async def scenario() -> bool:
        scheduler = RebuildScheduler(AsyncEngine(engine), QUIET)
        await scheduler.request(channel, "ann")
        skipped = await scheduler.check(channel)
        await scheduler.wait_idle()
        return skipped

    assert asyncio.run(scenario()) is False
    assert engine.stats(channel).version == 1


def test_jobs_follow_the_configured_schedules(engine: Engine, channel: ChannelKey) -> None:
    nightly, off, later = (other_channel(channel.channel + suffix) for suffix in ("-cron", "-off", "-new"))
    config = BotConfig(
        schedule=ScheduleConfig(every_minutes=30),
        channels={
            str(nightly): ChannelConfig(schedule=ScheduleConfig(cron="0 3 * * *")),
            str(off): ChannelConfig(schedule=ScheduleConfig(enabled=False)),
        },
    )
    for key in (channel, nightly, off):
        engine.notes(key)  # known to the store

    async def scenario() -> None:
        scheduler = RebuildScheduler(AsyncEngine(engine), config)
        assert (await scheduler.status(channel)).next_run is None  # not started
        await scheduler.start()
        started = datetime.now().astimezone()

        job = scheduler.job(channel)
        assert job is not None and isinstance(job.trigger, IntervalTrigger)
        assert job.trigger.interval == timedelta(minutes=30)
        assert (job.coalesce, job.max_instances, job.misfire_grace_time) == (True, 1, MISFIRE_GRACE_S)
        # Within the next half hour, at the channel's own offset into it (not all channels at once).
        assert started < job.next_run_time <= started + timedelta(minutes=30)
        offset = (job.next_run_time - EPOCH).total_seconds() % 1800
        assert abs(offset - offset_s(channel, 1800)) < 1, (offset, offset_s(channel, 1800))
        assert (await scheduler.status(channel)).next_run == job.next_run_time

        cron = scheduler.job(nightly)
        assert cron is not None and isinstance(cron.trigger, CronTrigger)
        assert (cron.next_run_time.hour, cron.next_run_time.minute) == (3, 0)

        assert scheduler.job(off) is None and (await scheduler.status(off)).next_run is None

        assert scheduler.job(later) is None
        scheduler.watch(later)
        assert scheduler.job(later) is not None

        await scheduler.stop()
        assert (await scheduler.status(channel)).next_run is None

    asyncio.run(scenario())


def test_the_scheduler_runs_the_check_on_its_interval(engine: Engine, channel: ChannelKey) -> None:
    small_channel(engine, channel)
    config = BotConfig(schedule=ScheduleConfig(every_minutes=0.01))  # every 0.6 s

    async def scenario() -> int:
        scheduler = RebuildScheduler(AsyncEngine(engine), config)
        await scheduler.start()
        deadline = time.monotonic() + 15
        while await asyncio.to_thread(lambda: engine.stats(channel).version) == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await scheduler.wait_idle()
        await scheduler.stop()
        return engine.stats(channel).version

    assert asyncio.run(scenario()) == 1


# -- spread, and only channels that hold sources --------------------------------------------------


def test_checks_are_spread_over_the_interval_and_agree_across_replicas(engine: Engine) -> None:
    """Sixty channels every 30 minutes: their checks fall all over the half hour instead of in
    one second, and two processes (replicas, or a restart) put each channel's at the same moment."""
    keys = [other_channel(f"spread-{number}") for number in range(60)]
    for key in keys:
        small_channel(engine, key)
    config = BotConfig(schedule=ScheduleConfig(every_minutes=30))

    async def next_runs() -> list[datetime]:
        scheduler = RebuildScheduler(AsyncEngine(engine), config)
        await scheduler.start()
        try:
            return [scheduler.job(key).next_run_time for key in keys]  # type: ignore[union-attr]
        finally:
            await scheduler.stop()

    first, second = asyncio.run(next_runs()), asyncio.run(next_runs())
    assert first == second
    minutes = sorted({int((run - EPOCH).total_seconds() % 1800 // 60) for run in first})
    assert len(minutes) >= 20, minutes  # spread over the half hour, not bunched


def test_a_question_in_a_fresh_channel_registers_nothing_and_schedules_nothing(
        engine: Engine, channel: ChannelKey, tmp_path: Path) -> None:
    import chromadb
    from chromadb.config import Settings

    from bot.config import Config
    from bot.handler import ChatHandler
    from bot.neutral import Person, Question
    from bot.replies import NO_MATERIAL
    from raptor_engine import channel_digest

    dm = other_channel("D-" + channel.channel)
    small_channel(engine, channel)
    known = engine.channels()
    chroma = chromadb.PersistentClient(path=str(tmp_path / "chroma"), settings=Settings(anonymized_telemetry=False))
    said: list[Reply] = []

    async def ask_then_restart() -> tuple[bool, bool]:
        scheduler = RebuildScheduler(AsyncEngine(engine), BotConfig())
        await scheduler.start()
        handler = ChatHandler(AsyncEngine(engine), Config(), scheduler)

        async def send(reply: Reply) -> None:
            said.append(reply)

        await handler.handle(Question(dm, Person("U-new"), "Where is the handbook?"), send)
        scheduled_now = scheduler.job(dm) is not None
        await scheduler.stop()
        restarted = RebuildScheduler(AsyncEngine(engine), BotConfig())
        await restarted.start()  # schedules what the store lists
        scheduled_after = restarted.job(dm) is not None
        await restarted.stop()
        return scheduled_now, scheduled_after

    assert asyncio.run(ask_then_restart()) == (False, False)
    assert [r.text for r in said] == [NO_MATERIAL]
    assert engine.channels() == known  # no registry entry
    assert not [c.name for c in chroma.list_collections() if channel_digest(dm) in c.name]  # nor collection


def test_a_channel_that_holds_no_source_any_more_stops_being_checked(engine: Engine, channel: ChannelKey) -> None:
    small_channel(engine, channel)
    emptied = other_channel(channel.channel + "-emptied")
    small_channel(engine, emptied, "Owls hunt at night.")
    config = BotConfig(schedule=ScheduleConfig(every_minutes=30))

    async def scenario() -> tuple[bool, bool, bool, bool]:
        scheduler = RebuildScheduler(AsyncEngine(engine), config)
        await scheduler.start()
        had_job = scheduler.job(emptied) is not None
        for source in engine.sources(emptied):
            engine.forget(emptied, source.id)
        checked = [await scheduler.check(key) for key in (emptied, channel)]
        await scheduler.wait_idle()
        dropped = scheduler.job(emptied) is None and scheduler.job(channel) is not None
        small_channel(engine, emptied, "Owls can turn their heads very far.")
        scheduler.watch(emptied)  # what adding a source does
        back = scheduler.job(emptied) is not None
        await scheduler.stop()
        return had_job, checked == [False, True], dropped, back

    assert asyncio.run(scenario()) == (True, True, True, True)
